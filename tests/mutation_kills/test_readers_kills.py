"""Plan readers' behaviours that once survived mutation (issue 33; mutation/mutants.toml).

The hashstep and JSON readers and the tolerant JSON repair, through `parse_plan` and
`repair_json`. Oracle: each step's ``args``/``args_valid``/``cut_off`` and the codes of
the plan's diagnostics (never their wording).
"""

from __future__ import annotations

import json

import pytest

from planexec import parse_plan
from planexec.parsing.jsonrepair import repair_json
from planexec.plan import Plan, Ref
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog


def codes(plan: Plan) -> set[str]:
    return {d.code for d in plan.diagnostics}


TWO = "#Task1: a\n#Tool1: t\n#Args1: {}\n#Dependency1: None\n#Task2: b\n#Tool2: t\n"


def test_unreadable_hashstep_args_make_the_step_invalid() -> None:
    """Kills hashstep-args-error-valid."""
    plan = parse_plan('#Task1: a\n#Tool1: t\n#Args1: {"x": 1,,}}\n#Dependency1: None\n')
    [step] = plan.steps
    assert (step.args, step.args_valid) == ({}, False)
    assert "ARGS_SYNTAX" in codes(plan)


def test_a_reply_cut_off_inside_args_makes_that_step_invalid_and_cut_off() -> None:
    """Kills hashstep-cut-off-unmarked, hashstep-open-brackets-not-truncated and
    hashstep-truncated-empty-args-valid."""
    for tail in ('#Args2: {"x": [1, 2', "#Args2:"):
        plan = parse_plan(TWO + tail)
        first, second = plan.steps
        assert (first.args_valid, first.cut_off) == (True, False)
        assert (second.args_valid, second.cut_off) == (False, True), tail
        assert "ARGS_TRUNCATED" in codes(plan)


def test_tool_call_and_args_disagreeing_is_a_conflict_not_a_pick() -> None:
    """Kills hashstep-conflict-valid and hashstep-inline-conflict-silent."""
    plan = parse_plan("#Task1: a\n#Tool1: t(x=1)\n#Args1: {\"x\": 2}\n#Dependency1: None\n")
    [step] = plan.steps
    assert not step.args_valid
    assert "ARGS_CONFLICT" in codes(plan)
    same = parse_plan("#Task1: a\n#Tool1: t(x=2, y=3)\n#Args1: {\"x\": 2}\n#Dependency1: None\n")
    assert same.steps[0].args_valid and same.steps[0].args == {"x": 2, "y": 3}


def test_dependency_words_naming_no_step_are_reported() -> None:
    """Kills hashstep-deps-unreadable-silent."""
    plan = parse_plan(TWO + "#Args2: {}\n#Dependency2: #S1 and the other one\n")
    assert plan.steps[1].explicit_deps == (1,)
    assert "DEPENDENCY_UNREADABLE" in codes(plan)


def test_repair_json_refuses_truncated_text_and_trailing_text() -> None:
    """Kills jsonrepair-truncated-object-closed and jsonrepair-trailing-text-ignored."""
    cut = repair_json('{"a": 1, "b": [2')
    assert (cut.value, cut.truncated) == (None, True) and cut.error
    cut = repair_json('{"a": 1')
    assert (cut.value, cut.truncated) == (None, True) and cut.error
    trailing = repair_json('{"a": 1} and then {"b": 2}')
    assert trailing.value is None and trailing.error


def test_repair_json_reads_none_as_no_arguments_and_reports_its_repairs() -> None:
    """Kills jsonrepair-none-not-empty and jsonrepair-python-literals-silent."""
    none = repair_json("None")
    assert none.value == {} and none.error is None and none.repairs
    py = repair_json("{'a': True, 'b': None}")
    assert py.value == {"a": True, "b": None}
    assert len(py.repairs) >= 2  # the quotes and the Python literals, each reported


def _json_plan(steps: list[dict[str, object]]) -> Plan:
    return parse_plan(json.dumps({"steps": steps}))


def test_unreadable_args_of_a_json_plan_make_the_step_invalid() -> None:
    """Kills jsonplan-bad-args-valid."""
    plan = _json_plan([{"id": 1, "tool": "t", "args": '{"x": 1,,}}'}])
    assert plan.dialect == "json"
    assert (plan.steps[0].args, plan.steps[0].args_valid) == ({}, False)
    assert "ARGS_SYNTAX" in codes(plan)


def test_unreadable_json_plan_dependencies_are_reported() -> None:
    """Kills jsonplan-deps-unreadable-silent."""
    plan = _json_plan([{"id": 1, "tool": "t", "args": {}},
                       {"id": 2, "tool": "t", "args": {}, "depends_on": [1, "the other"]}])
    assert plan.steps[1].explicit_deps == (1,)
    assert "DEPENDENCY_UNREADABLE" in codes(plan)


def test_free_placeholders_in_json_plan_args_become_hinted_references() -> None:
    """Kills jsonplan-free-placeholders-kept."""
    plan = _json_plan([{"id": 1, "tool": "t", "args": {}},
                       {"id": 2, "tool": "t", "args": {"a": "<the chiller id>"},
                        "depends_on": [1]}])
    value = plan.steps[1].args["a"]
    assert isinstance(value, Ref) and value.step == 1 and value.hint == "the chiller id"


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', "{'a': 1, 'a': 2}"])
def test_repair_json_refuses_a_key_given_twice(text: str) -> None:
    """Kills jsonrepair-strict-duplicate-last-wins and jsonrepair-tolerant-duplicate-silent:
    which value is meant is not known, so neither is picked."""
    got = repair_json(text)
    assert (got.value, got.duplicate_key) == (None, "a") and got.error


def test_repair_json_refuses_nan_and_infinity() -> None:
    """Kills jsonrepair-nan-read: JSON has no such numbers (a tool never gets one)."""
    for text in ('{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}'):
        got = repair_json(text)
        assert got.value is None and got.error, text


def test_repair_json_names_a_trailing_comma_repair_and_sees_a_cut_word() -> None:
    """Kills jsonrepair-trailing-comma-silent and jsonrepair-cut-word-not-truncated."""
    comma = repair_json('{"a": 1,}')
    assert comma.value == {"a": 1} and comma.repairs == ("trailing comma",)
    cut = repair_json('{"a": tru')
    assert (cut.value, cut.truncated) == (None, True)


def test_a_key_given_twice_in_json_plan_args_makes_the_step_invalid() -> None:
    """Kills jsonplan-duplicate-key-first-wins and jsonplan-duplicate-pair-silent."""
    text = _json_plan([{"id": 1, "tool": "t", "args": '{"a": 1, "a": 2}'}])
    pairs = _json_plan([{"id": 1, "tool": "t",
                         "args": [{"name": "a", "value": 1}, {"name": "a", "value": 2}]}])
    for plan in (text, pairs):
        assert (plan.steps[0].args, plan.steps[0].args_valid) == ({}, False)
        assert "JSON_DUPLICATE_KEY" in codes(plan)


def test_more_positional_values_than_parameters_make_the_step_invalid() -> None:
    """Kills jsonplan-positional-extra-valid."""
    catalog = ToolCatalog([fake_tool("assets", args={"site_name": str})])
    plan = parse_plan(json.dumps([{"tool": "assets", "args": ["MAIN", "SOUTH"]}]),
                      catalog=catalog)
    assert plan.steps[0].positional == ("MAIN", "SOUTH")
    assert not plan.steps[0].args_valid
    assert "ARGS_POSITIONAL_EXTRA" in codes(plan)


def test_json_plan_args_repairs_and_odd_placeholders_are_reported() -> None:
    """Kills jsonplan-repairs-silent and jsonplan-placeholder-unrecognized-silent."""
    repaired = _json_plan([{"id": 1, "tool": "t", "args": "{'a': 1}"}])
    assert repaired.steps[0].args == {"a": 1}
    assert "ARGS_REPAIRED" in codes(repaired)
    odd = _json_plan([{"id": 1, "tool": "t", "args": {"start": "{current_date_time()}"}}])
    assert "PLACEHOLDER_UNRECOGNIZED" in codes(odd)


def test_hashstep_repairs_cut_steps_and_free_placeholders_are_not_silent() -> None:
    """Kills hashstep-repairs-silent, hashstep-incomplete-step-valid and
    hashstep-free-placeholder-kept."""
    repaired = parse_plan("#Task1: a\n#Tool1: t\n#Args1: {'a': 1,}\n")
    assert repaired.steps[0].args == {"a": 1}
    assert "ARGS_REPAIRED" in codes(repaired)
    cut = parse_plan(TWO)  # the reply ends after #Tool2, before its #Args
    assert (cut.steps[1].args_valid, cut.steps[1].cut_off) == (False, True)
    assert "STEP_INCOMPLETE" in codes(cut)
    free = parse_plan(TWO + '#Args2: {"site": "<the main site>"}\n#Dependency2: #S1\n')
    value = free.steps[1].args["site"]
    assert isinstance(value, Ref) and value.step == 1 and value.hint == "the main site"


def test_a_reference_in_a_dict_key_makes_the_step_invalid() -> None:
    """Kills hashstep-ref-in-key-valid."""
    plan = parse_plan(TWO + '#Args2: {"tags": {"<step_1>": 1}}\n#Dependency2: #S1\n')
    assert not plan.steps[1].args_valid
    assert "REF_IN_KEY" in codes(plan)
