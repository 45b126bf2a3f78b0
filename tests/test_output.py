from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from planexec.errors import ConfigError, ErrorKind
from planexec.output import (
    OUTPUT_TOOL,
    catalog_with_output,
    check_expected,
    check_output_plan,
    output_feedback,
    output_spec,
    output_step,
    resolve_output,
    trace_field,
    without_output_step,
)
from planexec.parsing import parse_plan
from planexec.plan import Plan
from planexec.resolver import ArgResolver
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.testing import ScriptedChatModel, fake_tool
from planexec.tools import ToolCatalog


class AssetReport(BaseModel):
    asset_id: str
    site: str
    count: int
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


def plan_of(*steps: str) -> Plan:
    return parse_plan("\n".join(steps))


def ok(sid: int, tool: str, args: dict[str, Any], output: Any) -> StepResult:
    return StepResult(sid, tool, StepStatus.SUCCEEDED, args=args, output=output)


SITES = step(1, "sites", "{}")
ASSETS = step(2, "assets", '{"site_name": "<step_1.sites[0].name>"}', "#S1")
PICK = step(4, "pick", '{"item": "<step_2.assets[1]>", "reason": "the chiller"}', "#S2")
FINAL = step(
    5,
    OUTPUT_TOOL,
    '{"asset_id": "<step_4.asset.id>", "site": "<step_2.site_name>", "count": "<step_2.count>"}',
    "#S2, #S4",
)

RESULTS = {
    1: ok(1, "sites", {}, {"sites": [{"name": "MAIN"}, {"name": "WEST"}]}),
    2: ok(
        2,
        "assets",
        {"site_name": "MAIN"},
        {"site_name": "MAIN", "count": 2, "assets": [{"id": "CH-5"}, {"id": "CH-6"}]},
    ),
    4: ok(4, "pick", {"item": {"id": "CH-6"}, "reason": "the chiller"}, {"asset": {"id": "CH-6"}}),
}


async def resolve(plan: Plan, results: dict[int, StepResult] | None = None, **kw: Any) -> Any:
    model = kw.pop("model", None)
    return await resolve_output(
        plan, AssetReport, results or RESULTS, ArgResolver(model), **kw
    )


# ------------------------------------------------------------------ plan time


def test_a_plan_without_a_final_mapping_step_is_output_missing_step() -> None:
    problem = check_output_plan(plan_of(SITES, ASSETS), AssetReport)
    assert problem is not None
    assert problem.kind is ErrorKind.OUTPUT_MISSING_STEP
    assert problem.step_id is None
    assert f"#ToolN: {OUTPUT_TOOL}" in problem.message
    assert "asset_id, site, count, unit?" in problem.message


def test_a_final_mapping_leaving_required_fields_out_is_output_args_missing() -> None:
    final = step(3, OUTPUT_TOOL, '{"asset": "<step_2.assets[0].id>", "site": "MAIN"}', "#S2")
    problem = check_output_plan(plan_of(SITES, ASSETS, final), AssetReport)
    assert problem is not None
    assert problem.kind is ErrorKind.OUTPUT_ARGS_MISSING
    assert problem.step_id == 3
    assert problem.fields == ("asset_id", "count")
    assert "'asset', which AssetReport does not have" in problem.message


def test_unreadable_final_args_leave_every_required_field_missing() -> None:
    final = step(3, OUTPUT_TOOL, '{"asset_id": "<step_2>", "site": ', "#S2")
    problem = check_output_plan(plan_of(SITES, ASSETS, final), AssetReport)
    assert problem is not None and problem.kind is ErrorKind.OUTPUT_ARGS_MISSING
    assert problem.fields == ("asset_id", "site", "count")


def test_a_complete_final_mapping_passes_and_is_not_run_by_the_executor() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    assert check_output_plan(plan, AssetReport) is None
    final = output_step(plan)
    assert final is not None and final.id == 5
    assert without_output_step(plan).ids == (1, 2, 4)


def test_positional_final_args_bind_to_the_fields_in_order() -> None:
    plan = parse_plan('1. sites()\n2. final_answer("CH-6", $1, 3)\n3. join()')
    assert check_output_plan(plan, AssetReport) is None


def test_the_output_tool_joins_the_catalog_keeping_the_other_tools_hints() -> None:
    sites = fake_tool("sites", ["MAIN"], hints={"read_only": True})
    catalog = catalog_with_output(ToolCatalog([sites]), AssetReport)
    assert catalog.has(OUTPUT_TOOL) and catalog.get("sites").hints.read_only
    assert catalog.required_args(OUTPUT_TOOL) == ["asset_id", "site", "count"]
    spec = output_spec(AssetReport)
    assert spec.args_schema is AssetReport and spec.hints.safe


def test_expected_fields_must_exist_in_the_output_type() -> None:
    check_expected(AssetReport, {"asset_id": "CH-6"})
    with pytest.raises(ConfigError, match="'asset' are not fields of AssetReport"):
        check_expected(AssetReport, {"asset": "CH-6"})


# ------------------------------------------------------------------ instantiation


async def test_the_final_mapping_is_resolved_and_validated_into_the_model() -> None:
    outcome = await resolve(plan_of(SITES, ASSETS, PICK, FINAL))
    assert outcome.ok and outcome.kind is None
    assert outcome.value == AssetReport(asset_id="CH-6", site="MAIN", count=2)
    result = outcome.result
    assert result.step_id == 5 and result.tool == OUTPUT_TOOL and result.ok
    assert result.output == outcome.value
    assert result.raw_output == {"asset_id": "CH-6", "site": "MAIN", "count": 2, "unit": "C"}
    assert result.resolution["asset_id"] is ResolutionMethod.PATH


async def test_a_value_failing_a_field_validator_is_output_invalid_naming_the_field() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "<step_4.asset.id>", "site": "MAIN", '
                 '"count": 2, "unit": "kelvin"}', "#S4")
    outcome = await resolve(plan_of(SITES, ASSETS, PICK, final))
    assert outcome.kind is ErrorKind.OUTPUT_INVALID
    assert outcome.fields == ("unit",)
    assert outcome.value is None and outcome.result.status is StepStatus.FAILED
    assert outcome.result.error_kind is ErrorKind.OUTPUT_INVALID
    assert "does not validate into AssetReport" in (outcome.message or "")
    assert "unit must be C or F" in (outcome.message or "")
    assert output_feedback(outcome).args == ("unit",)
    assert outcome.result.failure is not None
    assert outcome.result.failure.literal_args == ("unit",)  # "kelvin" is the plan's literal


async def test_a_value_of_the_wrong_type_without_a_model_is_output_invalid() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "<step_4.asset.id>", "site": "MAIN", '
                 '"count": "<step_2.assets>"}', "#S2, #S4")
    outcome = await resolve(plan_of(SITES, ASSETS, PICK, final))
    assert outcome.kind is ErrorKind.OUTPUT_INVALID
    assert outcome.fields == ("count",)


async def test_the_feedback_never_sends_a_literal_field_to_the_llm_fallback() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "<step_4.asset.id>", "site": "MAIN", '
                 '"count": 2, "unit": "kelvin"}', "#S4")
    plan = plan_of(SITES, ASSETS, PICK, final)
    first = await resolve(plan)
    model = ScriptedChatModel(replies=['{"unit": "C"}'])
    again = await resolve(plan, model=model, feedback=output_feedback(first))
    assert again.kind is ErrorKind.OUTPUT_INVALID and model.calls == 0


async def test_the_feedback_sends_the_named_field_from_a_reference_to_the_llm_fallback() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    first = await resolve(plan, expected={"asset_id": "XX-1"})
    assert output_feedback(first).args == ("asset_id",)
    model = ScriptedChatModel(replies=['{"asset_id": "CH-5"}'])
    again = await resolve(plan, model=model, feedback=output_feedback(first))
    assert again.ok and again.value is not None and again.value.asset_id == "CH-5"
    assert again.result.resolution["asset_id"] is ResolutionMethod.LLM
    assert again.result.resolution["site"] is not ResolutionMethod.LLM
    assert 'exactly these keys: "asset_id"' in str(model.requests[0][-1].content)


async def test_a_reference_to_a_missing_step_keeps_its_own_kind() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "<step_9.id>", "site": "MAIN", "count": 1}')
    outcome = await resolve(plan_of(SITES, final))
    assert outcome.kind is ErrorKind.MISSING_REFERENCE
    assert outcome.fields == ("asset_id",)


# ------------------------------------------------------------------ expected values and blame


async def test_an_unexpected_field_is_blamed_through_two_levels_of_references() -> None:
    outcome = await resolve(
        plan_of(SITES, ASSETS, PICK, FINAL), expected={"asset_id": "CH-5", "site": "MAIN"}
    )
    assert outcome.kind is ErrorKind.OUTPUT_UNEXPECTED
    assert outcome.fields == ("asset_id",)
    assert outcome.value is not None and outcome.value.asset_id == "CH-6"
    (mismatch,) = outcome.mismatches
    blame = mismatch.blame
    # field <- step 5 arg <step_4.asset.id> <- step 4 got it as <step_2.assets[1]> <- step 2
    assert blame.step_id == 2 and blame.tool == "assets"
    assert blame.chain == (5, 4, 2)
    assert [h.ref for h in blame.hops] == ["<step_4.asset.id>", "<step_2.assets[1]>", None]
    assert outcome.blamed_steps == (2,)
    assert outcome.result.status is StepStatus.FAILED
    assert outcome.result.error_kind is ErrorKind.OUTPUT_UNEXPECTED


async def test_models_are_never_told_the_expected_value_but_people_are() -> None:
    outcome = await resolve(plan_of(SITES, ASSETS, PICK, FINAL), expected={"asset_id": "XX-1"})
    assert "XX-1" not in (outcome.message or "")
    assert "XX-1" not in output_feedback(outcome).message
    assert '"CH-6" is wrong' in (outcome.message or "")
    assert 'expected "XX-1"' in outcome.describe()
    assert "blamed on step 2 (assets)" in outcome.describe()


async def test_expected_values_compare_as_json_data() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    assert (await resolve(plan, expected={"count": 2.0, "site": "MAIN"})).ok
    assert (await resolve(plan, expected={"count": True})).kind is ErrorKind.OUTPUT_UNEXPECTED


def test_a_value_passed_on_by_two_steps_is_blamed_on_the_step_that_made_it() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    blame = trace_field(plan, RESULTS, "site", output_type=AssetReport)
    # site <- <step_2.site_name>; step 2 received "MAIN" as <step_1.sites[0].name>
    assert blame.chain == (5, 2, 1)
    assert blame.step_id == 1 and blame.tool == "sites"
    assert blame.describe() == (
        "field 'site' ← step 5 (final_answer) arg 'site' = <step_2.site_name> ← step 2 "
        "(assets) arg 'site_name' = <step_1.sites[0].name> ← step 1 (sites): produced the value"
    )


def test_a_step_that_transforms_its_input_is_blamed_itself() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    blame = trace_field(plan, RESULTS, "count", output_type=AssetReport)
    assert blame.chain == (5, 2) and blame.step_id == 2


def test_a_literal_in_the_final_mapping_is_blamed_on_the_mapping() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "CH-6", "site": "MAIN", "count": 2}')
    blame = trace_field(plan_of(SITES, final), RESULTS, "asset_id", output_type=AssetReport)
    assert blame.step_id == 5 and blame.tool == OUTPUT_TOOL
    assert "literal" in blame.reason


def test_a_field_filled_by_the_llm_fallback_is_blamed_on_the_mapping_with_its_sources() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    final = StepResult(
        5, OUTPUT_TOOL, StepStatus.SUCCEEDED, args={},
        resolution={"asset_id": ResolutionMethod.LLM},
    )
    blame = trace_field(plan, {**RESULTS, 5: final}, "asset_id", output_type=AssetReport)
    assert blame.step_id == 5 and blame.sources == (2,)
    assert "LLM fallback" in blame.reason


def test_an_embedded_reference_is_blamed_on_the_step_behind_it() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "id <step_4.asset.id>", "site": "MAIN", '
                 '"count": 1}', "#S4")
    blame = trace_field(plan_of(SITES, ASSETS, PICK, final), RESULTS, "asset_id")
    assert blame.step_id == 2 and blame.sources == (2,)
    assert "builds the text" in blame.reason


def test_a_fallback_value_equal_to_the_references_value_is_traced_as_the_reference() -> None:
    plan = plan_of(SITES, ASSETS, PICK, FINAL)
    final = StepResult(
        5, OUTPUT_TOOL, StepStatus.SUCCEEDED, args={"asset_id": "CH-6"},
        resolution={"asset_id": ResolutionMethod.LLM},
    )
    blame = trace_field(plan, {**RESULTS, 5: final}, "asset_id", output_type=AssetReport)
    assert blame.chain == (5, 4, 2) and blame.step_id == 2


# ------------------------------------------------------------------ regression scenarios


def typed_scenario(output: dict[str, Any], **extra: Any) -> Any:
    import json

    from planexec.examples import example_path
    from planexec.regress.scenario import Scenario

    replies = json.loads(
        example_path("replies/ask_typed_supply_temperature.json").read_text(encoding="utf-8")
    )
    return Scenario.model_validate(
        {
            "name": "typed",
            "question": "Chiller 6 supply temperature?",
            "tools": {"module": "planexec.examples.tools:demo_tools"},
            "output_type": "planexec.examples.models:SensorWeek",
            "model": {"replies": replies},
            "expect": {"output": output},
            **extra,
        }
    )


def test_a_scenario_gives_its_plain_expected_fields_to_the_run() -> None:
    sc = typed_scenario({"unit": "degF", "readings": {"equals": 168}, "sensor": {"regex": "^S"}})
    assert sc.expect.expected_output() == {"unit": "degF", "readings": 168}


def test_a_scenario_expecting_an_output_needs_an_output_type() -> None:
    from pydantic import ValidationError

    from planexec.regress.scenario import Scenario

    with pytest.raises(ValidationError, match="give 'output_type'"):
        Scenario.model_validate(
            {"question": "q", "model": {"replies": ["x"]}, "expect": {"output": {"a": 1}}}
        )


async def test_a_failing_output_field_names_the_blamed_step_in_the_scenario_failure() -> None:
    from planexec.regress.runner import arun_scenario

    result = await arun_scenario(
        typed_scenario({"unit": "degF", "asset_id": {"regex": "^CWC0400[0-5]$"}})
    )
    assert result.status == "failed", result.error
    (failure,) = result.failures
    assert failure.where == "output.asset_id"
    assert "blamed on step 2 (history)" in failure.message
    assert "← step 3 (final_answer) arg 'asset_id' = <step_2.asset_id>" in failure.message


async def test_a_scenario_whose_run_has_no_typed_output_says_why() -> None:
    from planexec.regress.runner import arun_scenario

    result = await arun_scenario(
        typed_scenario({"unit": "degF"}, config={"recovery": {"max_replans": 0}},
                       model={"replies": ["#Task1: x\n#Tool1: sites\n#Args1: {}\n"
                                          "#Dependency1: None\n#ExpectedOutput1: y", "A."]})
    )
    assert result.status == "failed"
    assert any(
        f.where == "output" and "OUTPUT_MISSING_STEP" in f.message for f in result.failures
    )


def test_a_hinted_reference_is_blamed_on_the_mapping_naming_the_step_it_hints_at() -> None:
    final = step(5, OUTPUT_TOOL, '{"asset_id": "{chiller_id_from_step_2}", "site": "MAIN", '
                 '"count": 1}', "#S2")
    blame = trace_field(plan_of(SITES, ASSETS, final), RESULTS, "asset_id")
    assert blame.step_id == 5 and blame.sources == (2,)
    assert "LLM fallback" in blame.reason
