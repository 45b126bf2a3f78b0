"""Recording runs that are not driven by the agent, and extra settings in a run's config.

- `execute_recorded`: run a given plan with an `Executor` as one recorded run —
  ``RunStarted`` (with the config), ``PlanCreated`` (version 1, with the plan text), the
  executor's events, then ``RunFinished`` — so the store shows the plan and ``planexec
  runs resume`` can continue it. ``planexec run`` and the MCP ``execute_plan`` tool use it.
- `tool_source`: where a run's tools came from (``--tools`` spec, ``--mcp-config``
  path), recorded in the run's config under `TOOL_SOURCE_KEY` so that resume can load
  the same tools when it is not told otherwise.
- `StampedStore`: a store wrapper that adds settings (the tool source) to the config of
  every ``RunStarted`` it records, for runs whose ``RunStarted`` the agent emits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planexec.events import Event, EventBus, PlanCreated, RunFinished, RunStarted
from planexec.results import RunStatus, StepResult, StepStatus

if TYPE_CHECKING:
    from planexec.executor import Executor
    from planexec.plan import Plan
    from planexec.store.base import RunStore

__all__ = [
    "TOOL_SOURCE_KEY",
    "StampedStore",
    "execute_recorded",
    "first_failure",
    "recorded_tool_source",
    "tool_source",
]

TOOL_SOURCE_KEY = "tool_source"
"""The key of a run's recorded config that says where its tools came from."""


def tool_source(
    tools: str | None = None, mcp_config: str | os.PathLike[str] | None = None
) -> dict[str, str]:
    """Where a run's tools come from, as recorded (`TOOL_SOURCE_KEY`).

    Args:
        tools: The ``--tools MODULE:ATTR`` spec.
        mcp_config: The ``--mcp-config`` file (recorded as an absolute path).

    Returns:
        ``{"tools": ..., "mcp_config": ...}`` with the keys that were given.
    """
    out: dict[str, str] = {}
    if tools:
        out["tools"] = str(tools)
    if mcp_config:
        out["mcp_config"] = str(Path(mcp_config).expanduser().resolve())
    return out


def recorded_tool_source(config: Mapping[str, Any]) -> dict[str, str]:
    """The tool source recorded in a run's config (empty when none was)."""
    raw = config.get(TOOL_SOURCE_KEY)
    if not isinstance(raw, Mapping):
        return {}
    return {k: str(v) for k, v in raw.items() if k in ("tools", "mcp_config") and v}


class StampedStore:
    """A run store that adds ``extra`` to the config of each ``RunStarted`` it records.

    Everything else is passed to the wrapped store unchanged (attribute access included),
    so it can be given wherever a store is expected. Keys already in the event's config
    are kept.

    Args:
        store: The store to record in.
        extra: Settings to add (e.g. ``{TOOL_SOURCE_KEY: tool_source(...)}``).
    """

    def __init__(self, store: RunStore, extra: Mapping[str, Any]) -> None:
        self.store = store
        """The wrapped store."""
        self.extra = dict(extra)
        """What is added to each recorded run's config."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def attach(self, bus: EventBus) -> None:
        """Subscribe `handle` to ``bus``."""
        bus.subscribe(self.handle)

    async def handle(self, event: Event) -> None:
        """Record ``event`` in the wrapped store, adding ``extra`` to a ``RunStarted``."""
        if isinstance(event, RunStarted) and self.extra:
            config = {**self.extra, **dict(event.config)}
            event = dataclasses.replace(event, config=config)
        await self.store.handle(event)


def first_failure(results: list[StepResult]) -> StepResult | None:
    """The first result that FAILED, was BLOCKED or was CANCELLED."""
    bad = (StepStatus.FAILED, StepStatus.BLOCKED, StepStatus.CANCELLED)
    return next((r for r in results if r.status in bad), None)


async def execute_recorded(
    executor: Executor,
    plan: Plan,
    text: str,
    *,
    bus: EventBus,
    store: Any = None,
    question: str = "",
    config: Mapping[str, Any] | None = None,
) -> list[StepResult]:
    """Run ``plan`` with ``executor`` as one run announced on ``bus``.

    Emits ``RunStarted`` (``question``, ``config``), ``PlanCreated`` (version 1, the plan
    and its ``text``), then the executor's events, then ``RunFinished`` (SUCCEEDED, or
    FAILED naming the first failure, or CANCELLED), and flushes ``store`` (if given;
    it must already be subscribed to ``bus``).

    Raises:
        asyncio.CancelledError: the run was cancelled (recorded as CANCELLED first).
    """
    run_id = executor.run_id
    await bus.emit(RunStarted(run_id=run_id, question=question, config=dict(config or {})))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=plan, text=text))
    try:
        try:
            results = await executor.run(plan, plan_version=1)
        except asyncio.CancelledError:
            await bus.emit(
                RunFinished(
                    run_id=run_id,
                    status=str(RunStatus.CANCELLED),
                    error="the run was cancelled by the caller",
                )
            )
            raise
        failed = first_failure(results)
        if executor.cancelled:
            status, error = RunStatus.CANCELLED, "the run was cancelled by the caller"
        elif failed is not None:
            status = RunStatus.FAILED
            error = failed.error or f"step {failed.step_id} {failed.status.value}"
        else:
            status, error = RunStatus.SUCCEEDED, None
        await bus.emit(RunFinished(run_id=run_id, status=str(status), error=error))
        return results
    finally:
        flush = getattr(store, "flush", None)
        if callable(flush):
            out = flush()
            if asyncio.iscoroutine(out):
                await out
