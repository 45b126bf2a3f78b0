"""``planexec regress --ray``: scenarios as Ray tasks, same results as local runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from planexec.cli import main  # noqa: E402
from planexec.regress.report import load_report  # noqa: E402

pytestmark = [pytest.mark.ray]

PASSING = """\
tags: [ray]
tools:
  - name: asset
    args: {site_name: str, asset_id: str}
    output: {id: CWC04006, name: Chiller 6}
    hints: {read_only: true}
  - name: describe
    args: {record: dict}
    output: {text: "Chiller 6 (CWC04006)"}
    hints: {read_only: true}
plan: |
  1. asset(site_name="MAIN", asset_id="CWC04006")
  2. describe($1)
  3. join()
expect:
  status: SUCCEEDED
  steps:
    - id: 2
      resolution: {record: reference}
"""

FAILING = PASSING.replace("status: SUCCEEDED", "status: FAILED")


def test_scenarios_on_ray_give_the_same_results_as_local_runs(
    ray_session: Any, tmp_path: Path
) -> None:
    from planexec.distributed.regress import run_suite_on_ray
    from planexec.regress.runner import run_suite

    (tmp_path / "a_passes.scenario.yaml").write_text(PASSING, encoding="utf-8")
    (tmp_path / "b_fails.scenario.yaml").write_text(FAILING, encoding="utf-8")
    seen: list[str] = []
    on_ray = run_suite_on_ray([tmp_path], on_result=lambda r: seen.append(r.name))
    local = run_suite([tmp_path])

    def statuses(report: Any) -> list[tuple[str, str]]:
        return [(r.name, r.status) for r in report.results]

    assert statuses(on_ray) == statuses(local) == [("a_passes", "passed"), ("b_fails", "failed")]
    assert sorted(seen) == ["a_passes", "b_fails"]
    assert [r.failures for r in on_ray.results] == [r.failures for r in local.results]


def test_planexec_regress_ray_runs_the_suite_on_ray(
    ray_session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a_passes.scenario.yaml").write_text(PASSING, encoding="utf-8")
    out = tmp_path / "report.json"
    assert main(["regress", str(tmp_path), "--ray", "--json", str(out)]) == 0
    assert [(r.name, r.status) for r in load_report(out).results] == [("a_passes", "passed")]
    assert "1 passed" in capsys.readouterr().out
