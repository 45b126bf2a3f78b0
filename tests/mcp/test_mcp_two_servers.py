"""A plan whose steps call two MCP servers over stdio, passing structure between them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")


from planexec.agent import PlanExecuteAgent  # noqa: E402
from planexec.executor import Executor  # noqa: E402
from planexec.mcp import MCPToolset  # noqa: E402
from planexec.parsing import check_plan, parse_plan  # noqa: E402
from planexec.results import ResolutionMethod, RunStatus, StepStatus  # noqa: E402
from planexec.tools import ToolCatalog  # noqa: E402

pytestmark = pytest.mark.mcp

PLAN = (
    """#Task1: Look up Chiller 6 at MAIN.
#Server1: iot
#Tool1: asset
#Args1: {"site_name": "MAIN", "asset_id": "CWC04006"}
#Dependency1: None

#Task2: Find the sensors that reveal excess purge for this kind of asset.
#Server2: fmsr
#Tool2: failure_mode_sensors
#Args2: {"asset_type": "<step_1.type>", "failure_mode": "excess purge"}
#Dependency2: #S1

#Task3: Detect anomalies on the first of those sensors in the first week of June 2025.
#Server3: iot
#Tool3: detect_anomalies
#Args3: {"site_name": "<step_1.site_name>", "asset_id": "<step_1.id>", """
    """"sensor": "<step_2.fm_to_sensors[\\"excess purge\\"][0]>", """
    """"start": "2025-06-01", "final": "2025-06-07"}
#Dependency3: #S1, #S2

#Task4: The failure modes of the same asset type, named with a qualified tool name.
#Tool4: fmsr.failure_modes
#Args4: {"asset_type": "<step_2.asset_type>"}
#Dependency4: #S2
"""
)


def _started(pid_log: Path) -> dict[str, list[str]]:
    starts: dict[str, list[str]] = {}
    for line in pid_log.read_text().splitlines():
        server, pid = line.split()
        starts.setdefault(server, []).append(pid)
    return starts


async def test_a_plan_over_two_stdio_servers_passes_structure_and_starts_each_server_once(
    tmp_path: Path, demo_config: Callable[..., dict[str, Any]]
) -> None:
    pid_log = tmp_path / "pids.txt"
    async with MCPToolset(demo_config("iot", "fmsr", pid_log=pid_log)) as toolset:
        catalog = ToolCatalog(toolset.tools)
        plan = check_plan(parse_plan(PLAN), catalog)
        assert not plan.has_errors, plan.errors
        results = {r.step_id: r for r in await Executor(catalog).run(plan)}
        # A second plan in the same session reuses the same processes.
        again = await Executor(catalog).run(parse_plan(PLAN))
        calls = {name: s.calls for name, s in toolset.sessions.items()}

    assert all(r.status is StepStatus.SUCCEEDED for r in results.values()), results
    assert all(r.ok for r in again)
    # iot -> fmsr: a field of iot's structured output became fmsr's argument.
    assert results[2].args == {"asset_type": "chiller", "failure_mode": "excess purge"}
    assert results[2].resolution["asset_type"] is ResolutionMethod.PATH
    sensors = results[2].output["fm_to_sensors"]["excess purge"]
    assert isinstance(sensors, list) and len(sensors) >= 1
    # fmsr -> iot: an element of fmsr's structured output became iot's argument.
    assert results[3].args is not None and results[3].args["sensor"] == sensors[0]
    assert results[3].server == "iot" and results[3].output["asset_id"] == "CWC04006"
    assert results[4].tool in ("failure_modes", "fmsr.failure_modes")
    assert results[4].output["asset_type"] == "chiller"
    # One process per server for the whole toolset, however many calls.
    assert {k: len(v) for k, v in _started(pid_log).items()} == {"iot": 1, "fmsr": 1}
    assert calls == {"iot": 4, "fmsr": 4}


async def test_the_agent_runs_a_given_plan_over_mcp_tools(
    tmp_path: Path, demo_config: Callable[..., dict[str, Any]]
) -> None:
    pid_log = tmp_path / "pids.txt"
    async with MCPToolset(demo_config("iot", "fmsr", pid_log=pid_log)) as toolset:
        agent = PlanExecuteAgent(None, toolset.tools)
        run = await agent.execute_plan(PLAN)
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert len(run.results) == 4
    assert {k: len(v) for k, v in _started(pid_log).items()} == {"iot": 1, "fmsr": 1}
