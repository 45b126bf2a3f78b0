"""Scheduler overhead per step with no-op tools, at 100, 1,000 and 10,000 steps.

Two plan shapes: ``independent`` (no dependencies) and ``chain`` (each step passes the
previous step's output on through a whole-value reference, so the resolver runs too).
Two runners: ``noop`` (a runner that returns at once: scheduler + resolver + events
only, "the framework alone") and ``langchain`` (the default runner invoking real
langchain-core tools). The floor is measured in the same rounds: bare asyncio, one task
per step awaiting its dependency, calling the tool's coroutine (``floor-direct``) or its
``ainvoke`` (``floor-langchain``). Rounds are interleaved; medians with min/max.

Goals (issue 17), as ratios of this run at 1,000 steps: planexec's own CPU per step
≤ 30 µs (``noop`` runner); no-op tool steps (``langchain`` runner) ≤ 1.15 × the floor
(``floor-langchain``), CPU and wall.

Writes ``benchmarks/results/scheduler.json``. Growth must be linear: the per-step cost
at 10,000 steps divided by the per-step cost at 100 steps should stay near 1; Python
calls per step (deterministic, immune to load) are the load-proof figure.

    python benchmarks/scheduler.py [--sizes 100 1000 10000] [--repeat 5] [--quick]
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _frameworks import summary
from loguru import logger

from planexec.config import ExecutorSettings
from planexec.executor import Executor
from planexec.parsing.refs import find_refs
from planexec.plan import Plan, Step
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec

RESULTS = Path(__file__).resolve().parent / "results"
RUNNERS = ("noop", "langchain", "floor-direct", "floor-langchain")
CPU_GOAL_US = 30.0
FLOOR_GOAL = 1.15


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


def make_tool() -> Any:
    return fake_tool("noop", {"ok": 1}, args={"v": (Any, None)}, hints={"read_only": True})


Timed = Callable[[], Awaitable[tuple[float, float]]]


def planexec_run(n: int, shape: str, runner: str) -> Timed:
    catalog = ToolCatalog([make_tool()])
    plan = make_plan(n, shape)

    async def run() -> tuple[float, float]:
        executor = Executor(
            catalog,
            config=ExecutorSettings(),
            runner=NoopRunner() if runner == "noop" else None,
        )
        cpu, wall = time.process_time(), time.perf_counter()
        results = await executor.run(plan)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert len(results) == n and all(r.ok for r in results), results[:3]
        return cpu, wall

    return run


def floor_run(n: int, shape: str, runner: str) -> Timed:
    """Bare asyncio: one task per step awaiting its dependency, then the tool."""
    tool = make_tool()
    coroutine = tool.coroutine
    assert coroutine is not None

    async def run() -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        tasks: list[asyncio.Task[Any]] = []

        async def step(dep: asyncio.Task[Any] | None) -> Any:
            args = {"v": await dep} if dep is not None else {}
            return await (coroutine(**args) if runner == "floor-direct" else tool.ainvoke(args))

        for i in range(n):
            dep = tasks[i - 1] if shape == "chain" and i > 0 else None
            tasks.append(asyncio.create_task(step(dep)))
        results = await asyncio.gather(*tasks)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert len(results) == n
        return cpu, wall

    return run


def prepare(n: int, shape: str, runner: str) -> Timed:
    if runner.startswith("floor"):
        return floor_run(n, shape, runner)
    return planexec_run(n, shape, runner)


def once(timed: Timed) -> tuple[float, float]:
    gc.collect()
    return asyncio.run(timed())


def count_calls(n: int, shape: str) -> float:
    timed = planexec_run(n, shape, "noop")
    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(timed())
    profiler.disable()
    stats = pstats.Stats(profiler)
    return float(stats.total_calls) / n  # type: ignore[attr-defined]


def goals(rows: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """The issue's goals at ``size`` steps, from this run's medians."""
    by = {(r["runner"], r["shape"]): r for r in rows}
    key = str(size)
    out: list[dict[str, Any]] = []
    for shape in ("chain", "independent"):
        cpu = by[("noop", shape)]["cpu_us_per_step"][key]["median"]
        out.append(
            {
                "goal": f"planexec's own CPU per step ({shape}, {size} steps, noop runner)",
                "value_us": cpu,
                "target_us": CPU_GOAL_US,
                "met": cpu <= CPU_GOAL_US,
            }
        )
        for metric in ("cpu_us_per_step", "wall_us_per_step"):
            ours = by[("langchain", shape)][metric][key]["median"]
            floor = by[("floor-langchain", shape)][metric][key]["median"]
            out.append(
                {
                    "goal": f"no-op langchain tool steps ÷ bare asyncio ({metric}, {shape}, "
                    f"{size} steps)",
                    "ratio": round(ours / floor, 3),
                    "target": FLOOR_GOAL,
                    "met": ours / floor <= FLOOR_GOAL,
                }
            )
        alone = by[("noop", shape)]["cpu_us_per_step"][key]["median"]
        floor_direct = by[("floor-direct", shape)]["cpu_us_per_step"][key]["median"]
        out.append(
            {
                "goal": f"framework alone ÷ bare asyncio alone (CPU, {shape}, {size} steps)",
                "ratio": round(alone / floor_direct, 2),
                "target": None,
                "met": None,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--no-count", action="store_true", help="skip counting calls")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS / "scheduler.json")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeat = [100, 1000], 2
    logger.remove()
    shapes = ("independent", "chain")
    cells = [(r, s, n) for r in RUNNERS for s in shapes for n in args.sizes]
    prepared = {cell: prepare(cell[2], cell[1], cell[0]) for cell in cells}
    for cell in cells:  # warm-up
        once(prepared[cell])
    samples: dict[tuple[str, str, int], list[tuple[float, float]]] = {c: [] for c in cells}
    for _ in range(args.repeat):
        for cell in cells:
            samples[cell].append(once(prepared[cell]))
    rows = []
    for runner in RUNNERS:
        for shape in shapes:
            cpu = {n: [c / n * 1e6 for c, _ in samples[(runner, shape, n)]] for n in args.sizes}
            wall = {n: [w / n * 1e6 for _, w in samples[(runner, shape, n)]] for n in args.sizes}
            per_step = {n: min(wall[n]) for n in args.sizes}
            lo, hi = min(args.sizes), max(args.sizes)
            row: dict[str, Any] = {
                "runner": runner,
                "shape": shape,
                "us_per_step": {str(k): round(v, 2) for k, v in per_step.items()},
                f"ratio_{hi}_over_{lo}": round(per_step[hi] / per_step[lo], 3),
                "cpu_us_per_step": {str(n): summary(cpu[n], 1) for n in args.sizes},
                "wall_us_per_step": {str(n): summary(wall[n], 1) for n in args.sizes},
            }
            for n in args.sizes:
                s = row["cpu_us_per_step"][str(n)]
                print(
                    f"{runner:15} {shape:11} n={n:6}  CPU {s['median']:8.1f} µs/step "
                    f"[{s['min']}-{s['max']}]  wall(min) {per_step[n]:8.1f} µs/step"
                )
            if runner == "noop" and not args.no_count:
                calls = {n: count_calls(n, shape) for n in args.sizes}
                row["python_calls_per_step"] = {str(k): round(v, 1) for k, v in calls.items()}
                print(f"{runner:15} {shape:11} calls/step {row['python_calls_per_step']}")
            rows.append(row)
    size = 1000 if 1000 in args.sizes else max(args.sizes)
    out = {
        "benchmark": "scheduler",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "rows": rows,
        "goals": goals(rows, size),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for r in rows:
        ratio = [v for k, v in r.items() if k.startswith("ratio")][0]
        print(f"{r['runner']:15} {r['shape']:11} growth ratio {ratio}")
    print("\ngoals (medians of this run):")
    for g in out["goals"]:
        value = g.get("value_us", g.get("ratio"))
        target = g.get("target_us", g.get("target"))
        state = "    " if g["met"] is None else "met " if g["met"] else "MISS"
        print(f"  {state} {g['goal']}: {value}" + (f" (target {target})" if target else ""))


if __name__ == "__main__":
    main()
