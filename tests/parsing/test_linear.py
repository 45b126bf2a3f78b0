"""Parsing is linear in the size of the reply (issue 14, item 5).

Hostile replies used to take seconds to tens of seconds: ```` "```\\n" * 8000 ````,
``"#Task1: t " + "#Tool1: x " * 8000``, ``"#Args1:\\n" + "[\\n" * 16000``, a
``#Dependency`` listing 20,000 steps (to parse and to check). Each test here measures
the *work* of parsing an input of size n and of size 2n — not seconds: the number of
Python line and call events (``sys.settrace``) plus the characters handed to the
parser's regular expressions — and asserts that doubling the input at most about
doubles the work. The regex engine's own backtracking is invisible to such counters,
so the line-anchored patterns are also checked not to run across line ends (that was
the quadratic part of the fence shape).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planexec.parsing as parsing_pkg
from planexec.errors import PlanParseError
from planexec.parsing import (
    _common,
    checks,
    hashstep,
    jsonrepair,
    llmcompiler,
    parse_plan,
    refs,
    rewoo,
)
from planexec.parsing.checks import check_plan, find_cycles
from planexec.parsing.hashstep import _Brackets, _open_brackets, parse_hashstep

_MODULES: tuple[ModuleType, ...] = (
    parsing_pkg, _common, checks, hashstep, jsonrepair, llmcompiler, refs, rewoo
)


class _CountingPattern:
    """A compiled pattern that adds the characters it is asked to scan to a counter."""

    def __init__(self, pattern: re.Pattern[str], counter: list[int]) -> None:
        self._pattern = pattern
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._pattern, name)
        if name not in {"match", "fullmatch", "search", "findall", "finditer", "sub",
                        "subn", "split"}:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            text = args[1] if name in {"sub", "subn"} else args[0] if args else ""
            pos = args[1] if name not in {"sub", "subn", "split"} and len(args) > 1 else 0
            if isinstance(text, str):
                self._counter[0] += max(len(text) - int(pos), 0)
            return attr(*args, **kwargs)

        return counted


@contextmanager
def _counting_regexes(counter: list[int]) -> Iterator[None]:
    saved: list[tuple[ModuleType, str, Any]] = []
    for module in _MODULES:
        for name, value in list(vars(module).items()):
            if isinstance(value, re.Pattern):
                saved.append((module, name, value))
                setattr(module, name, _CountingPattern(value, counter))
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def work(fn: Callable[[], object]) -> int:
    """Python line/call events while ``fn`` runs, plus characters scanned by regexes."""
    events = [0]
    scanned = [0]

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        events[0] += 1
        return tracer

    with _counting_regexes(scanned):
        sys.settrace(tracer)
        try:
            fn()
        except PlanParseError:
            pass
        finally:
            sys.settrace(None)
    return events[0] + scanned[0]


def _steps_then_dependency(n: int) -> str:
    steps = "".join(f"#Task{i}: t\n#Tool{i}: x\n#Args{i}: {{}}\n" for i in range(1, n + 1))
    listing = ", ".join(f"#S{i}" for i in range(1, n + 1))
    return steps + f"#Task{n + 1}: t\n#Tool{n + 1}: x\n#Dependency{n + 1}: {listing}\n"


SHAPES: dict[str, tuple[Callable[[int], str], int]] = {
    # name: (input of size n, n)
    "fences": (lambda n: "```\n" * n, 2000),
    "blank lines": (lambda n: " \n" * n + "#Task1: t\n#Tool1: x\n", 2000),
    "tools on one line": (lambda n: "#Task1: t " + "#Tool1: x " * n, 300),
    "open brackets (no step)": (lambda n: "#Args1:\n" + "[\n" * n, 2000),
    "open brackets": (lambda n: "#Task1: t\n#Tool1: x\n#Args1:\n" + "[\n" * n, 500),
    "a dependency on every step": (_steps_then_dependency, 600),
    "tasks only": (lambda n: "".join(f"#Task{i}: t\n#Tool{i}: x\n" for i in range(n)), 300),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_doubling_the_reply_at_most_doubles_the_work_of_parsing(shape: str) -> None:
    make, n = SHAPES[shape]
    small, large = make(n), make(2 * n)
    w1 = work(lambda: parse_plan(small))
    w2 = work(lambda: parse_plan(large))
    assert w2 / w1 <= 2.5, (shape, w1, w2)


@pytest.mark.parametrize("dialect", ["rewoo", "llmcompiler"])
@pytest.mark.parametrize("shape", ["fences", "tools on one line", "open brackets"])
def test_the_other_dialects_are_linear_on_the_same_shapes(shape: str, dialect: str) -> None:
    make, n = SHAPES[shape]
    w1 = work(lambda: parse_plan(make(n), dialect))
    w2 = work(lambda: parse_plan(make(2 * n), dialect))
    assert w2 / w1 <= 2.5, (shape, dialect, w1, w2)


def test_checking_a_dependency_on_every_step_is_linear() -> None:
    n = 400
    small = parse_hashstep(_steps_then_dependency(n))
    large = parse_hashstep(_steps_then_dependency(2 * n))
    w1 = work(lambda: check_plan(small))
    w2 = work(lambda: check_plan(large))
    assert w2 / w1 <= 2.5, (w1, w2)


def test_finding_cycles_visits_each_edge_once() -> None:
    def edges(n: int) -> dict[int, tuple[int, ...]]:
        graph = {i: () for i in range(1, n + 1)}
        graph[n + 1] = tuple(range(1, n + 1))
        graph[1] = (n + 1,)  # and one cycle through all of it
        return graph

    w1 = work(lambda: find_cycles(edges(1000)))
    w2 = work(lambda: find_cycles(edges(2000)))
    assert w2 / w1 <= 2.5, (w1, w2)
    assert find_cycles(edges(3)) == [[1, 4]]


@pytest.mark.parametrize(
    ("pattern", "line"),
    [
        (parsing_pkg._HASHSTEP_RE, "#Task1: find"),
        (parsing_pkg._HASHSTEP_RE, "  **#Tool1:** sites"),
        (parsing_pkg._REWOO_LOOSE_RE, "Plan: search"),
        (parsing_pkg._REWOO_LOOSE_RE, "### Plan 2: search"),
        (parsing_pkg._LLMC_RE, "1. search('x')"),
    ],
)
def test_a_line_anchored_pattern_never_starts_on_an_earlier_line(
    pattern: re.Pattern[str], line: str
) -> None:
    # from every line start, a match that could run on over the next lines rescans the
    # rest of the reply: quadratic on "```\n" * 8000 or on many blank lines
    assert pattern.match(line)
    for before in ("\n", " \n", "```\n", "**\n", "-- \n"):
        m = pattern.match(before + line)
        assert m is None or "\n" not in m.group(0)[: len(before)], (before, m)


# -- the incremental bracket state agrees with reading the whole text at once ---------------


def _reference_open_brackets(text: str) -> bool:
    depth = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
    return in_str or depth > 0


_PIECES = st.lists(st.text(alphabet='ab"\\{}[]() \n', max_size=8), max_size=12)


@settings(max_examples=300, deadline=None)
@given(_PIECES)
def test_reading_brackets_piece_by_piece_is_reading_them_at_once(pieces: list[str]) -> None:
    state = _Brackets()
    for i, piece in enumerate(pieces):
        state.feed(piece)
        assert state.open == _reference_open_brackets("".join(pieces[: i + 1]))
    assert _open_brackets("".join(pieces)) == _reference_open_brackets("".join(pieces))
