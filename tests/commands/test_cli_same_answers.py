"""One status everywhere: `planexec run --json`, MCP's execute_plan and the library agree.

The overall status of a plan run is the one value the run store records (`RunStatus`);
usage lists only the purposes called; a run's summary (``runs list``, ``runs show``)
takes its kind and its reason from the same step, its first failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from planexec import AgentConfig, PlanExecuteAgent
from planexec.cli import main
from planexec.examples import example_path
from planexec.examples.tools import demo_tools

pytest.importorskip("mcp")
pytestmark = pytest.mark.timeout(120)

DEMO_TOOLS = "planexec.examples.tools:TOOLS"
FAILS_AT_RUN_TIME = (  # no model: the hinted reference cannot be resolved
    "#Task1: sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
    "#Task2: assets\n#Tool2: assets\n"
    '#Args2: {"site_name": "{the_site_name_of_step_1}"}\n#Dependency2: #S1\n\n'
)
FAILING = (  # and a reference to a step that is not in the plan
    FAILS_AT_RUN_TIME
    + '#Task3: assets\n#Tool3: assets\n#Args3: {"site_name": "{step_9.site}"}\n'
    "#Dependency3: None\n"
)
PLANS = {
    "succeeds": example_path("plans/chiller_sensors.txt").read_text(encoding="utf-8"),
    "fails": FAILS_AT_RUN_TIME,
    "waits": example_path("plans/work_order.txt").read_text(encoding="utf-8"),
}
APPROVAL = {"approval": {"enabled": True}}


def cli_run(plan: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    (tmp_path / "plan.txt").write_text(plan, encoding="utf-8")
    (tmp_path / "agent.toml").write_text("[approval]\nenabled = true\n", encoding="utf-8")
    argv = ["run", str(tmp_path / "plan.txt"), "--tools", DEMO_TOOLS, "--json"]
    main([*argv, "--config", str(tmp_path / "agent.toml"), "--store", str(tmp_path / "s.db")])
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def mcp_run(plan: str) -> dict[str, Any]:
    from mcp import Client

    from planexec.mcp.server import build_server
    from planexec.store import MemoryRunStore

    server = build_server(
        demo_tools(), store=MemoryRunStore(), config=AgentConfig.model_validate(APPROVAL)
    )

    async def go() -> dict[str, Any]:
        async with Client(server) as client:
            out = await client.call_tool("execute_plan", {"text": plan})
            data: dict[str, Any] = out.structured_content or {}
            return data

    return anyio.run(go)


@pytest.mark.parametrize("case", sorted(PLANS))
def test_run_json_mcp_and_the_library_report_the_same_status(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = PLANS[case]
    cli = cli_run(plan, tmp_path, capsys)
    served = mcp_run(plan)
    agent = PlanExecuteAgent(None, demo_tools(), config=AgentConfig.model_validate(APPROVAL))
    run = agent.execute_plan_sync(plan)
    expected = {"succeeds": "SUCCEEDED", "fails": "FAILED", "waits": "WAITING_APPROVAL"}[case]
    assert cli["status"] == served["status"] == run.status.value == expected
    assert cli["ok"] is served["ok"] is (expected == "SUCCEEDED")
    # usage: only the purposes called, as the library's
    assert cli["usage"]["llm_calls"] == served["usage"]["llm_calls"] == run.usage.llm_calls == {}


def test_runs_list_and_show_take_kind_and_reason_from_the_first_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = cli_run(FAILING, tmp_path, capsys)
    kinds = {s["step_id"]: s["error_kind"] for s in cli["steps"]}
    assert kinds == {1: None, 2: "RESOLUTION_FAILED", 3: "MISSING_REFERENCE"}
    store = ["--store", str(tmp_path / "s.db")]
    main(["runs", "list", "--json", *store])
    [listed] = json.loads(capsys.readouterr().out)
    first = listed["first_failure"]
    assert kinds[first["step_id"]] == first["error_kind"]
    step = next(s for s in cli["steps"] if s["step_id"] == first["step_id"])
    assert first["error"] == step["error"]
    main(["runs", "list", *store])
    line = capsys.readouterr().out.splitlines()[1]
    assert f"[{first['error_kind']}] {step['error'][:40]}" in line
    other = ({"RESOLUTION_FAILED", "MISSING_REFERENCE"} - {first["error_kind"]}).pop()
    assert other not in line
    main(["runs", "show", cli["run_id"], *store])
    shown = capsys.readouterr().out
    assert f"reason: [{first['error_kind']}] {step['error']}" in shown
