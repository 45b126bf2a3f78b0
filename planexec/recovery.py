"""Typed recovery: which action a failure gets, the budgets, and the run limits.

The policy is a table from `ErrorKind` to an `Action`, with the defaults of
docs/recovery.md, overridable per kind. `RecoveryPolicy.decide` applies the table to one
`Failure` and then the rules that no table can express:

- a failure of kind ``UPSTREAM_FAILED`` follows its cause (the failed step it refers to);
- ``RETRY_STEP`` is only for safe tools (read-only or idempotent, never destructive);
  an unsafe tool's failure re-plans instead;
- when an action's budget is spent it escalates: ``RERESOLVE``/``RETRY_STEP`` →
  ``REPLAN`` → ``STOP``;
- ``RERESOLVE`` only re-asks for arguments taken from references: a failure naming a
  literal written in the plan (``StepError.literal_args``) re-plans at once, since no
  re-resolution changes a literal;
- the early re-plan: when the same argument of the same step fails the same way twice
  in the same plan, ``REPLAN`` instead of spending the rest of the re-resolution budget
  (counted per plan version: a new plan's step is re-resolved first);
- ``REJECTED`` (a person rejected the call, `planexec.approval`) is never retried nor
  re-resolved: an override to ``RETRY_STEP`` or ``RERESOLVE`` re-plans instead;
- a failure the executor judged a retry cannot fix (``StepError.retryable`` False: a
  ``KeyError``, refused arguments, by the failure's class and the tool's ``retry_on``)
  is never re-run as it was: ``RETRY_STEP`` re-plans, and ``RERESOLVE`` re-plans when
  every argument of the refused call is fixed (plan literals, a person's edits), since
  re-resolving would make the same call again.

Every rule reads the typed fields of a `Failure` (kind, arguments, upstream step,
safety, attempts, retryable), never its message: messages are for people.

`Limits` implements the executor's ``guard`` hook: total steps, per-tool calls and
repeated sequences of tool calls. Hitting one fails the step with ``LIMIT_EXCEEDED``
(a message naming the limit), which stops the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planexec.errors import Action, ErrorKind
from planexec.results import ResolutionMethod, StepError, StepResult

if TYPE_CHECKING:
    from planexec.config import LimitSettings, RecoverySettings

__all__ = [
    "DEFAULT_POLICY",
    "Action",
    "Decision",
    "Failure",
    "Limits",
    "RecoveryPolicy",
    "RecoveryState",
    "combine_decisions",
]


_SEVERITY = {Action.RERESOLVE: 0, Action.RETRY_STEP: 0, Action.REPLAN: 1, Action.STOP: 2}

DEFAULT_POLICY: Mapping[ErrorKind, Action] = {
    ErrorKind.PLAN_PARSE: Action.REPLAN,
    ErrorKind.PLAN_INCOMPLETE: Action.REPLAN,  # asking for the rest; STOP ends INCOMPLETE
    ErrorKind.UNKNOWN_TOOL: Action.REPLAN,
    ErrorKind.TOOL_SELECTION_FAILED: Action.REPLAN,
    ErrorKind.ARGS_SYNTAX: Action.REPLAN,
    ErrorKind.MISSING_REFERENCE: Action.REPLAN,
    ErrorKind.UPSTREAM_FAILED: Action.REPLAN,  # only when the cause is unknown
    ErrorKind.RESOLUTION_FAILED: Action.RERESOLVE,
    ErrorKind.RESOLUTION_UNGROUNDED: Action.RERESOLVE,
    ErrorKind.ARGS_INVALID: Action.RERESOLVE,
    ErrorKind.TOOL_ERROR: Action.RETRY_STEP,
    ErrorKind.TOOL_TIMEOUT: Action.RETRY_STEP,
    ErrorKind.EMPTY_OUTPUT: Action.RETRY_STEP,
    ErrorKind.MODEL_ERROR: Action.RETRY_STEP,
    ErrorKind.CIRCUIT_OPEN: Action.REPLAN,
    ErrorKind.LIMIT_EXCEEDED: Action.STOP,
    ErrorKind.CANCELLED: Action.STOP,
    ErrorKind.UNKNOWN_OUTCOME: Action.STOP,
    ErrorKind.REJECTED: Action.REPLAN,  # the reason goes to the planner; never retried
    ErrorKind.EVALUATION_FAILED: Action.REPLAN,
    ErrorKind.OUTPUT_MISSING_STEP: Action.REPLAN,
    ErrorKind.OUTPUT_ARGS_MISSING: Action.REPLAN,
    ErrorKind.OUTPUT_INVALID: Action.RERESOLVE,
    ErrorKind.OUTPUT_UNEXPECTED: Action.RERESOLVE,
}
"""The default action per error kind (the table of docs/recovery.md)."""

_NEVER_OVERRIDDEN = (ErrorKind.CANCELLED,)
_EMPTY_OUTPUT_RETRIES = 1
_FIXED = (ResolutionMethod.LITERAL, ResolutionMethod.EDITED)
"""How an argument got a value no re-resolution changes (`Failure.fixed_args`)."""
_RETRIED_IN_STEP = (ErrorKind.EMPTY_OUTPUT, ErrorKind.TOOL_ERROR, ErrorKind.TOOL_TIMEOUT)
"""Kinds the executor retries within a step (safe tools): one more agent retry would
multiply the calls, so a step that already made several attempts re-plans instead."""

@dataclass(frozen=True)
class Failure:
    """One failure the agent must answer: a failed step, a plan without steps, a verdict."""

    kind: ErrorKind
    """What kind of failure it is."""
    message: str
    """The failure's message (it names the step, the argument and the cause)."""
    step_id: int | None = None
    """The failed step, if any."""
    tool: str | None = None
    """The step's tool, if any."""
    args: tuple[str, ...] = ()
    """The arguments the failure is about, when known."""
    safe: bool = False
    """Whether the step's tool is safe to run again (read-only/idempotent, not destructive)."""
    plan_version: int = 1
    """The plan the failure happened in."""
    cause: Failure | None = None
    """For ``UPSTREAM_FAILED``: the failure of the step it depends on."""
    attempts: int = 0
    """Tool call attempts the executor already made within the step (its own retries)."""
    literal_args: tuple[str, ...] = ()
    """Those of ``args`` written as literals in the plan (re-resolution cannot change them)."""
    upstream: int | None = None
    """For ``UPSTREAM_FAILED``: the step whose failure this one follows."""
    error: StepError | None = None
    """The step's `StepError` (the feedback of a re-resolution), when there is a step."""
    retryable: bool | None = None
    """Whether the same call may succeed if made again, as the executor judged it
    (`StepError.retryable`): False, a retry cannot fix it; None, not judged."""
    fixed_args: bool = False
    """Whether every argument of the failed call is fixed: written in the plan or by a
    person's edit, so that a re-resolution gives the same call (no argument to re-ask)."""

    @classmethod
    def from_result(
        cls,
        result: StepResult,
        *,
        safe: bool = False,
        plan_version: int = 1,
        cause: Failure | None = None,
    ) -> Failure:
        """Build the failure of a step result that did not succeed (from its `StepError`)."""
        error = result.failure
        kind = error.kind if error else ErrorKind.TOOL_ERROR
        retryable = error.retryable if error else None
        message = (error.message if error else None) or (
            f"step {result.step_id} ended {result.status}"
        )
        return cls(
            kind=kind,
            message=message,
            step_id=result.step_id,
            tool=result.tool,
            args=error.args if error else (),
            literal_args=error.literal_args if error else (),
            upstream=error.upstream if error else None,
            safe=safe or result.tool is None,  # a reasoning step has no side effects
            plan_version=plan_version,
            cause=cause,
            attempts=result.attempts,
            error=error,
            retryable=retryable,
            fixed_args=retryable is False
            and all(m in _FIXED for m in result.resolution.values()),
        )

    @property
    def signature(self) -> tuple[Any, ...]:
        """What "failing the same way" compares: the same arguments of one step, one kind.

        An argument is a step's argument: the step, the tool and the argument names, with
        the failure's kind (typed fields, never the message). Two steps whose arguments
        of the same name fail (two different references) are two failures, not one
        failing twice. Values and the cause's text are not part of it (a re-resolution
        words its cause otherwise), so a re-resolution that produces another wrong value
        for the same argument counts as the same way.
        """
        return (self.step_id, self.tool, str(self.kind), tuple(sorted(self.args)))


@dataclass(frozen=True)
class Decision:
    """The action chosen for a failure, and why."""

    action: Action
    """What to do."""
    reason: str
    """Why, in words (the failure, the rule, the budget)."""
    failure: Failure | None = None
    """The failure decided on."""

    @property
    def step_id(self) -> int | None:
        """The step concerned, if any."""
        return self.failure.step_id if self.failure else None

    @property
    def kind(self) -> ErrorKind | None:
        """The error kind decided on, if any."""
        return self.failure.kind if self.failure else None


@dataclass
class RecoveryState:
    """What a run has spent so far; `RecoveryPolicy.decide` reads and updates it."""

    replans: int = 0
    """Re-plans made."""
    reresolutions: Counter[tuple[int, int]] = field(default_factory=Counter)
    """Re-resolutions per (plan version, step)."""
    retries: Counter[tuple[int, int]] = field(default_factory=Counter)
    """Agent-level re-runs per (plan version, step)."""
    seen: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    """How often each failure signature was seen, per plan version (the early re-plan):
    keyed by ``(plan_version, *signature)``."""
    decisions: list[Decision] = field(default_factory=list)
    """Every decision, in order."""

    def note_replan(self) -> None:
        """Count one re-plan (the agent calls this when it actually re-plans)."""
        self.replans += 1


class RecoveryPolicy:
    """The table from error kind to action, the budgets, and the rules around them.

    Args:
        table: The whole table (replaces the defaults); missing kinds take the default.
        overrides: Actions that override single entries of ``table``.
        max_replans: Re-plans per run.
        max_reresolutions_per_step: Re-resolutions of one step, per plan.
        max_retries_per_step: Agent-level re-runs of one step, per plan.
        early_replan: Re-plan when the same failure signature is seen twice in one plan.
    """

    def __init__(
        self,
        table: Mapping[ErrorKind, Action] | None = None,
        *,
        overrides: Mapping[ErrorKind, Action] | Mapping[str, str] | None = None,
        max_replans: int = 3,
        max_reresolutions_per_step: int = 2,
        max_retries_per_step: int = 1,
        early_replan: bool = True,
    ) -> None:
        merged = dict(DEFAULT_POLICY)
        merged.update(table or {})
        for kind, action in (overrides or {}).items():
            merged[ErrorKind(kind)] = Action(action)
        for kind in _NEVER_OVERRIDDEN:
            merged[kind] = Action.STOP
        self.table: dict[ErrorKind, Action] = merged
        """The effective table."""
        self.max_replans = max_replans
        self.max_reresolutions_per_step = max_reresolutions_per_step
        self.max_retries_per_step = max_retries_per_step
        self.early_replan = early_replan

    @classmethod
    def from_settings(cls, settings: RecoverySettings) -> RecoveryPolicy:
        """Build the policy of an `AgentConfig`'s ``recovery`` section."""
        return cls(
            overrides=settings.policy,
            max_replans=settings.max_replans,
            max_reresolutions_per_step=settings.max_reresolutions_per_step,
            max_retries_per_step=settings.max_retries_per_step,
            early_replan=settings.early_replan,
        )

    def action_for(self, kind: ErrorKind) -> Action:
        """The table's action for ``kind``."""
        return self.table.get(kind, Action.REPLAN)

    def decide(
        self, failure: Failure, state: RecoveryState, *, can_replan: bool = True
    ) -> Decision:
        """Choose the action for ``failure`` and count it in ``state``.

        Call it once per failure: it records the failure's signature and spends the
        per-step budget of the action it returns (``RERESOLVE``, ``RETRY_STEP``). The
        re-plan budget is spent by `RecoveryState.note_replan`, once per actual re-plan.

        Args:
            failure: The failure.
            state: The run's recovery state.
            can_replan: False when the run may not re-plan (no planner, or a given plan
                run by ``execute_plan``): ``REPLAN`` stops.
        """
        if failure.kind is ErrorKind.UPSTREAM_FAILED and failure.cause is not None:
            inner = self.decide(failure.cause, state, can_replan=can_replan)
            decision = Decision(
                inner.action,
                f"step {failure.step_id} depends on a failed step; follows its cause: "
                f"{inner.reason}",
                failure,
            )
        else:
            decision = self._decide(failure, state, can_replan)
        state.decisions.append(decision)
        return decision

    def _decide(self, failure: Failure, state: RecoveryState, can_replan: bool) -> Decision:
        kind = failure.kind
        action = self.action_for(kind)
        where = f"step {failure.step_id}" if failure.step_id is not None else "the run"
        tool = f" ({failure.tool})" if failure.tool else ""
        seen_key = (failure.plan_version, *failure.signature)
        state.seen[seen_key] += 1
        times = state.seen[seen_key]
        key = (failure.plan_version, failure.step_id if failure.step_id is not None else -1)
        reason = f"{kind} at {where}{tool}: policy {kind} → {action}"
        by_table = True  # the reason is still the table's own
        if kind is ErrorKind.REJECTED and action in (Action.RETRY_STEP, Action.RERESOLVE):
            by_table = False
            action = Action.REPLAN
            reason = (
                f"{kind} at {where}{tool}: a person rejected the call; it is never made "
                "again as it was, so re-planning with the reason"
            )

        if action is Action.RERESOLVE:
            by_table = False
            if failure.step_id is None:
                action, reason = Action.REPLAN, f"{kind} at {where}: nothing to re-resolve"
            elif failure.literal_args:
                action = Action.REPLAN
                shown = ", ".join(repr(a) for a in failure.literal_args)
                reason = (
                    f"{kind} at {where}{tool}: argument(s) {shown} are literals written in "
                    "the plan; re-resolution never changes a literal, so re-planning"
                )
            elif failure.retryable is False and failure.fixed_args:
                action = Action.REPLAN
                reason = (
                    f"{kind} at {where}{tool}: the call failed in a way a retry cannot fix, "
                    "and every argument of it is written in the plan (or by a person): "
                    "re-resolving would make the same call again, so re-planning"
                )
            elif self.early_replan and times >= 2:
                what = ", ".join(failure.args) or "the same argument"
                action = Action.REPLAN
                reason = (
                    f"{kind} at {where}{tool}: {what} failed the same way {times} times; "
                    "re-planning early instead of re-resolving again"
                )
            elif state.reresolutions[key] >= self.max_reresolutions_per_step:
                action = Action.REPLAN
                reason = (
                    f"{kind} at {where}{tool}: re-resolution budget "
                    f"({self.max_reresolutions_per_step} per step) spent"
                )
            else:
                state.reresolutions[key] += 1
                reason = (
                    f"{kind} at {where}{tool}: re-resolving with the error as feedback "
                    f"({state.reresolutions[key]}/{self.max_reresolutions_per_step})"
                )
        elif action is Action.RETRY_STEP:
            by_table = False
            budget = self.max_retries_per_step
            if kind is ErrorKind.EMPTY_OUTPUT:
                budget = min(budget, _EMPTY_OUTPUT_RETRIES)
            if failure.step_id is None:
                action, reason = Action.REPLAN, f"{kind} at {where}: nothing to retry"
            elif not failure.safe:
                action = Action.REPLAN
                reason = (
                    f"{kind} at {where}{tool}: the tool is not marked safe "
                    "(read-only or idempotent), so it is never retried; re-planning"
                )
            elif failure.retryable is False:
                action = Action.REPLAN
                reason = (
                    f"{kind} at {where}{tool}: the executor judged that another attempt "
                    "cannot fix this failure (by its class and the tool's retry_on), so "
                    "the step is not re-run as it was; re-planning"
                )
            elif kind in _RETRIED_IN_STEP and failure.attempts > 1:
                action = Action.REPLAN
                reason = (
                    f"{kind} at {where}{tool}: the executor already ran the call "
                    f"{failure.attempts} times within the step, so it is not retried again; "
                    "re-planning"
                )
            elif state.retries[key] >= budget:
                action = Action.REPLAN
                reason = f"{kind} at {where}{tool}: retry budget ({budget} per step) spent"
            else:
                state.retries[key] += 1
                reason = (
                    f"{kind} at {where}{tool}: safe tool, retrying ({state.retries[key]}/{budget})"
                )

        if action is Action.REPLAN:
            if not can_replan:
                action = Action.STOP
                reason += (
                    "; no planner to re-plan with (re-planning is off for a given plan run "
                    "by execute_plan), stopping"
                )
            elif state.replans >= self.max_replans:
                action = Action.STOP
                reason += f"; re-plan budget ({self.max_replans}) spent, stopping"
        elif action is Action.STOP and by_table:
            reason = f"{kind} at {where}{tool}: stopping the run"
        return Decision(action, reason, failure)


def combine_decisions(decisions: Sequence[Decision]) -> Action | None:
    """The action for a round of failures: STOP beats REPLAN beats per-step actions.

    Returns None when there is nothing to do. When the result is ``RERESOLVE`` or
    ``RETRY_STEP``, every step re-runs with its own decision.
    """
    if not decisions:
        return None
    top = max(decisions, key=lambda d: _SEVERITY[d.action]).action
    return top


class Limits:
    """Run limits, as the executor's ``guard`` hook: ``guard(step, tool) -> message | None``.

    - ``max_steps``: steps admitted in the run (the executor asks before each tool call;
      re-runs included);
    - ``per_tool_limits``: calls of one tool in the run;
    - ``sequence_limits``: how often a pattern of consecutive tool calls (such as
      ``[search, fetch]``) may occur in the run's sequence of tool calls, counted without
      overlap, in call order, across re-plans.

    A tool is named in a limit by its name (``sites``) or its qualified name
    (``iot.sites``, when it comes from a server); both match a call of that tool. A
    refused step is not counted. The message names the limit.
    """

    def __init__(
        self,
        *,
        max_steps: int | None = None,
        per_tool_limits: Mapping[str, int] | None = None,
        sequence_limits: Iterable[tuple[Sequence[str], int]] = (),
    ) -> None:
        self.max_steps = max_steps
        self.per_tool_limits = dict(per_tool_limits or {})
        self.sequence_limits = [(tuple(p), n) for p, n in sequence_limits]
        self.steps = 0
        """Steps admitted so far."""
        self.calls: list[str] = []
        """Tool names admitted so far, in order."""
        self.servers: list[str | None] = []
        """The server of each admitted call (None for a local tool), in order."""
        self.hit: str | None = None
        """The message of the last limit hit, if any."""
        # Running tallies, so that a check costs the same at step 50,000 as at step 1
        # (the history is never walked again): calls made per name a call answers to,
        # and per sequence limit the matches counted so far and where the last one ended
        # (matches are counted without overlap, left to right, as `count_pattern` does).
        self._made: dict[str, int] = {}
        self._matched: list[list[int]] = [[0, 0] for _ in self.sequence_limits]

    @classmethod
    def from_settings(cls, settings: LimitSettings) -> Limits:
        """Build the limits of an `AgentConfig`'s ``limits`` section."""
        return cls(
            max_steps=settings.max_steps,
            per_tool_limits=settings.per_tool_limits,
            sequence_limits=[(s.pattern, s.max_repeats) for s in settings.sequence_limits],
        )

    def tool_names(self) -> list[str]:
        """Every tool name the limits mention (per-tool keys and pattern entries)."""
        names = list(self.per_tool_limits)
        for pattern, _ in self.sequence_limits:
            names += [p for p in pattern if p not in names]
        return names

    @staticmethod
    def count_pattern(calls: Sequence[Any], pattern: Sequence[str]) -> int:
        """Occurrences of ``pattern`` as consecutive calls in ``calls``, without overlap.

        A call is a tool name, or a tuple of the names it answers to (``("sites",
        "iot.sites")``); a pattern entry matches a call that answers to it.
        """

        def matches(call: Any, name: str) -> bool:
            return name in call if isinstance(call, tuple) else call == name

        n, i, size = 0, 0, len(pattern)
        while i + size <= len(calls):
            if all(matches(calls[i + j], pattern[j]) for j in range(size)):
                n += 1
                i += size
            else:
                i += 1
        return n

    @staticmethod
    def _names(tool: str, server: str | None) -> tuple[str, ...]:
        return (tool, f"{server}.{tool}") if server else (tool,)

    def check(self, tool: str | None, server: str | None = None) -> str | None:
        """Return the message of the limit one more step with ``tool`` would exceed."""
        return self._refusal(tool, self._names(tool, server) if tool is not None else ())

    def _refusal(self, tool: str | None, names: tuple[str, ...]) -> str | None:
        """`check`, given the names the call answers to."""
        if self.max_steps is not None and self.steps + 1 > self.max_steps:
            return (
                f"limit max_steps={self.max_steps} reached: the run may execute at most "
                f"{self.max_steps} steps"
            )
        if tool is None:
            return None
        for key in names:
            limit = self.per_tool_limits.get(key)
            if limit is None:
                continue
            if self._made.get(key, 0) + 1 > limit:
                return (
                    f"limit per_tool_limits[{key!r}]={limit} reached: {key!r} may be "
                    f"called at most {limit} times per run"
                )
        for (pattern, max_repeats), (count, end) in zip(
            self.sequence_limits, self._matched, strict=True
        ):
            if pattern[-1] not in names:
                continue
            if self._completes(pattern, names, end):
                count += 1
            if count > max_repeats:
                shown = " → ".join(pattern)
                return (
                    f"limit sequence_limits[{shown}]={max_repeats} reached: the "
                    f"sequence {shown} would repeat {count} times (at most {max_repeats})"
                )
        return None

    def _completes(self, pattern: Sequence[str], names: tuple[str, ...], end: int) -> bool:
        """Whether a call answering to ``names`` completes a new match of ``pattern``.

        The match would take the last ``len(pattern) - 1`` calls and this one, and must
        start at or after ``end``, where the last counted match ended: a left-to-right
        count without overlap has checked every earlier window already.
        """
        size = len(pattern)
        start = len(self.calls) - (size - 1)
        if start < end or pattern[-1] not in names:
            return False
        for j in range(size - 1):
            i = start + j
            if pattern[j] not in self._names(self.calls[i], self.servers[i]):
                return False
        return True

    def guard(
        self, step: Any, tool: str | None = None, *, server: str | None = None
    ) -> str | None:
        """The executor hook: admit the step (counting it) or return the limit's message.

        Args:
            step: The step about to call its tool.
            tool: The tool's name (the step's by default).
            server: The tool's server (the step's by default), so that limits naming
                ``server.tool`` match too.
        """
        if tool is None and step is not None:
            tool = getattr(step, "tool", None)
        if server is None and step is not None:
            server = getattr(step, "server", None)
        names = self._names(tool, server) if tool is not None else ()
        message = self._refusal(tool, names)
        if message is not None:
            self.hit = message
            return message
        self.steps += 1
        if tool is not None:
            made = self._made
            for key in names:
                made[key] = made.get(key, 0) + 1
            for (pattern, _), tally in zip(self.sequence_limits, self._matched, strict=True):
                if self._completes(pattern, names, tally[1]):
                    tally[0] += 1
                    tally[1] = len(self.calls) + 1
            self.calls.append(tool)
            self.servers.append(server)
        return None

    __call__ = guard
