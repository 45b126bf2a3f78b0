"""A run's state (`RunState`), a step's (`StepContext`), and how a step's end is carried.

`RunState` holds what belongs to one run of one plan: its results, the steps it
reused or discarded, its cancel request, its per-tool settings and call slots, the plan
version and dialect. The collaborators (catalog, resolver, runner, bus, ...) are the
executor's, referenced by the run for its whole length. The step pipeline
(`planexec.executor._step`) and the call (`planexec.executor._call`) take the run as
their first argument; the scheduler (`planexec.executor._run.ExecutorRun`) is the run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import planexec._fastpaths as _fastpaths
from planexec._log import step_log
from planexec._text import as_text, cut
from planexec.events import FallbackUsed
from planexec.resolver import ArgResolver
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, Usage
from planexec.tools import callbacks_around

if TYPE_CHECKING:
    from pydantic import BaseModel

    from planexec._retry import BreakerRegistry, CircuitBreaker, RetryPolicy
    from planexec.config import ExecutorSettings
    from planexec.errors import ErrorKind
    from planexec.events import EventBus
    from planexec.executor._protocols import Approvals, Guard, Reasoner, ToolRunner, ToolSelector
    from planexec.plan import Step
    from planexec.tools import ToolCatalog
    from planexec.tracing import RunTrace

REUSED_NOTE = "reused: succeeded earlier"
"""The note on a result taken from ``prior`` instead of running the step again."""


class Owner(Protocol):
    """What a run takes from its executor (`planexec.executor.Executor`)."""

    catalog: ToolCatalog
    resolver: ArgResolver
    config: ExecutorSettings
    bus: EventBus
    run_id: str
    usage: Usage
    breakers: BreakerRegistry
    guard: Guard | None
    runner: ToolRunner
    trace: RunTrace | None
    reasoner: Reasoner | None
    selector: ToolSelector | None
    approvals: Approvals | None
    _detached: set[asyncio.Future[Any]]


class AttemptFailed(Exception):
    """One tool call attempt failed in a way that may be retried."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        output: Any = None,
        raw: Any = None,
        *,
        retry: bool = True,
        cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.output = output
        self.raw = raw
        self.retry = retry
        self.cause = cause


class StepFailed(Exception):
    """A step ended without success; carries its result fields."""

    def __init__(self, status: StepStatus, kind: ErrorKind | None, message: str, **fields: Any):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.fields = fields


@dataclass(slots=True)
class StepContext:
    """What is known about a step while it runs."""

    step: Step
    started_at: float
    t0: float
    phase: str = "starting"
    args: dict[str, Any] | None = None
    resolution: dict[str, ResolutionMethod] = field(default_factory=dict)
    grounding: dict[str, Any] = field(default_factory=dict)
    """Where filled-in argument values come from (`planexec.grounding.Grounding`)."""
    llm_calls: int = 0
    attempts: int = 0
    server: str | None = None
    tool: str | None = None
    note: str | None = None
    """A remark put on the step's result whatever its end (e.g. the tool selected)."""
    validated: tuple[dict[str, Any], BaseModel] | None = None
    """The resolved arguments and their validated model (for those arguments only)."""
    unsafe_call: bool = False
    """Whether a call of a tool that is not safe was started (`StepFinished.safe`)."""
    deadline: asyncio.Timeout | None = None
    """The step timeout's context, while it runs."""
    waited: bool = False
    """Whether the last tool call waited for something (the event loop had a turn)."""
    empties: int = 0
    """Attempts that returned an empty output."""
    finite: dict[str, Any] | None = None
    """Arguments known to hold no NaN or infinity (the resolver's fast path gives only
    plain JSON data), checked no more."""
    warnings: list[str] | None = None
    """What JSON could not keep of the last attempt's output (`check_output`)."""
    approved: bool = False
    """Whether the call needs its approval decision claimed at the call (`Approvals.claim`)."""


ToolSettings = tuple[
    "CircuitBreaker", "float | None", "int | None", "RetryPolicy", "asyncio.Semaphore | None"
]
"""A tool's breaker, call timeout, output limit, retry policy and call slots."""


class RunState:
    """One run's state, and the executor's collaborators it runs with."""

    def __init__(self, owner: Owner, plan_version: int) -> None:
        self.owner = owner
        self.catalog = owner.catalog
        self.resolver = owner.resolver
        self.config = owner.config
        self.bus = owner.bus
        self.run_id = owner.run_id
        self.usage = owner.usage
        self.breakers = owner.breakers
        self.guard = owner.guard
        self.runner = owner.runner
        self.trace = owner.trace
        self.reasoner = owner.reasoner
        self.selector = owner.selector
        self.approvals = owner.approvals
        self.detached = owner._detached
        """Abandoned tool calls not ended yet (the executor's: they outlive runs)."""
        self.plan_version = plan_version
        self.dialect: str | None = None
        self.defects: dict[int, StepError] = {}
        """Steps an error diagnostic of the plan names, with why (`planexec.plan_errors`):
        they never run."""
        self.results: dict[int, StepResult] = {}
        """Every result known in this run (prior ones included), by step id."""
        self.reused: set[int] = set()
        """Steps whose succeeded prior result was reused, not re-run."""
        self.discarded: list[StepResult] = []
        """Results of steps started while the plan was streamed that the final plan does
        not hold (cancelled, or their results discarded), in the order discarded."""
        self.early: set[int] = set()
        """Steps started before the plan was complete."""
        self.stopping: set[asyncio.Task[Any]] = set()
        """Step tasks the scheduler cancelled (their tool calls are abandoned)."""
        self.slots: dict[str, asyncio.Semaphore] = {}
        """Per-tool call slots (``tool_concurrency``), by qualified name."""
        self.settings: dict[tuple[str | None, str], ToolSettings] = {}
        """`planexec.executor._call.tool_settings` by tool."""
        self.cancel_requested = False
        self.cancel_reason: str | None = None
        self.finished: asyncio.Queue[Any] | None = None
        """The scheduler's queue while it runs (ended steps, feed items, wake-ups)."""
        # asked once: the steps run in copies of this context (their tasks' contexts)
        self.callbacks: bool = callbacks_around()
        """`planexec.tools.callbacks_around` as the run found it."""
        self.fast = _fastpaths.ON
        """Whether this run takes the fast paths (`planexec._fastpaths`)."""

    def result(
        self,
        ctx: StepContext,
        status: StepStatus,
        kind: ErrorKind | None,
        message: str | None,
        *,
        output: Any = None,
        raw_output: Any = None,
        note: str | None = None,
        **fields: Any,
    ) -> StepResult:
        """The step's result (``fields``: more of `StepResult`'s, e.g. ``args``, ``failure``)."""
        if ctx.note:
            note = join_note(ctx.note, note) if note else ctx.note
        args = fields.pop("args") if "args" in fields else (ctx.args if ctx.attempts else None)
        if "error" in fields:  # e.g. a waiting step: no error, whatever the message
            message = fields.pop("error")
        return StepResult.of(
            step_id=ctx.step.id,
            tool=ctx.tool,
            status=status,
            args=args,
            output=output,
            raw_output=raw_output,
            error=message,
            error_kind=kind,
            resolution=ctx.resolution,  # the step's own (its context ends here)
            grounding=ctx.grounding,
            llm_calls=ctx.llm_calls,
            attempts=ctx.attempts,
            started_at=ctx.started_at,
            duration=time.perf_counter() - ctx.t0,
            server=ctx.server,
            note=note,
            **fields,
        )

    def warn(self, step_id: int, code: str, message: str) -> FallbackUsed:
        """Log a fallback or repair and build its `FallbackUsed` event."""
        step_log(self.run_id, step_id).warning(message)
        return FallbackUsed(run_id=self.run_id, step_id=step_id, code=code, message=message)


def is_empty(value: Any) -> bool:
    """Whether an output is empty: None, a blank string, an empty list, tuple or dict."""
    if value is None:
        return True
    kind = type(value)
    if kind is dict or kind is list:  # the common case first
        return not value
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list | tuple | dict):
        return len(value) == 0
    return False


def not_started(
    step: Step,
    status: StepStatus,
    kind: ErrorKind,
    message: str,
    *,
    started_at: float,
    note: str | None = None,
) -> StepResult:
    """The result of a step whose tool was never called (it took no time)."""
    return StepResult(
        step_id=step.id,
        tool=step.tool,
        status=status,
        error=message,
        error_kind=kind,
        started_at=started_at,
        duration=0.0,
        server=step.server,
        note=note,
    )


def short(value: Any, limit: int = 200) -> str:
    """A value as text, cut to ``limit`` characters (for messages)."""
    return cut(as_text(value), limit)


def named(step_id: int, message: str) -> str:
    """``message``, starting with ``step N`` (added if it does not)."""
    prefix = f"step {step_id}"
    return message if message.lower().startswith(prefix) else f"{prefix}: {message}"


def join_note(note: str | None, extra: str) -> str:
    """Two notes as one."""
    return f"{note}; {extra}" if note else extra
