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
from plan_texts import chain_text

import planexec._fastpaths as _fastpaths
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


# -- plans of many steps: work per step does not grow with the plan (issue 29, goal 4) ------


def _many_steps(n: int) -> str:
    """A hashstep plan of ``n`` steps as a planner writes them, with references.

    Whole-value, path and embedded references to the previous step and to one half-way
    back, a literal, two dependencies, an expected output, a blank line between steps.
    """
    out = []
    for i in range(1, n + 1):
        if i == 1:
            args, deps = '{"site": "MAIN"}', "None"
        else:
            a, b = i - 1, max(1, i // 2)
            args = (f'{{"v": "<step_{a}>", "asset": "<step_{b}.items[0].id>", '
                    f'"note": "after {{step_{a}}} ended", "limit": {i % 50}}}')
            deps = f"#S{a}" if a == b else f"#S{b}, #S{a}"
        out.append(f"#Task{i}: step {i}\n#Tool{i}: tool_{i % 7}\n#Args{i}: {args}\n"
                   f"#Dependency{i}: {deps}\n#ExpectedOutput{i}: things\n")
    return "\n".join(out)


def test_the_work_per_step_of_a_long_plan_does_not_grow_with_its_length() -> None:
    # every Python line and call event (loops over earlier steps included) and every
    # character handed to a regex, per character of the plan, at 200 and 1,000 steps
    per_char = {}
    for n in (200, 1000):
        text = _many_steps(n)
        per_char[n] = work(lambda text=text: parse_plan(text)) / len(text)
    assert per_char[1000] / per_char[200] <= 1.05, per_char


def test_the_work_per_step_of_a_long_plain_plan_does_not_grow_with_its_length() -> None:
    # the same, for the plan the hashstep parser's fast path reads
    per_char = {}
    for n in (200, 1000):
        text = chain_text(n)
        assert hashstep._read_plain(text) is not None  # the fast path is taken
        per_char[n] = work(lambda text=text: parse_plan(text)) / len(text)
    assert per_char[1000] / per_char[200] <= 1.05, per_char


_COUNTED = ("_match_field", "_build_step", "_parse_args", "_parse_deps", "find_refs",
            "clean_reply")
_COUNTED_FAST = ("_read_plain", "_plain_step")


@pytest.mark.slow
@pytest.mark.parametrize(("fast", "make", "names"), [
    (False, _many_steps, _COUNTED),  # the general path
    (True, chain_text, _COUNTED_FAST),  # the hashstep parser's fast path
], ids=["general", "fast"])
def test_parsing_50000_steps_scans_and_calls_per_step_as_1000_do(
    monkeypatch: pytest.MonkeyPatch,
    fast: bool,
    make: Callable[[int], str],
    names: tuple[str, ...],
) -> None:
    # too long to trace line by line: counted instead are the regexes (calls, and
    # characters handed to them: a rescan of the rest of the text per step shows) and
    # the calls of the parser's per-step functions (a re-parse per step shows)
    monkeypatch.setattr(_fastpaths, "ON", fast)
    calls: dict[str, int] = {}
    for module in _MODULES:
        for name in names:
            fn = vars(module).get(name)
            if callable(fn):
                def counted(*a: Any, _fn: Callable[..., Any] = fn, _name: str = name,
                            **k: Any) -> Any:
                    calls[_name] = calls.get(_name, 0) + 1
                    return _fn(*a, **k)

                monkeypatch.setattr(module, name, counted)
    got: dict[int, dict[str, float]] = {}
    for n in (1000, 10_000, 50_000):
        text = make(n)
        scanned = [0]
        calls.clear()
        with _counting_regexes(scanned):
            plan = parse_plan(text)
        last = (n // 2, n - 1) if make is _many_steps else (n - 1,)
        assert len(plan.steps) == n and plan.steps[-1].depends_on == last
        # characters scanned per character of the plan (later steps have longer
        # numbers); calls per step
        got[n] = {"chars": scanned[0] / len(text), **{k: v / n for k, v in calls.items()}}
    assert set(got[1000]) == {"chars", *names}, got[1000]  # every counter counted
    for n in (10_000, 50_000):
        for key, value in got[n].items():
            assert value <= 1.05 * got[1000][key], (n, key, got)
