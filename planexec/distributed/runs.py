"""Whole runs on Ray workers: `run_many` (agent runs) and `run_jobs` (any async job).

Each run is one Ray task. Inside the worker, the job streams its events back to the
driver through a small event-sink actor pinned to the driver's node: events are
batched, and the batch is pushed — and the push awaited — at every checkpoint event
(`planexec.store.base.CHECKPOINT_EVENTS`: ``RunStarted``, ``PlanCreated``,
``ToolCallStarted``, ``StepFinished`` ...), so a tool call never starts before the
driver can know it started. The driver drains the sink, in order per run, into its
store (``await store.handle(event)``) and its event handlers, and collects each run's
result (the pickled `Run`).

A worker or node that dies mid-run (``WorkerCrashedError``, ``NodeDiedError`` ...; Ray's
own retries are off) is handled by the driver:

- the run is **retried** on another worker, as a new run ``<run_id>.retry<N>``, when no
  call of an unsafe tool can have started: every tool of its catalog is safe
  (`planexec.tools.ToolHints.safe`), or none of the tool calls it had started was of an
  unsafe tool, or it died before it had built its catalog;
- otherwise it is **reported as failed** with the reason (which unsafe tool call's
  outcome is unknown).

Either way the dead attempt's run is recorded as ``FAILED`` in the driver's store, with
the reason. An exception raised by the job itself (``RayTaskError``) fails the run with
that exception, without a retry.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec._loading import load_object
from planexec._log import logger
from planexec.distributed._ray import ensure_ray, first_line, import_ray, worker_lost_errors
from planexec.distributed.settings import RayOptions
from planexec.errors import ConfigError
from planexec.events import Event, EventHandler, RunFinished, RunStarted, ToolCallStarted
from planexec.results import Run, new_run_id

__all__ = ["UNKNOWN_SAFETY", "JobContext", "RunOutcome", "arun_many", "run_jobs", "run_many"]

UNKNOWN_SAFETY = "*"
"""Declared as an unsafe tool name: the job uses tools whose safety is not known."""

Job = Callable[[Any, "JobContext"], Awaitable[Any]]
"""An async job run in a worker: ``await job(payload, ctx)`` gives its result."""


# -- worker side -------------------------------------------------------------------------


class JobContext:
    """What a job sees inside its worker: its run id and the way back to the driver."""

    def __init__(self, sink: Any, key: str, run_id: str, checkpoints: frozenset[str]) -> None:
        self.sink = sink
        """The driver's event-sink actor."""
        self.key = key
        """This attempt's key (the driver's bookkeeping)."""
        self.run_id = run_id
        """The run id this attempt must use."""
        self._checkpoints = checkpoints
        self._buffer: list[Any] = []

    async def _push(self, items: list[Any]) -> None:
        await self.sink.push.remote(self.key, items)

    async def declare(self, *, unsafe_tools: Sequence[str], tracks_calls: bool = True) -> None:
        """Tell the driver which tools are unsafe to repeat (before any tool is called).

        Args:
            unsafe_tools: Names (and qualified names) of the tools that are not safe;
                `UNKNOWN_SAFETY` (``"*"``) when some tools' safety is not known.
            tracks_calls: Whether this job emits ``ToolCallStarted`` before each call
                (then a retry after a crash is allowed if no unsafe call had started).
        """
        info = {"unsafe_tools": sorted(set(unsafe_tools)), "tracks_calls": tracks_calls}
        await self._push([("declare", info)])

    async def emit(self, event: Event) -> None:
        """Send an event to the driver (batched; a checkpoint event flushes the batch)."""
        self._buffer.append(("event", event))
        if event.type in self._checkpoints:
            await self.flush()

    async def flush(self) -> None:
        """Push every buffered event to the driver now."""
        if self._buffer:
            items, self._buffer = self._buffer, []
            await self._push(items)


def _job_in_worker(job: Job | str, payload: Any, sink: Any, key: str, run_id: str) -> Any:
    """The body of a run task."""
    from planexec.store.base import CHECKPOINT_EVENTS

    fn: Job = load_object(job) if isinstance(job, str) else job
    ctx = JobContext(sink, key, run_id, frozenset(CHECKPOINT_EVENTS))

    async def main() -> Any:
        ray = import_ray()
        started = {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
        await ctx._push([("start", started)])
        try:
            return await fn(payload, ctx)
        finally:
            await ctx.flush()

    return asyncio.run(main())


async def agent_job(payload: Any, ctx: JobContext) -> Run:
    """The job of `run_many`: build an agent with its factory and run one question.

    ``payload`` is ``(factory, question, run_kwargs)``; ``factory`` is a ``MODULE:ATTR``
    string or a callable, returning a `planexec.agent.PlanExecuteAgent`.
    """
    from planexec.agent import PlanExecuteAgent

    factory, question, run_kwargs = payload
    make = load_object(factory) if isinstance(factory, str) else factory
    agent = make()
    if not isinstance(agent, PlanExecuteAgent):
        raise ConfigError(
            f"the agent factory {factory!r} returned a {type(agent).__name__}, "
            "not a PlanExecuteAgent"
        )
    unsafe: list[str] = []
    for spec in agent.catalog:
        if not spec.hints.safe:
            unsafe += [spec.name, spec.qualified_name]
    await ctx.declare(unsafe_tools=unsafe, tracks_calls=True)
    handlers = [*run_kwargs.pop("event_handlers", ()), ctx.emit]
    run: Run = await agent.run(question, run_id=ctx.run_id, event_handlers=handlers, **run_kwargs)
    return run


class _EventSink:
    """The actor runs push their events into; the driver drains it."""

    def __init__(self) -> None:
        self.items: list[tuple[str, list[Any]]] = []

    def push(self, key: str, items: list[Any]) -> None:
        self.items.append((key, items))

    def drain(self) -> list[tuple[str, list[Any]]]:
        out, self.items = self.items, []
        return out


# -- driver side -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunOutcome:
    """What became of one run sent to the cluster."""

    index: int
    """Its position in the input."""
    name: str
    """The question (or job name)."""
    status: str
    """``SUCCEEDED``, ``FAILED``, ``CANCELLED`` ... (the run's own status when it finished)."""
    result: Any = None
    """What the job returned (a `Run` for `run_many`), None if it did not finish."""
    error: str | None = None
    """Why it failed, when it did not finish (a dead worker, an exception, a timeout)."""
    run_ids: tuple[str, ...] = ()
    """The run id of each attempt, in order (retries get ``<run_id>.retry<N>``)."""
    nodes: tuple[str, ...] = ()
    """The Ray node id of each attempt that reported one."""

    @property
    def attempts(self) -> int:
        """How many attempts were made."""
        return len(self.run_ids)

    @property
    def run(self) -> Run | None:
        """The finished `Run`, for agent runs."""
        return self.result if isinstance(self.result, Run) else None

    @property
    def run_id(self) -> str | None:
        """The run id of the last attempt."""
        return self.run_ids[-1] if self.run_ids else None


@dataclass
class _Attempt:
    index: int
    number: int
    run_id: str
    key: str
    ref: Any
    started: float | None = None
    """When the worker reported the start (monotonic clock of the driver)."""
    declared: dict[str, Any] | None = None
    calls: list[str] = field(default_factory=list)
    run_started: bool = False
    run_finished: bool = False


@dataclass
class _JobState:
    index: int
    name: str
    payload: Any
    base_run_id: str
    run_ids: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


def _unsafe_started(att: _Attempt) -> list[str]:
    if att.declared is None:
        return []  # died before building its catalog: no tool was called
    unsafe = set(att.declared.get("unsafe_tools", ()))
    if not unsafe:
        return []
    anything = UNKNOWN_SAFETY in unsafe
    unsafe.discard(UNKNOWN_SAFETY)
    if not att.declared.get("tracks_calls", False):
        return sorted(unsafe) + (["tools of unknown safety"] if anything else [])
    return sorted({c for c in att.calls if anything or c in unsafe})


class _Driver:
    def __init__(
        self,
        job: Job | str,
        jobs: Sequence[tuple[str, Any, str]],
        *,
        store: Any,
        handlers: Sequence[EventHandler],
        options: RayOptions,
        max_retries: int,
        retry_unsafe: bool,
        max_in_flight: int | None,
        timeout: float | None,
        poll_interval: float,
        on_outcome: Callable[[RunOutcome], None] | None = None,
    ) -> None:
        self.ray = import_ray()
        self.on_outcome = on_outcome
        self.job = job
        self.states = [_JobState(i, n, p, r) for i, (n, p, r) in enumerate(jobs)]
        self.store = store
        self.handlers = list(handlers)
        self.options = options
        self.max_retries = max_retries
        self.retry_unsafe = retry_unsafe
        self.max_in_flight = max_in_flight or len(self.states) or 1
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.attempts: dict[str, _Attempt] = {}
        self.outcomes: dict[int, RunOutcome] = {}
        self.sink: Any = None
        self.remote: Any = None
        self.job_ref: Any = None

    # -- setup ---------------------------------------------------------------------------

    def _start(self) -> None:
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        self.sink = (
            ray.remote(_EventSink)
            .options(
                num_cpus=0,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
            )
            .remote()
        )
        opts = {"max_retries": 0, "retry_exceptions": False, **self.options.to_ray()}
        self.remote = ray.remote(_job_in_worker).options(**opts)
        self.job_ref = self.job if isinstance(self.job, str) else ray.put(self.job)

    def _submit(self, state: _JobState) -> _Attempt:
        number = len(state.run_ids) + 1
        run_id = state.base_run_id if number == 1 else f"{state.base_run_id}.retry{number - 1}"
        key = f"{state.index}:{number}"
        ref = self.remote.remote(self.job_ref, state.payload, self.sink, key, run_id)
        state.run_ids.append(run_id)
        att = _Attempt(state.index, number, run_id, key, ref)
        self.attempts[key] = att
        return att

    # -- events --------------------------------------------------------------------------

    async def _deliver(self, event: Event) -> None:
        if self.store is not None:
            await self.store.handle(event)
        for handler in self.handlers:
            out = handler(event)
            if inspect.isawaitable(out):
                await out

    async def _drain(self) -> None:
        batches = await self.sink.drain.remote()
        for key, items in batches:
            att = self.attempts.get(key)
            for kind, item in items:
                if att is None:
                    continue
                if kind == "start":
                    att.started = time.monotonic()
                    self.states[att.index].nodes.append(str(item.get("node_id")))
                    continue
                if kind == "declare":
                    att.declared = dict(item)
                    continue
                if isinstance(item, RunStarted):
                    att.run_started = True
                elif isinstance(item, RunFinished):
                    att.run_finished = True
                elif isinstance(item, ToolCallStarted):
                    att.calls.append(item.tool)
                await self._deliver(item)

    async def _record_failed(self, att: _Attempt, reason: str) -> None:
        """Close a dead attempt's run in the store (it will never send RunFinished)."""
        if att.run_started and not att.run_finished:
            await self._deliver(RunFinished(run_id=att.run_id, status="FAILED", error=reason))
            att.run_finished = True

    async def _give_up(self, att: _Attempt, state: _JobState, reason: str) -> None:
        """Log ``reason``, close the attempt's run in the store and finish the job FAILED."""
        logger.bind(run_id=att.run_id).warning(reason)
        await self._record_failed(att, reason)
        self._finish(state, "FAILED", None, reason)

    # -- outcomes ------------------------------------------------------------------------

    def _finish(self, state: _JobState, status: str, result: Any, error: str | None) -> None:
        outcome = self.outcomes[state.index] = RunOutcome(
            index=state.index,
            name=state.name,
            status=status,
            result=result,
            error=error,
            run_ids=tuple(state.run_ids),
            nodes=tuple(state.nodes),
        )
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    async def _settle(self, att: _Attempt, task: asyncio.Task[Any]) -> _JobState | None:
        """Handle a finished attempt; return the job state if it must be retried."""
        state = self.states[att.index]
        ray = self.ray
        try:
            result = task.result()
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            reason = (
                f"run {att.run_id}: the job raised {type(cause).__name__}: "
                f"{first_line(cause)}"
            )
            await self._give_up(att, state, reason)
            return None
        except worker_lost_errors() as exc:
            lost = f"{type(exc).__name__}: {first_line(exc)}"
            unsafe = _unsafe_started(att)
            if unsafe and not self.retry_unsafe:
                reason = (
                    f"run {att.run_id}: its Ray worker died mid-run ({lost}); not retried: "
                    f"a call of unsafe tool(s) {', '.join(unsafe)} had started and its "
                    f"outcome is unknown (tools are retried only when read-only or "
                    f"idempotent)"
                )
                await self._give_up(att, state, reason)
                return None
            if att.number > self.max_retries:
                reason = (
                    f"run {att.run_id}: its Ray worker died mid-run ({lost}); "
                    f"no retries left ({self.max_retries} allowed)"
                )
                await self._give_up(att, state, reason)
                return None
            why = "its tools are safe to repeat" if not unsafe else "retry_unsafe=True"
            reason = (
                f"run {att.run_id}: its Ray worker died mid-run ({lost}); retried on another "
                f"worker ({why}) as run {state.base_run_id}.retry{att.number}"
            )
            logger.bind(run_id=att.run_id).warning(reason)
            await self._record_failed(att, reason)
            return state
        status = str(getattr(result, "status", "SUCCEEDED"))
        error = getattr(result, "error", None)
        self._finish(state, status, result, error if isinstance(error, str) else None)
        return None

    async def run(self) -> list[RunOutcome]:
        self._start()
        queue = list(self.states)
        running: dict[asyncio.Task[Any], _Attempt] = {}

        async def wait(ref: Any) -> Any:
            return await ref

        try:
            while queue or running:
                while queue and len(running) < self.max_in_flight:
                    att = self._submit(queue.pop(0))
                    running[asyncio.ensure_future(wait(att.ref))] = att
                done, _ = await asyncio.wait(
                    running, timeout=self.poll_interval, return_when=asyncio.FIRST_COMPLETED
                )
                await self._drain()
                for task in done:
                    att = running.pop(task)
                    retry = await self._settle(att, task)
                    if retry is not None:
                        queue.insert(0, retry)
                if self.timeout is not None:
                    now = time.monotonic()
                    for task, att in list(running.items()):
                        if att.started is not None and now - att.started > self.timeout:
                            running.pop(task)
                            task.cancel()
                            self.ray.cancel(att.ref, force=True)
                            reason = f"run {att.run_id}: timed out after {self.timeout}s"
                            logger.bind(run_id=att.run_id).warning(reason)
                            await self._drain()
                            await self._record_failed(att, reason)
                            self._finish(self.states[att.index], "FAILED", None, reason)
        finally:
            for task, att in running.items():
                task.cancel()
                self.ray.cancel(att.ref, force=True)
            self.ray.kill(self.sink)
        if self.store is not None and hasattr(self.store, "flush"):
            await self.store.flush()
        return [self.outcomes[s.index] for s in self.states]


def _new_run_id() -> str:
    return new_run_id()


async def run_jobs(
    job: Job | str,
    payloads: Sequence[Any],
    *,
    names: Sequence[str] | None = None,
    run_ids: Sequence[str] | None = None,
    store: Any = None,
    event_handlers: Sequence[EventHandler] = (),
    options: RayOptions | Mapping[str, Any] | None = None,
    address: str | None = None,
    max_retries: int = 1,
    retry_unsafe: bool = False,
    max_in_flight: int | None = None,
    timeout: float | None = None,
    poll_interval: float = 0.05,
    init_kwargs: Mapping[str, Any] | None = None,
    on_outcome: Callable[[RunOutcome], None] | None = None,
) -> list[RunOutcome]:
    """Run an async job once per payload on Ray workers; stream events to the driver.

    Args:
        job: ``async job(payload, ctx: JobContext)`` (a ``MODULE:ATTR`` string or a
            picklable function). It should call ``ctx.declare(...)`` before calling
            tools and pass ``ctx.emit`` as an event handler, and use ``ctx.run_id``.
        payloads: One payload per run (picklable).
        names: A name per run (for outcomes); the payload's position by default.
        run_ids: The run id of each first attempt (new ids by default).
        store: The driver's run store: every event goes to ``await store.handle(event)``.
        event_handlers: More driver-side subscribers (sync or async).
        options: Resources each run task asks for (`RayOptions`).
        address: The cluster (see `planexec.distributed.ensure_ray`).
        max_retries: Retries of a run whose worker died (only when safe, see the module).
        retry_unsafe: Retry even when a call of an unsafe tool had started.
        max_in_flight: Runs submitted at once, at most (all by default; Ray queues them).
        timeout: Seconds a run may take from its start on a worker (time queued for
            resources does not count); a run over it is cancelled and failed.
        poll_interval: Seconds between two drains of the event sink.
        init_kwargs: ``ray.init`` arguments if this process has not joined Ray yet.
        on_outcome: Called with each `RunOutcome` as soon as its run is settled.

    Returns:
        One `RunOutcome` per payload, in input order.
    """
    ensure_ray(address, **dict(init_kwargs or {}))
    n = len(payloads)
    names = list(names) if names is not None else [str(i) for i in range(n)]
    ids = list(run_ids) if run_ids is not None else [_new_run_id() for _ in range(n)]
    if len(names) != n or len(ids) != n:
        raise ConfigError("names and run_ids must have one entry per payload")
    driver = _Driver(
        job,
        list(zip(names, payloads, ids, strict=True)),
        store=store,
        handlers=event_handlers,
        options=RayOptions.coerce(options),
        max_retries=max_retries,
        retry_unsafe=retry_unsafe,
        max_in_flight=max_in_flight,
        timeout=timeout,
        poll_interval=poll_interval,
        on_outcome=on_outcome,
    )
    return await driver.run()


async def arun_many(
    questions: Sequence[str],
    agent_factory: str | Callable[[], Any],
    **kwargs: Any,
) -> list[RunOutcome]:
    """Answer many questions with agent runs on Ray workers (async form of `run_many`)."""
    run_kwargs = kwargs.pop("run_kwargs", None) or {}
    payloads = [(agent_factory, q, dict(run_kwargs)) for q in questions]
    kwargs.setdefault("names", list(questions))
    return await run_jobs(agent_job, payloads, **kwargs)


def run_many(
    questions: Sequence[str],
    agent_factory: str | Callable[[], Any],
    **kwargs: Any,
) -> list[RunOutcome]:
    """Answer many questions, one agent run per question, on Ray workers.

    Each worker builds its own agent with ``agent_factory`` (``MODULE:ATTR`` of a
    zero-argument function returning a `planexec.agent.PlanExecuteAgent`, or such a
    picklable function) and runs one question. Events come back to the driver as the
    runs go and are written to ``store``; see `run_jobs` for every keyword argument
    (``store``, ``address``, ``options``, ``max_retries``, ``timeout`` ...), plus
    ``run_kwargs`` (passed to ``agent.run``, e.g. ``{"output_type": Answer}``).

    Example:
        >>> outcomes = run_many(["Which sites are there?"], "myapp.agents:make_agent",
        ...                     store=open_store())  # doctest: +SKIP
        >>> outcomes[0].run.answer  # doctest: +SKIP

    Returns:
        One `RunOutcome` per question, in order (``outcome.run`` is the `Run`).
    """
    return asyncio.run(arun_many(questions, agent_factory, **kwargs))
