"""`StepResult.of` builds exactly what `StepResult(...)` builds, and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planexec.errors import ErrorKind
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus

MESSAGES = st.sampled_from(["boom", "step 1: failed", ""])
KINDS = st.sampled_from(list(ErrorKind))

OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "args": st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    "output": st.none() | st.integers() | st.text(max_size=5),
    "raw_output": st.none() | st.text(max_size=5),
    "error": st.none() | MESSAGES,
    "error_kind": st.none() | KINDS,
    "resolution": st.dictionaries(
        st.text(max_size=3), st.sampled_from(list(ResolutionMethod)), max_size=2
    ),
    "llm_calls": st.integers(0, 3),
    "attempts": st.integers(0, 3),
    "started_at": st.none() | st.floats(0, 1e9),
    "duration": st.none() | st.floats(0, 10),
    "server": st.none() | st.text(max_size=3),
    "note": st.none() | st.text(max_size=5),
    "reused": st.booleans(),
    "streamed": st.booleans(),
    "failure": st.none() | st.builds(StepError, KINDS, MESSAGES),
}


@st.composite
def fields(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step_id": draw(st.integers(1, 9)),
        "tool": draw(st.none() | st.text(max_size=4)),
        "status": draw(st.sampled_from(list(StepStatus))),
    }
    for name in draw(st.sets(st.sampled_from(sorted(OPTIONAL)))):
        out[name] = draw(OPTIONAL[name])
    return out


def _outcome(build: Any, kw: dict[str, Any]) -> Any:
    try:
        return build(**kw)
    except (TypeError, ValueError) as exc:
        return type(exc)


@given(fields())
def test_of_builds_what_the_constructor_builds(kw: dict[str, Any]) -> None:
    expected = _outcome(StepResult, kw)
    got = _outcome(StepResult.of, kw)
    assert got == expected
    if isinstance(expected, StepResult):
        assert type(got) is StepResult
        assert got.to_dict() == expected.to_dict()


def test_defaults_are_fresh_for_every_result() -> None:
    a = StepResult.of(step_id=1, tool=None, status=StepStatus.SKIPPED)
    b = StepResult.of(step_id=2, tool=None, status=StepStatus.SKIPPED)
    assert a.resolution == {} and a.resolution is not b.resolution
    assert a.grounding is not b.grounding


@pytest.mark.parametrize(
    "kw", [{"step_id": 1, "tool": None}, {"step_id": 1, "tool": None, "status": "x", "bad": 1}]
)
def test_a_missing_or_unknown_field_is_a_type_error(kw: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        StepResult.of(**kw)
