"""Scheduler overhead per step with no-op tools, at 100, 1,000 and 10,000 steps.

Two plan shapes: ``independent`` (no dependencies) and ``chain`` (each step passes the
previous step's output on through a whole-value reference, so the resolver runs too).
Two runners: ``noop`` (a runner that returns at once: scheduler + resolver + events
only) and ``langchain`` (the default runner invoking real langchain-core tools).

Writes ``benchmarks/results/scheduler.json``. Growth must be linear: the per-step cost
at 10,000 steps divided by the per-step cost at 100 steps should stay near 1.

    python benchmarks/scheduler.py [--sizes 100 1000 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import platform
import pstats
import time
from pathlib import Path
from typing import Any

from loguru import logger

from planexec.config import ExecutorSettings
from planexec.executor import Executor
from planexec.parsing.refs import find_refs
from planexec.plan import Plan, Step
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec

RESULTS = Path(__file__).resolve().parent / "results"


class NoopRunner:
    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        return {"ok": 1}


def make_plan(n: int, shape: str) -> Plan:
    steps = []
    for i in range(1, n + 1):
        if shape == "chain" and i > 1:
            args = find_refs({"v": f"<step_{i - 1}>"})
            steps.append(Step(id=i, tool="noop", args=args, depends_on=(i - 1,)))
        else:
            steps.append(Step(id=i, tool="noop", args={}))
    return Plan(steps=tuple(steps))


async def once(n: int, shape: str, runner: str) -> float:
    tool = fake_tool("noop", {"ok": 1}, args={"v": (Any, None)}, hints={"read_only": True})
    executor = Executor(
        ToolCatalog([tool]),
        config=ExecutorSettings(max_concurrency=64),
        runner=NoopRunner() if runner == "noop" else None,
    )
    plan = make_plan(n, shape)
    start = time.perf_counter()
    results = await executor.run(plan)
    elapsed = time.perf_counter() - start
    assert len(results) == n and all(r.ok for r in results), results[:3]
    return elapsed


def count_calls(n: int, shape: str) -> float:
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(once(n, shape, "noop"))
    profiler.disable()
    stats = pstats.Stats(profiler)
    return float(stats.total_calls) / n  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-count", action="store_true", help="skip counting calls")
    args = parser.parse_args()
    logger.remove()
    rows = []
    for runner in ("noop", "langchain"):
        for shape in ("independent", "chain"):
            per_step: dict[int, float] = {}
            for n in args.sizes:
                gc.collect()
                best = min(asyncio.run(once(n, shape, runner)) for _ in range(args.repeat))
                per_step[n] = best / n * 1e6
                print(f"{runner:9} {shape:11} n={n:6}  {per_step[n]:8.1f} µs/step")
            lo, hi = min(args.sizes), max(args.sizes)
            row: dict[str, Any] = {
                "runner": runner,
                "shape": shape,
                "us_per_step": {str(k): round(v, 2) for k, v in per_step.items()},
                f"ratio_{hi}_over_{lo}": round(per_step[hi] / per_step[lo], 3),
            }
            if runner == "noop" and not args.no_count:
                # Deterministic evidence of linearity, immune to machine load: Python
                # function calls per step (constant when the scheduler is linear).
                calls = {n: count_calls(n, shape) for n in args.sizes}
                row["python_calls_per_step"] = {str(k): round(v, 1) for k, v in calls.items()}
                print(f"{runner:9} {shape:11} calls/step {row['python_calls_per_step']}")
            rows.append(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "scheduler",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "rows": rows,
    }
    (RESULTS / "scheduler.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    for r in rows:
        ratio = [v for k, v in r.items() if k.startswith("ratio")][0]
        print(f"{r['runner']:9} {r['shape']:11} ratio {ratio}")


if __name__ == "__main__":
    main()
