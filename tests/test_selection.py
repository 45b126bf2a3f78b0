"""Steps that name an agent or server but no tool get a tool by selection, never by reasoning.

Issue 19 ("Never guessed"), item 4. Real planners write ``#Agent1: IoT Data Download``
and no ``#Tool1``; such a step is not ``#Tool: none``. The model chooses (purpose
``select``) among that server's tools and fills the arguments, which are validated; the
choice is shown (a note and a ``TOOL_SELECTED`` event) and every argument is recorded
as ``selected``. Without a model the step fails with ``TOOL_SELECTION_FAILED``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ErrorKind
from planexec.events import ArgResolved, Event, FallbackUsed
from planexec.parsing import parse_plan
from planexec.plan import Step
from planexec.recovery import DEFAULT_POLICY, Action
from planexec.results import ResolutionMethod, RunStatus, StepStatus
from planexec.selection import tool_candidates
from planexec.store.codec import plan_from_json, plan_to_json
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text
from planexec.tools import ToolCatalog

REAL_PLANS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "real_plans"
READ = {"read_only": True}


def on(server: str, tool: BaseTool) -> BaseTool:
    """Put a fake tool on a server (as `planexec.mcp` does)."""
    tool.metadata = {**(tool.metadata or {}), "planexec": {**READ, "server": server}}
    return tool


def toolset() -> dict[str, BaseTool]:
    return {
        "sites": on("iot", fake_tool("sites", ["MAIN", "WEST"])),
        "assets": on("iot", fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str})),
        "orders": on("workorder", fake_tool("orders", [], args={"asset_id": str})),
    }


def calls(tool: BaseTool) -> list[dict[str, Any]]:
    return list(tool.metadata["calls"].calls)  # type: ignore[index]


AGENT_ONLY = """\
#Task1: List the sites.
#Agent1: IoT Agent
#Dependency1: None
#ExpectedOutput1: The sites.

#Task2: List the assets at the first site.
#Agent2: iot
#Dependency2: #S1
#ExpectedOutput2: The assets at the first site.
"""


class Selector:
    """Answers ``select`` calls from a queue; records what each call offered."""

    def __init__(self, replies: list[dict[str, Any] | str]) -> None:
        self.replies = list(replies)
        self.offered: list[tuple[str, ...]] = []
        self.prompts: list[str] = []

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "answer":
            return "MAIN has CH-6."
        assert call.purpose == "select", f"unexpected {call.purpose} call"
        self.offered.append(call.keys)
        self.prompts.append(messages_text(messages))
        reply = self.replies.pop(0)
        return reply if isinstance(reply, str) else json.dumps(reply)


def agent(model: FunctionModel | None, tools: dict[str, BaseTool], events: list[Event]) -> Any:
    cfg = AgentConfig.from_dict({"model": {"retry": {"attempts": 1}}})
    return PlanExecuteAgent(model, list(tools.values()), config=cfg, event_handlers=[events.append])


async def test_an_agent_only_step_selects_a_tool_of_its_server_and_never_reasons() -> None:
    tools = toolset()
    selector = Selector(
        [{"tool": "sites", "args": {}}, {"tool": "iot.assets", "args": {"site_name": "MAIN"}}]
    )
    model = FunctionModel(function=selector)
    events: list[Event] = []
    run = await agent(model, tools, events).execute_plan(AGENT_ONLY)

    assert run.status is RunStatus.SUCCEEDED
    purposes = model.purposes()
    assert purposes.count("select") == 2 and "reason" not in purposes
    assert [c.step_id for c in model.calls_made if c.purpose == "select"] == [1, 2]
    # "IoT Agent" and "iot" both name the server iot: only its tools are offered
    assert selector.offered == [("iot.sites", "iot.assets")] * 2
    assert calls(tools["assets"]) == [{"site_name": "MAIN"}]
    assert calls(tools["orders"]) == []
    by_id = {r.step_id: r for r in run.results}
    step2 = by_id[2]
    assert step2.status is StepStatus.SUCCEEDED
    assert (step2.tool, step2.server) == ("assets", "iot")
    assert step2.resolution == {"site_name": ResolutionMethod.SELECTED}
    assert step2.llm_calls == 1
    assert step2.note is not None and "iot.assets" in step2.note
    selected = [e for e in events if isinstance(e, FallbackUsed) and e.code == "TOOL_SELECTED"]
    assert [e.step_id for e in selected] == [1, 2]
    resolved = [e for e in events if isinstance(e, ArgResolved) and e.step_id == 2]
    assert [(e.arg, e.method) for e in resolved] == [("site_name", ResolutionMethod.SELECTED)]
    # the dependency's output is shown to the selection of step 2
    assert '["MAIN", "WEST"]' in selector.prompts[1]
    assert run.usage.llm_calls["select"] == 2


async def test_a_step_with_tool_none_stays_a_reasoning_step_even_with_an_agent() -> None:
    plan = parse_plan(
        "#Task1: Summarize what is known.\n#Agent1: Utilities\n#Tool1: none\n"
        "#Args1: {}\n#Dependency1: None\n#ExpectedOutput1: A summary.\n"
    )
    assert plan.steps[0].server == "Utilities" and plan.steps[0].no_tool
    assert not plan.steps[0].selects_tool

    def reply(call: ModelCall, messages: list[BaseMessage]) -> str:
        assert call.purpose in ("reason", "answer")
        return "nothing is known yet"

    model = FunctionModel(function=reply)
    run = await agent(model, toolset(), []).execute_plan(plan)
    assert run.status is RunStatus.SUCCEEDED
    assert "select" not in model.purposes() and "reason" in model.purposes()
    assert run.results[0].tool is None


async def test_without_a_model_an_agent_only_step_fails_typed_and_runs_nothing() -> None:
    tools = toolset()
    run = await agent(None, tools, []).execute_plan(AGENT_ONLY)
    by_id = {r.step_id: r for r in run.results}
    assert by_id[1].status is StepStatus.FAILED
    assert by_id[1].error_kind is ErrorKind.TOOL_SELECTION_FAILED
    assert by_id[1].failure is not None and by_id[1].failure.kind is ErrorKind.TOOL_SELECTION_FAILED
    assert by_id[1].tool is None and by_id[1].attempts == 0
    assert by_id[2].status is StepStatus.BLOCKED
    assert run.status is RunStatus.FAILED
    assert run.error_kind is ErrorKind.TOOL_SELECTION_FAILED
    assert all(calls(t) == [] for t in tools.values())


def test_tool_selection_failed_has_a_default_action() -> None:
    assert DEFAULT_POLICY[ErrorKind.TOOL_SELECTION_FAILED] is Action.REPLAN


async def test_an_unusable_choice_is_asked_again_once_with_the_problem() -> None:
    tools = toolset()
    selector = Selector(
        [
            {"tool": "orders", "args": {"asset_id": "CH-6"}},  # not a tool of iot
            {"tool": "sites", "args": {}},
        ]
    )
    model = FunctionModel(function=selector)
    run = await agent(model, tools, []).execute_plan(AGENT_ONLY.split("\n\n")[0])
    assert run.status is RunStatus.SUCCEEDED
    assert run.results[0].llm_calls == 2 and run.results[0].tool == "sites"
    assert "'orders' is not one of the candidates" in selector.prompts[1]
    assert calls(tools["orders"]) == []


async def test_arguments_that_do_not_fit_the_schema_twice_fail_the_selection() -> None:
    tools = toolset()
    bad = {"tool": "assets", "args": {"site": "MAIN"}}  # no argument 'site'
    selector = Selector([bad, bad])
    model = FunctionModel(function=selector)
    only2 = "#Task2: List the assets at MAIN.\n#Agent2: iot\n#Dependency2: None\n"
    run = await agent(model, tools, []).execute_plan(only2)
    result = run.results[0]
    assert result.status is StepStatus.FAILED
    assert result.error_kind is ErrorKind.TOOL_SELECTION_FAILED
    assert result.llm_calls == 2
    assert calls(tools["assets"]) == []
    assert run.status is RunStatus.FAILED  # a given plan: REPLAN stops


async def test_a_model_saying_no_tool_fits_fails_the_selection_without_a_call() -> None:
    tools = toolset()
    selector = Selector([{"tool": None, "why": "no tool forecasts"}])
    model = FunctionModel(function=selector)
    text = "#Task1: Forecast the flow.\n#Agent1: iot\n#Dependency1: None\n"
    run = await agent(model, tools, []).execute_plan(text)
    assert run.results[0].error_kind is ErrorKind.TOOL_SELECTION_FAILED
    assert run.results[0].failure is not None
    assert run.results[0].failure.cause == "no tool forecasts"
    assert all(calls(t) == [] for t in tools.values())


def test_a_name_matching_no_server_offers_the_whole_catalog() -> None:
    catalog = ToolCatalog(list(toolset().values()))
    specs, scope = tool_candidates(Step(id=1, server="Time Series Analytics"), catalog)
    assert [s.qualified_name for s in specs] == ["iot.sites", "iot.assets", "workorder.orders"]
    assert "matches no server" in scope
    specs, scope = tool_candidates(Step(id=1, server="WorkOrder Agent"), catalog)
    assert [s.qualified_name for s in specs] == ["workorder.orders"]


def test_the_store_keeps_whether_a_step_said_tool_none() -> None:
    plan = parse_plan(
        "#Task1: a\n#Agent1: iot\n#Dependency1: None\n\n"
        "#Task2: b\n#Agent2: Utilities\n#Tool2: none\n#Dependency2: None\n"
    )
    again = plan_from_json(json.loads(json.dumps(plan_to_json(plan))))
    assert [s.selects_tool for s in again.steps] == [True, False]
    assert again.steps == plan.steps


@pytest.mark.skipif(not REAL_PLANS.is_dir(), reason="the shared corpus is not here")
def test_real_cods_plans_select_and_their_tool_none_steps_reason() -> None:
    cods = parse_plan((REAL_PLANS / "hashstep_cods16_3.txt").read_text(encoding="utf-8"))
    assert cods.steps and all(s.selects_tool for s in cods.steps)
    assert cods.steps[0].server == "Time Series Analytics and Forecasting"
    utilities = parse_plan(
        (REAL_PLANS / "hashstep_hpml26gemma3n_7.txt").read_text(encoding="utf-8")
    )
    step6 = utilities.step(6)
    assert step6.server == "Utilities" and step6.tool is None
    assert step6.no_tool and not step6.selects_tool


async def test_a_selected_identifier_found_nowhere_is_asked_again_and_never_called() -> None:
    tools = toolset()
    # "EAST" is a site like MAIN and WEST, but no output, task or plan holds it: a guess
    guess = {"tool": "iot.assets", "args": {"site_name": "EAST"}}
    selector = Selector([{"tool": "sites", "args": {}}, guess, guess])
    model = FunctionModel(function=selector)
    run = await agent(model, tools, []).execute_plan(
        AGENT_ONLY.replace("at the first site", "at one of the sites")
    )
    step2 = {r.step_id: r for r in run.results}[2]
    assert step2.error_kind is ErrorKind.TOOL_SELECTION_FAILED
    assert "'EAST'" in selector.prompts[2]  # the retry is told which value was ungrounded
    assert calls(tools["assets"]) == []


async def test_a_selected_value_taken_from_the_task_is_grounded() -> None:
    tools = toolset()
    selector = Selector([{"tool": "iot.assets", "args": {"site_name": "WEST"}}])
    model = FunctionModel(function=selector)
    run = await agent(model, tools, []).execute_plan(
        "#Task1: List the assets at site WEST.\n#Agent1: iot\n#Dependency1: None\n"
    )
    assert run.status is RunStatus.SUCCEEDED
    assert calls(tools["assets"]) == [{"site_name": "WEST"}]
