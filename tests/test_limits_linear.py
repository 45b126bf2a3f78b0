"""`Limits` keeps running tallies: the answers of counting the whole history, in linear work."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.plan import Step
from planexec.recovery import Limits

TOOLS = ["a", "b"]
SERVERS = [None, "s"]


def answers_to(tool: str, server: str | None) -> set[str]:
    return {tool, f"{server}.{tool}"} if server else {tool}


def greedy_count(calls: list[set[str]], pattern: tuple[str, ...]) -> int:
    """Matches of ``pattern`` in ``calls``, left to right, without overlap (the spec)."""
    count, i = 0, 0
    while i <= len(calls) - len(pattern):
        window = calls[i : i + len(pattern)]
        if all(p in c for p, c in zip(pattern, window, strict=True)):
            count, i = count + 1, i + len(pattern)
        else:
            i += 1
    return count


def oracle(
    made: list[set[str]],
    tool: str,
    server: str | None,
    *,
    max_steps: int | None,
    per_tool: dict[str, int],
    sequences: list[tuple[tuple[str, ...], int]],
) -> str | None:
    """The limit one more call would break, found by walking the whole history."""
    if max_steps is not None and len(made) + 1 > max_steps:
        return "max_steps"
    names = [tool, f"{server}.{tool}"] if server else [tool]
    for key in names:
        if key in per_tool and sum(key in c for c in made) + 1 > per_tool[key]:
            return f"per_tool_limits[{key!r}]"
    candidate = [*made, set(names)]
    for pattern, most in sequences:
        if pattern[-1] in names and greedy_count(candidate, pattern) > most:
            return f"sequence_limits[{' → '.join(pattern)}]"
    return None


names = st.sampled_from(["a", "b", "s.a"])


@settings(max_examples=500, deadline=None)
@given(
    calls=st.lists(st.tuples(st.sampled_from(TOOLS), st.sampled_from(SERVERS)), max_size=40),
    max_steps=st.none() | st.integers(0, 40),
    per_tool=st.dictionaries(names, st.integers(0, 12), max_size=3),
    sequences=st.lists(
        st.tuples(st.lists(names, min_size=1, max_size=3).map(tuple), st.integers(0, 5)),
        max_size=3,
    ),
)
def test_the_tallies_refuse_exactly_what_counting_the_history_refuses(
    calls: list[tuple[str, str | None]],
    max_steps: int | None,
    per_tool: dict[str, int],
    sequences: list[tuple[tuple[str, ...], int]],
) -> None:
    limits = Limits(max_steps=max_steps, per_tool_limits=per_tool, sequence_limits=sequences)
    made: list[set[str]] = []
    for tool, server in calls:
        expected = oracle(
            made, tool, server, max_steps=max_steps, per_tool=per_tool, sequences=sequences
        )
        message = limits.guard(Step(id=1, tool=tool, server=server), tool, server=server)
        if expected is None:
            assert message is None
            made.append(answers_to(tool, server))
        else:
            assert message is not None
            assert message.startswith(f"limit {expected}=")
    assert limits.steps == len(made)


def test_a_check_does_not_walk_the_history(monkeypatch: Any) -> None:
    """50,000 admitted calls cost a bounded number of name look-ups each (was the whole history)."""
    looked_up = 0
    names_of = Limits._names

    def counting(tool: str, server: str | None) -> tuple[str, ...]:
        nonlocal looked_up
        looked_up += 1
        return names_of(tool, server)

    monkeypatch.setattr(Limits, "_names", staticmethod(counting))
    limits = Limits(per_tool_limits={"a": 10**9}, sequence_limits=[(("a", "b", "a"), 10**9)])
    n = 50_000
    for i in range(n):
        tool = "ab"[i % 2]
        assert limits.guard(Step(id=i + 1, tool=tool), tool) is None
    assert looked_up <= 8 * n
