"""`Executor`: the reusable, reentrant runner of plans (each run an `ExecutorRun`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from planexec._retry import BreakerRegistry
from planexec.config import ExecutorSettings
from planexec.events import EventBus
from planexec.executor._protocols import (
    Approvals,
    Guard,
    LocalToolRunner,
    Reasoner,
    ToolRunner,
    ToolSelector,
)
from planexec.executor._run import ExecutorRun, may_start_early
from planexec.plan import Plan, Step
from planexec.resolver import ArgResolver
from planexec.results import StepError, StepResult, Usage
from planexec.stepfeed import FeedItem, PlanComplete
from planexec.tools import ToolCatalog

if TYPE_CHECKING:
    from planexec.tracing import RunTrace

_NOT_CANCELLED = object()
"""`Executor._pending` when no cancel waits for the next run."""


class Executor:
    """Runs plans: a DAG scheduler, argument resolution and resilient tool calls.

    An executor holds collaborators and configuration only; each run's state is its
    own `ExecutorRun`, so one executor may run any number of plans at once.

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
        self.catalog = catalog
        """The tools."""
        self.resolver = resolver if resolver is not None else ArgResolver()
        """The argument resolver."""
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
        self._detached: set[asyncio.Future[Any]] = set()
        """Abandoned tool calls of every run, until they end."""
        self._live: set[ExecutorRun] = set()
        """The runs under way."""
        self._last: ExecutorRun | None = None
        """The run started last (what `results`, `cancelled` ... describe)."""
        self._pending: Any = _NOT_CANCELLED
        """A cancel made while no run was under way (its reason): it stops the next run."""

    # ------------------------------------------------------------------ runs

    async def run(
        self,
        plan: Plan,
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
        plan_version: int = 1,
    ) -> list[StepResult]:
        """Run a plan and return one result per step, in the order they finished.

        Any number of runs may go on at once on one executor; each is an `ExecutorRun`
        of its own (`start` returns it, to cancel or inspect that run alone).

        Args:
            plan: The plan (checked).
            prior: Results from earlier runs or plan attempts. A step of the plan whose
                prior result SUCCEEDED is not run again: its result is reused (emitted
                as `StepFinished` with a ``reused`` note). Every prior result is visible
                to references.
            feedback: Per-step re-resolution feedback for the resolver: the `StepError`
                of the step's previous attempt (it names the arguments to re-ask).
            plan_version: The plan attempt number, put on events.

        Raises:
            asyncio.CancelledError: the task running this was cancelled; every
                unfinished step was first recorded as CANCELLED.
        """
        run = self._open(plan_version)
        return await self._main(run, PlanComplete(plan), len(plan.steps), prior, feedback)

    async def run_feed(
        self,
        feed: AsyncIterator[FeedItem],
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
        plan_version: int = 1,
    ) -> list[StepResult]:
        """Run a plan whose steps arrive over time (a streamed reply); see `run`.

        A step starts once it has arrived, its dependencies are done and, before the
        `PlanComplete` item, only when it is *safe to start early* (`may_start_early`).
        A withdrawn step (`StepWithdrawn`, or one the final plan does not hold as it
        arrived) is cancelled if running and its result discarded (`discarded`, a
        `StepDiscarded` event), and so are the started steps that used its result. A
        step waiting on a step that never arrives runs when the plan is complete and
        fails as ``MISSING_REFERENCE``. A feed that ends without `PlanComplete` completes
        an empty plan (every started step is discarded).
        """
        run = self._open(plan_version)
        return await self._main(run, feed, 0, prior, feedback)

    def start(
        self,
        plan: Plan,
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
        plan_version: int = 1,
    ) -> ExecutorRun:
        """Start a run of ``plan`` in a task of its own; its handle (see `run`).

        Await the handle for the results; ``handle.cancel()`` cancels that run only.
        Call it with an event loop running.
        """
        run = self._open(plan_version)
        run.task = asyncio.ensure_future(
            self._main(run, PlanComplete(plan), len(plan.steps), prior, feedback)
        )
        return run

    def _open(self, plan_version: int) -> ExecutorRun:
        run = ExecutorRun(self, plan_version)
        self._last = run
        if self._pending is not _NOT_CANCELLED:
            reason, self._pending = self._pending, _NOT_CANCELLED
            run.cancel(reason)
        return run

    async def _main(
        self,
        run: ExecutorRun,
        source: PlanComplete | AsyncIterator[FeedItem],
        steps: int,
        prior: Mapping[int, StepResult] | None,
        feedback: Mapping[int, StepError] | None,
    ) -> list[StepResult]:
        self._live.add(run)
        try:
            return await run.main(source, steps, prior, feedback)
        finally:
            self._live.discard(run)

    # ------------------------------------------------------------------ cancelling

    def cancel(self, reason: str | None = None) -> None:
        """Stop every run under way: running steps and steps not started become CANCELLED.

        Each run then returns normally with its results so far, and `cancelled` is
        true. Called while no run is under way, it cancels the next one at once. To
        cancel one run of several, cancel its handle (`start`, `ExecutorRun.cancel`).
        Call it from the event loop's thread. Running tool calls are cancelled and not
        waited for.

        Args:
            reason: Why (kept in `cancel_reason` and put on the cancelled steps).
        """
        if not self._live:
            if self._pending is _NOT_CANCELLED or self._pending is None:
                self._pending = reason
            return
        for run in list(self._live):
            run.cancel(reason)

    @property
    def cancelled(self) -> bool:
        """Whether the last run started was cancelled (or a cancel waits for the next)."""
        if self._pending is not _NOT_CANCELLED:
            return True
        return self._last is not None and self._last.cancelled

    @property
    def cancel_reason(self) -> str | None:
        """Why the last run started was cancelled, when a reason was given.

        ``run timeout of Ns exceeded`` when ``run_timeout`` ran out.
        """
        if self._pending is not _NOT_CANCELLED:
            return self._pending  # type: ignore[no-any-return]
        return self._last.cancel_reason if self._last is not None else None

    # ------------------------------------------------------------------ the last run

    @property
    def results(self) -> dict[int, StepResult]:
        """Every result known in the last run started (prior ones included), by step id.

        With several runs at once, ask each run's handle (`start`).
        """
        return self._last.results if self._last is not None else {}

    @property
    def reused(self) -> set[int]:
        """Steps of the last run started whose succeeded prior result was reused."""
        return self._last.reused if self._last is not None else set()

    @property
    def discarded(self) -> list[StepResult]:
        """Results of the last run's streamed steps that the final plan does not hold.

        Cancelled, or their results discarded; in the order discarded.
        """
        return self._last.discarded if self._last is not None else []

    @property
    def runs(self) -> frozenset[ExecutorRun]:
        """The runs under way."""
        return frozenset(self._live)

    @property
    def detached_calls(self) -> int:
        """Abandoned tool calls (timed out or cancelled) that have not ended yet."""
        return sum(1 for call in self._detached if not call.done())

    def may_start_early(self, step: Step) -> bool:
        """Whether a step may start before the plan is complete.

        Only a step whose tool is known and safe (read-only or idempotent, not
        destructive; `planexec.tools.ToolHints.safe`) with readable arguments, or a
        reasoning step (no tool, no server to select one from): what it does cannot
        matter if a later draft drops it. Everything else waits for the whole plan and
        its checks.
        """
        return may_start_early(self.catalog, step)
