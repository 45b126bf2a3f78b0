"""`EventBus` delivery: sync, async, and sync subscribers that sometimes return an awaitable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import pytest

from planexec.events import Event, EventBus, StepStarted
from planexec.store import MemoryRunStore, SQLiteRunStore


async def test_a_returned_awaitable_is_awaited_and_none_is_not() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    def sometimes(event: Event) -> Awaitable[None] | None:
        seen.append(f"sync {event.run_id}")
        return gate if event.run_id == "wait" else None

    async def after(event: Event) -> None:
        seen.append(f"async {event.run_id}")

    bus = EventBus([sometimes, after])
    await bus.emit(StepStarted(run_id="go", step_id=1, tool="t"))
    assert seen == ["sync go", "async go"]
    emitted = asyncio.ensure_future(bus.emit(StepStarted(run_id="wait", step_id=1, tool="t")))
    await asyncio.sleep(0)
    assert seen[-1] == "sync wait" and not emitted.done()  # the next subscriber waits too
    gate.set_result(None)
    await asyncio.wait_for(emitted, 5)
    assert seen[-1] == "async wait"


async def test_subscribers_changed_during_an_event_take_effect_from_the_next() -> None:
    seen: list[str] = []
    bus = EventBus()

    def late(event: Event) -> None:
        seen.append(f"late {event.run_id}")

    def first(event: Event) -> None:
        seen.append(f"first {event.run_id}")
        bus.subscribe(late)
        bus.unsubscribe(first)

    bus.subscribe(first)
    await bus.emit(StepStarted(run_id="a", step_id=1, tool="t"))
    await bus.emit(StepStarted(run_id="b", step_id=1, tool="t"))
    assert seen == ["first a", "late b"]
    assert bus.listening


async def test_attach_subscribes_a_subclass_own_handle(tmp_path: Path) -> None:
    handled: list[str] = []

    class Memory(MemoryRunStore):
        async def handle(self, event: Event) -> None:
            handled.append("memory")
            await super().handle(event)

    class Sqlite(SQLiteRunStore):
        async def handle(self, event: Event) -> None:
            handled.append("sqlite")
            await super().handle(event)

    bus = EventBus()
    sqlite = Sqlite(tmp_path / "runs.sqlite3")
    Memory().attach(bus)
    sqlite.attach(bus)
    await bus.emit(StepStarted(run_id="r", step_id=1, tool="t"))
    assert handled == ["memory", "sqlite"]
    sqlite.close()


def test_emit_delivers_at_once_when_no_subscriber_waits() -> None:
    seen: list[int] = []
    bus = EventBus([lambda e: seen.append(1), lambda e: seen.append(2)])
    done = bus.emit(StepStarted(run_id="r", step_id=1, tool="t"))
    assert seen == [1, 2]  # delivered before anything is awaited
    with pytest.raises(StopIteration):  # and what is returned is already done
        next(iter(done.__await__()))


async def test_emit_stops_at_a_subscriber_that_waits_and_the_rest_follow_in_order() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    def waits(event: Event) -> Awaitable[None]:
        seen.append("waits")
        return gate

    def after(event: Event) -> None:
        seen.append("after")

    bus = EventBus([waits, after])
    rest = bus.emit(StepStarted(run_id="r", step_id=1, tool="t"))
    assert seen == ["waits"]  # the next one waits for the first
    task = asyncio.ensure_future(rest)
    await asyncio.sleep(0)
    assert seen == ["waits"]
    gate.set_result(None)
    await asyncio.wait_for(task, 5)
    assert seen == ["waits", "after"]
