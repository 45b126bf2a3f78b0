"""Human approval of steps: the policy, requests, decisions and the gate (docs/approval.md).

A step needs approval when the gate is on (``approval.enabled``, or an ``approver``
callback given to `planexec.PlanExecuteAgent` / `planexec.runtime.Runtime`) and its
tool falls under the `ApprovalPolicy` (destructive tools by default; tools of unknown
safety, named tools or all of them; an allow-list wins). The executor asks the
`ApprovalGate` after the step's arguments are resolved and checked, right before the
limits guard and the call, so the person sees exactly what the tool would receive and
how each argument was resolved.

The gate answers with an `ApprovalDecision`:

- **approve** — the tool is called with the resolved arguments;
- **edit** — the tool is called with the resolved arguments, the edited ones replaced
  (their method becomes ``edited``). The merged arguments are validated against the
  tool's schema first; an invalid edit is refused and the callback asked again with the
  validation errors (`ApprovalRequest.problems`), at most ``approval.max_edit_attempts``
  times, after which the step is deferred;
- **reject** — the tool is not called; the step fails with ``REJECTED`` (the reason in
  its message and ``cause``), which the recovery policy answers with a re-plan;
- **defer** — nothing is decided: the step ends ``WAITING_APPROVAL`` with its resolved
  arguments, the steps that depend on it wait too, and the run pauses
  ``WAITING_APPROVAL`` once nothing else can run. Without a callback every step that
  needs approval is deferred.

Every request is a durable fact in the run store (`planexec.store.RunStore.open_request`:
the policy that opened it, the tool, the arguments and their digest), and an
`planexec.events.ApprovalRequested` event; every decision is compare-and-set
(`planexec.store.RunStore.decide_request`: a second decider is refused, told who was
first) and an `planexec.events.ApprovalDecided` event. A decision applies only to a call
of the same run, plan version, step, **tool and arguments** (`planexec.store.codec.args_digest`):
for anything else the step asks again. The call itself is allowed by `ApprovalGate.claim`,
which claims the decision and records the call's start in one store transaction, so a
decision allows one call at most. The gate of a resumed run honours every open request on
record, whatever config the run resumes with. A callback's answer that is not an
`ApprovalDecision` is treated like a raising callback: the step waits, with a warning.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from planexec._log import step_log
from planexec._text import clip
from planexec.errors import AlreadyDecidedError
from planexec.events import ApprovalDecided, ApprovalRequested, Event, EventBus, FallbackUsed
from planexec.parsing.refs import contains_placeholder
from planexec.results import ResolutionMethod, jsonable
from planexec.store.base import LEASE_OWNER, ApprovalRecord, RequestState, RunStore
from planexec.store.codec import args_digest

if TYPE_CHECKING:
    from planexec.config import ApprovalSettings
    from planexec.plan import Step
    from planexec.tools import ToolSpec

__all__ = [
    "ApprovalAction",
    "ApprovalDecision",
    "ApprovalGate",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approver",
    "apply_edit",
    "open_requests",
    "pending_approvals",
    "recorded_decisions",
]


class ApprovalAction(StrEnum):
    """What a person decided about a step."""

    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    DEFER = "defer"
    """Not decided now: the step waits (the run pauses ``WAITING_APPROVAL``)."""


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked to decide: one step's call, with its resolved arguments."""

    run_id: str
    """The run."""
    plan_version: int
    """The plan version of the step."""
    step_id: int
    """The step."""
    tool: str
    """The tool that would be called."""
    args: dict[str, Any]
    """The resolved arguments the tool would receive."""
    resolution: dict[str, ResolutionMethod] = field(default_factory=dict)
    """How each argument was resolved (``literal``, ``path``, ``llm``...)."""
    reason: str = ""
    """Why the step needs approval (the policy rule that matched)."""
    server: str | None = None
    """The tool's server, if any."""
    args_schema: dict[str, Any] = field(default_factory=dict)
    """The tool's arguments' JSON schema (what an edit must fit)."""
    problems: tuple[str, ...] = ()
    """Why the previous edit was refused (validation errors), when it was."""
    requested_at: float = field(default_factory=time.time)
    """When approval was asked (seconds since the epoch)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the request as JSON-ready data."""
        from planexec.results import jsonable

        return {
            "run_id": self.run_id,
            "plan_version": self.plan_version,
            "step_id": self.step_id,
            "tool": self.tool,
            "server": self.server,
            "args": jsonable(self.args),
            "resolution": {k: str(v) for k, v in self.resolution.items()},
            "reason": self.reason,
            "problems": list(self.problems),
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_event(cls, data: Mapping[str, Any]) -> ApprovalRequest:
        """Rebuild a request from a recorded ``ApprovalRequested`` event (JSON data)."""
        known = {m.value for m in ResolutionMethod}
        resolution = {
            str(k): ResolutionMethod(v)
            for k, v in dict(data.get("resolution") or {}).items()
            if v in known
        }
        return cls(
            run_id=str(data["run_id"]),
            plan_version=int(data.get("plan_version", 1)),
            step_id=int(data["step_id"]),
            tool=str(data["tool"]),
            args=dict(data.get("args") or {}),
            resolution=resolution,
            reason=str(data.get("reason") or ""),
            server=data.get("server"),
            requested_at=float(data.get("ts") or 0.0),
        )


@dataclass(frozen=True)
class ApprovalDecision:
    """A person's decision about an `ApprovalRequest`.

    Build one with `approve`, `edit`, `reject` or `defer`.
    """

    action: ApprovalAction
    """What was decided."""
    args: dict[str, Any] | None = None
    """The arguments the tool is called with, once the gate applied the decision (the
    resolved ones, edits merged in); None on a rejection or a deferral."""
    edited: dict[str, Any] | None = None
    """For ``edit``: the arguments changed, as given (they replace the resolved ones)."""
    reason: str | None = None
    """Why (required for ``reject``)."""
    by: str | None = None
    """Who decided."""
    at: float = field(default_factory=time.time)
    """When (seconds since the epoch)."""

    @classmethod
    def approve(cls, *, by: str | None = None, reason: str | None = None) -> ApprovalDecision:
        """Call the tool with the arguments as resolved."""
        return cls(ApprovalAction.APPROVE, by=by, reason=reason)

    @classmethod
    def edit(
        cls, args: Mapping[str, Any], *, by: str | None = None, reason: str | None = None
    ) -> ApprovalDecision:
        """Call the tool with ``args`` replacing the resolved arguments of the same names."""
        return cls(ApprovalAction.EDIT, edited=dict(args), by=by, reason=reason)

    @classmethod
    def reject(cls, reason: str, *, by: str | None = None) -> ApprovalDecision:
        """Do not call the tool; the step fails ``REJECTED`` with ``reason``."""
        if not reason or not reason.strip():
            raise ValueError("a rejection needs a reason (the planner is told it)")
        return cls(ApprovalAction.REJECT, reason=reason, by=by)

    @classmethod
    def defer(cls, reason: str | None = None) -> ApprovalDecision:
        """Decide later: the step waits and the run pauses ``WAITING_APPROVAL``."""
        return cls(ApprovalAction.DEFER, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as JSON-ready data."""
        from planexec.results import jsonable

        return {
            "action": str(self.action),
            "args": jsonable(self.args),
            "edited": jsonable(self.edited),
            "reason": self.reason,
            "by": self.by,
            "at": self.at,
        }

    @classmethod
    def from_event(cls, data: Mapping[str, Any]) -> ApprovalDecision:
        """Rebuild a decision from a recorded ``ApprovalDecided`` event (JSON data)."""
        args = data.get("args")
        edited = data.get("edited")
        return cls(
            action=ApprovalAction(str(data["action"])),
            args=dict(args) if isinstance(args, Mapping) else None,
            edited=dict(edited) if isinstance(edited, Mapping) else None,
            reason=data.get("reason"),
            by=data.get("by"),
            at=float(data.get("decided_at") or data.get("ts") or 0.0),
        )


Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
"""The in-process approval callback: ``async def approve(request) -> ApprovalDecision``."""


@dataclass(frozen=True)
class ApprovalPolicy:
    """Which tools need approval (see `planexec.config.ApprovalSettings`)."""

    require: frozenset[str] = frozenset({"destructive"})
    """``destructive``, ``unknown``, ``all``."""
    tools: frozenset[str] = frozenset()
    """Tools that always need approval (names or ``server.name``)."""
    allow: frozenset[str] = frozenset()
    """Tools that never need approval."""

    @classmethod
    def from_settings(cls, settings: ApprovalSettings) -> ApprovalPolicy:
        """The policy of an `AgentConfig`'s ``approval`` section."""
        return cls(frozenset(settings.require), frozenset(settings.tools),
                   frozenset(settings.allow))

    def to_dict(self) -> dict[str, list[str]]:
        """The policy as JSON data (recorded with each request it opens)."""
        return {"require": sorted(self.require), "tools": sorted(self.tools),
                "allow": sorted(self.allow)}

    def reason(self, spec: ToolSpec) -> str | None:
        """Why a call of ``spec`` needs approval, or None when it does not."""
        names = {spec.name, spec.qualified_name}
        if names & self.allow:
            return None
        if names & self.tools:
            return f"tool {spec.qualified_name!r} is named in approval.tools"
        hints = spec.hints
        if "all" in self.require:
            return "every tool needs approval (approval.require = all)"
        if "destructive" in self.require and hints.destructive:
            return f"tool {spec.qualified_name!r} is destructive"
        if "unknown" in self.require and hints.destructive is None and not hints.read_only:
            return f"the safety of tool {spec.qualified_name!r} is unknown"
        return None


def _errors(exc: ValidationError, args: Mapping[str, Any], spec: ToolSpec) -> tuple[str, ...]:
    from planexec._validation import describe_errors

    return tuple(describe_errors(exc, dict(args), spec.args_schema))


def apply_edit(
    spec: ToolSpec,
    args: Mapping[str, Any],
    edited: Mapping[str, Any],
    *,
    dialect: str | None = None,
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """Merge edited arguments over the resolved ones and validate them with the tool's schema.

    An edited value that holds a reference or placeholder (``<step_1.id>``,
    ``{name}``, and in the plan's ``dialect`` its own forms: ``#E1`` in a ReWOO plan,
    ``$1`` in an LLMCompiler one) is refused too: a tool is never called with one, so the
    person writes the value itself.

    Returns:
        ``(arguments, ())`` when they fit the schema, else ``(None, problems)`` with
        each validation error (``"priority: Input should be ..."``).
    """
    problems = tuple(
        f"{name}: holds a reference or placeholder, which is never passed to a tool; "
        "write the value itself"
        for name, value in edited.items()
        if contains_placeholder(value, dialect=dialect)
    )
    merged = {**dict(args), **dict(edited)}
    try:
        spec.validate(merged)
    except ValidationError as exc:
        return None, problems + _errors(exc, merged, spec)
    if problems:
        return None, problems
    return merged, ()


class ApprovalGate:
    """Asks for approval of the steps the policy names (the executor's ``approvals`` hook).

    Requests, decisions and claims live in ``store`` (the run's store; without one, a
    private `planexec.store.MemoryRunStore`), so they are durable facts: the gate of a
    resumed run finds the requests and decisions on record and applies a decision only to
    the tool and arguments it was made for.

    Args:
        policy: Which steps need approval.
        approver: The in-process callback; None: every such step is deferred.
        bus: Where `ApprovalRequested` / `ApprovalDecided` events go (the run's bus).
        run_id: The run.
        max_edit_attempts: Refused edits before the step is deferred.
        store: Where requests and decisions are recorded (None: in this gate only).
        owner: The token of the run's lease holder (`planexec.store.RunStore.acquire_lease`)
            that claims decisions; None: a token of this gate's own.
        dialect: The plan's dialect, for the check of edited arguments (`apply_edit`).
    """

    def __init__(
        self,
        policy: ApprovalPolicy,
        approver: Approver | None = None,
        *,
        bus: EventBus,
        run_id: str,
        max_edit_attempts: int = 3,
        store: RunStore | None = None,
        owner: str | None = None,
        dialect: str | None = None,
    ) -> None:
        from planexec.store.memory import MemoryRunStore

        self.policy = policy
        """Which steps need approval."""
        self.approver = approver
        """The in-process callback (None: defer)."""
        self.bus = bus
        self.run_id = run_id
        self.max_edit_attempts = max_edit_attempts
        self.store: RunStore = store if store is not None else MemoryRunStore()
        """Where requests and decisions are recorded."""
        self.owner = owner
        """Who claims decisions (the run's lease holder; None: the lease holder of the
        driver this runs under (`planexec.store.base.LEASE_OWNER`), else this gate)."""
        self._own = f"gate-{uuid.uuid4().hex[:12]}"
        self.dialect = dialect
        """The plan's dialect (None: the forms common to every dialect)."""

    def _latest(self, plan_version: int, step_id: int) -> ApprovalRecord | None:
        found = None
        for rec in self.store.approval_requests(self.run_id):
            if rec.plan_version == plan_version and rec.step_id == step_id:
                if found is None or rec.request_no > found.request_no:
                    found = rec
        return found

    def needs(self, spec: ToolSpec, plan_version: int, step_id: int) -> str | None:
        """Why a call of ``spec`` by this step needs approval (None: it does not).

        The policy's reason, or the reason of a request on record for the step: a request
        opened under another config is honoured.
        """
        why = self.policy.reason(spec)
        if why is not None:
            return why
        records = self.store.approval_requests(self.run_id)
        for policy in _policies(records):  # the run's recorded policies hold too
            why = policy.reason(spec)
            if why is not None:
                return f"{why} (under the policy recorded for this run)"
        rec = self._latest(plan_version, step_id)
        if rec is not None and rec.state is not RequestState.WITHDRAWN:
            return rec.reason or "a request for this step is on record"
        return None

    async def review(
        self,
        step: Step,
        spec: ToolSpec,
        args: Mapping[str, Any],
        resolution: Mapping[str, ResolutionMethod],
        *,
        plan_version: int,
        dialect: str | None = None,
    ) -> ApprovalDecision | None:
        """Decide about one step's call; None when it needs no approval.

        An ``approve`` or ``edit`` decision carries the arguments to call the tool
        with (``args``); ``reject`` a reason; ``defer`` means the step waits. A decision on
        record applies only when it was made for this tool and these arguments.
        """
        why = self.needs(spec, plan_version, step.id)
        if why is None:
            return None
        log = step_log(self.run_id, step.id)
        digest = args_digest(dict(args))
        rec = self._latest(plan_version, step.id)
        made_for = (spec.name, spec.server, digest)  # a tool of a server, these arguments
        same = rec is not None and (rec.tool, rec.server, rec.digest) == made_for
        if same and rec is not None and rec.state is RequestState.DECIDED:
            log.info("step {}: applying the recorded decision: {} by {}", step.id, rec.action,
                     rec.by or "?")
            return _decision_of(rec)
        if rec is not None and not same and rec.state is not RequestState.WITHDRAWN:
            log.warning(
                "step {}: the request on record was for tool {!r} with other arguments (or "
                "another tool); it does not apply: asking again", step.id, rec.tool)
        if not (same and rec is not None and rec.state is RequestState.OPEN):
            event = ApprovalRequested(
                run_id=self.run_id, step_id=step.id, tool=spec.name, server=spec.server,
                args=dict(args), resolution=dict(resolution), reason=why,
                plan_version=plan_version,
            )
            rec = self.store.open_request(
                ApprovalRecord(
                    run_id=self.run_id, plan_version=plan_version, step_id=step.id,
                    tool=spec.name, server=spec.server, args=jsonable(dict(args)),
                    digest=digest, policy=self.policy.to_dict(), reason=why,
                ),
                event=event,
            )
            await self.bus.emit(event)
        assert rec is not None
        request = ApprovalRequest(
            run_id=self.run_id,
            plan_version=plan_version,
            step_id=step.id,
            tool=spec.name,
            server=spec.server,
            args=dict(args),
            resolution=dict(resolution),
            reason=why,
            args_schema=spec.json_schema,
        )
        if self.approver is None:
            log.warning("step {}: {}: waiting for a person's decision", step.id, why)
            return ApprovalDecision.defer(f"{why}; no approval callback: waiting")
        for _ in range(self.max_edit_attempts):
            try:
                decision: object = await self.approver(request)
            except Exception as exc:  # noqa: BLE001 - any failure of the caller's callback
                message = (
                    f"step {step.id}: the approval callback raised {type(exc).__name__}: "
                    f"{exc}; the step waits for a decision (the tool was not called)"
                )
                await self._warn(step.id, "APPROVAL_CALLBACK_FAILED", message)
                return ApprovalDecision.defer(message)
            if not isinstance(decision, ApprovalDecision) or not isinstance(
                decision.action, ApprovalAction
            ):
                message = (
                    f"step {step.id}: the approval callback answered "
                    f"{clip(repr(decision), 80)}, which is not an ApprovalDecision (approve, "
                    "edit, reject or defer); the step "
                    "waits for a decision (the tool was not called)"
                )
                await self._warn(step.id, "APPROVAL_CALLBACK_FAILED", message)
                return ApprovalDecision.defer(message)
            if decision.action is ApprovalAction.DEFER:
                log.info("step {}: the approval callback deferred", step.id)
                return decision
            final: dict[str, Any] | None = None
            if decision.action is ApprovalAction.APPROVE:
                final = dict(args)
            elif decision.action is ApprovalAction.EDIT:
                final, problems = apply_edit(spec, args, decision.edited or {},
                                             dialect=dialect or self.dialect)
                if final is None:
                    message = (
                        f"step {step.id}: the edited arguments of tool {spec.name!r} do not "
                        f"fit its schema: {'; '.join(problems)}; asking again"
                    )
                    await self._warn(step.id, "APPROVAL_EDIT_REFUSED", message)
                    request = replace(request, problems=problems)
                    continue
            decided = replace(decision, args=final)
            return await self._record(decided, step.id, plan_version, rec.request_no)
        message = (
            f"step {step.id}: {self.max_edit_attempts} edits refused by the schema of tool "
            f"{spec.name!r}; the step waits for a decision (the tool was not called)"
        )
        await self._warn(step.id, "APPROVAL_EDIT_REFUSED", message)
        return ApprovalDecision.defer(message)

    async def _record(
        self, decision: ApprovalDecision, step_id: int, plan_version: int, request_no: int
    ) -> ApprovalDecision:
        """Record the callback's decision (compare-and-set); the one on record wins."""
        event = decided_event(self.run_id, step_id, plan_version, decision)
        try:
            self.store.decide_request(
                self.run_id, plan_version, step_id, action=str(decision.action),
                args=decision.args, edited=decision.edited, reason=decision.reason,
                by=decision.by, at=decision.at, request_no=request_no, event=event,
            )
        except AlreadyDecidedError as exc:
            message = f"step {step_id}: the callback's decision was not recorded: {exc}"
            await self._warn(step_id, "APPROVAL_ALREADY_DECIDED", message)
            rec = self._latest(plan_version, step_id)
            if rec is None or rec.state is not RequestState.DECIDED:
                return ApprovalDecision.defer(message)
            return _decision_of(rec)
        await self.bus.emit(event)
        return decision

    async def record(self, decision: ApprovalDecision, step_id: int, plan_version: int) -> None:
        """Record ``decision`` about the step's latest request (compare-and-set)."""
        rec = self._latest(plan_version, step_id)
        await self._record(decision, step_id, plan_version, rec.request_no if rec else 0)

    def claim(self, step_id: int, plan_version: int, tool: str, args: Mapping[str, Any],
              start: Event | None, *, server: str | None = None) -> None:
        """Claim the step's decision for this call and record its start, in one transaction.

        Called at the call boundary, right before an approved call: ``start`` (the call's
        ``ToolCallStarted``) is recorded with the claim. ``tool`` of ``server`` is the
        tool called (a decision for a tool of that name on another server allows nothing).

        Raises:
            DecisionClaimError: no decision allows this call (``refusal`` says why): the
                tool must not be called.
        """
        self.store.claim_decision(self.run_id, plan_version, step_id, tool=tool,
                                  digest=args_digest(dict(args)),
                                  claimer=self.owner or LEASE_OWNER.get() or self._own,
                                  event=start, server=server)

    async def withdraw(self, step_id: int, plan_version: int, reason: str) -> None:
        """Withdraw the step's request (a streamed draft's step that was discarded)."""
        rec = self.store.withdraw_request(self.run_id, plan_version, step_id, reason)
        if rec is not None:
            await self._warn(
                step_id, "APPROVAL_WITHDRAWN",
                f"step {step_id}: its approval request (tool {rec.tool!r}) was withdrawn: "
                f"{reason}",
            )

    async def _warn(self, step_id: int, code: str, message: str) -> None:
        step_log(self.run_id, step_id).warning(message)
        await self.bus.emit(
            FallbackUsed(run_id=self.run_id, step_id=step_id, code=code, message=message)
        )


def _policies(records: Iterable[ApprovalRecord]) -> list[ApprovalPolicy]:
    """The distinct policies that opened the run's requests."""
    out: dict[str, ApprovalPolicy] = {}
    for rec in records:
        p = rec.policy
        if p:
            key = repr(sorted((k, tuple(v)) for k, v in p.items()))
            if key not in out:
                out[key] = ApprovalPolicy(frozenset(p.get("require", ())),
                                          frozenset(p.get("tools", ())),
                                          frozenset(p.get("allow", ())))
    return list(out.values())




def _decision_of(rec: ApprovalRecord) -> ApprovalDecision:
    """The decision of a decided record (its arguments: the ones it allows)."""
    return ApprovalDecision(
        ApprovalAction(str(rec.action)),
        args=dict(rec.decided_args) if rec.decided_args is not None else None,
        edited=dict(rec.edited) if rec.edited is not None else None,
        reason=rec.decision_reason, by=rec.by, at=rec.decided_at or 0.0,
    )


def decided_event(
    run_id: str, step_id: int, plan_version: int, decision: ApprovalDecision
) -> ApprovalDecided:
    """The `ApprovalDecided` event that records ``decision``."""
    return ApprovalDecided(
        run_id=run_id,
        step_id=step_id,
        plan_version=plan_version,
        action=str(decision.action),
        args=decision.args,
        edited=decision.edited,
        reason=decision.reason,
        by=decision.by,
        decided_at=decision.at,
    )


def recorded_decisions(
    events: Iterable[Mapping[str, Any]],
) -> dict[tuple[int, int], ApprovalDecision]:
    """The latest recorded decision of each ``(plan_version, step_id)`` of a run's events."""
    out: dict[tuple[int, int], ApprovalDecision] = {}
    for ev in events:
        if ev.get("type") == "ApprovalDecided":
            key = (int(ev.get("plan_version", 1)), int(ev["step_id"]))
            out[key] = ApprovalDecision.from_event(ev)
    return out


def pending_approvals(events: Iterable[Mapping[str, Any]]) -> list[ApprovalRequest]:
    """The requests of a run's events that no recorded decision answers, by step.

    The latest request of each ``(plan_version, step_id)`` counts; a decision recorded
    after it answers it.
    """
    open_requests: dict[tuple[int, int], ApprovalRequest] = {}
    for ev in events:
        kind = ev.get("type")
        if kind not in ("ApprovalRequested", "ApprovalDecided"):
            continue
        key = (int(ev.get("plan_version", 1)), int(ev["step_id"]))
        if kind == "ApprovalRequested":
            open_requests[key] = ApprovalRequest.from_event(ev)
        else:
            open_requests.pop(key, None)
    return sorted(open_requests.values(), key=lambda r: (r.plan_version, r.step_id))


def open_requests(store: RunStore, run_id: str) -> list[ApprovalRequest]:
    """The open requests on record for a run (latest of each step), by step.

    A run recorded before requests were kept as records (only as events) has its pending
    requests (`pending_approvals`) recorded now, so that deciding them is compare-and-set
    too.
    """
    records = store.approval_requests(run_id)
    if not records:
        for old in pending_approvals(store.events(run_id)):
            store.open_request(ApprovalRecord(
                run_id=run_id, plan_version=old.plan_version, step_id=old.step_id,
                tool=old.tool, server=old.server, args=dict(old.args),
                digest=args_digest(dict(old.args)), reason=old.reason,
                opened_at=old.requested_at or time.time(),
            ))
        records = store.approval_requests(run_id)
    latest: dict[tuple[int, int], ApprovalRecord] = {}
    for rec in records:
        key = (rec.plan_version, rec.step_id)
        if key not in latest or rec.request_no > latest[key].request_no:
            latest[key] = rec
    opened = [r for _, r in sorted(latest.items()) if r.state is RequestState.OPEN]
    asked: dict[tuple[int, int], ApprovalRequest] = {}  # the events: how each arg resolved
    if opened:
        for ev in store.events(run_id):
            if ev.get("type") == "ApprovalRequested":
                req = ApprovalRequest.from_event(ev)
                asked[(req.plan_version, req.step_id)] = req
    out = []
    for r in opened:
        event = asked.get((r.plan_version, r.step_id))
        same = event is not None and event.tool == r.tool and args_digest(event.args) == r.digest
        out.append(ApprovalRequest(
            run_id=run_id, plan_version=r.plan_version, step_id=r.step_id, tool=r.tool,
            server=r.server, args=dict(r.args), reason=r.reason, requested_at=r.opened_at,
            resolution=dict(event.resolution) if same and event is not None else {},
        ))
    return out
