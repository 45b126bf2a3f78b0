"""The store's fast encodings give exactly what the reference encodings give.

`json_data` (`planexec._json`) is a fast path of `planexec.results.jsonable` for plain JSON
data, and `result_to_json` builds `StepResult.to_dict`'s data itself; the oracles are those two
reference implementations, on generated values (hypothesis) and on results of every
shape (failures, grounding, models, values JSON cannot hold).
"""

from __future__ import annotations

import datetime
import math
from enum import Enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from planexec._json import json_data
from planexec.errors import ErrorKind
from planexec.grounding import Grounding
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, jsonable
from planexec.store.codec import result_to_json


class Color(Enum):
    RED = "red"


class Point(BaseModel):
    x: int
    y: float


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([Color.RED, datetime.date(2024, 1, 2), Point(x=1, y=math.nan)]),
)
keys = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_json_data_is_jsonable(value: Any) -> None:
    assert json_data(value) == jsonable(value)


def test_json_data_copies_plain_data() -> None:
    args = {"ids": [1, 2], "where": {"site": "MAIN"}}
    data = json_data(args)
    args["ids"].append(3)
    args["where"]["site"] = "EAST"
    assert data == {"ids": [1, 2], "where": {"site": "MAIN"}}


def test_the_fast_path_gives_up_before_jsonable_does() -> None:
    from planexec._json import PLAIN_DEPTH
    from planexec.results import MAX_JSON_DEPTH

    assert PLAIN_DEPTH <= MAX_JSON_DEPTH


def test_json_data_of_deep_nesting_is_jsonable() -> None:
    deep: Any = "leaf"
    for _ in range(150):
        deep = [deep]
    assert json_data(deep) == jsonable(deep)


RESULTS = [
    StepResult(step_id=1, tool="t", status=StepStatus.SUCCEEDED, args={"a": 1},
               output={"ok": True}, raw_output='{"ok": true}', attempts=1,
               started_at=1.5, duration=0.25),
    StepResult(step_id=2, tool=None, status=StepStatus.SUCCEEDED, output=Point(x=1, y=2.0),
               raw_output=[math.inf, (1, 2)], llm_calls=2, note="a reasoning step",
               resolution={"a": ResolutionMethod.LLM}, reused=True, server="srv",
               grounding={"a": Grounding(status="grounded", paths=("step_1.id",))}),
    StepResult(step_id=3, tool="t", status=StepStatus.FAILED,
               failure=StepError(ErrorKind.TOOL_ERROR, "boom", args=("x",), upstream=1,
                                 retryable=False),
               args={1: "int key", "nested": {"k": [Color.RED]}}),
    StepResult(step_id=4, tool="t", status=StepStatus.BLOCKED,
               error="blocked by step 3", error_kind=ErrorKind.UPSTREAM_FAILED),
]


def test_result_to_json_is_to_dict() -> None:
    for result in RESULTS:
        assert result_to_json(result) == result.to_dict()
