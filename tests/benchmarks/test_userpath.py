"""Smoke test of the user's-path benchmark (outcomes and counts only, no timings).

A quick run measures every path with both ways of calling tools, writes valid JSON with
every goal of issue 29, and counts the store's commits; docs/performance.md quotes the
committed results.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_userpath", BENCH / "userpath.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_bench_userpath", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_quick_run_writes_every_path_and_goal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    bench = _load(monkeypatch)
    out = tmp_path / "userpath.json"
    assert bench.main(["--quick", "--out", str(out), "--no-plot"]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["quick"] is True and len(data["load_average_before"]) == 3
    cells = {(r["path"], r["calls"], r["shape"], r["n"]) for r in data["rows"]}
    for path in bench.PATHS:
        for calls in bench.CALLS:
            assert (path, calls, "chain", 10) in cells
            assert (path, calls, "fanout", 10) in cells
    assert {("agent_safe", "direct", "chain", 10), ("agent", "direct", "chain", 30),
            ("executor", "direct", "chain", 30)} <= cells
    for row in data["rows"]:
        for metric in ("cpu_us_per_step", "wall_us_per_step"):
            s = row[metric]
            assert 0 < s["min"] <= s["median"] <= s["max"], row
    assert [p["n"] for p in data["parse"]] == [10, 30]
    goals = [g["goal"][:2] for g in data["goals"]]
    assert {"1.", "2.", "3.", "4.", "5."} <= set(goals)
    # (a difference of two medians may be below zero on a small, noisy run)
    assert all(isinstance(g["met"], bool) and isinstance(g["value"], (int, float))
               for g in data["goals"])
    assert all(g["met"] == (g["value"] <= g["target"]) for g in data["goals"])
    assert data["tables_md"] == bench.tables_md(data)


@pytest.mark.slow
def test_the_store_counts_hold_the_durability_promise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not timed: an unsafe call start is flushed before the call; a fan-out's
    call starts may share flushes, never need more; a read-only tool's are not flushed."""
    bench = _load(monkeypatch)
    chain = bench.count_commits(bench.Work("chain", 12), "agent", tmp_path)
    assert chain["unsafe_calls"] == 12
    # one flush per call start (a chain's starts never wait together), and the run's end
    assert chain["flushed_commits"] == 12 + 1
    safe = bench.count_commits(bench.Work("chain", 12), "agent_safe", tmp_path)
    assert safe["unsafe_calls"] == 0 and safe["flushed_commits"] == 1  # the run's end
    fan = bench.count_commits(bench.Work("fanout", 12, 0.01), "agent", tmp_path)
    # root, 12 steps that start together, join: at least the root's, one for the 12 and the
    # join's; at most one each
    assert fan["unsafe_calls"] == 14 and 3 <= fan["flushed_commits"] <= 14 + 1


def test_the_performance_page_quotes_the_committed_userpath_results() -> None:
    """docs/performance.md's user's-path tables are the ones benchmarks/userpath.py wrote."""
    data = json.loads((BENCH / "results" / "userpath.json").read_text(encoding="utf-8"))
    doc = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert data["tables_md"] in doc
    assert data["quick"] is False  # the page quotes a full run


def test_the_tables_are_copied_into_the_page_between_its_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _load(monkeypatch)
    page = tmp_path / "performance.md"
    page.write_text(f"intro\n{bench._BEGIN}\nold tables\n{bench._END}\nafter\n")
    bench.update_docs({"tables_md": "| new |"}, page)
    assert page.read_text() == f"intro\n{bench._BEGIN}\n\n| new |\n\n{bench._END}\nafter\n"
    bench.update_docs({"tables_md": "| newer |"}, page)  # again: replaced, not added
    assert "| new |" not in page.read_text() and page.read_text().count("| newer |") == 1
