"""The resolver's fast path (literal scalars, whole-value references, values that fit
their field as they are) gives what pydantic's lax validation gives.

The oracle is pydantic itself, used independently of the resolver: a value passed on
unchanged (method ``reference`` or ``literal``) must validate under the field's type to
the same JSON data; a value pydantic changes must come out ``coerced``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, TypeAdapter, ValidationError, create_model

from planexec.errors import ErrorKind
from planexec.plan import Ref, Step
from planexec.resolver import ArgResolver, ResolvedArgs
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec

ANNOTATIONS: list[Any] = [
    Any,
    str,
    int,
    float,
    bool,
    list,
    list[Any],
    dict,
    dict[str, Any],
    int | None,
    str | None,
    list[int],
    dict[str, int],
]

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**6), max_value=10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


def spec_for(annotation: Any) -> ToolSpec:
    schema = create_model("target_args", v=(annotation, ...))
    return ToolCatalog([fake_tool("target", 1, args=schema)]).get("target")


def resolve(spec: ToolSpec, value: Any, *, as_ref: bool) -> Any:
    results = {1: StepResult(1, "src", StepStatus.SUCCEEDED, output=value)}
    arg = Ref(1, raw="<step_1>") if as_ref else value
    step = Step(id=2, tool="target", args={"v": arg}, depends_on=(1,) if as_ref else ())
    return asyncio.run(ArgResolver().resolve(step, spec, results))


def pydantic_json(annotation: Any, value: Any) -> Any:
    adapter = TypeAdapter(annotation, config=ConfigDict(coerce_numbers_to_str=True))
    return adapter.dump_python(adapter.validate_python(value), mode="json")


def same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=60, deadline=None)
@given(annotation=st.sampled_from(ANNOTATIONS), value=values)
def test_a_value_passed_on_unchanged_is_what_pydantic_makes_of_it(
    annotation: Any, value: Any
) -> None:
    spec = spec_for(annotation)
    out = resolve(spec, value, as_ref=True)
    try:
        expected = pydantic_json(annotation, value)
    except ValidationError:
        assert not isinstance(out, ResolvedArgs)  # no model: a value that does not fit fails
        return
    assert isinstance(out, ResolvedArgs), out
    if out.methods["v"] is ResolutionMethod.REFERENCE:
        assert out.args["v"] is value
        assert same_json(expected, value) or expected == value
    else:
        assert out.methods["v"] is ResolutionMethod.COERCED
        assert same_json(out.args["v"], expected)


@pytest.mark.parametrize(
    ("annotation", "value", "method", "passed"),
    [
        (int, 42, ResolutionMethod.REFERENCE, 42),
        (int, "42", ResolutionMethod.COERCED, 42),
        (bool, 1, ResolutionMethod.COERCED, True),
        (int, True, ResolutionMethod.COERCED, 1),
        (str, 7, ResolutionMethod.COERCED, "7"),
        (float, 1.5, ResolutionMethod.REFERENCE, 1.5),
        (list[Any], [1, "a"], ResolutionMethod.REFERENCE, [1, "a"]),
        (list[int], ["1"], ResolutionMethod.COERCED, [1]),
        (dict[str, Any], {"a": [1]}, ResolutionMethod.REFERENCE, {"a": [1]}),
        (Any, {"a": {"b": None}}, ResolutionMethod.REFERENCE, {"a": {"b": None}}),
        (int | None, None, ResolutionMethod.REFERENCE, None),
    ],
)
def test_reference_values_are_passed_on_or_coerced(
    annotation: Any, value: Any, method: ResolutionMethod, passed: Any
) -> None:
    out = resolve(spec_for(annotation), value, as_ref=True)
    assert isinstance(out, ResolvedArgs), out
    assert out.methods["v"] is method
    assert out.args["v"] == passed and type(out.args["v"]) is type(passed)


def test_a_literal_that_looks_like_a_reference_is_not_taken_as_a_literal() -> None:
    out = resolve(spec_for(str), "<step_9.id>", as_ref=False)
    assert not isinstance(out, ResolvedArgs)


items = st.lists(
    st.one_of(
        st.tuples(st.just("ref"), values),
        st.tuples(
            st.just("literal"),
            st.none() | st.booleans() | st.integers() | st.text(alphabet="abc xyz", max_size=5),
        ),
    ),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(annotation=st.sampled_from([Any, list, list[Any]]), written=items)
def test_a_list_of_references_and_literals_resolves_item_by_item(
    annotation: Any, written: list[tuple[str, Any]]
) -> None:
    """Oracle: each reference replaced by its step's output, each literal kept as is."""
    results: dict[int, StepResult] = {}
    arg: list[Any] = []
    for i, (kind, value) in enumerate(written, start=1):
        if kind == "ref":
            results[i] = StepResult(i, "src", StepStatus.SUCCEEDED, output=value)
            arg.append(Ref(i, raw=f"<step_{i}>"))
        else:
            arg.append(value)
    step = Step(id=99, tool="target", args={"v": arg}, depends_on=tuple(results))
    out = asyncio.run(ArgResolver().resolve(step, spec_for(annotation), results))
    assert isinstance(out, ResolvedArgs), out
    assert out.args["v"] == [value for _, value in written]
    assert all(a is v for a, (_, v) in zip(out.args["v"], written, strict=True))
    refs = any(kind == "ref" for kind, _ in written)
    assert out.methods["v"] is (ResolutionMethod.REFERENCE if refs else ResolutionMethod.LITERAL)


@pytest.mark.parametrize("status", [StepStatus.FAILED, StepStatus.SKIPPED])
def test_a_list_holding_a_reference_to_a_step_that_did_not_succeed_fails(
    status: StepStatus,
) -> None:
    results = {
        1: StepResult(1, "src", StepStatus.SUCCEEDED, output=1),
        2: StepResult(2, "src", status, error="boom" if status is StepStatus.FAILED else None),
    }
    step = Step(id=3, tool="target", args={"v": [Ref(1), Ref(2)]}, depends_on=(1, 2))
    out = asyncio.run(ArgResolver().resolve(step, spec_for(list[Any]), results))
    assert not isinstance(out, ResolvedArgs)
    assert out.kind is ErrorKind.UPSTREAM_FAILED
