"""The demo plans parse cleanly, check against the demo tools, and their references land.

`walk_plan` is a deliberately tiny stand-in for the executor (steps in plan order,
whole-value and path references, text interpolation, hinted references filled from the
recorded replies) so these tests check the *demo content* — plan files, data shapes and
recorded replies agree — independently of the executor's own tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import BaseTool

from planexec._models import as_client
from planexec.examples import example_path
from planexec.examples.questions import DEMO_QUESTIONS
from planexec.examples.tools import demo_tools
from planexec.executor import Executor
from planexec.parsing import check_plan, parse_plan
from planexec.plan import Plan, Ref, Severity, Step, Template
from planexec.reasoning import ModelReasoner
from planexec.resolver import ArgResolver
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.testing import ScriptedChatModel
from planexec.tools import ToolCatalog

PLANS_DIR = example_path("plans/chiller_sensors.txt").parent
PLAN_FILES = sorted(p.name for p in PLANS_DIR.glob("*.txt"))
JSON_TEXT_TOOLS = {"sensors", "list_work_orders"}

# plan file -> (dialect, replies file the plan needs, or None)
EXPECTED: dict[str, tuple[str, str | None]] = {
    "chiller_sensors.txt": ("hashstep", None),
    "hinted_ref.txt": ("hashstep", "hinted_ref.json"),
    "fanout_history.txt": ("hashstep", "fanout_history.json"),
    "failure_analysis.txt": ("hashstep", "failure_analysis.json"),
    "work_order.txt": ("hashstep", None),
    "rewoo_failure_modes.txt": ("rewoo", None),
    "llmcompiler_sites.txt": ("llmcompiler", None),
    "ask_excess_purge.txt": ("hashstep", "ask_excess_purge.json"),
    "ask_turbine_vibration.txt": ("hashstep", "ask_turbine_vibration.json"),
    "ask_work_order.txt": ("hashstep", "ask_work_order.json"),
}


def load_plan(name: str) -> Plan:
    return parse_plan((PLANS_DIR / name).read_text(encoding="utf-8"))


def replies_for(name: str) -> list[str]:
    """The replies a plan consumes when run (an ask_* file starts with the plan itself)."""
    replies_file = EXPECTED[name][1]
    if replies_file is None:
        return []
    replies = json.loads(example_path(f"replies/{replies_file}").read_text(encoding="utf-8"))
    return replies[1:] if name.startswith("ask_") else replies


def follow(value: Any, path: tuple[str | int, ...]) -> Any:
    for elem in path:
        if isinstance(elem, int):
            assert isinstance(value, list), f"index {elem} into {type(value).__name__}"
        else:
            assert isinstance(value, dict), f"key {elem!r} into {type(value).__name__}"
            assert elem in value, f"no key {elem!r}; keys: {sorted(value)}"
        value = value[elem]
    return value


def resolve(value: Any, outputs: dict[int, Any], hinted: dict[str, Any], where: str) -> Any:
    if isinstance(value, Ref):
        if value.is_hinted:
            return hinted[where]
        return follow(outputs[value.step], value.path)
    if isinstance(value, Template):
        return "".join(
            p if isinstance(p, str) else str(follow(outputs[p.step], p.path)) for p in value.parts
        )
    if isinstance(value, dict):
        return {k: resolve(v, outputs, hinted, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, outputs, hinted, where) for v in value]
    return value


def bound_args(step: Step, tool: BaseTool) -> dict[str, Any]:
    args = dict(step.args)
    for name, value in zip(tool.args, step.positional, strict=False):
        args[name] = value
    return args


READ_WITHOUT_MODEL = {
    "asset_id_for_Chiller_6_from_step_1": "CWC04006",
    "asset_id_for_Chiller_9_from_step_1": "CWC04009",
}
"""Hints of the demo plans the filter tier reads (no recorded reply), with the value a
person reads off the demo data (``data/assets.json``)."""


def walk_plan(plan: Plan, replies: list[str]) -> tuple[dict[int, Any], list[str]]:
    """Run the plan's steps in order; return the outputs and the unused replies."""
    tools = {t.name: t for t in demo_tools()}
    pending = list(replies)
    outputs: dict[int, Any] = {}
    for step in plan.steps:
        if step.tool is None or step.tool == "join":
            if step.tool is None:
                assert pending, f"no recorded reply for reasoning step {step.id}"
                outputs[step.id] = pending.pop(0)
            continue
        tool = tools[step.tool]
        hinted: dict[str, Any] = {}
        hints = [r for r in step.refs if r.is_hinted]
        if hints and all(r.hint in READ_WITHOUT_MODEL for r in hints):
            hinted = {r.location: READ_WITHOUT_MODEL[str(r.hint)] for r in hints}
        elif hints:
            assert pending, f"no recorded resolver reply for step {step.id}"
            hinted = {f"args.{k}": v for k, v in json.loads(pending.pop(0)).items()}
        args = resolve(bound_args(step, tool), outputs, hinted, "args")
        out = tool.invoke(args)
        out = json.loads(out) if step.tool in JSON_TEXT_TOOLS else out
        assert "error" not in out, f"step {step.id}: {out}"
        outputs[step.id] = out
    return outputs, pending


def test_every_plan_file_is_listed_here() -> None:
    assert set(PLAN_FILES) == set(EXPECTED)
    assert len(PLAN_FILES) >= 5


@pytest.mark.parametrize("name", PLAN_FILES)
def test_each_demo_plan_parses_in_its_dialect_with_no_warning_but_hinted_refs(name: str) -> None:
    plan = load_plan(name)
    assert plan.dialect == EXPECTED[name][0]
    assert plan.steps
    assert all(s.args_valid for s in plan.steps)
    worrying = [d for d in plan.diagnostics if d.severity is not Severity.INFO]
    hinted_steps = sorted(s.id for s in plan.steps if any(r.is_hinted for r in s.refs))
    assert [d.code for d in worrying] == ["REF_HINTED"] * len(hinted_steps)
    assert sorted(d.step for d in worrying if d.step is not None) == hinted_steps


@pytest.mark.parametrize("name", PLAN_FILES)
def test_each_demo_plan_checks_cleanly_against_the_demo_tools(name: str) -> None:
    plan = check_plan(load_plan(name), ToolCatalog(demo_tools()))
    assert plan.errors == ()


@pytest.mark.parametrize("name", PLAN_FILES)
def test_each_demo_plan_runs_over_the_demo_data_with_its_recorded_replies(name: str) -> None:
    outputs, unused = walk_plan(load_plan(name), replies_for(name))
    assert outputs
    # an ask_* file ends with the final answer; the others are used up exactly
    assert len(unused) == (1 if name.startswith("ask_") else 0)


def test_chiller_sensors_uses_path_refs_into_dicts_and_into_json_text() -> None:
    plan = load_plan("chiller_sensors.txt")
    assert plan.step(2).args["asset_id"] == Ref(
        step=1, path=("assets", 0, "id"), raw="{step_1.assets[0].id}", location="args.asset_id"
    )
    outputs, _ = walk_plan(plan, [])
    assert outputs[2]["name"] == "Chiller 6"
    assert outputs[4]["sensors"] == ["Supply Temperature"]  # path into sensors' JSON text


def test_hinted_ref_needs_the_llm_for_exactly_one_argument() -> None:
    plan = load_plan("hinted_ref.txt")
    refs = plan.step(3).refs
    hinted = [r for r in refs if r.is_hinted]
    assert [(r.step, r.location) for r in hinted] == [(2, "args.asset_id")]
    assert [r.path for r in refs if not r.is_hinted] == [("sites", 0, "name")]
    assert json.loads(replies_for("hinted_ref.txt")[0]) == {"asset_id": "CWC04006"}
    outputs, _ = walk_plan(plan, replies_for("hinted_ref.txt"))
    assert outputs[3]["asset_name"] == "Chiller 6"


def test_fanout_history_has_four_independent_tool_steps_then_a_reasoning_step() -> None:
    plan = load_plan("fanout_history.txt")
    assert [s.depends_on for s in plan.steps[:4]] == [()] * 4
    assert plan.step(5).is_reasoning
    assert plan.step(5).depends_on == (1, 2, 3, 4)


def test_failure_analysis_follows_a_quoted_key_into_fm_to_sensors() -> None:
    plan = load_plan("failure_analysis.txt")
    assert plan.step(3).args["sensor"].path == ("fm_to_sensors", "excess purge", 0)
    assert {s.server for s in plan.steps if s.tool} == {"fmsr", "iot"}
    outputs, _ = walk_plan(plan, replies_for("failure_analysis.txt"))
    assert outputs[3]["sensor"] == "Purge Runtime"
    assert outputs[4]["sensor"] == "Condenser Pressure"
    assert outputs[3]["count"] > 0 and outputs[4]["count"] > 0


def test_work_order_interpolates_embedded_refs_into_the_description() -> None:
    plan = load_plan("work_order.txt")
    description = plan.step(3).args["description"]
    assert isinstance(description, Template)
    assert len(description.refs) == 6
    outputs, _ = walk_plan(plan, [])
    text = outputs[3]["work_order"]["description"]
    assert text.startswith("Inspect the purge unit of Chiller 6 (CVHF 1000, ")
    assert "7 purge runtime readings above z=3.0, first at 2025-06-05T06:00:00" in text
    assert [o["id"] for o in outputs[4]["work_orders"]] == ["WO-0990", "WO-1001"]


def test_demo_questions_name_existing_replies_whose_first_reply_is_the_plan() -> None:
    assert len(DEMO_QUESTIONS) >= 2
    for q in DEMO_QUESTIONS:
        replies = json.loads(example_path(q["replies"]).read_text(encoding="utf-8"))
        assert isinstance(replies, list) and len(replies) >= 2  # the plan, the answer
        assert all(isinstance(r, str) and r.strip() for r in replies)
        assert q["plan"] is not None
        plan_text = example_path(q["plan"]).read_text(encoding="utf-8")
        assert replies[0].strip() == plan_text.strip()
        assert q["question"].endswith("?") or q["question"].endswith(".")


def test_demo_paths_are_plain_files_in_the_package() -> None:
    assert isinstance(example_path("data/assets.json"), Path)
    with pytest.raises(FileNotFoundError, match="no demo file"):
        example_path("plans/missing.txt")


# -- end to end through the real executor ----------------------------------------------


async def execute(name: str) -> tuple[dict[int, StepResult], ScriptedChatModel]:
    replies = replies_for(name)
    if name.startswith("ask_"):
        replies = replies[:-1]  # the final answer is the agent's, not the executor's
    model = ScriptedChatModel(replies=replies)
    client = as_client(model)
    executor = Executor(
        ToolCatalog(demo_tools()),
        ArgResolver(client),
        reasoner=ModelReasoner(client),
    )
    results = await executor.run(load_plan(name))
    return {r.step_id: r for r in results}, model


@pytest.mark.parametrize("name", PLAN_FILES)
async def test_each_demo_plan_succeeds_through_the_executor_using_every_recorded_reply(
    name: str,
) -> None:
    results, model = await execute(name)
    plan = load_plan(name)
    tool_steps = [s.id for s in plan.steps if s.tool not in (None, "join")]
    assert all(results[i].status is StepStatus.SUCCEEDED for i in tool_steps), {
        i: results[i].error for i in results
    }
    expected_calls = len(replies_for(name)) - (1 if name.startswith("ask_") else 0)
    assert len(model.requests) == expected_calls


async def test_the_hinted_ref_is_the_only_argument_resolved_by_the_llm() -> None:
    results, _ = await execute("hinted_ref.txt")
    step3 = results[3]
    assert step3.args == {"site_name": "MAIN", "asset_id": "CWC04006"}
    assert step3.resolution["asset_id"] is ResolutionMethod.LLM
    assert step3.resolution["site_name"] is ResolutionMethod.PATH
    assert step3.output["asset_name"] == "Chiller 6"


async def test_the_work_order_description_is_interpolated_text() -> None:
    results, _ = await execute("work_order.txt")
    step3 = results[3]
    assert step3.resolution["description"] is ResolutionMethod.INTERPOLATED
    assert step3.args["description"].startswith("Inspect the purge unit of Chiller 6 (")
    assert step3.output["work_order"]["id"] == "WO-1001"


async def test_the_fanout_reasoning_step_returns_the_recorded_reply() -> None:
    results, _ = await execute("fanout_history.txt")
    assert results[5].output == replies_for("fanout_history.txt")[0]
