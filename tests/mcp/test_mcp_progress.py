"""MCP progress: a token on every call, notifications reported, and an idle timeout.

The server's ``slow`` tool works for ``steps * pause`` seconds; with ``report`` it
sends a progress notification after each step (the SDK sends them only for a request
that carries a progress token). The call's timeout is an idle timeout: a call that keeps
reporting progress outlives it, a silent one does not.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from planexec.mcp import MCPToolset  # noqa: E402
from planexec.mcp.client import MCPProgress  # noqa: E402

pytestmark = pytest.mark.mcp

SLOW_SERVER = textwrap.dedent(
    """
    import anyio
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("slow")

    @server.tool(description="Work in steps, reporting each one if asked.")
    async def slow(steps: int, pause: float, report: bool, ctx: Context) -> str:
        for i in range(steps):
            await anyio.sleep(pause)
            if report:
                await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        return "done"

    if __name__ == "__main__":
        server.run()
    """
)


def _config(tmp_path: Path, timeout: float) -> dict[str, Any]:
    script = tmp_path / "slow_server.py"
    script.write_text(SLOW_SERVER)
    return {
        "mcpServers": {
            "slow": {"command": sys.executable, "args": [str(script)], "timeout": timeout}
        }
    }


async def test_progress_is_reported_and_keeps_a_long_call_alive(tmp_path: Path) -> None:
    seen: list[MCPProgress] = []
    async with MCPToolset(_config(tmp_path, 1.0), on_progress=seen.append) as toolset:
        [tool] = toolset.tools
        # 8 steps of 0.3 s: 2.4 s in all, more than twice the 1 s idle timeout
        assert await tool.ainvoke({"steps": 8, "pause": 0.3, "report": True}) == "done"
    assert [(p.server, p.tool, p.progress, p.total) for p in seen] == [
        ("slow", "slow", float(i), 8.0) for i in range(1, 9)
    ]
    assert seen[0].message == "step 1"


async def test_a_silent_call_past_its_idle_timeout_times_out(tmp_path: Path) -> None:
    seen: list[MCPProgress] = []
    async with MCPToolset(_config(tmp_path, 0.5), on_progress=seen.append) as toolset:
        [tool] = toolset.tools
        with pytest.raises(TimeoutError, match="sent nothing for 0.5s"):
            await tool.ainvoke({"steps": 1, "pause": 5.0, "report": False})
    assert seen == []


# ------------------------------------------------------------------ progress of a step


async def test_a_steps_progress_is_a_tool_progress_event_recorded_and_traced(
    tmp_path: Path,
) -> None:
    # The server's notifications become ToolProgress events of the step whose call it is
    # (between its ToolCallStarted and its StepFinished), recorded by the run store, and
    # custom events on the step's run in the trace (a span event for OpenTelemetry).
    from planexec import PlanExecuteAgent
    from planexec.events import Event, StepFinished, ToolCallStarted, ToolProgress
    from planexec.store import MemoryRunStore
    from planexec.testing import ScriptedChatModel
    from planexec.tracing import PROGRESS_EVENT, CallbackRecorder

    plan = (
        "#Task1: first\n#Tool1: slow\n#Args1: {\"steps\": 1, \"pause\": 0, \"report\": false}\n"
        "#Dependency1: None\n"
        "#Task2: then report\n#Tool2: slow\n"
        "#Args2: {\"steps\": 3, \"pause\": 0.01, \"report\": true}\n#Dependency2: #S1\n"
    )
    events: list[Event] = []
    store = MemoryRunStore()
    recorder = CallbackRecorder()
    async with MCPToolset(_config(tmp_path, 10.0)) as toolset:
        agent = PlanExecuteAgent(
            ScriptedChatModel(replies=[plan, "done"]), toolset.tools, store=store,
            callbacks=[recorder],
        )
        run = await agent.run("work", event_handlers=[events.append])
    assert run.answer == "done"
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.step_id, p.tool, p.server, p.progress, p.total, p.message) for p in progress] == [
        (2, "slow", "slow", float(i), 3.0, f"step {i}") for i in (1, 2, 3)
    ]
    order = [
        (type(e).__name__, e.result.step_id if isinstance(e, StepFinished) else e.step_id)
        for e in events
        if isinstance(e, ToolCallStarted | StepFinished | ToolProgress)
    ]
    assert order == [
        ("ToolCallStarted", 1), ("StepFinished", 1), ("ToolCallStarted", 2),
        ("ToolProgress", 2), ("ToolProgress", 2), ("ToolProgress", 2), ("StepFinished", 2),
    ]
    stored = [e for e in store.events(run.run_id) if e["type"] == "ToolProgress"]
    assert [(e["step_id"], e["progress"], e["total"]) for e in stored] == [
        (2, 1.0, 3.0), (2, 2.0, 3.0), (2, 3.0, 3.0)
    ]
    traced = [(rid, data) for rid, name, data in recorder.custom_events if name == PROGRESS_EVENT]
    assert [d["progress"] for _, d in traced] == [1.0, 2.0, 3.0]
    [step_run] = {rid for rid, _ in traced}
    assert recorder.runs[step_run]["name"] == "planexec:step 2"


async def test_without_listeners_progress_still_reaches_on_progress_and_nothing_else(
    tmp_path: Path,
) -> None:
    from planexec.executor import Executor
    from planexec.parsing import parse_plan
    from planexec.tools import ToolCatalog

    seen: list[MCPProgress] = []
    plan = parse_plan(
        "#Task1: go\n#Tool1: slow\n#Args1: {\"steps\": 2, \"pause\": 0, \"report\": true}\n"
        "#Dependency1: None\n"
    )
    async with MCPToolset(_config(tmp_path, 10.0), on_progress=seen.append) as toolset:
        [result] = await Executor(ToolCatalog(toolset.tools)).run(plan)
    assert result.output == "done"
    assert [p.progress for p in seen] == [1.0, 2.0]


async def test_a_local_tool_reports_progress_of_its_own_step() -> None:
    from planexec.events import Event, EventBus, ToolProgress
    from planexec.executor import Executor
    from planexec.parsing import parse_plan
    from planexec.testing import fake_tool
    from planexec.tools import ToolCatalog, report_progress

    async def work(n: int) -> str:
        for i in range(n):
            await report_progress(i + 1, n, None)
        return "ok"

    events: list[Event] = []
    tools = [fake_tool("work", function=work, args={"n": int}), fake_tool("idle", "x")]
    plan = parse_plan(
        "#Task1: a\n#Tool1: idle\n#Args1: {}\n#Dependency1: None\n"
        "#Task2: b\n#Tool2: work\n#Args2: {\"n\": 2}\n#Dependency2: None\n"
    )
    await report_progress(1.0)  # outside any call: nothing happens
    results = await Executor(ToolCatalog(tools), bus=EventBus([events.append])).run(plan)
    assert [r.output for r in results] == ["x", "ok"]
    assert [(e.step_id, e.tool, e.progress, e.total) for e in events
            if isinstance(e, ToolProgress)] == [(2, "work", 1.0, 2.0), (2, "work", 2.0, 2.0)]


async def test_progress_reported_after_the_call_ended_is_dropped() -> None:
    # A tool leaves a task behind that reports later (as an abandoned call's server may):
    # that report is not the step's any more, and no ToolProgress follows its StepFinished.
    import asyncio

    from planexec.events import Event, EventBus, StepFinished, ToolProgress
    from planexec.executor import Executor
    from planexec.parsing import parse_plan
    from planexec.testing import fake_tool
    from planexec.tools import ToolCatalog, report_progress

    go = asyncio.Event()
    left: list[asyncio.Task[None]] = []

    async def later() -> None:
        await go.wait()
        await report_progress(2, 2, "too late")

    async def work() -> str:
        await report_progress(1, 2, "on time")
        left.append(asyncio.create_task(later()))  # inherits the call's context
        return "ok"

    events: list[Event] = []
    plan = parse_plan("#Task1: a\n#Tool1: work\n#Args1: {}\n#Dependency1: None\n")
    tools = ToolCatalog([fake_tool("work", function=work)])
    [result] = await Executor(tools, bus=EventBus([events.append])).run(plan)
    assert result.output == "ok"
    go.set()
    await asyncio.wait_for(left[0], 5)
    kinds = [(type(e).__name__, getattr(e, "message", None)) for e in events
             if isinstance(e, ToolProgress | StepFinished)]
    assert kinds == [("ToolProgress", "on time"), ("StepFinished", None)]
