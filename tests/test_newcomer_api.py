"""Small things a newcomer reaches for: ``python -m planexec``, `tool_hints`, `Run.step`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from langchain_core.tools import tool

from planexec import PlanExecuteAgent, ToolCatalog, tool_hints
from planexec.examples import example_path
from planexec.examples.tools import demo_tools
from planexec.testing import fake_tool

pytestmark = pytest.mark.timeout(120)


def test_python_dash_m_planexec_is_the_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "planexec", "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0 and out.stdout.startswith("planexec "), out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "planexec", "nonsense"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_tool_hints_as_a_decorator_are_read_by_the_catalog() -> None:
    @tool_hints(read_only=True)
    @tool
    def sites() -> list[str]:
        """The sites."""
        return ["MAIN"]

    @tool_hints(destructive=True)
    @tool
    def wipe(site: str) -> str:
        """Wipe a site."""
        return site

    catalog = ToolCatalog([sites, wipe])
    assert catalog.get("sites").hints.to_dict() == {
        "read_only": True, "idempotent": None, "destructive": None}
    assert catalog.get("sites").hints.safe
    assert catalog.get("wipe").hints.destructive and not catalog.get("wipe").hints.safe


def test_tool_hints_keep_the_server_and_the_hints_not_given() -> None:
    t = fake_tool("history", 1, hints={"idempotent": True})
    t.metadata = {**(t.metadata or {}), "planexec": {"server": "iot", "idempotent": True}}
    tool_hints(destructive=False)(t)
    spec = ToolCatalog([t]).get("iot.history")
    assert spec.server == "iot"
    assert spec.hints.to_dict() == {"read_only": None, "idempotent": True, "destructive": False}
    with pytest.raises(TypeError):
        tool_hints(read_only=True)(lambda: None)  # type: ignore[type-var]


def test_a_destructive_hint_given_by_the_decorator_asks_for_approval() -> None:
    from planexec import AgentConfig

    tools = [t for t in demo_tools() if t.name != "create_work_order"]
    order = next(t for t in demo_tools() if t.name == "create_work_order")
    order.metadata = {}  # no hints left: the decorator alone marks it
    tools.append(tool_hints(destructive=True)(order))
    config = AgentConfig.model_validate({"approval": {"enabled": True}})
    run = PlanExecuteAgent(None, tools, config=config).execute_plan_sync(
        example_path("plans/work_order.txt").read_text(encoding="utf-8")
    )
    assert run.step(3).status.value == "WAITING_APPROVAL"


def test_run_step_gives_the_latest_result_of_a_step() -> None:
    run = PlanExecuteAgent(None, demo_tools()).execute_plan_sync(
        example_path("plans/chiller_sensors.txt").read_text(encoding="utf-8")
    )
    assert run.step(2) is next(r for r in run.results if r.step_id == 2)
    assert run.step(2).tool == "asset"
    with pytest.raises(KeyError, match="step 9"):
        run.step(9)
