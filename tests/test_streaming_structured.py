"""Structured plans stream too: the value's JSON text feeds the executor as it arrives.

The model is `StreamingModel(structured=True)`: with ``function_calling`` the plan is a
tool call whose arguments stream as ``tool_call_chunks`` (langchain's own
``with_structured_output`` parses it); with ``json_mode`` the content is the JSON. A
``gate`` holds the reply open until what the test needs has happened: no sleeps, no
timing thresholds; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec import AgentConfig, PlanExecuteAgent
from planexec._models import ModelClient
from planexec.events import Event, FallbackUsed, LLMCalled
from planexec.planner import Planner
from planexec.testing import ModelCall, StreamingModel
from planexec.tools import ToolCatalog
from tests.test_streaming import BOUND, Tools, block, line_gate

METHODS = ["function_calling", "json_mode"]


def step(n: int, tool: str, args: dict[str, Any], deps: list[int] | None = None) -> dict[str, Any]:
    return {
        "id": n,
        "task": f"call {tool}",
        "tool": tool,
        "args": args,
        "depends_on": deps or [],
        "expected_output": "its output",
    }


def plan_value(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"steps": list(steps)}


def structured_model(
    replies: list[Any], method: str, gate: Any = None, **kwargs: Any
) -> StreamingModel:
    """Answers the plan calls from ``replies`` in order (a dict: the structured value)."""
    queue = list(replies)

    def answer(call: ModelCall, messages: list[Any]) -> Any:
        return queue.pop(0) if call.purpose == "plan" else "the answer"

    return StreamingModel(
        function=answer,
        structured=True,
        structured_method=method,
        chars_per_token=kwargs.pop("chars_per_token", 8),
        gate=gate,
        **kwargs,
    )


async def run_agent(model: Any, tools: Tools, **config: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    cfg = AgentConfig.model_validate(
        {"recovery": {"max_replans": 0}, "planner": {"max_reprompts": 0}, **config}
    )
    agent = PlanExecuteAgent(model, tools.tools, config=cfg, event_handlers=[events.append])
    run = await asyncio.wait_for(agent.run("clean up MAIN"), BOUND)
    return run, events


def plan_calls(events: list[Event]) -> list[LLMCalled]:
    return [e for e in events if isinstance(e, LLMCalled) and e.purpose == "plan"]


def mode_fallbacks(events: list[Event]) -> list[FallbackUsed]:
    return [e for e in events if isinstance(e, FallbackUsed) and e.code == "PLANNER_MODE"]


@pytest.mark.parametrize("method", METHODS)
async def test_a_structured_plan_starts_a_safe_step_before_the_reply_is_complete(
    method: str,
) -> None:
    tools = Tools()
    value = plan_value(step(1, "sites", {}), step(2, "history", {"site_name": "MAIN"}, [1]))
    seen_before_end: list[int] = []

    async def sites_ran() -> None:
        await tools.wait("sites")
        seen_before_end.append(tools.calls("sites"))

    # the reply stops inside step 2's object until `sites` (step 1) has run
    gate = line_gate('"id": 2', sites_ran)
    run, events = await run_agent(structured_model([value], method, gate), tools)
    assert seen_before_end == [1]
    results = {r.step_id: r for r in run.attempts[0].results}
    assert results[1].streamed and results[1].ok
    assert results[2].ok
    assert tools.calls("sites") == 1 and tools.calls("history") == 1
    assert [e.streamed for e in plan_calls(events)] == [True]
    assert mode_fallbacks(events) == []  # it was the structured plan that ran


@pytest.mark.parametrize("method", METHODS)
async def test_a_destructive_step_of_a_structured_plan_waits_for_the_whole_plan(
    method: str,
) -> None:
    tools = Tools()
    value = plan_value(
        step(1, "delete_site", {"site_name": "MAIN"}),
        step(2, "sites", {}),
        step(3, "assets", {"site_name": "MAIN"}),
    )
    deletes_while_streaming: list[int] = []

    async def sites_ran() -> None:
        # steps 1 and 2 are complete (step 3 has started); the safe one ran
        await tools.wait("sites")
        deletes_while_streaming.append(tools.calls("delete_site"))

    gate = line_gate('"id": 3', sites_ran)
    run, _ = await run_agent(structured_model([value], method, gate), tools)
    assert deletes_while_streaming == [0]
    results = {r.step_id: r for r in run.attempts[0].results}
    assert results[1].ok and not results[1].streamed
    assert results[2].streamed
    assert tools.calls("delete_site") == 1


@pytest.mark.parametrize(
    ("method", "damage"),
    [
        ("function_calling", "cut"),
        ("function_calling", "broken"),
        ("json_mode", "cut"),  # langchain's parser would close it: planexec refuses it
        ("json_mode", "broken"),
    ],
)
async def test_an_invalid_structured_reply_falls_back_to_text_and_runs_nothing_unsafe(
    method: str, damage: str
) -> None:
    tools = Tools()
    whole = json.dumps(
        plan_value(
            step(1, "sites", {}),
            step(2, "delete_site", {"site_name": "MAIN"}),
            step(3, "assets", {"site_name": "MAIN"}),
        )
    )
    at = whole.index('"id": 3')
    if damage == "cut":  # the reply ends inside step 3 (a cut tool call is not a value)
        bad = whole[: at + 30]
    else:  # step 3 is not JSON
        bad = whole[:at] + '"id": 3, "tool": ]]}'
    text_plan = block(1, "sites", "{}") + block(2, "history", '{"site_name": "MAIN"}')
    sites_ran_early: list[int] = []

    async def sites_ran() -> None:
        await tools.wait("sites")  # step 1 started from the structured stream
        sites_ran_early.append(tools.calls("sites"))

    gate = line_gate('"id": 3', sites_ran)
    run, events = await run_agent(structured_model([bad, text_plan], method, gate), tools)
    assert sites_ran_early == [1]
    assert tools.calls("delete_site") == 0  # it arrived, but never from an incomplete plan
    assert len(mode_fallbacks(events)) == 1  # the structured call failed: text from there
    assert [e.streamed for e in plan_calls(events)] == [True, True]
    plan = run.attempts[0].plan
    assert plan is not None and [s.tool for s in plan.steps] == ["sites", "history"]
    results = {r.step_id: r for r in run.attempts[0].results}
    assert results[2].tool == "history" and results[2].ok
    assert tools.calls("sites") == 1  # the text plan's identical step 1 kept its run


class Sink:
    """A `ReplySink` that records what it is given."""

    def __init__(self) -> None:
        self.begins: list[bool] = []
        self.chunks: list[str] = []
        self.ends = 0

    async def begin(self, *, structured: bool = False) -> None:
        self.begins.append(structured)
        self.chunks = []

    async def chunk(self, text: str) -> None:
        self.chunks.append(text)

    async def end(self) -> None:
        self.ends += 1


_ARGS = st.dictionaries(
    st.sampled_from(["site_name", "limit", "note"]),
    st.one_of(st.text(max_size=12), st.integers(-5, 5), st.just("<step_1[0]>")),
    max_size=2,
)


@settings(max_examples=25, deadline=None)
@given(
    args=st.lists(_ARGS, min_size=1, max_size=4),
    method=st.sampled_from(METHODS),
    chars_per_token=st.integers(1, 40),
    indent=st.sampled_from([None, 1]),
)
def test_a_streamed_structured_plan_is_the_non_streamed_one(
    args: list[dict[str, Any]], method: str, chars_per_token: int, indent: int | None
) -> None:
    tools = Tools()
    catalog = ToolCatalog(tools.tools)
    names = ["sites", "assets", "history", "delete_site"]
    value = plan_value(
        *(step(i + 1, names[i % len(names)], a, [i] if i else []) for i, a in enumerate(args))
    )
    text = json.dumps(value, indent=indent)

    async def both() -> tuple[Any, Any, Sink]:
        sink = Sink()
        streamed = await Planner(
            structured_model([text], method, chars_per_token=chars_per_token),
            catalog,
            max_reprompts=0,
        ).plan("q", sink=sink)
        whole = await Planner(
            structured_model([text], method), catalog, max_reprompts=0
        ).plan("q")
        return streamed, whole, sink

    streamed, whole, sink = asyncio.run(both())
    assert streamed.mode == whole.mode == "structured"
    assert streamed.plan == whole.plan
    assert streamed.replies == whole.replies
    # the sink got the value's JSON text as the model wrote it (the oracle: the script)
    assert sink.begins == [True] and sink.ends == 1
    assert "".join(sink.chunks) == text


async def test_a_streamed_structured_call_is_retried_from_the_start() -> None:
    from planexec.parsing import plan_schema
    from planexec.resilience import ResilientModelClient, RetryPolicy
    from planexec.results import Usage

    value = plan_value(step(1, "sites", {}))
    model = structured_model([ConnectionError("reset"), value], "function_calling")
    model.function = _raising(model.function)
    usage = Usage()
    client = ResilientModelClient(
        model, usage=usage, retry=RetryPolicy(attempts=2, base_delay=0, jitter=0)
    )
    sink = Sink()
    got = await client.complete_structured(
        [], plan_schema(), purpose="plan", sink=sink
    )
    assert got == value
    assert sink.begins == [True, True]  # the failed attempt, then the retry, from the start
    assert "".join(sink.chunks) == json.dumps(value) and sink.ends == 1
    assert usage.llm_calls == {"plan": 2}


def _raising(function: Any) -> Any:
    """``function``, raising the exceptions it returns (a scripted failure)."""

    def call(call: ModelCall, messages: list[Any]) -> Any:
        out = function(call, messages)
        if isinstance(out, BaseException):
            raise out
        return out

    return call


class PreambleModel(StreamingModel):
    """Writes a line of prose as content before its tool call (as some providers may)."""

    async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None,
                       **kwargs: Any) -> Any:
        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        yield ChatGenerationChunk(message=AIMessageChunk(content="Here is the plan: {"))
        async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
            yield chunk


async def test_prose_before_the_tool_call_is_not_the_value_the_stream_restarts() -> None:
    from planexec.parsing import plan_schema

    value = plan_value(step(1, "sites", {}))
    model = PreambleModel(function=lambda call, messages: value, structured=True)
    sink = Sink()
    got = await ModelClient(model).complete_structured([], plan_schema(), purpose="plan",
                                                       sink=sink)
    assert got == value
    assert sink.begins == [True, True]  # the prose, then the tool call from the start
    assert "".join(sink.chunks) == json.dumps(value)


async def test_a_traced_run_streams_its_structured_plan_under_the_run() -> None:
    from planexec.tracing import CallbackRecorder

    tools = Tools()
    value = plan_value(step(1, "sites", {}), step(2, "history", {"site_name": "MAIN"}, [1]))
    recorder = CallbackRecorder()
    agent = PlanExecuteAgent(
        structured_model([value], "function_calling"), tools.tools, callbacks=[recorder]
    )
    run = await asyncio.wait_for(agent.run("clean up MAIN"), BOUND)
    assert run.attempts[0].results[0].streamed and tools.calls("history") == 1
    assert len(recorder.roots()) == 1  # the streamed structured call is parented in the run
    names = [r["name"] for r in recorder.runs.values()]
    assert "planexec:plan" in names
