"""Checking values against scenario `Matcher`s, with messages a person can act on."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from planexec._text import clip
from planexec.regress.scenario import TYPE_NAMES, Matcher, Value, as_matcher
from planexec.results import jsonable

__all__ = ["MISSING", "check_value", "is_subset", "short"]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()
"""Stands for a value that is not there at all (an argument not passed)."""


def short(value: Any, limit: int = 160) -> str:
    """A value as compact text, cut to ``limit`` characters."""
    if value is MISSING:
        return "<missing>"
    try:
        text = json.dumps(jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    return clip(text, limit)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def is_subset(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` contains ``expected``.

    A mapping needs every expected key, with a value containing the expected one; a list
    needs every expected item to be contained in some item of the actual list (in any
    order); anything else must be equal.
    """
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and is_subset(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list | tuple):
        return isinstance(actual, list | tuple) and all(
            any(is_subset(e, a) for a in actual) for e in expected
        )
    return _equal(expected, actual)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    from planexec.parsing.jsonrepair import extract_json_object

    return extract_json_object(text)


def _has_type(value: Any, name: str) -> bool:
    if name == "any":
        return value is not MISSING
    if isinstance(value, bool) and name in ("int", "float", "number"):
        return False
    return isinstance(value, TYPE_NAMES[name])


def _contains(value: Any, item: str) -> bool:
    if isinstance(value, str):
        return item in value
    if isinstance(value, list | tuple):
        return any(_equal(v, item) for v in value)
    if isinstance(value, Mapping):
        return item in value
    return False


def check_value(expected: Value | Matcher, value: Any, where: str) -> list[str]:
    """Check ``value`` against a matcher (or a plain value meaning ``equals``).

    Returns:
        One message per check that does not hold (empty when all hold). ``value`` may
        be `MISSING`.
    """
    matcher = as_matcher(expected)
    checks = matcher.given()
    value = value if value is MISSING else jsonable(value)
    problems: list[str] = []
    got = short(value)
    if "absent" in checks:
        if checks["absent"] and value is not MISSING:
            problems.append(f"{where}: expected to be absent, got {got}")
        if not checks["absent"] and value is MISSING:
            problems.append(f"{where}: expected to be present, but it is missing")
    if value is MISSING:
        others = [k for k in checks if k != "absent"]
        if others:
            problems.append(f"{where}: expected {_describe(checks)}, but it is missing")
        return problems
    if "equals" in checks and not _equal(jsonable(checks["equals"]), value):
        problems.append(f"{where}: expected {short(checks['equals'])}, got {got}")
    if "subset" in checks and not is_subset(checks["subset"], value):
        problems.append(f"{where}: expected to contain {short(checks['subset'])}, got {got}")
    if "json_subset" in checks:
        if not isinstance(value, str):
            problems.append(f"{where}: expected text holding JSON, got {got}")
        else:
            parsed = _parse_json(value)
            if parsed is None:
                problems.append(f"{where}: expected text holding JSON, found none in {got}")
            elif not is_subset(checks["json_subset"], parsed):
                problems.append(
                    f"{where}: expected JSON containing {short(checks['json_subset'])}, "
                    f"got {short(parsed)}"
                )
    for item in _as_list(checks.get("contains")):
        if not _contains(value, item):
            problems.append(f"{where}: expected to contain {item!r}, got {got}")
    for item in _as_list(checks.get("not_contains")):
        if _contains(value, item):
            problems.append(f"{where}: expected not to contain {item!r}, got {got}")
    if "regex" in checks:
        pattern = checks["regex"]
        try:
            found = re.search(pattern, _text(value)) is not None
        except re.error as exc:
            problems.append(f"{where}: invalid regex {pattern!r}: {exc}")
        else:
            if not found:
                problems.append(f"{where}: expected to match /{pattern}/, got {got}")
    if "type" in checks and not _has_type(value, checks["type"]):
        problems.append(f"{where}: expected a {checks['type']}, got {got}")
    return problems


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _describe(checks: Mapping[str, Any]) -> str:
    return ", ".join(
        short(v, 60) if k == "equals" else f"{k} {short(v, 60)}"
        for k, v in checks.items()
        if k != "absent"
    )
