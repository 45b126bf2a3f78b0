"""`plain_json_size`: a bound on the JSON size of plain data, checked against ``json``.

The oracle is the standard library: the compact JSON text of the value is never longer
than the bound, and `encode_json` keeps a plain value as it is, without a warning.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from planexec.results import MAX_JSON_DEPTH, encode_json, plain_json_size

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
plain = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=40,
)


@given(plain)
def test_the_bound_is_never_below_the_compact_json_text(value: Any) -> None:
    bound = plain_json_size(value)
    assert bound is not None
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert len(text) <= bound


@given(plain)
def test_a_plain_value_is_its_own_json_encoding(value: Any) -> None:
    encoded = encode_json(value)
    assert encoded.data == value and not encoded.warnings and encoded.error is None


class Color(enum.Enum):
    RED = "red"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_what_is_not_plain_has_no_bound() -> None:
    for value in (
        (1, 2),
        {1: "a"},
        float("nan"),
        Color.RED,
        10**30,
        {"a": {1, 2}},
        nested(MAX_JSON_DEPTH + 1),
    ):
        assert plain_json_size(value) is None, value


def test_a_value_with_too_many_nodes_has_no_bound() -> None:
    assert plain_json_size(list(range(20)), max_nodes=10) is None
    assert plain_json_size(list(range(5)), max_nodes=10) is not None


def _nodes(value: Any) -> int:
    """Containers and scalars in a value (dict keys are not nodes): the oracle's count."""
    if isinstance(value, dict):
        return 1 + sum(_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_nodes(v) for v in value)
    return 1


@given(plain, st.integers(min_value=1, max_value=60))
def test_a_value_is_refused_exactly_when_it_has_more_nodes_than_looked_at(
    value: Any, max_nodes: int
) -> None:
    refused = plain_json_size(value, max_nodes=max_nodes) is None
    assert refused == (_nodes(value) > max_nodes)
