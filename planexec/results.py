"""What running a plan produces: `StepResult`, `Usage`, `PlanAttempt` and `Run`."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum, StrEnum
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel

from planexec._frozen import build
from planexec.errors import ErrorKind
from planexec.grounding import Grounding
from planexec.plan import Plan

__all__ = [
    "MAX_JSON_DEPTH",
    "JsonEncoding",
    "PlanAttempt",
    "ResolutionMethod",
    "Run",
    "RunStatus",
    "StepError",
    "StepResult",
    "StepStatus",
    "Usage",
    "encode_json",
    "jsonable",
    "new_run_id",
    "plain_json_size",
]


class StepStatus(StrEnum):
    """How a step ended."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    BLOCKED = "BLOCKED"
    """Not run because a step it depends on did not succeed."""
    SKIPPED = "SKIPPED"
    """Not run on purpose (e.g. a reasoning step without a model); the note says why."""
    CANCELLED = "CANCELLED"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    """Not run yet: its call needs a person's decision (`planexec.approval`); its resolved
    arguments are in ``args``. Neither a success nor a failure."""


class ResolutionMethod(StrEnum):
    """How one argument got its final value."""

    LITERAL = "literal"
    REFERENCE = "reference"
    PATH = "path"
    FILTERED = "filtered"
    """A hinted reference read by the filter grammar (`planexec.filters`)."""
    INTERPOLATED = "interpolated"
    COERCED = "coerced"
    LLM = "llm"
    SELECTED = "selected"
    """Filled by tool selection (a step naming an agent or server but no tool)."""
    EDITED = "edited"
    """Replaced by a person's approval decision (`planexec.approval`)."""


MAX_JSON_DEPTH = 100
"""The deepest nesting of containers a value may have to be encoded (and kept as a
tool's output): deeper values are refused instead of crashing with ``RecursionError``."""


@dataclass
class JsonEncoding:
    """A value encoded as JSON data by `encode_json`, with what the encoding could not keep.

    ``data`` never holds a cycle, NaN or infinity, so ``json.dumps(data, allow_nan=False)``
    always works.
    """

    data: Any
    """The JSON data: dicts with string keys, lists, strings, finite numbers, bools, None."""
    warnings: list[str] = field(default_factory=list)
    """Where the data differs from the value: colliding keys, values that are not JSON
    data (kept as their ``repr``)."""
    error: str | None = None
    """Why the value cannot be encoded at all (a cycle, nesting deeper than
    `MAX_JSON_DEPTH`, a model that cannot be dumped); ``data`` then holds a marker string
    at that place."""


def _path_text(path: list[Any]) -> str:
    """A JSON path such as ``$["items"][0]`` (the first levels of a very deep one)."""
    out = "$"
    for part in path[:8]:
        out += f"[{part}]" if isinstance(part, int) else f"[{json.dumps(part)}]"
    if len(path) > 8:
        out += f"… ({len(path)} levels)"
    return out


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _scalar(value: Any) -> tuple[bool, Any]:
    """``(True, encoded)`` for a value with a faithful scalar encoding, else ``(False, None)``."""
    if value is None or isinstance(value, str | bool | int) and not isinstance(value, Enum):
        return True, value
    if isinstance(value, float) and not isinstance(value, Enum):
        return True, _float(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return True, value.isoformat()
    if isinstance(value, Decimal):
        return True, str(value)
    if isinstance(value, uuid.UUID | PurePath):
        return True, str(value)
    if isinstance(value, Enum):
        return _scalar(value.value)
    return False, None


class _Encoder:
    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.warnings: list[str] = []
        self.error: str | None = None
        self.active: set[int] = set()
        self.path: list[Any] = []

    def fail(self, message: str, marker: str) -> str:
        if self.error is None:
            self.error = message
        return marker

    def key(self, key: Any) -> str:
        if isinstance(key, str):
            return key
        ok, encoded = _scalar(key)
        if ok and encoded is not None and not isinstance(encoded, bool):
            return str(encoded)
        return str(key)

    def encode(self, value: Any, depth: int) -> Any:
        ok, encoded = _scalar(value)
        if ok:
            return encoded
        if depth >= self.max_depth:
            return self.fail(
                f"the value is nested deeper than {self.max_depth} levels "
                f"(at {_path_text(self.path)})",
                "[too deep]",
            )
        if isinstance(value, BaseModel | Mapping | list | tuple | set | frozenset) or (
            dataclasses.is_dataclass(value) and not isinstance(value, type)
        ):
            if id(value) in self.active:
                return self.fail(
                    f"the value contains itself: a cycle at {_path_text(self.path)}", "[cycle]"
                )
            self.active.add(id(value))
            try:
                return self.container(value, depth)
            finally:
                self.active.discard(id(value))
        if hasattr(value, "to_dict") and callable(value.to_dict):
            try:
                data = value.to_dict()
            except Exception as exc:  # noqa: BLE001 - any failure of foreign code
                return self.fail(f"{type(value).__name__}.to_dict() failed: {exc}", "[error]")
            return self.encode(data, depth + 1)
        text = repr(value)
        self.warnings.append(
            f"the value at {_path_text(self.path)} is a {type(value).__name__}, which is not "
            f"JSON data: recorded as its repr ({text[:80]})"
        )
        return text

    def container(self, value: Any, depth: int) -> Any:
        if isinstance(value, BaseModel):
            try:
                value = value.model_dump(mode="python")
            except (ValueError, TypeError, RecursionError) as exc:
                where = _path_text(self.path)
                return self.fail(f"cannot dump the model at {where}: {exc}", "[error]")
        elif not isinstance(value, Mapping | list | tuple | set | frozenset):  # a dataclass
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            origin: dict[str, Any] = {}
            for k, v in value.items():
                name = self.key(k)
                if name in origin:
                    self.warnings.append(
                        f"the keys {origin[name]!r} and {k!r} at {_path_text(self.path)} are "
                        f"both written {json.dumps(name)}: only the value of {k!r} is kept"
                    )
                origin[name] = k
                self.path.append(name)
                out[name] = self.encode(v, depth + 1)
                self.path.pop()
            return out
        items = []
        for i, v in enumerate(value):
            self.path.append(i)
            items.append(self.encode(v, depth + 1))
            self.path.pop()
        return items


def encode_json(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> JsonEncoding:
    """Encode a value as JSON data, saying what could not be kept as it was.

    Faithful encodings: mappings (keys as strings: ``1`` becomes ``"1"``), lists,
    tuples, sets (as lists), pydantic models and dataclasses (their fields), objects
    with ``to_dict()``; datetimes, dates and times as ISO 8601 strings; `Decimal`, `UUID`
    and paths as strings; enums as their values; NaN and infinities as the strings
    ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (JSON has no such numbers).

    Warnings: two keys written the same (``1`` and ``"1"``: the later one is kept), and
    any other object (a generator, a socket...) recorded as its ``repr``.

    Errors: a value that contains itself (a cycle) or is nested deeper than
    ``max_depth`` (a marker string takes its place in ``data``).
    """
    encoder = _Encoder(max_depth)
    data = encoder.encode(value, 0)
    return JsonEncoding(data, encoder.warnings, encoder.error)


PLAIN_NODES = 10_000
"""`plain_json_size` looks at no more nodes than this (larger values: None)."""

_BIG_INT = 10**18


def plain_json_size(value: Any, *, max_nodes: int = PLAIN_NODES) -> int | None:
    """An upper bound on the compact JSON text length of *plain* JSON data, else None.

    Plain: dicts (exactly ``dict``) with ``str`` keys, lists, ``str``, ``int`` (below
    10¹⁸), finite ``float``, ``bool`` and None, exact types (no subclass, no enum),
    nested less than `MAX_JSON_DEPTH` deep, at most ``max_nodes`` nodes. Such a value
    is its own `encode_json` data, without warnings: callers skip the encoding (and
    the exact size when the bound is under their limit). None means "not known
    cheaply": take the general path.
    """
    size = 0
    nodes = 0
    pending: list[tuple[Iterable[Any], int]] = [((value,), 0)]  # (children, their depth)
    while pending:
        children, depth = pending.pop()
        for item in children:
            nodes += 1
            kind = type(item)
            if kind is str:
                size += 6 * len(item) + 3  # every character escaped at worst, quotes, comma
            elif kind is int or kind is bool or item is None:
                if kind is int and not -_BIG_INT < item < _BIG_INT:
                    return None
                size += 21
            elif kind is float:
                if not math.isfinite(item):
                    return None
                size += 26
            elif kind is dict or kind is list:
                if depth + 1 >= MAX_JSON_DEPTH or nodes + len(item) > max_nodes:
                    return None  # too deep, or surely more nodes than looked at
                size += 3
                if kind is dict:
                    for key in item:
                        if type(key) is not str:
                            return None
                        size += 6 * len(key) + 3
                    pending.append((item.values(), depth + 1))
                else:
                    pending.append((item, depth + 1))
            else:
                return None
    if nodes > max_nodes:
        return None
    return size


def jsonable(value: Any) -> Any:
    """A value as JSON data, never failing: `encode_json`'s ``data``.

    What cannot be encoded faithfully becomes a string: an object's ``repr``, and the
    markers ``"[cycle]"`` and ``"[too deep]"`` (the executor refuses tool outputs that
    need them, so they only appear for values that never went through it).
    """
    return encode_json(value).data


@dataclass(frozen=True)
class StepError:
    """Why a step did not succeed, as data: every decision reads these fields.

    Recovery, early re-plans, output blame and re-resolution read ``kind``, ``args``,
    ``literal_args``, ``upstream`` and ``retryable``; ``message`` and ``cause`` are for
    people and are never searched for names or kinds.
    """

    kind: ErrorKind
    """What kind of failure it is."""
    message: str
    """For people: names the step, the argument and the cause."""
    args: tuple[str, ...] = ()
    """The arguments concerned (plan or schema names), in the order they were found;
    empty when the failure is not about particular arguments (a tool that raised)."""
    literal_args: tuple[str, ...] = ()
    """Those of ``args`` written in the plan as literal values: re-resolution never
    changes them (a literal is never sent to the LLM), only a new plan can."""
    cause: str | None = None
    """For people: the underlying error in its own words (an exception, a validation
    error, the upstream step's message), when there is one."""
    upstream: int | None = None
    """For ``UPSTREAM_FAILED`` (and references to steps that did not succeed): the
    step whose failure this one follows."""
    retryable: bool | None = None
    """Whether making the same call again may succeed, as the executor judged a tool
    call's failure at the call boundary (by its class and the tool's ``retry_on``:
    `planexec.resilience.classify_tool_failure`; an error payload by
    ``executor.retry_error_payloads``). False: a retry cannot fix it, so recovery never
    re-runs the step as it was; True: it may; None: not judged (a failure before or
    around the call, or a record stored before this field): recovery decides as it
    always did."""

    def __str__(self) -> str:
        return self.message

    @property
    def resolvable_args(self) -> tuple[str, ...]:
        """The arguments concerned that re-resolution may change (not plan literals)."""
        return tuple(a for a in self.args if a not in self.literal_args)

    def to_dict(self) -> dict[str, Any]:
        """Return the error as JSON-ready data."""
        return {
            "kind": str(self.kind),
            "message": self.message,
            "args": list(self.args),
            "literal_args": list(self.literal_args),
            "cause": self.cause,
            "upstream": self.upstream,
            "retryable": self.retryable,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepError:
        """Decode `to_dict`'s data."""
        upstream = data.get("upstream")
        retryable = data.get("retryable")  # absent in records stored before the field
        return cls(
            kind=ErrorKind(data["kind"]),
            message=str(data.get("message") or ""),
            args=tuple(str(a) for a in data.get("args") or ()),
            literal_args=tuple(str(a) for a in data.get("literal_args") or ()),
            cause=data.get("cause"),
            upstream=int(upstream) if upstream is not None else None,
            retryable=bool(retryable) if retryable is not None else None,
        )


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step. Every problem is in ``failure`` (a `StepError`).

    ``error`` and ``error_kind`` are the failure's message and kind, kept as fields for
    reading and for building results (``StepResult(..., error=m, error_kind=k)`` gets
    ``failure=StepError(k, m)``). Given both, they must agree with ``failure``.
    """

    step_id: int
    """The step's number."""
    tool: str | None
    """The tool called (None for a reasoning step)."""
    status: StepStatus
    """How the step ended."""
    args: dict[str, Any] | None = None
    """The resolved arguments the tool was called with (None if it was not called)."""
    output: Any = None
    """The structured output (dict, list, model, scalar) references resolve against."""
    raw_output: Any = None
    """The output as the tool returned it (e.g. the JSON text before parsing)."""
    error: str | None = None
    """A message naming the step, the argument and the cause; None on success."""
    error_kind: ErrorKind | None = None
    """The kind of failure; None on success."""
    resolution: dict[str, ResolutionMethod] = field(default_factory=dict)
    """How each argument was resolved."""
    llm_calls: int = 0
    """Model calls made for this step (resolution fallback and reasoning)."""
    attempts: int = 0
    """Tool call attempts (retries included)."""
    started_at: float | None = None
    """Wall-clock start (seconds since the epoch)."""
    duration: float | None = None
    """Seconds from start to finish."""
    server: str | None = None
    """The server or agent the step named, if any."""
    note: str | None = None
    """A remark that is not an error (why a step was skipped, a warning kept)."""
    reused: bool = False
    """Taken from an earlier result (a resume or a re-plan) instead of running again."""
    streamed: bool = False
    """Started before the planner's reply was complete (`planexec.streaming`)."""
    failure: StepError | None = None
    """Why the step did not succeed, as data; None on success (and for a skipped step)."""
    grounding: dict[str, Grounding] = field(default_factory=dict)
    """Where each argument the LLM fallback or the filter tier filled comes from
    (`planexec.grounding`); `ungrounded` lists those whose value was found nowhere."""

    @classmethod
    def of(cls, **fields: Any) -> StepResult:
        """``StepResult(**fields)``, built faster (the executor makes one per step).

        A frozen dataclass's ``__init__`` sets each of the 20 fields through
        ``object.__setattr__``; this fills the instance's ``__dict__`` at once, with the
        same defaults and the same checks (`__post_init__`). A test holds the two equal.

        Raises:
            TypeError: a field that does not exist, or a required one missing.
            ValueError: ``error``/``error_kind`` disagree with ``failure``.
        """
        return build(cls, fields)

    def __post_init__(self) -> None:
        failure = self.failure
        if failure is None:
            if self.error_kind is not None:
                object.__setattr__(
                    self, "failure", StepError(self.error_kind, self.error or "")
                )
            return
        if self.error is not None and self.error != failure.message:
            raise ValueError(
                f"step {self.step_id}: error {self.error!r} disagrees with the failure's "
                f"message {failure.message!r}"
            )
        if self.error_kind is not None and self.error_kind is not failure.kind:
            raise ValueError(
                f"step {self.step_id}: error_kind {self.error_kind} disagrees with the "
                f"failure's kind {failure.kind}"
            )
        object.__setattr__(self, "error", failure.message)
        object.__setattr__(self, "error_kind", failure.kind)

    @property
    def ok(self) -> bool:
        """Whether the step succeeded."""
        return self.status is StepStatus.SUCCEEDED

    @property
    def ungrounded(self) -> tuple[str, ...]:
        """The arguments whose filled-in value was found nowhere in the referenced outputs."""
        return tuple(n for n, g in self.grounding.items() if not g.grounded)

    def to_dict(self) -> dict[str, Any]:
        """Return the result as JSON-ready data."""
        return {
            "step_id": self.step_id,
            "tool": self.tool,
            "server": self.server,
            "status": str(self.status),
            "args": jsonable(self.args),
            "output": jsonable(self.output),
            "raw_output": jsonable(self.raw_output),
            "error": self.error,
            "error_kind": str(self.error_kind) if self.error_kind else None,
            "resolution": {k: str(v) for k, v in self.resolution.items()},
            "llm_calls": self.llm_calls,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "duration": self.duration,
            "note": self.note,
            "reused": self.reused,
            "streamed": self.streamed,
            "failure": self.failure.to_dict() if self.failure else None,
            "grounding": {k: g.to_dict() for k, g in self.grounding.items()},
        }


@dataclass
class Usage:
    """What a run spent. Mutable: it is filled in as the run goes."""

    llm_calls: dict[str, int] = field(default_factory=dict)
    """Model calls by purpose: ``plan``, ``resolve``, ``reason``, ``select``, ``evaluate``,
    ``answer``."""
    tokens: dict[str, int] = field(default_factory=dict)
    """Tokens by kind (``input``, ``output``, ``total``) where the model reports them."""
    tokens_by_purpose: dict[str, dict[str, int]] = field(default_factory=dict)
    """Tokens by purpose, then by kind (``{"plan": {"input": 20, ...}}``); their sums
    are ``tokens``. Only purposes whose calls reported tokens appear."""
    tool_calls: int = 0
    """Tool call attempts, retries included."""
    wall_time: float = 0.0
    """Seconds from the start of the run to its end."""

    def add_llm_call(self, purpose: str, tokens: Mapping[str, int] | None = None) -> None:
        """Count one model call for ``purpose`` and its tokens (totals and by purpose)."""
        self.llm_calls[purpose] = self.llm_calls.get(purpose, 0) + 1
        for k, v in (tokens or {}).items():
            self.tokens[k] = self.tokens.get(k, 0) + int(v)
            by_kind = self.tokens_by_purpose.setdefault(purpose, {})
            by_kind[k] = by_kind.get(k, 0) + int(v)

    @property
    def total_llm_calls(self) -> int:
        """All model calls, whatever their purpose."""
        return sum(self.llm_calls.values())

    def to_dict(self) -> dict[str, Any]:
        """Return the usage as JSON-ready data."""
        return {
            "llm_calls": dict(self.llm_calls),
            "tokens": dict(self.tokens),
            "tokens_by_purpose": {p: dict(t) for p, t in self.tokens_by_purpose.items()},
            "tool_calls": self.tool_calls,
            "wall_time": self.wall_time,
        }


class RunStatus(StrEnum):
    """How a run ended (or that it has not)."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"
    """Recorded as running, but its process is gone: it can be resumed."""
    INCOMPLETE = "INCOMPLETE"
    """The plan was cut off (the planner's reply ends inside a step): what was complete
    ran, the rest of the plan is missing. Never a success."""
    WAITING_APPROVAL = "WAITING_APPROVAL"
    """Paused: steps wait for a person's decision (`planexec.approval`); everything that
    could run without one ran. ``planexec runs approve|reject`` then ``runs resume``
    continue it. Neither a success nor a failure."""


@dataclass
class PlanAttempt:
    """One plan of a run (the first, or a re-plan) and what running it gave."""

    version: int
    """1 for the first plan, 2 for the first re-plan, ..."""
    plan: Plan | None
    """The parsed plan, or None when the planner's reply held none."""
    text: str = ""
    """The planner's reply."""
    results: list[StepResult] = field(default_factory=list)
    """The step results, in completion order."""
    reason: str | None = None
    """Why this plan was made (None for the first; the failure or lesson otherwise)."""
    error: str | None = None
    """Why there is no plan, or the problems it still had after the planner's re-prompts."""
    drafts: list[dict[str, Any]] = field(default_factory=list)
    """The planner's rejected replies in this attempt, in order, each
    ``{"text": reply, "problems": [message, ...]}`` (empty when the first reply was used)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the attempt as JSON-ready data."""
        return {
            "version": self.version,
            "plan": self.plan.to_dict() if self.plan else None,
            "text": self.text,
            "results": [r.to_dict() for r in self.results],
            "reason": self.reason,
            "error": self.error,
            "drafts": [dict(d) for d in self.drafts],
        }


def new_run_id() -> str:
    """A new run id: 12 hexadecimal digits (e.g. ``05346fccf98f``).

    The one format of every entry point (`planexec.PlanExecuteAgent`, ``planexec run``,
    ``ask``, ``demo``, the MCP server, the Ray drivers), so ids look alike in the store.
    """
    return uuid.uuid4().hex[:12]


@dataclass
class Run:
    """A whole agent run: the question, every plan attempt, the answer and the usage."""

    run_id: str
    """A unique id (also the key in the run store)."""
    question: str
    """The question asked."""
    attempts: list[PlanAttempt] = field(default_factory=list)
    """Every plan tried, in order."""
    status: RunStatus = RunStatus.RUNNING
    """How the run ended."""
    answer: str | None = None
    """The prose answer (with a model), or None."""
    output: Any = None
    """The typed output (an instance of ``output_type``), when one was asked for."""
    error: str | None = None
    """Why the run failed, if it did."""
    error_kind: ErrorKind | None = None
    """The kind of the failure that ended the run, if any."""
    usage: Usage = field(default_factory=Usage)
    """What the run spent."""
    lessons: list[str] = field(default_factory=list)
    """Lessons from the evaluator and from failures, given to re-plans."""

    @property
    def results(self) -> list[StepResult]:
        """The latest result of every step id, across attempts, in plan order.

        Plan order is the order of the steps in the last plan, then the steps of
        earlier plans that it does not have (in their plans' order), then any other
        step ids in ascending order — never the order in which steps finished.
        """
        latest: dict[int, StepResult] = {}
        for attempt in self.attempts:
            for r in attempt.results:
                latest[r.step_id] = r
        order: dict[int, int] = {}
        for attempt in reversed(self.attempts):
            if attempt.plan is not None:
                for sid in attempt.plan.ids:
                    order.setdefault(sid, len(order))
        return sorted(latest.values(), key=lambda r: (order.get(r.step_id, len(order)), r.step_id))

    def step(self, step_id: int) -> StepResult:
        """The latest result of step ``step_id``, across attempts (as in `results`).

        Raises:
            KeyError: the run has no result for that step (the message lists those it has).
        """
        for attempt in reversed(self.attempts):
            for r in reversed(attempt.results):
                if r.step_id == step_id:
                    return r
        have = sorted({r.step_id for a in self.attempts for r in a.results})
        raise KeyError(f"run {self.run_id} has no result for step {step_id}; it has {have}")

    @property
    def plan(self) -> Plan | None:
        """The last plan tried."""
        for attempt in reversed(self.attempts):
            if attempt.plan is not None:
                return attempt.plan
        return None

    def to_dict(self) -> dict[str, Any]:
        """Return the run as JSON-ready data."""
        return {
            "run_id": self.run_id,
            "question": self.question,
            "status": str(self.status),
            "answer": self.answer,
            "output": jsonable(self.output),
            "error": self.error,
            "error_kind": str(self.error_kind) if self.error_kind else None,
            "attempts": [a.to_dict() for a in self.attempts],
            "usage": self.usage.to_dict(),
            "lessons": list(self.lessons),
        }
