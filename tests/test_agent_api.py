"""The synchronous entry points, the stream's last event, result order, no-model failures."""

from __future__ import annotations

import asyncio
import json

from planexec.agent import PlanExecuteAgent
from planexec.events import Event, RunFinished
from planexec.results import Run, RunStatus, StepStatus
from planexec.store.codec import event_to_json
from planexec.store.memory import MemoryRunStore
from planexec.testing import FunctionModel, fake_tool

READ = {"read_only": True}

PLAN = """#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: List the assets.
#Tool2: assets
#Args2: {"site_name": "MAIN"}
#Dependency2: None
"""


def agent(model: FunctionModel | None = None, **kw: object) -> PlanExecuteAgent:
    t = [fake_tool("sites", ["MAIN"], hints=READ),
         fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str}, hints=READ)]
    return PlanExecuteAgent(model, t, **kw)  # type: ignore[arg-type]


def test_execute_plan_sync_without_a_running_loop() -> None:
    run = agent().execute_plan_sync(PLAN)
    assert run.status is RunStatus.SUCCEEDED and [r.step_id for r in run.results] == [1, 2]


async def test_the_sync_entry_points_work_inside_a_running_event_loop() -> None:
    # As in a Jupyter cell: a loop is running in this thread.
    asyncio.get_running_loop()
    run = agent().execute_plan_sync(PLAN)
    assert run.status is RunStatus.SUCCEEDED
    model = FunctionModel(function=lambda call, _messages: PLAN if call.purpose == "plan"
                          else "ANSWER")
    asked = agent(model).run_sync("Which assets?")
    assert asked.status is RunStatus.SUCCEEDED and asked.answer == "ANSWER"


async def test_a_failure_inside_the_worker_thread_is_raised_to_the_caller() -> None:
    import pytest

    from planexec.errors import RunError

    with pytest.raises(RunError):
        agent().run_sync("no model to plan with")


async def test_the_last_streamed_event_carries_the_run_and_stays_serialisable() -> None:
    store = MemoryRunStore()
    model = FunctionModel(function=lambda call, _messages: PLAN if call.purpose == "plan"
                          else "ANSWER")
    a = agent(model, store=store)
    events: list[Event] = [e async for e in a.stream("Which assets?")]
    last = events[-1]
    assert isinstance(last, RunFinished) and isinstance(last.run, Run)
    assert last.run is a.last_run and last.run.status is RunStatus.SUCCEEDED
    data = event_to_json(last)
    assert "run" not in data and data["status"] == "SUCCEEDED"
    json.dumps(data)
    assert str(store.get_run(last.run_id).status) == "SUCCEEDED"


async def test_results_are_in_plan_order_not_completion_order() -> None:
    second_done = asyncio.Event()

    async def slow_sites() -> list[str]:
        await second_done.wait()  # step 1 finishes only after step 2 has
        return ["MAIN"]

    async def fast_assets(site_name: str) -> list[str]:
        second_done.set()
        return ["CH-6"]

    t = [fake_tool("sites", function=slow_sites, hints=READ),
         fake_tool("assets", function=fast_assets, args={"site_name": str}, hints=READ)]
    finished: list[int] = []
    run = await PlanExecuteAgent(None, t).execute_plan(
        PLAN, event_handlers=[lambda e: finished.append(e.result.step_id)
                              if e.type == "StepFinished" else None])
    assert finished == [2, 1]
    assert [r.step_id for r in run.results] == [1, 2]


async def test_without_a_model_a_failed_path_leads_the_message() -> None:
    plan = PLAN.replace('{"site_name": "MAIN"}', '{"site_name": "{step_1.sites[0].name}"}')
    plan = plan.replace("#Dependency2: None", "#Dependency2: #S1")
    run = await agent().execute_plan(plan)
    failed = run.results[1]
    assert failed.status is StepStatus.FAILED and str(failed.error_kind) == "RESOLUTION_FAILED"
    message = failed.error or ""
    # The cause (the path that failed) comes first, the unavailable fallback after it.
    assert message.index(".sites[0].name") < message.index("LLM fallback")
    assert "no model is configured" in message
