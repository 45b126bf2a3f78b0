from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ErrorKind, RunError
from planexec.evaluation import EvalCase, EvalStatus, FunctionEvaluator, Verdict
from planexec.events import (
    Event,
    PlanCreated,
    RecoveryDecided,
    RunFinished,
    RunStarted,
    StepFinished,
    ToolCallStarted,
)
from planexec.resilience import BreakerRegistry
from planexec.results import RunStatus, StepStatus
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text

READ = {"read_only": True}


class Script:
    """Replies by purpose, recognised from the system prompt; records the prompts."""

    def __init__(self, plans: Sequence[str], resolve: Sequence[Any] = (),
                 reason: Sequence[Any] = (), answer: str = "ANSWER",
                 evaluate: Sequence[Any] = ()) -> None:
        self.queues: dict[str, list[Any]] = {
            "plan": list(plans), "resolve": list(resolve), "reason": list(reason),
            "evaluate": list(evaluate)}
        self.answer = answer
        self.prompts: dict[str, list[str]] = {"plan": [], "resolve": [], "reason": [],
                                               "answer": [], "evaluate": []}

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> str:
        purpose = call.purpose
        self.prompts[purpose].append(messages_text(messages))
        if purpose == "answer":
            return self.answer
        queue = self.queues[purpose]
        if not queue:
            raise AssertionError(f"no scripted {purpose} reply left")
        reply = queue.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return str(reply)

    def model(self) -> FunctionModel:
        return FunctionModel(function=self)


def plan_text(*steps: tuple[int, str, str, str]) -> str:
    out = []
    for sid, tool, args, deps in steps:
        out.append(f"#Task{sid}: do {tool}\n#Tool{sid}: {tool}\n#Args{sid}: {args}\n"
                   f"#Dependency{sid}: {deps}\n#ExpectedOutput{sid}: something\n")
    return "\n".join(out)


SITES = (1, "sites", "{}", "None")
ASSETS = (2, "assets", '{"site_name": "<step_1[0]>"}', "#S1")


def config(**sections: dict[str, Any]) -> AgentConfig:
    base: dict[str, Any] = {
        "planner": {"max_reprompts": 0},
        "executor": {"tool_retry": {"attempts": 1}},
        "model": {"retry": {"attempts": 1}},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return AgentConfig.from_dict(base)


def tools(**overrides: Any) -> dict[str, Any]:
    t = {
        "sites": fake_tool("sites", ["MAIN", "WEST"], hints=READ),
        "assets": fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str}, hints=READ),
    }
    t.update(overrides)
    return t


def calls(tool: Any) -> int:
    return int(tool.metadata["calls"].count)


async def run_agent(script: Script, toolset: dict[str, Any], cfg: AgentConfig | None = None,
                    **kw: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    agent = PlanExecuteAgent(script.model(), list(toolset.values()), config=cfg or config(),
                             event_handlers=[events.append], **kw)
    run = await agent.run("Which assets are at the first site?")
    return run, events


def decisions(events: list[Event]) -> list[tuple[str | None, str]]:
    return [(str(e.error_kind) if e.error_kind else None, e.action)
            for e in events if isinstance(e, RecoveryDecided)]


# ------------------------------------------------------------------ the happy path


async def test_a_clean_run_plans_executes_and_answers_with_usage_by_purpose() -> None:
    t = tools()
    script = Script([plan_text(SITES, ASSETS)], answer="CH-6 is at MAIN.")
    run, events = await run_agent(script, t)
    assert run.status is RunStatus.SUCCEEDED
    assert run.answer == "CH-6 is at MAIN."
    assert run.usage.llm_calls == {"plan": 1, "answer": 1}
    assert run.usage.tool_calls == 2
    assert run.usage.wall_time > 0
    kinds = [type(e) for e in events]
    assert kinds[0] is RunStarted and kinds.index(PlanCreated) < kinds.index(StepFinished)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "SUCCEEDED"
    assert "step 1 (sites) SUCCEEDED" in script.prompts["answer"][0]


# ------------------------------------------------------------------ each row of the table


async def test_plan_parse_replans_with_the_diagnostics() -> None:
    t = tools()
    script = Script(["Sorry, I cannot plan that.", plan_text(SITES)])
    run, events = await run_agent(script, t)
    assert run.status is RunStatus.SUCCEEDED
    assert run.attempts[0].plan is None
    assert decisions(events) == [("PLAN_PARSE", "REPLAN")]
    assert "no usable plan" in script.prompts["plan"][1]


async def test_unknown_tool_replans_listing_close_matches_and_keeps_succeeded_steps() -> None:
    t = tools()
    first = plan_text(SITES, (2, "asset_list", '{"site_name": "<step_1[0]>"}', "#S1"))
    second = plan_text((3, "assets", '{"site_name": "<step_1[1]>"}', "#S1"))
    script = Script([first, second])
    run, events = await run_agent(script, t)
    assert run.status is RunStatus.SUCCEEDED
    assert decisions(events) == [("UNKNOWN_TOOL", "REPLAN")]
    replan_prompt = script.prompts["plan"][1]
    assert "did you mean assets" in replan_prompt
    assert "<step_1> (sites" in replan_prompt and '["MAIN","WEST"]' in replan_prompt
    # the succeeded step was kept, referenced, and not run again
    assert calls(t["sites"]) == 1
    assert t["assets"].metadata["calls"].calls == [{"site_name": "WEST"}]
    assert len(run.attempts) == 2 and run.plan is not None and run.plan.ids == (1, 3)


async def test_args_syntax_replans() -> None:
    t = tools()
    broken = plan_text(SITES, (2, "assets", '{"site_name": "MAIN', "#S1"))
    script = Script([broken, plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t)
    assert ("ARGS_SYNTAX", "REPLAN") in decisions(events)
    assert run.status is RunStatus.SUCCEEDED
    assert calls(t["sites"]) == 1


async def test_missing_reference_replans() -> None:
    t = tools()
    bad = plan_text(SITES, (2, "assets", '{"site_name": "<step_7>"}', "None"))
    script = Script([bad, plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("MISSING_REFERENCE", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED


async def test_a_blocked_step_follows_its_cause_and_reruns_with_it() -> None:
    t = tools(sites=fake_tool("sites", ["MAIN"], error="flaky", fail_times=1, hints=READ))
    script = Script([plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t)
    assert run.status is RunStatus.SUCCEEDED
    # one decision, for the cause; the blocked step re-ran with it
    assert decisions(events) == [("TOOL_ERROR", "RETRY_STEP")]
    first_round = [r for r in run.attempts[0].results if r.step_id == 2][0]
    assert first_round.status is StepStatus.BLOCKED
    assert first_round.error_kind is ErrorKind.UPSTREAM_FAILED
    assert (calls(t["sites"]), calls(t["assets"])) == (2, 1)


async def test_resolution_failed_reresolves_with_feedback() -> None:
    t = tools()
    hinted = plan_text(SITES, (2, "assets", '{"site_name": "{step_1_selected_site}"}', "#S1"))
    script = Script([hinted], resolve=["no idea", "still no idea", '{"site_name": "MAIN"}'])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("RESOLUTION_FAILED", "RERESOLVE")]
    assert run.status is RunStatus.SUCCEEDED
    assert "Feedback on the previous attempt" in script.prompts["resolve"][2]
    assert calls(t["sites"]) == 1  # the succeeded step was not re-run
    assert t["assets"].metadata["calls"].calls == [{"site_name": "MAIN"}]


async def test_args_invalid_reresolves_with_the_validation_errors() -> None:
    t = tools(assets=fake_tool("assets", [1], args={"site_name": str, "limit": int}, hints=READ))
    bad = plan_text(SITES, ASSETS)  # "limit" is required and missing
    script = Script([bad], resolve=['{"limit": 5}'])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("ARGS_INVALID", "RERESOLVE")]
    assert run.status is RunStatus.SUCCEEDED
    assert "argument 'limit' is required" in script.prompts["resolve"][0]
    assert t["assets"].metadata["calls"].calls == [{"site_name": "MAIN", "limit": 5}]
    assert calls(t["sites"]) == 1


async def test_the_same_argument_failing_twice_replans_early() -> None:
    t = tools(assets=fake_tool("assets", [1], args={"site_name": str, "limit": int}, hints=READ))
    good = plan_text((3, "assets", '{"site_name": "<step_1[0]>", "limit": 3}', "#S1"))
    script = Script([plan_text(SITES, ASSETS), good], resolve=['{"limit": "lots"}'] * 6)
    cfg = config(recovery={"max_reresolutions_per_step": 5})
    run, events = await run_agent(script, t, cfg)
    assert decisions(events) == [
        ("ARGS_INVALID", "RERESOLVE"),
        ("RESOLUTION_FAILED", "RERESOLVE"),
        ("RESOLUTION_FAILED", "REPLAN"),  # early: 3 of the budget of 5 left unspent
    ]
    reason = [e.reason for e in events if isinstance(e, RecoveryDecided)][-1]
    assert "limit failed the same way 2 times" in reason
    assert run.status is RunStatus.SUCCEEDED
    assert calls(t["sites"]) == 1
    assert t["assets"].metadata["calls"].calls == [{"site_name": "MAIN", "limit": 3}]


async def test_a_flaky_read_only_tool_is_retried() -> None:
    t = tools(assets=fake_tool("assets", ["CH-6"], args={"site_name": str}, error="503",
                               fail_times=1, hints=READ))
    script = Script([plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("TOOL_ERROR", "RETRY_STEP")]
    assert run.status is RunStatus.SUCCEEDED
    assert (calls(t["sites"]), calls(t["assets"])) == (1, 2)


async def test_a_destructive_tool_is_never_retried() -> None:
    delete = fake_tool("delete_order", None, args={"order_id": str}, error="conflict",
                       hints={"destructive": True, "idempotent": True})
    t = tools(delete_order=delete)
    p1 = plan_text((1, "delete_order", '{"order_id": "W1"}', "None"))
    script = Script([p1, p1, p1, p1])
    cfg = AgentConfig.from_dict({"planner": {"max_reprompts": 0},
                                 "recovery": {"max_retries_per_step": 5, "max_replans": 1}})
    run, events = await run_agent(script, t, cfg)
    assert all(action != "RETRY_STEP" for _, action in decisions(events))
    # never retried by the executor or the agent, and the re-plan's exact repeat of the
    # failed call is refused (it may have taken effect): one call in all
    assert calls(delete) == 1
    assert decisions(events) == [("TOOL_ERROR", "REPLAN"), ("TOOL_ERROR", "STOP")]
    refused = run.attempts[1].results[0]
    assert refused.error_kind is ErrorKind.TOOL_ERROR and refused.attempts == 0
    assert "already failed in plan 1" in (refused.error or "")
    assert "may have taken effect" in (refused.error or "")
    assert "may have taken effect" in script.prompts["plan"][1]  # the re-plan prompt says so
    assert run.status is RunStatus.FAILED
    assert "re-plan budget (1) spent" in (run.error or "")


async def test_a_failed_destructive_call_may_be_replaced_by_a_different_call() -> None:
    delete = fake_tool("delete_order", "deleted", args={"order_id": str}, error="conflict",
                       fail_times=1, hints={"destructive": True})
    t = tools(delete_order=delete)
    script = Script([plan_text((1, "delete_order", '{"order_id": "W1"}', "None")),
                     plan_text((2, "delete_order", '{"order_id": "W2"}', "None"))])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("TOOL_ERROR", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED
    assert delete.metadata["calls"].calls == [{"order_id": "W1"}, {"order_id": "W2"}]


async def test_a_tool_of_unknown_safety_is_not_retried() -> None:
    t = tools(assets=fake_tool("assets", ["CH-6"], args={"site_name": str}, error="503",
                               fail_times=1))
    script = Script([plan_text(SITES, ASSETS), plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("TOOL_ERROR", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED
    assert calls(t["sites"]) == 1


async def test_a_tool_timeout_on_a_safe_tool_is_retried() -> None:
    seen = []

    async def slow_once(site_name: str) -> list[str]:
        seen.append(site_name)
        if len(seen) == 1:
            await asyncio.sleep(5)
        return ["CH-6"]

    t = tools(assets=fake_tool("assets", args={"site_name": str}, function=slow_once,
                               hints=READ))
    script = Script([plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t, config(executor={"tool_timeout": 0.05}))
    assert decisions(events) == [("TOOL_TIMEOUT", "RETRY_STEP")]
    assert run.status is RunStatus.SUCCEEDED and len(seen) == 2


async def test_an_empty_output_is_retried_once_then_replanned() -> None:
    t = tools(assets=fake_tool("assets", [], args={"site_name": str}, hints=READ))
    other = fake_tool("inventory", ["CH-6"], args={"site_name": str}, hints=READ)
    t["inventory"] = other
    second = plan_text((3, "inventory", '{"site_name": "<step_1[0]>"}', "#S1"))
    script = Script([plan_text(SITES, ASSETS), second])
    cfg = config(executor={"empty_output_attempts": 1}, recovery={"max_retries_per_step": 3})
    run, events = await run_agent(script, t, cfg)
    assert decisions(events) == [("EMPTY_OUTPUT", "RETRY_STEP"), ("EMPTY_OUTPUT", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED
    assert calls(t["assets"]) == 2 and calls(t["sites"]) == 1


async def test_an_empty_output_retried_by_the_executor_is_not_retried_again_by_the_agent(
) -> None:
    t = tools(assets=fake_tool("assets", [], args={"site_name": str}, hints=READ))
    cfg = config(executor={"empty_output_attempts": 2,
                           "tool_retry": {"attempts": 3, "base_delay": 0.01}},
                 recovery={"max_retries_per_step": 3, "max_replans": 0})
    run, events = await run_agent(Script([plan_text(SITES, ASSETS)]), t, cfg)
    assert decisions(events) == [("EMPTY_OUTPUT", "STOP")]
    assert "already ran the call 2 times within the step" in run.error
    assert run.status is RunStatus.FAILED
    assert calls(t["assets"]) == 2  # the executor's two attempts, no agent retry on top


async def test_a_reasoning_step_whose_model_fails_is_retried() -> None:
    from planexec.errors import ModelError

    t = tools()
    p = plan_text(SITES, (2, "none", '{"sites": "<step_1>"}', "#S1"))
    script = Script([p], reason=[ModelError("provider hiccup"), "MAIN is first"])
    run, events = await run_agent(script, t)
    assert decisions(events) == [("MODEL_ERROR", "RETRY_STEP")]
    assert run.status is RunStatus.SUCCEEDED
    assert [r.output for r in run.results if r.step_id == 2] == ["MAIN is first"]


@pytest.mark.parametrize(
    ("limits", "needle"),
    [
        ({"max_steps": 1}, "max_steps=1"),
        ({"per_tool_limits": {"assets": 0}}, "per_tool_limits['assets']=0"),
        ({"sequence_limits": [{"pattern": ["sites", "assets"], "max_repeats": 0}]},
         "sequence_limits[sites → assets]=0"),
    ],
)
async def test_a_limit_stops_the_run_saying_which(limits: dict[str, Any], needle: str) -> None:
    t = tools()
    script = Script([plan_text(SITES, ASSETS)], answer="partial")
    run, events = await run_agent(script, t, config(limits=limits))
    assert decisions(events) == [("LIMIT_EXCEEDED", "STOP")]
    assert run.status is RunStatus.FAILED
    assert run.error_kind is ErrorKind.LIMIT_EXCEEDED
    assert needle in (run.error or "")
    assert calls(t["assets"]) == 0


async def test_the_replan_budget_stops_a_run_that_keeps_hallucinating() -> None:
    t = tools()
    bad = plan_text((1, "site_list", "{}", "None"))
    script = Script([bad] * 3)
    run, events = await run_agent(script, t, config(recovery={"max_replans": 2}))
    assert decisions(events) == [("UNKNOWN_TOOL", "REPLAN")] * 2 + [("UNKNOWN_TOOL", "STOP")]
    assert len(run.attempts) == 3
    assert run.status is RunStatus.FAILED and run.error_kind is ErrorKind.UNKNOWN_TOOL
    assert len(run.lessons) == 2


async def test_a_policy_override_changes_the_action() -> None:
    t = tools(assets=fake_tool("assets", ["CH-6"], args={"site_name": str}, error="503",
                               fail_times=1, hints=READ))
    script = Script([plan_text(SITES, ASSETS), plan_text(SITES, ASSETS)])
    run, events = await run_agent(
        script, t, config(recovery={"policy": {"TOOL_ERROR": "REPLAN"}}))
    assert decisions(events) == [("TOOL_ERROR", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED


# ------------------------------------------------------------------ evaluation


async def test_a_non_success_verdict_replans_with_the_lesson_and_asks_to_decompose() -> None:
    t = tools()
    verdicts = [Verdict(EvalStatus.JOB_TOO_COMPLICATED, "one step did it all", "split it"),
                Verdict(EvalStatus.SUCCESS, "fine")]
    seen: list[EvalCase] = []

    def judge(case: EvalCase) -> Verdict:
        seen.append(case)
        return verdicts.pop(0)

    script = Script([plan_text(SITES), plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t, evaluator=FunctionEvaluator(judge))
    assert run.status is RunStatus.SUCCEEDED
    assert decisions(events) == [("EVALUATION_FAILED", "REPLAN")]
    second = script.prompts["plan"][1]
    assert "split it" in second and "decompose it further" in second
    assert seen[0].answer == "ANSWER"
    assert calls(t["sites"]) == 1


async def test_a_judge_that_fails_ends_the_run_with_evaluation_failed() -> None:
    t = tools()
    evaluator = FunctionEvaluator(
        lambda c: Verdict(EvalStatus.EXECUTION_ERROR, "unreadable", judge_error="not json"))
    script = Script([plan_text(SITES)])
    run, _ = await run_agent(script, t, evaluator=evaluator)
    assert run.status is RunStatus.FAILED and run.error_kind is ErrorKind.EVALUATION_FAILED
    assert run.answer == "ANSWER"


# ------------------------------------------------------------------ answer, no model


async def test_failed_steps_are_shown_as_failed_to_the_summarizer() -> None:
    t = tools(assets=fake_tool("assets", None, args={"site_name": str}, error="down"))
    script = Script([plan_text(SITES, ASSETS)], answer="Could not list the assets.")
    run, _ = await run_agent(script, t, config(recovery={"max_replans": 0}))
    assert run.status is RunStatus.FAILED
    assert run.answer == "Could not list the assets."
    prompt = script.prompts["answer"][0]
    assert "step 2 (assets) FAILED TOOL_ERROR" in prompt and "NOT evidence" in prompt


async def test_without_a_model_a_given_plan_runs_and_returns_structured_results() -> None:
    t = tools()
    agent = PlanExecuteAgent(None, list(t.values()))
    run = await agent.execute_plan(plan_text(SITES, ASSETS))
    assert run.status is RunStatus.SUCCEEDED and run.answer is None
    assert [r.output for r in sorted(run.results, key=lambda r: r.step_id)] == [
        ["MAIN", "WEST"], [{"id": "CH-6"}]]
    assert run.usage.total_llm_calls == 0
    with pytest.raises(RunError):
        await agent.run("q")


async def test_without_a_planner_a_replan_stops() -> None:
    t = tools()
    agent = PlanExecuteAgent(None, list(t.values()))
    run = await agent.execute_plan(plan_text((1, "site_list", "{}", "None")))
    assert run.status is RunStatus.FAILED
    assert "no planner" in (run.error or "")


def test_run_sync_returns_the_run() -> None:
    t = tools()
    agent = PlanExecuteAgent(Script([plan_text(SITES)]).model(), list(t.values()))
    assert agent.run_sync("q").status is RunStatus.SUCCEEDED


# ------------------------------------------------------------------ streaming, cancel


async def test_stream_yields_typed_events_as_they_happen() -> None:
    t = tools()
    agent = PlanExecuteAgent(Script([plan_text(SITES, ASSETS)]).model(), list(t.values()),
                             config=config())
    types = [e.type async for e in agent.stream("q")]
    assert types[0] == "RunStarted" and types[-1] == "RunFinished"
    assert types.count("StepFinished") == 2 and "ToolCallStarted" in types
    assert agent.last_run is not None and agent.last_run.status is RunStatus.SUCCEEDED


async def test_cancelling_a_run_marks_running_steps_and_the_run_cancelled() -> None:
    started = asyncio.Event()

    async def wait_forever(site_name: str) -> list[str]:
        started.set()
        await asyncio.sleep(30)
        return []

    t = tools(assets=fake_tool("assets", args={"site_name": str}, function=wait_forever,
                               hints=READ))
    finished: list[RunFinished] = []

    def on_event(e: Event) -> None:
        if isinstance(e, RunFinished):
            finished.append(e)

    agent = PlanExecuteAgent(Script([plan_text(SITES, ASSETS)]).model(), list(t.values()),
                             config=config(), event_handlers=[on_event])
    task = asyncio.create_task(agent.run("q"))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    run = agent.last_run
    assert run is not None and run.status is RunStatus.CANCELLED
    assert run.error_kind is ErrorKind.CANCELLED
    step2 = [r for r in run.results if r.step_id == 2][0]
    assert step2.status is StepStatus.CANCELLED
    step1 = [r for r in run.results if r.step_id == 1][0]
    assert step1.status is StepStatus.SUCCEEDED  # what finished before the cancel is kept
    assert finished and finished[0].status == "CANCELLED"


async def test_closing_a_stream_early_cancels_the_run() -> None:
    async def wait_forever(site_name: str) -> list[str]:
        await asyncio.sleep(30)
        return []

    t = tools(assets=fake_tool("assets", args={"site_name": str}, function=wait_forever,
                               hints=READ))
    agent = PlanExecuteAgent(Script([plan_text(SITES, ASSETS)]).model(), list(t.values()),
                             config=config())
    stream = agent.stream("q")
    async for event in stream:
        if isinstance(event, ToolCallStarted) and event.tool == "assets":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    assert agent.last_run is not None and agent.last_run.status is RunStatus.CANCELLED


# ------------------------------------------------------------------ model resilience


async def test_a_model_timeout_fails_the_run_with_model_error() -> None:
    from planexec.testing import ScriptedChatModel

    model = ScriptedChatModel(replies=[plan_text(SITES)], delay=2.0)
    cfg = config(model={"timeout": 0.05})
    agent = PlanExecuteAgent(model, list(tools().values()), config=cfg)
    run = await agent.run("q")
    assert run.status is RunStatus.FAILED and run.error_kind is ErrorKind.MODEL_ERROR
    assert "timed out" in (run.error or "")


async def test_transient_model_errors_are_retried_then_the_breaker_opens() -> None:
    from planexec.testing import ScriptedChatModel

    model = ScriptedChatModel(replies=[TimeoutError("t1"), TimeoutError("t2")])
    cfg = AgentConfig.from_dict({"model": {"retry": {"attempts": 2, "base_delay": 0.0,
                                                     "jitter": 0.0},
                                           "breaker_failure_threshold": 2,
                                           "breaker_recovery_time": 60}})
    breakers = BreakerRegistry(2, 60)
    agent = PlanExecuteAgent(model, list(tools().values()), config=cfg, breakers=breakers)
    run = await agent.run("q")
    assert run.status is RunStatus.FAILED and model.calls == 2
    assert run.usage.llm_calls == {"plan": 2}
    assert "open" in breakers.states().values()
    again = await agent.run("q")
    assert again.error_kind is ErrorKind.CIRCUIT_OPEN and model.calls == 2


# ------------------------------------------------------------------ typed output hook


class SiteCount(BaseModel):
    site: str
    count: int


async def test_an_output_type_is_filled_by_a_final_answer_step() -> None:
    t = tools()
    p = plan_text(SITES, (2, "final_answer", '{"site": "<step_1[0]>", "count": 2}', "#S1"))
    script = Script([p])
    run, _ = await run_agent(script, t, AgentConfig(), output_type=SiteCount)
    assert run.status is RunStatus.SUCCEEDED
    assert run.output == SiteCount(site="MAIN", count=2)
    assert "final_answer" in script.prompts["plan"][0]


async def test_steps_finished_events_carry_the_results_of_the_run() -> None:
    t = tools(assets=fake_tool("assets", None, args={"site_name": str}, error="503"))
    script = Script([plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, t, config(recovery={"max_replans": 0}))
    finished = [e for e in events if isinstance(e, StepFinished)]
    assert [(e.plan_version, e.result.step_id, e.result.tool, e.result.status)
            for e in finished] == [(1, 1, "sites", StepStatus.SUCCEEDED),
                                   (1, 2, "assets", StepStatus.FAILED)]
    assert [e.result for e in finished] == run.attempts[0].results
    assert finished[0].result.output == ["MAIN", "WEST"]
    assert finished[1].result.error_kind is ErrorKind.TOOL_ERROR
    assert finished[1].result.args == {"site_name": "MAIN"}
    assert all(e.run_id == run.run_id for e in finished)


async def test_a_reply_without_a_plan_is_recorded_with_why() -> None:
    script = Script(["Sorry, I cannot plan that.", plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, tools())
    assert run.status is RunStatus.SUCCEEDED
    first, second = run.attempts
    assert first.plan is None and first.error and first.text == "Sorry, I cannot plan that."
    assert first.to_dict()["error"] == first.error
    assert second.plan is not None and second.error is None and second.drafts == []
    created = [e for e in events if isinstance(e, PlanCreated)]
    assert created[0].error == first.error


async def test_rejected_planner_drafts_are_kept_with_their_problems() -> None:
    bad = plan_text((1, "sitez", "{}", "None"))
    script = Script([bad, plan_text(SITES, ASSETS)])
    run, events = await run_agent(script, tools(), config(planner={"max_reprompts": 1}))
    assert run.status is RunStatus.SUCCEEDED
    [attempt] = run.attempts
    [draft] = attempt.drafts
    assert draft["text"] == bad
    assert any("sitez" in p for p in draft["problems"])
    assert attempt.error is None
    assert attempt.to_dict()["drafts"] == [draft]
    created = next(e for e in events if isinstance(e, PlanCreated))
    assert list(created.drafts) == [draft]



async def test_a_store_observes_the_run_through_the_bus() -> None:
    store_mod = pytest.importorskip("planexec.store")
    store = store_mod.MemoryRunStore()
    agent = PlanExecuteAgent(Script([plan_text(SITES, ASSETS)]).model(), list(tools().values()),
                             config=config(), store=store)
    run = await agent.run("q")
    record = store.get_run(run.run_id)
    assert str(record.status) == "SUCCEEDED" or record.status == RunStatus.SUCCEEDED
    assert len(store.step_results(run.run_id)) == 2


async def test_an_llm_judge_in_the_loop_counts_evaluate_calls_and_replans() -> None:
    from planexec.evaluation import LLMJudge

    t = tools()
    script = Script(
        [plan_text(SITES), plan_text(SITES, ASSETS)],
        evaluate=['{"status": "INPUT_DATA_ERROR", "evaluation": "no assets", '
                  '"lesson": "also list the assets"}',
                  '{"status": "SUCCESS", "evaluation": "ok", "lesson": ""}'],
    )
    model = script.model()
    agent = PlanExecuteAgent(model, list(t.values()), config=config(),
                             evaluator=LLMJudge(model))
    run = await agent.run("q")
    assert run.status is RunStatus.SUCCEEDED
    assert run.usage.llm_calls == {"plan": 2, "answer": 2, "evaluate": 2}
    assert "also list the assets" in script.prompts["plan"][1]
    assert run.lessons[-1].startswith("evaluator (INPUT_DATA_ERROR)")


async def test_a_streaming_model_call_is_bounded_by_the_timeout() -> None:
    from planexec.testing import ScriptedChatModel

    model = ScriptedChatModel(replies=[plan_text(SITES)], delay=2.0)
    cfg = config(model={"timeout": 0.05, "stream": True})
    run = await PlanExecuteAgent(model, list(tools().values()), config=cfg).run("q")
    assert run.status is RunStatus.FAILED and run.error_kind is ErrorKind.MODEL_ERROR


# ------------------------------------------------------------------ review findings (4/9)


async def test_execute_plan_with_a_model_does_not_replan_a_failure() -> None:
    t = tools(assets=fake_tool("assets", None, args={"site_name": str}, error="down"))
    script = Script([plan_text(SITES)], answer="could not list them")
    agent = PlanExecuteAgent(script.model(), list(t.values()), config=config())
    run = await agent.execute_plan(plan_text(SITES, ASSETS), question="Which assets?")
    assert run.status is RunStatus.FAILED and run.error_kind is ErrorKind.TOOL_ERROR
    assert "no planner" in (run.error or "") and "execute_plan" in (run.error or "")
    assert script.prompts["plan"] == []  # the planner was never asked
    assert len(run.attempts) == 1
    assert run.answer == "could not list them"  # the model still writes the answer


async def test_run_may_still_replan_after_execute_plan_refused_to() -> None:
    t = tools(assets=fake_tool("assets", ["CH-6"], args={"site_name": str}, error="down",
                               fail_times=1))
    script = Script([plan_text(SITES, ASSETS)])
    agent = PlanExecuteAgent(script.model(), list(t.values()), config=config())
    given = await agent.execute_plan(plan_text(SITES, ASSETS))
    assert given.status is RunStatus.FAILED
    run = await agent.run("q")
    assert run.status is RunStatus.SUCCEEDED and len(script.prompts["plan"]) == 1


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"limits": {"per_tool_limits": {"asets": 1}}}, "limits.per_tool_limits['asets']"),
        ({"limits": {"sequence_limits": [{"pattern": ["sites", "asets"], "max_repeats": 0}]}},
         "limits.sequence_limits[0].pattern"),
        ({"executor": {"tool_timeouts": {"asets": 0.5}}}, "executor.tool_timeouts['asets']"),
    ],
)
def test_a_misspelled_tool_name_in_the_config_is_rejected_with_close_names(
    section: dict[str, Any], key: str
) -> None:
    from planexec.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        PlanExecuteAgent(None, list(tools().values()), config=AgentConfig.from_dict(section))
    message = str(err.value)
    assert key in message and "unknown tool 'asets'" in message
    assert "did you mean 'assets'" in message


async def test_a_limit_may_name_a_tool_by_its_qualified_server_name() -> None:
    remote = fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str},
                       hints={"read_only": True, "server": "iot"})
    t = tools(assets=remote)
    cfg = config(limits={"per_tool_limits": {"iot.assets": 0}},
                 executor={"tool_timeouts": {"iot.assets": 5.0}})
    run, events = await run_agent(Script([plan_text(SITES, ASSETS)]), t, cfg)
    assert run.error_kind is ErrorKind.LIMIT_EXCEEDED
    assert "per_tool_limits['iot.assets']=0" in (run.error or "")
    assert calls(remote) == 0


async def test_an_llm_judge_gets_the_agents_model_timeout() -> None:
    from planexec.evaluation import LLMJudge
    from planexec.testing import ScriptedChatModel

    judge = ScriptedChatModel(
        replies=['{"status": "SUCCESS", "evaluation": "ok", "lesson": ""}'], delay=2.0)
    cfg = config(model={"timeout": 0.05})
    agent = PlanExecuteAgent(Script([plan_text(SITES)]).model(), list(tools().values()),
                             config=cfg, evaluator=LLMJudge(judge))
    run = await agent.run("q")
    assert run.status is RunStatus.FAILED and run.error_kind is ErrorKind.EVALUATION_FAILED
    assert "timed out after 0.05s" in (run.error or "")
    assert run.usage.llm_calls["evaluate"] == 1  # counted in the run's usage


async def test_an_llm_judge_error_is_retried_like_any_model_call() -> None:
    from planexec.evaluation import LLMJudge
    from planexec.testing import ScriptedChatModel

    judge = ScriptedChatModel(
        replies=[TimeoutError("busy"), '{"status": "SUCCESS", "evaluation": "ok"}'])
    cfg = config(model={"retry": {"attempts": 2, "base_delay": 0.0, "jitter": 0.0}})
    agent = PlanExecuteAgent(Script([plan_text(SITES)]).model(), list(tools().values()),
                             config=cfg, evaluator=LLMJudge(judge))
    run = await agent.run("q")
    assert run.status is RunStatus.SUCCEEDED and judge.calls == 2


async def test_a_flaky_local_tool_opens_only_its_own_breaker() -> None:
    flaky = fake_tool("flaky", "x", args={"site_name": str}, error="503", hints=READ)
    t = tools(flaky=flaky)
    first = plan_text(SITES, (2, "flaky", '{"site_name": "<step_1[0]>"}', "#S1"))
    second = plan_text((3, "assets", '{"site_name": "<step_1[0]>"}', "#S1"))
    breakers = BreakerRegistry(failure_threshold=2, recovery_time=60)
    cfg = config(executor={"tool_retry": {"attempts": 2, "base_delay": 0.0, "jitter": 0.0}})
    run, events = await run_agent(Script([first, second]), t, cfg, breakers=breakers)
    assert run.status is RunStatus.SUCCEEDED
    assert calls(t["assets"]) == 1
    tool_states = {k: v for k, v in breakers.states().items() if k.startswith("tool:")}
    assert tool_states == {"tool:local:assets": "closed", "tool:local:flaky": "open",
                           "tool:local:sites": "closed"}


async def test_circuit_open_replans_naming_the_open_tools_or_stops_when_all_are_open() -> None:
    breakers = BreakerRegistry(failure_threshold=1, recovery_time=60)
    breakers.tool(None, "assets").record_failure()
    t = tools()
    other = fake_tool("inventory", ["CH-6"], args={"site_name": str}, hints=READ)
    script = Script([plan_text(SITES, ASSETS),
                     plan_text((3, "inventory", '{"site_name": "<step_1[0]>"}', "#S1"))])
    run, events = await run_agent(script, {**t, "inventory": other}, breakers=breakers)
    assert decisions(events) == [("CIRCUIT_OPEN", "REPLAN")]
    assert "do not use them): assets" in script.prompts["plan"][1]
    assert run.status is RunStatus.SUCCEEDED

    for name in ("sites", "inventory"):
        breakers.tool(None, name).record_failure()
    script = Script([plan_text(SITES)])
    run, events = await run_agent(script, {**t, "inventory": other}, breakers=breakers)
    assert decisions(events) == [("CIRCUIT_OPEN", "STOP")]
    assert run.error_kind is ErrorKind.CIRCUIT_OPEN
    assert "every tool of the catalog is behind an open circuit breaker" in (run.error or "")
    assert len(script.prompts["plan"]) == 1  # no re-plan was asked for


async def test_tokens_are_counted_by_purpose() -> None:
    script = Script([plan_text(SITES)])
    model = FunctionModel(function=script, usage={"input_tokens": 20, "output_tokens": 10})
    run = await PlanExecuteAgent(model, list(tools().values()), config=config()).run("q")
    assert run.usage.tokens == {"input": 40, "output": 20, "total": 60}
    assert run.usage.tokens_by_purpose == {
        "plan": {"input": 20, "output": 10, "total": 30},
        "answer": {"input": 20, "output": 10, "total": 30},
    }
    assert run.usage.to_dict()["tokens_by_purpose"]["plan"]["total"] == 30


@pytest.mark.parametrize("status", [EvalStatus.EXECUTION_ERROR, EvalStatus.INPUT_DATA_ERROR])
async def test_results_judged_wrong_are_not_kept_for_the_replan(status: EvalStatus) -> None:
    t = tools()
    verdicts = [Verdict(status, "the site list is stale", "list the sites again"),
                Verdict(EvalStatus.SUCCESS, "fine")]
    script = Script([plan_text(SITES), plan_text(SITES, ASSETS)])
    run, _ = await run_agent(script, t, evaluator=FunctionEvaluator(lambda c: verdicts.pop(0)))
    assert run.status is RunStatus.SUCCEEDED
    prompt = script.prompts["plan"][1]
    kept = prompt.split("reference them as <step_N>):", 1)[1].split("Steps that failed", 1)[0]
    assert kept.strip() == "(none)"
    assert "judged the results wrong" in prompt
    assert calls(t["sites"]) == 2  # redone, not reused


async def test_a_plan_that_keeps_its_problems_after_the_reprompts_is_reported() -> None:
    from planexec.events import FallbackUsed

    bad = plan_text((1, "site_list", "{}", "None"))
    script = Script([bad, plan_text(SITES)])
    run, events = await run_agent(script, tools())  # max_reprompts = 0
    remain = [e for e in events if isinstance(e, FallbackUsed)
              and e.code == "PLAN_PROBLEMS_REMAIN"]
    assert len(remain) == 1 and "site_list" in remain[0].message
    assert run.status is RunStatus.SUCCEEDED
