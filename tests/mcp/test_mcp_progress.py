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
