"""The one rule for plans with error diagnostics.

Every way of running a plan (`planexec.agent.PlanExecuteAgent.execute_plan` and ``run``,
``planexec run``, the MCP server's ``execute_plan``, resume and continue) runs it through
the `planexec.executor.Executor`, which applies this rule, so they all agree:

1. A step that an error diagnostic names (``Diagnostic.step``) never runs: it ends
   ``FAILED`` with the kind its diagnostic's code maps to (`KIND_OF_CODE`; any other
   code: ``PLAN_PARSE``), a message naming the code, and the diagnostic as the cause.
   Nothing of it is resolved, approved or called.
2. A step that depends on (or refers to) such a step is ``BLOCKED`` with
   ``UPSTREAM_FAILED``, as behind any failed step.
3. Every other step runs. Warnings and infos never stop anything.
4. An error diagnostic that names no step (the plan as a whole) stops everything:
   every step ends ``FAILED`` with ``PLAN_PARSE`` naming it. One naming a step the plan
   does not hold (a step cut off and left out, a dropped block) stops nothing by
   itself: a step referring to it fails as referring to a missing step.

One code is left to the call (`AT_THE_CALL`): ``ARGS_MISSING_REQUIRED``.

A step that started early from a streamed reply (only safe ones do) and that the
final plan's checks then name is discarded (``STREAM_STEP_DISCARDED``) and fails as
above.
"""

from __future__ import annotations

from collections.abc import Mapping

from planexec.errors import ErrorKind
from planexec.plan import Diagnostic, Plan, Step
from planexec.results import StepError

__all__ = ["AT_THE_CALL", "KIND_OF_CODE", "error_kind_of", "step_failures"]

KIND_OF_CODE: Mapping[str, ErrorKind] = {
    "TOOL_UNKNOWN": ErrorKind.UNKNOWN_TOOL,
    "REF_MISSING": ErrorKind.MISSING_REFERENCE,
    "REF_SELF": ErrorKind.MISSING_REFERENCE,
    "DEPENDENCY_MISSING": ErrorKind.MISSING_REFERENCE,
    "DEPENDENCY_SELF": ErrorKind.MISSING_REFERENCE,
    "CYCLE": ErrorKind.MISSING_REFERENCE,
    "REF_IN_KEY": ErrorKind.ARGS_SYNTAX,
    "STEP_INCOMPLETE": ErrorKind.ARGS_SYNTAX,
}
"""The failure kind of a step named by an error diagnostic, by the diagnostic's code.

Codes not listed: ``ARGS_*`` (and ``*DUPLICATE*`` keys) are ``ARGS_SYNTAX``; anything
else is ``PLAN_PARSE``."""


AT_THE_CALL = frozenset({"ARGS_MISSING_REQUIRED"})
"""Error codes the rule leaves to the call: a required argument the plan does not give
is not dropped or guessed there either: the arguments are validated against the tool's
schema before any call, so the step fails ``ARGS_INVALID`` naming it, which a
re-resolution may fill (grounded, like every fallback value) as for any invalid
argument."""


def error_kind_of(code: str) -> ErrorKind:
    """The failure kind of a step named by an error diagnostic with this code."""
    kind = KIND_OF_CODE.get(code)
    if kind is not None:
        return kind
    if code.startswith("ARGS_") or "DUPLICATE_KEY" in code:
        return ErrorKind.ARGS_SYNTAX
    return ErrorKind.PLAN_PARSE


def _failure(step: Step, diags: list[Diagnostic], kind: ErrorKind, whole: bool) -> StepError:
    first = diags[0]
    codes = ", ".join(dict.fromkeys(d.code for d in diags))
    what = "the plan has" if whole else f"step {step.id} has"
    more = f" (and {len(diags) - 1} more)" if len(diags) > 1 else ""
    tool = f" ({step.tool})" if step.tool else ""
    return StepError(
        kind,
        f"step {step.id}{tool}: not run: {what} an error diagnostic ({codes}): "
        f"{first.message}{more}; a plan with errors runs only its other steps",
        cause="; ".join(str(d) for d in diags[:5]),
    )


def step_failures(plan: Plan) -> dict[int, StepError]:
    """The steps of ``plan`` that must not run, with why (see the module's rule).

    Returns:
        A `StepError` for each step an error diagnostic names; for every step when an
        error diagnostic names no step of the plan. Empty for a plan without errors.
    """
    errors = plan.errors
    if not errors:
        return {}
    whole = [d for d in errors if d.step is None]
    if whole:
        return {s.id: _failure(s, whole, ErrorKind.PLAN_PARSE, True) for s in plan.steps}
    by_step: dict[int, list[Diagnostic]] = {}
    for d in errors:
        if d.step is not None and d.code not in AT_THE_CALL:
            by_step.setdefault(d.step, []).append(d)
    return {
        s.id: _failure(s, by_step[s.id], error_kind_of(by_step[s.id][0].code), False)
        for s in plan.steps
        if s.id in by_step
    }
