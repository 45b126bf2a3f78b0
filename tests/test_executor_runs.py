"""One `Executor`, many runs: each run's state is its own (`planexec.executor.ExecutorRun`).

Concurrent runs on one executor finish with the results they have when run one by one;
cancelling one run (its handle) leaves the others alone; `Executor.cancel` stops every
run under way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planexec.config import ExecutorSettings
from planexec.errors import ErrorKind
from planexec.events import Event, EventBus, StepFinished
from planexec.executor import Executor
from planexec.plan import Plan, Ref, Step
from planexec.results import StepResult, StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

BOUND = 20.0
"""Seconds any wait in these tests may take (none should come close)."""


def _echo(**kw: Any) -> Any:
    return {"seen": kw.get("x"), "tag": kw.get("tag")}


def _catalog() -> ToolCatalog:
    return ToolCatalog(
        [
            fake_tool("slow", function=lambda **kw: f"slow-{kw['tag']}", latency=0.01,
                      args={"tag": str}),
            fake_tool("echo", function=_echo, args={"x": (object, None), "tag": (str, "")}),
            # an error payload, not a raise: the executor's circuit breakers are shared by
            # its runs (by design), and ten raising runs would open this tool's circuit
            fake_tool("broken", {"error": "boom"}, args={"tag": str}),
        ]
    )


def _plan(n: int) -> Plan:
    """Plan ``n``: a slow step, a chain from it, a fan-out, a failure and a blocked step."""
    tag = f"p{n}"
    steps = [
        Step(id=1, tool="slow", args={"tag": tag}),
        Step(id=2, tool="echo", args={"x": Ref(1), "tag": tag}, depends_on=(1,)),
        Step(id=3, tool="echo", args={"x": Ref(2, ("seen",)), "tag": tag}, depends_on=(2,)),
        Step(id=4, tool="echo", args={"x": n, "tag": tag}),
        Step(id=5, tool="broken", args={"tag": tag}),
        Step(id=6, tool="echo", args={"x": Ref(5), "tag": tag}, depends_on=(5,)),
    ]
    return Plan(steps=tuple(steps))


def _shape(results: list[StepResult]) -> dict[int, tuple[Any, ...]]:
    """What must not depend on other runs: status, kind, output, arguments, attempts."""
    return {
        r.step_id: (r.status, r.error_kind, r.output, r.args, r.attempts, r.tool)
        for r in results
    }


def _executor(events: list[Event] | None = None) -> Executor:
    bus = EventBus([events.append]) if events is not None else None
    return Executor(_catalog(), config=ExecutorSettings(), bus=bus, run_id="shared")


@pytest.mark.parametrize("runs", [2, 10])
async def test_concurrent_runs_on_one_executor_finish_as_run_one_by_one(runs: int) -> None:
    alone = [_shape(await _executor().run(_plan(n))) for n in range(runs)]
    events: list[Event] = []
    executor = _executor(events)
    together = await asyncio.wait_for(
        asyncio.gather(*(executor.run(_plan(n)) for n in range(runs))), BOUND
    )
    assert [_shape(r) for r in together] == alone
    # every run's steps finished once each, on the one bus
    finished = [e for e in events if isinstance(e, StepFinished)]
    assert len(finished) == 6 * runs
    # the executor runs again afterwards, alone, as before
    assert _shape(await asyncio.wait_for(executor.run(_plan(0)), BOUND)) == alone[0]


async def test_a_run_handle_cancels_its_own_run_only() -> None:
    release = asyncio.Event()

    async def wait(**_: Any) -> str:
        await release.wait()
        return "done"

    tools = [fake_tool("wait", function=wait), fake_tool("echo", "ok")]
    executor = Executor(ToolCatalog(tools))
    plan = Plan(steps=(Step(id=1, tool="wait"), Step(id=2, tool="echo", depends_on=(1,))))
    first, second = executor.start(plan), executor.start(plan)
    for _ in range(50):  # bounded: both runs reach their first call
        await asyncio.sleep(0)
    first.cancel("only the first")
    res1 = await asyncio.wait_for(first, BOUND)
    assert [r.status for r in res1] == [StepStatus.CANCELLED, StepStatus.CANCELLED]
    assert first.cancelled and first.cancel_reason == "only the first"
    assert not second.cancelled
    release.set()
    res2 = await asyncio.wait_for(second, BOUND)
    assert [r.status for r in res2] == [StepStatus.SUCCEEDED, StepStatus.SUCCEEDED]
    assert {r.step_id: r.output for r in second.results.values()} == {1: "done", 2: "ok"}


async def test_executor_cancel_stops_every_run_under_way() -> None:
    release = asyncio.Event()

    async def wait(**_: Any) -> str:
        await release.wait()
        return "done"

    executor = Executor(ToolCatalog([fake_tool("wait", function=wait)]))
    plan = Plan(steps=(Step(id=1, tool="wait"),))
    handles = [executor.start(plan) for _ in range(3)]
    for _ in range(50):
        await asyncio.sleep(0)
    executor.cancel("all of them")
    results = await asyncio.wait_for(asyncio.gather(*handles), BOUND)
    assert all(r[0].error_kind is ErrorKind.CANCELLED for r in results)
    assert all(h.cancel_reason == "all of them" for h in handles)
    release.set()
    # the next run is not cancelled
    again = await asyncio.wait_for(executor.run(plan), BOUND)
    assert again[0].ok
