"""Group commit in `SQLiteRunStore`: which events are committed when, and how many share one
transaction and one flush.

A spy on ``_before_commit`` (called inside each write transaction) records every batch
and whether its commit is flushed (``PRAGMA synchronous`` of the connection in the
transaction: FULL flushes, NORMAL does not). A second connection reads what is committed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from store_fixtures import ok

from planexec.events import (
    EventBus,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.store import SQLiteRunStore
from planexec.store.base import is_checkpoint
from planexec.store.codec import event_to_json

BOUND = 500  # turns of the event loop a test waits, at most, for queued events


class Spy(SQLiteRunStore):
    """Records each committed batch: its event types and whether it was flushed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.batches: list[tuple[list[str], bool]] = []
        super().__init__(*args, **kwargs)

    def _before_commit(self, batch: list[dict[str, Any]]) -> None:
        conn = next(c for c in (self._conn, self._fast) if c and c.in_transaction)
        flushed = conn.execute("PRAGMA synchronous").fetchone()[0] >= 2
        self.batches.append(([d["type"] for d in batch], flushed))


def committed(path: Path, run_id: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


def test_the_call_start_of_a_safe_tool_and_every_result_are_not_checkpoints() -> None:
    start = event_to_json(ToolCallStarted(run_id="r", step_id=1, tool="t", args={}, safe=True))
    unsafe = event_to_json(ToolCallStarted(run_id="r", step_id=1, tool="t", args={}))
    assert start["safe"] is True and unsafe["safe"] is False
    assert not is_checkpoint(start)
    assert is_checkpoint(unsafe)
    assert not is_checkpoint({"type": "StepFinished"}) and not is_checkpoint(
        {"type": "StepStarted"}
    )
    assert is_checkpoint({"type": "RunFinished"})


class FrozenClock:
    """A clock that never moves: held results wait for the next commit, never the delay."""

    def __call__(self) -> float:
        return 0.0


@pytest.mark.parametrize("durability", ["calls", "full", "process"])
async def test_results_ride_with_the_next_commit_and_an_unsafe_call_start_commits_first(
    tmp_path: Path, durability: str
) -> None:
    store = Spy(tmp_path / "runs.sqlite3", durability=durability, clock=FrozenClock())
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    # a safe tool: start, call start and result wait for the next commit
    await bus.emit(StepStarted(run_id="r", step_id=1, tool="read"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=1, tool="read", args={}, safe=True))
    assert committed(store.path, "r") == ["RunStarted"]  # the call start waits
    await bus.emit(StepFinished(run_id="r", result=ok(1, "read", []), safe=True))
    full = durability == "full"  # every result is a checkpoint
    assert committed(store.path, "r")[-1] == ("StepFinished" if full else "RunStarted")
    # an unsafe tool: its call start is committed before the tool may be called, with
    # every result held before it
    await bus.emit(StepStarted(run_id="r", step_id=2, tool="write"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=2, tool="write", args={}))
    assert committed(store.path, "r") == ["RunStarted", "StepStarted", "ToolCallStarted",
                                          "StepFinished", "StepStarted", "ToolCallStarted"]
    await bus.emit(StepFinished(run_id="r", result=ok(2, "write", [])))
    assert committed(store.path, "r")[-1] == ("StepFinished" if full else "ToolCallStarted")
    await bus.emit(RunFinished(run_id="r", status="SUCCEEDED"))
    store.close()
    if full:
        assert store.batches == [
            (["RunStarted"], True),
            (["StepStarted", "ToolCallStarted", "StepFinished"], True),
            (["StepStarted", "ToolCallStarted"], True),
            (["StepFinished"], True),
            (["RunFinished"], True),
        ]
    else:
        calls = durability == "calls"
        assert store.batches == [
            (["RunStarted"], False),
            (["StepStarted", "ToolCallStarted", "StepFinished", "StepStarted",
              "ToolCallStarted"], calls),
            (["StepFinished", "RunFinished"], calls),
        ]


async def test_results_recorded_in_one_turn_of_the_loop_share_one_commit(
    tmp_path: Path,
) -> None:
    """Eight running steps finish together: one transaction holds their eight results
    (each a checkpoint, with ``result_delay=0``)."""
    store = Spy(tmp_path / "runs.sqlite3", result_delay=0)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    for i in range(1, 9):
        await bus.emit(StepStarted(run_id="r", step_id=i, tool="read"))
    await asyncio.gather(
        *(bus.emit(StepFinished(run_id="r", result=ok(i, "read", i))) for i in range(1, 9))
    )
    assert committed(store.path, "r").count("StepFinished") == 8  # all committed on return
    store.close()
    finished = [types for types, _ in store.batches if "StepFinished" in types]
    assert finished == [["StepStarted"] * 8 + ["StepFinished"] * 8]


async def test_commits_queued_while_a_commit_is_in_flight_share_the_next_flush(
    tmp_path: Path,
) -> None:
    """While one commit holds the connection, eight flushed commits queue up; the writer
    thread then commits them in one transaction with one flush."""
    # flushes only on the writer thread: this thread holds the (reentrant) lock below
    store = Spy(tmp_path / "runs.sqlite3", durability="full", loop_flush_limit=0)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    store.batches.clear()
    with store._lock:  # a commit in flight (this thread holds the connection)
        tasks = [
            asyncio.ensure_future(bus.emit(ToolCallStarted(run_id="r", step_id=i, tool="w",
                                                            args={"i": i})))
            for i in range(1, 9)
        ]
        for _ in range(BOUND):
            await asyncio.sleep(0)
            if len(store._waiters) == 8:
                break
        assert len(store._waiters) == 8 and not any(t.done() for t in tasks)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    assert store.batches == [(["ToolCallStarted"] * 8, True)]
    assert committed(store.path, "r").count("ToolCallStarted") == 8
    store.close()


async def test_runs_in_two_threads_share_the_store_and_lose_nothing(tmp_path: Path) -> None:
    """Two event loops in two threads record runs into one store at once."""
    store = SQLiteRunStore(tmp_path / "runs.sqlite3")

    async def one(run_id: str) -> None:
        bus = EventBus()
        store.attach(bus)
        await bus.emit(RunStarted(run_id=run_id, question="q"))
        for i in range(1, 51):
            await bus.emit(StepStarted(run_id=run_id, step_id=i, tool="t"))
            await bus.emit(ToolCallStarted(run_id=run_id, step_id=i, tool="t", args={},
                                           safe=i % 2 == 0))
            await bus.emit(StepFinished(run_id=run_id, result=ok(i, "t", i)))
        await bus.emit(RunFinished(run_id=run_id, status="SUCCEEDED"))

    await asyncio.wait_for(
        asyncio.gather(asyncio.to_thread(asyncio.run, one("a")),
                       asyncio.to_thread(asyncio.run, one("b"))),
        timeout=60,
    )
    for run_id in ("a", "b"):
        types = committed(store.path, run_id)
        assert types.count("StepFinished") == 50 and types.count("ToolCallStarted") == 50
        assert types[-1] == "RunFinished"
        assert [s.result.step_id for s in store.step_results(run_id)] == list(range(1, 51))
    store.close()


async def test_a_failed_commit_reaches_the_waiting_handler(tmp_path: Path) -> None:
    """A flushed commit that cannot be made fails the handler with a StoreError."""
    from planexec.errors import StoreError

    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path, durability="full", busy_timeout=0.01, retries=1)
    bus = EventBus()
    store.attach(bus)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StoreError, match="database is locked"):
            await asyncio.wait_for(bus.emit(RunStarted(run_id="r", question="q")), 60)
    finally:
        other.execute("ROLLBACK")
        other.close()
    await bus.emit(RunFinished(run_id="r", status="FAILED"))  # the store carries on
    assert committed(path, "r") == ["RunFinished"]  # the failed batch was reported, not kept
    store.close()


async def test_a_step_that_never_finished_stops_counting_with_its_run(tmp_path: Path) -> None:
    """A step cut short without a result makes later results wait for the loop's turn to
    end (to share a commit) only until its run finishes; then a lone result commits at
    once, in its own transaction (each result a checkpoint: ``result_delay=0``)."""
    store = Spy(tmp_path / "runs.sqlite3", result_delay=0)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="cut", question="q"))
    await bus.emit(StepStarted(run_id="cut", step_id=1, tool="t"))  # never finishes
    assert store._running_total == 1
    await bus.emit(RunFinished(run_id="cut", status="CANCELLED"))
    assert store._running_total == 0
    await bus.emit(RunStarted(run_id="next", question="q"))
    await bus.emit(StepStarted(run_id="next", step_id=1, tool="t"))
    assert store._running_total == 1
    await bus.emit(StepFinished(run_id="next", result=ok(1, "t", 1)))
    assert store._running_total == 0 and not store._soon
    assert store.batches[-1] == (["StepStarted", "StepFinished"], False)
    store.close()


class Slow(Spy):
    """A `Spy` that also records which thread made each commit; a commit takes
    ``self.takes`` seconds of its fake clock (moved inside the transaction)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.now = 0.0
        self.takes = 0.0
        self.on_loop: list[bool] = []
        self.loop_thread = threading.get_ident()
        super().__init__(*args, clock=lambda: self.now, **kwargs)

    def _before_commit(self, batch: list[dict[str, Any]]) -> None:
        super()._before_commit(batch)
        self.on_loop.append(threading.get_ident() == self.loop_thread)
        self.now += self.takes

    @property
    def commits(self) -> list[tuple[list[str], bool, bool]]:
        """Each commit: its event types, whether it was flushed, whether on the loop."""
        return [(types, flushed, loop)
                for (types, flushed), loop in zip(self.batches, self.on_loop, strict=True)]


async def unsafe_step(bus: EventBus, sid: int) -> None:
    await bus.emit(StepStarted(run_id="r", step_id=sid, tool="write"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=sid, tool="write", args={"i": sid}))
    await bus.emit(StepFinished(run_id="r", result=ok(sid, "write", sid)))


async def test_a_chain_of_unsafe_calls_flushes_each_start_on_the_loop_with_the_result_before(
    tmp_path: Path,
) -> None:
    """Alone, on a fast disk: no hand-off to the writer thread, one commit per call."""
    store = Slow(tmp_path / "runs.sqlite3")
    bus = EventBus()
    store.attach(bus)
    for sid in (1, 2, 3):
        await unsafe_step(bus, sid)
        # durable on return, before the call: another connection sees it
        assert committed(store.path, "r").count("ToolCallStarted") == sid
    store.close()
    starts = [(types, flushed, on_loop) for types, flushed, on_loop in store.commits]
    assert starts == [
        (["StepStarted", "ToolCallStarted"], True, True),
        (["StepFinished", "StepStarted", "ToolCallStarted"], True, True),
        (["StepFinished", "StepStarted", "ToolCallStarted"], True, True),
        (["StepFinished"], False, True),  # the last result: by close, on its thread
    ]


async def test_after_a_slow_flush_the_next_one_is_left_to_the_writer_thread(
    tmp_path: Path,
) -> None:
    store = Slow(tmp_path / "runs.sqlite3", loop_flush_limit=0.001)
    bus = EventBus()
    store.attach(bus)
    store.takes = 0.005  # the disk is slow: the first flush (on the loop) is measured
    await unsafe_step(bus, 1)
    store.takes = 0.0  # fast again: the writer flushes next and measures it
    await unsafe_step(bus, 2)
    await unsafe_step(bus, 3)  # the loop's again
    store.close()
    on_loop = [loop for types, flushed, loop in store.commits if "ToolCallStarted" in types]
    assert on_loop == [True, False, True]
    assert committed(store.path, "r").count("StepFinished") == 3


async def test_a_zero_limit_leaves_every_flush_to_the_writer_thread(tmp_path: Path) -> None:
    store = Slow(tmp_path / "runs.sqlite3", loop_flush_limit=0)
    bus = EventBus()
    store.attach(bus)
    await unsafe_step(bus, 1)
    await bus.emit(RunFinished(run_id="r", status="SUCCEEDED"))
    store.close()
    assert [(flushed, loop) for _, flushed, loop in store.commits] == [(True, False)] * 2


async def test_call_starts_of_steps_running_together_are_flushed_by_the_writer(
    tmp_path: Path,
) -> None:
    """Other steps are running (a fan-out): the loop never waits for the disk; the writer
    flushes."""
    store = Slow(tmp_path / "runs.sqlite3")
    bus = EventBus()
    store.attach(bus)
    await bus.emit(StepStarted(run_id="r", step_id=1, tool="write"))
    await bus.emit(StepStarted(run_id="r", step_id=2, tool="write"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=1, tool="write", args={}))
    store.close()
    assert store.commits == [(["StepStarted", "StepStarted", "ToolCallStarted"], True, False)]


def test_a_negative_loop_flush_limit_is_refused(tmp_path: Path) -> None:
    from planexec.errors import StoreError

    with pytest.raises(StoreError):
        SQLiteRunStore(tmp_path / "runs.sqlite3", loop_flush_limit=-1)


async def test_a_call_start_that_finds_the_file_locked_waits_for_it_on_the_writer(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock: the loop does not wait for it; the writer
    thread does, and the call start is committed (and flushed) before its handler
    returns, with the result held before it."""
    store = Slow(tmp_path / "runs.sqlite3")
    bus = EventBus()
    store.attach(bus)
    await unsafe_step(bus, 1)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process is writing
    second = asyncio.ensure_future(unsafe_step(bus, 2))
    for _ in range(BOUND):
        await asyncio.sleep(0)
    assert not second.done()  # step 2's call start waits: the call is not made yet
    other.execute("ROLLBACK")
    other.close()
    await asyncio.wait_for(second, timeout=30)
    assert committed(store.path, "r") == ["StepStarted", "ToolCallStarted", "StepFinished",
                                          "StepStarted", "ToolCallStarted"]
    store.close()
    assert store.commits[1] == (["StepFinished", "StepStarted", "ToolCallStarted"], True,
                                False)
