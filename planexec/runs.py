"""Run drivers: resume, continue and recorded execution of runs.

They sit above the agent and the executor (and drive them); the run store
(`planexec.store`) only records runs and reads them back.

**Resume.** `plan_resume` reads a run's record and decides, for the latest plan
version, what happens to each step:

- **finished** — its result SUCCEEDED: not run again; the result is handed to the
  executor as ``prior`` (references to it resolve against the recorded output).
- **rerun** — its tool call started and no result was recorded (the process died
  during the call, or while recording it): run again, because the tool is safe
  (read-only or idempotent), or because ``rerun_unsafe`` was asked for.
- **unknown** — same, but the tool is not safe: planexec cannot know whether the call
  took effect. The step is recorded as ``UNKNOWN_OUTCOME`` and the run stops with a
  message that says how to force it (``planexec runs resume RUN_ID --rerun-unsafe``).
  A ``TOOL_TIMEOUT`` or ``CANCELLED`` failure of an unsafe tool whose call had started
  is just as unknown, and so is an earlier ``UNKNOWN_OUTCOME``.
- **pending** — never started, or failed/blocked/cancelled before its tool was called
  (or with a known failure): run (again).

`continue_run` carries the decision out with an `Executor`; `resume_run` does it with a
`PlanExecuteAgent`.

**Recorded execution** (runs not driven by the agent) and extra settings in a run's
config:

- `execute_recorded`: run a given plan with an `Executor` as one recorded run —
  ``RunStarted`` (with the config), ``PlanCreated`` (version 1, with the plan text), the
  executor's events, then ``RunFinished`` — so the store shows the plan and ``planexec
  runs resume`` can continue it. ``planexec run`` and the MCP ``execute_plan`` tool use it.
- `tool_source`: where a run's tools came from (``--tools`` spec, ``--mcp-config``
  path), recorded in the run's config under `TOOL_SOURCE_KEY` so that resume can load
  the same tools when it is not told otherwise.
- `StampedStore`: a store wrapper that adds settings (the tool source) to the config of
  every ``RunStarted`` it records, for runs whose ``RunStarted`` the agent emits.

**Approvals** (docs/approval.md): `waiting_steps` lists a paused run's steps waiting
for a decision, `decide_step` records one (approve, edit, reject) as an
``ApprovalDecided`` event, and `resume_run` hands the recorded decisions to the resumed
run's approval gate, which applies them without asking (a waiting step is pending: it
runs again, and its call uses the approved arguments).

`run_from_store` (rebuild a `Run` from its record) is pure reading: it lives in
`planexec.store.reading` and is re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from planexec._log import run_log, step_log
from planexec.approval import (
    ApprovalAction,
    ApprovalDecision,
    ApprovalRequest,
    apply_edit,
    decided_event,
    open_requests,
)
from planexec.cancelling import cancel_watch
from planexec.errors import (
    ApprovalError,
    ErrorKind,
    LeaseHeldError,
    RunCancelledError,
    RunError,
)
from planexec.events import (
    Event,
    EventBus,
    FallbackUsed,
    PlanCreated,
    RecoveryDecided,
    RunFinished,
    RunStarted,
    StepFinished,
)
from planexec.plan import Plan
from planexec.planner import cut_off
from planexec.results import Run, RunStatus, StepResult, StepStatus
from planexec.store.base import (
    HOST,
    LEASE_OWNER,
    LEASE_TTL,
    Lease,
    RequestState,
    RunRecord,
    RunStore,
    StartedCall,
    check_decidable,
    owner_alive,
)
from planexec.store.codec import args_digest
from planexec.store.reading import run_from_store

if TYPE_CHECKING:
    from planexec.approval import ApprovalDecision
    from planexec.events import EventHandler
    from planexec.executor import Executor
    from planexec.planner import Planner
    from planexec.results import PlanAttempt
    from planexec.tools import ToolCatalog

__all__ = [
    "TOOL_SOURCE_KEY",
    "Execute",
    "ResumePlan",
    "ResumingAgent",
    "StampedStore",
    "catalog_is_safe",
    "continue_run",
    "decide_step",
    "execute_recorded",
    "first_failure",
    "force_hint",
    "hold_lease",
    "plan_resume",
    "recorded_tool_source",
    "request_key",
    "resume_run",
    "run_from_store",
    "tool_source",
    "waiting_request",
    "waiting_steps",
]

# ------------------------------------------------------------------------- resume

_UNSURE_KINDS = frozenset({ErrorKind.TOOL_TIMEOUT, ErrorKind.CANCELLED})


class ResumingAgent(Protocol):
    """What `resume_run` needs of the agent (`planexec.PlanExecuteAgent` is one)."""

    catalog: ToolCatalog
    store: RunStore | None
    planner: Planner | None

    async def run(
        self, question: str, *, run_id: str | None = None,
        event_handlers: Sequence[EventHandler] = (),
    ) -> Run:
        """Answer ``question`` as a new run."""
        ...

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
        """Continue a run at a plan version already made."""
        ...


def force_hint(run_id: str) -> str:
    """The command that resumes a run and re-runs unsafe calls anyway."""
    return f"planexec runs resume {run_id} --rerun-unsafe"


@contextlib.asynccontextmanager
async def hold_lease(
    store: RunStore, run_id: str, *, ttl: float | None = None
) -> AsyncIterator[Lease]:
    """Drive ``run_id`` as its one driver: take its lease, renew it, give it up at the end.

    The lease is taken compare-and-set (`planexec.store.RunStore.acquire_lease`) and
    renewed every ``ttl / 3`` seconds while the body runs; the body runs with
    `planexec.store.base.LEASE_OWNER` set, so the run's approval gate claims decisions as
    this driver. A driver that loses the lease (its heartbeat late by more than ``ttl``)
    is told by the next claim: no approved call happens without the lease.

    ``ttl``: the lease's time to live (None: `LEASE_TTL`).

    Raises:
        LeaseHeldError: another live driver holds the lease; its message names it.
    """
    ttl = LEASE_TTL if ttl is None else ttl
    owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    lease = store.acquire_lease(run_id, owner, ttl=ttl)
    token = LEASE_OWNER.set(owner)
    beat = asyncio.ensure_future(_heartbeat(store, run_id, owner, ttl))
    try:
        yield lease
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
        LEASE_OWNER.reset(token)
        store.release_lease(run_id, owner)


async def _heartbeat(store: RunStore, run_id: str, owner: str, ttl: float) -> None:
    while True:
        await asyncio.sleep(ttl / 3)
        try:
            store.renew_lease(run_id, owner)
        except LeaseHeldError as exc:
            run_log(run_id).warning("{}; approved calls of this driver will be refused", exc)
            return


@dataclass(frozen=True)
class ResumePlan:
    """What resuming a run will do, step by step."""

    record: RunRecord
    """The run's record when the decision was made."""
    plan_version: int | None
    """The plan version that continues (None: no plan was recorded)."""
    plan: Plan | None
    """That plan (None: the run must plan from scratch)."""
    prior: dict[int, StepResult] = field(default_factory=dict)
    """Recorded results handed to the executor: SUCCEEDED ones are not run again."""
    finished: tuple[int, ...] = ()
    """Steps that succeeded and are reused."""
    rerun: tuple[int, ...] = ()
    """Steps whose call started without a recorded result, that will run again."""
    forced: tuple[int, ...] = ()
    """The ``rerun`` steps whose tool is not safe (re-run because of ``rerun_unsafe``)."""
    unknown: tuple[int, ...] = ()
    """Steps whose call started without a recorded result, whose tool is not safe."""
    pending: tuple[int, ...] = ()
    """Steps never started, or that failed in a known way: they run."""
    started_calls: tuple[StartedCall, ...] = ()
    """The calls that started without a recorded result (latest plan version)."""
    tools: dict[int, str | None] = field(default_factory=dict)
    """The tool of each step of the plan."""
    message: str | None = None
    """Why the run cannot continue as is (set when ``unknown`` is not empty)."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.record.run_id

    @property
    def complete(self) -> bool:
        """Whether the run already succeeded: there is nothing to resume."""
        return self.record.status is RunStatus.SUCCEEDED

    @property
    def can_continue(self) -> bool:
        """Whether the run can continue without re-running an unsafe call."""
        return not self.complete and not self.unknown

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as JSON-ready data."""
        return {
            "run_id": self.run_id,
            "status": str(self.record.status),
            "plan_version": self.plan_version,
            "finished": list(self.finished),
            "rerun": list(self.rerun),
            "forced": list(self.forced),
            "unknown": list(self.unknown),
            "pending": list(self.pending),
            "message": self.message,
        }


def _unknown_message(run_id: str, steps: list[tuple[int, str | None]]) -> str:
    which = ", ".join(f"step {sid} ({tool})" for sid, tool in steps)
    return (
        f"run {run_id} cannot resume safely: {which} started a tool call whose outcome was "
        f"never recorded, and the tool is not marked safe (read-only or idempotent), so "
        f"running it again could repeat its effect. Check whether the call took effect, "
        f"then force a re-run with: {force_hint(run_id)}"
    )


def plan_resume(
    store: RunStore,
    run_id: str,
    *,
    is_safe: Callable[[str], bool],
    rerun_unsafe: bool = False,
    allow_running: bool = False,
) -> ResumePlan:
    """Decide what resuming ``run_id`` does with each step of its latest plan.

    Args:
        store: The run store holding the run.
        run_id: The run to resume.
        is_safe: Whether a tool (by name) may be called again without harm.
        rerun_unsafe: Re-run calls of unsafe tools whose outcome is unknown.
        allow_running: Resume even if the run's own process still seems alive.

    Raises:
        RunNotFoundError: no such run.
        RunError: the run is still running in a live process of this host.
    """
    record = store.get_run(run_id)
    cancelled = store.cancel_request(run_id)
    if cancelled is not None:  # asked to stop (runs cancel, MCP): final; Ctrl-C is not
        raise RunCancelledError(
            f"run {run_id} was {cancelled.describe()}; a cancelled run does not resume",
            run_id=run_id,
        )
    if (
        record.status is RunStatus.RUNNING
        and not allow_running
        and record.host == HOST
        and record.pid is not None
        and owner_alive(record.pid, record.pid_start)
    ):
        raise RunError(
            f"run {run_id} is still running (process {record.pid} on {record.host}); "
            "wait for it or stop it before resuming, or, if you are sure it is not "
            f"running, force it: planexec runs resume {run_id} --force"
        )
    if record.status is RunStatus.RUNNING and allow_running:
        run_log(run_id).warning(
            "run {} is recorded as running by process {} on host {}; resuming it anyway "
            "(forced): if that process is still running, both will run its steps", run_id,
            record.pid, record.host,
        )
    elif record.status is RunStatus.RUNNING:
        run_log(run_id).warning(
            "run {} is recorded as running by process {} on host {}, which cannot be checked "
            "from here; resuming it — make sure it is not still running", run_id,
            record.pid, record.host,
        )
    plans = store.plans(run_id)
    latest = next((p for p in reversed(plans) if p.plan is not None), None)
    if latest is None or latest.plan is None:
        return ResumePlan(record=record, plan_version=None, plan=None)
    plan, version = latest.plan, latest.version
    recorded = {s.result.step_id: s.result for s in store.step_results(run_id, version)}
    started = {
        c.step_id: c for c in store.started_calls_without_result(run_id)
        if c.plan_version == version
    }
    calls_started = {
        int(ev["step_id"])
        for ev in store.events(run_id)
        if ev.get("type") == "ToolCallStarted" and int(ev.get("plan_version", 1)) == version
    }
    prior: dict[int, StepResult] = {}
    finished: list[int] = []
    rerun: list[int] = []
    forced: list[int] = []
    unknown: list[int] = []
    pending: list[int] = []
    for step in plan.steps:
        sid, tool = step.id, step.tool
        result = recorded.get(sid)
        safe = tool is not None and is_safe(tool)
        in_flight = sid in started
        if result is not None and not in_flight:
            if result.status is StepStatus.SUCCEEDED:
                prior[sid] = result
                finished.append(sid)
                continue
            unsure = result.error_kind is ErrorKind.UNKNOWN_OUTCOME or (
                result.error_kind in _UNSURE_KINDS and sid in calls_started
            )
            in_flight = unsure and tool is not None
        if in_flight:
            (rerun if safe or rerun_unsafe else unknown).append(sid)
            if not safe and rerun_unsafe:
                forced.append(sid)
        else:
            pending.append(sid)
    message = None
    if unknown:
        message = _unknown_message(run_id, [(sid, plan.step(sid).tool) for sid in unknown])
    return ResumePlan(
        record=record,
        plan_version=version,
        plan=plan,
        prior=prior,
        finished=tuple(finished),
        rerun=tuple(rerun),
        forced=tuple(forced),
        unknown=tuple(unknown),
        pending=tuple(pending),
        started_calls=tuple(started.values()),
        tools={s.id: s.tool for s in plan.steps},
        message=message,
    )


async def _stop_unknown(rp: ResumePlan, bus: EventBus) -> None:
    """Record UNKNOWN_OUTCOME for each unknown step, and the run as failed."""
    assert rp.message is not None and rp.plan is not None and rp.plan_version is not None
    for sid in rp.unknown:
        step = rp.plan.step(sid)
        call = next((c for c in rp.started_calls if c.step_id == sid), None)
        error = (
            f"step {sid}: the call to {step.tool!r} started but its outcome was never "
            f"recorded, and {step.tool!r} is not safe to repeat; to run it again: "
            f"{force_hint(rp.run_id)}"
        )
        step_log(rp.run_id, sid).warning(error)
        await bus.emit(
            StepFinished(
                run_id=rp.run_id,
                plan_version=rp.plan_version,
                result=StepResult(
                    step_id=sid,
                    tool=step.tool,
                    status=StepStatus.FAILED,
                    args=call.args if call else None,
                    error=error,
                    error_kind=ErrorKind.UNKNOWN_OUTCOME,
                    server=step.server,
                    started_at=call.ts if call else None,
                ),
            )
        )
    await bus.emit(
        RecoveryDecided(run_id=rp.run_id, error_kind=ErrorKind.UNKNOWN_OUTCOME, action="stop",
                        reason=rp.message, step_id=rp.unknown[0])
    )
    await bus.emit(RunFinished(run_id=rp.run_id, status=str(RunStatus.FAILED), error=rp.message))


def _announcement(rp: ResumePlan) -> list[Event]:
    """The events that say what resuming does: the ``resume`` decision, then each re-run."""
    reason = (
        f"resuming run {rp.run_id} at plan version {rp.plan_version}: "
        f"{len(rp.finished)} finished step(s) reused, {len(rp.rerun)} interrupted call(s) "
        f"re-run, {len(rp.pending)} step(s) to run"
    )
    run_log(rp.run_id).info(reason)
    events: list[Event] = [
        RecoveryDecided(run_id=rp.run_id, error_kind=None, action="resume", reason=reason)
    ]
    for sid in rp.rerun:
        tool = rp.tools.get(sid)
        msg = (
            f"step {sid}: the call to {tool!r} started but its result was never recorded; "
            + ("calling it again although the tool is not safe (forced with --rerun-unsafe)"
               if sid in rp.forced
               else "calling it again because the tool is safe to repeat")
        )
        step_log(rp.run_id, sid).warning(msg)
        events.append(FallbackUsed(run_id=rp.run_id, step_id=sid, code="RESUME_RERUN",
                                   message=msg))
    return events


async def _announce(rp: ResumePlan, store: RunStore, bus: EventBus) -> None:
    """Claim the run for this process and record what resuming will do."""
    store.mark_status(rp.run_id, RunStatus.RUNNING)
    for event in _announcement(rp):
        await bus.emit(event)


Execute = Callable[[Plan, Mapping[int, StepResult], int], Awaitable[list[StepResult]]]
"""Runs a plan: ``(plan, prior, plan_version) -> results`` (e.g. `Executor.run`)."""


async def continue_run(
    store: RunStore,
    run_id: str,
    execute: Execute,
    *,
    bus: EventBus,
    is_safe: Callable[[str], bool],
    rerun_unsafe: bool = False,
) -> Run:
    """Resume ``run_id`` by running the rest of its latest plan with ``execute``.

    ``bus`` must deliver to ``store`` (and is what ``execute`` emits to). No recovery,
    re-planning or answer: the run succeeds when every step of the plan succeeds (it is
    INCOMPLETE when the plan's reply was cut off, `planexec.planner.cut_off`). The
    agent's `resume_run` adds those.

    Raises:
        RunNotFoundError: no such run.
        RunError: the run is still running, or has no plan to continue.
        LeaseHeldError: another driver drives the run (one driver per run).
    """
    async with hold_lease(store, run_id):
        return await _continue_run(store, run_id, execute, bus=bus, is_safe=is_safe,
                                   rerun_unsafe=rerun_unsafe)


async def _continue_run(
    store: RunStore,
    run_id: str,
    execute: Execute,
    *,
    bus: EventBus,
    is_safe: Callable[[str], bool],
    rerun_unsafe: bool,
) -> Run:
    rp = plan_resume(store, run_id, is_safe=is_safe, rerun_unsafe=rerun_unsafe)
    if rp.complete:
        return run_from_store(store, run_id)
    if rp.plan is None or rp.plan_version is None:
        raise RunError(f"run {run_id} has no recorded plan to continue")
    if not rp.can_continue:
        store.mark_status(run_id, RunStatus.RUNNING)
        await _stop_unknown(rp, bus)
        return run_from_store(store, run_id)
    await _announce(rp, store, bus)
    results = await execute(rp.plan, rp.prior, rp.plan_version)
    cut = cut_off(rp.plan)  # a cut-off plan never ends SUCCEEDED
    unrunnable = cut.unrunnable if cut is not None else ()
    failed = [r for r in results if not r.ok and r.step_id not in unrunnable]
    if any(r.status is StepStatus.WAITING_APPROVAL for r in results):
        await bus.emit(RunFinished(run_id=run_id, status=str(RunStatus.WAITING_APPROVAL)))
    elif failed:
        first = failed[0]
        await bus.emit(RunFinished(run_id=run_id, status=str(RunStatus.FAILED),
                                   error=first.error or f"step {first.step_id} {first.status}"))
    elif cut is not None:
        await bus.emit(RunFinished(run_id=run_id, status=str(RunStatus.INCOMPLETE),
                                   error=f"the plan is incomplete: {cut.describe()}"))
    else:
        await bus.emit(RunFinished(run_id=run_id, status=str(RunStatus.SUCCEEDED)))
    return run_from_store(store, run_id)


def catalog_is_safe(catalog: Any) -> Callable[[str], bool]:
    """Build an ``is_safe`` function from a `ToolCatalog` (unknown tools are unsafe)."""

    def is_safe(tool: str) -> bool:
        try:
            spec = catalog.lookup(tool)
        except KeyError:  # ambiguous across servers: safe only if every one is
            specs = [s for s in catalog.specs() if s.name == tool]
            return bool(specs) and all(s.hints.safe for s in specs)
        if spec is None:
            from planexec.planner import FINAL_STEP_TOOL

            return tool == FINAL_STEP_TOOL
        return bool(spec.hints.safe)

    return is_safe


async def resume_run(
    agent: ResumingAgent,
    store: RunStore,
    run_id: str,
    rerun_unsafe: bool = False,
    *,
    allow_running: bool = False,
) -> Run:
    """Resume ``run_id`` with a `PlanExecuteAgent` (its tools, model, config and policy).

    The latest plan continues with the agent's whole loop: failed steps get recovery
    decisions, re-plans are made (numbered after the recorded ones), the answer is
    written and the evaluator consulted. The events go to ``store`` (and to the agent's
    own store and handlers). A run recorded before any plan was made is planned afresh
    under the same id. ``allow_running`` resumes a run whose recorded process still seems
    alive (``planexec runs resume --force``).

    Resuming takes the run's lease (`hold_lease`): a second resumer is refused. Every
    approval request on record is honoured, whatever the agent's config: its step runs
    only with a decision made for its exact call.

    Raises:
        RunNotFoundError: no such run.
        RunError: the run is still running in a live process, or it has no plan and
            the agent has no model to plan with.
        LeaseHeldError: another driver drives the run (it is named).
    """
    async with hold_lease(store, run_id) as lease:
        return await _resume_run(agent, store, run_id, rerun_unsafe, allow_running,
                                 lease.owner)


async def _resume_run(
    agent: ResumingAgent,
    store: RunStore,
    run_id: str,
    rerun_unsafe: bool,
    allow_running: bool,
    owner: str,
) -> Run:
    rp = plan_resume(store, run_id, is_safe=catalog_is_safe(agent.catalog),
                     rerun_unsafe=rerun_unsafe, allow_running=allow_running)
    if rp.complete:
        return run_from_store(store, run_id)
    handlers = [] if agent.store is store else [store.handle]
    if rp.plan is None or rp.plan_version is None:
        if agent.planner is None:
            raise RunError(f"run {run_id} has no recorded plan and the agent has no model")
        run_log(run_id).warning("run {} was interrupted before it had a plan: planning again",
                                run_id)
        store.mark_status(run_id, RunStatus.RUNNING)
        run: Run = await agent.run(rp.record.question, run_id=run_id, event_handlers=handlers)
    elif not rp.can_continue:
        bus = EventBus()
        store.attach(bus)
        store.mark_status(run_id, RunStatus.RUNNING)
        await _stop_unknown(rp, bus)
        return run_from_store(store, run_id)
    else:
        store.mark_status(run_id, RunStatus.RUNNING)
        run = await agent.continue_plan(
            rp.record.question,
            run_from_store(store, run_id).attempts,
            run_id=run_id,
            version=rp.plan_version,
            prior=_prior_with_earlier_versions(store, run_id, rp),
            announce=_announcement(rp),
            event_handlers=handlers,
            store=store,
            owner=owner,
        )
    if handlers:  # the agent flushes its own store; this one is only subscribed
        await store.flush()
    return run


def _prior_with_earlier_versions(
    store: RunStore, run_id: str, rp: ResumePlan
) -> dict[int, StepResult]:
    """The plan's reusable results, plus succeeded results of earlier plan versions.

    A re-plan may reference steps kept from earlier plans; they are not part of the new
    plan but must be visible to its references.
    """
    prior: dict[int, StepResult] = {}
    for rs in store.step_results(run_id):
        if (
            rs.result.ok
            and rp.plan_version is not None
            and rs.plan_version < rp.plan_version
            and rp.plan is not None
            and rs.result.step_id not in rp.plan.ids
        ):
            prior[rs.result.step_id] = rs.result
    prior.update(rp.prior)
    return prior

# ---------------------------------------------------------------------- approvals

_DECIDABLE = (RunStatus.WAITING_APPROVAL, RunStatus.INTERRUPTED, RunStatus.RUNNING)
"""Run statuses a decision may be recorded in (a run killed while it waited is
INTERRUPTED: its request is on record; a running one may be asking its callback right
now: the first decision recorded wins, compare-and-set, and the run applies it)."""


def waiting_steps(store: RunStore, run_id: str) -> list[ApprovalRequest]:
    """The steps of a run waiting for a decision: requests no recorded decision answers.

    Raises:
        RunNotFoundError: no such run.
    """
    store.get_run(run_id)
    return open_requests(store, run_id)


def waiting_request(store: RunStore, run_id: str, step_id: int) -> ApprovalRequest:
    """The request step ``step_id`` of ``run_id`` waits on (its latest plan version).

    Raises:
        RunNotFoundError: no such run.
        ApprovalError: the run is not paused, or the step does not wait for a decision.
    """
    record = store.get_run(run_id)
    if record.status not in _DECIDABLE:
        raise ApprovalError(
            f"run {run_id} is {record.status.value}, not waiting for approval: no decision "
            "can be recorded"
        )
    waiting = waiting_steps(store, run_id)
    found = [r for r in waiting if r.step_id == step_id]
    if not found:
        latest = [r for r in store.approval_requests(run_id) if r.step_id == step_id]
        if latest and latest[-1].state in (RequestState.DECIDED, RequestState.CLAIMED):
            last = max(latest, key=lambda r: (r.plan_version, r.request_no))
            check_decidable(last, run_id, last.plan_version, step_id, None)  # says by whom
        shown = ", ".join(f"step {r.step_id} ({r.tool})" for r in waiting) or "none"
        raise ApprovalError(
            f"step {step_id} of run {run_id} is not waiting for approval (waiting: {shown})"
        )
    return found[-1]


async def decide_step(
    store: RunStore,
    run_id: str,
    step_id: int,
    decision: ApprovalDecision,
    *,
    catalog: Any = None,
    seen: ApprovalRequest | str | None = None,
) -> ApprovalDecision:
    """Record a person's decision about a waiting step (``planexec runs approve|reject``).

    The decision is recorded compare-and-set (`planexec.store.RunStore.decide_request`),
    with its `planexec.events.ApprovalDecided` event, committed before this returns;
    `resume_run` applies it to the exact call it was asked for. An approval records the
    arguments the tool will be called with: the resolved ones, with the edits merged in
    (checked in the plan's dialect and validated against the tool's schema, from
    ``catalog``; the gate checks them again before the call).

    ``seen`` is the request the person decided about (as `waiting_steps` gave it), or its
    `request_key` (what a page, ``planexec runs show`` or an MCP client carried): when
    the step has asked again since (another plan version, tool, server or arguments),
    nothing is recorded (``ApprovalError``), so a decision never lands on a call nobody
    saw. Without it, the step's request waiting now is decided.

    Returns:
        The decision as recorded (``args`` filled in).

    Raises:
        RunNotFoundError: no such run.
        AlreadyDecidedError: another decider was first (it says who, when and what).
        ApprovalError: the step does not wait, or waits on another request than ``seen``;
            an edit without a catalog, for a tool the catalog lacks, or that does not fit
            the schema (``problems``).
        ValueError: a ``defer`` decision (nothing to record).
    """
    request = waiting_request(store, run_id, step_id)
    if seen is not None and _key_of(seen) != request_key(request):
        raise ApprovalError(
            f"step {step_id} of run {run_id} asked again since the request you decided "
            f"(now: tool {request.tool!r}, plan version {request.plan_version}, arguments "
            f"{request.args!r}, key {request_key(request)}): look at the new request and "
            "decide again; nothing was recorded"
        )
    final: dict[str, Any] | None = None
    if decision.action is ApprovalAction.DEFER:
        raise ValueError("a deferral records nothing: the step already waits")
    if decision.action is ApprovalAction.APPROVE:
        final = dict(request.args)
    elif decision.action is ApprovalAction.EDIT:
        spec = catalog.lookup(request.tool, request.server) if catalog is not None else None
        if spec is None:
            raise ApprovalError(
                f"step {step_id}: edited arguments are checked against the schema of tool "
                f"{request.tool!r}, which is not among the tools given"
            )
        plans = [p for p in store.plans(run_id) if p.version == request.plan_version]
        dialect = plans[0].plan.dialect if plans and plans[0].plan is not None else None
        final, problems = apply_edit(spec, request.args, decision.edited or {},
                                     dialect=dialect)
        if final is None:
            raise ApprovalError(
                f"step {step_id}: the edited arguments do not fit the schema of tool "
                f"{request.tool!r}: {'; '.join(problems)}; nothing was recorded",
                problems,
            )
    decided = dataclasses.replace(decision, args=final)
    await store.flush()
    store.decide_request(
        run_id, request.plan_version, step_id, action=str(decided.action), args=final,
        edited=decided.edited, reason=decided.reason, by=decided.by, at=decided.at,
        event=decided_event(run_id, step_id, request.plan_version, decided),
    )
    run_log(run_id).info(
        "step {}: decision recorded: {} by {}", step_id, decided.action, decided.by or "?"
    )
    return decided


def _call_of(request: ApprovalRequest) -> tuple[int, str, str | None, str]:
    """What a request asks about: its plan version, tool, server and argument digest."""
    return (request.plan_version, request.tool, request.server, args_digest(request.args))


def request_key(request: ApprovalRequest) -> str:
    """The opaque, stable key of what a waiting step asks (for ``decide_step(seen=...)``).

    Short hex of a sha256 over exactly what a decision must match: the plan version,
    tool, server and argument digest. Show it with the request and send it back with
    the decision: when the step has asked again since, the keys differ and nothing is
    recorded.
    """
    text = json.dumps(list(_call_of(request)), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _key_of(seen: ApprovalRequest | str) -> str:
    """The key a decider saw: given as such, or of the request it was shown."""
    return seen if isinstance(seen, str) else request_key(seen)


# ------------------------------------------------------------- recorded execution

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
        ``{"tools": ..., "mcp_config": ...}`` with the keys that were given, and
        ``"tools_path"``: the absolute ``sys.path`` entry ``MODULE`` is imported from
        (`planexec._loading.module_root`), so that a resume started elsewhere finds it.
    """
    from planexec._loading import module_root

    out: dict[str, str] = {}
    if tools:
        out["tools"] = str(tools)
        root = module_root(str(tools))
        if root:
            out["tools_path"] = root
    if mcp_config:
        out["mcp_config"] = str(Path(mcp_config).expanduser().resolve())
    return out


def recorded_tool_source(config: Mapping[str, Any]) -> dict[str, str]:
    """The tool source recorded in a run's config (empty when none was)."""
    raw = config.get(TOOL_SOURCE_KEY)
    if not isinstance(raw, Mapping):
        return {}
    return {
        k: str(v) for k, v in raw.items() if k in ("tools", "mcp_config", "tools_path") and v
    }


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
    FAILED naming the first failure, or INCOMPLETE when the plan's reply was cut off
    and nothing else failed, or CANCELLED), and flushes ``store`` (if given; it must
    already be subscribed to ``bus``).

    The executor's ``usage.wall_time`` is set to the run's duration, however it ends, and
    its trace (``executor.trace``, opened by `planexec.runtime.Runtime.start_trace` when
    anybody traces) is closed with the run.

    Raises:
        asyncio.CancelledError: the run was cancelled (recorded as CANCELLED first).
    """
    started = time.perf_counter()
    trace = executor.trace
    lease = (hold_lease(store, executor.run_id) if isinstance(store, RunStore)
             else contextlib.nullcontext())
    try:
        async with lease:
            results = await _execute_recorded(
                executor, plan, text, bus=bus, store=store, question=question, config=config
            )
    except BaseException as exc:
        if trace is not None:
            await trace.end({}, exc)
        raise
    finally:
        executor.usage.wall_time = time.perf_counter() - started
    if trace is not None:
        await trace.end({"steps": [r.to_dict() for r in results]})
    return results


async def _execute_recorded(
    executor: Executor,
    plan: Plan,
    text: str,
    *,
    bus: EventBus,
    store: Any,
    question: str,
    config: Mapping[str, Any] | None,
) -> list[StepResult]:
    run_id = executor.run_id
    await bus.emit(RunStarted(run_id=run_id, question=question, config=dict(config or {})))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=plan, text=text))
    try:
        try:
            async with cancel_watch(
                store, run_id, lambda request: executor.cancel(f"the run was {request.describe()}")
            ):
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
        cut = cut_off(plan)
        unrunnable = cut.unrunnable if cut is not None else ()
        failed = first_failure([r for r in results if r.step_id not in unrunnable])
        if executor.cancelled:  # by the caller, or by executor.run_timeout (its reason)
            status = RunStatus.CANCELLED
            error = executor.cancel_reason or "the run was cancelled by the caller"
        elif any(r.status is StepStatus.WAITING_APPROVAL for r in results):
            status, error = RunStatus.WAITING_APPROVAL, None  # paused, never a success
        elif failed is not None:
            status = RunStatus.FAILED
            error = failed.error or f"step {failed.step_id} {failed.status.value}"
        elif cut is not None:  # never a silent success: the plan's end is missing
            status, error = RunStatus.INCOMPLETE, f"the plan is incomplete: {cut.describe()}"
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
