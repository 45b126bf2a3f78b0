"""JSON data from Python values: a fast path of `planexec.results.jsonable` (internal).

`json_data` copies plain JSON data (str-keyed dicts, lists, str, int, bool, None,
finite floats) directly and hands anything else to `jsonable`, which gives the same data
for plain values and the documented encodings for the rest. Light on purpose: it
imports `planexec.results` (and so pydantic) only when a value is not plain, so
``planexec parse`` and the run store's hot path do without.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["PLAIN_DEPTH", "json_data", "non_finite"]

PLAIN_DEPTH = 64
"""Nesting the fast path follows; deeper values go to `jsonable` (which has the real
limit, `planexec.results.MAX_JSON_DEPTH`, not below this: a test checks it)."""


class _NotPlain(Exception):
    """A value that is not plain JSON data: `jsonable` encodes it."""


_SCALARS = (str, int, bool, type(None))


def _plain(value: Any, depth: int) -> Any:
    t = type(value)
    if t in _SCALARS:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        raise _NotPlain
    if depth >= PLAIN_DEPTH:
        raise _NotPlain
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            out[k] = _plain(v, depth + 1)
        return out
    if t is list:
        return [_plain(v, depth + 1) for v in value]
    raise _NotPlain


def json_data(value: Any) -> Any:
    """``jsonable(value)``: the same data, faster for plain JSON data (a copy either way)."""
    try:
        return _plain(value, 0)
    except _NotPlain:
        from planexec.results import jsonable

        return jsonable(value)


def non_finite(value: Any, skip: frozenset[type] = frozenset()) -> str | None:
    """The first NaN or infinite float in a value (``"nan"``, ``"inf"``), if any.

    Values of a type in ``skip`` (e.g. a plan's references) are not looked into.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)  # exact types first: plain data is most of what is checked
        if kind is str or kind is int or kind is bool or item is None or kind in skip:
            continue
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return repr(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None
