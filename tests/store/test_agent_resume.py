"""`PlanExecuteAgent.resume` and `continue_plan`: the agent's own way back into a run."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from store_fixtures import ok, record_partial_run

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig, RecoverySettings
from planexec.errors import ErrorKind, RunError
from planexec.events import EventBus, PlanCreated, RunStarted, StepFinished
from planexec.plan import Plan, Ref, Step
from planexec.results import PlanAttempt, RunStatus
from planexec.store import MemoryRunStore
from planexec.testing import ScriptedChatModel, fake_tool

DEAD_PID = 2**22 + 4242


def tools(*, assets_safe: bool = True) -> list[Any]:
    return [
        fake_tool("sites", ["MAIN", "EAST"], hints={"read_only": True}),
        fake_tool(
            "assets",
            {"items": [{"id": "CH-6"}]},
            args={"site": str, "note": (str, "")},
            hints={"read_only": True} if assets_safe else None,
        ),
        fake_tool("create_work_order", {"wo": 7}, args={"text": str, "literal": dict}),
    ]


def calls(tool_list: list[Any]) -> dict[str, list[dict[str, Any]]]:
    return {t.name: t.metadata["calls"].calls for t in tool_list}


async def recorded(*plans: Plan, run_id: str = "r") -> MemoryRunStore:
    """A run whose process died after step 1 of plan 1 succeeded."""
    store = MemoryRunStore()
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id=run_id, question="which assets?"))
    for version, plan in enumerate(plans, start=1):
        await bus.emit(PlanCreated(run_id=run_id, version=version, plan=plan))
        if version == 1:
            await bus.emit(StepFinished(run_id=run_id, result=ok(1, "sites", ["MAIN", "EAST"])))
    store._runs[run_id].pid = DEAD_PID
    return store


async def test_resume_needs_a_store() -> None:
    with pytest.raises(RunError, match="needs a run store"):
        await PlanExecuteAgent(None, tools()).resume("r")


async def test_resume_continues_the_run_in_the_agents_store_without_rerunning_finished_steps(
) -> None:
    store = MemoryRunStore()
    await record_partial_run(store, "run-1")
    store._runs["run-1"].pid = DEAD_PID
    tool_list = tools()
    run = await PlanExecuteAgent(None, tool_list, store=store).resume("run-1")

    assert run.status is RunStatus.SUCCEEDED
    assert calls(tool_list)["sites"] == []
    assert calls(tool_list)["assets"] == [{"site": "MAIN", "note": "x"}]
    assert store.get_run("run-1").step_counts == {"SUCCEEDED": 3}
    created = [e for e in store.events("run-1") if e["type"] == "PlanCreated"]
    assert len(created) == 1  # the recorded plan continues: no new plan version


async def test_resume_stops_on_an_unsafe_interrupted_call_unless_told_to_rerun_it() -> None:
    store = MemoryRunStore()
    await record_partial_run(store, "run-1")
    store._runs["run-1"].pid = DEAD_PID
    tool_list = tools(assets_safe=False)
    agent = PlanExecuteAgent(None, tool_list, store=store)

    stopped = await agent.resume("run-1")
    assert (stopped.status, stopped.error_kind) == (RunStatus.FAILED, ErrorKind.UNKNOWN_OUTCOME)
    assert calls(tool_list)["assets"] == []

    forced = await agent.resume("run-1", rerun_unsafe=True)
    assert forced.status is RunStatus.SUCCEEDED
    assert calls(tool_list)["assets"] == [{"site": "MAIN", "note": "x"}]


async def test_earlier_replans_count_against_the_budget_of_a_resumed_run() -> None:
    v1 = Plan(steps=(Step(id=1, tool="sites"), Step(id=2, tool="nosuchtool", depends_on=(1,))))
    v2 = Plan(steps=(Step(id=3, tool="nosuchtool_either"),))
    store = await recorded(v1, v2)
    model = ScriptedChatModel(replies=["never asked"] * 3)
    config = AgentConfig(recovery=RecoverySettings(max_replans=1))
    run = await PlanExecuteAgent(model, tools(), config=config, store=store).resume("r")

    assert run.status is RunStatus.FAILED
    assert [a.version for a in run.attempts] == [1, 2]  # no third plan: the budget is spent
    assert "plan" not in run.usage.llm_calls
    assert [p.version for p in store.plans("r")] == [1, 2]


class Site(BaseModel):
    """The typed output of the resumed run."""

    site: str
    """A site's name."""


async def test_a_resumed_plan_fills_its_typed_output_from_the_recorded_results() -> None:
    v1 = Plan(
        steps=(
            Step(id=1, tool="sites"),
            Step(id=2, tool="final_answer", args={"site": Ref(1, (1,))}, depends_on=(1,)),
        )
    )
    store = await recorded(v1)
    tool_list = tools()
    run = await PlanExecuteAgent(None, tool_list, store=store, output_type=Site).resume("r")

    assert run.status is RunStatus.SUCCEEDED, run.error
    assert run.output == Site(site="EAST")
    assert calls(tool_list)["sites"] == []


async def test_continue_plan_needs_an_attempt_with_a_plan() -> None:
    agent = PlanExecuteAgent(None, tools())
    with pytest.raises(RunError, match="no attempt with a plan"):
        await agent.continue_plan("q", [PlanAttempt(1, None)], run_id="r")
    with pytest.raises(RunError, match="version 2"):
        await agent.continue_plan("q", [PlanAttempt(1, Plan(steps=()))], run_id="r", version=2)
