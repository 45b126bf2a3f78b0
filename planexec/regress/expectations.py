"""Checking a finished run against a scenario's `Expectations`.

`Observer` subscribes to the run's events and keeps what the `Run` does not hold: the
tool calls in call order (with their arguments), the recovery decisions and the
fallbacks. `check_run` compares both with the expectations and returns one
`ExpectationFailure` per expectation that does not hold, each naming where it is
(``steps[2].error_kind``) and what differed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from planexec.events import Event, FallbackUsed, RecoveryDecided, ToolCallStarted
from planexec.plan import Plan
from planexec.regress.matchers import MISSING, check_value, short
from planexec.regress.report import ExpectationFailure
from planexec.regress.scenario import (
    Expectations,
    PlanExpectation,
    StepExpectation,
    ToolCallExpectation,
    Value,
)
from planexec.results import Run, StepResult, jsonable

__all__ = ["Observer", "ToolCall", "check_run"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call attempt, as the executor announced it."""

    tool: str
    """The tool's name."""
    args: dict[str, Any]
    """The resolved arguments."""
    step_id: int
    """The step that made it."""
    attempt: int = 1
    """1 for the first attempt, 2 for the first retry, ..."""


@dataclass
class Observer:
    """An event subscriber that keeps the tool calls, recovery decisions and fallbacks."""

    tool_calls: list[ToolCall] = field(default_factory=list)
    """Every tool call attempt, in call order."""
    decisions: list[RecoveryDecided] = field(default_factory=list)
    """Every recovery decision, in order."""
    fallbacks: list[FallbackUsed] = field(default_factory=list)
    """Every fallback, repair, retry or skip announced."""

    def __call__(self, event: Event) -> None:
        """Record ``event`` if it is one of those kept."""
        if isinstance(event, ToolCallStarted):
            self.tool_calls.append(
                ToolCall(event.tool, dict(jsonable(event.args)), event.step_id, event.attempt)
            )
        elif isinstance(event, RecoveryDecided):
            self.decisions.append(event)
        elif isinstance(event, FallbackUsed):
            self.fallbacks.append(event)


def _fail(failures: list[ExpectationFailure], where: str, messages: Sequence[str]) -> None:
    failures.extend(ExpectationFailure(where, m) for m in messages)


def _given(model: BaseModel, key: str) -> bool:
    """Whether ``key`` was written in the file (an explicit ``null`` included)."""
    return key in model.model_fields_set


def _check(
    failures: list[ExpectationFailure],
    where: str,
    model: BaseModel,
    key: str,
    actual: Any,
) -> None:
    """Check ``model.<key>`` against ``actual`` when the file gives it (``null`` too)."""
    if _given(model, key):
        expected: Value = getattr(model, key)
        _fail(failures, where, check_value(expected, actual, where))


def _blame_text(run: Run, name: str) -> str:
    """Where the run's typed output field ``name`` came from, for a failure message."""
    from planexec.output import output_step, trace_field

    plan = run.plan
    if plan is None or output_step(plan) is None:
        return ""
    results = {r.step_id: r for r in run.results}
    output_type = type(run.output) if isinstance(run.output, BaseModel) else None
    blame = trace_field(plan, results, name, output_type=output_type)
    return f" — blamed on step {blame.step_id} ({blame.tool or 'reasoning'}): {blame.describe()}"


def _check_output(
    failures: list[ExpectationFailure], expected: Mapping[str, Value] | None, run: Run
) -> None:
    """The typed output, field by field; a failing field names the step it came from."""
    if expected is None:
        return
    if run.output is None:
        why = f"{run.error_kind}: {run.error}" if run.error else "no error recorded"
        failures.append(
            ExpectationFailure(
                "output", f"expected a typed output, got none (run {run.status}; {why})"
            )
        )
        return
    data = jsonable(run.output)
    for name, want in expected.items():
        where = f"output.{name}"
        actual = data.get(name, MISSING) if isinstance(data, Mapping) else MISSING
        problems = check_value(want, actual, where)
        if problems:
            blame = _blame_text(run, name)
            _fail(failures, where, [p + blame for p in problems])


def _plan_of(run: Run, version: int | None) -> tuple[Plan | None, str]:
    if version is None:
        return run.plan, "the last plan"
    if version > len(run.attempts):
        return None, f"plan {version} (the run tried {len(run.attempts)})"
    return run.attempts[version - 1].plan, f"plan {version}"


def _check_plan(
    failures: list[ExpectationFailure], where: str, exp: PlanExpectation, run: Run
) -> None:
    plan, label = _plan_of(run, exp.version)
    exists = exp.version is None or exp.version <= len(run.attempts)
    if exp.usable is not None and exists and (plan is not None) != exp.usable:
        failures.append(
            ExpectationFailure(
                f"{where}.usable",
                f"expected {label} to be {'usable' if exp.usable else 'unusable'}, "
                f"but it {'has no steps' if plan is None else 'has steps'}",
            )
        )
        return
    if exp.usable is False and plan is None and exists:
        return
    if plan is None:
        failures.append(ExpectationFailure(where, f"expected {label} to exist, but there is none"))
        return
    if exp.steps is not None and len(plan.steps) != exp.steps:
        failures.append(
            ExpectationFailure(
                f"{where}.steps",
                f"expected {exp.steps} steps in {label}, got {len(plan.steps)} "
                f"({', '.join(s.tool or 'none' for s in plan.steps)})",
            )
        )
    if exp.tools is not None:
        want = [None if t in (None, "none") else t for t in exp.tools]
        got = [s.tool for s in plan.steps]
        if want != got:
            failures.append(
                ExpectationFailure(
                    f"{where}.tools",
                    f"expected tools {[t or 'none' for t in want]} in {label}, "
                    f"got {[t or 'none' for t in got]}",
                )
            )
    if exp.dialect is not None and plan.dialect != exp.dialect:
        failures.append(
            ExpectationFailure(
                f"{where}.dialect", f"expected dialect {exp.dialect}, got {plan.dialect}"
            )
        )
    codes = [d.code for d in plan.diagnostics]
    for code in exp.diagnostics:
        if code not in codes:
            failures.append(
                ExpectationFailure(
                    f"{where}.diagnostics",
                    f"expected diagnostic {code} in {label}, got {sorted(set(codes)) or 'none'}",
                )
            )
    if exp.no_errors and plan.has_errors:
        errors = "; ".join(str(d) for d in plan.errors[:3])
        failures.append(
            ExpectationFailure(f"{where}.no_errors", f"expected no error diagnostics: {errors}")
        )


def _arg_problems(args: Mapping[str, Value], actual: Mapping[str, Any], where: str) -> list[str]:
    problems: list[str] = []
    for name, matcher in args.items():
        problems += check_value(matcher, actual.get(name, MISSING), f"{where}.{name}")
    return problems


def _check_tool_call(
    failures: list[ExpectationFailure],
    where: str,
    exp: ToolCallExpectation,
    calls: Sequence[ToolCall],
) -> None:
    of_tool = [c for c in calls if c.tool == exp.tool]
    matching = [c for c in of_tool if not _arg_problems(exp.args, c.args, "args")]
    if exp.times is not None:
        if len(matching) != exp.times:
            detail = "; ".join(f"step {c.step_id}: {short(c.args, 120)}" for c in of_tool[:5])
            failures.append(
                ExpectationFailure(
                    where,
                    f"expected {exp.times} matching call(s) of {exp.tool}, got {len(matching)}"
                    + (f" (calls of {exp.tool}: {detail})" if of_tool else ""),
                )
            )
        return
    if matching:
        return
    if not of_tool:
        called = sorted({c.tool for c in calls})
        failures.append(
            ExpectationFailure(
                where, f"expected a call of {exp.tool}; tools called: {called or 'none'}"
            )
        )
        return
    # the closest call: the one with the fewest failing arguments
    best = min(of_tool, key=lambda c: len(_arg_problems(exp.args, c.args, "args")))
    problems = _arg_problems(exp.args, best.args, "args")
    failures.append(
        ExpectationFailure(
            where,
            f"no call of {exp.tool} matched ({len(of_tool)} call(s)); closest, step "
            f"{best.step_id}: " + "; ".join(problems),
        )
    )


def _result_of(run: Run, step_id: int, version: int | None) -> StepResult | None:
    if version is None:
        pool = run.results
    elif version <= len(run.attempts):
        pool = run.attempts[version - 1].results
    else:
        return None
    found = None
    for r in pool:
        if r.step_id == step_id:
            found = r
    return found


def _check_step(
    failures: list[ExpectationFailure], where: str, exp: StepExpectation, run: Run
) -> None:
    result = _result_of(run, exp.id, exp.version)
    if result is None:
        have = sorted({r.step_id for r in run.results})
        failures.append(
            ExpectationFailure(where, f"step {exp.id} has no result (steps with results: {have})")
        )
        return
    label = f"step {exp.id}"

    def same(key: str, want: Any, got: Any) -> None:
        if _given(exp, key) and want != got:
            extra = ""
            if key in ("status", "error_kind") and result.error:
                extra = f" — error: {short(result.error, 300)}"
            elif key in ("status", "error_kind") and result.note:
                extra = f" — note: {short(result.note, 200)}"
            failures.append(
                ExpectationFailure(
                    f"{where}.{key}", f"expected {label} {key} {want}, got {got}{extra}"
                )
            )

    same("tool", exp.tool, result.tool)
    same("status", exp.status, result.status)
    same("error_kind", exp.error_kind, result.error_kind)
    same("attempts", exp.attempts, result.attempts)
    same("llm_calls", exp.llm_calls, result.llm_calls)
    _check(failures, f"{where}.error", exp, "error", result.error)
    _check(failures, f"{where}.note", exp, "note", result.note)
    _check(failures, f"{where}.output", exp, "output", result.output)
    if exp.args:
        if result.args is None:
            failures.append(
                ExpectationFailure(f"{where}.args", f"{label} was not called with arguments")
            )
        else:
            _fail(failures, f"{where}.args", _arg_problems(exp.args, result.args, f"{where}.args"))
    for arg, method in exp.resolution.items():
        got = result.resolution.get(arg)
        if got != method:
            failures.append(
                ExpectationFailure(
                    f"{where}.resolution.{arg}",
                    f"expected {label} argument {arg!r} resolved by {method}, got "
                    f"{got or 'no resolution'} (all: "
                    f"{ {k: str(v) for k, v in result.resolution.items()} })",
                )
            )


def check_run(expect: Expectations, run: Run, observed: Observer) -> list[ExpectationFailure]:
    """Compare a finished run (and what was observed of it) with the expectations.

    Returns:
        One failure per expectation that does not hold, in the order of the file's keys.
    """
    failures: list[ExpectationFailure] = []
    if _given(expect, "status") and run.status != expect.status:
        why = f" — {short(run.error, 400)}" if run.error else ""
        failures.append(
            ExpectationFailure("status", f"expected {expect.status}, got {run.status}{why}")
        )
    if _given(expect, "error_kind") and run.error_kind != expect.error_kind:
        failures.append(
            ExpectationFailure(
                "error_kind", f"expected run error kind {expect.error_kind}, got {run.error_kind}"
            )
        )
    _check(failures, "error", expect, "error", run.error)
    if expect.plan is not None:
        _check_plan(failures, "plan", expect.plan, run)
    for i, p in enumerate(expect.plans):
        _check_plan(failures, f"plans[{i}]", p, run)
    if expect.plan_attempts is not None and len(run.attempts) != expect.plan_attempts:
        reasons = [a.reason for a in run.attempts[1:] if a.reason]
        failures.append(
            ExpectationFailure(
                "plan_attempts",
                f"expected {expect.plan_attempts} plan(s), got {len(run.attempts)}"
                + (f" (re-planned because: {short(reasons, 300)})" if reasons else ""),
            )
        )
    for i, tc in enumerate(expect.tool_calls):
        _check_tool_call(failures, f"tool_calls[{i}]", tc, observed.tool_calls)
    if expect.tool_sequence is not None:
        got = [c.tool for c in observed.tool_calls]
        if got != expect.tool_sequence:
            failures.append(
                ExpectationFailure(
                    "tool_sequence", f"expected calls {expect.tool_sequence}, got {got}"
                )
            )
    for i, st in enumerate(expect.steps):
        _check_step(failures, f"steps[{i}]", st, run)
    if expect.recovery is not None:
        got_dec = [
            (str(d.action), str(d.error_kind) if d.error_kind else None, d.step_id)
            for d in observed.decisions
        ]
        ok = len(got_dec) == len(expect.recovery) and all(
            g[0] == str(e.action)
            and (e.kind is None or g[1] == str(e.kind))
            and (e.step is None or g[2] == e.step)
            for g, e in zip(got_dec, expect.recovery, strict=False)
        )
        if not ok:
            want = [
                f"{e.action}({e.kind or '*'}, step {e.step if e.step is not None else '*'})"
                for e in expect.recovery
            ]
            have = [f"{a}({k}, step {s})" for a, k, s in got_dec]
            failures.append(
                ExpectationFailure("recovery", f"expected decisions {want}, got {have}")
            )
    codes = [f.code for f in observed.fallbacks]
    for code in expect.fallbacks:
        if code not in codes:
            failures.append(
                ExpectationFailure(
                    "fallbacks", f"expected a {code} fallback event, got {sorted(set(codes))}"
                )
            )
    _check(failures, "answer", expect, "answer", run.answer)
    _check_output(failures, expect.output, run)
    total_llm = run.usage.total_llm_calls
    if expect.max_llm_calls is not None and total_llm > expect.max_llm_calls:
        failures.append(
            ExpectationFailure(
                "max_llm_calls",
                f"expected at most {expect.max_llm_calls} model calls, got {total_llm} "
                f"({dict(run.usage.llm_calls)})",
            )
        )
    if expect.max_tool_calls is not None and run.usage.tool_calls > expect.max_tool_calls:
        failures.append(
            ExpectationFailure(
                "max_tool_calls",
                f"expected at most {expect.max_tool_calls} tool calls, got {run.usage.tool_calls}",
            )
        )
    for purpose, n in expect.llm_calls.items():
        got_n = total_llm if purpose == "total" else run.usage.llm_calls.get(purpose, 0)
        if got_n != n:
            failures.append(
                ExpectationFailure(
                    f"llm_calls.{purpose}",
                    f"expected {n} {purpose} model call(s), got {got_n} "
                    f"({dict(run.usage.llm_calls)})",
                )
            )
    return failures
