"""The json dialect: plans from structured output and the JSON shapes real models emit."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.errors import PlanParseError
from planexec.parsing import DIALECTS, detect_dialect, parse_plan, plan_schema
from planexec.parsing.jsonplan import JsonPlan
from planexec.plan import Plan, Ref, Severity, Template

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "plan.schema.json"

DOCUMENTED = {
    "steps": [
        {"id": 1, "task": "List the sites", "tool": "sites", "args": {}, "depends_on": [],
         "expected_output": "the sites"},
        {"id": 2, "task": "List the assets of the first site", "tool": "assets",
         "args": {"site_name": "<step_1[0]>", "note": "of <step_1[0]>"}, "depends_on": [1],
         "expected_output": "the assets"},
        {"id": 3, "task": "Pick the chiller from <step_2>", "tool": None, "args": {},
         "depends_on": [2], "expected_output": "an asset id"},
    ]
}


def codes(plan: Plan) -> set[str]:
    return {d.code for d in plan.diagnostics}


def test_json_is_a_dialect_and_the_documented_shape_parses_without_diagnostics() -> None:
    assert "json" in DIALECTS
    text = json.dumps(DOCUMENTED)
    assert detect_dialect(text) == "json"
    plan = parse_plan(text)
    assert plan.dialect == "json" and plan.ids == (1, 2, 3)
    assert [s.tool for s in plan.steps] == ["sites", "assets", None]
    assert plan.diagnostics == ()
    ref = plan.step(2).args["site_name"]
    assert isinstance(ref, Ref) and (ref.step, ref.path) == (1, (0,))
    assert isinstance(plan.step(2).args["note"], Template)
    assert plan.step(3).no_tool and plan.step(3).depends_on == (2,)
    assert plan.step(1).expected_output == "the sites"


def test_the_schema_file_is_generated_from_the_pydantic_model() -> None:
    expected = json.dumps(plan_schema(), indent=2, ensure_ascii=False) + "\n"
    assert SCHEMA_FILE.read_text(encoding="utf-8") == expected, (
        "docs/plan.schema.json is stale: regenerate it with\n"
        "python -c 'import json; from planexec.parsing import plan_schema; "
        "print(json.dumps(plan_schema(), indent=2, ensure_ascii=False))' "
        "> docs/plan.schema.json"
    )
    JsonPlan.model_validate(DOCUMENTED)


def test_steps_given_as_sentences_are_reasoning_steps_each_with_a_diagnostic() -> None:
    plan = parse_plan('{"steps":["Find the winner.","Find the hometown of the winner."]}')
    assert plan.dialect == "json" and plan.ids == (1, 2)
    assert all(s.tool is None and s.is_reasoning for s in plan.steps)
    no_tool = [d for d in plan.diagnostics if d.code == "JSON_NO_TOOL"]
    assert [d.step for d in no_tool] == [1, 2]
    assert all(d.severity is Severity.WARNING and "names no tool" in d.message
               for d in no_tool)
    assert "numbered by position" in next(
        d.message for d in plan.diagnostics if d.code == "JSON_SHAPE"
    )


def test_a_list_of_function_calls_with_json_string_arguments() -> None:
    text = json.dumps([
        {"name": "sites", "arguments": "{}"},
        {"name": "assets", "arguments": json.dumps({"site_name": "<step_1[0]>"})},
    ])
    plan = parse_plan(text)
    assert plan.dialect == "json"
    assert [s.tool for s in plan.steps] == ["sites", "assets"]
    ref = plan.step(2).args["site_name"]
    assert isinstance(ref, Ref) and ref.step == 1
    assert plan.step(2).depends_on == (1,)
    assert codes(plan) == {"JSON_SHAPE"}
    assert "function calls" in plan.diagnostics[0].message


def test_openai_tool_calls_in_a_fence_after_prose() -> None:
    calls = {"tool_calls": [
        {"id": "call_a1", "type": "function",
         "function": {"name": "iot.sites", "arguments": "{}"}},
        {"id": "call_b2", "type": "function",
         "function": {"name": "history", "arguments": '{"site_name": "<step_1[0]>"}'}},
    ]}
    text = f"Here is my plan:\n```json\n{json.dumps(calls, indent=1)}\n```\nDone."
    assert detect_dialect(text) == "json"
    plan = parse_plan(text)
    assert [(s.id, s.server, s.tool) for s in plan.steps] == [
        (1, "iot", "sites"), (2, None, "history")
    ]
    assert codes(plan) == {"JSON_SHAPE", "TOOL_NAME_NORMALIZED"}
    assert "code fence" in next(d.message for d in plan.diagnostics if d.code == "JSON_SHAPE")


def test_a_json_plan_inside_prose_is_found() -> None:
    text = ('Sure. The plan is {"steps": [{"id": 1, "task": "t", "tool": "sites", "args": {}}]}'
            " and that is all.")
    assert detect_dialect(text) == "json"
    plan = parse_plan(text)
    assert plan.steps[0].tool == "sites"
    assert "prose" in next(d.message for d in plan.diagnostics if d.code == "JSON_SHAPE")


def test_missing_and_unreadable_ids_are_numbered_and_unknown_fields_reported() -> None:
    text = json.dumps({"steps": [
        {"id": 1, "task": "a", "tool": "sites", "args": {}, "confidence": 0.9},
        {"task": "b", "tool": "sites", "args": {}},
        {"id": "first", "task": "c", "tool": "sites", "args": {}},
        {"id": 1, "task": "again", "tool": "sites"},
    ], "reasoning": "because"})
    plan = parse_plan(text)
    assert plan.ids == (1, 2, 3)
    found = {(d.code, d.step) for d in plan.diagnostics}
    assert ("STEP_NUMBER_MISSING", 2) in found
    assert ("STEP_NUMBER_INVALID", 3) in found
    assert ("DUPLICATE_STEP", 1) in found
    unknown = [d for d in plan.diagnostics if d.code == "JSON_FIELD_UNKNOWN"]
    assert {d.step for d in unknown} == {1, None}
    assert any("'confidence'" in d.message for d in unknown)
    assert any("'reasoning'" in d.message for d in unknown)


def test_a_step_without_a_tool_field_is_a_reasoning_step_and_args_are_kept() -> None:
    plan = parse_plan(json.dumps({"steps": [
        {"id": 1, "task": "t", "tool": "sites"},
        {"id": 2, "task": "Summarize the findings", "args": {"style": "short"}},
    ]}))
    step = plan.step(2)
    assert step.tool is None and step.args == {"style": "short"}
    assert {("JSON_NO_TOOL", 2), ("ARGS_WITHOUT_TOOL", 2)} <= {
        (d.code, d.step) for d in plan.diagnostics
    }


def test_the_same_checks_run_on_json_plans() -> None:
    plan = parse_plan(json.dumps({"steps": [
        {"id": 1, "task": "t", "tool": "a", "args": {"x": "<step_4.id>"}},
        {"id": 2, "task": "t", "tool": "b", "args": {"x": "{{step_1.id}", "y": "{name}"},
         "depends_on": ["#S1", "the previous one"]},
    ]}))
    # "{name}" is a free-text placeholder: a hinted reference, as in hashstep plans
    assert {"REF_MISSING", "REF_MALFORMED", "REF_HINTED",
            "DEPENDENCY_UNREADABLE"} <= codes(plan)
    assert plan.has_errors


def test_unreadable_string_arguments_make_the_step_invalid() -> None:
    plan = parse_plan('[{"name": "sites", "arguments": "{\\"a\\": nope nope}"}]')
    assert not plan.steps[0].args_valid
    assert any(d.code == "ARGS_SYNTAX" and d.severity is Severity.ERROR
               for d in plan.diagnostics)


def test_a_non_object_argument_is_positional() -> None:
    plan = parse_plan('[{"tool": "fetch", "args": "<step_1>", "task": "t"}]')
    (pos,) = plan.steps[0].positional
    assert isinstance(pos, Ref) and "ARGS_POSITIONAL" in codes(plan)


def test_hashstep_plans_whose_args_hold_json_stay_hashstep() -> None:
    text = ('#Task1: list\n#Tool1: sites\n#Args1: {"steps": ["a"], "name": "x", '
            '"arguments": {}}\n#Dependency1: None\n')
    assert detect_dialect(text) == "hashstep"
    assert parse_plan(text).dialect == "hashstep"


@pytest.mark.parametrize("text", [
    '{"site_name": "MAIN"}',
    "[1, 2, 3]",
    '{"steps": []}',
])
def test_json_that_is_no_plan_is_not_detected_as_one(text: str) -> None:
    assert detect_dialect(text) != "json"
    with pytest.raises(PlanParseError) as info:
        parse_plan(text, "json")
    assert "not a plan" in str(info.value) or "no JSON plan" in str(info.value)


def test_a_cut_off_json_plan_says_so_when_json_is_asked_for() -> None:
    with pytest.raises(PlanParseError, match="cut off"):
        parse_plan('{"steps": [{"id": 1, "task": "a", "tool": "si', "json")


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_json_value_or_cut_of_one_raises_nothing_but_plan_parse_error(
    data: st.DataObject,
) -> None:
    value = data.draw(st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["steps", "id", "tool", "name", "args",
                                           "arguments", "task", "depends_on", "function",
                                           "tool_calls", "x"]), inner, max_size=4),
        max_leaves=12,
    ))
    text = json.dumps(value)
    text = text[: data.draw(st.integers(0, len(text)))] if data.draw(st.booleans()) else text
    try:
        plan = parse_plan(text)
    except PlanParseError:
        return
    assert plan.steps


def _work(text: str) -> int:
    """Python line and call events while parsing ``text`` (see tests/parsing/test_linear.py)."""
    events = [0]

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        events[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        parse_plan(text)
    except PlanParseError:
        pass
    finally:
        sys.settrace(None)
    return events[0]


LINEAR_SHAPES: dict[str, tuple[Callable[[int], str], int]] = {
    "sentences": (lambda n: '{"steps": [' + '"a", ' * n + '"a"]}', 300),
    "function calls": (
        lambda n: "[" + ", ".join('{"name": "sites", "arguments": "{}"}' for _ in range(n)) + "]",
        200,
    ),
    "open brackets": (lambda n: "[" * n, 2000),
    "braces in prose": (lambda n: "Plan: " + "{ " * n, 2000),
}


@pytest.mark.parametrize("shape", list(LINEAR_SHAPES))
def test_doubling_a_json_reply_at_most_doubles_the_work(shape: str) -> None:
    make, n = LINEAR_SHAPES[shape]
    w1, w2 = _work(make(n)), _work(make(2 * n))
    assert w2 / w1 <= 2.5, (shape, w1, w2)


def test_leaked_reasoning_before_a_json_plan_is_dropped_with_its_diagnostic() -> None:
    text = '<think>I need {"x": 1}</think>\n{"steps": [{"id": 1, "task": "t", "tool": "sites"}]}'
    assert detect_dialect(text) == "json"
    plan = parse_plan(text)
    assert plan.steps[0].tool == "sites" and "REASONING_DROPPED" in codes(plan)


def test_a_reply_starting_with_a_json_plan_followed_by_prose_is_json() -> None:
    text = '[{"name": "sites", "arguments": {}}]\nThis lists the sites first.'
    assert detect_dialect(text) == "json"
    assert parse_plan(text).steps[0].tool == "sites"


def test_a_reply_starting_with_other_json_is_not_taken_for_a_plan() -> None:
    text = ('["note"]\n#Task1: list\n#Tool1: sites\n'
            '#Args1: {"steps": [{"id": 1, "task": "t", "tool": "x"}]}\n')
    assert detect_dialect(text) == "hashstep"


def test_the_planners_json_example_is_a_clean_json_plan() -> None:
    from planexec.planner import JSON_EXAMPLE

    body = JSON_EXAMPLE.split("\n", 2)[2]
    plan = parse_plan(body)
    assert plan.dialect == "json" and plan.ids == (1, 2, 3) and plan.diagnostics == ()


def test_a_plan_wrapped_in_one_field_and_an_unreadable_step() -> None:
    plan = parse_plan(json.dumps({"plan": {"steps": [
        {"id": 1, "description": "Search", "tool_name": "search", "tool_input": {"q": "x"}},
        42,
    ]}}))
    assert [(s.id, s.task, s.tool, s.args) for s in plan.steps] == [
        (1, "Search", "search", {"q": "x"})
    ]
    assert "wrapped in the field 'plan'" in next(
        d.message for d in plan.diagnostics if d.code == "JSON_SHAPE"
    )
    assert "JSON_STEP_UNREADABLE" in codes(plan)
