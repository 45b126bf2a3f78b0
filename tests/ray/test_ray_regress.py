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


def test_regress_with_ray_reports_the_same_results_as_a_local_run(
    ray_session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a_passes.scenario.yaml").write_text(PASSING, encoding="utf-8")
    (tmp_path / "b_fails.scenario.yaml").write_text(FAILING, encoding="utf-8")
    reports = {}
    for mode, extra in (("local", []), ("ray", ["--ray"])):
        out = tmp_path / f"{mode}.json"
        code = main(["regress", str(tmp_path), "--json", str(out), *extra])
        assert code == 1  # one scenario fails its expectation, on both
        reports[mode] = load_report(out)
    capsys.readouterr()

    def statuses(report: Any) -> list[tuple[str, str]]:
        return [(r.name, r.status) for r in report.results]

    assert statuses(reports["ray"]) == statuses(reports["local"]) == [
        ("a_passes", "passed"), ("b_fails", "failed")
    ]
