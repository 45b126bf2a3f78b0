"""Resolver behaviours that once survived mutation (issue 33; mutation/mutants.toml).

Through `ArgResolver.resolve` (its fast path is inside it) with a scripted model at
the fallback. Oracles: the resolved values, the number of model calls, the failure's
typed kind.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from planexec.errors import ErrorKind
from planexec.plan import Ref, Step
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs
from planexec.results import StepError, StepResult, StepStatus
from planexec.testing import ScriptedChatModel, fake_tool
from planexec.tools import ToolCatalog, ToolSpec


def ok(step_id: int, output: Any) -> StepResult:
    return StepResult(step_id, "t", StepStatus.SUCCEEDED, output=output)


def spec_of(args: Any) -> ToolSpec:
    return ToolCatalog([fake_tool("target", args=args)]).get("target")


def step(args: dict[str, Any], **kw: Any) -> Step:
    return Step(id=9, task="do it", tool="target", args=args, **kw)


class Even(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("n must be even")
        return v


async def test_a_fallback_value_that_fails_the_tool_schema_is_retried_not_accepted() -> None:
    """Kills res-reply-schema-unchecked: the field's type fits, the tool's validator not."""
    model = ScriptedChatModel(replies=['{"n": 7}', '{"n": 8}'])
    results = {1: ok(1, {"counts": {"a": 7, "b": 8}})}
    out = await ArgResolver(model).resolve(
        step({"n": Ref(1, hint="the even count of step_1", raw="{the even count}")}),
        spec_of(Even), results,
    )
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"n": 8}
    assert len(model.requests) == 2


async def test_a_fallback_value_of_the_wrong_type_is_retried() -> None:
    """Kills res-reply-type-unchecked."""
    model = ScriptedChatModel(replies=['{"n": "many"}', '{"n": 8}'])
    results = {1: ok(1, {"counts": {"a": 7, "b": 8}})}
    out = await ArgResolver(model).resolve(
        step({"n": Ref(1, hint="the count of step_1", raw="{the count}")}),
        spec_of({"n": int}), results,
    )
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"n": 8} and len(model.requests) == 2


async def test_a_fallback_value_is_retried_once_only() -> None:
    """Kills res-fallback-attempts (2 → 3) and res-no-retry."""
    model = ScriptedChatModel(replies=['{"n": "many"}', '{"n": "lots"}', '{"n": 8}'])
    results = {1: ok(1, {"counts": {"a": 7, "b": 8}})}
    out = await ArgResolver(model).resolve(
        step({"n": Ref(1, hint="the count of step_1", raw="{the count}")}),
        spec_of({"n": int}), results,
    )
    assert isinstance(out, ResolutionFailure) and out.kind is ErrorKind.RESOLUTION_FAILED
    assert len(model.requests) == 2


async def test_literals_in_a_hint_constrain_the_fallback() -> None:
    """Kills res-hint-literals-unchecked and filters-literals-dropped: an ambiguous
    ``find(name='Chiller 6')`` goes to the fallback, whose CH-7 contradicts it."""
    output = {"assets": [{"id": "CH-6", "name": "Chiller 6", "site": "N"},
                         {"id": "CH-60", "name": "Chiller 6", "site": "S"},
                         {"id": "CH-7", "name": "Chiller 7", "site": "N"}]}
    model = ScriptedChatModel(replies=['{"asset": "CH-7"}', '{"asset": "CH-60"}'])
    hint = "step_1.assets.find(name='Chiller 6').id"
    out = await ArgResolver(model).resolve(
        step({"asset": Ref(1, hint=hint, raw="{" + hint + "}")}), spec_of({"asset": str}),
        {1: ok(1, output)},
    )
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"asset": "CH-60"}
    assert len(model.requests) == 2


async def test_unreadable_arguments_never_resolve() -> None:
    """Kills res-fast-path-ignores-args-valid: ``args_valid=False`` with the arguments
    read as {} must not become a call with no arguments."""
    spec = spec_of({"site": (str, "MAIN")})
    broken = step({}, args_valid=False, args_text='{"site": "SOUTH",,')
    resolver = ArgResolver()
    out = await resolver.resolve(broken, spec, {})
    assert isinstance(out, ResolutionFailure) and out.kind is ErrorKind.ARGS_SYNTAX


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_non_finite_values_are_refused(bad: float) -> None:
    """Kills res-nan-passes (reference, nested literal) and the fast path's check."""
    results = {1: ok(1, {"level": bad, "levels": [1.0, bad]})}
    resolver = ArgResolver()
    for args, kind in (({"x": Ref(1, ("level",))}, float), ({"x": Ref(1, ("levels",))}, list),
                       ({"x": [1.0, bad]}, list), ({"x": {"a": bad}}, dict)):
        spec = spec_of({"x": kind})
        out = await resolver.resolve(step(args), spec, results)
        assert isinstance(out, ResolutionFailure), args
        assert out.kind is ErrorKind.ARGS_INVALID


async def test_an_index_on_a_dict_finds_the_key_of_that_number() -> None:
    """Kills res-index-on-dict-key."""
    results = {1: ok(1, {"0": "first", "1": "second"}), 2: ok(2, ["a", "b"])}
    resolver = ArgResolver()
    out = await resolver.resolve(
        step({"x": Ref(1, (0,)), "y": Ref(1, (1,)), "z": Ref(2, (-1,))}),
        spec_of({"x": str, "y": str, "z": str}), results,
    )
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"x": "first", "y": "second", "z": "b"}


async def test_an_index_out_of_range_is_no_value() -> None:
    """Kills res-index-range-unchecked."""
    results = {2: ok(2, ["a", "b"])}
    for index in (2, -3):
        out = await ArgResolver().resolve(step({"z": Ref(2, (index,))}), spec_of({"z": str}),
                                          results)
        assert isinstance(out, ResolutionFailure), index


async def test_a_reference_to_a_failed_step_is_never_resolved() -> None:
    """Kills res-fast-path-ignores-failed-upstream."""
    failed = StepResult(1, "t", StepStatus.FAILED, error="boom",
                        error_kind=ErrorKind.TOOL_ERROR)
    spec = spec_of({"x": Any})
    resolver = ArgResolver()
    out = await resolver.resolve(step({"x": Ref(1)}), spec, {1: failed})
    assert isinstance(out, ResolutionFailure)
    assert out.kind in (ErrorKind.UPSTREAM_FAILED, ErrorKind.MISSING_REFERENCE)


async def test_a_re_resolution_with_feedback_never_takes_the_fast_path() -> None:
    """Kills res-at-once-ignores-feedback: the fast path would give the failed values again."""
    results = {1: ok(1, {"id": "CH-6", "other": "CH-7"})}
    spec = spec_of({"asset": str})
    s = step({"asset": Ref(1, ("id",))})
    resolver = ArgResolver(ScriptedChatModel(replies=['{"asset": "CH-7"}']))
    feedback = StepError(ErrorKind.TOOL_ERROR, "no asset CH-6", args=("asset",))
    out = await resolver.resolve(s, spec, results, feedback=feedback)
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"asset": "CH-7"}
