from __future__ import annotations

from pydantic import BaseModel, Field

from planexec._models import ModelClient
from planexec.errors import ErrorKind
from planexec.events import EventBus, FallbackUsed
from planexec.plan import Step
from planexec.planner import Planner, ReplanContext, fill, schema_fields
from planexec.results import StepResult, StepStatus, Usage
from planexec.testing import ScriptedChatModel, fake_tool, messages_text
from planexec.tools import ToolCatalog

CATALOG = ToolCatalog([
    fake_tool("sites", ["MAIN"], description="List the sites."),
    fake_tool("history", [], description="Sensor history.",
              args={"site_name": str, "asset_id": str, "start": str,
                    "final": (str | None, None)}),
])

GOOD = """#Task1: list sites
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: the sites
"""
HALLUCINATED = GOOD.replace("#Tool1: sites", "#Tool1: site_list")


def test_the_prompt_lists_tools_with_types_and_optional_args_grammar_and_example() -> None:
    planner = Planner(ScriptedChatModel(), CATALOG)
    text = messages_text(planner.messages("Which sites?"))
    assert "- sites(): List the sites." in text
    assert "history(site_name: str, asset_id: str, start: str, final: str?)" in text
    assert "#Args1:" in text and "<step_1>" in text
    assert "Example" in text and "#Tool2: fetch" in text
    assert "Question: Which sites?" in text


def test_user_text_with_template_placeholders_is_never_substituted_into() -> None:
    planner = Planner(ScriptedChatModel(), CATALOG)
    question = "Explain {context} and {task} and {{question}} and {{tools}} and {0}"
    human = planner.messages(question)[1].content
    assert human == f"Question: {question}"
    ctx = ReplanContext(reason="why {{lessons}}", lessons=["{{reason}} {task}"])
    text = messages_text(planner.messages(question, context=ctx))
    assert "why {{lessons}}" in text and "- {{reason}} {task}" in text


def test_fill_is_single_pass() -> None:
    assert fill("{{a}}-{{b}}", a="{{b}}", b="x") == "{{b}}-x"


async def test_a_clean_reply_is_parsed_and_checked_in_one_call() -> None:
    model = ScriptedChatModel(replies=[GOOD])
    usage = Usage()
    outcome = await Planner(model, CATALOG).plan(
        "q", client=ModelClient(model, usage=usage)
    )
    assert outcome.plan is not None and outcome.plan.steps[0].tool == "sites"
    assert outcome.reprompts == 0 and outcome.error is None
    assert usage.llm_calls == {"plan": 1}


async def test_unknown_tools_are_reprompted_with_the_diagnostics_and_close_matches() -> None:
    model = ScriptedChatModel(replies=[HALLUCINATED, GOOD])
    bus = EventBus()
    events: list[object] = []
    bus.subscribe(events.append)
    outcome = await Planner(model, CATALOG).plan("q", bus=bus)
    assert outcome.plan is not None and outcome.plan.steps[0].tool == "sites"
    assert outcome.reprompts == 1
    reprompt = messages_text(model.requests[1])
    assert "site_list" in reprompt and "sites" in reprompt
    assert "Write the whole plan again" in reprompt
    assert any(isinstance(e, FallbackUsed) and e.code == "PLAN_REPROMPT" for e in events)


async def test_a_reply_without_a_plan_is_reprompted() -> None:
    model = ScriptedChatModel(replies=["I cannot help with that.", GOOD])
    outcome = await Planner(model, CATALOG).plan("q")
    assert outcome.plan is not None
    assert outcome.replies[0] == "I cannot help with that."


async def test_the_reprompt_budget_is_kept_and_the_last_plan_returned_with_its_problems() -> None:
    model = ScriptedChatModel(replies=[HALLUCINATED, HALLUCINATED])
    outcome = await Planner(model, CATALOG, max_reprompts=1).plan("q")
    assert model.calls == 2
    assert outcome.plan is not None and outcome.plan.has_errors
    assert outcome.error is not None and "site_list" in outcome.error


async def test_no_plan_at_all_after_the_budget_gives_none_with_the_reason() -> None:
    model = ScriptedChatModel(replies=["", "no"])
    outcome = await Planner(model, CATALOG, max_reprompts=1).plan("q")
    assert outcome.plan is None and outcome.error


def kept_context() -> ReplanContext:
    step1 = Step(id=1, task="list sites", tool="sites")
    r1 = StepResult(1, "sites", StepStatus.SUCCEEDED, output=["MAIN", "WEST"] * 500)
    failed = StepResult(2, "site_list", StepStatus.FAILED,
                        error="step 2: unknown tool 'site_list'; did you mean sites?",
                        error_kind=ErrorKind.UNKNOWN_TOOL)
    return ReplanContext(reason="UNKNOWN_TOOL at step 2", version=2, previous_text="OLD PLAN",
                         kept={1: (step1, r1)}, failed=[failed], lessons=["lesson one"])


def test_a_replan_prompt_has_the_previous_plan_successes_failures_and_lessons() -> None:
    planner = Planner(ScriptedChatModel(), CATALOG, output_budget=200)
    text = messages_text(planner.messages("q", context=kept_context()))
    assert "This is a re-plan (plan 2)" in text
    assert "OLD PLAN" in text
    assert "<step_1> (sites: list sites)" in text
    assert "[cut:" in text  # outputs cut to the budget
    assert "step 2 (site_list) FAILED UNKNOWN_TOOL" in text
    assert "- lesson one" in text
    assert "Number the new steps from 3" in text
    assert "numbered in order starting at 3" in text


def test_a_decomposition_request_is_in_the_prompt() -> None:
    ctx = ReplanContext(reason="too complicated", decompose=True)
    text = messages_text(Planner(ScriptedChatModel(), CATALOG).messages("q", context=ctx))
    assert "decompose it further" in text


async def test_kept_steps_are_merged_so_the_new_plan_may_reference_them() -> None:
    new = """#Task3: history of the first site
#Tool3: history
#Args3: {"site_name": "<step_1[0]>", "asset_id": "CH-6", "start": "2020-01-01"}
#Dependency3: #S1
#ExpectedOutput3: readings
"""
    model = ScriptedChatModel(replies=[new])
    outcome = await Planner(model, CATALOG).plan("q", context=kept_context())
    assert outcome.plan is not None
    assert outcome.plan.ids == (1, 3)
    assert not outcome.plan.has_errors, outcome.plan.errors
    assert set(outcome.prior) == {1}


async def test_a_kept_step_rewritten_identically_is_reused_and_a_changed_one_is_not() -> None:
    same = GOOD
    changed = GOOD.replace("#Tool1: sites", "#Tool1: history").replace(
        "#Args1: {}", '#Args1: {"site_name": "A", "asset_id": "B", "start": "C"}')
    out_same = await Planner(ScriptedChatModel(replies=[same]), CATALOG).plan(
        "q", context=kept_context())
    assert set(out_same.prior) == {1}
    out_changed = await Planner(ScriptedChatModel(replies=[changed]), CATALOG).plan(
        "q", context=kept_context())
    assert out_changed.prior == {}
    assert out_changed.plan is not None
    assert any(d.code == "KEPT_STEP_REPLACED" for d in out_changed.plan.diagnostics)


class Report(BaseModel):
    site: str = Field(description="the site's name")
    count: int | None = None


def test_an_output_schema_asks_for_a_final_mapping_step() -> None:
    text = messages_text(
        Planner(ScriptedChatModel(), CATALOG).messages(
            "q", output_schema=Report.model_json_schema())
    )
    assert "final_answer" in text
    assert "- site: str (required) — the site's name" in text
    assert "- count: int | None (optional)" in text


def test_schema_fields_follow_nested_definitions() -> None:
    class Outer(BaseModel):
        reports: list[Report]

    assert schema_fields(Outer.model_json_schema()) == [
        "- reports: list[{site: str, count: int | None}] (required) — Reports"
    ]
