from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from planexec.cli import main

Factory = Callable[..., dict[str, object]]


def test_the_project_suite_passes_through_the_cli_with_two_workers(
    scenarios_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    junit = tmp_path / "junit.xml"
    code = main(
        [
            "regress",
            str(scenarios_dir),
            "--workers",
            "2",
            "--json",
            str(report),
            "--junit",
            str(junit),
        ]
    )
    out = capsys.readouterr().out
    data = json.loads(report.read_text())
    failing = [s for s in data["scenarios"] if s["status"] != "passed"]
    assert code == 0, failing
    assert data["summary"]["total"] >= 40
    assert data["summary"]["passed"] == data["summary"]["total"]
    assert data["workers"] == 2
    assert f"{data['summary']['total']} passed, 0 failed" in out
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "0"  # type: ignore[union-attr]


def test_a_failing_scenario_exits_1_with_its_first_failing_expectation(
    tmp_path: Path, sites_scenario: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ok.scenario.yaml").write_text(yaml.safe_dump(sites_scenario(name="ok")))
    bad = sites_scenario(name="bad", expect={"answer": {"contains": "SITE_B"}})
    (tmp_path / "bad.scenario.yaml").write_text(yaml.safe_dump(bad))
    assert main(["regress", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "1 passed, 1 failed" in out
    assert "answer: expected to contain 'SITE_B'" in out


def test_filter_selects_scenarios_and_an_empty_selection_is_a_usage_error(
    tmp_path: Path, sites_scenario: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.scenario.yaml").write_text(yaml.safe_dump(sites_scenario(name="alpha")))
    (tmp_path / "b.scenario.yaml").write_text(
        yaml.safe_dump(sites_scenario(name="beta", expect={"status": "FAILED"}))
    )
    assert main(["regress", str(tmp_path), "--filter", "alph*"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    assert main(["regress", str(tmp_path), "--filter", "unit,!beta"]) == 0
    assert main(["regress", str(tmp_path), "--filter", "nothing-matches"]) == 2
    assert "no scenarios selected" in capsys.readouterr().err
    assert main(["regress", str(tmp_path / "missing")]) == 2


def test_baseline_comparison_shows_what_changed(
    tmp_path: Path, sites_scenario: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.scenario.yaml"
    path.write_text(yaml.safe_dump(sites_scenario(name="sites")))
    baseline = tmp_path / "baseline.json"
    assert main(["regress", str(path), "--json", str(baseline)]) == 0
    path.write_text(yaml.safe_dump(sites_scenario(name="sites", expect={"status": "FAILED"})))
    capsys.readouterr()
    now = tmp_path / "now.json"
    assert main(["regress", str(path), "--baseline", str(baseline), "--json", str(now)]) == 1
    out = capsys.readouterr().out
    assert "compared with the baseline" in out
    assert "sites: passed → failed" in out
    assert json.loads(now.read_text())["baseline"]["regressions"] == ["sites"]


def test_record_writes_the_cassette_and_replay_uses_it(
    tmp_path: Path, sites_scenario: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    data = sites_scenario(name="sites")
    data["model"] = {
        "cassette": "sites.cassette.yaml",
        "record_with": {"replies": data["model"]["replies"]},  # type: ignore[index]
    }
    (tmp_path / "s.scenario.yaml").write_text(yaml.safe_dump(data))
    assert main(["regress", str(tmp_path), "--record"]) == 0
    assert "(recorded)" in capsys.readouterr().out
    assert (tmp_path / "sites.cassette.yaml").is_file()
    assert main(["regress", str(tmp_path)]) == 0


def test_text_with_square_brackets_is_printed_as_it_is(
    tmp_path: Path, sites_scenario: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    data = sites_scenario(
        name="brackets [x]",
        tools=[{"name": "sites", "output": "see [link] and [bold]x", "hints": {"read_only": True}}],
        expect={"steps": [{"id": 1, "output": "something else"}]},
    )
    (tmp_path / "b.scenario.yaml").write_text(yaml.safe_dump(data))
    assert main(["regress", str(tmp_path)]) == 1
    out = " ".join(capsys.readouterr().out.split())  # the table may wrap lines
    assert "brackets [x]" in out
    assert 'got "see [link] and [bold]x"' in out
    missing = tmp_path / "missing[ray]"
    assert main(["regress", str(missing)]) == 2
    assert "missing[ray]" in " ".join(capsys.readouterr().err.split())


def test_an_invalid_scenario_shows_the_wrong_key_in_the_summary(
    tmp_path: Path, sites_scenario: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    data = sites_scenario(expect={"llm_calls": {"plann": 0}})
    (tmp_path / "typo.scenario.yaml").write_text(yaml.safe_dump(data))
    assert main(["regress", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    table = out.split("0 passed")[0]
    assert "expect.llm_calls.plann" in " ".join(table.split())


def test_workers_give_the_same_report_as_one_worker(
    scenarios_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from planexec.regress.report import load_report, stable_run

    reports = []
    for workers in ("1", "2"):
        path = tmp_path / f"r{workers}.json"
        args = ["regress", str(scenarios_dir), "--filter", "fanout", "--workers", workers]
        assert main([*args, "--json", str(path)]) == 0
        results = load_report(path).results
        reports.append([(r.name, r.status, stable_run(r.run)) for r in results])
    capsys.readouterr()
    assert reports[0] == reports[1]
