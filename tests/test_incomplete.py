"""A cut-off plan never succeeds silently: it ends INCOMPLETE, or re-plans for the rest.

Issue 19 ("Never guessed"), item 5. A planner reply that ends inside a step (an empty
last block, ``#Args`` cut mid-JSON) leaves the plan incomplete. ``execute_plan`` runs
what is complete and ends ``INCOMPLETE`` (kind ``PLAN_INCOMPLETE``); ``run`` re-plans,
the prompt saying where the reply was cut; the store, the CLI and the regression suite
know the status.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool
from loguru import logger

from planexec.agent import PlanExecuteAgent
from planexec.cli import main
from planexec.config import AgentConfig
from planexec.errors import ErrorKind
from planexec.events import Event, RecoveryDecided
from planexec.parsing import parse_plan
from planexec.planner import cut_off
from planexec.recovery import DEFAULT_POLICY, Action
from planexec.regress.scenario import Expectations
from planexec.results import RunStatus, StepStatus
from planexec.store import open_store
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text

REAL_PLANS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "real_plans"
READ = {"read_only": True}

STEPS_1_2 = """\
#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: The sites.

#Task2: List the assets at the first site.
#Tool2: assets
#Args2: {"site_name": "<step_1[0]>"}
#Dependency2: #S1
#ExpectedOutput2: The assets.
"""

CUT_AFTER_TASK3 = STEPS_1_2 + "\n#Task3:"
"""Cut right after ``#Task3:`` (as the real reply hpml26gemini_10 is)."""

CUT_IN_ARGS2 = STEPS_1_2.split("#Args2:")[0] + '#Args2: {"site_name": "MA'
"""Cut inside step 2's ``#Args``, mid-JSON."""

REST = """\
#Task3: Read the sensors of the first asset.
#Tool3: sensors
#Args3: {"asset_id": "<step_2[0].id>"}
#Dependency3: #S2
#ExpectedOutput3: Its sensors.
"""


def toolset() -> dict[str, BaseTool]:
    return {
        "sites": fake_tool("sites", ["MAIN", "WEST"], hints=READ),
        "assets": fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str}, hints=READ),
        "sensors": fake_tool("sensors", ["T-1"], args={"asset_id": str}, hints=READ),
    }


def calls(tool: BaseTool) -> int:
    return int(tool.metadata["calls"].count)  # type: ignore[index]


def cfg(**recovery: Any) -> AgentConfig:
    return AgentConfig.from_dict(
        {
            "planner": {"max_reprompts": 0},
            "model": {"retry": {"attempts": 1}},
            "recovery": recovery,
        }
    )


def decisions(events: list[Event]) -> list[tuple[str | None, str]]:
    return [
        (str(e.error_kind) if e.error_kind else None, e.action)
        for e in events
        if isinstance(e, RecoveryDecided)
    ]


# ---------------------------------------------------------------- detection


def test_a_reply_cut_inside_a_step_is_read_as_incomplete_by_code() -> None:
    dropped = cut_off(parse_plan(CUT_AFTER_TASK3))
    assert dropped is not None and (dropped.code, dropped.step) == ("TRUNCATED_STEP_DROPPED", 3)
    assert dropped.unrunnable == ()
    in_args = cut_off(parse_plan(CUT_IN_ARGS2))
    assert in_args is not None and (in_args.code, in_args.step) == ("ARGS_TRUNCATED", 2)
    assert in_args.unrunnable == (2,)
    assert cut_off(parse_plan(STEPS_1_2)) is None


def test_unreadable_args_with_more_fields_after_them_are_not_a_cut() -> None:
    text = STEPS_1_2.replace('{"site_name": "<step_1[0]>"}', '{"site_name": "MAIN')
    plan = parse_plan(text)
    assert any(d.code == "ARGS_TRUNCATED" for d in plan.diagnostics)  # the parser's code
    assert cut_off(plan) is None  # ... but the reply went on: an error of step 2 only


@pytest.mark.skipif(not REAL_PLANS.is_dir(), reason="the shared corpus is not here")
def test_the_real_reply_cut_after_task3_is_incomplete() -> None:
    text = (REAL_PLANS / "hashstep_hpml26gemini_10.txt").read_text(encoding="utf-8")
    cut = cut_off(parse_plan(text))
    assert cut is not None and cut.step == 3 and cut.code == "TRUNCATED_STEP_DROPPED"


def test_plan_incomplete_has_a_default_action() -> None:
    assert DEFAULT_POLICY[ErrorKind.PLAN_INCOMPLETE] is Action.REPLAN


# ---------------------------------------------------------------- execute_plan


async def test_execute_plan_runs_what_is_complete_and_ends_incomplete() -> None:
    tools = toolset()
    events: list[Event] = []
    agent = PlanExecuteAgent(
        None, list(tools.values()), config=cfg(), event_handlers=[events.append]
    )
    run = await agent.execute_plan(CUT_AFTER_TASK3)
    assert run.status is RunStatus.INCOMPLETE
    assert run.error_kind is ErrorKind.PLAN_INCOMPLETE
    assert run.error is not None and "step 3" in run.error
    assert [r.status for r in run.results] == [StepStatus.SUCCEEDED] * 2
    assert calls(tools["sites"]) == 1 and calls(tools["assets"]) == 1
    assert decisions(events) == [("PLAN_INCOMPLETE", "STOP")]


async def test_a_step_cut_inside_its_args_is_not_run_and_the_run_is_incomplete() -> None:
    tools = toolset()
    agent = PlanExecuteAgent(None, list(tools.values()), config=cfg())
    run = await agent.execute_plan(CUT_IN_ARGS2)
    assert run.status is RunStatus.INCOMPLETE
    by_id = {r.step_id: r for r in run.results}
    assert by_id[1].status is StepStatus.SUCCEEDED
    assert by_id[2].status is StepStatus.SKIPPED and by_id[2].error_kind is None
    assert by_id[2].note is not None and "not run" in by_id[2].note
    assert calls(tools["assets"]) == 0


async def test_a_real_failure_still_fails_a_cut_plan() -> None:
    tools = toolset()
    tools["sites"] = fake_tool("sites", error="backend down")
    agent = PlanExecuteAgent(None, list(tools.values()), config=cfg())
    run = await agent.execute_plan(CUT_AFTER_TASK3)
    assert run.status is RunStatus.FAILED
    assert run.error_kind is ErrorKind.TOOL_ERROR


# ---------------------------------------------------------------- run: re-plan for the rest


class Planner:
    def __init__(self, plans: list[str]) -> None:
        self.plans = list(plans)
        self.prompts: list[str] = []

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "plan":
            self.prompts.append(messages_text(messages))
            return self.plans.pop(0)
        assert call.purpose == "answer", call.purpose
        return "CH-6 has T-1."


async def test_run_replans_for_the_rest_of_a_cut_plan_saying_where_it_was_cut() -> None:
    tools = toolset()
    planner = Planner([CUT_AFTER_TASK3, REST])
    events: list[Event] = []
    model = FunctionModel(function=planner)
    agent = PlanExecuteAgent(
        model, list(tools.values()), config=cfg(), event_handlers=[events.append]
    )
    run = await agent.run("Which sensors has the first asset of the first site?")
    assert run.status is RunStatus.SUCCEEDED
    assert decisions(events) == [("PLAN_INCOMPLETE", "REPLAN")]
    assert len(run.attempts) == 2
    replan = planner.prompts[1]
    assert "The previous reply was cut off" in replan
    assert "right after the start of step 3" in replan
    assert "Number the new steps from 3" in replan
    # the complete steps ran once and were kept
    assert calls(tools["sites"]) == 1 and calls(tools["assets"]) == 1
    assert calls(tools["sensors"]) == 1
    assert model.purposes() == ["plan", "plan", "answer"]


async def test_run_ends_incomplete_when_the_replan_budget_is_spent() -> None:
    tools = toolset()
    planner = Planner([CUT_IN_ARGS2])
    model = FunctionModel(function=planner)
    agent = PlanExecuteAgent(model, list(tools.values()), config=cfg(max_replans=0))
    run = await agent.run("Which assets are at the first site?")
    assert run.status is RunStatus.INCOMPLETE
    assert run.error_kind is ErrorKind.PLAN_INCOMPLETE
    assert run.answer == "CH-6 has T-1."  # an answer from what ran, not a success


# ---------------------------------------------------------------- store, CLI, regress


async def test_the_store_records_and_reads_incomplete(tmp_path: Path) -> None:
    store = open_store(tmp_path / "runs.db")
    try:
        agent = PlanExecuteAgent(None, list(toolset().values()), config=cfg(), store=store)
        run = await agent.execute_plan(CUT_AFTER_TASK3)
        record = store.get_run(run.run_id)
        assert record.status is RunStatus.INCOMPLETE
        assert [r.run_id for r in store.list_runs(status="INCOMPLETE")] == [run.run_id]
        assert store.list_runs(status=RunStatus.SUCCEEDED) == []
    finally:
        store.close()


@pytest.fixture
def _restore_logging() -> Iterator[None]:
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


TOOLS_MODULE = """\
from planexec.testing import fake_tool

TOOLS = [
    fake_tool("sites", ["MAIN", "WEST"], hints={"read_only": True}),
    fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str}, hints={"read_only": True}),
]
"""


@pytest.mark.usefixtures("_restore_logging")
def test_planexec_run_exits_non_zero_and_runs_list_shows_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "incomplete_fake_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    plan = tmp_path / "plan.txt"
    plan.write_text(CUT_AFTER_TASK3, encoding="utf-8")
    db = str(tmp_path / "runs.db")
    code = main(["run", str(plan), "--tools", "incomplete_fake_tools:TOOLS", "--store", db])
    assert code == 1
    capsys.readouterr()
    assert main(["runs", "list", "--store", db, "--status", "incomplete", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in listed] == ["INCOMPLETE"]


def test_a_scenario_may_expect_incomplete() -> None:
    expect = Expectations.model_validate({"status": "INCOMPLETE", "error_kind": "PLAN_INCOMPLETE"})
    assert expect.status is RunStatus.INCOMPLETE
