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

Every request is an `planexec.events.ApprovalRequested` event and every decision an
`planexec.events.ApprovalDecided` event (who, when, what, the edited arguments), so the
run store keeps them; a decision recorded later (``planexec runs approve``, the MCP
``approve_step`` tool) is given back to the gate of the resumed run
(`recorded_decisions`), which applies it without asking again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from planexec._log import step_log
from planexec.events import ApprovalDecided, ApprovalRequested, EventBus, FallbackUsed
from planexec.parsing.refs import contains_placeholder
from planexec.results import ResolutionMethod

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
    spec: ToolSpec, args: Mapping[str, Any], edited: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """Merge edited arguments over the resolved ones and validate them with the tool's schema.

    An edited value that holds a reference or placeholder (``<step_1.id>``,
    ``{name}``) is refused too: a tool is never called with one, so the person writes the
    value itself.

    Returns:
        ``(arguments, ())`` when they fit the schema, else ``(None, problems)`` with
        each validation error (``"priority: Input should be ..."``).
    """
    problems = tuple(
        f"{name}: holds a reference or placeholder, which is never passed to a tool; "
        "write the value itself"
        for name, value in edited.items()
        if contains_placeholder(value)
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

    Args:
        policy: Which steps need approval.
        approver: The in-process callback; None: every such step is deferred.
        bus: Where `ApprovalRequested` / `ApprovalDecided` events go (the run's bus).
        run_id: The run.
        decisions: Decisions already recorded for this run, by ``(plan_version,
            step_id)`` (`recorded_decisions`): applied without asking.
        max_edit_attempts: Refused edits before the step is deferred.
    """

    def __init__(
        self,
        policy: ApprovalPolicy,
        approver: Approver | None = None,
        *,
        bus: EventBus,
        run_id: str,
        decisions: Mapping[tuple[int, int], ApprovalDecision] | None = None,
        max_edit_attempts: int = 3,
    ) -> None:
        self.policy = policy
        """Which steps need approval."""
        self.approver = approver
        """The in-process callback (None: defer)."""
        self.bus = bus
        self.run_id = run_id
        self.decisions = dict(decisions or {})
        """Recorded decisions by ``(plan_version, step_id)``."""
        self.max_edit_attempts = max_edit_attempts

    async def review(
        self,
        step: Step,
        spec: ToolSpec,
        args: Mapping[str, Any],
        resolution: Mapping[str, ResolutionMethod],
        *,
        plan_version: int,
    ) -> ApprovalDecision | None:
        """Decide about one step's call; None when it needs no approval.

        An ``approve`` or ``edit`` decision carries the arguments to call the tool
        with (``args``); ``reject`` a reason; ``defer`` means the step waits.
        """
        why = self.policy.reason(spec)
        if why is None:
            return None
        log = step_log(self.run_id, step.id)
        recorded = self.decisions.get((plan_version, step.id))
        if recorded is not None:
            log.info("step {}: applying the recorded decision: {}", step.id, recorded.action)
            return recorded
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
        await self.bus.emit(
            ApprovalRequested(
                run_id=self.run_id,
                step_id=step.id,
                tool=spec.name,
                server=spec.server,
                args=dict(args),
                resolution=dict(resolution),
                reason=why,
                plan_version=plan_version,
            )
        )
        if self.approver is None:
            log.warning("step {}: {}: waiting for a person's decision", step.id, why)
            return ApprovalDecision.defer(f"{why}; no approval callback: waiting")
        for _ in range(self.max_edit_attempts):
            try:
                decision = await self.approver(request)
            except Exception as exc:  # noqa: BLE001 - any failure of the caller's callback
                message = (
                    f"step {step.id}: the approval callback raised {type(exc).__name__}: "
                    f"{exc}; the step waits for a decision (the tool was not called)"
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
                final, problems = apply_edit(spec, args, decision.edited or {})
                if final is None:
                    message = (
                        f"step {step.id}: the edited arguments of tool {spec.name!r} do not "
                        f"fit its schema: {'; '.join(problems)}; asking again"
                    )
                    await self._warn(step.id, "APPROVAL_EDIT_REFUSED", message)
                    request = replace(request, problems=problems)
                    continue
            decided = replace(decision, args=final)
            await self.record(decided, step.id, plan_version)
            return decided
        message = (
            f"step {step.id}: {self.max_edit_attempts} edits refused by the schema of tool "
            f"{spec.name!r}; the step waits for a decision (the tool was not called)"
        )
        await self._warn(step.id, "APPROVAL_EDIT_REFUSED", message)
        return ApprovalDecision.defer(message)

    async def record(self, decision: ApprovalDecision, step_id: int, plan_version: int) -> None:
        """Emit the `ApprovalDecided` event of ``decision``."""
        await self.bus.emit(decided_event(self.run_id, step_id, plan_version, decision))

    async def _warn(self, step_id: int, code: str, message: str) -> None:
        step_log(self.run_id, step_id).warning(message)
        await self.bus.emit(
            FallbackUsed(run_id=self.run_id, step_id=step_id, code=code, message=message)
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
