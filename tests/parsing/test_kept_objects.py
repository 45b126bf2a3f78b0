"""A parsed plan keeps alive its values and nothing else per step (issue 29, goal 4).

Parsing 50,000 steps cost more per step than 1,000 because of the garbage collector:
each full collection walks every object the collector tracks, and full collections come
every so many new tracked objects, so their work per step grows with the plan's length
and with the square of the tracked objects each step keeps. A plan cannot keep fewer
than its own values: per step the `Step`, and in its arguments every `Ref` and
`Template` and every container that holds one (the collector tracks no string, number,
or container of those alone). Everything else a step kept — a ``__dict__`` for its
fields, a cached tuple of its references, an intermediate of the parser — is counted
here, not timed: with the fast paths on (the benchmark's plain chain is read by the
hashstep parser's fast path) and off (the general path).
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from plan_texts import chain_text

import planexec._fastpaths as _fastpaths
from planexec._frozen import build
from planexec.parsing import hashstep, parse_plan
from planexec.plan import Plan, Ref, Step, Template


def _rich(n: int) -> str:
    """Steps with path, embedded and nested references, lists, a literal, an expected output."""
    out = []
    for i in range(1, n + 1):
        a, b = max(1, i - 1), max(1, i // 2)
        args = ('{"site": "MAIN"}' if i == 1 else
                f'{{"v": "<step_{a}>", "ids": ["<step_{b}.items[0].id>", 3], '
                f'"note": "after {{step_{a}}} ended", "f": {{"k": "<step_{a}>"}}}}')
        deps = "None" if i == 1 else ", ".join(f"#S{d}" for d in sorted({a, b}))
        out.append(f"#Task{i}: step {i}\n#Tool{i}: tool_{i % 7}\n#Args{i}: {args}\n"
                   f"#Dependency{i}: {deps}\n#ExpectedOutput{i}: things\n")
    return "\n".join(out)


def _values_tracked(value: Any, seen: set[int]) -> Iterator[object]:
    """The objects of an argument value the collector tracks (the plan's own values)."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if gc.is_tracked(value):
        yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _values_tracked(v, seen)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _values_tracked(v, seen)
    elif isinstance(value, Template):
        yield from _values_tracked(value.parts, seen)


def _own_values(plan: Plan) -> int:
    """Per step: the step itself, and the tracked objects of its arguments."""
    seen: set[int] = set()
    return sum(
        1 + sum(1 for part in (step.args, step.positional) for _ in _values_tracked(part, seen))
        for step in plan.steps
    )


@contextmanager
def _fast_paths(on: bool) -> Iterator[None]:
    saved = _fastpaths.ON
    _fastpaths.ON = on
    try:
        yield
    finally:
        _fastpaths.ON = saved


def _kept(text: str) -> tuple[int, Plan]:
    """Tracked objects alive after parsing ``text`` that were not alive before."""
    parse_plan(text)  # first-use caches (patterns, dataclass field tables) are not the plan's
    gc.collect()
    before = len(gc.get_objects())
    plan = parse_plan(text)
    gc.collect()
    return len(gc.get_objects()) - before, plan


@pytest.mark.parametrize("make", [chain_text, _rich], ids=["chain", "rich"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "general path"])
def test_a_parsed_plan_keeps_only_its_steps_and_their_argument_values(
    fast: bool, make: Callable[[int], str]
) -> None:
    n = 2000
    with _fast_paths(fast):
        kept, plan = _kept(make(n))
        assert len(plan.steps) == n and not plan.diagnostics
        if make is chain_text:
            assert hashstep._read_plain(make(n)) is not None  # the benchmark's path
    own = _own_values(plan)
    # the plan, its tuple of steps and a few objects of the parse: a constant, not per step
    assert kept - own <= 20, (kept, own, n)


def test_the_chains_steps_keep_three_objects_each() -> None:
    # the same, in numbers: a step of the chain is a Step, its arguments' dict and the
    # Ref in it (there were five: the step's __dict__ and a cached tuple of its refs)
    kept, plan = _kept(chain_text(1000))
    assert sum(isinstance(v, Ref) for s in plan.steps for v in s.args.values()) == 999
    assert 3 * 1000 - 2 <= kept <= 3 * 1000 + 20, kept


def test_a_slotted_step_is_the_value_it_was() -> None:
    # equality, hashing of its references, replace, pickling and copying are unchanged
    plan = parse_plan(_rich(5))
    step = plan.steps[3]
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert copy.deepcopy(plan) == plan and copy.copy(step) == step
    moved = dataclasses.replace(step, task="other")
    assert moved.task == "other" and moved.args == step.args and moved != step
    assert moved.refs == step.refs  # computed by the new step itself
    ref = step.args["v"]
    assert isinstance(ref, Ref) and hash(ref) == hash(dataclasses.replace(ref))
    assert Step(id=1) == Step(id=1) and not hasattr(Step(id=1), "no_such_field")
    # frozen as before, whatever the name (Python 3.11's slotted frozen dataclasses raise
    # TypeError for a name that is not a field: `planexec._frozen.frozen_slots`)
    for target, name in ((step, "id"), (step, "refs"), (step, "other"), (ref, "raw"),
                         (ref, "other")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(target, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(target, name)
    # the frozen builder leaves a slotted class to its constructor
    assert build(Step, {"id": 2, "task": "t"}) == Step(id=2, task="t")


@pytest.mark.parametrize(("text", "dialect"), [
    (_rich(6), "hashstep"),
    ("Plan: a\n#E1 = search[x]\nPlan: b\n#E2 = lookup[#E1 and {step_1.id}]\n", "rewoo"),
    ("1. search('x')\n2. lookup($1, key=${1}, other=[$1, 'a'])\n3. join()\n", "llmcompiler"),
])
def test_a_steps_references_walked_once_are_the_ones_it_keeps(text: str, dialect: str) -> None:
    # the checks walk `each_ref` (nothing kept), the executor reads `refs` (kept)
    plan = parse_plan(text, dialect)
    assert any(step.refs for step in plan.steps)
    for step in plan.steps:
        assert tuple(step.each_ref()) == step.refs
