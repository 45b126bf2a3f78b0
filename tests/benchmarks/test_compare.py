"""Smoke tests of the side-by-side benchmark harness (outcomes only, no timings).

Every framework runs the same small workloads to completion (each runner checks that
every step gave an output), the goals are computed from rows as written, and the
benchmark refuses to run without LangGraph.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, f"_bench_{name}", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("framework", ["planexec", "asyncio", "langgraph"])
@pytest.mark.parametrize("calls", ["direct", "langchain"])
@pytest.mark.parametrize("shape", ["chain", "fanout"])
def test_every_framework_runs_every_step_of_a_workload(
    framework: str, calls: str, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if framework == "langgraph":
        pytest.importorskip("langgraph")
    fw = _load("_frameworks", monkeypatch)
    work = fw.Workload(shape, 5, "noop")
    got = fw.measure(fw.PREPARE[framework](work, calls), memory=True)
    assert got.peak_bytes is not None and got.peak_bytes > 0


def test_the_workloads_have_the_shapes_they_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    fw = _load("_frameworks", monkeypatch)
    chain = fw.Workload("chain", 4, "sleep", 0.05)
    assert chain.deps == [(1, ()), (2, (1,)), (3, (2,)), (4, (3,))]
    assert chain.critical_path == pytest.approx(0.2)
    fan = fw.Workload("fanout", 3, "sleep", 0.05)
    assert fan.deps == [(1, ()), (2, (1,)), (3, (1,)), (4, (1,)), (5, (2, 3, 4))]
    assert fan.steps == 5 and fan.critical_path == pytest.approx(0.15)
    plan = fw.make_plan(fan)
    assert [s.depends_on for s in plan.steps] == [d for _, d in fan.deps]
    assert [sorted(s.deps) for s in plan.steps][-1] == [2, 3, 4]


def test_the_goals_are_read_from_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    compare = _load("compare", monkeypatch)

    def row(fw: str, shape: str, n: int, tool: str, calls: str, **values: object) -> dict:
        return {"framework": fw, "shape": shape, "n": n, "tool": tool, "calls": calls, **values}

    def s(median: float) -> dict[str, float]:
        return {"median": median, "min": median, "max": median}

    rows = [
        row("planexec", "chain", 1000, "noop", "direct", cpu_us_per_step=s(20.0)),
        row("planexec", "chain", 1000, "noop", "langchain",
            cpu_us_per_step=s(120.0), wall_us_per_step=s(130.0)),
        row("asyncio", "chain", 1000, "noop", "langchain",
            cpu_us_per_step=s(100.0), wall_us_per_step=s(100.0)),
        row("planexec", "fanout", 100, "sleep", "langchain", wall_over_critical=s(1.04)),
        row("asyncio", "fanout", 100, "sleep", "langchain", wall_over_critical=s(1.3)),
    ]
    goals = {g["goal"]: g for g in compare.goals(rows)}
    own = goals["planexec's own CPU per step, chain of 1000 (direct calls)"]
    assert own["value_us"] == 20.0 and own["met"] is True
    cpu = goals["no-op tool steps ÷ bare asyncio (cpu_us_per_step), chain of 1000"]
    assert cpu["ratio"] == 1.2 and cpu["met"] is False
    wide = goals["wall ÷ critical path, fan-out of 100 sleeping tools"]
    assert wide["met"] is True and wide["floor_ratio"] == 1.3


def test_without_langgraph_the_benchmark_says_so_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    compare = _load("compare", monkeypatch)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "langgraph" else real(name)
    )
    with pytest.raises(SystemExit) as exit_info:
        compare._require_langgraph()
    assert exit_info.value.code == 2
    assert "planexec[bench]" in capsys.readouterr().err


def test_the_performance_page_quotes_the_committed_results() -> None:
    """docs/performance.md's tables are the ones benchmarks/compare.py wrote."""
    import json

    root = BENCH.parent
    data = json.loads((root / "benchmarks" / "results" / "compare.json").read_text())
    doc = (root / "docs" / "performance.md").read_text()
    assert data["tables_md"] in doc
