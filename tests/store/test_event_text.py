"""`event_text` writes the hot events straight to JSON text: the reference encoding's text.

The oracle is ``json.dumps(event_to_json(event))`` with the store's separators, made here
with the standard library: character for character, key order included. Events are
generated with plain fields (the fast path) and with fields the fast path must refuse
(str and int subclasses, bools where ints go, non-finite floats, values that are not
JSON data): `event_text` gives the reference text or None, never other text.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from enum import Enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from planexec.errors import ErrorKind
from planexec.events import (
    ArgResolved,
    Event,
    PlanCreated,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.grounding import Grounding
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, jsonable
from planexec.store.codec import dumps_with, event_text, event_to_json, result_to_json
from planexec.store.rows import encode, from_data


def reference(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Color(Enum):
    RED = "red"


class Point(BaseModel):
    x: int
    y: float


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e300, 5e-324]),
)
odd = st.sampled_from([
    Color.RED, StepStatus.FAILED, True, False, 1.5, (1, 2), datetime.date(2024, 1, 2),
    Point(x=1, y=math.nan), b"bytes",
])
texts = st.text(max_size=6)  # escapes, quotes, surrogates, non-ASCII
scalars = st.one_of(st.none(), st.booleans(), st.integers(), texts, floats, odd)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(texts, st.integers(-2, 2), st.none()), inner, max_size=3),
    ),
    max_leaves=12,
)
ints = st.one_of(st.integers(), st.integers().map(lambda i: i or 1).filter(bool), odd)
maybe_text = st.one_of(st.none(), texts, st.sampled_from([ErrorKind.TOOL_ERROR, 3]))
times = st.one_of(st.none(), floats, st.integers(0, 3))


@st.composite
def results(draw: st.DrawFn) -> StepResult:
    failure = draw(st.one_of(st.none(), st.just(
        StepError(ErrorKind.TOOL_ERROR, "boom", args=("x",), upstream=1))))
    return StepResult(
        step_id=draw(st.one_of(st.integers(), odd)),
        tool=draw(maybe_text),
        status=draw(st.sampled_from(list(StepStatus))),
        args=draw(st.one_of(st.none(), values)),
        output=draw(values),
        raw_output=draw(values),
        error=None if failure else draw(maybe_text),
        error_kind=None if failure else draw(
            st.one_of(st.none(), st.sampled_from(list(ErrorKind)))),
        resolution=draw(st.dictionaries(texts, st.sampled_from(list(ResolutionMethod)),
                                        max_size=2)),
        llm_calls=draw(st.one_of(st.integers(0, 3), odd)),
        attempts=draw(st.one_of(st.integers(0, 3), odd)),
        started_at=draw(times),
        duration=draw(times),
        server=draw(maybe_text),
        note=draw(maybe_text),
        reused=draw(st.one_of(st.booleans(), st.integers(0, 1))),
        streamed=draw(st.one_of(st.booleans(), st.integers(0, 1))),
        failure=failure,
        grounding=draw(st.one_of(st.just({}), st.just(
            {"a": Grounding(status="grounded", paths=("step_1.id",))}))),
    )


run_ids = st.one_of(texts, st.sampled_from([StepStatus.FAILED, 7]))
tss = st.one_of(floats, st.integers(0, 5))


@st.composite
def hot_events(draw: st.DrawFn) -> Event:
    kind = draw(st.sampled_from(["StepStarted", "ArgResolved", "ToolCallStarted",
                                 "StepFinished"]))
    run_id, ts = draw(run_ids), draw(tss)
    plan_version = draw(st.one_of(st.integers(1, 3), odd))
    if kind == "ArgResolved":
        if draw(st.booleans()):  # as the resolver makes them: plain (the fast path)
            return ArgResolved(
                run_id=draw(texts), ts=draw(st.floats(allow_nan=False, allow_infinity=False)),
                step_id=draw(st.integers()), arg=draw(texts),
                method=draw(st.sampled_from(list(ResolutionMethod))),
            )
        return ArgResolved(
            run_id=run_id, ts=ts, step_id=draw(ints), arg=draw(maybe_text),
            method=draw(st.one_of(st.sampled_from(list(ResolutionMethod)), maybe_text, odd)),
            grounding=draw(st.one_of(st.none(), st.just(
                Grounding(status="grounded", paths=("step_1.id",))))),
        )
    if kind == "StepStarted":
        return StepStarted(run_id=run_id, ts=ts, step_id=draw(ints), tool=draw(maybe_text),
                           plan_version=plan_version)
    if kind == "ToolCallStarted":
        return ToolCallStarted(
            run_id=run_id, ts=ts, step_id=draw(ints), tool=draw(maybe_text),
            args=draw(values), attempt=draw(ints), plan_version=plan_version,
            safe=draw(st.one_of(st.booleans(), st.integers(0, 1))),
        )
    return StepFinished(run_id=run_id, ts=ts, result=draw(results()),
                        plan_version=plan_version,
                        safe=draw(st.one_of(st.booleans(), st.integers(0, 1))))


def check(event: Event) -> tuple[str, str | None] | None:
    texts = event_text(event)
    if texts is None:
        return None
    text, result_text = texts
    data = event_to_json(event)
    assert text == reference(data)
    if isinstance(event, StepFinished):
        assert result_text == reference(data["result"])
        assert result_text == reference(result_to_json(event.result))
    else:
        assert result_text is None
    return texts


@settings(max_examples=1500, deadline=None)
@given(hot_events())
def test_event_text_is_the_reference_text_or_none(event: Event) -> None:
    check(event)


@settings(max_examples=1000, deadline=None)
@given(hot_events())
def test_event_to_json_of_hot_events_is_jsonable_field_by_field(event: Event) -> None:
    """The oracle: every field through `jsonable`, a result through `StepResult.to_dict`."""
    expected: dict[str, Any] = {"type": type(event).__name__}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        expected[f.name] = value.to_dict() if isinstance(value, StepResult) else jsonable(value)
    assert strict(event_to_json(event)) == strict(expected)


def strict(value: Any) -> Any:
    """``value`` with every leaf tagged by its type (``1``, ``1.0`` and ``True`` differ)."""
    if isinstance(value, dict):
        return [(k, strict(v)) for k, v in value.items()]  # key order counts
    if isinstance(value, list):
        return ["list", *(strict(v) for v in value)]
    if isinstance(value, float) and math.isnan(value):
        return (type(value).__name__, "nan")
    return (type(value).__name__, value)


def plain_result(**fields: Any) -> StepResult:
    base: dict[str, Any] = {
        "step_id": 3, "tool": "t", "status": StepStatus.SUCCEEDED, "args": {"a": [1, 2.5]},
        "output": {"ok": True, "é\"\n": None}, "raw_output": "raw", "attempts": 1,
        "started_at": 1764032222.123456, "duration": 0.000123,
    }
    return StepResult(**(base | fields))


def test_the_executors_events_take_the_fast_path() -> None:
    """Events as the executor makes them are written straight to text (not None)."""
    shared = {"ok": True}
    events: list[Event] = [
        StepStarted(run_id="r", step_id=1, tool="t"),
        StepStarted(run_id="r", step_id=1, tool=None, plan_version=2),
        ArgResolved(run_id="r", step_id=2, arg="v", method=ResolutionMethod.REFERENCE),
        ArgResolved(run_id="r", step_id=2, arg="é\"", method=ResolutionMethod.LITERAL),
        ToolCallStarted(run_id="r", step_id=1, tool="t", args={"q": "x"}, safe=True),
        StepFinished(run_id="r", result=plain_result(), safe=True),
        StepFinished(run_id="r", result=plain_result(output=shared, raw_output=shared)),
        StepFinished(run_id="r", result=plain_result(
            status=StepStatus.FAILED, error="boom", error_kind=ErrorKind.TOOL_ERROR,
            failure=StepError(ErrorKind.TOOL_ERROR, "boom", args=("a",)),
            resolution={"a": ResolutionMethod.LLM}, started_at=None, duration=None,
            grounding={"a": Grounding(status="grounded", paths=("step_1.id",))},
        )),
    ]
    for event in events:
        assert check(event) is not None, event


def test_other_events_and_fields_that_are_not_plain_are_left_to_event_to_json() -> None:
    assert event_text(RunStarted(run_id="r", question="q")) is None
    assert event_text(PlanCreated(run_id="r", version=1, plan=None)) is None
    assert event_text(StepStarted(run_id="r", step_id=True, tool="t")) is None
    grounded = Grounding(status="grounded", paths=("step_1.id",))
    assert event_text(ArgResolved(run_id="r", step_id=1, arg="a", method=ResolutionMethod.LLM,
                                  grounding=grounded)) is None
    assert event_text(StepStarted(run_id="r", ts=math.nan, step_id=1, tool="t")) is None
    assert event_text(StepFinished(run_id="r", result=plain_result(duration=math.inf))) is None
    assert event_text(StepFinished(run_id="r", result=plain_result(note=StepStatus.FAILED))) is None


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), texts,
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(texts, inner, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(texts, json_values, max_size=5), texts, json_values, st.data())
def test_dumps_with_is_the_reference_text(
    data: dict[str, Any], key: str, value: Any, draw: st.DataObject
) -> None:
    """The value at ``key`` is encoded once and spliced where the reference has it."""
    items = list(data.items())
    at = draw.draw(st.integers(0, len(items)))
    if key not in data:
        items.insert(at, (key, value))
    data = dict(items)
    text, value_text = dumps_with(data, key)
    assert text == reference(data)
    assert value_text == (None if data[key] is None else reference(data[key]))


@settings(max_examples=1000, deadline=None)
@given(hot_events())
def test_an_events_queued_rows_are_those_of_its_encoded_data(event: Event) -> None:
    """`rows.encode` against `rows.from_data` of `event_to_json` (the general path).

    The same ``events`` row (every column) and the same ``step_results`` row.
    """
    if event_text(event) is None:
        return  # not plain: `encode` is `from_data(event_to_json(event))` itself
    assert repr(encode(event)) == repr(from_data(event_to_json(event)))  # NaN is itself
