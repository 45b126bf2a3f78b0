"""A step's result is no checkpoint in the default durability: it waits in memory for
the next commit — an unsafe call start, another checkpoint, or the end of
``result_delay``. A crash only makes resume run a safe step again, and leaves an unsafe
call with an unknown outcome (its start is durable before the call).

Time is a fake clock handed to the store (``clock=``): no sleeps, no timing thresholds.
A second connection reads what is committed, as another process (``planexec runs
show``) would.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from store_fixtures import ok

from planexec.config import ExecutorSettings
from planexec.errors import StoreError
from planexec.events import (
    EventBus,
    PlanCreated,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.executor import Executor
from planexec.plan import Plan, Ref, Step
from planexec.store import SQLiteRunStore
from planexec.store.base import is_checkpoint
from planexec.store.codec import event_to_json
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def committed(path: Path, run_id: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def recorded_steps(path: Path, run_id: str) -> set[int]:
    """The step results another process sees (what ``planexec runs show`` lists)."""
    with SQLiteRunStore(path) as other:
        return {s.result.step_id for s in other.step_results(run_id)}


async def safe_step(bus: EventBus, sid: int) -> None:
    await bus.emit(StepStarted(run_id="r", step_id=sid, tool="read"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=sid, tool="read", args={}, safe=True))
    await bus.emit(StepFinished(run_id="r", result=ok(sid, "read", sid), safe=True))


def test_no_result_is_a_checkpoint_safe_or_not() -> None:
    safe = event_to_json(StepFinished(run_id="r", result=ok(1, "t", 1), safe=True))
    unsafe = event_to_json(StepFinished(run_id="r", result=ok(1, "t", 1)))
    assert safe["safe"] is True and unsafe["safe"] is False
    assert not is_checkpoint(safe)
    assert not is_checkpoint(unsafe)
    assert is_checkpoint(event_to_json(ToolCallStarted(run_id="r", step_id=1, tool="t",
                                                       args={})))


async def test_an_unsafe_call_start_commits_the_held_results_first(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite3", clock=Clock())
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await safe_step(bus, 1)
    await safe_step(bus, 2)
    assert committed(store.path, "r") == ["RunStarted"]  # held: no time has passed
    await bus.emit(StepStarted(run_id="r", step_id=3, tool="write"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=3, tool="write", args={}))
    # the call may now be made: every result it can depend on is committed with its start
    types = committed(store.path, "r")
    assert types[-1] == "ToolCallStarted" and types.count("StepFinished") == 2
    assert recorded_steps(store.path, "r") == {1, 2}
    await bus.emit(StepFinished(run_id="r", result=ok(3, "write", 3)))  # safe=False
    assert recorded_steps(store.path, "r") == {1, 2}  # held too: it rides
    await bus.emit(StepStarted(run_id="r", step_id=4, tool="write"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=4, tool="write", args={}))
    assert recorded_steps(store.path, "r") == {1, 2, 3}  # with the next call's start
    store.close()


async def test_the_delay_commits_held_results_when_the_next_event_arrives(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = SQLiteRunStore(tmp_path / "runs.sqlite3", clock=clock, result_delay=0.25)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await safe_step(bus, 1)  # held from t=0
    clock.now = 0.2
    await safe_step(bus, 2)
    assert recorded_steps(store.path, "r") == set()
    clock.now = 0.25
    await bus.emit(StepStarted(run_id="r", step_id=3, tool="read"))
    assert recorded_steps(store.path, "r") == {1, 2}
    await bus.emit(StepFinished(run_id="r", result=ok(3, "read", 3), safe=True))
    assert recorded_steps(store.path, "r") == {1, 2}  # held anew, from t=0.25
    await bus.emit(RunFinished(run_id="r", status="SUCCEEDED"))
    assert recorded_steps(store.path, "r") == {1, 2, 3}
    store.close()


async def test_the_writer_thread_commits_held_results_when_no_event_arrives(
    tmp_path: Path,
) -> None:
    """A long tool call after a safe result: nothing arrives, the writer commits it."""
    done = threading.Event()

    class Watched(SQLiteRunStore):
        def _before_commit(self, batch: list[dict[str, Any]]) -> None:
            if any(d["type"] == "StepFinished" for d in batch):
                done.set()

    clock = Clock()
    store = Watched(tmp_path / "runs.sqlite3", clock=clock, result_delay=0.05)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await safe_step(bus, 1)
    assert recorded_steps(store.path, "r") == set() and not done.is_set()
    clock.now = 0.05  # the delay runs out; no event follows
    assert await asyncio.to_thread(done.wait, 60)
    assert recorded_steps(store.path, "r") == {1}
    store.close()


@pytest.mark.parametrize("kwargs", [{"durability": "full"}, {"result_delay": 0}])
async def test_full_durability_or_no_delay_makes_every_result_a_checkpoint(
    tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite3", clock=Clock(), **kwargs)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await safe_step(bus, 1)
    assert recorded_steps(store.path, "r") == {1}
    store.close()


def test_a_negative_delay_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="result_delay"):
        SQLiteRunStore(tmp_path / "runs.sqlite3", result_delay=-1)


@pytest.mark.parametrize(("tick", "seen"), [(0.0, set()), (1.0, {1, 2})])
async def test_a_live_run_shows_its_results_within_the_delay(
    tmp_path: Path, tick: float, seen: set[int]
) -> None:
    """A chain run by the executor: steps 1 and 2 take ``tick`` seconds of (fake) time,
    step 3 reads the store from another connection while the run is live. Held results
    show once ``result_delay`` (0.25 s) has passed, not before."""
    clock = Clock()
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path, clock=clock)
    peeked: list[set[int]] = []

    def work(**_: Any) -> dict[str, Any]:
        clock.now += tick
        return {"ok": True}

    def peek(**_: Any) -> dict[str, Any]:
        peeked.append(recorded_steps(path, "r"))
        return {"ok": True}

    read_only = {"read_only": True}
    catalog = ToolCatalog([
        fake_tool("work", function=work, args={"prev": (object, None)}, hints=read_only),
        fake_tool("peek", function=peek, args={"prev": (object, None)}, hints=read_only),
    ])
    plan = Plan(steps=(
        Step(id=1, tool="work"),
        Step(id=2, tool="work", args={"prev": Ref(1, ("ok",))}, depends_on=(1,)),
        Step(id=3, tool="peek", args={"prev": Ref(2, ("ok",))}, depends_on=(2,)),
    ))
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(PlanCreated(run_id="r", version=1, plan=plan))
    results = await Executor(catalog, config=ExecutorSettings(), bus=bus, run_id="r").run(plan)
    assert all(r.ok for r in results)
    assert peeked == [seen]
    await bus.emit(RunFinished(run_id="r", status="SUCCEEDED"))
    assert recorded_steps(path, "r") == {1, 2, 3}
    store.close()


async def test_the_executor_marks_a_result_safe_only_without_an_unsafe_call() -> None:
    """``StepFinished.safe``: a safe tool's step, or a step that never reached its call,
    is safe; a step that called an unsafe tool is not, whether the call worked or not."""
    catalog = ToolCatalog([
        fake_tool("read", {"ok": True}, hints={"read_only": True}),
        fake_tool("write", {"ok": True}, args={"n": int}),  # no hints: not safe
        fake_tool("boom", error="down"),  # not safe, fails
    ])
    plan = Plan(steps=(
        Step(id=1, tool="read"),
        Step(id=2, tool="write", args={"n": 1}),
        Step(id=3, tool="write", args={"n": "not a number"}),  # refused before the call
        Step(id=4, tool="boom"),
    ))
    seen: dict[int, bool] = {}

    async def watch(event: Any) -> None:
        if isinstance(event, StepFinished):
            seen[event.result.step_id] = event.safe

    bus = EventBus()
    bus.subscribe(watch)
    results = await Executor(catalog, config=ExecutorSettings(), bus=bus, run_id="r").run(plan)
    by_id = {r.step_id: r for r in results}
    assert {sid: r.ok for sid, r in by_id.items()} == {1: True, 2: True, 3: False, 4: False}
    assert by_id[3].attempts == 0 and by_id[4].attempts >= 1
    assert seen == {1: True, 2: False, 3: True, 4: False}


async def test_results_held_one_after_another_wake_the_writer_once_per_delay(
    tmp_path: Path,
) -> None:
    """A chain of unsafe steps: each call start commits the queue, and each result is then
    held anew; the writer thread, already due to look at the held results by then, is
    not woken again for each one."""

    class Counting(threading.Condition):
        notified = 0

        def notify(self, n: int = 1) -> None:
            Counting.notified += 1
            super().notify(n)

    store = SQLiteRunStore(tmp_path / "runs.sqlite3", clock=Clock(), result_delay=60,
                           durability="process")  # call starts committed on the loop
    store._wake = Counting()
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))

    async def unsafe_step(sid: int) -> None:
        await bus.emit(StepStarted(run_id="r", step_id=sid, tool="write"))
        await bus.emit(ToolCallStarted(run_id="r", step_id=sid, tool="write", args={}))
        await bus.emit(StepFinished(run_id="r", result=ok(sid, "write", sid)))

    await unsafe_step(1)  # held: the writer is told to look at it in 60 s
    for _ in range(500):  # bounded: until the writer thread waits for that
        if store._writer_wakes_at is not None:
            break
        await asyncio.sleep(0.01)
    assert store._writer_wakes_at is not None
    Counting.notified = 0
    for sid in range(2, 51):
        await unsafe_step(sid)
    assert recorded_steps(store.path, "r") == set(range(1, 50))  # the last one is held
    assert Counting.notified == 0  # the writer wakes by then anyway
    store.close()
    assert recorded_steps(store.path, "r") == set(range(1, 51))
