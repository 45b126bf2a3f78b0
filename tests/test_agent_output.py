from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from pydantic import BaseModel, field_validator

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ConfigError, ErrorKind
from planexec.events import Event, RecoveryDecided, StepFinished
from planexec.output import OUTPUT_TOOL
from planexec.results import ResolutionMethod, RunStatus, StepStatus
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text

READ = {"read_only": True}
QUESTION = "Which chiller at the first site needs attention?"


class Script:
    """Replies by each call's purpose (`ModelCall`); records every prompt."""

    def __init__(self, plans: Sequence[str], resolve: Sequence[str] = ()) -> None:
        self.queues: dict[str, list[str]] = {"plan": list(plans), "resolve": list(resolve)}
        self.prompts: dict[str, list[str]] = {"plan": [], "resolve": [], "answer": []}

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> str:
        purpose = call.purpose
        self.prompts[purpose].append(messages_text(messages))
        if purpose == "answer":
            return "Chiller 6 at MAIN needs attention."
        if not self.queues[purpose]:
            raise AssertionError(f"no scripted {purpose} reply left")
        return self.queues[purpose].pop(0)


class Attention(BaseModel):
    site: str
    asset_id: str
    unit: str = "C"

    @field_validator("unit")
    @classmethod
    def _known_unit(cls, value: str) -> str:
        if value not in ("C", "F"):
            raise ValueError("unit must be C or F")
        return value


def step(sid: int, tool: str, args: str, deps: str = "None") -> str:
    return (
        f"#Task{sid}: do {tool}\n#Tool{sid}: {tool}\n#Args{sid}: {args}\n"
        f"#Dependency{sid}: {deps}\n#ExpectedOutput{sid}: something\n"
    )


def plan(*steps: str) -> str:
    return "\n".join(steps)


SITES = step(1, "sites", "{}")
ASSETS = step(2, "assets", '{"site_name": "<step_1[0]>"}', "#S1")
# step 3 passes on the asset it is given: the value of asset_id is produced by step 2
PICK = step(3, "pick", '{"asset": "<step_2[1]>"}', "#S2")


def final(asset_ref: str = "<step_3.asset.id>", sid: int = 4, **extra: str) -> str:
    args = {"site": '"<step_1[0]>"', "asset_id": f'"{asset_ref}"', **extra}
    body = ", ".join(f'"{k}": {v}' for k, v in args.items())
    return step(sid, OUTPUT_TOOL, "{" + body + "}", "#S1, #S3")


GOOD = plan(SITES, ASSETS, PICK, final())
# the mapping is wired to the wrong asset: step 2's first item instead of step 3's pick
MISWIRED = plan(SITES, ASSETS, PICK, final("<step_2[0].id>"))


def tools() -> dict[str, Any]:
    return {
        "sites": fake_tool("sites", ["MAIN", "WEST"], hints=READ),
        "assets": fake_tool(
            "assets", [{"id": "CH-5"}, {"id": "CH-6"}], args={"site_name": str}, hints=READ
        ),
        "pick": fake_tool(
            "pick", args={"asset": dict}, function=lambda asset: {"asset": asset}, hints=READ
        ),
    }


def config(**recovery: Any) -> AgentConfig:
    return AgentConfig.from_dict(
        {
            "planner": {"max_reprompts": 0},
            "executor": {"tool_retry": {"attempts": 1}},
            "model": {"retry": {"attempts": 1}},
            "recovery": recovery,
        }
    )


def calls(tool: Any) -> int:
    return int(tool.metadata["calls"].count)


async def run_agent(
    script: Script,
    toolset: dict[str, Any],
    cfg: AgentConfig | None = None,
    *,
    agent_type: type[BaseModel] | None = None,
    **run_kwargs: Any,
) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    agent = PlanExecuteAgent(
        FunctionModel(function=script),
        list(toolset.values()),
        config=cfg or config(),
        output_type=agent_type,
        event_handlers=[events.append],
    )
    run = await agent.run(QUESTION, **run_kwargs)
    return run, events


def decisions(events: list[Event]) -> list[tuple[str | None, str]]:
    return [
        (str(e.error_kind) if e.error_kind else None, e.action)
        for e in events
        if isinstance(e, RecoveryDecided)
    ]


def feedback_section(prompt: str) -> str:
    return prompt.split("## Feedback on the previous attempt", 1)[1]


# ------------------------------------------------------------------ the happy path


async def test_a_typed_run_fills_the_output_and_keeps_the_prose_answer() -> None:
    script = Script([GOOD])
    run, events = await run_agent(script, tools(), output_type=Attention)
    assert run.status is RunStatus.SUCCEEDED
    assert run.output == Attention(site="MAIN", asset_id="CH-6")
    assert run.answer == "Chiller 6 at MAIN needs attention."
    assert f"#ToolN: {OUTPUT_TOOL}" in script.prompts["plan"][0]
    assert "- asset_id: str (required)" in script.prompts["plan"][0]
    final_result = run.attempts[0].results[-1]
    assert final_result.tool == OUTPUT_TOOL and final_result.output == run.output
    finished = [e.result.step_id for e in events if isinstance(e, StepFinished)]
    assert finished[-1] == 4


async def test_the_agents_output_type_applies_and_a_run_may_override_it() -> None:
    class SiteOnly(BaseModel):
        site: str

    only_site = plan(SITES, step(2, OUTPUT_TOOL, '{"site": "<step_1[1]>"}', "#S1"))
    run, _ = await run_agent(Script([only_site]), tools(), agent_type=Attention,
                             output_type=SiteOnly)
    assert run.output == SiteOnly(site="WEST")
    run, _ = await run_agent(Script([GOOD]), tools(), agent_type=Attention)
    assert isinstance(run.output, Attention)


async def test_expected_values_need_an_output_type_with_those_fields() -> None:
    with pytest.raises(ConfigError, match="without an output_type"):
        await run_agent(Script([GOOD]), tools(), expected={"site": "MAIN"})
    with pytest.raises(ConfigError, match="'asset' are not fields of Attention"):
        await run_agent(Script([GOOD]), tools(), output_type=Attention, expected={"asset": 1})


# ------------------------------------------------------------------ plan time


async def test_a_plan_without_the_final_mapping_is_replanned_with_that_feedback() -> None:
    t = tools()
    script = Script([plan(SITES, ASSETS, PICK), GOOD])
    run, events = await run_agent(script, t, output_type=Attention)
    assert decisions(events) == [("OUTPUT_MISSING_STEP", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED and run.output.asset_id == "CH-6"
    assert len(run.attempts) == 2 and run.attempts[0].results == []
    assert calls(t["sites"]) == 1  # rejected at plan time: nothing of plan 1 ran
    assert "the plan has no final mapping step" in script.prompts["plan"][1]


async def test_a_final_mapping_with_missing_fields_is_replanned_naming_them() -> None:
    partial = plan(SITES, ASSETS, PICK, step(4, OUTPUT_TOOL, '{"site": "<step_1[0]>"}', "#S1"))
    script = Script([partial, GOOD])
    run, events = await run_agent(script, tools(), output_type=Attention)
    assert decisions(events) == [("OUTPUT_ARGS_MISSING", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED
    assert "required field(s) 'asset_id' of Attention unfilled" in script.prompts["plan"][1]


async def test_plan_time_rejections_count_against_the_replan_budget() -> None:
    missing = plan(SITES, ASSETS)
    run, events = await run_agent(
        Script([missing, missing]), tools(), config(max_replans=1), output_type=Attention
    )
    assert decisions(events) == [("OUTPUT_MISSING_STEP", "REPLAN"), ("OUTPUT_MISSING_STEP", "STOP")]
    assert run.status is RunStatus.FAILED
    assert run.error_kind is ErrorKind.OUTPUT_MISSING_STEP
    assert run.output is None


async def test_a_given_plan_without_the_final_mapping_stops_without_a_planner() -> None:
    agent = PlanExecuteAgent(None, list(tools().values()), config=config())
    run = await agent.execute_plan(plan(SITES, ASSETS), output_type=Attention)
    assert run.status is RunStatus.FAILED
    assert run.error_kind is ErrorKind.OUTPUT_MISSING_STEP


async def test_a_given_plan_with_the_final_mapping_runs_without_a_model() -> None:
    agent = PlanExecuteAgent(None, list(tools().values()), config=config())
    run = await agent.execute_plan(GOOD, output_type=Attention)
    assert run.status is RunStatus.SUCCEEDED
    assert run.output == Attention(site="MAIN", asset_id="CH-6")
    assert run.plan is not None and not run.plan.errors  # final_answer is a known tool


# ------------------------------------------------------------------ OUTPUT_INVALID


# the unit taken from a reference is invalid (an asset id is no unit)
BAD_UNIT = plan(SITES, ASSETS, PICK, final(unit='"<step_3.asset.id>"'))


async def test_an_invalid_output_reresolves_the_mapping_only_with_the_validation_errors() -> None:
    t = tools()
    bad_unit = BAD_UNIT
    script = Script([bad_unit], resolve=['{"unit": "C"}'])
    run, events = await run_agent(script, t, output_type=Attention)
    assert decisions(events) == [("OUTPUT_INVALID", "RERESOLVE")]
    assert run.status is RunStatus.SUCCEEDED
    assert run.output == Attention(site="MAIN", asset_id="CH-6", unit="C")
    assert [calls(t[n]) for n in ("sites", "assets", "pick")] == [1, 1, 1]
    assert "unit must be C or F" in feedback_section(script.prompts["resolve"][0])
    finals = [r for r in run.attempts[0].results if r.tool == OUTPUT_TOOL]
    assert [r.error_kind for r in finals] == [ErrorKind.OUTPUT_INVALID, None]
    assert finals[1].resolution["unit"] is ResolutionMethod.LLM
    assert len(script.prompts["plan"]) == 1


async def test_an_invalid_literal_in_the_mapping_replans_without_asking_the_llm() -> None:
    t = tools()
    fixed = step(5, OUTPUT_TOOL, '{"site": "<step_1[0]>", "asset_id": "<step_3.asset.id>"}',
                 "#S1, #S3")
    script = Script([plan(SITES, ASSETS, PICK, final(unit='"kelvin"')), fixed])
    run, events = await run_agent(script, t, output_type=Attention)
    assert decisions(events) == [("OUTPUT_INVALID", "REPLAN")]
    assert script.prompts["resolve"] == []  # "kelvin" is the plan's: never the model's to change
    assert run.status is RunStatus.SUCCEEDED and run.output.unit == "C"


async def test_an_output_that_stays_invalid_replans_keeping_the_succeeded_steps() -> None:
    t = tools()
    bad_unit = BAD_UNIT
    fixed = step(5, OUTPUT_TOOL, '{"site": "<step_1[0]>", "asset_id": "<step_3.asset.id>"}',
                 "#S1, #S3")
    # the fallback's own retry gets an unusable value twice: same field again → re-plan
    script = Script([bad_unit, fixed], resolve=['{"unit": "K"}', '{"unit": "K"}'])
    run, events = await run_agent(script, t, output_type=Attention)
    assert decisions(events) == [("OUTPUT_INVALID", "RERESOLVE"), ("OUTPUT_INVALID", "REPLAN")]
    assert run.status is RunStatus.SUCCEEDED and run.output.unit == "C"
    assert calls(t["pick"]) == 1  # kept: an invalid mapping says nothing against the data
    assert len(script.prompts["resolve"]) == 2
    assert "<step_3> (pick" in script.prompts["plan"][1]


# ------------------------------------------------------------------ OUTPUT_UNEXPECTED


async def test_a_miswired_field_is_fixed_by_reresolving_the_mapping_first() -> None:
    t = tools()
    script = Script([MISWIRED], resolve=['{"asset_id": "CH-6"}'])
    run, events = await run_agent(
        script, t, output_type=Attention, expected={"asset_id": "CH-6", "site": "MAIN"}
    )
    assert decisions(events) == [("OUTPUT_UNEXPECTED", "RERESOLVE")]
    assert run.status is RunStatus.SUCCEEDED and run.output.asset_id == "CH-6"
    assert [calls(t[n]) for n in ("sites", "assets", "pick")] == [1, 1, 1]
    first = run.attempts[0].results[-2]
    assert first.error_kind is ErrorKind.OUTPUT_UNEXPECTED
    assert "field 'asset_id'" in (first.error or "") and "step 2 (assets)" in (first.error or "")
    feedback = feedback_section(script.prompts["resolve"][0])
    assert '"CH-5" is wrong' in feedback and "CH-6" not in feedback


async def test_the_same_fields_failing_twice_replan_early_from_scratch_with_the_blame() -> None:
    t = tools()
    # re-resolution gives the same wrong value: the early re-plan comes before the
    # re-resolution budget (2 per step) is spent
    script = Script([MISWIRED, plan(step(5, "sites", "{}"), step(6, "assets",
                    '{"site_name": "<step_5[0]>"}', "#S5"), step(7, "pick",
                    '{"asset": "<step_6[1]>"}', "#S6"), final("<step_7.asset.id>", 8)
                    .replace("<step_1[0]>", "<step_5[0]>").replace("#S1, #S3", "#S5, #S7"))],
                    resolve=['{"asset_id": "CH-5"}'])
    run, events = await run_agent(script, t, output_type=Attention, expected={"asset_id": "CH-6"})
    assert decisions(events) == [
        ("OUTPUT_UNEXPECTED", "RERESOLVE"),
        ("OUTPUT_UNEXPECTED", "REPLAN"),
    ]
    replan = next(e for e in events if isinstance(e, RecoveryDecided) and e.action == "REPLAN")
    assert "asset_id failed the same way 2 times" in replan.reason
    assert run.status is RunStatus.SUCCEEDED and run.output.asset_id == "CH-6"
    prompt = script.prompts["plan"][1]
    assert "field 'asset_id' came from step 2 (assets)" in prompt
    assert "Re-planning from scratch" in prompt
    assert "Steps that succeeded (their results are kept" in prompt
    kept = prompt.split("reference them as <step_N>):", 1)[1].split("Steps that failed", 1)[0]
    assert kept.strip() == "(none)"  # nothing is kept
    assert "CH-6" not in prompt.split("Why:", 1)[1].split("Previous plan:", 1)[0]
    assert [calls(t[n]) for n in ("sites", "assets", "pick")] == [2, 2, 2]


async def test_fields_still_wrong_after_the_reresolution_budget_replan() -> None:
    script = Script([MISWIRED, GOOD], resolve=['{"asset_id": "CH-5"}'])
    run, events = await run_agent(
        script,
        tools(),
        config(early_replan=False, max_reresolutions_per_step=1),
        output_type=Attention,
        expected={"asset_id": "CH-6"},
    )
    assert decisions(events) == [
        ("OUTPUT_UNEXPECTED", "RERESOLVE"),
        ("OUTPUT_UNEXPECTED", "REPLAN"),
    ]
    replan = [e for e in events if isinstance(e, RecoveryDecided)][-1]
    assert "re-resolution budget (1 per step) spent" in replan.reason
    assert run.status is RunStatus.SUCCEEDED


async def test_an_output_still_unexpected_when_the_budgets_are_spent_fails_the_run() -> None:
    run, events = await run_agent(
        Script([MISWIRED], resolve=['{"asset_id": "CH-5"}']),
        tools(),
        config(max_replans=0),
        output_type=Attention,
        expected={"asset_id": "CH-6"},
    )
    assert decisions(events)[-1] == ("OUTPUT_UNEXPECTED", "STOP")
    assert run.status is RunStatus.FAILED
    assert run.error_kind is ErrorKind.OUTPUT_UNEXPECTED
    assert run.output == Attention(site="MAIN", asset_id="CH-5")  # kept for inspection
    assert "step 2 (assets)" in (run.error or "")


async def test_the_blame_follows_two_levels_of_references_to_the_producing_step() -> None:
    # asset_id <- step 4 arg <step_3.asset.id> <- step 3 got it as <step_2[1]> <- step 2
    run, _ = await run_agent(
        Script([GOOD], resolve=['{"asset_id": "CH-6"}']),
        tools(),
        config(max_replans=0, max_reresolutions_per_step=0),
        output_type=Attention,
        expected={"asset_id": "CH-7"},
    )
    final_result = run.attempts[0].results[-1]
    assert final_result.status is StepStatus.FAILED
    assert final_result.error_kind is ErrorKind.OUTPUT_UNEXPECTED
    assert (
        "field 'asset_id' ← step 4 (final_answer) arg 'asset_id' = <step_3.asset.id> ← step 3 "
        "(pick) arg 'asset' = <step_2[1]> ← step 2 (assets): produced the value"
    ) in (final_result.error or "")


# ------------------------------------------------------------------ the demo


async def test_the_typed_demo_question_is_answered_as_its_model_from_recorded_replies() -> None:
    import json

    from planexec._loading import load_object
    from planexec.examples import example_path
    from planexec.examples.models import SensorWeek
    from planexec.examples.questions import TYPED_DEMO_QUESTIONS
    from planexec.examples.tools import demo_tools
    from planexec.testing import ScriptedChatModel

    (q,) = TYPED_DEMO_QUESTIONS
    replies = json.loads(example_path(q["replies"]).read_text(encoding="utf-8"))
    model = ScriptedChatModel(replies=replies)
    agent = PlanExecuteAgent(model, demo_tools(), output_type=load_object(q["output_type"]))
    run = await agent.run(q["question"], expected=q["expected"])
    assert run.status is RunStatus.SUCCEEDED, run.error
    assert isinstance(run.output, SensorWeek)
    assert run.output.asset_name == "Chiller 6" and run.output.mean_value == 44.08
    assert run.answer == replies[-1]
    assert len(model.requests) == len(replies)
    assert run.usage.llm_calls == {"plan": 1, "answer": 1}  # the hinted id: filter tier


async def test_a_new_plans_mapping_is_reresolved_first_even_if_the_same_field_failed_before() -> (
    None
):
    # plan 1: wrong, re-resolved to the same wrong value -> early re-plan; plan 2 is wired
    # the same wrong way: its own mapping is re-resolved first (per plan), and that fixes it
    script = Script([MISWIRED, MISWIRED], resolve=['{"asset_id": "CH-5"}',
                                                   '{"asset_id": "CH-6"}'])
    run, events = await run_agent(script, tools(), output_type=Attention,
                                  expected={"asset_id": "CH-6"})
    assert decisions(events) == [
        ("OUTPUT_UNEXPECTED", "RERESOLVE"),
        ("OUTPUT_UNEXPECTED", "REPLAN"),  # the same field failed twice in a row in plan 1
        ("OUTPUT_UNEXPECTED", "RERESOLVE"),  # plan 2's mapping: re-resolved first
    ]
    assert len(script.prompts["resolve"]) == 2
    assert run.status is RunStatus.SUCCEEDED and run.output.asset_id == "CH-6"
    assert [a.version for a in run.attempts] == [1, 2]
