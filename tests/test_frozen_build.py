"""`Event.of` and `StepResult.of` build what the constructors build (frozen dataclasses)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from planexec import events
from planexec.errors import ErrorKind
from planexec.events import ArgResolved, Event, StepFinished, StepStarted, ToolCallStarted
from planexec.results import ResolutionMethod, StepResult, StepStatus

RESULT = StepResult(step_id=1, tool="t", status=StepStatus.FAILED, error="boom",
                    error_kind=ErrorKind.TOOL_ERROR)

CASES: list[tuple[type[Event], dict[str, Any]]] = [
    (StepStarted, {"run_id": "r", "step_id": 1, "tool": "t"}),
    (StepStarted, {"run_id": "r", "step_id": 2, "tool": None, "plan_version": 3}),
    (ToolCallStarted, {"run_id": "r", "step_id": 1, "tool": "t", "args": {"a": [1]}}),
    (ToolCallStarted, {"run_id": "r", "step_id": 1, "tool": "t", "args": {}, "attempt": 2,
                       "plan_version": 2, "safe": True}),
    (StepFinished, {"run_id": "r", "result": RESULT}),
    (StepFinished, {"run_id": "r", "result": RESULT, "plan_version": 4, "safe": True}),
    (ArgResolved, {"run_id": "r", "step_id": 1, "arg": "a", "method": ResolutionMethod.REFERENCE}),
]


@pytest.mark.parametrize(("cls", "fields"), CASES)
def test_of_builds_the_constructors_event(cls: type[Event], fields: dict[str, Any]) -> None:
    given_ts = {**fields, "ts": 12.5}
    assert cls.of(**given_ts) == cls(**given_ts)
    built = cls.of(**fields)  # the time is taken when built, as the constructor does
    assert isinstance(built.ts, float) and built.ts > 0
    assert dataclasses.replace(built, ts=1.0) == cls(**{**fields, "ts": 1.0})


@pytest.mark.parametrize(
    "cls", [c for c in vars(events).values() if isinstance(c, type) and issubclass(c, Event)]
)
def test_every_event_refuses_unknown_and_missing_fields_as_its_constructor(
    cls: type[Event],
) -> None:
    with pytest.raises(TypeError):
        cls.of(no_such_field=1)
    with pytest.raises(TypeError):
        cls(no_such_field=1)


def test_a_result_is_checked_as_the_constructor_checks_it() -> None:
    with pytest.raises(ValueError):
        StepResult.of(step_id=1, tool=None, status=StepStatus.FAILED, error="a",
                      failure=RESULT.failure)
