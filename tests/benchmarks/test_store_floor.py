"""Smoke test of the store-floor benchmark, and the tie between its results and the doc."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "store_floor.py"


def _load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH.parent))  # it shares userpath.py's formats
    spec = importlib.util.spec_from_file_location("_bench_store_floor", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_bench_store_floor", module)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_run_measures_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load(monkeypatch)
    out = tmp_path / "store_floor.json"
    assert bench.main(["--steps", "20", "--rounds", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["parts"]) == set(bench.PARTS)
    for s in data["parts"].values():
        assert 0 <= s["min"] <= s["median"] <= s["max"]
    assert data["line_md"] == bench.line_md(data)


def test_the_step_is_the_one_a_read_only_run_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The events measured encode as the store encodes a run's: four rows, one result."""
    module = _load(monkeypatch)
    from planexec.store.rows import encode

    rows = [encode(e) for e in module.step_events(1)]
    assert [r[0][2] for r in rows] == ["StepStarted", "ArgResolved", "ToolCallStarted",
                                       "StepFinished"]
    assert [r[1] is not None for r in rows] == [False, False, False, True]  # one result row


def test_the_doc_quotes_the_committed_results() -> None:
    data = json.loads((ROOT / "benchmarks" / "results" / "store_floor.json").read_text())
    doc = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert data["line_md"] in doc
