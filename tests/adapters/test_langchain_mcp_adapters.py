"""Plans over tools loaded by the real langchain-mcp-adapters package.

The adapter pins ``mcp<2``, so it cannot share an environment with planexec's ``[mcp]``
extra: ``.ci/run`` runs this file in a second virtual environment (the project without
the extra, then ``langchain-mcp-adapters==0.3.2``). Elsewhere it is skipped.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "langchain_mcp_adapters", reason="langchain-mcp-adapters is tested in its own venv (.ci/run)"
)

from langchain_core.tools import BaseTool  # noqa: E402
from langchain_mcp_adapters.client import MultiServerMCPClient  # noqa: E402
from langchain_mcp_adapters.tools import load_mcp_tools  # noqa: E402

from planexec.agent import PlanExecuteAgent  # noqa: E402
from planexec.config import AgentConfig  # noqa: E402
from planexec.errors import ToolCallError  # noqa: E402
from planexec.results import RunStatus, StepStatus  # noqa: E402
from planexec.tools import ToolCatalog  # noqa: E402

SERVER = Path(__file__).with_name("adapter_server.py")

CONFIG = AgentConfig.from_dict({
    "planner": {"max_reprompts": 0},
    "executor": {"tool_retry": {"attempts": 2, "base_delay": 0.0, "jitter": 0.0}},
    "recovery": {"max_replans": 0},
})


def plan(second: str) -> str:
    site = '"site_name": "MAIN", ' if second == "sensors" else ""
    return f"""#Task1: List the assets at MAIN.
#Tool1: assets
#Args1: {{"site_name": "MAIN"}}
#Dependency1: None

#Task2: Use the first asset.
#Tool2: {second}
#Args2: {{{site}"asset_id": "{{step_1.assets[0].id}}"}}
#Dependency2: #S1
"""


@contextlib.asynccontextmanager
async def adapter_tools() -> AsyncIterator[list[BaseTool]]:
    """The demo server's tools, as the adapter loads them, over one session (one process).

    Entered and left in the test's own task (the SDK's cancel scopes require it).
    """
    client = MultiServerMCPClient({
        "demo": {"command": sys.executable, "args": [str(SERVER)], "transport": "stdio"},
    })
    async with client.session("demo") as session:
        tools = await load_mcp_tools(session, server_name="demo")
        for tool in tools:  # the server's error results are transient: its author says so
            tool.metadata = {**(tool.metadata or {}), "planexec": {"retry_on": ToolCallError}}
        yield tools


async def test_the_adapters_annotations_are_the_tools_safety_hints() -> None:
    async with adapter_tools() as tools:
        catalog = ToolCatalog(tools)
    assert {spec.name: spec.hints.safe for spec in catalog} == {
        "assets": True, "sensors": True, "wipe": False}


async def test_a_path_reference_resolves_and_a_safe_tool_is_retried() -> None:
    async with adapter_tools() as tools:
        run = await PlanExecuteAgent(None, tools, config=CONFIG).execute_plan(plan("sensors"))
    assert run.status is RunStatus.SUCCEEDED, run.error
    first, second = run.results
    assert first.output["assets"][0]["id"] == "CH-6"
    assert second.args["asset_id"] == "CH-6"  # {step_1.assets[0].id} followed
    out: dict[str, Any] = second.output
    assert out["sensors"] == ["Supply Temperature"] and out["call"] == 2  # retried once


async def test_a_destructive_tool_is_not_retried() -> None:  # even with retry_on
    async with adapter_tools() as tools:
        run = await PlanExecuteAgent(None, tools, config=CONFIG).execute_plan(plan("wipe"))
    wipe = run.results[1]
    assert wipe.args["asset_id"] == "CH-6"
    assert wipe.status is StepStatus.FAILED and str(wipe.error_kind) == "TOOL_ERROR"
    assert "call 1" in (wipe.error or "")  # its only call: a retry would have succeeded
