from __future__ import annotations

import json
import pickle
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from planexec.errors import ConfigError
from planexec.regress.report import (
    ScenarioResult,
    SuiteReport,
    compare_reports,
    describe_comparison,
    load_report,
    write_json,
    write_junit,
)
from planexec.regress.runner import discover, matches_filter, run_scenario, run_suite
from planexec.regress.scenario import Scenario

Factory = Callable[..., dict[str, object]]


def write(tmp_path: Path, data: dict[str, object], name: str) -> Path:
    path = tmp_path / f"{name}.scenario.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_passing_scenario_reports_its_calls_and_run(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    result = run_scenario(write(tmp_path, sites_scenario(), "ok"))
    assert result.status == "passed", result.describe()
    assert result.llm_calls == 2
    assert result.llm_calls_by_purpose == {"plan": 1, "answer": 1}
    assert result.tool_calls == 1
    assert result.run is not None and result.run["status"] == "SUCCEEDED"
    assert result.run["run_id"] == "sites"
    assert result.describe() == ""
    assert pickle.loads(pickle.dumps(result)).to_dict() == result.to_dict()


def test_a_scenario_object_runs_too(sites_scenario: Factory) -> None:
    result = run_scenario(Scenario.model_validate(sites_scenario()))
    assert result.status == "passed"
    assert result.path is None


def test_failing_expectations_are_all_reported_readably(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario(
        expect={
            "status": "FAILED",
            "tool_calls": [{"tool": "sites", "args": {"x": 1}}, {"tool": "assets"}],
            "steps": [{"id": 1, "status": "FAILED"}],
            "answer": {"contains": "SITE_B"},
            "max_llm_calls": 1,
            "llm_calls": {"plan": 2},
        }
    )
    result = run_scenario(write(tmp_path, data, "bad"))
    assert result.status == "failed"
    text = [str(f) for f in result.failures]
    assert text[0] == "status: expected FAILED, got SUCCEEDED"
    assert text[1].startswith(
        "tool_calls[0]: no call of sites matched (1 call(s)); closest, step 1"
    )
    assert "args.x: expected 1, but it is missing" in text[1]
    assert text[2] == "tool_calls[1]: expected a call of assets; tools called: ['sites']"
    assert text[3] == "steps[0].status: expected step 1 status FAILED, got SUCCEEDED"
    assert text[4] == "answer: expected to contain 'SITE_B', got \"There is one site, MAIN.\""
    assert text[5].startswith("max_llm_calls: expected at most 1 model calls, got 2")
    assert text[6].startswith("llm_calls.plan: expected 2 plan model call(s), got 1")
    assert result.first_problem == text[0]
    assert "scenario 'sites'" in result.describe() and "- status: expected" in result.describe()


def test_unused_and_missing_scripted_replies_fail_the_scenario(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario()
    data["model"]["replies"].append("an extra reply")  # type: ignore[index]
    result = run_scenario(write(tmp_path, data, "extra"))
    assert result.status == "failed"
    assert "1 of 3 scripted replies were never used" in result.first_problem

    data = sites_scenario()
    data["model"]["replies"].pop()  # type: ignore[index]
    result = run_scenario(write(tmp_path, data, "short"))
    assert result.status == "failed"
    assert "called 2 times but the scenario scripts 1 replies" in result.describe()

    data = sites_scenario()
    data["model"]["replies"].append("an extra reply")  # type: ignore[index]
    data["model"]["strict"] = False  # type: ignore[index]
    assert run_scenario(write(tmp_path, data, "lenient")).status == "passed"


def test_a_scenario_that_cannot_run_is_an_error_not_a_crash(tmp_path: Path) -> None:
    bad = tmp_path / "bad.scenario.yaml"
    bad.write_text("question: [unclosed\n")
    result = run_scenario(bad)
    assert result.status == "error"
    assert "not valid YAML" in (result.error or "")

    module = tmp_path / "mod.scenario.yaml"
    module.write_text(
        yaml.safe_dump({"plan": "#Task1: x", "tools": {"module": "nope.nothing:TOOLS"}})
    )
    result = run_scenario(module)
    assert result.status == "error"
    assert "nope" in (result.error or "")


def test_a_slow_run_hits_the_scenario_timeout(tmp_path: Path) -> None:
    data = {
        "timeout": 0.2,
        "tools": [{"name": "slow", "output": {"ok": True}, "latency": 2.0}],
        "plan": "#Task1: Wait.\n#Tool1: slow\n#Args1: {}\n#Dependency1: None\n",
    }
    result = run_scenario(write(tmp_path, data, "slow"))
    assert result.status == "error"
    assert "timeout (0.2s)" in (result.error or "")


def test_a_skipped_scenario_is_not_run(tmp_path: Path, sites_scenario: Factory) -> None:
    result = run_scenario(write(tmp_path, sites_scenario(skip="needs a GPU"), "skip"))
    assert result.status == "skipped"
    assert result.error == "needs a GPU"
    assert result.run is None


# -- suites -----------------------------------------------------------------------------------


def test_filter_terms_are_substrings_or_globs_over_names_and_tags() -> None:
    assert matches_filter("recovery_tool_error", ["resilience"], None)
    assert matches_filter("recovery_tool_error", [], "tool_err")
    assert matches_filter("recovery_tool_error", [], "RECOVERY")
    assert matches_filter("x", ["demo", "cassette"], "cassette")
    assert matches_filter("recovery_tool_error", [], "recovery_*")
    assert not matches_filter("silent_x", [], "recovery_*")
    assert matches_filter("x", ["fanout"], "fan*")
    assert matches_filter("a", [], "zzz, a")
    assert matches_filter("demo_x", ["demo"], "demo, !cassette")
    assert not matches_filter("demo_x", ["demo", "cassette"], "demo,!cassette")
    assert matches_filter("silent_x", [], "!demo")


def test_discover_finds_scenario_files_recursively_and_rejects_missing_paths(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    (tmp_path / "sub").mkdir()
    a = write(tmp_path, sites_scenario(), "a")
    b = write(tmp_path / "sub", sites_scenario(), "b")
    (tmp_path / "notes.yaml").write_text("x: 1")
    assert discover([tmp_path]) == [a, b]
    assert discover([a, tmp_path]) == [a, b]
    with pytest.raises(ConfigError, match="no scenario file"):
        discover([tmp_path / "missing"])


def test_a_suite_keeps_path_order_and_reports_invalid_files(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    write(tmp_path, sites_scenario(name="b-ok"), "b")
    write(tmp_path, sites_scenario(name="a-bad", expect={"status": "FAILED"}), "a")
    (tmp_path / "c.scenario.yaml").write_text("question: q\nunknown: 1\n")
    seen: list[str] = []
    report = run_suite([tmp_path], on_result=lambda r: seen.append(r.name))
    assert [r.name for r in report.results] == ["a-bad", "b-ok", "c.scenario.yaml"]
    assert [r.status for r in report.results] == ["failed", "passed", "error"]
    assert sorted(seen) == sorted(r.name for r in report.results)
    assert not report.passed
    assert report.summary == {"total": 3, "passed": 1, "failed": 1, "error": 1, "skipped": 0}
    only = run_suite([tmp_path], filter_expr="b-ok")
    assert [r.name for r in only.results] == ["b-ok"] and only.passed


def test_two_workers_give_the_same_results_as_one(scenarios_dir: Path) -> None:
    one = run_suite([scenarios_dir], filter_expr="recovery,dialect", workers=1)
    two = run_suite([scenarios_dir], filter_expr="recovery,dialect", workers=2)
    assert len(one.results) >= 15
    assert two.workers == 2
    assert [r.outcome() for r in two.results] == [r.outcome() for r in one.results]
    assert all(r.status == "passed" for r in one.results), [
        r.describe() for r in one.results if not r.passed
    ]


# -- reports ----------------------------------------------------------------------------------


def sample_report() -> SuiteReport:
    return SuiteReport(
        [
            ScenarioResult(name="ok", path="s/ok.scenario.yaml", llm_calls=2, tool_calls=1),
            ScenarioResult(
                name="bad",
                status="failed",
                failures=[],
                error=None,
                llm_calls=3,
                tool_calls=4,
            ),
            ScenarioResult(name="broken", status="error", error="cassette miss\n-a\n+b"),
            ScenarioResult(name="later", status="skipped", error="not yet"),
        ],
        wall_time=1.5,
    )


def test_the_json_report_round_trips(tmp_path: Path) -> None:
    report = sample_report()
    path = tmp_path / "r.json"
    write_json(report, path)
    data = json.loads(path.read_text())
    assert data["format"] == "planexec-regress-report"
    assert data["summary"] == {"total": 4, "passed": 1, "failed": 1, "error": 1, "skipped": 1}
    again = load_report(path)
    assert [r.to_dict() for r in again.results] == [r.to_dict() for r in report.results]
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(ConfigError, match="not a planexec regression report"):
        load_report(tmp_path / "x.json")


def test_the_junit_xml_has_one_testcase_per_scenario(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    write_junit(sample_report(), path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.get("errors") == "1" and suite.get("skipped") == "1"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["ok"].get("classname") == "s"
    assert cases["bad"].find("failure") is not None
    error = cases["broken"].find("error")
    assert error is not None and "+b" in (error.text or "")
    assert cases["later"].find("skipped") is not None


def test_a_baseline_comparison_shows_status_changes_and_moved_calls() -> None:
    baseline = sample_report()
    current = SuiteReport(
        [
            ScenarioResult(name="ok", status="failed", llm_calls=4, tool_calls=1),
            ScenarioResult(name="bad", llm_calls=3, tool_calls=4),
            ScenarioResult(name="new", llm_calls=1),
        ]
    )
    comparison = compare_reports(current, baseline)
    assert [(c.name, c.before, c.after) for c in comparison.status_changes] == [
        ("ok", "passed", "failed"),
        ("bad", "failed", "passed"),
        ("new", None, "passed"),
        ("broken", "error", None),
        ("later", "skipped", None),
    ]
    assert [c.name for c in comparison.regressions] == ["ok"]
    assert [c.name for c in comparison.fixes] == ["bad"]
    assert [c.name for c in comparison.moved()] == ["ok"]
    assert comparison.totals()["llm_calls"] == (5, 7)
    lines = describe_comparison(comparison)
    assert "ok: passed → failed" in lines
    assert "ok: model calls 2 → 4, tool calls 1 → 1" in lines
    assert lines[-1].startswith("totals: model calls 5 → 7")
    assert comparison.to_dict()["regressions"] == ["ok"]


# --------------------------------------------------------------------------- review fixes

BOOM_PLAN = """\
#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: The sites.
"""
SITES_PLAN_TEXT = BOOM_PLAN


def boom_scenario(expect: dict[str, object]) -> dict[str, object]:
    """A plan run without a model whose only tool raises "boom"."""
    return {
        "name": "boom",
        "plan": BOOM_PLAN,
        "tools": [{"name": "sites", "error": "boom"}],
        "config": {"executor": {"tool_retry": {"attempts": 1}}},
        "expect": expect,
    }


def test_an_explicit_null_expectation_is_checked_not_skipped(tmp_path: Path) -> None:
    expect = {
        "status": "FAILED",
        "error": None,
        "answer": None,
        "steps": [{"id": 1, "error": None, "note": None, "output": None}],
    }
    result = run_scenario(write(tmp_path, boom_scenario(expect), "nulls"))
    assert result.status == "failed", result.describe()
    wheres = [f.where for f in result.failures]
    assert "error" in wheres  # the run failed with an error message, not null
    assert "steps[0].error" in wheres
    assert "answer" not in wheres  # no model, no answer: null holds
    assert "steps[0].note" not in wheres and "steps[0].output" not in wheres
    assert any("expected null, got" in f.message for f in result.failures)


def test_an_expectation_not_written_is_not_checked(tmp_path: Path) -> None:
    result = run_scenario(write(tmp_path, boom_scenario({"status": "FAILED"}), "unwritten"))
    assert result.status == "passed", result.describe()


def test_llm_calls_total_counts_every_purpose(tmp_path: Path, sites_scenario: Factory) -> None:
    ok = sites_scenario(expect={"llm_calls": {"plan": 1, "answer": 1, "total": 2}})
    assert run_scenario(write(tmp_path, ok, "total")).status == "passed"
    bad = sites_scenario(expect={"llm_calls": {"total": 3}})
    result = run_scenario(write(tmp_path, bad, "total3"))
    assert [str(f) for f in result.failures][0].startswith(
        "llm_calls.total: expected 3 total model call(s), got 2"
    )


def test_a_scripted_reply_can_raise_and_the_run_records_the_model_error(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario(
        model={"replies": [{"raise": "provider overloaded"}]},
        config={"model": {"retry": {"attempts": 1}}},
        expect={"status": "FAILED", "error_kind": "MODEL_ERROR"},
    )
    result = run_scenario(write(tmp_path, data, "raise"))
    assert result.status == "passed", result.describe()
    assert result.run is not None and "provider overloaded" in result.run["error"]


def test_a_transient_raised_reply_is_retried_by_the_model_client(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    replies = [{"raise": "connection reset", "transient": True}, SITES_PLAN_TEXT, "One: MAIN."]
    data = sites_scenario(
        model={"replies": replies},
        config={"model": {"retry": {"attempts": 2, "base_delay": 0, "jitter": 0}}},
        expect={"status": "SUCCEEDED", "llm_calls": {"plan": 2, "answer": 1}},
    )
    result = run_scenario(write(tmp_path, data, "transient"))
    assert result.status == "passed", result.describe()


def test_scripted_verdicts_left_unused_fail_the_scenario(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario(evaluator={"verdicts": ["SUCCESS", "SUCCESS"]})
    result = run_scenario(write(tmp_path, data, "unused"))
    assert result.status == "failed"
    assert str(result.failures[0]).startswith(
        "evaluator.verdicts: 1 of 2 scripted verdicts were never used"
    )


def test_running_out_of_scripted_verdicts_is_an_error(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    replies = [SITES_PLAN_TEXT, "One site.", SITES_PLAN_TEXT, "One site."]
    data = sites_scenario(model={"replies": replies}, evaluator={"verdicts": ["EXECUTION_ERROR"]})
    result = run_scenario(write(tmp_path, data, "exhausted"))
    assert result.status == "error"
    assert "the evaluator was asked for verdict 2" in (result.error or "")


def test_an_evaluator_can_come_from_module_attr(
    tmp_path: Path, sites_scenario: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_judges.py").write_text(
        "def only_main(case):\n"
        "    ok = 'MAIN' in (case.answer or '')\n"
        "    return ok if ok else ('INPUT_DATA_ERROR', 'no MAIN', 'name MAIN')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = sites_scenario(evaluator="my_judges:only_main", expect={"status": "SUCCEEDED"})
    assert run_scenario(write(tmp_path, data, "judged")).status == "passed"
    bad = sites_scenario(
        evaluator="my_judges:only_main",
        model={"replies": [SITES_PLAN_TEXT, "One site."]},
        config={"recovery": {"max_replans": 0}},
        expect={"status": "FAILED", "error_kind": "EVALUATION_FAILED"},
    )
    result = run_scenario(write(tmp_path, bad, "judged_bad"))
    assert result.status == "passed", result.describe()


def test_an_invalid_file_shows_the_wrong_key_in_its_first_problem(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    path = write(tmp_path, sites_scenario(expect={"llm_calls": {"plann": 0}}), "typo")
    report = run_suite([path])
    first = report.results[0].first_problem
    assert report.results[0].status == "error"
    assert "\n" not in first
    assert "expect.llm_calls.plann" in first


def test_a_baseline_that_is_not_a_report_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text("{}")
    with pytest.raises(ConfigError, match="is not a planexec regression report.*--json"):
        load_report(path)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="is not a planexec regression report"):
        load_report(path)


def test_step_results_in_the_report_are_in_step_order(scenarios_dir: Path) -> None:
    result = run_scenario(scenarios_dir / "demo_fanout_history_plan.scenario.yaml")
    assert result.run is not None
    for attempt in result.run["attempts"]:
        ids = [r["step_id"] for r in attempt["results"]]
        assert ids == sorted(ids)


def test_a_cancelled_scenario_run_is_reported_as_cancelled(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario(
        cancel_after_tool_calls=0,
        model={"replies": [SITES_PLAN_TEXT]},
        expect={"status": "CANCELLED", "error_kind": "CANCELLED", "recovery": []},
    )
    result = run_scenario(write(tmp_path, data, "cancel"))
    assert result.status == "passed", result.describe()
