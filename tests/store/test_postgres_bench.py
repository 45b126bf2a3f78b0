"""Smoke test of ``benchmarks/store.py --postgres``: every store and LangGraph's
``PostgresSaver`` measured on the test server, with commits and round trips counted."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

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


@pytest.mark.slow
def test_a_tiny_postgres_run_measures_every_store_and_langgraph(
    postgres_server: str, tmp_path: Path
) -> None:
    pytest.importorskip("langgraph.checkpoint.postgres")
    bench = _load()
    out = tmp_path / "store_postgres.json"
    assert bench.main(["--postgres", postgres_server, "--steps", "8", "--repeat", "1",
                       "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    for shape in bench.PG_SHAPES:
        entries = data["shapes"][shape]
        assert set(entries) == set(bench.PG_STORES)
        for kind in ("postgres_process", "postgres_calls", "postgres_full"):
            assert entries[kind]["commits_per_step"] > 0
            assert entries[kind]["round_trips_per_step"] > 0
    # an unsafe call's start is a commit of its own, before the call: at least one a step
    assert data["shapes"]["chain_unsafe"]["postgres_calls"]["commits_per_step"] >= 1
    # a chain of safe steps holds its results: far fewer commits than steps
    assert data["shapes"]["chain"]["postgres_calls"]["commits_per_step"] < 1
    assert data["langgraph_postgres"]["commits_per_step"] >= 1
    assert data["table_md"].count("\n") == len(bench.PG_STORES) + 1


def test_the_doc_quotes_the_committed_postgres_results() -> None:
    """docs/durability.md's PostgreSQL table is the one benchmarks/store.py wrote."""
    data = json.loads((ROOT / "benchmarks" / "results" / "store_postgres.json").read_text())
    assert data["table_md"] in (ROOT / "docs" / "durability.md").read_text()
