from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from planexec.config import AgentConfig
from planexec.errors import ConfigError
from planexec.regress.matchers import MISSING, check_value, is_subset
from planexec.regress.scenario import (
    Matcher,
    Scenario,
    load_scenario,
    scenario_json_schema,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCENARIOS = ROOT / "tests" / "scenarios"
Factory = Callable[..., dict[str, object]]


def write(tmp_path: Path, data: object, name: str = "x.scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_scenario_file_loads_with_its_name_defaulting_to_the_file_name(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario()
    del data["name"]
    sc = load_scenario(write(tmp_path, data, "my_case.scenario.yaml"))
    assert sc.name == "my_case"
    assert sc.path == str(tmp_path / "my_case.scenario.yaml")
    assert sc.base_dir == tmp_path
    assert sc.expect.tool_sequence == ["sites"]


def test_an_unknown_top_level_key_is_rejected_with_its_name(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    with pytest.raises(ConfigError, match="unknown key 'expectations'"):
        load_scenario(write(tmp_path, sites_scenario(expectations={})))


def test_a_misspelt_expectation_is_an_error_not_a_silently_skipped_check(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario(expect={"tool_calls": [{"tool": "sites", "argz": {}}]})
    with pytest.raises(ConfigError, match=r"unknown key 'expect\.tool_calls\.0\.argz'"):
        load_scenario(write(tmp_path, data))


def test_config_overrides_are_validated_as_agent_config(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    sc = load_scenario(write(tmp_path, sites_scenario(config={"recovery": {"max_replans": 1}})))
    assert isinstance(sc.config, AgentConfig)
    assert sc.config.recovery.max_replans == 1
    with pytest.raises(ConfigError, match="recovery.max_replanz"):
        load_scenario(write(tmp_path, sites_scenario(config={"recovery": {"max_replanz": 1}})))


def test_a_matcher_with_an_unknown_key_or_no_check_is_rejected() -> None:
    with pytest.raises(ValueError, match="extra"):
        Matcher.model_validate({"contain": "x"})
    with pytest.raises(ValueError, match="at least one of"):
        Matcher.model_validate({})


def test_the_model_needs_exactly_one_source() -> None:
    base = {"question": "q", "tools": []}
    with pytest.raises(ValueError, match="exactly one"):
        Scenario.model_validate({**base, "model": {}})
    with pytest.raises(ValueError, match="exactly one"):
        Scenario.model_validate({**base, "model": {"replies": [], "cassette": "c.yaml"}})
    with pytest.raises(ValueError, match="record_with"):
        Scenario.model_validate({**base, "model": {"replies": [], "record_with": "openai:x"}})


def test_a_scenario_without_a_model_must_give_a_plan() -> None:
    with pytest.raises(ValueError, match="needs a 'plan'"):
        Scenario.model_validate({"question": "q"})
    assert Scenario.model_validate({"plan": "#Task1: x"}).model is None


def test_fake_tool_argument_types_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown type 'string'"):
        Scenario.model_validate({"plan": "p", "tools": [{"name": "t", "args": {"a": "string"}}]})
    sc = Scenario.model_validate({"plan": "p", "tools": [{"name": "t", "args": {"a": "str?"}}]})
    assert isinstance(sc.tools, list) and sc.tools[0].args == {"a": "str?"}


def test_tools_can_come_from_a_module_or_an_mcp_config() -> None:
    sc = Scenario.model_validate({"plan": "p", "tools": {"module": "pkg.mod:TOOLS"}})
    assert getattr(sc.tools, "module", None) == "pkg.mod:TOOLS"
    sc = Scenario.model_validate({"plan": "p", "tools": {"mcp_config": "mcp.json"}})
    assert getattr(sc.tools, "mcp_config", None) == "mcp.json"
    with pytest.raises(ValueError):
        Scenario.model_validate({"plan": "p", "tools": {"module": "no colon"}})


def test_a_scenario_is_picklable_with_its_path(tmp_path: Path, sites_scenario: Factory) -> None:
    import pickle

    sc = load_scenario(write(tmp_path, sites_scenario()))
    again = pickle.loads(pickle.dumps(sc))
    assert again == sc and again.path == sc.path


def test_every_scenario_of_the_suite_is_valid() -> None:
    files = sorted(SCENARIOS.glob("*.scenario.yaml"))
    assert len(files) >= 40
    for f in files:
        load_scenario(f)


def test_the_published_json_schema_is_up_to_date() -> None:
    published = json.loads((DOCS / "scenario.schema.json").read_text(encoding="utf-8"))
    assert published == scenario_json_schema()
    assert "expect" in published["properties"]
    assert published["additionalProperties"] is False


# -- matchers ----------------------------------------------------------------------------


def test_a_plain_value_means_equals() -> None:
    assert check_value("MAIN", "MAIN", "x") == []
    assert check_value(3, 3.0, "x") == []
    assert check_value(True, 1, "x") == ["x: expected true, got 1"]
    assert check_value([1, 2], [1, 2], "x") == []


def test_equals_null_is_an_explicit_check() -> None:
    assert check_value(Matcher(equals=None), None, "x") == []
    assert check_value(Matcher(equals=None), "a", "x") == ['x: expected null, got "a"']


def test_subset_matches_nested_dicts_and_list_items_in_any_order() -> None:
    actual = {"a": 1, "b": {"c": [{"id": 1, "x": 2}, {"id": 2}]}}
    assert is_subset({"b": {"c": [{"id": 2}, {"id": 1}]}}, actual)
    assert not is_subset({"b": {"c": [{"id": 3}]}}, actual)
    assert check_value(Matcher(subset={"a": 2}), actual, "out")[0].startswith(
        'out: expected to contain {"a": 2}'
    )


def test_json_subset_reads_json_out_of_prose_and_fences() -> None:
    text = 'Here you go:\n```json\n{"site": "MAIN", "n": 2}\n```'
    assert check_value(Matcher(json_subset={"site": "MAIN"}), text, "answer") == []
    assert check_value(Matcher(json_subset={"site": "B"}), text, "answer")
    assert "found none" in check_value(Matcher(json_subset={"a": 1}), "no json", "a")[0]


def test_contains_regex_type_and_absent() -> None:
    assert check_value(Matcher(contains=["Chiller", "6"]), "Chiller 6", "a") == []
    assert check_value(Matcher(not_contains="{step_"), "x {step_1} y", "a") == [
        "a: expected not to contain '{step_', got \"x {step_1} y\""
    ]
    assert check_value(Matcher(contains="hvac"), ["hvac", "x"], "a") == []
    assert check_value(Matcher(regex=r"^CWC\d+$"), "CWC04006", "a") == []
    assert check_value(Matcher(regex=r"^CWC"), "X", "a") == ['a: expected to match /^CWC/, got "X"']
    assert check_value(Matcher(type="int"), 3, "a") == []
    assert check_value(Matcher(type="int"), True, "a") == ["a: expected a int, got true"]
    assert check_value(Matcher(absent=True), MISSING, "a") == []
    assert check_value(Matcher(absent=True), 1, "a") == ["a: expected to be absent, got 1"]
    assert "missing" in check_value("x", MISSING, "a")[0]


def test_every_scenario_of_the_suite_validates_against_the_published_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DOCS / "scenario.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    for f in sorted(SCENARIOS.glob("*.scenario.yaml")):
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(f.read_text()))]
        assert errors == [], f"{f.name}: {errors}"
    bad = {"question": "q", "model": {"replies": []}, "expect": {"statuz": "FAILED"}}
    assert any("statuz" in e.message for e in validator.iter_errors(bad))


def test_an_unknown_llm_calls_purpose_is_rejected(tmp_path: Path, sites_scenario: Factory) -> None:
    data = sites_scenario(expect={"llm_calls": {"plann": 0}})
    with pytest.raises(ConfigError, match=r"expect\.llm_calls\.plann.*'plan', 'resolve'"):
        load_scenario(write(tmp_path, data))


def test_a_raised_reply_and_an_evaluator_are_validated(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    bad_reply = sites_scenario(model={"replies": [{"raise": "x", "status": 503}]})
    with pytest.raises(ConfigError, match="status"):
        load_scenario(write(tmp_path, bad_reply))
    bad_verdict = sites_scenario(evaluator={"verdicts": ["GREAT"]})
    with pytest.raises(ConfigError, match="evaluator"):
        load_scenario(write(tmp_path, bad_verdict))
    bad_spec = sites_scenario(evaluator="not a module path")
    with pytest.raises(ConfigError, match="evaluator"):
        load_scenario(write(tmp_path, bad_spec))
    with pytest.raises(ConfigError, match="cancel_after_tool_calls"):
        load_scenario(write(tmp_path, sites_scenario(cancel_after_tool_calls=-1)))
