"""Planner modes: native structured output where the model has it, text otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from planexec._models import ModelClient
from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ConfigError, ModelError
from planexec.events import Event, EventBus, FallbackUsed
from planexec.planner import Planner, supports_structured_output
from planexec.resilience import ResilientModelClient, RetryPolicy
from planexec.results import RunStatus, Usage
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text
from planexec.tools import ToolCatalog

CATALOG = ToolCatalog([
    fake_tool("sites", ["MAIN"], description="List the sites."),
    fake_tool("assets", [{"id": "CH-6"}], description="Assets of a site.",
              args={"site_name": str}),
])

PLAN = {"steps": [
    {"id": 1, "task": "list sites", "tool": "sites", "args": {}, "depends_on": [],
     "expected_output": "the sites"},
    {"id": 2, "task": "list assets", "tool": "assets", "args": {"site_name": "<step_1[0]>"},
     "depends_on": [1], "expected_output": "the assets"},
]}
TEXT_PLAN = "#Task1: list sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"


class Replies:
    """Answers each call from a queue (values, or exceptions to raise); records prompts."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> Any:
        assert call.purpose == "plan"
        self.prompts.append(messages_text(messages))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


def mode_events(events: list[Any]) -> list[FallbackUsed]:
    return [e for e in events if isinstance(e, FallbackUsed) and e.code == "PLANNER_MODE"]


async def plan_with(model: FunctionModel, **kw: Any) -> tuple[Any, list[Any], Usage]:
    bus = EventBus()
    events: list[Any] = []
    bus.subscribe(events.append)
    usage = Usage()
    outcome = await Planner(model, CATALOG, **kw).plan(
        "Which assets?", client=ModelClient(model, usage=usage, bus=bus), bus=bus
    )
    return outcome, events, usage


def test_the_fakes_play_both_kinds_of_model() -> None:
    assert supports_structured_output(FunctionModel(structured=True))
    assert not supports_structured_output(FunctionModel())
    with pytest.raises(NotImplementedError):
        FunctionModel().with_structured_output({"title": "Plan", "type": "object"})


async def test_auto_asks_a_structured_model_for_the_json_plan() -> None:
    replies = Replies(PLAN)
    outcome, events, usage = await plan_with(FunctionModel(function=replies, structured=True))
    assert outcome.mode == "structured"
    assert outcome.plan is not None and outcome.plan.dialect == "json"
    assert [s.tool for s in outcome.plan.steps] == ["sites", "assets"]
    assert outcome.error is None and outcome.plan.diagnostics == ()
    assert usage.llm_calls == {"plan": 1}
    assert '"depends_on"' in replies.prompts[0] and "#Args1:" not in replies.prompts[0]
    assert mode_events(events) == []


async def test_auto_asks_a_text_only_model_for_text_and_says_so() -> None:
    replies = Replies(TEXT_PLAN)
    outcome, events, usage = await plan_with(FunctionModel(function=replies))
    assert outcome.mode == "text"
    assert outcome.plan is not None and outcome.plan.dialect == "hashstep"
    assert "#Args1:" in replies.prompts[0]
    (event,) = mode_events(events)
    assert "no structured output" in event.message and "text plan" in event.message
    assert usage.llm_calls == {"plan": 1}


@pytest.mark.parametrize("failure", [ModelError("provider refused the schema"),
                                     "this is not JSON"])
async def test_a_failing_structured_call_falls_back_to_text_with_an_event(failure: Any) -> None:
    replies = Replies(failure, TEXT_PLAN)
    outcome, events, usage = await plan_with(FunctionModel(function=replies, structured=True))
    assert outcome.mode == "text"
    assert outcome.plan is not None and outcome.plan.dialect == "hashstep"
    (event,) = mode_events(events)
    assert "structured plan call failed" in event.message
    assert usage.llm_calls == {"plan": 2}
    assert "#Args1:" in replies.prompts[1]


async def test_structured_plans_go_through_the_same_checks_and_reprompts() -> None:
    bad = {"steps": [{"id": 1, "task": "list", "tool": "site_list", "args": {}}]}
    replies = Replies(bad, PLAN)
    model = FunctionModel(function=replies, structured=True)
    outcome, events, usage = await plan_with(model)
    assert outcome.mode == "structured" and outcome.reprompts == 1
    assert outcome.plan is not None and outcome.plan.steps[0].tool == "sites"
    assert any(isinstance(e, FallbackUsed) and e.code == "PLAN_REPROMPT" for e in events)
    assert "site_list" in replies.prompts[1] and "Write the whole plan again" in replies.prompts[1]
    assert isinstance(model.requests[1][-2], AIMessage)
    assert usage.llm_calls == {"plan": 2}


async def test_text_mode_never_asks_for_structured_output() -> None:
    replies = Replies(TEXT_PLAN)
    outcome, events, _ = await plan_with(
        FunctionModel(function=replies, structured=True), mode="text"
    )
    assert outcome.mode == "text" and mode_events(events) == []
    assert outcome.plan is not None and outcome.plan.dialect == "hashstep"


def test_structured_mode_needs_a_model_with_structured_output() -> None:
    with pytest.raises(ConfigError, match="structured output"):
        Planner(FunctionModel(), CATALOG, mode="structured")
    with pytest.raises(ValueError, match="planner mode"):
        Planner(FunctionModel(), CATALOG, mode="json")
    assert Planner(FunctionModel(structured=True), CATALOG, mode="structured").mode == (
        "structured"
    )


async def test_the_structured_call_goes_through_the_resilient_client() -> None:
    replies = Replies(ConnectionError("reset"), PLAN)
    model = FunctionModel(function=replies, structured=True)
    usage = Usage()
    client = ResilientModelClient(model, usage=usage, retry=RetryPolicy(attempts=2,
                                                                        base_delay=0,
                                                                        jitter=0))
    outcome = await Planner(model, CATALOG).plan("q", client=client)
    assert outcome.mode == "structured" and outcome.plan is not None
    assert usage.llm_calls == {"plan": 2}  # the failed attempt and its retry


async def test_an_agent_plans_with_structured_output_by_default() -> None:
    def reply(call: ModelCall, messages: list[BaseMessage]) -> Any:
        return PLAN if call.purpose == "plan" else "CH-6 is at MAIN."

    events: list[Event] = []
    cfg = AgentConfig.from_dict({"planner": {"max_reprompts": 0}})
    assert cfg.planner.mode == "auto"
    tools = [fake_tool("sites", ["MAIN"]), fake_tool("assets", [{"id": "CH-6"}],
                                                      args={"site_name": str})]
    agent = PlanExecuteAgent(FunctionModel(function=reply, structured=True), tools,
                             config=cfg, event_handlers=[events.append])
    run = await agent.run("Which assets are at the first site?")
    assert run.status is RunStatus.SUCCEEDED and run.answer == "CH-6 is at MAIN."
    assert run.usage.llm_calls == {"plan": 1, "answer": 1}
    assert mode_events(events) == []


def test_the_config_accepts_the_modes_and_the_json_dialect() -> None:
    cfg = AgentConfig.from_dict({"planner": {"mode": "text", "dialect": "json"}})
    assert (cfg.planner.mode, cfg.planner.dialect) == ("text", "json")
    with pytest.raises(ConfigError):
        AgentConfig.from_dict({"planner": {"mode": "native"}})
