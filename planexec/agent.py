"""`PlanExecuteAgent`: plan → execute → recover → evaluate → answer.

One run, in order:

1. **plan** — the `Planner` asks the model for a plan (purpose ``plan``) and re-prompts
   on diagnostics within its own budget;
2. **execute** — the `Executor` runs the plan as a DAG; the resolver's LLM fallback and
   reasoning steps use the same run-bound, resilient model client; the `Limits` guard
   counts steps, per-tool calls and repeated sequences (the client, resolver, reasoner,
   limits and executor of each run are assembled by the agent's
   `planexec.runtime.Runtime`, as for every other entry point). A step that needs a
   person's approval (`planexec.approval`) and gets no decision waits: once nothing
   else can run, the run ends ``WAITING_APPROVAL`` (no recovery, no answer) until a
   decision is recorded and the run resumed;
3. **recover** — each failed step gets a `Decision` from the `RecoveryPolicy`:
   ``RERESOLVE`` and ``RETRY_STEP`` re-run the failed steps of the same plan (succeeded
   steps are passed as ``prior`` and not run again; re-resolved steps get their failure
   as feedback); ``REPLAN`` asks for a new plan that keeps the succeeded steps (they are
   shown to the planner, may be referenced and are not run again); ``STOP`` ends the
   run. A blocked step (``UPSTREAM_FAILED``) follows its cause: it re-runs when its
   cause does. A plan whose reply was cut off inside a step (`planexec.planner.cut_off`)
   runs what is complete, then ``PLAN_INCOMPLETE`` re-plans for the rest (the prompt
   says where the reply was cut) or ends the run ``INCOMPLETE`` — never ``SUCCEEDED``;
4. **answer** — with a model, a summarizer answers from the step results (failed steps
   are shown as failed, never as evidence; purpose ``answer``); without one the run
   carries the structured results only;
5. **evaluate** — an optional `Evaluator`; a non-success verdict re-plans with its
   lesson (``JOB_TOO_COMPLICATED`` asks for a finer decomposition).

Every decision is an event (`RecoveryDecided`), so a store or a UI sees why a run did
what it did. Cancelling the task running `PlanExecuteAgent.run` marks the running steps
``CANCELLED``, finishes the `Run` as ``CANCELLED`` (emitting `RunFinished`) and then
re-raises the cancellation; the run is available as ``agent.last_run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from langchain_core.callbacks import Callbacks
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from planexec._log import run_log, step_log
from planexec._models import ModelClient
from planexec.approval import Approver
from planexec.cancelling import cancel_watch
from planexec.config import AgentConfig
from planexec.errors import CircuitOpenError, ConfigError, ErrorKind, ModelError, RunError
from planexec.evaluation import EvalCase, EvalStatus, Evaluator, Verdict, cut, format_results
from planexec.events import (
    Event,
    EventBus,
    EventHandler,
    FallbackUsed,
    PlanCreated,
    RecoveryDecided,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from planexec.executor import Executor, ToolRunner
from planexec.output import (
    OUTPUT_TOOL,
    catalog_with_output,
    check_expected,
    check_output_plan,
    output_feedback,
    output_step,
    resolve_output,
    without_output_step,
)
from planexec.plan import Plan, Step, to_jsonable
from planexec.planner import (
    FINAL_STEP_TOOL,
    CutOff,
    Planner,
    ReplanContext,
    cut_off,
    same_call,
)
from planexec.recovery import (
    Action,
    Decision,
    Failure,
    Limits,
    RecoveryPolicy,
    RecoveryState,
    combine_decisions,
)
from planexec.resilience import BreakerRegistry
from planexec.results import (
    PlanAttempt,
    Run,
    RunStatus,
    StepError,
    StepResult,
    StepStatus,
    new_run_id,
)
from planexec.runtime import Runtime
from planexec.streaming import PlanStream, discard_diagnostics, model_streams
from planexec.tools import ToolCatalog
from planexec.tracing import RunTrace

__all__ = ["PlanExecuteAgent"]

ANSWER_SYSTEM = """You answer the user's question from the results of the steps that ran.
Use only the outputs of steps that SUCCEEDED as evidence. A step marked FAILED, BLOCKED,
SKIPPED or CANCELLED produced nothing: say what could not be found out, never guess it.
Answer directly and concisely."""


_T = TypeVar("_T")


def _run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to its end from synchronous code and return its result.

    Without a running event loop in this thread, ``asyncio.run``. With one (a Jupyter
    cell), the coroutine runs in a worker thread with its own loop (and the caller's
    context variables), and this thread waits for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()

    def work() -> None:
        try:
            outcome["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="planexec-run-sync")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def _next_version(run: Run) -> int:
    """The version of the run's next plan: after every recorded one."""
    return max((a.version for a in run.attempts), default=0) + 1


@dataclass
class _RunCtx:
    run: Run
    bus: EventBus
    client: ModelClient | None
    executor: Executor
    limits: Limits
    state: RecoveryState
    output_type: type[BaseModel] | None
    t0: float = field(default_factory=time.perf_counter)
    current: PlanAttempt | None = None
    expected: Mapping[str, Any] | None = None
    allow_replan: bool = True
    """Whether a ``REPLAN`` decision may re-plan (off for a given plan: `execute_plan`)."""
    failed_destructive: list[tuple[int, Step, StepResult]] = field(default_factory=list)
    """Calls of destructive tools that started and failed: (plan version, step, result)."""
    cut: CutOff | None = None
    """Where the current plan's reply was cut off (None: the plan is complete)."""
    cut_results: dict[int, StepResult] = field(default_factory=dict)
    """The current plan's steps cut off inside, recorded as not run (SKIPPED)."""
    trace: RunTrace | None = None
    """The run's trace (`planexec.tracing`), when the caller traces."""
    stream: PlanStream | None = None
    """The planner's reply streaming into the executor (`planexec.streaming`), until the
    plan's first executor round takes it over."""


class _Replan(Exception):
    def __init__(self, ctx: ReplanContext) -> None:
        super().__init__(ctx.reason)
        self.ctx = ctx


class _Stop(Exception):
    def __init__(self, kind: ErrorKind | None, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class PlanExecuteAgent:
    """A plan-and-execute agent over langchain-core tools.

    Args:
        model: The chat model for planning, the resolver's fallback, reasoning steps and
            the answer. None: no planner — run given plans with `execute_plan`.
        tools: langchain-core tools or a `ToolCatalog`.
        config: Every setting (`AgentConfig`); the defaults of docs/recovery.md otherwise.
        evaluator: Judges each finished run; a non-success verdict re-plans.
        store: A run store: ``store.attach(bus)`` is called for each run (or, if it has
            no ``attach``, it is subscribed as an event handler).
        output_type: A pydantic model the final result must fill: the planner is asked
            for a final ``final_answer`` step filling its fields from earlier steps'
            outputs, and `Run.output` holds the validated instance (`planexec.output`;
            docs/recovery.md, "Typed outputs and blame").
        event_handlers: Subscribers to every run's events (sync or async functions).
        policy: A recovery policy replacing the one built from ``config.recovery``.
        breakers: Circuit breakers (shared by the agent's runs); one registry by default.
        runner: How tools are called (by default from ``config.executor.backend``).
        hints: Safety hints by tool name (``{"search": {"read_only": True}}``).
        callbacks: langchain callback handlers that see every run as one tree: a parent
            run per `run` with each model and tool call under it (docs/observability.md).
        approver: The in-process approval callback (docs/approval.md): ``async def
            approve(request) -> ApprovalDecision``. Giving one turns approval on (the
            ``approval`` settings say which steps need it); without one, with
            ``approval.enabled``, such steps pause the run ``WAITING_APPROVAL``.
    """

    def __init__(
        self,
        model: BaseChatModel | None,
        tools: Iterable[BaseTool] | ToolCatalog,
        *,
        config: AgentConfig | None = None,
        evaluator: Evaluator | None = None,
        store: Any = None,
        output_type: type[BaseModel] | None = None,
        event_handlers: Sequence[EventHandler] = (),
        policy: RecoveryPolicy | None = None,
        breakers: BreakerRegistry | None = None,
        runner: ToolRunner | None = None,
        hints: Mapping[str, Mapping[str, Any]] | None = None,
        callbacks: Callbacks = None,
        approver: Approver | None = None,
    ) -> None:
        self.model = model
        """The chat model (None: no planner, no fallback, no answer)."""
        self.catalog = tools if isinstance(tools, ToolCatalog) else ToolCatalog(tools, hints=hints)
        """The tools."""
        self.config = config or AgentConfig()
        """The settings."""
        self.runtime = Runtime(
            model,
            self.catalog,
            self.config,
            breakers=breakers,
            runner=runner,
            callbacks=callbacks,
            approver=approver,
        )
        """Assembles each run's model client, resolver, reasoner, limits and executor
        (it checks the config's tool names against the catalog)."""
        self.policy = policy or RecoveryPolicy.from_settings(self.config.recovery)
        """The recovery policy (replace it to change the table or the budgets)."""
        self.evaluator = evaluator
        """The evaluator, if any."""
        self.store = store
        """The run store, if any."""
        self.output_type = output_type
        """The default typed output, if any."""
        self.event_handlers = list(event_handlers)
        """Subscribers to every run's events."""
        self.breakers: BreakerRegistry = self.runtime.breakers
        """Circuit breakers for the model provider and the tool servers (the runtime's)."""
        self.runner: ToolRunner = self.runtime.runner
        """How tools are called (the runtime's: in process, or on Ray with
        ``executor.backend = "ray"``)."""
        self.last_run: Run | None = None
        """The latest run started (also when it was cancelled)."""
        ps = self.config.planner
        self.planner: Planner | None = None
        """The planner (None without a model)."""
        if model is not None:
            self.planner = Planner(
                model,
                self.catalog,
                dialect=ps.dialect,
                mode=ps.mode,
                draft_policy=ps.draft_policy,
                max_reprompts=ps.max_reprompts,
                output_budget=ps.output_budget,
                instructions=ps.instructions,
            )

    # ------------------------------------------------------------------ public API

    async def run(
        self,
        question: str,
        *,
        output_type: type[BaseModel] | None = None,
        expected: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        event_handlers: Sequence[EventHandler] = (),
        config: RunnableConfig | None = None,
    ) -> Run:
        """Answer ``question``: plan, execute, recover, answer, evaluate.

        Args:
            question: The question.
            output_type: A typed output for this run (overrides the agent's).
            expected: Expected values of fields of the typed output; a difference is
                ``OUTPUT_UNEXPECTED``, blamed on the steps the fields came from
                (docs/recovery.md, "Typed outputs and blame").
            run_id: The run's id (a new one by default).
            event_handlers: Extra subscribers for this run's events.
            config: A langchain ``RunnableConfig`` for the run: its ``callbacks``, ``tags``,
                ``metadata`` and ``run_name`` apply to the run's parent callback run and
                every model and tool call under it (docs/observability.md).

        Returns:
            The finished `Run` (``SUCCEEDED``, ``FAILED``, or ``INCOMPLETE`` when a plan
            reply was cut off and the re-plan budget is spent; failures are in it, not
            raised). A cut-off plan re-plans for the rest (``PLAN_INCOMPLETE``).

        Raises:
            asyncio.CancelledError: the run was cancelled (``last_run`` is CANCELLED).
            RunError: there is no model to plan with (use `execute_plan`).
            ConfigError: ``expected`` without an output type, or naming unknown fields.
        """
        if self.planner is None:
            raise RunError("no model to plan with: give a model, or use execute_plan(plan)")
        self._check_expected(output_type, expected)
        ctx = await self._start(question, run_id, output_type, event_handlers, config=config)
        ctx.expected = expected
        return await self._drive(ctx, None, "")

    async def execute_plan(
        self,
        plan: Plan | str,
        *,
        question: str = "",
        output_type: type[BaseModel] | None = None,
        expected: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        event_handlers: Sequence[EventHandler] = (),
        config: RunnableConfig | None = None,
    ) -> Run:
        """Run a given plan (text or `Plan`), with recovery but without re-planning.

        Works without a model: then arguments needing the LLM fallback fail, reasoning
        steps are skipped, there is no prose answer and the `Run` carries the structured
        step results. A failure whose action is ``REPLAN`` stops the run, also when the
        agent has a model (the model then serves the resolver's fallback, reasoning
        steps, tool selection, the typed output's mapping and the answer — never the
        planner). A plan whose text was cut off inside a step runs what is complete
        and ends ``INCOMPLETE`` (``PLAN_INCOMPLETE``), never ``SUCCEEDED``. ``config``
        traces the run as in `run`.

        Raises:
            PlanParseError: the text holds no plan.
            ConfigError: ``expected`` without an output type, or naming unknown fields.
        """
        from planexec.parsing import check_plan, parse_plan

        self._check_expected(output_type, expected)

        text = plan if isinstance(plan, str) else plan.source
        catalog = self._catalog_for(output_type or self.output_type)
        parsed = (
            parse_plan(
                plan,
                self.config.planner.dialect,
                draft_policy=self.config.planner.draft_policy,
                catalog=catalog,
            )
            if isinstance(plan, str)
            else plan
        )
        parsed = check_plan(parsed, catalog)
        ctx = await self._start(question, run_id, output_type, event_handlers, config=config)
        ctx.expected = expected
        ctx.allow_replan = False  # a given plan is run as given: REPLAN stops
        return await self._drive(ctx, parsed, text)

    async def resume(self, run_id: str, *, rerun_unsafe: bool = False) -> Run:
        """Continue an interrupted (or failed) run recorded in the agent's store.

        Succeeded steps are not run again; a step whose tool call started without a
        recorded result runs again only if its tool is safe (read-only or idempotent)
        or ``rerun_unsafe`` is true; otherwise it is recorded as ``UNKNOWN_OUTCOME`` and
        the run stops, saying how to force it. Then the whole loop continues (recovery,
        re-plans numbered after the recorded ones, answer, evaluation). See
        docs/durability.md, "What resume does".

        Args:
            run_id: The run to resume.
            rerun_unsafe: Also re-run interrupted calls of tools that are not safe.

        Returns:
            The run (also when it was already finished: then as recorded).

        Raises:
            RunError: the agent has no store; the run is still running in a live
                process; or it has no recorded plan and the agent has no model.
            RunNotFoundError: the store has no such run.
        """
        if self.store is None:
            raise RunError("resume needs a run store: PlanExecuteAgent(..., store=store)")
        from planexec.runs import resume_run

        return await resume_run(self, self.store, run_id, rerun_unsafe=rerun_unsafe)

    async def continue_plan(
        self,
        question: str,
        attempts: Sequence[PlanAttempt],
        *,
        run_id: str,
        version: int | None = None,
        prior: Mapping[int, StepResult] | None = None,
        announce: Sequence[Event] = (),
        event_handlers: Sequence[EventHandler] = (),
        store: Any = None,
        owner: str | None = None,
    ) -> Run:
        """Continue a run at a plan version that was already made (the hook of resume).

        The run gets ``attempts`` as its history; the plan of version ``version`` runs
        again without a new `PlanCreated` (it is on record), reusing ``prior``, and the
        loop goes on from there as in `run`: recovery, re-plans numbered after every
        recorded version (earlier re-plans count against the budget), answer,
        evaluation. `planexec.runs.resume_run` decides ``prior`` from a store.

        Args:
            question: The run's question.
            attempts: The run's plan attempts so far (with their results).
            run_id: The run's id.
            version: The version to continue (default: the latest with a plan).
            prior: Results reused instead of running their steps (succeeded ones).
            announce: Events emitted right after `RunStarted`, before anything runs.
            event_handlers: Extra subscribers for this run's events.
            store: The store the run is recorded in, when not the agent's own: its
                approval requests and decisions are honoured (docs/approval.md).
            owner: The run's lease holder (`planexec.store.RunStore.acquire_lease`),
                which claims approval decisions.

        Raises:
            RunError: no attempt of ``version`` (or none at all) has a plan.
        """
        history = list(attempts)
        attempt = next(
            (
                a
                for a in reversed(history)
                if a.plan is not None and (version is None or a.version == version)
            ),
            None,
        )
        if attempt is None:
            which = "a plan" if version is None else f"a plan of version {version}"
            raise RunError(f"run {run_id} has no attempt with {which} to continue")
        ctx = await self._start(question, run_id, None, event_handlers, store=store,
                                owner=owner)
        ctx.run.attempts = history
        ctx.state.replans = sum(1 for a in history if a.version > 1)
        for earlier in history:  # failed destructive calls stay refused after a resume
            if earlier.plan is not None:
                self._note_destructive_failures(ctx, earlier.plan, earlier.results, earlier.version)
        for event in announce:
            await ctx.bus.emit(event)
        return await self._drive(ctx, None, "", recorded=attempt, prior=prior)

    def run_sync(self, question: str, **kwargs: Any) -> Run:
        """`run` from synchronous code, also where an event loop is running (Jupyter).

        Without a running loop it starts one (``asyncio.run``); with one (a notebook
        cell), it runs the run in a worker thread with a loop of its own and waits for
        it. Tools and models bound to the caller's loop (an open `planexec.mcp.MCPToolset`)
        cannot be used from that thread: in a notebook, ``await agent.run(...)`` instead.

        Args:
            question: The question.
            **kwargs: As for `run`.
        """
        return _run_blocking(self.run(question, **kwargs))

    def execute_plan_sync(self, plan: Plan | str, **kwargs: Any) -> Run:
        """`execute_plan` from synchronous code, also where an event loop is running.

        Args:
            plan: The plan (text or `Plan`).
            **kwargs: As for `execute_plan`.
        """
        return _run_blocking(self.execute_plan(plan, **kwargs))

    async def stream(self, question: str, **kwargs: Any) -> AsyncIterator[Event]:
        """Yield the run's events as they happen, ending with `RunFinished`.

        The last event, `RunFinished`, carries the finished `Run` (``event.run``).
        Closing the iterator early cancels the run. The finished run is also
        ``last_run``.
        """
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        handlers = [*kwargs.pop("event_handlers", ()), queue.put_nowait]
        task = asyncio.create_task(self.run(question, event_handlers=handlers, **kwargs))
        task.add_done_callback(lambda _t: queue.put_nowait(None))
        try:
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield event
            await task  # re-raise what the run raised, if anything
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # ------------------------------------------------------------------ setup

    async def _start(
        self,
        question: str,
        run_id: str | None,
        output_type: type[BaseModel] | None,
        handlers: Sequence[EventHandler],
        *,
        config: RunnableConfig | None = None,
        store: Any = None,
        owner: str | None = None,
    ) -> _RunCtx:
        cfg = self.config
        run = Run(run_id=run_id or new_run_id(), question=question)
        self.last_run = run
        bus = EventBus()
        if self.store is not None:
            if hasattr(self.store, "attach"):
                self.store.attach(bus)
            else:
                bus.subscribe(self.store)
        for h in [*self.event_handlers, *handlers]:
            bus.subscribe(h)
        out_type = output_type or self.output_type
        trace = await self.runtime.start_trace(config, run_id=run.run_id, question=question)
        services = self.runtime.open_run(
            run_id=run.run_id,
            usage=run.usage,
            bus=bus,
            question=question,
            catalog=self._catalog_for(out_type),
            trace=trace,
            store=store if store is not None else self.store,
            owner=owner,
        )
        ctx = _RunCtx(
            run,
            bus,
            services.client,
            services.executor,
            services.limits,
            RecoveryState(),
            out_type,
            trace=trace,
        )
        recorded = cfg.model_dump(mode="json")
        if self.runtime.approver is not None:  # the callback turned approval on: recorded
            # so, a resume from the record without it (`planexec runs resume`) still waits
            recorded["approval"] = {**recorded["approval"], "enabled": True}
        await bus.emit(RunStarted(run_id=run.run_id, question=question, config=recorded))
        return ctx

    def _catalog_for(self, output_type: type[BaseModel] | None) -> ToolCatalog:
        if output_type is None:
            return self.catalog
        return catalog_with_output(self.catalog, output_type)

    def _check_expected(
        self, output_type: type[BaseModel] | None, expected: Mapping[str, Any] | None
    ) -> None:
        if not expected:
            return
        out_type = output_type or self.output_type
        if out_type is None:
            raise ConfigError("expected output values were given without an output_type")
        check_expected(out_type, expected)

    def _is_safe(self, result: StepResult) -> bool:
        if result.tool is None:
            return True
        spec = self.catalog.lookup(result.tool, result.server)
        if spec is None and result.tool == FINAL_STEP_TOOL:
            return True
        return spec is not None and spec.hints.safe

    # ------------------------------------------------------------------ the loop

    async def _drive(
        self,
        ctx: _RunCtx,
        given: Plan | None,
        given_text: str,
        *,
        recorded: PlanAttempt | None = None,
        prior: Mapping[int, StepResult] | None = None,
    ) -> Run:
        run = ctx.run
        try:
            try:
                async with cancel_watch(
                    self.store, run.run_id,
                    lambda request: ctx.executor.cancel(f"the run was {request.describe()}"),
                ):
                    await self._loop(ctx, given, given_text, recorded=recorded, prior=prior)
            except _Stop as stop:
                cancelled = stop.kind is ErrorKind.CANCELLED
                run.status = RunStatus.CANCELLED if cancelled else RunStatus.FAILED
                if stop.kind is ErrorKind.PLAN_INCOMPLETE:  # what was complete ran; not a success
                    run.status = RunStatus.INCOMPLETE
                run.error, run.error_kind = stop.message, stop.kind
            if run.status is not RunStatus.CANCELLED and run.error_kind is not (
                ErrorKind.MODEL_ERROR
            ):
                await self._answer_if_missing(ctx)
        except asyncio.CancelledError:
            self._mark_cancelled(ctx)
            await self._finish(ctx)
            raise
        except Exception as exc:  # e.g. a failing event subscriber: close the trace too
            if ctx.trace is not None:
                await ctx.trace.end({}, exc)
            raise
        await self._finish(ctx)
        return run

    async def _loop(
        self,
        ctx: _RunCtx,
        given: Plan | None,
        given_text: str,
        *,
        recorded: PlanAttempt | None = None,
        prior: Mapping[int, StepResult] | None = None,
    ) -> None:
        """Plan, execute, recover and re-plan until the run concludes or stops.

        Args:
            ctx: The run.
            given: A plan to run first instead of asking the planner (`execute_plan`).
            given_text: Its text.
            recorded: A plan attempt already in ``ctx.run.attempts`` whose `PlanCreated`
                is already recorded (a resumed run): it runs first, with no new version
                and no new event.
            prior: Results the first plan reuses: succeeded steps are not run again.
        """
        run = ctx.run
        replan: ReplanContext | None = None
        first = True
        while True:
            if ctx.executor.cancelled:  # a cancel request came between two rounds
                raise _Stop(
                    ErrorKind.CANCELLED,
                    ctx.executor.cancel_reason or "the run was cancelled by the caller",
                )
            attempt = recorded if first else None
            known: Mapping[int, StepResult] = (prior or {}) if first else {}
            error: str | None = None
            drafts: tuple[dict[str, Any], ...] = ()
            if attempt is not None:
                plan: Plan | None = attempt.plan
                text = attempt.text
            elif first and given is not None:
                plan, text = given, given_text
            else:
                assert self.planner is not None
                ctx.stream = self._open_stream(ctx, replan)
                try:
                    outcome = await self.planner.plan(
                        run.question,
                        context=replan,
                        output_schema=(
                            ctx.output_type.model_json_schema() if ctx.output_type else None
                        ),
                        client=ctx.client,
                        run_id=run.run_id,
                        bus=ctx.bus,
                        catalog=ctx.executor.catalog,
                        sink=ctx.stream,
                    )
                except (ModelError, CircuitOpenError) as exc:
                    await self._close_stream(ctx, f"the planner's model call failed: {exc}")
                    kind = (
                        ErrorKind.CIRCUIT_OPEN
                        if isinstance(exc, CircuitOpenError)
                        else ErrorKind.MODEL_ERROR
                    )
                    raise _Stop(kind, f"the planner's model call failed: {exc}") from exc
                except BaseException:  # cancelled (or our bug): stop what the stream started
                    await self._close_stream(ctx, "the run stopped while the plan streamed")
                    raise
                plan, text, known, error = outcome.plan, outcome.text, outcome.prior, outcome.error
                drafts = outcome.drafts
                if plan is None and error is None:
                    error = "the planner's reply held no plan"
            if attempt is None:
                attempt = PlanAttempt(
                    _next_version(run),
                    plan,
                    text,
                    reason=replan.reason if replan else None,
                    error=error,
                    drafts=[dict(d) for d in drafts],
                )
                run.attempts.append(attempt)
                ctx.current = attempt
                await ctx.bus.emit(
                    PlanCreated(
                        run_id=run.run_id,
                        version=attempt.version,
                        plan=plan,
                        text=text,
                        reason=attempt.reason,
                        error=attempt.error,
                        drafts=tuple(attempt.drafts),
                    )
                )
            first = False
            version = attempt.version
            ctx.current = attempt
            ctx.cut = cut_off(plan) if plan is not None else None
            ctx.cut_results = {}
            try:
                if plan is None:
                    await self._close_stream(ctx, error or "no steps")
                    failure = Failure(
                        ErrorKind.PLAN_PARSE,
                        f"plan {version}: no usable plan: {error or 'no steps'}",
                        plan_version=version,
                    )
                    await self._decide_round(ctx, [failure], plan, {}, text)
                    raise AssertionError("unreachable")  # pragma: no cover
                to_run = plan
                if ctx.output_type is not None:
                    problem = check_output_plan(plan, ctx.output_type)
                    if problem is not None:
                        failure = Failure(
                            problem.kind,
                            problem.message,
                            step_id=problem.step_id,
                            tool=OUTPUT_TOOL,
                            args=problem.fields,
                            plan_version=version,
                        )
                        await self._decide_round(ctx, [failure], plan, known, text)
                        raise AssertionError("unreachable")  # pragma: no cover
                    to_run = without_output_step(plan)  # instantiated in _typed_output
                if ctx.cut is not None:
                    to_run, known = await self._skip_cut(ctx, to_run, known, attempt)
                latest = await self._execute(ctx, to_run, known, attempt)
                await self._close_stream(ctx, "the plan did not run")
                if ctx.run.status in (RunStatus.CANCELLED, RunStatus.WAITING_APPROVAL):
                    return
                if ctx.cut is not None:
                    await self._incomplete(ctx, plan, {**ctx.cut_results, **latest}, text)
                await self._conclude(ctx, plan, latest, text)
                return
            except _Replan as r:
                replan = r.ctx
            finally:
                await self._close_stream(ctx, "the plan did not run")

    def _open_stream(self, ctx: _RunCtx, replan: ReplanContext | None) -> PlanStream | None:
        """Start streaming the planner's next reply into the executor, when configured.

        Only for a model that streams (`planexec.streaming.model_streams`); a plan asked
        for through structured output streams its JSON text (the json dialect).
        """
        ps = self.config.planner
        if not ps.stream or ctx.client is None or not model_streams(ctx.client.model):
            return None
        stream = PlanStream(
            ctx.executor,
            dialect=ps.dialect,
            draft_policy=ps.draft_policy,
            kept=replan.kept if replan is not None else None,
            plan_version=_next_version(ctx.run),
            run_id=ctx.run.run_id,
        )
        stream.open()
        return stream

    async def _close_stream(self, ctx: _RunCtx, reason: str) -> None:
        """Discard what a stream started when its plan does not run (no-op without one)."""
        stream, ctx.stream = ctx.stream, None
        if stream is None:
            return
        await stream.abandon(reason)
        self._note_discarded(ctx, stream)

    def _note_discarded(self, ctx: _RunCtx, stream: PlanStream) -> None:
        """Put a ``STREAM_STEP_DISCARDED`` diagnostic on the attempt for each discarded step."""
        found = discard_diagnostics(stream.executor.discarded)
        attempt = ctx.current
        if found and attempt is not None and attempt.plan is not None:
            attempt.plan = attempt.plan.with_diagnostics(found)

    async def _skip_cut(
        self,
        ctx: _RunCtx,
        plan: Plan,
        known: Mapping[int, StepResult],
        attempt: PlanAttempt,
    ) -> tuple[Plan, Mapping[int, StepResult]]:
        """Record the steps the reply was cut off inside as not run; return the rest.

        Their results (SKIPPED, with a note saying where the reply was cut) are given to
        the executor as prior results, so a step referring to one is blocked.
        """
        cut = ctx.cut
        assert cut is not None
        cut_ids = set(cut.unrunnable) & set(plan.ids)
        if not cut_ids:
            return plan, known
        note = f"not run: {cut.describe()}"
        for sid in sorted(cut_ids):
            step = plan.step(sid)
            result = StepResult(
                step_id=sid,
                tool=step.tool,
                status=StepStatus.SKIPPED,
                server=step.server,
                note=note,
                started_at=time.time(),
                duration=0.0,
            )
            step_log(ctx.run.run_id, sid).warning("step {}: {}", sid, note)
            ctx.cut_results[sid] = result
            attempt.results.append(result)
            await ctx.bus.emit(
                StepFinished(run_id=ctx.run.run_id, result=result, plan_version=attempt.version)
            )
        rest = replace(plan, steps=tuple(s for s in plan.steps if s.id not in cut_ids))
        return rest, {**known, **ctx.cut_results}

    async def _incomplete(
        self, ctx: _RunCtx, plan: Plan, latest: Mapping[int, StepResult], text: str
    ) -> None:
        """The plan ran as far as it was complete: re-plan for the rest, or end INCOMPLETE.

        Raises:
            _Replan: the policy re-plans ``PLAN_INCOMPLETE`` (the prompt says where the
                reply was cut and asks for the rest; succeeded steps are kept).
            _Stop: it may not (``execute_plan``, budget spent): the run ends INCOMPLETE.
        """
        cut = ctx.cut
        assert cut is not None and ctx.current is not None
        ran = sum(1 for r in latest.values() if r.ok)
        failure = Failure(
            ErrorKind.PLAN_INCOMPLETE,
            f"plan {ctx.current.version} is incomplete: {cut.describe()}; {ran} step(s) "
            "succeeded, the rest of the plan is missing",
            step_id=cut.step,
            plan_version=ctx.current.version,
        )
        decisions = await self._decide_round(ctx, [failure], plan, latest, text)
        # a table that neither re-plans nor stops (RERESOLVE, RETRY_STEP) cannot add steps
        reason = decisions[0].reason if decisions else "no action"
        raise _Stop(ErrorKind.PLAN_INCOMPLETE, f"{failure.message} — {reason}")

    async def _execute(
        self, ctx: _RunCtx, plan: Plan, prior: Mapping[int, StepResult], attempt: PlanAttempt
    ) -> dict[int, StepResult]:
        """Run ``plan``, re-running failed steps while the decisions allow."""
        known = dict(prior)
        feedback: dict[int, StepError] = {}
        while True:
            to_run, refused = await self._refuse_repeats(ctx, plan, known, attempt)
            stream, ctx.stream = ctx.stream, None
            if stream is not None:  # the first round runs on from what the stream started
                results = await stream.complete(to_run, prior={**known, **refused})
                self._note_discarded(ctx, stream)
            else:
                results = await ctx.executor.run(
                    to_run,
                    prior={**known, **refused},
                    feedback=feedback,
                    plan_version=attempt.version,
                )
            for r in results:
                earlier = known.get(r.step_id)
                if earlier is not None and earlier.ok and r.ok:
                    continue  # reused, not run again
                attempt.results.append(r)
            latest = {r.step_id: r for r in results}
            latest.update(refused)
            self._note_destructive_failures(ctx, plan, results, attempt.version)
            if ctx.executor.cancelled:
                ctx.run.status = RunStatus.CANCELLED
                return latest
            if any(r.status is StepStatus.WAITING_APPROVAL for r in results):
                # paused: nothing else could run; recovery waits for the decisions
                ctx.run.status = RunStatus.WAITING_APPROVAL
                return latest
            failures = self._failures(ctx, plan, latest, attempt.version)
            if not failures:
                return latest
            decisions = await self._decide_round(ctx, failures, plan, latest, attempt.text)
            # only RERESOLVE / RETRY_STEP remain here
            feedback = {
                d.failure.step_id: d.failure.error
                for d in decisions
                if d.action is Action.RERESOLVE
                and d.failure is not None
                and d.failure.step_id is not None
                and d.failure.error is not None
            }
            known = {sid: r for sid, r in latest.items() if r.ok}
            for sid, r in prior.items():
                known.setdefault(sid, r)

    def _destructive(self, tool: str | None, server: str | None) -> bool:
        if tool is None:
            return False
        try:
            spec = self.catalog.lookup(tool, server) or self.catalog.lookup(tool)
        except KeyError:
            return False
        return spec is not None and bool(spec.hints.destructive)

    def _note_destructive_failures(
        self, ctx: _RunCtx, plan: Plan, results: Sequence[StepResult], version: int
    ) -> None:
        """Remember destructive calls that started and failed: they may have taken effect."""
        for r in results:
            if r.status is not StepStatus.FAILED or r.attempts == 0 or r.step_id not in plan.ids:
                continue
            if self._destructive(r.tool, r.server):
                ctx.failed_destructive.append((version, plan.step(r.step_id), r))

    async def _refuse_repeats(
        self, ctx: _RunCtx, plan: Plan, known: Mapping[int, StepResult], attempt: PlanAttempt
    ) -> tuple[Plan, dict[int, StepResult]]:
        """Fail, without calling it, a step repeating a failed destructive call exactly.

        A destructive call that failed may still have taken effect (docs/recovery.md,
        "Destructive calls"); a new plan's step with the same tool and the same
        arguments (as written, or the same literal values the failed call was made
        with) is recorded as ``TOOL_ERROR`` and not run. Returns the plan to run
        (without those steps) and their results.
        """
        if not ctx.failed_destructive:
            return plan, {}
        refused: dict[int, StepResult] = {}
        for step in plan.steps:
            done = known.get(step.id)
            if (done is not None and done.ok) or not self._destructive(step.tool, step.server):
                continue
            literal = not step.positional and not list(step.refs)
            for version, old, result in ctx.failed_destructive:
                if old.tool != step.tool:
                    continue
                same_values = literal and to_jsonable(step.args) == to_jsonable(result.args)
                if not (same_call(step, old) or same_values):
                    continue
                message = (
                    f"step {step.id}: tool {step.tool!r} not called: this destructive call "
                    f"(same tool, same arguments) already failed in plan {version} (step "
                    f"{result.step_id}: {cut(result.error or 'failed', 300)}) and may have "
                    "taken effect; running it again could repeat its effect. Check with a "
                    "read-only step whether it took effect, or make a different call"
                )
                step_log(ctx.run.run_id, step.id).warning(message)
                refused[step.id] = StepResult(
                    step_id=step.id,
                    tool=step.tool,
                    status=StepStatus.FAILED,
                    error=message,
                    error_kind=ErrorKind.TOOL_ERROR,
                    started_at=time.time(),
                    duration=0.0,
                    server=step.server,
                    note="refused: repeats a failed destructive call",
                )
                break
        for r in refused.values():
            attempt.results.append(r)
            await ctx.bus.emit(
                StepFinished(run_id=ctx.run.run_id, result=r, plan_version=attempt.version)
            )
        if not refused:
            return plan, {}
        return replace(plan, steps=tuple(s for s in plan.steps if s.id not in refused)), refused

    def _failures(
        self, ctx: _RunCtx, plan: Plan, latest: Mapping[int, StepResult], version: int
    ) -> list[Failure]:
        """The root failures of a round (a blocked step follows its cause)."""
        failures: list[Failure] = []
        blocked: list[StepResult] = []
        cut = set(ctx.cut_results)  # steps the reply was cut off inside (not run)
        for r in sorted(latest.values(), key=lambda r: r.step_id):
            if r.ok or r.status is StepStatus.SKIPPED:
                continue
            if r.error_kind is ErrorKind.UPSTREAM_FAILED:
                if r.failure is not None and r.failure.upstream in cut:
                    cut.add(r.step_id)  # blocked by the cut: part of what is missing
                    continue
                blocked.append(r)
                continue
            failures.append(Failure.from_result(r, safe=self._is_safe(r), plan_version=version))
        if not failures and blocked:
            # a blocked step whose cause is not in this round (e.g. a failed prior step)
            failures = [Failure.from_result(r, plan_version=version) for r in blocked]
        return failures

    async def _decide_round(
        self,
        ctx: _RunCtx,
        failures: Sequence[Failure],
        plan: Plan | None,
        latest: Mapping[int, StepResult],
        text: str,
    ) -> list[Decision]:
        """Decide on every failure of a round; raise `_Replan`/`_Stop` when that wins."""
        run = ctx.run
        can_replan = self.planner is not None and ctx.allow_replan
        decisions = [
            self._circuit_check(ctx, self.policy.decide(f, ctx.state, can_replan=can_replan))
            for f in failures
        ]
        for d in decisions:
            run_log(run.run_id, step_id=d.step_id).warning("recovery: {}", d.reason)
            await ctx.bus.emit(
                RecoveryDecided(
                    run_id=run.run_id,
                    error_kind=d.kind,
                    action=str(d.action),
                    reason=d.reason,
                    step_id=d.step_id,
                )
            )
        action = combine_decisions(decisions)
        if action is Action.STOP:
            first = next(d for d in decisions if d.action is Action.STOP)
            kind = first.kind
            if kind is ErrorKind.CANCELLED:
                run.status = RunStatus.CANCELLED
            message = first.failure.message if first.failure else first.reason
            raise _Stop(kind, f"{message} — {first.reason}")
        if action is Action.REPLAN:
            raise _Replan(self._replan_context(ctx, decisions, plan, latest, text))
        return decisions

    def _open_tools(self, ctx: _RunCtx) -> tuple[list[str], float]:
        """The catalog's tools behind open breakers, and the shortest wait until a trial."""
        breakers = ctx.executor.breakers
        names: list[str] = []
        wait: float | None = None
        for spec in self.catalog.specs():
            name = BreakerRegistry.tool_breaker_name(spec.server, spec.name)
            if breakers.is_open(name):
                names.append(spec.qualified_name)
                retry_in = breakers.get(name).retry_in()
                wait = retry_in if wait is None else min(wait, retry_in)
        return names, wait or 0.0

    def _circuit_check(self, ctx: _RunCtx, decision: Decision) -> Decision:
        """``CIRCUIT_OPEN`` → ``REPLAN`` only while some tool is behind a closed breaker.

        The re-plan's reason names the tools behind open breakers (the planner sees it);
        when every tool of the catalog is behind one, a new plan could call nothing:
        the run stops, saying when the first breaker lets a trial call through.
        """
        failure = decision.failure
        if (
            decision.action is not Action.REPLAN
            or failure is None
            or failure.kind is not ErrorKind.CIRCUIT_OPEN
            or failure.tool is None
        ):
            return decision
        open_tools, wait = self._open_tools(ctx)
        if not open_tools:
            return decision
        shown = ", ".join(open_tools)
        if len(open_tools) < len(self.catalog):
            new = Decision(
                Action.REPLAN,
                f"{decision.reason}; tools behind open circuit breakers (do not use them): "
                f"{shown}",
                failure,
            )
        else:
            new = Decision(
                Action.STOP,
                f"CIRCUIT_OPEN at step {failure.step_id} ({failure.tool}): every tool of the "
                f"catalog is behind an open circuit breaker ({shown}), so a new plan could "
                f"call none of them; stopping (the first trial call is possible in "
                f"{wait:.1f}s)",
                failure,
            )
        decisions = ctx.state.decisions
        for i in range(len(decisions) - 1, -1, -1):
            if decisions[i] is decision:
                decisions[i] = new
                break
        return new

    def _replan_context(
        self,
        ctx: _RunCtx,
        decisions: Sequence[Decision],
        plan: Plan | None,
        latest: Mapping[int, StepResult],
        text: str,
        *,
        lesson: str | None = None,
        decompose: bool = False,
    ) -> ReplanContext:
        run = ctx.run
        ctx.state.note_replan()
        why = "; ".join(d.reason for d in decisions if d.action is Action.REPLAN)
        for d in decisions:
            if d.action is Action.REPLAN and d.failure is not None:
                run.lessons.append(f"plan {d.failure.plan_version}: {d.failure.message}")
        if lesson:
            run.lessons.append(lesson)
        kept: dict[int, tuple[Step, StepResult]] = {}
        failed: list[StepResult] = []
        if plan is not None:
            for sid, r in latest.items():
                if r.ok and sid in plan.ids:
                    kept[sid] = (plan.step(sid), r)
                elif not r.ok:
                    failed.append(r)
        return ReplanContext(
            cut=ctx.cut if plan is not None else None,
            reason=why or (lesson or "re-plan"),
            version=_next_version(run),
            previous_plan=plan,
            previous_text=text,
            kept=kept,
            failed=failed,
            lessons=list(run.lessons),
            decompose=decompose,
        )

    async def _conclude(
        self, ctx: _RunCtx, plan: Plan, latest: Mapping[int, StepResult], text: str
    ) -> None:
        """Every step succeeded (or was skipped): typed output, answer, evaluation."""
        run = ctx.run
        if ctx.output_type is not None:
            await self._typed_output(ctx, plan, latest, text)
        await self._answer(ctx, latest)
        if self.evaluator is None:
            run.status = RunStatus.SUCCEEDED
            return
        verdict = await self._evaluate(ctx, plan, latest)
        if verdict.ok:
            run.status = RunStatus.SUCCEEDED
            return
        if verdict.judge_error:
            raise _Stop(ErrorKind.EVALUATION_FAILED, f"evaluation failed: {verdict.evaluation}")
        failure = Failure(
            ErrorKind.EVALUATION_FAILED,
            f"evaluator: {verdict.status}: {verdict.evaluation}",
            plan_version=ctx.current.version if ctx.current else len(run.attempts),
        )
        decision = self.policy.decide(
            failure, ctx.state, can_replan=self.planner is not None and ctx.allow_replan
        )
        await ctx.bus.emit(
            RecoveryDecided(
                run_id=run.run_id,
                error_kind=ErrorKind.EVALUATION_FAILED,
                action=str(decision.action),
                reason=decision.reason,
            )
        )
        if decision.action is not Action.REPLAN:
            raise _Stop(ErrorKind.EVALUATION_FAILED, f"{failure.message} — {decision.reason}")
        run.answer = None
        lesson = verdict.lesson or verdict.evaluation
        replan = self._replan_context(
            ctx,
            [decision],
            plan,
            latest,
            text,
            lesson=f"evaluator ({verdict.status}): {lesson}" if lesson else None,
            decompose=verdict.status is EvalStatus.JOB_TOO_COMPLICATED,
        )
        if verdict.status in (EvalStatus.EXECUTION_ERROR, EvalStatus.INPUT_DATA_ERROR):
            # the verdict blames the results themselves: none is kept as settled
            replan = replace(
                replan,
                kept={},
                reason=f"{replan.reason}. The evaluator judged the results wrong "
                f"({verdict.status}): no earlier result is kept; redo the steps that need it.",
            )
        raise _Replan(replan)

    async def _typed_output(
        self, ctx: _RunCtx, plan: Plan, latest: Mapping[int, StepResult], text: str
    ) -> None:
        """Instantiate the final mapping into the output type (docs/recovery.md).

        ``OUTPUT_INVALID`` and ``OUTPUT_UNEXPECTED`` re-resolve the mapping alone, with
        the failure as feedback, before anything else re-runs; when the policy re-plans
        instead (budget spent, or the same fields failing twice), an unexpected output
        re-plans from scratch (no result is kept) telling the planner which fields and
        steps were to blame. ``Run.output`` holds the last instance, even an unexpected
        one (the run's status says whether it is to be trusted).
        """
        assert ctx.output_type is not None and ctx.current is not None
        run, attempt = ctx.run, ctx.current
        step = output_step(plan)
        assert step is not None  # check_output_plan passed
        resolver = ctx.executor.resolver  # the run's, built by the runtime
        feedback: StepError | None = None
        while True:
            await ctx.bus.emit(
                StepStarted(
                    run_id=run.run_id,
                    step_id=step.id,
                    tool=OUTPUT_TOOL,
                    plan_version=attempt.version,
                )
            )
            outcome = await resolve_output(
                plan,
                ctx.output_type,
                latest,
                resolver,
                expected=ctx.expected,
                feedback=feedback,
                run_id=run.run_id,
                bus=ctx.bus,
            )
            attempt.results.append(outcome.result)
            await ctx.bus.emit(
                StepFinished(run_id=run.run_id, result=outcome.result, plan_version=attempt.version)
            )
            run.output = outcome.value
            if outcome.ok:
                return
            assert outcome.kind is not None and outcome.message is not None
            if outcome.mismatches:
                step_log(run.run_id, step.id).warning(
                    "typed output unexpected: {}", outcome.describe()
                )
            failure = Failure.from_result(
                outcome.result, safe=True, plan_version=attempt.version
            )
            try:
                await self._decide_round(ctx, [failure], plan, latest, text)
            except _Replan as r:
                replan = replace(r.ctx, failed=[*r.ctx.failed, outcome.result])
                if outcome.kind is ErrorKind.OUTPUT_UNEXPECTED:
                    blamed = "; ".join(
                        f"field {m.field!r} came from step {m.blame.step_id} "
                        f"({m.blame.tool or 'reasoning'})"
                        + ("" if m.blame.reason == "produced the value" else f": {m.blame.reason}")
                        for m in outcome.mismatches
                    )
                    replan = replace(
                        replan,
                        kept={},
                        reason=f"{replan.reason}. The typed output was wrong: {blamed}. "
                        "Re-planning from scratch: no earlier result is kept.",
                    )
                raise _Replan(replan) from None
            feedback = output_feedback(outcome)

    async def _evaluate(
        self, ctx: _RunCtx, plan: Plan, latest: Mapping[int, StepResult]
    ) -> Verdict:
        assert self.evaluator is not None
        case = EvalCase(
            question=ctx.run.question,
            results=tuple(sorted(latest.values(), key=lambda r: r.step_id)),
            answer=ctx.run.answer,
            plan=plan,
            run_id=ctx.run.run_id,
            usage=ctx.run.usage,
            bus=ctx.bus,
            output_budget=self.config.evaluation.output_budget,
            client_for=lambda model: self.runtime.client_for(
                model, usage=ctx.run.usage, bus=ctx.bus, run_id=ctx.run.run_id, trace=ctx.trace
            ),
        )
        try:
            return await self.evaluator.evaluate(case)
        except (ModelError, CircuitOpenError) as exc:
            return Verdict(
                EvalStatus.EXECUTION_ERROR,
                f"the evaluator's model call failed: {exc}",
                judge_error=str(exc),
            )

    async def _answer(self, ctx: _RunCtx, latest: Mapping[int, StepResult]) -> None:
        if ctx.client is None:
            return
        budget = self.config.evaluation.output_budget
        body = "\n\n".join(
            [
                "Question:\n" + ctx.run.question,
                "Step results:\n" + format_results(list(latest.values()), budget),
            ]
        )
        try:
            ctx.run.answer = await ctx.client.complete(
                [SystemMessage(content=ANSWER_SYSTEM), HumanMessage(content=body)],
                purpose="answer",
            )
        except (ModelError, CircuitOpenError) as exc:
            message = f"the answer could not be written: {exc}"
            run_log(ctx.run.run_id).warning(message)
            await ctx.bus.emit(
                FallbackUsed(
                    run_id=ctx.run.run_id, step_id=None, code="ANSWER_FAILED", message=message
                )
            )

    async def _answer_if_missing(self, ctx: _RunCtx) -> None:
        """A failed run still gets an answer saying what was and was not found."""
        run = ctx.run
        if (
            run.answer is not None
            or run.status in (RunStatus.SUCCEEDED, RunStatus.WAITING_APPROVAL)
            or ctx.client is None
        ):
            return
        if not any(a.results for a in run.attempts):
            return
        plan = ctx.current.plan if ctx.current else None
        latest = {r.step_id: r for r in run.results if plan is None or r.step_id in plan.ids}
        await self._answer(ctx, latest)

    def _mark_cancelled(self, ctx: _RunCtx) -> None:
        run = ctx.run
        run.status = RunStatus.CANCELLED
        run.error_kind = ErrorKind.CANCELLED
        run.error = "the run was cancelled by the caller"
        attempt = ctx.current
        if attempt is None or attempt.plan is None:
            return
        # Everything this round finished before the cancellation is kept (succeeded
        # steps too), except results reused from earlier rounds: those are recorded there.
        recorded = {id(r) for r in attempt.results}
        for sid in attempt.plan.ids:
            r = ctx.executor.results.get(sid)
            if r is None or id(r) in recorded or sid in ctx.executor.reused:
                continue
            attempt.results.append(r)

    async def _finish(self, ctx: _RunCtx) -> None:
        run = ctx.run
        if run.status is RunStatus.RUNNING:
            run.status = RunStatus.FAILED
        if run.status is RunStatus.CANCELLED and run.error is None:
            run.error_kind = ErrorKind.CANCELLED
            run.error = ctx.executor.cancel_reason or "the run was cancelled by the caller"
        run.usage.wall_time = time.perf_counter() - ctx.t0
        if ctx.trace is not None:
            await ctx.trace.end(
                {"status": str(run.status), "answer": run.answer, "error": run.error}
            )
        await ctx.bus.emit(
            RunFinished(
                run_id=run.run_id,
                status=str(run.status),
                answer=run.answer,
                error=run.error,
                run=run,
            )
        )
        flush = getattr(self.store, "flush", None)
        if flush is not None:
            out = flush()
            if asyncio.iscoroutine(out):
                await out

