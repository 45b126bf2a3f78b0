"""A step's task runs on with a step it made ready, as a new task would run it.

The executor does not create a task per step of a chain: the task that ends a step takes
one of the steps that became ready. These tests hold it to what a task per step gave:
the event loop gets turns (timeouts, cancels and other tasks go on), context variables
set by one step's tool do not reach the next one, and a traced run keeps a task per step.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from planexec.config import ExecutorSettings
from planexec.executor import Executor
from planexec.plan import Plan, Ref, Step
from planexec.results import StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

SAFE = {"read_only": True}


def chain(length: int, tool: str = "t") -> Plan:
    """``length`` steps, each taking the previous step's output."""
    steps = [Step(id=1, tool=tool)]
    steps += [
        Step(id=i, tool=tool, args={"v": Ref(i - 1)}, depends_on=(i - 1,))
        for i in range(2, length + 1)
    ]
    return Plan(steps=tuple(steps))


class LoopTurns:
    """Counts turns of the event loop while it runs (a task that yields every turn)."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def _spin(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def __enter__(self) -> LoopTurns:
        self._task = asyncio.get_running_loop().create_task(self._spin())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_a_chain_of_tools_that_never_wait_gives_the_loop_turns() -> None:
    seen: list[int] = []
    with LoopTurns() as turns:

        def record(v: Any = None) -> dict[str, int]:
            seen.append(turns.count)  # the turns the loop made before this call
            return {"n": len(seen)}

        tool = fake_tool("t", args={"v": (Any, None)}, function=record, hints=SAFE)
        results = await Executor(ToolCatalog([tool])).run(chain(40))
    assert [r.status for r in results] == [StepStatus.SUCCEEDED] * 40
    # over any 9 calls in a row, the loop made at least one turn (a turn per 8 steps)
    assert all(seen[i + 8] > seen[i] for i in range(len(seen) - 8)), seen


async def test_a_cancel_stops_a_chain_of_tools_that_never_wait() -> None:
    calls = 0

    def busy(v: Any = None) -> dict[str, int]:
        nonlocal calls
        calls += 1
        return {"n": calls}

    tool = fake_tool("t", args={"v": (Any, None)}, function=busy, hints=SAFE)
    executor = Executor(ToolCatalog([tool]))

    async def cancel_soon() -> None:
        while calls < 5:
            await asyncio.sleep(0)
        executor.cancel("stopped by the test")

    stopper = asyncio.get_running_loop().create_task(cancel_soon())
    results = await asyncio.wait_for(executor.run(chain(10_000)), timeout=30)
    await stopper
    statuses = {r.status for r in results}
    assert StepStatus.CANCELLED in statuses
    assert calls < 10_000  # the chain stopped well before its end


TOKEN: contextvars.ContextVar[str] = contextvars.ContextVar("TOKEN", default="unset")


async def test_context_set_by_a_tool_does_not_reach_the_next_step() -> None:
    seen: list[str] = []

    def set_and_read(v: Any = None) -> dict[str, str]:
        seen.append(TOKEN.get())
        TOKEN.set(f"set by call {len(seen)}")
        return {"ok": "yes"}

    tool = fake_tool("t", args={"v": (Any, None)}, function=set_and_read, hints=SAFE)
    results = await Executor(ToolCatalog([tool])).run(chain(5))
    assert all(r.ok for r in results)
    assert seen == ["unset"] * 5


@pytest.mark.parametrize("concurrency", [1, 2, 8])
async def test_a_fan_out_after_a_step_respects_max_concurrency(concurrency: int) -> None:
    running = 0
    most = 0

    async def work(v: Any = None) -> dict[str, int]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return {"ok": 1}

    tool = fake_tool("t", args={"v": (Any, None)}, function=work, hints=SAFE)
    steps = [Step(id=1, tool="t")] + [
        Step(id=i, tool="t", args={"v": Ref(1)}, depends_on=(1,)) for i in range(2, 22)
    ]
    executor = Executor(
        ToolCatalog([tool]), config=ExecutorSettings(max_concurrency=concurrency)
    )
    results = await executor.run(Plan(steps=tuple(steps)))
    assert len(results) == 21 and all(r.ok for r in results)
    assert most == concurrency
