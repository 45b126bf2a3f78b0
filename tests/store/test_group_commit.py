"""Group commit in `SQLiteRunStore`: which events are committed when, and how many share one
transaction and one flush.

A spy on ``_before_commit`` (called inside each write transaction) records every batch
and whether its commit is flushed (``PRAGMA synchronous`` of the connection in the
transaction: FULL flushes, NORMAL does not). A second connection reads what is committed.
"""

from __future__ import annotations

import asyncio
import sqlite3
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


def test_the_call_start_of_a_safe_tool_is_not_a_checkpoint() -> None:
    start = event_to_json(ToolCallStarted(run_id="r", step_id=1, tool="t", args={}, safe=True))
    unsafe = event_to_json(ToolCallStarted(run_id="r", step_id=1, tool="t", args={}))
    assert start["safe"] is True and unsafe["safe"] is False
    assert not is_checkpoint(start)
    assert is_checkpoint(unsafe)
    assert is_checkpoint({"type": "StepFinished"}) and not is_checkpoint({"type": "StepStarted"})


@pytest.mark.parametrize("durability", ["calls", "full", "process"])
async def test_a_safe_step_is_one_transaction_and_an_unsafe_one_commits_its_call_first(
    tmp_path: Path, durability: str
) -> None:
    store = Spy(tmp_path / "runs.sqlite3", durability=durability)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    # a safe tool: start, call start and result in the result's transaction
    await bus.emit(StepStarted(run_id="r", step_id=1, tool="read"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=1, tool="read", args={}, safe=True))
    assert committed(store.path, "r") == ["RunStarted"]  # the call start waits
    await bus.emit(StepFinished(run_id="r", result=ok(1, "read", [])))
    assert committed(store.path, "r")[-3:] == ["StepStarted", "ToolCallStarted", "StepFinished"]
    # an unsafe tool: its call start is committed before the tool may be called
    await bus.emit(StepStarted(run_id="r", step_id=2, tool="write"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=2, tool="write", args={}))
    assert committed(store.path, "r")[-2:] == ["StepStarted", "ToolCallStarted"]
    await bus.emit(StepFinished(run_id="r", result=ok(2, "write", [])))
    await bus.emit(RunFinished(run_id="r", status="SUCCEEDED"))
    store.close()
    flushed = {
        "calls": [False, False, True, False, True],
        "full": [True] * 5,
        "process": [False] * 5,
    }[durability]
    assert store.batches == list(zip([
        ["RunStarted"],
        ["StepStarted", "ToolCallStarted", "StepFinished"],
        ["StepStarted", "ToolCallStarted"],
        ["StepFinished"],
        ["RunFinished"],
    ], flushed, strict=True))


async def test_results_recorded_in_one_turn_of_the_loop_share_one_commit(
    tmp_path: Path,
) -> None:
    """Eight running steps finish together: one transaction holds their eight results."""
    store = Spy(tmp_path / "runs.sqlite3")
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
    store = Spy(tmp_path / "runs.sqlite3", durability="full")
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
    once, in its own transaction."""
    store = Spy(tmp_path / "runs.sqlite3")
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
