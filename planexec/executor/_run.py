"""One run of a plan on an `planexec.executor.Executor`: `ExecutorRun`.

The run is the scheduler: it takes the plan (whole, or as a feed of arriving steps),
starts ready steps as tasks up to ``max_concurrency``, runs each through the step
pipeline (`planexec.executor._step.execute`), records results and emits their events,
and settles what is left when it is cancelled or ends. Everything it changes is its own
(`planexec.executor._state.RunState`), so any number of runs share one executor.
"""

from __future__ import annotations

import asyncio
import time
from asyncio import current_task
from collections.abc import AsyncIterator, Generator, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from planexec._log import step_log
from planexec.errors import CircuitOpenError, ErrorKind
from planexec.events import StepDiscarded, StepFinished
from planexec.executor._schedule import (
    Fed,
    Schedule,
    call_key,
    held_back,
    pump,
    waits,
)
from planexec.executor._state import (
    REUSED_NOTE,
    Owner,
    RunState,
    StepContext,
    StepFailed,
    join_note,
    not_started,
)
from planexec.executor._step import ended_by, execute
from planexec.plan import Plan, Step
from planexec.plan_errors import step_failures
from planexec.results import StepError, StepResult, StepStatus
from planexec.stepfeed import FeedItem, PlanComplete, StepArrived, StepWithdrawn, same_work
from planexec.tools import ToolCatalog

_TURN_EVERY = 8
"""A task running steps back to back gives the event loop a turn at least this often
(`ExecutorRun._run_step`; a tool call that waits gives one)."""


def may_start_early(catalog: ToolCatalog, step: Step) -> bool:
    """Whether a step may start before the plan is complete (`Executor.may_start_early`)."""
    if not step.args_valid or step.cut_off:
        return False
    if step.tool is None:
        return not step.selects_tool
    try:
        spec = catalog.lookup(step.tool, step.server)
    except KeyError:  # ambiguous: the whole plan's checks decide
        return False
    return spec is not None and spec.hints.safe


class ExecutorRun(RunState):
    """One run of a plan on an executor: its results, its cancel state, its handle.

    `planexec.executor.Executor.run` makes one and awaits it;
    `planexec.executor.Executor.start` makes one, starts it in a task and returns it:
    awaiting it gives the run's results, `cancel` cancels this run only.

    Attributes:
        results: Every result known in the run (prior ones included), by step id.
        reused: Steps whose succeeded prior result was reused, not re-run.
        discarded: Results of steps started while the plan was streamed that the final
            plan does not hold.
        cancel_reason: Why the run was cancelled, when a reason was given.
    """

    def __init__(self, owner: Owner, plan_version: int = 1) -> None:
        super().__init__(owner, plan_version)
        self.task: asyncio.Future[list[StepResult]] | None = None
        """The task running it (`planexec.executor.Executor.start`), if any."""
        self.ended = False
        """Whether the run has ended (however)."""

    # ------------------------------------------------------------------ the handle

    def cancel(self, reason: str | None = None) -> None:
        """Stop this run: running steps and steps not started become CANCELLED.

        The run then ends normally with the results so far, and `cancelled` is true.
        Nothing happens once the run has ended. Call it from the event loop's thread.
        Running tool calls are cancelled and not waited for.

        Args:
            reason: Why (kept in `cancel_reason` and put on the cancelled steps).
        """
        if self.ended:
            return
        if reason is not None and self.cancel_reason is None:
            self.cancel_reason = reason
        self.cancel_requested = True
        if self.finished is not None:
            self.finished.put_nowait(None)  # wake the scheduler up

    @property
    def cancelled(self) -> bool:
        """Whether the run was cancelled (or will be, as soon as it looks)."""
        return self.cancel_requested

    def __await__(self) -> Generator[Any, None, list[StepResult]]:
        """Await a started run (`planexec.executor.Executor.start`): its results."""
        if self.task is None:
            raise RuntimeError("this run was not started (Executor.start starts one)")
        return self.task.__await__()

    def _timed_out(self, limit: float) -> None:
        reason = f"run timeout of {limit}s exceeded"
        step_log(self.run_id, None).warning("{}: cancelling the run", reason)
        self.cancel(reason)

    # ------------------------------------------------------------------ the run

    async def main(
        self,
        source: PlanComplete | AsyncIterator[FeedItem],
        steps: int,
        prior: Mapping[int, StepResult] | None,
        feedback: Mapping[int, StepError] | None,
    ) -> list[StepResult]:
        """Run it (traced as one round of the plan attempt when traced); see `execute`."""
        try:
            if self.trace is None:
                return await self.execute(source, prior=prior, feedback=feedback)
            await self.trace.start_attempt(self.plan_version, steps)
            try:
                results = await self.execute(source, prior=prior, feedback=feedback)
            except BaseException as exc:
                await self.trace.end_attempt(None, exc)
                raise
            await self.trace.end_attempt(results)
            return results
        finally:
            self.ended = True

    async def execute(
        self,
        source: PlanComplete | AsyncIterator[FeedItem],
        *,
        prior: Mapping[int, StepResult] | None = None,
        feedback: Mapping[int, StepError] | None = None,
    ) -> list[StepResult]:
        """Run a plan and return one result per step, in completion order.

        Args:
            source: The whole plan (a `PlanComplete`), or a feed of its steps as they
                arrive, ending with `PlanComplete` (see `Executor.run_feed`).
            prior: Results from earlier runs or plan attempts. A step of the plan whose
                prior result SUCCEEDED is not run again: its result is reused (emitted
                as `StepFinished` with a ``reused`` note). Every prior result is visible
                to references.
            feedback: Per-step re-resolution feedback for the resolver: the `StepError`
                of the step's previous attempt (it names the arguments to re-ask).

        Returns:
            The results of the plan's steps, in the order they finished.

        Raises:
            asyncio.CancelledError: the task running this was cancelled; every
                unfinished step was first recorded as CANCELLED (see ``results``).
        """
        for sid, result in (prior or {}).items():
            self.results[sid] = result
        sched = Schedule(dict(prior or {}), feedback or {}, MappingProxyType(self.results))
        finished: asyncio.Queue[int | Fed | None] = asyncio.Queue()
        self.finished = finished
        feeding: asyncio.Task[None] | None = None
        if isinstance(source, PlanComplete):
            self.dialect = source.plan.dialect
            await self._complete(sched, source)
        else:
            self.dialect = None
            feeding = asyncio.create_task(pump(source, finished))
        run_timeout = self.config.run_timeout
        timer = (
            asyncio.get_running_loop().call_later(run_timeout, self._timed_out, run_timeout)
            if run_timeout is not None
            else None
        )
        try:
            await self._schedule(sched, finished)
        except asyncio.CancelledError:
            await self._cancel_rest(sched.pending(), sched.running, sched.order)
            raise
        finally:
            if feeding is not None and not feeding.done():
                feeding.cancel()
            if timer is not None:
                timer.cancel()
            self.finished = None
        if self.cancel_requested:
            await self._cancel_rest(sched.pending(), sched.running, sched.order)
        elif len(sched.done) < len(sched.steps):
            # Whatever is left waits on a dependency cycle.
            held = held_back(list(sched.steps.values()), self.results)  # behind a waiting step
            await self._fail_cycle(
                [s for s in sched.steps.values() if s.id not in self.results and s.id not in held],
                sched.order,
            )
        return [self.results[sid] for sid in sched.order if sid in sched.steps]

    async def _schedule(self, sched: Schedule, finished: asyncio.Queue[int | Fed | None]) -> None:
        """The scheduler loop: start ready steps, take feed items and failed steps.

        A step that ends normally releases its dependents and starts the ready steps
        itself (`_step_ended`), without a round trip through this loop; the loop hears of
        a step only when its task raised or was cancelled, and is woken when nothing runs.
        """
        sched.live = True
        try:
            while not sched.complete or sched.ready or sched.running:
                if self.cancel_requested:
                    break
                self._start_ready(sched)
                item = await finished.get()
                if isinstance(item, Fed):
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
                sched.finished(item, release=not waits(self.results.get(item)))
        finally:
            sched.live = False

    def _start_ready(self, sched: Schedule) -> None:
        """Start ready steps, up to ``max_concurrency`` running at once."""
        limit = self.config.max_concurrency
        ready, running = sched.ready, sched.running
        create_task = asyncio.get_running_loop().create_task
        while ready and len(running) < limit:
            sid = ready.popleft()
            if not sched.complete:
                self.early.add(sid)
            running[sid] = create_task(self._run_step(sched, sid))

    async def _run_step(self, sched: Schedule, sid: int) -> None:
        """A step's task: run it, release its dependents (`_step_ended`), and run on.

        The task goes on with one of the steps that became ready (`_step_ended` says
        which), as a new task would (a chain needs no task per step).
        """
        next_sid: int | None = sid
        busy = 0  # steps run back to back without a turn of the loop
        trace = self.trace
        while next_sid is not None:
            sid = next_sid
            step = sched.steps[sid]
            ctx = StepContext(
                step, time.time(), time.perf_counter(), tool=step.tool, server=step.server
            )
            try:
                # the step, its end turned into its result (inline: no coroutine per step)
                if trace is not None:
                    await trace.start_step(step.id, step.tool)
                try:
                    step_timeout = self.config.step_timeout
                    if step_timeout is None:  # no timeout context to enter
                        result = await execute(
                            self, ctx, sched.view, sched.feedback.get(sid), sched.ids
                        )
                    else:
                        async with asyncio.timeout(step_timeout) as deadline:
                            ctx.deadline = deadline
                            result = await execute(
                                self, ctx, sched.view, sched.feedback.get(sid), sched.ids
                            )
                except (StepFailed, TimeoutError, CircuitOpenError, asyncio.CancelledError) as e:
                    result = ended_by(self, ctx, e)
                if trace is not None:
                    await trace.end_step(result)
                await self._finish(result, safe=not ctx.unsafe_call)
            except BaseException:  # cancelled, or a subscriber failed: the scheduler decides
                if self.finished is not None:
                    self.finished.put_nowait(sid)
                raise
            next_sid = self._step_ended(sched, sid)
            # a call that waited gave the event loop a turn
            busy = 0 if ctx.waited else busy + 1
            if next_sid is not None and busy >= _TURN_EVERY:
                # a chain of tools that never wait gives the loop a turn now and then:
                # timeouts, cancels and the other tasks never wait long
                await asyncio.sleep(0)
                busy = 0

    def _step_ended(self, sched: Schedule, sid: int) -> int | None:
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
        if not sched.live or self.cancel_requested or running.get(sid) is not task:
            return None
        del running[sid]
        # a step waiting for approval holds its dependents back with it
        sched.finished(sid, release=not waits(self.results.get(sid)))
        next_sid: int | None = None
        if sched.ready:
            if self.fast and self.trace is None and task is not None and not task.cancelling():
                next_sid = sched.ready.popleft()
                if not sched.complete:
                    self.early.add(next_sid)
                running[next_sid] = task
            self._start_ready(sched)
        if not running and self.finished is not None:
            self.finished.put_nowait(None)  # nothing runs: the scheduler decides what next
        return next_sid

    # ------------------------------------------------------------------ arrivals

    async def _take(self, sched: Schedule, item: FeedItem | None) -> None:
        """Apply one feed item (None: the feed ended without `PlanComplete`)."""
        if item is None:
            if not sched.complete:
                empty = Plan(steps=(), dialect=self.dialect or "hashstep")
                await self._complete(sched, PlanComplete(empty, reason="the reply held no plan"))
        elif isinstance(item, StepArrived):
            if item.dialect is not None:
                self.dialect = item.dialect
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

    async def _admit(self, sched: Schedule, step: Step, *, whole: bool = False) -> None:
        """Take a step in (``whole``: it comes with the whole plan, nothing is early)."""
        sid = step.id
        sched.steps[sid] = step
        sched.ids.add(sid)
        pr = sched.prior.get(sid)
        if pr is not None and pr.status is StepStatus.SUCCEEDED:
            reused = replace(pr, note=join_note(pr.note, REUSED_NOTE), reused=True)
            self.results[sid] = reused
            self.reused.add(sid)
            step_log(self.run_id, sid).info("step {} reused from a prior result", sid)
            await self.bus.emit(
                StepFinished(run_id=self.run_id, result=reused, plan_version=self.plan_version)
            )
            sched.finished(sid)
            return
        same = sched.spare.pop(call_key(step), None) if sched.spare and not step.refs else None
        if same is not None:  # the same call ran under another id while the plan streamed
            note = f"reused: the same call ran as step {same.step_id} while the plan streamed"
            reused = replace(same, step_id=sid, note=note, reused=True)
            self.results[sid] = reused
            self.reused.add(sid)
            step_log(self.run_id, sid).info("step {}: {}", sid, note)
            await self.bus.emit(
                StepFinished(run_id=self.run_id, result=reused, plan_version=self.plan_version)
            )
            sched.finished(sid)
            return
        self.results.pop(sid, None)  # an earlier failure of a step that runs again
        sched.wait(step, early=whole or sched.complete or may_start_early(self.catalog, step))

    async def _withdraw(self, sched: Schedule, sid: int, reason: str) -> None:
        """Take a step back: cancel it or discard its result, and those of its users."""
        step = sched.steps.get(sid)
        if step is None:
            return
        if self.approvals is not None:  # a withdrawn step's request allows nothing
            await self.approvals.withdraw(sid, self.plan_version, reason)
        for other in sched.started_users(sid):
            await self._discard(sched, other, f"it used the result of step {sid}, withdrawn")
            sched.wait(sched.steps[other], early=sched.complete or may_start_early(self.catalog, 
                sched.steps[other]))
        await self._discard(sched, sid, reason)
        sched.forget(sid)

    async def _discard(self, sched: Schedule, sid: int, reason: str) -> None:
        """Cancel a running step or take back its result (no-op if it never started)."""
        task = sched.running.pop(sid, None)
        if task is not None:
            self.stopping.add(task)
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
                    and sid not in self.defects):
                sched.spare.setdefault(call_key(step), result)  # for the same call elsewhere
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
                    plan_version=self.plan_version,
                )
            )
        del self.results[sid]
        self.early.discard(sid)
        if sid in sched.prior:
            self.results[sid] = sched.prior[sid]

    async def _complete(self, sched: Schedule, item: PlanComplete) -> None:
        """The whole plan: withdraw what it does not hold as arrived, admit the rest."""
        plan = item.plan
        self.dialect = plan.dialect
        self.defects = step_failures(plan)
        for sid, result in item.prior.items():
            sched.prior[sid] = result
            if sid not in sched.steps:
                self.results[sid] = result
        final = {s.id: s for s in plan.steps}
        for sid in list(sched.steps):
            last = final.get(sid)
            if last is None or not same_work(last, sched.steps[sid]) or sid in self.defects:
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

    # ------------------------------------------------------------------ endings

    async def _fail_cycle(self, stuck: list[Step], order: list[int]) -> None:
        stuck_ids = {s.id for s in stuck}
        for s in stuck:
            where = s.ref_args
            waits_on = ", ".join(
                f"step {d}" + (f" (argument {where[d]!r})" if d in where else "")
                for d in sorted(s.deps & stuck_ids)
            )
            msg = (
                f"step {s.id}: cannot run: it waits on {waits_on}, and steps "
                f"{sorted(stuck_ids)} form or follow a dependency cycle; the tool was not called"
            )
            result = not_started(
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
            self.stopping.add(task)
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
                not_started(
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
        if result.step_id in self.early:
            result = replace(result, streamed=True)
        self.results[result.step_id] = result
        bus = self.bus
        if bus.listening:
            await bus.emit(
                StepFinished.of(
                    run_id=self.run_id, result=result, plan_version=self.plan_version,
                    safe=safe,
                )
            )
