"""The rows a SQL run store writes for an event, made once when the event is queued.

Shared by `planexec.store.SQLiteRunStore` and `planexec.store.postgres.PostgresRunStore`:
an event becomes its ``events`` row (its JSON text made once, straight from the event
when it is a plain hot one: `planexec.store.codec.event_text`) and what it changes in
other tables (a `StepRow` for a result, an `Effect` for the other `EFFECTS` types).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from planexec.events import ArgResolved, Event, StepFinished, StepStarted, ToolCallStarted
from planexec.store.codec import dumps, dumps_with, event_text, event_to_json

__all__ = [
    "EFFECTS",
    "MAX_BUFFERED",
    "MAY_BE_SAFE",
    "Effect",
    "Queued",
    "Row",
    "StepRow",
    "encode",
    "from_data",
]

MAX_BUFFERED = 256
"""Events a store holds in memory at most before it commits them."""

EFFECTS = frozenset({"RunStarted", "PlanCreated", "StepFinished", "StepDiscarded",
                      "RecoveryDecided", "RunFinished"})
"""Event types that change more than the ``events`` table (a store applies them)."""

MAY_BE_SAFE = frozenset({"ToolCallStarted", "StepFinished"})
"""Event types whose ``safe`` field decides whether they are checkpoints."""

Row = tuple[str, float, str, "int | None", "int | None", str]
"""An ``events`` row but its ``seq``: run_id, ts, type, step_id, plan_version, data."""

StepRow = tuple[int, int, str, "str | None", "str | None", Any, Any, str]
"""What a ``StepFinished`` writes to ``step_results``: plan_version, step_id, status, tool,
error_kind, started_at, duration, the result's text."""


@dataclass(frozen=True)
class Effect:
    """What an event but a ``StepFinished`` changes in other tables (`EFFECTS`)."""

    data: dict[str, Any]
    """The event, encoded (`event_to_json`)."""
    plan_text: str | None = None
    """A ``PlanCreated``'s plan, as the text in its event (the ``plans`` row keeps it too)."""


Queued = tuple[Row, "StepRow | Effect | None"]
"""A queued event: its row, and what it changes in other tables — nothing, a `StepRow`
(a ``StepFinished``), or an `Effect` (the other `EFFECTS` types)."""


def from_data(data: dict[str, Any]) -> Queued:
    """Make the queue's item of an event encoded by `event_to_json` (any type, any field)."""
    kind = data["type"]
    ts = float(data["ts"])
    plan_version = data.get("plan_version", data.get("version"))
    if kind == "StepFinished" and data.get("result") is not None:
        result = data["result"]
        text, result_text = dumps_with(data, "result")
        assert result_text is not None
        step = (int(data.get("plan_version", 1)), int(result["step_id"]), result["status"],
                result.get("tool"), result.get("error_kind"), result.get("started_at"),
                result.get("duration"), result_text)
        return (data["run_id"], ts, kind, data.get("step_id", result.get("step_id")),
                plan_version, text), step
    if kind == "PlanCreated":
        text, plan_text = dumps_with(data, "plan")
        return (data["run_id"], ts, kind, data.get("step_id"), plan_version, text), Effect(
            data, plan_text
        )
    row = (data["run_id"], ts, kind, data.get("step_id"), plan_version, dumps(data))
    return row, (Effect(data) if kind in EFFECTS else None)


def encode(event: Event) -> Queued:
    """Encode an event for the queue.

    Its text comes straight from the event when it is a plain hot one
    (`planexec.store.codec.event_text`), through `event_to_json` otherwise.
    """
    texts = event_text(event)
    if texts is None:
        return from_data(event_to_json(event))
    text, result_text = texts  # the fields read below were checked plain
    if result_text is None:
        t = type(event)
        if t is ArgResolved:  # no plan version
            a = cast(ArgResolved, event)
            return (a.run_id, a.ts, "ArgResolved", a.step_id, None, text), None
        e = cast("StepStarted | ToolCallStarted", event)  # a StepStarted or a ToolCallStarted
        return (e.run_id, e.ts, t.__name__, e.step_id, e.plan_version, text), None
    f = cast(StepFinished, event)
    r = f.result
    kind = r.error_kind
    return (f.run_id, f.ts, "StepFinished", r.step_id, f.plan_version, text), (
        f.plan_version, r.step_id, str(r.status), r.tool, str(kind) if kind else None,
        r.started_at, r.duration, result_text,
    )
