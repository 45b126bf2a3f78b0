"""Smoke test of the store benchmark harness, and the tie between its results and the doc."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "store.py"


def _load() -> ModuleType:
    name = "_bench_store"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_a_tiny_run_writes_every_store_of_every_shape(tmp_path: Path) -> None:
    bench = _load()
    out = tmp_path / "store.json"
    assert bench.main(["--steps", "12", "--repeat", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["shapes"]) == set(bench.SHAPES)
    for shape in data["shapes"].values():
        assert set(shape) == set(bench.STORES)
        assert shape["none"]["ratio_to_none"] == 1.0
        assert all(len(entry["runs_s"]) == 1 and "cpu" in entry for entry in shape.values())
    assert data["table_md"].count("\n") == len(bench.STORES) + 1  # header, rule, rows


def test_the_doc_quotes_the_committed_results() -> None:
    """docs/durability.md's cost table is the one benchmarks/store.py wrote."""
    data = json.loads((ROOT / "benchmarks" / "results" / "store.json").read_text())
    doc = (ROOT / "docs" / "durability.md").read_text()
    assert data["table_md"] in doc
