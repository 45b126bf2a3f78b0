"""`planexec._frozen.cached`: computed once per object, then an ordinary attribute."""

from __future__ import annotations

import dataclasses
import threading

from planexec._frozen import cached
from planexec.parsing.refs import find_refs
from planexec.plan import Step


@dataclasses.dataclass(frozen=True)
class Box:
    """A frozen value with a derived attribute that counts its computations."""

    items: tuple[int, ...]
    calls: list[int] = dataclasses.field(default_factory=list, compare=False)

    @cached
    def total(self) -> int:
        """The sum of the items."""
        self.calls.append(1)
        return sum(self.items)


def test_a_cached_attribute_is_computed_on_first_use_and_never_again() -> None:
    box = Box((1, 2, 3))
    assert box.calls == []
    assert box.total == 6
    assert box.total == 6
    assert box.calls == [1]
    assert box.__dict__["total"] == 6  # stored beside the fields, as cached_property does


def test_each_object_computes_its_own_value() -> None:
    one, two = Box((1,)), Box((2, 3))
    assert (one.total, two.total) == (1, 5)
    changed = dataclasses.replace(one, items=(4,))
    assert changed.total == 4 and one.total == 1


def test_a_cached_attribute_leaves_the_objects_equality_and_hash_alone() -> None:
    box = Box((1, 2))
    other = Box((1, 2))
    _ = box.total
    assert box == other and hash(box) == hash(other)


def test_the_class_attribute_is_the_descriptor_with_the_functions_doc() -> None:
    assert isinstance(Box.total, cached)
    assert Box.total.__doc__ == "The sum of the items."


def test_threads_that_race_all_see_the_one_value() -> None:
    box = Box(tuple(range(1000)))
    seen: list[int] = []
    start = threading.Barrier(8)

    def read() -> None:
        start.wait(timeout=10)
        seen.append(box.total)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert seen == [sum(range(1000))] * 8


def test_a_steps_references_are_read_from_its_arguments_once() -> None:
    step = Step(id=2, tool="t", args=find_refs({"a": "<step_1>", "b": ["{step_1.x}"]}))
    first = step.refs
    assert [r.step for r in first] == [1, 1]
    assert step.refs is first
    assert step.deps == frozenset({1})
