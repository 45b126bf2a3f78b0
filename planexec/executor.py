"""The executor: runs a checked `Plan` as a DAG of steps on asyncio.

Every step whose dependencies are done starts at once, up to ``max_concurrency``
(1,024 by default), and a tool named in ``tool_concurrency`` has at most that many
calls running (its other steps wait for a slot).
For each step, in order:

1. its own defects: unreadable ``#Args`` (``ARGS_SYNTAX``), an unknown tool
   (``UNKNOWN_TOOL``, with close names), a reference or dependency to a step that does
   not exist (``MISSING_REFERENCE``), a dependency cycle (``MISSING_REFERENCE``);
2. its dependencies: one that failed, was blocked or cancelled (or a referenced one
   that was skipped) makes it ``BLOCKED`` (``UPSTREAM_FAILED``, naming the upstream
   step, the argument and the upstream error);
3. argument resolution through the `ArgResolver` (the only way the executor meets a
   model, with the reasoning hook);
4. the invariant — no argument holds a reference or a placeholder-looking string —
   checked right before the call (``RESOLUTION_FAILED`` otherwise);
5. the approval gate (`Approvals`, `planexec.approval`), when the step needs a
   person's decision: approved (maybe with edited arguments), ``REJECTED``, or
   ``WAITING_APPROVAL`` (the step waits with its resolved arguments, and so do the
   steps that depend on it; everything else runs on);
6. the ``guard`` hook (``LIMIT_EXCEEDED``), the tool's circuit breaker (its server's;
   a local tool's own) (``CIRCUIT_OPEN``);
7. the tool call through the `ToolRunner`, bounded by its timeout, retried with
   backoff and jitter only when the tool is safe (read-only or idempotent, not
   destructive). Exceptions, ``is_error`` results and error payloads are
   ``TOOL_ERROR``; a timeout is ``TOOL_TIMEOUT``; an empty output is ``EMPTY_OUTPUT``.
   An argument that is NaN or infinite is ``ARGS_INVALID`` (the tool is not called).
   The call runs as in a task of its own (one with a call timeout in a task; one
   without in the step's task, in a context of its own, handed to a task when the step
   stops: `_InlineCall`): a timeout (or a cancellation of the step or the run) never
   waits for the tool, so a tool that ignores cancellation is left running, detached
   and logged (a sync tool's thread cannot be stopped at all: it is abandoned). An
   output over ``max_output_chars`` (or the tool's ``tool_output_limits``), one that
   contains itself or is nested deeper than `planexec.results.MAX_JSON_DEPTH` is
   ``TOOL_ERROR`` and is not kept; what JSON cannot keep of an output (colliding keys,
   objects that are not JSON data) is a ``OUTPUT_NOT_JSON`` warning event and a note on
   the step.

``run_timeout`` bounds one `Executor.run`: when it runs out the run is cancelled as by
`Executor.cancel`, with the reason in `Executor.cancel_reason` and on the steps.

A step without a tool is a reasoning step: a `Reasoner` answers its task from its
dependencies' outputs; without one it is ``SKIPPED`` with a note. Its own
``expected_output`` is never used as a result. A step that names an agent or server but
no tool (`planexec.plan.Step.selects_tool`; not ``#Tool: none``) is no reasoning step: a
`ToolSelector` chooses one of that server's tools and fills its arguments (method
``selected``, a ``TOOL_SELECTED`` event and a note naming the tool), then the call goes
on as in 4-6; without a selector it fails with ``TOOL_SELECTION_FAILED``.

Each step's `StepFinished` event is awaited through the `EventBus` before any step
that depends on it starts, so a store subscribed to the bus has recorded it.

`Executor.run_feed` runs a plan whose steps arrive over time (a planner's reply as it
streams, `planexec.streaming`): steps start as they arrive, but before the whole plan is
there only those safe to start early (`Executor.may_start_early`); a step the final plan
does not hold as it arrived is cancelled or its result discarded (`Executor.discarded`,
`planexec.events.StepDiscarded`). `Executor.run` is the same scheduler fed the whole
plan at once.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from asyncio import current_task
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Mapping
from contextvars import Context, copy_context
from dataclasses import dataclass, field, replace
from types import CoroutineType, MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, runtime_checkable

from planexec._json import non_finite
from planexec._log import step_log
from planexec._text import as_text as _as_text
from planexec._text import cut as _cut
from planexec.approval import ApprovalAction, ApprovalDecision
from planexec.config import ExecutorSettings
from planexec.errors import CircuitOpenError, ErrorKind, ModelError
from planexec.events import (
    ArgResolved,
    EventBus,
    FallbackUsed,
    StepDiscarded,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.parsing.refs import contains_placeholder, find_malformed, is_free_text
from planexec.plan import Plan, Ref, Step, Template, to_jsonable
from planexec.plan_errors import step_failures
from planexec.resilience import BreakerRegistry, CircuitBreaker, RetryPolicy, retry_async
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs
from planexec.results import (
    ResolutionMethod,
    StepError,
    StepResult,
    StepStatus,
    Usage,
)
from planexec.selection import SelectionFailure, ToolChoice
from planexec.stepfeed import FeedItem, PlanComplete, StepArrived, StepWithdrawn, same_work
from planexec.tools import (
    ToolCatalog,
    ToolOutputError,
    ToolSpec,
    callbacks_around,
    check_output,
    direct_coroutine,
    error_payload,
    invoke_tool,
    sync_only,
)

if TYPE_CHECKING:  # the executor knows no model code: langchain's config via tracing
    from pydantic import BaseModel

    from planexec.tracing import RunnableConfig, RunTrace

__all__ = [
    "REUSED_NOTE",
    "Approvals",
    "Executor",
    "Guard",
    "LocalToolRunner",
    "Reasoner",
    "ToolRunner",
    "ToolSelector",
]

REUSED_NOTE = "reused: succeeded earlier"
"""The note on a result taken from ``prior`` instead of running the step again."""

Guard = Callable[[Step, str], "str | None"]
"""Called before a step's tool call; a returned message fails it with LIMIT_EXCEEDED."""


_NO_RETRY = RetryPolicy.none()
"""The policy of a tool that is not retried (one attempt)."""


@runtime_checkable
class ToolRunner(Protocol):
    """Makes one tool call (locally by default; a Ray runner can replace it)."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        """Call the tool with resolved arguments and return its raw output."""
        ...


class LocalToolRunner:
    """Calls tools in this process (see `planexec.tools.invoke_tool`).

    Async tools run on the running event loop, sync ones in a daemon thread of their own.
    """

    async def call(
        self,
        spec: ToolSpec,
        args: dict[str, Any],
        config: RunnableConfig | None = None,
        *,
        validated: BaseModel | None = None,
        callbacks: bool | None = None,
    ) -> Any:
        """Call the tool through `planexec.tools.invoke_tool` (with ``config`` if given).

        ``validated``: the arguments as the resolver validated them (not validated
        again on the direct path). ``callbacks``: whether a langchain callback would see
        the call (`planexec.tools.callbacks_around`; None: asked per call).
        """
        return await invoke_tool(spec, args, config, validated=validated, callbacks=callbacks)


@runtime_checkable
class Reasoner(Protocol):
    """Answers a reasoning step (no tool) from its dependencies' results."""

    async def reason(self, step: Step, inputs: Mapping[int, StepResult]) -> str:
        """Return the step's answer."""
        ...


@runtime_checkable
class ToolSelector(Protocol):
    """Chooses the tool of a step that names an agent or server but no tool.

    `planexec.selection.ModelToolSelector` is the model-backed one.
    """

    async def select(
        self,
        step: Step,
        catalog: ToolCatalog,
        inputs: Mapping[int, StepResult],
        *,
        feedback: StepError | None = None,
    ) -> ToolChoice | SelectionFailure:
        """Return the chosen tool with validated arguments, or why there is none."""
        ...


@runtime_checkable
class Approvals(Protocol):
    """Decides whether a step's call may go ahead (`planexec.approval.ApprovalGate`)."""

    async def review(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        resolution: Mapping[str, ResolutionMethod],
        *,
        plan_version: int,
    ) -> ApprovalDecision | None:
        """None: no approval needed; else the decision (approve/edit carry the args)."""
        ...


class _AttemptFailed(Exception):
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


class _StepFailed(Exception):
    """A step ended without success; carries its result fields."""

    def __init__(self, status: StepStatus, kind: ErrorKind | None, message: str, **fields: Any):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.fields = fields


_BLOCKING = (StepStatus.FAILED, StepStatus.BLOCKED, StepStatus.CANCELLED)


def _is_empty(value: Any) -> bool:
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


def _not_started(
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


def _short(value: Any, limit: int = 200) -> str:
    return _cut(_as_text(value), limit)


def _unresolved(value: Any, dialect: str | None) -> Ref | Template | str | None:
    """The first reference or placeholder-looking string left in a value, if any."""
    kind = type(value)  # exact types first: plain data is most of what is checked
    if kind is int or kind is float or kind is bool or value is None:
        return None
    if kind is str:
        return value if contains_placeholder(value, dialect=dialect) else None
    if kind is dict:  # before the slower abstract checks below
        for k, v in value.items():
            if type(k) is str and contains_placeholder(k, dialect=dialect):
                return k  # a key is checked like a value
            if type(v) is not int and v is not None:
                found = _unresolved(v, dialect)
                if found is not None:
                    return found
        return None
    if isinstance(value, Ref | Template):
        return value
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and contains_placeholder(k, dialect=dialect):
                return k  # a key is checked like a value
            found = _unresolved(v, dialect)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for v in value:
            found = _unresolved(v, dialect)
            if found is not None:
                return found
        return None
    if isinstance(value, str) and contains_placeholder(value, dialect=dialect):
        return value
    return None


@dataclass(slots=True)
class _Ctx:
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


_ToolSettings = tuple[
    CircuitBreaker, float | None, int | None, RetryPolicy, asyncio.Semaphore | None
]
"""A tool's breaker, call timeout, output limit, retry policy and call slots."""


class Executor:
    """Runs plans: a DAG scheduler, argument resolution and resilient tool calls.

    Example:
        >>> import asyncio
        >>> from planexec.plan import Plan, Ref, Step
        >>> from planexec.testing import fake_tool
        >>> catalog = ToolCatalog([fake_tool("sites", ["MAIN"]),
        ...                        fake_tool("assets", ["CH-6"], args={"site": str})])
        >>> plan = Plan(steps=(Step(id=1, tool="sites"),
        ...     Step(id=2, tool="assets", args={"site": Ref(1, (0,))}, depends_on=(1,))))
        >>> [r.status.value for r in asyncio.run(Executor(catalog).run(plan))]
        ['SUCCEEDED', 'SUCCEEDED']
    """

    def __init__(
        self,
        catalog: ToolCatalog,
        resolver: ArgResolver | None = None,
        *,
        config: ExecutorSettings | None = None,
        reasoner: Reasoner | None = None,
        selector: ToolSelector | None = None,
        bus: EventBus | None = None,
        run_id: str = "-",
        usage: Usage | None = None,
        breakers: BreakerRegistry | None = None,
        guard: Guard | None = None,
        runner: ToolRunner | None = None,
        trace: RunTrace | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        """Build an executor.

        The executor knows no model: the resolver's fallback and the reasoner come with
        their own (run-bound) model clients, as `planexec.runtime.Runtime.open_run`
        builds them.

        Args:
            catalog: The tools.
            resolver: The argument resolver (one without a model by default).
            config: Concurrency, timeouts, retries, error payloads, empty outputs
                (`planexec.config.ExecutorSettings`; its defaults otherwise).
            reasoner: Answers reasoning steps; without one they are skipped.
            selector: Chooses the tool of a step that names an agent or server but no
                tool; without one such a step fails (``TOOL_SELECTION_FAILED``).
            bus: Where events go (awaited in order).
            run_id: The run id, bound to logs and events.
            usage: Where tool calls are counted (a new `Usage` otherwise). Model calls
                are counted by the resolver's and the reasoner's own clients.
            breakers: Circuit breakers: one per tool server (``tool:<server>``), one per
                local tool (``tool:local:<name>``).
            guard: Called before each step's tool call; a message fails the step
                with ``LIMIT_EXCEEDED``.
            runner: Makes tool calls (`LocalToolRunner` by default).
            trace: The run's trace (`planexec.tracing`): each round, step and tool call
                is a callback run in it. None (untraced): no per-call configs at all.
            approvals: The approval gate, asked before the guard and the call of each
                tool step (None: no step needs approval).
        """
        if resolver is None:
            resolver = ArgResolver()
        self.catalog = catalog
        """The tools."""
        self.resolver = resolver
        """The argument resolver."""
        self._resolve_at_once = False
        """Whether `ArgResolver.resolve_at_once` may stand in for this resolver's
        ``resolve`` (it is ArgResolver's own, not overridden or wrapped); per run."""
        self._runner_own = True
        """Whether the local runner's ``call`` is its class's (not wrapped on the
        instance: then every call goes through it); per run."""
        self.config = config if config is not None else ExecutorSettings()
        """The configuration."""
        self.bus = bus if bus is not None else EventBus()
        """The event bus."""
        self.run_id = run_id
        """The run id."""
        self.usage = usage if usage is not None else Usage()
        """Tool calls and model calls counted so far."""
        self.breakers = breakers if breakers is not None else BreakerRegistry()
        """Circuit breakers by name."""
        self.guard = guard
        """The limit hook."""
        self.runner: ToolRunner = runner if runner is not None else LocalToolRunner()
        """Makes tool calls."""
        self.trace = trace
        """The run's trace, if the run is traced."""
        attach = getattr(self.runner, "attach_catalog", None)
        if callable(attach):  # optional hook: e.g. Ray hosts tools that share state together
            attach(catalog)
        self.reasoner = reasoner
        """Answers reasoning steps (None: they are skipped)."""
        self.selector = selector
        """Chooses tools for steps naming an agent or server but no tool (None: they fail)."""
        self.approvals = approvals
        """The approval gate (None: no step needs approval)."""
        self.results: dict[int, StepResult] = {}
        """Every result known in the current run (prior ones included), by step id."""
        self.reused: set[int] = set()
        """Steps of the current run whose succeeded prior result was reused, not re-run."""
        self._cancel = asyncio.Event()
        self._plan_version = 1
        self._dialect: str | None = None
        self._defects: dict[int, StepError] = {}  # the plan's error rule (planexec.plan_errors)
        self._finished: asyncio.Queue[Any] | None = None
        self._last_cancelled = False
        self._cancel_reason: str | None = None
        self._last_cancel_reason: str | None = None
        self._detached: set[asyncio.Future[Any]] = set()
        self._stopping: set[asyncio.Task[Any]] = set()
        """Step tasks the scheduler cancelled (their tool calls are abandoned); per run."""
        self._slots: dict[str, asyncio.Semaphore] = {}
        """Per-tool call slots (``tool_concurrency``), by qualified name; per run."""
        self._settings: dict[tuple[str | None, str], Any] = {}
        """`_tool_settings` by tool; per run."""
        self.discarded: list[StepResult] = []
        """Results of steps started while the plan was streamed that the final plan does
        not hold (cancelled, or their results discarded), in the order discarded."""
        self._early: set[int] = set()
        self._callbacks: bool | None = None
        """`planexec.tools.callbacks_around` as the current run found it."""

    # ------------------------------------------------------------------ public API

    def cancel(self, reason: str | None = None) -> None:
        """Stop the current run: running steps and steps not started become CANCELLED.

        `run` then returns normally with the results so far, and `cancelled` is true.
        Called while no run is under way, it cancels the next one at once. Call it from
        the event loop's thread. Running tool calls are cancelled and not waited for.

        Args:
            reason: Why (kept in `cancel_reason` and put on the cancelled steps).
        """
        if reason is not None and self._cancel_reason is None:
            self._cancel_reason = reason
        self._cancel.set()
        if self._finished is not None:
            self._finished.put_nowait(None)  # wake the scheduler up

    @property
    def cancelled(self) -> bool:
        """Whether `cancel` was called (and stopped the last run, or will stop the next)."""
        return self._cancel.is_set() or self._last_cancelled

    @property
    def cancel_reason(self) -> str | None:
        """Why the current (or last) run was cancelled, when a reason was given.

        ``run timeout of Ns exceeded`` when ``run_timeout`` ran out.
        """
        return self._cancel_reason or self._last_cancel_reason

    @property
    def detached_calls(self) -> int:
        """Abandoned tool calls (timed out or cancelled) that have not ended yet."""
        return sum(1 for call in self._detached if not call.done())

    def _run_timed_out(self, limit: float) -> None:
        reason = f"run timeout of {limit}s exceeded"
        step_log(self.run_id, None).warning("{}: cancelling the run", reason)
        self.cancel(reason)

    async def run(
        self,
        plan: Plan,
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
        plan_version: int = 1,
    ) -> list[StepResult]:
        """Run a plan; see `_run` (traced as one round of the plan attempt when traced)."""
        return await self._traced(
            PlanComplete(plan), len(plan.steps), prior, feedback, plan_version
        )

    async def run_feed(
        self,
        feed: AsyncIterator[FeedItem],
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
        plan_version: int = 1,
    ) -> list[StepResult]:
        """Run a plan whose steps arrive over time (a streamed reply); see `_run`.

        A step starts once it has arrived, its dependencies are done and, before the
        `PlanComplete` item, only when it is *safe to start early* (`may_start_early`).
        A withdrawn step (`StepWithdrawn`, or one the final plan does not hold as it
        arrived) is cancelled if running and its result discarded (`discarded`, a
        `StepDiscarded` event), and so are the started steps that used its result. A
        step waiting on a step that never arrives runs when the plan is complete and
        fails as ``MISSING_REFERENCE``. A feed that ends without `PlanComplete` completes
        an empty plan (every started step is discarded).
        """
        return await self._traced(feed, 0, prior, feedback, plan_version)

    async def _traced(
        self,
        source: PlanComplete | AsyncIterator[FeedItem],
        steps: int,
        prior: Mapping[int, StepResult] | None,
        feedback: Mapping[int, StepError] | None,
        plan_version: int,
    ) -> list[StepResult]:
        self._slots = {}  # semaphores belong to the running loop: new ones per run
        self._settings = {}  # the configuration may have changed since the last run
        if self.trace is None:
            return await self._run(
                source, prior=prior, feedback=feedback, plan_version=plan_version
            )
        await self.trace.start_attempt(plan_version, steps)
        try:
            results = await self._run(
                source, prior=prior, feedback=feedback, plan_version=plan_version
            )
        except BaseException as exc:
            await self.trace.end_attempt(None, exc)
            raise
        await self.trace.end_attempt(results)
        return results

    def may_start_early(self, step: Step) -> bool:
        """Whether a step may start before the plan is complete.

        Only a step whose tool is known and safe (read-only or idempotent, not
        destructive; `planexec.tools.ToolHints.safe`) with readable arguments, or a
        reasoning step (no tool, no server to select one from): what it does cannot
        matter if a later draft drops it. Everything else waits for the whole plan and
        its checks.
        """
        if not step.args_valid or step.cut_off:
            return False
        if step.tool is None:
            return not step.selects_tool
        try:
            spec = self.catalog.lookup(step.tool, step.server)
        except KeyError:  # ambiguous: the whole plan's checks decide
            return False
        return spec is not None and spec.hints.safe

    async def _run(
        self,
        source: PlanComplete | AsyncIterator[FeedItem],
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
        plan_version: int = 1,
    ) -> list[StepResult]:
        """Run a plan and return one result per step, in completion order.

        Args:
            source: The whole plan (a `PlanComplete`), or a feed of its steps as they
                arrive, ending with `PlanComplete` (see `run_feed`).
            prior: Results from earlier runs or plan attempts. A step of the plan whose
                prior result SUCCEEDED is not run again: its result is reused (emitted
                as `StepFinished` with a ``reused`` note). Every prior result is visible
                to references.
            feedback: Per-step re-resolution feedback for the resolver: the `StepError`
                of the step's previous attempt (it names the arguments to re-ask; e.g.
                previous attempt).
            plan_version: The plan attempt number, put on events.

        Returns:
            The results of the plan's steps, in the order they finished.

        Raises:
            asyncio.CancelledError: the task running this was cancelled; every
                unfinished step was first recorded as CANCELLED (see ``results``).
        """
        self._plan_version = plan_version
        self._last_cancelled = False
        self._last_cancel_reason = None
        self.results = {}
        self.reused = set()
        self.discarded = []
        self._early = set()
        self._stopping = set()
        # asked once: the steps run in copies of this context (their tasks' contexts)
        self._callbacks = callbacks_around()
        resolver = self.resolver
        self._resolve_at_once = type(resolver).resolve is ArgResolver.resolve and (
            "resolve" not in getattr(resolver, "__dict__", {})  # not wrapped on the instance
        )
        self._runner_own = "call" not in getattr(self.runner, "__dict__", {})
        for sid, result in (prior or {}).items():
            self.results[sid] = result
        sched = _Schedule(dict(prior or {}), feedback or {}, MappingProxyType(self.results))
        finished: asyncio.Queue[int | _Fed | None] = asyncio.Queue()
        self._finished = finished
        pump: asyncio.Task[None] | None = None
        self._defects = {}
        if isinstance(source, PlanComplete):
            self._dialect = source.plan.dialect
            await self._complete(sched, source)
        else:
            self._dialect = None
            pump = asyncio.create_task(_pump(source, finished))
        run_timeout = self.config.run_timeout
        timer = (
            asyncio.get_running_loop().call_later(run_timeout, self._run_timed_out, run_timeout)
            if run_timeout is not None
            else None
        )
        try:
            await self._schedule(sched, finished)
        except asyncio.CancelledError:
            await self._cancel_rest(sched.pending(), sched.running, sched.order)
            raise
        finally:
            if pump is not None and not pump.done():
                pump.cancel()
            if timer is not None:
                timer.cancel()
            self._finished = None
            cancelled, self._cancel = self._cancel.is_set(), asyncio.Event()
            self._last_cancelled = cancelled
            self._last_cancel_reason = self._cancel_reason if cancelled else None
            self._cancel_reason = None
        if cancelled:
            await self._cancel_rest(sched.pending(), sched.running, sched.order)
        elif len(sched.done) < len(sched.steps):
            # Whatever is left waits on a dependency cycle.
            held = _held(list(sched.steps.values()), self.results)  # behind a waiting step
            await self._fail_cycle(
                [s for s in sched.steps.values() if s.id not in self.results and s.id not in held],
                sched.order,
            )
        return [self.results[sid] for sid in sched.order if sid in sched.steps]

    async def _schedule(self, sched: _Schedule, finished: asyncio.Queue[int | _Fed | None]) -> None:
        """The scheduler loop: start ready steps, take feed items and failed steps.

        A step that ends normally releases its dependents and starts the ready steps
        itself (`_step_ended`), without a round trip through this loop; the loop hears of
        a step only when its task raised or was cancelled, and is woken when nothing runs.
        """
        sched.live = True
        try:
            while not sched.complete or sched.ready or sched.running:
                if self._cancel.is_set():
                    break
                self._start_ready(sched)
                item = await finished.get()
                if isinstance(item, _Fed):
                    await self._take(sched, item.item)
                    continue
                if item is None or item not in sched.running or not sched.running[item].done():
                    continue  # a wake-up, or a withdrawn step's late notice
                done_task = sched.running.pop(item)
                if not done_task.cancelled() and done_task.exception() is not None:
                    # An event subscriber (e.g. the run store) failed: stop the run.
                    await self._cancel_rest(sched.pending(), sched.running, sched.order)
                    raise done_task.exception()  # type: ignore[misc]
                # a step waiting for approval holds its dependents back with it
                sched.finished(item, release=not _waits(self.results.get(item)))
        finally:
            sched.live = False

    def _start_ready(self, sched: _Schedule) -> None:
        """Start ready steps, up to ``max_concurrency`` running at once."""
        limit = self.config.max_concurrency
        ready, running = sched.ready, sched.running
        create_task = asyncio.get_running_loop().create_task
        while ready and len(running) < limit:
            sid = ready.popleft()
            if not sched.complete:
                self._early.add(sid)
            running[sid] = create_task(self._run_step(sched, sid))

    async def _run_step(self, sched: _Schedule, sid: int) -> None:
        """A step's task: run it, release its dependents (`_step_ended`), and run on.

        The task goes on with one of the steps that became ready (`_step_ended` says
        which), as a new task would (a chain needs no task per step).
        """
        next_sid: int | None = sid
        busy = 0  # steps run back to back without a turn of the loop
        while next_sid is not None:
            sid = next_sid
            step = sched.steps[sid]
            ctx = _Ctx(
                step, time.time(), time.perf_counter(), tool=step.tool, server=step.server
            )
            try:
                # the step, its end turned into its result (inline: no coroutine per step)
                if self.trace is not None:
                    await self.trace.start_step(step.id, step.tool)
                try:
                    if self.config.step_timeout is None:  # no timeout context to enter
                        result = await self._execute(
                            ctx, sched.view, sched.feedback.get(sid), sched.ids
                        )
                    else:
                        async with asyncio.timeout(self.config.step_timeout) as deadline:
                            ctx.deadline = deadline
                            result = await self._execute(
                                ctx, sched.view, sched.feedback.get(sid), sched.ids
                            )
                except (_StepFailed, TimeoutError, CircuitOpenError, asyncio.CancelledError) as e:
                    result = self._ended_by(ctx, e)
                if self.trace is not None:
                    await self.trace.end_step(result)
                await self._finish(result, safe=not ctx.unsafe_call)
            except BaseException:  # cancelled, or a subscriber failed: the scheduler decides
                if self._finished is not None:
                    self._finished.put_nowait(sid)
                raise
            next_sid = self._step_ended(sched, sid)
            # a call that waited gave the event loop a turn
            busy = 0 if ctx.waited else busy + 1
            if next_sid is not None and busy >= _TURN_EVERY:
                # a chain of tools that never wait gives the loop a turn now and then:
                # timeouts, cancels and the other tasks never wait long
                await asyncio.sleep(0)
                busy = 0

    def _step_ended(self, sched: _Schedule, sid: int) -> int | None:
        """A step ended normally: release its dependents and start the ready steps.

        Returns a ready step for the ending step's task to run next (the others get
        tasks of their own), or None. The task goes on only when running it is what a
        new task would do: no trace (whose spans live in the task's context) and no
        cancellation requested of the task (it is being stopped).

        Nothing happens for a step that is no longer the one running under its id (it
        was withdrawn), nor once the scheduler has stopped or the run is cancelled: the
        scheduler then settles what is left.
        """
        running = sched.running
        task = current_task()
        if not sched.live or self._cancel.is_set() or running.get(sid) is not task:
            return None
        del running[sid]
        # a step waiting for approval holds its dependents back with it
        sched.finished(sid, release=not _waits(self.results.get(sid)))
        next_sid: int | None = None
        if sched.ready:
            if self.trace is None and task is not None and not task.cancelling():
                next_sid = sched.ready.popleft()
                if not sched.complete:
                    self._early.add(next_sid)
                running[next_sid] = task
            self._start_ready(sched)
        if not running and self._finished is not None:
            self._finished.put_nowait(None)  # nothing runs: the scheduler decides what next
        return next_sid

    # ------------------------------------------------------------------ arrivals

    async def _take(self, sched: _Schedule, item: FeedItem | None) -> None:
        """Apply one feed item (None: the feed ended without `PlanComplete`)."""
        if item is None:
            if not sched.complete:
                empty = Plan(steps=(), dialect=self._dialect or "hashstep")
                await self._complete(sched, PlanComplete(empty, reason="the reply held no plan"))
        elif isinstance(item, StepArrived):
            if item.dialect is not None:
                self._dialect = item.dialect
            known = sched.steps.get(item.step.id)
            if known is not None and same_work(known, item.step):
                sched.steps[item.step.id] = item.step
                return
            if known is not None:
                await self._withdraw(sched, item.step.id, "a new version of it arrived")
            await self._admit(sched, item.step)
        elif isinstance(item, StepWithdrawn):
            await self._withdraw(sched, item.step_id, item.reason)
        else:
            await self._complete(sched, item)

    async def _admit(self, sched: _Schedule, step: Step, *, whole: bool = False) -> None:
        """Take a step in (``whole``: it comes with the whole plan, nothing is early)."""
        sid = step.id
        sched.steps[sid] = step
        sched.ids.add(sid)
        pr = sched.prior.get(sid)
        if pr is not None and pr.status is StepStatus.SUCCEEDED:
            reused = replace(pr, note=_join_note(pr.note, REUSED_NOTE), reused=True)
            self.results[sid] = reused
            self.reused.add(sid)
            step_log(self.run_id, sid).info("step {} reused from a prior result", sid)
            await self.bus.emit(
                StepFinished(run_id=self.run_id, result=reused, plan_version=self._plan_version)
            )
            sched.finished(sid)
            return
        same = sched.spare.pop(_call_key(step), None) if sched.spare and not step.refs else None
        if same is not None:  # the same call ran under another id while the plan streamed
            note = f"reused: the same call ran as step {same.step_id} while the plan streamed"
            reused = replace(same, step_id=sid, note=note, reused=True)
            self.results[sid] = reused
            self.reused.add(sid)
            step_log(self.run_id, sid).info("step {}: {}", sid, note)
            await self.bus.emit(
                StepFinished(run_id=self.run_id, result=reused, plan_version=self._plan_version)
            )
            sched.finished(sid)
            return
        self.results.pop(sid, None)  # an earlier failure of a step that runs again
        sched.wait(step, early=whole or sched.complete or self.may_start_early(step))

    async def _withdraw(self, sched: _Schedule, sid: int, reason: str) -> None:
        """Take a step back: cancel it or discard its result, and those of its users."""
        step = sched.steps.get(sid)
        if step is None:
            return
        for other in sched.started_users(sid):
            await self._discard(sched, other, f"it used the result of step {sid}, withdrawn")
            sched.wait(sched.steps[other], early=sched.complete or self.may_start_early(
                sched.steps[other]))
        await self._discard(sched, sid, reason)
        sched.forget(sid)

    async def _discard(self, sched: _Schedule, sid: int, reason: str) -> None:
        """Cancel a running step or take back its result (no-op if it never started)."""
        task = sched.running.pop(sid, None)
        if task is not None:
            self._stopping.add(task)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        ended = sid in sched.done
        sched.unstart(sid)
        result = self.results.get(sid)
        if result is None or (task is None and not ended):
            return
        if sid in self.reused:
            self.reused.discard(sid)
        else:
            step = sched.steps.get(sid)
            if (ended and result.ok and step is not None and step.tool and not step.refs
                    and sid not in self._defects):
                sched.spare.setdefault(_call_key(step), result)  # for the same call elsewhere
            self.discarded.append(result)
            message = (
                f"step {sid} ({result.tool or 'reasoning'}) started while the plan was "
                f"streamed; {'cancelled' if task is not None else 'its result discarded'}: "
                f"{reason}"
            )
            step_log(self.run_id, sid).warning(message)
            await self.bus.emit(
                StepDiscarded(
                    run_id=self.run_id,
                    step_id=sid,
                    tool=result.tool,
                    status=str(result.status),
                    reason=reason,
                    plan_version=self._plan_version,
                )
            )
        del self.results[sid]
        self._early.discard(sid)
        if sid in sched.prior:
            self.results[sid] = sched.prior[sid]

    async def _complete(self, sched: _Schedule, item: PlanComplete) -> None:
        """The whole plan: withdraw what it does not hold as arrived, admit the rest."""
        plan = item.plan
        self._dialect = plan.dialect
        self._defects = step_failures(plan)
        for sid, result in item.prior.items():
            sched.prior[sid] = result
            if sid not in sched.steps:
                self.results[sid] = result
        final = {s.id: s for s in plan.steps}
        for sid in list(sched.steps):
            last = final.get(sid)
            if last is None or not same_work(last, sched.steps[sid]) or sid in self._defects:
                await self._withdraw(sched, sid, item.reason)
            else:
                sched.steps[sid] = last  # the same work: its run (if any) stands
        new = [s for s in plan.steps if s.id not in sched.steps]
        for s in new:  # all known before any waits, so a cycle among them is seen
            sched.steps[s.id] = s
            sched.ids.add(s.id)
        for s in new:
            await self._admit(sched, s, whole=True)
        sched.complete = True
        sched.release_all()

    # ------------------------------------------------------------------ scheduling

    async def _fail_cycle(self, stuck: list[Step], order: list[int]) -> None:
        stuck_ids = {s.id for s in stuck}
        for s in stuck:
            where = s.ref_args
            waits = ", ".join(
                f"step {d}" + (f" (argument {where[d]!r})" if d in where else "")
                for d in sorted(s.deps & stuck_ids)
            )
            msg = (
                f"step {s.id}: cannot run: it waits on {waits}, and steps "
                f"{sorted(stuck_ids)} form or follow a dependency cycle; the tool was not called"
            )
            result = _not_started(
                s, StepStatus.FAILED, ErrorKind.MISSING_REFERENCE, msg, started_at=time.time()
            )
            await self._finish(result)
            order.append(s.id)

    async def _cancel_rest(
        self,
        to_run: list[Step],
        running: dict[int, asyncio.Task[Any]],
        order: list[int],
    ) -> None:
        """Cancel running steps (they record themselves) and record the others."""
        for task in running.values():
            self._stopping.add(task)
            task.cancel()
        if running:
            await asyncio.gather(*running.values(), return_exceptions=True)
        for sid in running:
            if sid not in order and sid in self.results:
                order.append(sid)
        running.clear()
        now = time.time()
        for s in to_run:
            if s.id in self.results:
                continue
            why = f" ({self.cancel_reason})" if self.cancel_reason else ""
            message = f"step {s.id}: cancelled before it started{why}"
            step_log(self.run_id, s.id).warning(message)
            await self._finish(
                _not_started(
                    s,
                    StepStatus.CANCELLED,
                    ErrorKind.CANCELLED,
                    message,
                    started_at=now,
                    note="not started",
                )
            )
            order.append(s.id)

    async def _finish(self, result: StepResult, *, safe: bool = False) -> None:
        """Record a step's result and emit its `StepFinished`.

        ``safe``: the step started no call of a tool that is not safe (`StepFinished.safe`).
        """
        if result.step_id in self._early:
            result = replace(result, streamed=True)
        self.results[result.step_id] = result
        if self.bus.listening:
            rest = self.bus.deliver(
                StepFinished.of(
                    run_id=self.run_id, result=result, plan_version=self._plan_version,
                    safe=safe,
                )
            )
            if rest is not None:
                await rest

    def _ended_by(
        self,
        ctx: _Ctx,
        exc: _StepFailed | TimeoutError | CircuitOpenError | asyncio.CancelledError,
    ) -> StepResult:
        """The result of a step that ended with ``exc`` (its failure, timeout, cancel)."""
        step = ctx.step
        if isinstance(exc, _StepFailed):
            return self._result(ctx, exc.status, exc.kind, exc.message, **exc.fields)
        if isinstance(exc, TimeoutError):
            kind, what = {
                "resolving": (ErrorKind.RESOLUTION_FAILED, "while resolving its arguments"),
                "reasoning": (ErrorKind.MODEL_ERROR, "while its model was reasoning"),
                "selecting": (ErrorKind.MODEL_ERROR, "while its model was selecting a tool"),
                "approval": (
                    ErrorKind.LIMIT_EXCEEDED,
                    "while waiting for its approval; the tool was not called",
                ),
            }.get(ctx.phase, (ErrorKind.TOOL_TIMEOUT, f"while calling tool {step.tool!r}"))
            limit = self.config.step_timeout
            why = f"step timeout of {limit}s exceeded" if limit is not None else "timed out"
            return self._result(ctx, StepStatus.FAILED, kind, f"step {step.id}: {why} {what}")
        if isinstance(exc, CircuitOpenError):  # e.g. the resolver's model breaker
            return self._result(
                ctx, StepStatus.FAILED, ErrorKind.CIRCUIT_OPEN, f"step {step.id}: {exc}"
            )
        # Only the scheduler cancels step tasks (on `cancel` or when `run` itself is
        # cancelled); it records the result and the scheduler decides what to raise.
        why = f" ({self.cancel_reason})" if self.cancel_reason else ""
        result = self._result(
            ctx,
            StepStatus.CANCELLED,
            ErrorKind.CANCELLED,
            f"step {step.id}: cancelled while {ctx.phase}{why}",
        )
        step_log(self.run_id, step.id).warning(result.error)
        return result

    def _result(
        self,
        ctx: _Ctx,
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
            note = _join_note(ctx.note, note) if note else ctx.note
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

    # ------------------------------------------------------------------ one step

    def _warn(self, step_id: int, code: str, message: str) -> FallbackUsed:
        step_log(self.run_id, step_id).warning(message)
        return FallbackUsed(run_id=self.run_id, step_id=step_id, code=code, message=message)

    async def _execute(
        self,
        ctx: _Ctx,
        results: Mapping[int, StepResult],
        feedback: StepError | None,
        plan_ids: set[int],
    ) -> StepResult:
        step = ctx.step
        ctx.phase = "checking"
        spec: ToolSpec | None = None
        if step.tool is not None:
            if not step.args_valid:
                text = f" ({_cut(step.args_text, 120)})" if step.args_text else ""
                raise _StepFailed(
                    StepStatus.FAILED,
                    ErrorKind.ARGS_SYNTAX,
                    f"step {step.id}: the arguments of tool {step.tool!r} could not be "
                    f"read as written{text} (see the plan's error diagnostics); "
                    "the tool was not called",
                )
            spec = self._quick_lookup(step) or await self._lookup(step)
            ctx.tool, ctx.server = spec.name, spec.server or step.server
        self._check_references(step, results, plan_ids)
        self._check_upstream(step, results)
        defect = self._defects.get(step.id)
        if defect is not None:  # named by an error diagnostic: never runs (plan_errors)
            raise _StepFailed(StepStatus.FAILED, defect.kind, defect.message, failure=defect)

        if self.bus.listening:  # no subscriber: no event to build
            rest = self.bus.deliver(
                StepStarted.of(
                    run_id=self.run_id,
                    step_id=step.id,
                    tool=step.tool,
                    plan_version=self._plan_version,
                )
            )
            if rest is not None:
                await rest
        if spec is None:
            if step.selects_tool:  # an agent or server but no tool: select, never reason
                return await self._select(ctx, results, feedback)
            return await self._reason(ctx, results)

        if non_finite(step.args, _REFS) is not None or (
            step.positional and non_finite(step.positional, _REFS) is not None
        ):
            # the plan's literals: found, then worded with the argument's name
            self._check_finite(ctx, {**dict(enumerate(step.positional)), **step.args})
        ctx.phase = "resolving"
        resolved: ResolvedArgs | ResolutionFailure | None = None
        if self._resolve_at_once:  # ArgResolver's own: no coroutine when nothing waits
            resolved = self.resolver.resolve_at_once(
                step, spec, results, feedback=feedback, bus=self.bus
            )
            if resolved is not None:
                ctx.finite = resolved.args  # plain data: `_call` need not look again
        if resolved is None:
            resolved = await self.resolver.resolve(
                step,
                spec,
                results,
                feedback=feedback,
                run_id=self.run_id,
                bus=self.bus,
            )
        ctx.llm_calls += resolved.llm_calls
        # the resolution's own (fresh) dicts: `_result` copies them into the result
        ctx.resolution = resolved.methods  # partial on a failure
        ctx.grounding = resolved.grounding
        if isinstance(resolved, ResolutionFailure):
            named = _named(step.id, resolved.message)
            raise _StepFailed(
                StepStatus.FAILED, resolved.kind, named, failure=resolved.to_error(named)
            )
        args = resolved.args  # a fresh dict of this resolution's
        if resolved.validated is not None:
            ctx.validated = (args, resolved.validated)
        del resolved  # not kept alive while the tool runs
        ctx.phase = "calling"
        self._check_invariant(step, args, spec)
        if self.approvals is not None:
            args = await self._approve(ctx, step, spec, args)

        if self.guard is not None:
            ctx.phase = "guard"
            message = self.guard(step, spec.name)
            if message:
                raise _StepFailed(
                    StepStatus.FAILED,
                    ErrorKind.LIMIT_EXCEEDED,
                    _named(step.id, message),
                    args=None,
                )
            ctx.phase = "calling"
        return await self._call(ctx, spec, args)

    def _quick_lookup(self, step: Step) -> ToolSpec | None:
        """The step's tool when the catalog has it as written and all is well, else None.

        None sends the step to `_lookup`, which decides the rest and words failures.
        """
        if getattr(self.catalog, "unavailable", None):  # some server could not start
            return None
        try:
            return self.catalog.lookup(step.tool or "", step.server)
        except KeyError:  # ambiguous name
            return None

    async def _lookup(self, step: Step) -> ToolSpec:
        assert step.tool is not None
        down = getattr(self.catalog, "unavailable", None) or {}
        if step.server is not None and step.server in down:  # its server could not start
            self._unavailable(step, self.catalog.unavailable_reason(step.tool, step.server))
        try:
            spec = self.catalog.lookup(step.tool, step.server)
            if spec is None and step.server:
                spec = self.catalog.lookup(step.tool)
                if spec is not None:
                    await self.bus.emit(
                        self._warn(
                            step.id,
                            "SERVER_IGNORED",
                            f"step {step.id}: no tool {step.tool!r} on server "
                            f"{step.server!r}; using {spec.qualified_name!r}",
                        )
                    )
        except KeyError as exc:  # ambiguous name
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.UNKNOWN_TOOL,
                f"step {step.id}: {exc}; the tool was not called",
            ) from exc
        if spec is None:
            if down:
                reason = self.catalog.unavailable_reason(step.tool, step.server)
                if reason is not None:
                    self._unavailable(step, reason)
            close = self.catalog.suggest(step.tool)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            where = f" (server {step.server!r})" if step.server else ""
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.UNKNOWN_TOOL,
                f"step {step.id}: unknown tool {step.tool!r}{where}{hint} The tool was not called.",
            )
        return spec

    def _unavailable(self, step: Step, reason: str | None) -> NoReturn:
        """Fail a step whose tool's MCP server could not start (``TOOL_ERROR``)."""
        raise _StepFailed(
            StepStatus.FAILED,
            ErrorKind.TOOL_ERROR,
            f"step {step.id}: tool {step.tool!r} cannot be called: "
            f"{reason or 'its server could not start'}",
        )

    def _check_references(
        self, step: Step, results: Mapping[int, StepResult], plan_ids: set[int]
    ) -> None:
        for ref in step.refs:
            if ref.step not in plan_ids and ref.step not in results:
                arg = step.ref_args.get(ref.step)
                message = (
                    f"step {step.id}: argument {arg or '?'!r} refers to step {ref.step} "
                    f"({ref.raw or ref.canonical}), which is not in the plan; "
                    f"the tool was not called"
                )
                raise _StepFailed(
                    StepStatus.FAILED,
                    ErrorKind.MISSING_REFERENCE,
                    message,
                    failure=StepError(
                        ErrorKind.MISSING_REFERENCE, message, args=(arg,) if arg else ()
                    ),
                )
        for dep in step.depends_on:
            if dep not in plan_ids and dep not in results:
                raise _StepFailed(
                    StepStatus.FAILED,
                    ErrorKind.MISSING_REFERENCE,
                    f"step {step.id}: depends on step {dep}, which is not in the plan",
                )

    def _check_upstream(self, step: Step, results: Mapping[int, StepResult]) -> None:
        deps = step.deps
        for dep in sorted(deps) if len(deps) > 1 else deps:
            r = results.get(dep)
            if r is None or r.status is StepStatus.SUCCEEDED:
                continue
            where = step.ref_args
            referenced = dep in where
            if r.status in _BLOCKING or (referenced and r.status is StepStatus.SKIPPED):
                how = f"argument {where[dep]!r} refers to" if referenced else "depends on"
                cause = r.error or r.note or "no output"
                kind = f"{r.error_kind}: " if r.error_kind else ""
                message = (
                    f"step {step.id}: blocked: {how} step {dep}, which is "
                    f"{r.status.value.lower()} ({kind}{cause}); the tool was not called"
                )
                raise _StepFailed(
                    StepStatus.BLOCKED,
                    ErrorKind.UPSTREAM_FAILED,
                    message,
                    failure=StepError(
                        ErrorKind.UPSTREAM_FAILED,
                        message,
                        args=(where[dep],) if referenced else (),
                        cause=cause,
                        upstream=dep,
                    ),
                )

    def _check_invariant(
        self, step: Step, args: Mapping[str, Any], spec: ToolSpec | None = None
    ) -> None:
        malformed = self._malformed(step, spec)
        props = spec.json_schema.get("properties", {}) if spec and malformed else {}
        for name, value in args.items():
            odd = malformed.get(name)
            if odd and not is_free_text(props.get(name)):  # REF_MALFORMED: never half-resolved
                message = (
                    f"step {step.id}: argument {name!r} holds {odd[0][1]!r}, which begins like "
                    "a reference but is not one (see the REF_MALFORMED diagnostic); the tool "
                    "was not called"
                )
                raise _StepFailed(
                    StepStatus.FAILED,
                    ErrorKind.ARGS_SYNTAX,
                    message,
                    failure=StepError(
                        ErrorKind.ARGS_SYNTAX, message, args=(name,), literal_args=(name,)
                    ),
                )
            bad = _unresolved(value, self._dialect)
            if bad is not None:
                text = bad.canonical if isinstance(bad, Ref | Template) else _cut(bad, 120)
                message = (
                    f"step {step.id}: argument {name!r} still holds an unresolved reference "
                    f"or placeholder ({text!r}) after resolution; the tool was not called"
                )
                raise _StepFailed(
                    StepStatus.FAILED,
                    ErrorKind.RESOLUTION_FAILED,
                    message,
                    failure=StepError(ErrorKind.RESOLUTION_FAILED, message, args=(name,)),
                )

    def _malformed(
        self, step: Step, spec: ToolSpec | None
    ) -> Mapping[str, list[tuple[str, str]]]:
        """The arguments the plan wrote with a malformed reference (`find_malformed`).

        Nothing is built for a step without any (the common case).
        """
        dialect = self._dialect or "hashstep"
        written: Mapping[str, Any] = step.args  # each argument as the plan wrote it
        if spec is not None and step.positional:
            written = {**dict(zip(spec.arg_names, step.positional, strict=False)), **written}
        found: dict[str, list[tuple[str, str]]] | None = None
        for name, value in written.items():
            odd = find_malformed(value, dialect=dialect)
            if odd:
                if found is None:
                    found = {}
                found[name] = odd
        return found if found is not None else _NONE_MALFORMED

    async def _select(
        self, ctx: _Ctx, results: Mapping[int, StepResult], feedback: StepError | None
    ) -> StepResult:
        """Select the tool of a step that names an agent or server but no tool; call it."""
        step = ctx.step
        named = f"the agent/server {step.server!r}"
        if not step.args_valid:
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.ARGS_SYNTAX,
                f"step {step.id} ({named}, no tool) could not be read as written (see the "
                "plan's error diagnostics); no tool was selected or called",
            )
        if self.selector is None:
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.TOOL_SELECTION_FAILED,
                f"step {step.id}: names {named} but no tool, and there is no model to "
                "select one with; not run (it is not a reasoning step: those say "
                "#Tool: none)",
            )
        inputs = {
            d: results[d]
            for d in step.deps
            if d in results and results[d].status is StepStatus.SUCCEEDED
        }
        ctx.phase = "selecting"
        try:
            choice = await self.selector.select(step, self.catalog, inputs, feedback=feedback)
        except CircuitOpenError as exc:
            ctx.llm_calls += 1
            raise _StepFailed(
                StepStatus.FAILED, ErrorKind.CIRCUIT_OPEN, f"step {step.id}: tool selection: {exc}"
            ) from exc
        except ModelError as exc:
            ctx.llm_calls += 1
            raise _StepFailed(
                StepStatus.FAILED, ErrorKind.MODEL_ERROR, f"step {step.id}: tool selection: {exc}"
            ) from exc
        ctx.llm_calls += choice.llm_calls
        if isinstance(choice, SelectionFailure):
            raise _StepFailed(
                StepStatus.FAILED, choice.kind, choice.message, failure=choice.to_error()
            )
        spec, args = choice.spec, dict(choice.args)
        ctx.tool, ctx.server = spec.name, spec.server or step.server
        ctx.note = choice.note
        ctx.resolution = dict.fromkeys(args, ResolutionMethod.SELECTED)
        await self.bus.emit(
            self._warn(
                step.id,
                "TOOL_SELECTED",
                f"step {step.id} names {named} but no tool: {choice.note}; "
                f"arguments {_short(args)}",
            )
        )
        for name in args:
            await self.bus.emit(
                ArgResolved(
                    run_id=self.run_id, step_id=step.id, arg=name, method=ResolutionMethod.SELECTED
                )
            )
        # the arguments were chosen, not written: nothing in the plan is checked against them
        chosen = replace(step, tool=spec.name, server=spec.server, args={}, positional=())
        ctx.phase = "calling"
        self._check_invariant(chosen, args, spec)
        if self.approvals is not None:
            args = await self._approve(ctx, chosen, spec, args)
        if self.guard is not None:
            ctx.phase = "guard"
            message = self.guard(chosen, spec.name)
            if message:
                raise _StepFailed(
                    StepStatus.FAILED, ErrorKind.LIMIT_EXCEEDED, _named(step.id, message)
                )
            ctx.phase = "calling"
        return await self._call(ctx, spec, args)

    async def _approve(
        self, ctx: _Ctx, step: Step, spec: ToolSpec, args: dict[str, Any]
    ) -> dict[str, Any]:
        """Ask the approval gate; return the arguments to call with.

        Raises:
            _StepFailed: rejected (``REJECTED``) or deferred (``WAITING_APPROVAL``).
        """
        assert self.approvals is not None
        ctx.phase = "approval"
        decision = await self.approvals.review(
            step, spec, args, ctx.resolution, plan_version=self._plan_version
        )
        ctx.phase = "calling"
        if decision is None:
            return args
        who = f" by {decision.by}" if decision.by else ""
        if decision.action is ApprovalAction.REJECT:
            message = (
                f"step {ctx.step.id}: tool {spec.name!r} not called: rejected{who}: "
                f"{decision.reason}"
            )
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.REJECTED,
                message,
                failure=StepError(ErrorKind.REJECTED, message, cause=decision.reason),
            )
        if decision.action is ApprovalAction.DEFER or decision.args is None:
            note = f"waiting for approval: {decision.reason or 'no decision yet'}"
            raise _StepFailed(
                StepStatus.WAITING_APPROVAL, None, note, error=None, note=note, args=args
            )
        for name in decision.edited or {}:
            ctx.resolution[name] = ResolutionMethod.EDITED
        ctx.note = _join_note(ctx.note, f"approved{who}")
        return dict(decision.args)

    async def _reason(self, ctx: _Ctx, results: Mapping[int, StepResult]) -> StepResult:
        step = ctx.step
        if self.reasoner is None:
            message = (
                f"step {step.id}: reasoning step skipped: no model to reason with "
                f"(its expected output is a description, not a result)"
            )
            await self.bus.emit(self._warn(step.id, "REASONING_SKIPPED", message))
            return self._result(ctx, StepStatus.SKIPPED, None, None, note=message)
        inputs = {
            d: results[d]
            for d in step.deps
            if d in results and results[d].status is StepStatus.SUCCEEDED
        }
        ctx.phase = "reasoning"
        ctx.llm_calls += 1
        try:
            answer = await self.reasoner.reason(step, inputs)
        except CircuitOpenError as exc:
            raise _StepFailed(
                StepStatus.FAILED, ErrorKind.CIRCUIT_OPEN, f"step {step.id}: reasoning: {exc}"
            ) from exc
        except ModelError as exc:
            raise _StepFailed(
                StepStatus.FAILED, ErrorKind.MODEL_ERROR, f"step {step.id}: reasoning: {exc}"
            ) from exc
        if _is_empty(answer):
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.EMPTY_OUTPUT,
                f"step {step.id}: the reasoning model gave an empty answer",
            )
        return self._result(ctx, StepStatus.SUCCEEDED, None, None, output=answer, raw_output=answer)

    def _tool_settings(self, spec: ToolSpec) -> _ToolSettings:
        """A tool's breaker, call timeout, output limit, retry policy and call slots.

        Looked up once per tool and run (the configuration does not change in a run).
        """
        key = (spec.server, spec.name)
        found = self._settings.get(key)
        if found is None:
            found = self._settings[key] = (
                self.breakers.tool(spec.server, spec.name),
                self.config.timeout_for(spec),
                self.config.output_limit_for(spec),
                self.config.tool_retry.policy() if self._retryable(spec) else _NO_RETRY,
                self._tool_slots(spec),
            )
        return found

    def _tool_slots(self, spec: ToolSpec) -> asyncio.Semaphore | None:
        """The semaphore bounding a tool's concurrent calls, if it has a limit."""
        limit = self.config.concurrency_for(spec)
        if limit is None:
            return None
        slots = self._slots.get(spec.qualified_name)
        if slots is None:
            slots = self._slots[spec.qualified_name] = asyncio.Semaphore(limit)
        return slots

    def _retryable(self, spec: ToolSpec) -> bool:
        if spec.hints.destructive:
            return False
        return spec.hints.safe or self.config.retry_unsafe

    def _check_finite(self, ctx: _Ctx, args: Mapping[Any, Any]) -> None:
        """Refuse NaN and infinite numbers in arguments (``ARGS_INVALID``).

        Checked on the plan's literals before resolution (so that no coercion turns them
        into something else) and on the resolved arguments before the call.
        """
        if non_finite(args) is None:  # the common case: one walk, nothing to word
            return
        for key, value in args.items():
            bad = non_finite(value)
            if bad is None:
                continue
            name = key if isinstance(key, str) else f"positional argument {key + 1}"
            message = (
                f"step {ctx.step.id}: argument {name!r} holds {bad}, which is not a finite "
                f"number (JSON has no such value; a plan literal like 1e999 overflows to it); "
                f"the tool was not called"
            )
            literal = ctx.resolution.get(name) is ResolutionMethod.LITERAL
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.ARGS_INVALID,
                message,
                failure=StepError(
                    ErrorKind.ARGS_INVALID,
                    message,
                    args=(name,),
                    literal_args=(name,) if literal else (),
                ),
            )

    def _tool_call(
        self, ctx: _Ctx, spec: ToolSpec, args: dict[str, Any], timeout: float | None
    ) -> Awaitable[Any]:
        """One tool call, to await: driven in the step's task, or in a task of its own.

        Without a call timeout, a call that is a coroutine is driven in the step's own
        task (`_InlineCall`, no task per call); otherwise it runs in a task of its own
        (`_await_task`). Either way the wait never depends on the tool: on a timeout, or
        when this step is cancelled, the call is cancelled and not waited for.

        Raises:
            pydantic.ValidationError: the arguments do not fit the tool's schema
                (found before the call, on the direct path).
        """
        step, validated = ctx.step, ctx.validated
        ctx.validated = None  # used once: not kept alive while the tool runs (a retry validates)
        if type(self.runner) is LocalToolRunner:
            config = self.trace.tool_config(step.id, spec.name) if self.trace is not None else None
            # the resolver's validation, when it is of these very arguments
            model = validated[1] if validated is not None and validated[0] is args else None
            direct = None if config is not None or not self._runner_own else direct_coroutine(
                spec, args, validated=model, callbacks=self._callbacks
            )  # the tool's own coroutine: no wrapper to pass every turn through
            coro = direct if direct is not None else self.runner.call(
                spec, args, config=config, validated=model, callbacks=self._callbacks
            )
        else:
            coro = self.runner.call(spec, args)
        if timeout is None and type(coro) is CoroutineType:
            # no task of its own: driven here, abandoned (`_InlineCall`) if the step stops
            return _InlineCall(coro, copy_context(), self, ctx, spec)
        return self._await_task(ctx, spec, coro, timeout)

    async def _await_task(
        self, ctx: _Ctx, spec: ToolSpec, coro: Awaitable[Any], timeout: float | None
    ) -> Any:
        """Run a tool call in a task of its own; wait for it at most ``timeout`` seconds.

        Raises:
            TimeoutError: the call took longer than ``timeout``; the message says
                whether the tool was left running.
            asyncio.CancelledError: the step was cancelled.
        """
        step = ctx.step
        call = asyncio.ensure_future(coro)
        if timeout is None:  # the cheapest wait that can stop waiting: a future of our own
            waiter = asyncio.get_running_loop().create_future()
            call.add_done_callback(functools.partial(_wake, waiter))
            try:
                await waiter
            except asyncio.CancelledError:
                self._abandon(call, step, spec)  # nothing to do if the call itself ended so
                raise
            return call.result()
        try:
            done, _ = await asyncio.wait({call}, timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(call, step, spec)
            raise
        if call in done:
            return call.result()
        self._abandon(call, step, spec)
        for _ in range(3):  # a tool that honours cancellation ends within a few loop turns
            if call.done():
                break
            await asyncio.sleep(0)
        if isinstance(self.runner, LocalToolRunner) and sync_only(spec.tool):
            how = "its thread cannot be stopped: the call was abandoned"
        elif call.done():
            how = "the call was cancelled"
        else:
            how = "the tool ignored the cancellation: it was left running, detached"
            step_log(self.run_id, step.id).warning(
                "step {}: tool {!r} ignored the cancellation after its timeout; "
                "left running, detached (its result will be dropped)",
                step.id,
                spec.name,
            )
        raise TimeoutError(how)

    def _stop_call(
        self,
        ctx: _Ctx,
        spec: ToolSpec,
        context: Context,
        coro: Coroutine[Any, Any, Any],
        cancel: asyncio.CancelledError,
    ) -> bool:
        """Whether a cancellation met by an `_InlineCall` stops its step.

        It does when the scheduler cancelled the step or its step timeout ran out: the
        call then goes on in a task of its own, which gets the cancellation first, and
        is abandoned (`_detach`). Any other cancellation (e.g. the tool's own timeout)
        is the tool's.
        """
        deadline = ctx.deadline
        if current_task() not in self._stopping and (deadline is None or not deadline.expired()):
            return False
        loop = asyncio.get_running_loop()
        self._detach(loop.create_task(_resumed(coro, cancel), context=context), ctx.step, spec)
        return True

    def _abandon(self, call: asyncio.Future[Any], step: Step, spec: ToolSpec) -> None:
        """Cancel a tool call and stop waiting for it; keep it referenced until it ends."""
        if call.done():
            return
        call.cancel()
        self._detach(call, step, spec)

    def _detach(self, call: asyncio.Future[Any], step: Step, spec: ToolSpec) -> None:
        """Stop waiting for a tool call; keep it referenced (and logged) until it ends."""
        self._detached.add(call)
        call.add_done_callback(
            functools.partial(self._detached_done, self.run_id, step.id, spec.name)
        )

    def _detached_done(
        self, run_id: str, step_id: int, tool: str, call: asyncio.Future[Any]
    ) -> None:
        self._detached.discard(call)
        if call.cancelled():
            return
        exc = call.exception()  # retrieved, so that asyncio does not report it
        how = f"raised {type(exc).__name__}" if exc is not None else "returned"
        step_log(run_id, step_id).warning(
            "step {}: the abandoned call of tool {!r} {} after all; its result was dropped",
            step_id,
            tool,
            how,
        )

    async def _call(self, ctx: _Ctx, spec: ToolSpec, args: dict[str, Any]) -> StepResult:
        step = ctx.step
        if ctx.finite is not args:  # (approval may have changed them)
            self._check_finite(ctx, args)
        ctx.args = args
        settings = self._tool_settings(spec)
        policy, slots = settings[3], settings[4]
        try:
            if policy.attempts <= 1 and slots is None:  # one attempt: what retry_async does
                output, raw_out = await self._attempt(ctx, spec, args, settings)
            else:
                output, raw_out = await self._attempts(ctx, spec, args, settings)
        except _AttemptFailed as failed:
            if failed.kind is ErrorKind.EMPTY_OUTPUT and self.config.empty_output == "warn":
                note = f"{failed.message}; accepted (empty_output='warn')"
                await self.bus.emit(self._warn(step.id, "EMPTY_OUTPUT_ACCEPTED", note))
                return self._result(
                    ctx,
                    StepStatus.SUCCEEDED,
                    None,
                    None,
                    output=failed.output,
                    raw_output=failed.raw,
                    note=note,
                )
            tries = f" after {ctx.attempts} attempts" if ctx.attempts > 1 else ""
            not_retried = ""
            if ctx.attempts == 1 and not self._retryable(spec):
                not_retried = " (not retried: the tool is not marked read-only or idempotent)"
                if spec.hints.destructive:
                    not_retried = " (not retried: the tool is destructive)"
            message = f"{failed.message}{tries}{not_retried}"
            raise _StepFailed(
                StepStatus.FAILED,
                failed.kind,
                message,
                output=failed.output,
                raw_output=failed.raw,
                failure=StepError(failed.kind, message, cause=failed.cause),
            ) from failed
        kept: str | None = None
        warnings = ctx.warnings
        if warnings:
            kept = f"the output differs from what the tool returned: {'; '.join(warnings)}"
            for warning in warnings:
                message = f"step {step.id}: tool {spec.name!r}: {warning}"
                await self.bus.emit(self._warn(step.id, "OUTPUT_NOT_JSON", message))
        return self._result(
            ctx, StepStatus.SUCCEEDED, None, None, output=output, raw_output=raw_out, note=kept
        )

    async def _attempt(
        self, ctx: _Ctx, spec: ToolSpec, args: dict[str, Any], settings: _ToolSettings
    ) -> tuple[Any, Any]:
        """One call of the tool: its checked output and raw output.

        Raises:
            _AttemptFailed: the call failed (the kind says how; `retry` whether another
                attempt may succeed).
            _StepFailed: the tool's circuit is open (not called).
        """
        step = ctx.step
        breaker, timeout, output_limit = settings[0], settings[1], settings[2]
        try:
            breaker.before_call()
        except CircuitOpenError as exc:
            raise _StepFailed(
                StepStatus.FAILED,
                ErrorKind.CIRCUIT_OPEN,
                f"step {step.id}: tool {spec.name!r} not called: {exc}",
                args=None,
            ) from exc
        ctx.attempts += 1
        self.usage.tool_calls += 1
        safe = spec.hints.safe
        if not safe:
            ctx.unsafe_call = True
        if self.bus.listening:
            rest = self.bus.deliver(
                ToolCallStarted.of(
                    run_id=self.run_id,
                    step_id=step.id,
                    tool=spec.name,
                    args=args,
                    attempt=ctx.attempts,
                    plan_version=self._plan_version,
                    safe=safe,
                )
            )
            if rest is not None:  # e.g. the run store commits an unsafe call's start
                await rest
        try:
            call = self._tool_call(ctx, spec, args, timeout)
            raw = await call
            # a call in a task of its own is waited for; an inline one says
            ctx.waited = call.waited if type(call) is _InlineCall else True
        except asyncio.CancelledError:
            breaker.release()
            raise
        except TimeoutError as exc:
            breaker.record_failure()
            raise _AttemptFailed(
                ErrorKind.TOOL_TIMEOUT,
                f"step {step.id}: tool {spec.name!r} timed out after {timeout}s "
                f"(args {_short(args)}); {exc}",
            ) from exc
        except Exception as exc:  # noqa: BLE001 - any tool failure is TOOL_ERROR
            breaker.record_failure()
            raise _AttemptFailed(
                ErrorKind.TOOL_ERROR,
                f"step {step.id}: tool {spec.name!r} raised {type(exc).__name__}: "
                f"{_cut(str(exc), 500)} (args {_short(args)})",
                cause=f"{type(exc).__name__}: {_cut(str(exc), 500)}",
            ) from exc
        breaker.record_success()
        try:
            output, raw_out, found = check_output(raw, limit=output_limit)
        except ToolOutputError as exc:
            raise _AttemptFailed(
                ErrorKind.TOOL_ERROR,
                f"step {step.id}: tool {spec.name!r} returned an output that cannot be "
                f"kept: {exc} (args {_short(args)})",
                retry=False,
                cause=str(exc),
            ) from exc
        ctx.warnings = found
        payload = _error_flag(raw) or error_payload(output, self.config.error_payload_keys)
        if payload is not None:
            raise _AttemptFailed(
                ErrorKind.TOOL_ERROR,
                f"step {step.id}: tool {spec.name!r} returned an error: "
                f"{_cut(payload, 500)} (args {_short(args)})",
                output,
                raw_out,
                retry=self.config.retry_error_payloads,
                cause=_cut(payload, 500),
            )
        if _is_empty(output):
            ctx.empties += 1
            raise _AttemptFailed(
                ErrorKind.EMPTY_OUTPUT,
                f"step {step.id}: tool {spec.name!r} returned an empty output "
                f"({output!r}) (args {_short(args)})",
                output,
                raw_out,
            )
        return output, raw_out

    async def _attempts(
        self, ctx: _Ctx, spec: ToolSpec, args: dict[str, Any], settings: _ToolSettings
    ) -> tuple[Any, Any]:
        """`_attempt` under the tool's retry policy and call slots."""
        step = ctx.step
        policy, slots = settings[3], settings[4]

        async def attempt() -> tuple[Any, Any]:
            if slots is None:
                return await self._attempt(ctx, spec, args, settings)
            async with slots:  # the tool is at its limit: wait for a call to end
                return await self._attempt(ctx, spec, args, settings)

        def retry_if(exc: BaseException) -> bool:
            if not isinstance(exc, _AttemptFailed) or not exc.retry:
                return False
            if exc.kind is ErrorKind.EMPTY_OUTPUT:
                if self.config.empty_output == "warn":
                    return False
                return ctx.empties < self.config.empty_output_attempts
            return True

        async def on_retry(n: int, exc: BaseException, delay: float) -> None:
            message = (
                f"step {step.id}: retrying safe tool {spec.name!r} after attempt {n} of "
                f"{policy.attempts} failed ({exc}); next attempt in {delay:.2f}s"
            )
            await self.bus.emit(self._warn(step.id, "TOOL_RETRY", message))

        return await retry_async(attempt, policy, retry_if, on_retry=on_retry)


def _waits(result: StepResult | None) -> bool:
    return result is not None and result.status is StepStatus.WAITING_APPROVAL


def _held(steps: list[Step], results: Mapping[int, StepResult]) -> set[int]:
    """The steps without a result that depend, directly or not, on a waiting step."""
    blocked = {sid for sid, r in results.items() if _waits(r)}
    held: set[int] = set()
    grew = True
    while grew:
        grew = False
        for s in steps:
            if s.id not in results and s.id not in held and s.deps & (blocked | held):
                held.add(s.id)
                grew = True
    return held


class _InlineCall:
    """A tool call awaited in its step's own task, as if it ran in a task of its own.

    No task per call: the call's coroutine is driven here, in a copy of the step's
    context (as a task would run it), and everything is passed through to it (results,
    exceptions, a cancellation that is not the step's, e.g. the tool's own timeout). A
    cancellation that stops the step (its executor says so, and hands the call to a task
    of its own that throws it in: `Executor._stop_call`) is not waited for: a tool that
    ignores it is left running, detached, as with a task per call. Without an executor
    (the rest of such a call, `_resumed`) every cancellation is the call's.
    """

    __slots__ = ("_context", "_coro", "_ctx", "_error", "_executor", "_spec", "waited")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        context: Context | None,
        executor: Executor | None = None,
        ctx: _Ctx | None = None,
        spec: ToolSpec | None = None,
        *,
        error: BaseException | None = None,
    ) -> None:
        self._coro = coro
        self._context = context
        self._executor = executor
        self._ctx = ctx
        self._spec = spec
        self._error = error
        self.waited = False
        """Whether the call yielded to the event loop (waited for something)."""

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, context = self._coro, self._context
        value: Any = None
        error = self._error
        while True:
            try:
                if context is None:
                    yielded = coro.send(value) if error is None else coro.throw(error)
                elif error is None:
                    yielded = context.run(coro.send, value)
                else:
                    yielded = context.run(coro.throw, error)
            except StopIteration as end:
                return end.value
            value = error = None
            self.waited = True
            try:
                value = yield yielded
            except asyncio.CancelledError as cancel:
                if self._stops(coro, cancel):
                    raise  # the step stops; the call went on in a task of its own
                error = cancel
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - passed on to the call, as a task would
                error = exc

    def _stops(self, coro: Coroutine[Any, Any, Any], cancel: asyncio.CancelledError) -> bool:
        """Whether ``cancel`` stops the step (`Executor._stop_call`), not only the call."""
        executor, ctx, spec, context = self._executor, self._ctx, self._spec, self._context
        if executor is None or ctx is None or spec is None or context is None:
            return False
        return executor._stop_call(ctx, spec, context, coro, cancel)


async def _resumed(coro: Coroutine[Any, Any, Any], cancel: asyncio.CancelledError) -> Any:
    """The rest of an abandoned `_InlineCall`, in a task of its own: it gets ``cancel``."""
    return await _InlineCall(coro, None, error=cancel)


def _wake(waiter: asyncio.Future[None], _call: asyncio.Future[Any]) -> None:
    if not waiter.done():  # not cancelled meanwhile
        waiter.set_result(None)


def _call_key(step: Step) -> str:
    """The call a step makes, as text: tool, server and arguments (as written)."""
    return json.dumps(
        [step.tool, step.server, to_jsonable(step.args), to_jsonable(list(step.positional))],
        sort_keys=True,
        default=str,
    )


@dataclass(frozen=True)
class _Fed:
    """A feed item on the scheduler's queue (``item`` None: the feed ended)."""

    item: FeedItem | None


async def _pump(feed: AsyncIterator[FeedItem], queue: asyncio.Queue[Any]) -> None:
    """Move a feed's items onto the scheduler's queue, then its end."""
    async for item in feed:
        queue.put_nowait(_Fed(item))
        if isinstance(item, PlanComplete):
            return
    queue.put_nowait(_Fed(None))


class _Schedule:
    """The scheduler's state for one run: steps known, waiting, ready, running, done."""

    def __init__(
        self,
        prior: dict[int, StepResult],
        feedback: Mapping[int, StepError],
        view: Mapping[int, StepResult],
    ) -> None:
        self.prior = prior
        self.feedback = feedback
        self.view = view
        self.steps: dict[int, Step] = {}
        self.ids: set[int] = set()
        """The ids of the steps known (a live set: a step's references are checked in it)."""
        self.complete = False
        self.blockers: dict[int, set[int]] = {}
        """Steps not started, with the dependencies they still wait for."""
        self.waiters: dict[int, set[int]] = {}
        """For a step id, the steps whose blockers hold it."""
        self.held: set[int] = set()
        """Steps not started that wait for the whole plan (not safe to start early)."""
        self.ready: deque[int] = deque()
        self.running: dict[int, asyncio.Task[Any]] = {}
        self.done: set[int] = set()
        self.order: list[int] = []
        self.live = False
        """Whether the scheduler loop runs (ending steps release their dependents)."""
        self.spare: dict[str, StepResult] = {}
        """Succeeded results of withdrawn steps without references, by call
        (`_call_key`): a step making the same call reuses one instead of running."""

    def pending(self) -> list[Step]:
        """The steps with no result in this run yet."""
        return [s for sid, s in self.steps.items() if sid not in self.done]

    def wait(self, step: Step, *, early: bool) -> None:
        """Queue a step: it starts when its dependencies are done (and it may start)."""
        sid = step.id
        self.blockers[sid] = {
            d
            for d in step.deps
            if d != sid
            and (
                (d in self.steps and d not in self.done)
                or (not self.complete and d not in self.steps and d not in self.view)
            )
        }
        waiters = self.waiters
        for d in self.blockers[sid]:
            users = waiters.get(d)
            if users is None:
                users = waiters[d] = set()
            users.add(sid)
        if not early:
            self.held.add(sid)
        self._check(sid)

    def _check(self, sid: int) -> None:
        if not self.blockers.get(sid, True) and sid not in self.held:
            del self.blockers[sid]
            self.ready.append(sid)

    def finished(self, sid: int, *, release: bool = True) -> None:
        """A step has its result; ``release``: its dependents may go on."""
        self.done.add(sid)
        self.order.append(sid)
        if not release:
            return
        for other in self.waiters.pop(sid, ()):
            deps = self.blockers.get(other)
            if deps is not None and sid in deps:
                deps.discard(sid)
                self._check(other)

    def started_users(self, sid: int) -> list[int]:
        """Steps that started or finished using this step's result (transitively)."""
        out: list[int] = []
        todo = [sid]
        while todo:
            cur = todo.pop()
            for other, step in self.steps.items():
                if other in out or other == sid or cur not in step.deps:
                    continue
                if other in self.running or other in self.done:
                    out.append(other)
                    todo.append(other)
        return out

    def unstart(self, sid: int) -> None:
        """Forget a step's start and end (it was cancelled or its result discarded)."""
        self.done.discard(sid)
        if sid in self.order:
            self.order.remove(sid)
        if sid in self.ready:
            self.ready.remove(sid)
        self.blockers.pop(sid, None)
        self.held.discard(sid)

    def forget(self, sid: int) -> None:
        """Drop a withdrawn step; the steps waiting for it wait for its successor."""
        self.unstart(sid)
        self.steps.pop(sid, None)
        self.ids.discard(sid)
        for other, step in self.steps.items():
            if other in self.blockers and sid in step.deps and not self.complete:
                self.blockers[other].add(sid)
                self.waiters.setdefault(sid, set()).add(other)

    def release_all(self) -> None:
        """The plan is complete: nothing is held, nobody waits for a step never written."""
        self.held.clear()
        steps, done = self.steps, self.done
        for sid in list(self.blockers):  # linear in the dependencies, not in the steps
            deps = self.blockers[sid]
            if deps:
                deps.intersection_update([d for d in deps if d in steps and d not in done])
            self._check(sid)


def _named(step_id: int, message: str) -> str:
    prefix = f"step {step_id}"
    return message if message.lower().startswith(prefix) else f"{prefix}: {message}"


def _join_note(note: str | None, extra: str) -> str:
    return f"{note}; {extra}" if note else extra


_NONE_MALFORMED: Mapping[str, list[tuple[str, str]]] = MappingProxyType({})
"""`Executor._malformed` of a step without a malformed reference."""

_REFS = frozenset({Ref, Template})
"""A plan's references: no literal number in them."""

_TURN_EVERY = 8
"""A task running steps back to back gives the event loop a turn at least this often
(`Executor._run_step`; a tool call that waits gives one)."""

_PLAIN_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})


def _error_flag(raw: Any) -> str | None:
    """The message of an MCP-style result object whose ``isError`` is true."""
    if type(raw) in _PLAIN_TYPES:  # plain data has no such attribute
        return None
    for attr in ("isError", "is_error"):
        if getattr(raw, attr, None) is True:
            content = getattr(raw, "content", None)
            return _as_text(content) if content else f"the tool reported {attr}=true"
    return None
