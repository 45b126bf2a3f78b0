"""The `RunStore` protocol and the records it gives back.

A run store *observes* runs: it is an `EventBus` subscriber (``store.attach(bus)``)
and builds, from the events, a record of each run — the question and config, every
plan version with its diagnostics, every step result, and the whole event stream. It
never drives a run. Resume (`planexec.runs`) reads these records back.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from planexec.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ClaimRefusal,
    DecisionClaimError,
    LeaseHeldError,
)
from planexec.events import Event, EventBus
from planexec.plan import Diagnostic, Plan
from planexec.results import RunStatus, StepResult

__all__ = [
    "DECIDED_ACTIONS",
    "EXPORT_FORMAT",
    "CHECKPOINT_EVENTS",
    "LEASE_OWNER",
    "LEASE_TTL",
    "RUN_FIELDS",
    "ApprovalRecord",
    "Lease",
    "RequestState",
    "RecordedPlan",
    "RecordedStep",
    "RunRecord",
    "RunStore",
    "StartedCall",
    "CancelRequest",
    "check_claim",
    "check_decidable",
    "decided",
    "checkpoint",
    "effective_status",
    "lease_lost",
    "lease_refused",
    "new_lease",
    "export_document",
    "is_checkpoint",
    "owner_alive",
    "pid_alive",
    "process_start_time",
    "run_record",
    "unmatched_calls",
]

EXPORT_FORMAT = "planexec.run/1"
"""The ``format`` field of `RunStore.export` documents."""

CHECKPOINT_EVENTS = frozenset(
    {"RunStarted", "PlanCreated", "ToolCallStarted", "StepFinished", "StepDiscarded",
     "RecoveryDecided", "RunFinished", "ApprovalRequested", "ApprovalDecided",
     "RunCancelRequested"}
)
"""Event types that may be committed before `RunStore.handle` returns (see `is_checkpoint`).

Other events (``StepStarted``, ``ArgResolved``, ``FallbackUsed``, ``LLMCalled`` ...)
may be held in memory and committed with the run's next checkpoint event. So may the
``ToolCallStarted`` of a safe tool and every ``StepFinished`` (a step's result).
"""


def is_checkpoint(data: Mapping[str, Any]) -> bool:
    """Whether an encoded event (``{"type": ..., ...}``) is committed before ``handle`` returns.

    Every type in `CHECKPOINT_EVENTS`, except:

    - the ``ToolCallStarted`` of a safe tool (read-only or idempotent, ``"safe": true``):
      resume runs such a step again whether or not its call start was recorded;
    - every ``StepFinished``: a step's result rides with the next commit — the next
      unsafe call start among them, so every result an unsafe call can depend on is
      durable before that call — and a store bounds how long it waits
      (`planexec.store.SQLiteRunStore`'s ``result_delay``). A lost result makes resume
      run the step again when it called no tool that is not safe
      (`planexec.events.StepFinished.safe`), and see a call whose outcome is unknown
      when it did: the call start is durable, so that call is never made again without
      a decision.

    Both ride along with a later commit instead of costing one each. A store that
    commits every result at once (``durability="full"``, ``result_delay=0``) makes
    ``StepFinished`` a checkpoint again.
    """
    return checkpoint(data.get("type"), data.get("safe"))


def checkpoint(kind: object, safe: object) -> bool:
    """`is_checkpoint` of an event of type ``kind`` whose ``safe`` field is ``safe``.

    For a store that decides from the event itself, before (or without) encoding it.
    """
    if kind == "StepFinished" or (kind == "ToolCallStarted" and safe is True):
        return False
    return kind in CHECKPOINT_EVENTS


HOST = socket.gethostname()

RUN_FIELDS = (
    "run_id", "question", "config", "status", "created_at", "updated_at", "finished_at",
    "answer", "error", "error_kind", "plan_version", "pid", "host", "pid_start",
)
"""What a store keeps about a run (the `RunRecord` fields but ``step_counts``), in order."""


@dataclass(frozen=True)
class RunRecord:
    """What the store knows about one run."""

    run_id: str
    """The run's id."""
    question: str
    """The question asked ("" when the run was recorded without a ``RunStarted``)."""
    status: RunStatus
    """The recorded status; ``INTERRUPTED`` when recorded as running by a dead process."""
    config: dict[str, Any] = field(default_factory=dict)
    """The configuration the run started with (as given in ``RunStarted``)."""
    created_at: float | None = None
    """When the run started (seconds since the epoch)."""
    updated_at: float | None = None
    """When the last event was recorded."""
    finished_at: float | None = None
    """When the run finished, if it did."""
    answer: str | None = None
    """The answer, if the run gave one."""
    error: str | None = None
    """Why the run failed (the dead-letter reason), if it did."""
    error_kind: str | None = None
    """The kind of the last failure recorded for a run that did not succeed."""
    plan_version: int | None = None
    """The latest plan version recorded."""
    step_counts: dict[str, int] = field(default_factory=dict)
    """Latest-plan step results by status, e.g. ``{"SUCCEEDED": 3, "FAILED": 1}``."""
    plan_steps: int | None = None
    """How many steps the latest plan has (None when it has no plan, e.g. none recorded)."""
    pid: int | None = None
    """The process that last started or resumed the run."""
    host: str | None = None
    """The host of that process."""
    pid_start: float | None = None
    """When that process started (`process_start_time`; None where it cannot be read).

    With ``pid`` it identifies the process: a live process with the same pid and another
    start time is a different process that reused the pid.
    """

    def to_dict(self) -> dict[str, Any]:
        """Return the record as JSON-ready data."""
        return {
            "run_id": self.run_id,
            "question": self.question,
            "status": str(self.status),
            "config": self.config,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "answer": self.answer,
            "error": self.error,
            "error_kind": self.error_kind,
            "plan_version": self.plan_version,
            "step_counts": dict(self.step_counts),
            "plan_steps": self.plan_steps,
            "pid": self.pid,
            "host": self.host,
            "pid_start": self.pid_start,
        }


@dataclass(frozen=True)
class RecordedPlan:
    """One plan version of a run, as recorded from ``PlanCreated``."""

    version: int
    """1 for the first plan, 2 for the first re-plan, ..."""
    plan: Plan | None
    """The parsed plan (None when the planner's reply held none)."""
    text: str = ""
    """The planner's reply."""
    reason: str | None = None
    """Why this plan was made."""
    created_at: float | None = None
    """When it was recorded."""
    error: str | None = None
    """Why there is no plan, or the problems it still had after the planner's re-prompts."""
    drafts: tuple[dict[str, Any], ...] = ()
    """The planner's rejected replies for this version: ``{"text": ..., "problems": [...]}``."""

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """The plan's diagnostics (none when there is no plan)."""
        return self.plan.diagnostics if self.plan else ()

    def to_dict(self) -> dict[str, Any]:
        """Return the plan version as JSON-ready data."""
        return {
            "version": self.version,
            "plan": self.plan.to_dict() if self.plan else None,
            "text": self.text,
            "reason": self.reason,
            "created_at": self.created_at,
            "error": self.error,
            "drafts": [dict(d) for d in self.drafts],
        }


@dataclass(frozen=True)
class RecordedStep:
    """One step result, with the plan version it belongs to."""

    plan_version: int
    """The plan version the step was part of."""
    result: StepResult
    """The result, as recorded from ``StepFinished`` (the latest one for the step)."""
    recorded_at: float | None = None
    """When the result was recorded."""

    def to_dict(self) -> dict[str, Any]:
        """Return the recorded step as JSON-ready data."""
        return {"plan_version": self.plan_version, "recorded_at": self.recorded_at,
                **self.result.to_dict()}


@dataclass(frozen=True)
class CancelRequest:
    """A request to stop a run, as recorded from its ``RunCancelRequested`` event."""

    run_id: str
    """The run."""
    reason: str
    """Why, in the words of who asked."""
    by: str | None
    """Who asked."""
    requested_at: float
    """When (seconds since the epoch)."""

    @classmethod
    def from_event(cls, data: Mapping[str, Any]) -> CancelRequest:
        """Rebuild the request from its recorded event (JSON data)."""
        by = data.get("by")
        return cls(
            run_id=str(data["run_id"]),
            reason=str(data.get("reason") or ""),
            by=None if by is None else str(by),
            requested_at=float(data.get("ts") or 0.0),
        )

    def describe(self) -> str:
        """``cancelled by dana: wrong account`` (who and why, for messages)."""
        return f"cancelled by {self.by or 'someone'}: {self.reason or 'no reason given'}"


@dataclass(frozen=True)
class StartedCall:
    """A ``ToolCallStarted`` with no ``StepFinished`` after it for the same step."""

    plan_version: int
    """The plan version of the step."""
    step_id: int
    """The step whose call started."""
    tool: str
    """The tool called."""
    args: dict[str, Any]
    """The arguments it was called with."""
    attempt: int
    """The attempt number of the last call started."""
    ts: float
    """When the call started."""


@runtime_checkable
class RunStore(Protocol):
    """Records runs from their events and reads them back.

    Implementations: `planexec.store.MemoryRunStore`, `planexec.store.SQLiteRunStore`.
    """

    async def handle(self, event: Event) -> None:
        """Record one event.

        A checkpoint event (`is_checkpoint`) is durable when this returns.
        """
        ...

    def attach(self, bus: EventBus) -> None:
        """Subscribe `handle` to a bus."""
        ...

    async def flush(self) -> None:
        """Commit every event still held in memory."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """Return a run's record.

        Raises:
            RunNotFoundError: no such run.
        """
        ...

    def list_runs(self, status: RunStatus | str | None = None, limit: int = 50) -> list[RunRecord]:
        """Return runs, newest first, optionally only those with ``status``."""
        ...

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's events in order, as JSON data with a ``type`` key."""
        ...

    def step_results(self, run_id: str, plan_version: int | None = None) -> list[RecordedStep]:
        """Return the latest result of each step, in the order they were recorded."""
        ...

    def plans(self, run_id: str) -> list[RecordedPlan]:
        """Return every plan version of a run, oldest first."""
        ...

    def started_calls_without_result(self, run_id: str) -> list[StartedCall]:
        """Return the steps whose tool call started and whose result was never recorded."""
        ...

    def cancel_request(self, run_id: str) -> CancelRequest | None:
        """Return the run's latest cancel request (its ``RunCancelRequested``), if any.

        Cheap enough to ask twice a second while the run executes (the driver's watch).
        """
        ...

    def export(self, run_id: str) -> dict[str, Any]:
        """Return everything recorded about a run as one JSON document."""
        ...

    def mark_status(
        self,
        run_id: str,
        status: RunStatus | str,
        *,
        error: str | None = None,
        error_kind: str | None = None,
    ) -> None:
        """Set a run's status (and reason), e.g. to mark it failed or resumed."""
        ...

    # -- one driver per run: the lease -----------------------------------------------

    def acquire_lease(self, run_id: str, owner: str, *, ttl: float = ...) -> Lease:
        """Take the run's lease for ``owner``, compare-and-set in one transaction.

        Granted when nobody holds it, when the holder's lease has expired (no heartbeat
        for ``ttl`` seconds, or the holder's process on this host is gone), or when
        ``owner`` holds it already (the heartbeat is renewed).

        Raises:
            LeaseHeldError: another live owner holds it (``holder`` names it).
        """
        ...

    def renew_lease(self, run_id: str, owner: str) -> Lease:
        """Renew ``owner``'s lease (the heartbeat); compare-and-set.

        Raises:
            LeaseHeldError: ``owner`` no longer holds it (``holder``: who does, or None).
        """
        ...

    def release_lease(self, run_id: str, owner: str) -> bool:
        """Give up ``owner``'s lease; False when ``owner`` did not hold it (nothing changes)."""
        ...

    def get_lease(self, run_id: str) -> Lease | None:
        """The run's lease as recorded (live or not: see `Lease.live`), or None."""
        ...

    # -- approval requests and decisions ---------------------------------------------

    def open_request(
        self, request: ApprovalRecord, *, event: Event | None = None
    ) -> ApprovalRecord:
        """Record an open approval request, durably, with the policy that opened it.

        In one transaction: an earlier request of the same step not yet claimed is
        withdrawn (superseded), the new one gets the next ``request_no`` and state
        ``open``, and ``event`` (its ``ApprovalRequested``) is appended to the run's
        events (the store then ignores that same event object when a bus delivers it).

        Returns:
            The request as recorded (``request_no`` set).
        """
        ...

    def decide_request(
        self,
        run_id: str,
        plan_version: int,
        step_id: int,
        *,
        action: str,
        args: dict[str, Any] | None,
        edited: dict[str, Any] | None = None,
        reason: str | None = None,
        by: str | None = None,
        at: float | None = None,
        request_no: int | None = None,
        event: Event | None = None,
    ) -> ApprovalRecord:
        """Decide the step's latest request, compare-and-set in one transaction.

        ``args`` are the arguments the decision allows (None for a rejection): their
        digest (`planexec.store.codec.args_digest`) is recorded as ``decided_digest``.
        ``request_no``: the request the decider saw (None: the latest). ``event`` (the
        ``ApprovalDecided``) is appended to the run's events in the same transaction.

        Raises:
            AlreadyDecidedError: the request was decided (or claimed) already: by whom,
                when, what.
            ApprovalError: no request for the step, or it was withdrawn or superseded.
        """
        ...

    def withdraw_request(
        self, run_id: str, plan_version: int, step_id: int, reason: str
    ) -> ApprovalRecord | None:
        """Withdraw the step's latest request unless a call claimed it (state ``withdrawn``).

        Returns:
            The withdrawn request, or None when there was none to withdraw.
        """
        ...

    def claim_decision(
        self,
        run_id: str,
        plan_version: int,
        step_id: int,
        *,
        tool: str,
        digest: str,
        claimer: str,
        event: Event | None = None,
        server: str | None = None,
    ) -> ApprovalRecord:
        """Claim the step's decision for one call and record the call's start: one transaction.

        The latest request of the step must be decided ``approve`` or ``edit`` for this
        ``tool`` of this ``server`` (two servers may offer tools of one name) and these
        arguments (``digest`` equals its ``decided_digest``), and not claimed; no other
        live owner may hold the run's lease. Then its state becomes
        ``claimed`` (by ``claimer``, now) and ``event`` (the call's ``ToolCallStarted``)
        is appended to the run's events, in the same transaction.

        Raises:
            DecisionClaimError: the call must not happen; ``refusal`` says why.
        """
        ...

    def approval_requests(self, run_id: str) -> list[ApprovalRecord]:
        """Every request of a run (withdrawn and superseded ones too), in the order opened."""

    def set_owner(self, run_id: str, principal: str) -> None:
        """Record the principal that started a run (the first one recorded stands).

        Used by a shared ``planexec serve --http`` with principals
        (`planexec.mcp.principals`): only the owner (or an admin) may read or decide it.
        """
        ...

    def owner(self, run_id: str) -> str | None:
        """The principal that started a run (None: none was recorded)."""
        ...

    def close(self) -> None:
        """Release resources (connections)."""
        ...


LEASE_OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "planexec_lease_owner", default=None
)
"""The lease token of the run driver in whose context code runs (set by
`planexec.runs.hold_lease`): the approval gate claims decisions as this owner."""

LEASE_TTL = 30.0
"""The default lease time to live: a lease without a heartbeat for this long has expired."""


@dataclass(frozen=True)
class Lease:
    """Who drives a run (one driver per run), as recorded by the store."""

    run_id: str
    """The run."""
    owner: str
    """The driver's token (unique per driver)."""
    pid: int | None
    """The driver's process."""
    host: str | None
    """The host of that process."""
    pid_start: float | None
    """When that process started (`process_start_time`)."""
    acquired_at: float
    """When the lease was taken."""
    heartbeat_at: float
    """The latest renewal."""
    ttl: float
    """Seconds without a heartbeat after which the lease has expired."""

    def live(self, now: float | None = None) -> bool:
        """Whether the lease still holds: a heartbeat within ``ttl`` and its process alive.

        A holder on this host whose process is gone has lost the lease at once; one on
        another host holds it until its heartbeat is ``ttl`` old.
        """
        now = time.time() if now is None else now
        if now - self.heartbeat_at > self.ttl:
            return False
        return not (self.host == HOST and self.pid is not None
                    and not owner_alive(self.pid, self.pid_start))

    def describe(self) -> str:
        """For people: the holder and since when."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.acquired_at))
        return (f"process {self.pid} on {self.host} (driver {self.owner}, since {when} UTC, "
                f"last heartbeat {max(0.0, time.time() - self.heartbeat_at):.1f}s ago)")

    def to_dict(self) -> dict[str, Any]:
        """Return the lease as JSON-ready data."""
        return {"run_id": self.run_id, "owner": self.owner, "pid": self.pid, "host": self.host,
                "pid_start": self.pid_start, "acquired_at": self.acquired_at,
                "heartbeat_at": self.heartbeat_at, "ttl": self.ttl}


def lease_refused(run_id: str, holder: Lease) -> LeaseHeldError:
    """The error a second driver gets: names the holder and what to do."""
    return LeaseHeldError(
        f"run {run_id} is being driven by another process: {holder.describe()}; one driver "
        f"per run: wait for it to finish (its lease expires {holder.ttl:.0f}s after its last "
        "heartbeat, or at once when its process is gone)",
        run_id=run_id,
        holder=holder,
    )


def lease_lost(run_id: str, owner: str, held: Lease | None) -> LeaseHeldError:
    """The error a driver gets that renews a lease it no longer holds."""
    who = held.describe() if held is not None else "nobody"
    return LeaseHeldError(
        f"driver {owner} lost the lease of run {run_id} (now held by {who})",
        run_id=run_id, holder=held,
    )


def new_lease(run_id: str, owner: str, ttl: float, now: float, held: Lease | None) -> Lease:
    """The lease ``owner`` gets (its ``acquired_at`` kept when it held it already)."""
    acquired = held.acquired_at if held is not None and held.owner == owner else now
    return Lease(run_id=run_id, owner=owner, pid=os.getpid(), host=HOST, pid_start=MY_START,
                 acquired_at=acquired, heartbeat_at=now, ttl=ttl)


class RequestState(StrEnum):
    """Where an approval request stands."""

    OPEN = "open"
    """Waiting for a decision."""
    DECIDED = "decided"
    """Decided (approve, edit or reject); an approval not yet claimed by a call."""
    CLAIMED = "claimed"
    """An approval taken by the one call it allows (`RunStore.claim_decision`)."""
    WITHDRAWN = "withdrawn"
    """Withdrawn: its step was discarded, or asked again (superseded)."""


DECIDED_ACTIONS = frozenset({"approve", "edit", "reject"})
"""The actions a decision records (a deferral records nothing)."""


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval request and its decision, as the store keeps it (a durable fact)."""

    run_id: str
    """The run."""
    plan_version: int
    """The plan version of the step."""
    step_id: int
    """The step."""
    tool: str
    """The tool the request was opened for."""
    args: dict[str, Any]
    """The arguments it was opened for (JSON data)."""
    digest: str
    """`planexec.store.codec.args_digest` of ``args``."""
    server: str | None = None
    """The tool's server, if any."""
    policy: dict[str, Any] = field(default_factory=dict)
    """The policy that opened it (``require``, ``tools``, ``allow``): honoured on resume
    whatever config the resumed run has."""
    reason: str = ""
    """Why it needs approval (the policy rule that matched)."""
    request_no: int = 0
    """1 for the step's first request, 2 when it asked again, ... (set by the store)."""
    opened_at: float = 0.0
    """When it was opened."""
    state: RequestState = RequestState.OPEN
    """Open, decided, claimed or withdrawn."""
    action: str | None = None
    """The decision: ``approve``, ``edit`` or ``reject`` (None while open)."""
    decided_args: dict[str, Any] | None = None
    """The arguments the decision allows (edits merged in); None for a rejection."""
    decided_digest: str | None = None
    """Their digest: a call is allowed only with arguments of this digest."""
    edited: dict[str, Any] | None = None
    """The edited arguments as given."""
    decision_reason: str | None = None
    """Why (a rejection's reason)."""
    by: str | None = None
    """Who decided."""
    decided_at: float | None = None
    """When."""
    claimed_by: str | None = None
    """The driver whose call claimed the decision."""
    claimed_at: float | None = None
    """When."""
    withdrawn_reason: str | None = None
    """Why it was withdrawn."""

    def to_dict(self) -> dict[str, Any]:
        """Return the record as JSON-ready data."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["state"] = str(self.state)
        return out


def check_decidable(record: ApprovalRecord | None, run_id: str, plan_version: int, step_id: int,
                    request_no: int | None) -> ApprovalRecord:
    """The rule of `RunStore.decide_request` on the step's latest request (None: none).

    Raises:
        AlreadyDecidedError: decided or claimed already.
        ApprovalError: none, withdrawn, or not the request the decider saw.
    """
    where = f"step {step_id} of run {run_id} (plan version {plan_version})"
    if record is None:
        raise ApprovalError(f"{where} has no approval request on record: nothing to decide")
    if request_no is not None and record.request_no != request_no:
        raise ApprovalError(
            f"{where} asked again (request {record.request_no}) after the request "
            f"{request_no} you decided: look at the new request and decide again"
        )
    if record.state in (RequestState.DECIDED, RequestState.CLAIMED):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.decided_at or 0.0))
        raise AlreadyDecidedError(
            f"{where} was already decided: {record.action} by {record.by or 'an unnamed decider'}"
            f" at {when} UTC; nothing was recorded",
            action=record.action, by=record.by, at=record.decided_at, state=str(record.state),
        )
    if record.state is RequestState.WITHDRAWN:
        raise ApprovalError(
            f"{where}: its request was withdrawn ({record.withdrawn_reason}); nothing to decide"
        )
    return record


def decided(record: ApprovalRecord, *, action: str, args: dict[str, Any] | None,
            digest: str | None, edited: dict[str, Any] | None, reason: str | None,
            by: str | None, at: float) -> ApprovalRecord:
    """``record`` decided (`check_decidable` passed)."""
    if action not in DECIDED_ACTIONS:
        raise ValueError(f"a decision is one of {sorted(DECIDED_ACTIONS)}, not {action!r}")
    return replace(record, state=RequestState.DECIDED, action=action, decided_args=args,
                   decided_digest=digest if action != "reject" else None, edited=edited,
                   decision_reason=reason, by=by, decided_at=at)


def check_claim(record: ApprovalRecord | None, *, run_id: str, step_id: int, tool: str,
                digest: str, claimer: str, lease: Lease | None, now: float,
                server: str | None = None) -> None:
    """The rule of `RunStore.claim_decision` on the step's latest request (None: none).

    ``tool`` and ``server`` together name the tool: two servers may offer tools of one
    name, and a decision is made for one of them.

    Raises:
        DecisionClaimError: the call must not happen (``refusal``).
    """
    where = f"step {step_id} of run {run_id}"

    def refuse(refusal: ClaimRefusal, why: str) -> DecisionClaimError:
        return DecisionClaimError(f"{where}: tool {tool!r} not called: {why}", refusal=refusal)

    if lease is not None and lease.owner != claimer and lease.live(now):
        raise refuse(ClaimRefusal.LEASE_LOST, f"the run is driven by {lease.describe()}")
    if record is None:
        raise refuse(ClaimRefusal.NO_REQUEST, "no approval request is on record")
    if record.state is RequestState.WITHDRAWN:
        raise refuse(ClaimRefusal.WITHDRAWN,
                     f"its request was withdrawn ({record.withdrawn_reason})")
    if record.state is RequestState.OPEN:
        raise refuse(ClaimRefusal.UNDECIDED, "its request is not decided")
    if record.state is RequestState.CLAIMED:
        raise refuse(ClaimRefusal.ALREADY_CLAIMED,
                     f"its decision was claimed by a call already (driver {record.claimed_by})")
    if record.action == "reject":
        raise refuse(ClaimRefusal.REJECTED, f"rejected: {record.decision_reason}")
    if record.tool != tool or record.server != server:
        made_for = f"{record.server}.{record.tool}" if record.server else record.tool
        raise refuse(ClaimRefusal.TOOL_MISMATCH,
                     f"the decision was made for tool {made_for!r}")
    if record.decided_digest != digest:
        raise refuse(ClaimRefusal.ARGS_MISMATCH,
                     "the decision was made for other arguments")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (zombies count as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


_CLOCK_TICKS: int | None = None
_BOOT_TIME: float | None = None


def _boot_time() -> float | None:
    global _BOOT_TIME
    if _BOOT_TIME is None:
        try:
            with open("/proc/stat", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("btime "):
                        _BOOT_TIME = float(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            return None
    return _BOOT_TIME


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (None if unknown).

    Read from field 22 of ``/proc/<pid>/stat`` (clock ticks after boot) and the boot
    time in ``/proc/stat``; on systems without ``/proc`` it is None, and only the pid
    identifies a run's process.
    """
    global _CLOCK_TICKS
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22 counts from 1 and includes pid and comm
        if _CLOCK_TICKS is None:
            _CLOCK_TICKS = int(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    boot = _boot_time()
    if boot is None or _CLOCK_TICKS <= 0:
        return None
    return boot + ticks / _CLOCK_TICKS


MY_START = process_start_time(os.getpid())
"""When this process started (`process_start_time`), recorded with its pid."""


def owner_alive(pid: int | None, pid_start: float | None) -> bool:
    """Whether the process recorded as ``pid`` (started at ``pid_start``) still runs here.

    A live process with that pid but another start time reused the pid: the recorded
    process is gone. When either start time is unknown, only the pid is checked.
    """
    if pid is None or not pid_alive(pid):
        return False
    if pid_start is None:
        return True
    now = MY_START if pid == os.getpid() else process_start_time(pid)
    return now is None or abs(now - pid_start) < 1e-6


def effective_status(
    status: str, pid: int | None, host: str | None, pid_start: float | None = None
) -> RunStatus:
    """Turn a recorded status into what is true now.

    A run recorded as ``RUNNING`` by a process of this host that no longer exists (or
    whose pid now belongs to a process started at another time) is ``INTERRUPTED``. A
    run of another host cannot be checked and stays ``RUNNING``.
    """
    st = RunStatus(status)
    if (
        st is RunStatus.RUNNING
        and pid is not None
        and host == HOST
        and not owner_alive(pid, pid_start)
    ):
        return RunStatus.INTERRUPTED
    return st


def unmatched_calls(events: Iterable[dict[str, Any]]) -> list[StartedCall]:
    """Find the ``ToolCallStarted`` events with no later ``StepFinished`` for the step.

    ``events`` must be in recorded order.
    """
    open_calls: dict[tuple[int, int], StartedCall] = {}
    for ev in events:
        kind = ev.get("type")
        if kind == "ToolCallStarted":
            key = (int(ev.get("plan_version", 1)), int(ev["step_id"]))
            open_calls[key] = StartedCall(
                plan_version=key[0],
                step_id=key[1],
                tool=str(ev.get("tool")),
                args=dict(ev.get("args") or {}),
                attempt=int(ev.get("attempt", 1)),
                ts=float(ev.get("ts", 0.0)),
            )
        elif kind == "StepFinished":
            result = ev.get("result") or {}
            open_calls.pop((int(ev.get("plan_version", 1)), int(result.get("step_id", -1))), None)
    return sorted(open_calls.values(), key=lambda c: (c.plan_version, c.step_id))


def run_record(
    fields: Mapping[str, Any], step_counts: dict[str, int], plan_steps: int | None = None
) -> RunRecord:
    """Build the `RunRecord` a store gives back from what it keeps about a run.

    The recorded status is made current (`effective_status`), and ``error_kind`` is
    given only for a run that did not succeed.

    Args:
        fields: the run's stored values, one for each name in `RUN_FIELDS` (``status``
            as recorded, ``config`` already decoded).
        step_counts: the latest plan's step results by status.
        plan_steps: how many steps the latest plan has (None without a plan).

    Returns:
        The record.
    """
    status = effective_status(
        fields["status"], fields["pid"], fields["host"], fields.get("pid_start")
    )
    return RunRecord(
        run_id=fields["run_id"],
        question=fields["question"],
        status=status,
        config=fields["config"],
        created_at=fields["created_at"],
        updated_at=fields["updated_at"],
        finished_at=fields["finished_at"],
        answer=fields["answer"],
        error=fields["error"],
        error_kind=fields["error_kind"] if status is not RunStatus.SUCCEEDED else None,
        plan_version=fields["plan_version"],
        step_counts=step_counts,
        plan_steps=plan_steps,
        pid=fields["pid"],
        host=fields["host"],
        pid_start=fields.get("pid_start"),
    )


def export_document(store: RunStore, run_id: str) -> dict[str, Any]:
    """Everything ``store`` recorded about a run as one JSON document (`RunStore.export`).

    Raises:
        RunNotFoundError: no such run.
    """
    return {
        "format": EXPORT_FORMAT,
        "exported_at": time.time(),
        "run": store.get_run(run_id).to_dict(),
        "plans": [p.to_dict() for p in store.plans(run_id)],
        "steps": [s.to_dict() for s in store.step_results(run_id)],
        "events": store.events(run_id),
    }
