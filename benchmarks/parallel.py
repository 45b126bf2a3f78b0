"""Parallel efficiency: wall time ÷ critical-path time on DAGs of sleeping tools.

Shapes (every tool sleeps ``--latency`` seconds, invoked as real langchain-core tools):

- ``fanout``: one root, ``--width`` independent steps that reference it, one join that
  references all of them (critical path: 3 sleeps);
- ``diamond``: ``--depth`` diamonds in a row (a → b, c → d → ...; critical path:
  2 × depth + 1 sleeps);
- ``chain``: ``--length`` steps, each referencing the previous one.

Two runners: ``langchain`` (the default runner: real langchain-core tool invocation,
whose own per-call cost is included) and ``sleep`` (a runner that only sleeps: the
scheduler, resolver and events alone).

The critical-path time is the sum of sleeps on the longest path; the goal is a ratio
≤ 1.05. The executor runs with its default settings (``max_concurrency``).

Wide fan-outs (issue 17): fan-outs of ``--wide`` (100 and 1,000) tools sleeping
``--wide-latency`` (50 ms), the goal ≤ 1.05 at 100 and ≤ 1.2 at 1,000, measured in the
same interleaved rounds as the bare-asyncio floor (one task per step awaiting its
dependencies, calling the tool's ``ainvoke``): medians with min/max, and planexec's
ratio ÷ the floor's.

Writes ``benchmarks/results/parallel.json``.

    python benchmarks/parallel.py [--latency 0.1] [--width 50] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from pathlib import Path
from typing import Any

from _frameworks import PREPARE, Workload, measure, summary
from loguru import logger

from planexec.config import ExecutorSettings
from planexec.executor import Executor
from planexec.parsing.refs import find_refs
from planexec.plan import Plan, Step
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec

RESULTS = Path(__file__).resolve().parent / "results"


def step(sid: int, refs: list[int]) -> Step:
    args = find_refs({"inputs": [f"<step_{r}>" for r in refs]}) if refs else {}
    return Step(id=sid, tool="sleep", args=args, depends_on=tuple(sorted(refs)))


def fanout(width: int) -> tuple[Plan, int]:
    steps = [step(1, [])]
    steps += [step(i, [1]) for i in range(2, width + 2)]
    steps.append(step(width + 2, list(range(2, width + 2))))
    return Plan(steps=tuple(steps)), 3


def diamond(depth: int) -> tuple[Plan, int]:
    steps = [step(1, [])]
    top = 1
    sid = 1
    for _ in range(depth):
        left, right, bottom = sid + 1, sid + 2, sid + 3
        steps += [step(left, [top]), step(right, [top]), step(bottom, [left, right])]
        top = sid = bottom
    return Plan(steps=tuple(steps)), 2 * depth + 1


def chain(length: int) -> tuple[Plan, int]:
    steps = [step(1, [])] + [step(i, [i - 1]) for i in range(2, length + 1)]
    return Plan(steps=tuple(steps)), length


class SleepRunner:
    """Sleeps instead of invoking the tool: measures the scheduler alone."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        await asyncio.sleep(self.latency)
        return {"ok": True}


async def once(plan: Plan, latency: float, concurrency: int | None, runner: str) -> float:
    tool = fake_tool(
        "sleep",
        {"ok": True},
        args={"inputs": (list[Any], None)},
        latency=latency,
        hints={"read_only": True},
    )
    config = ExecutorSettings() if concurrency is None else ExecutorSettings(
        max_concurrency=concurrency
    )
    executor = Executor(
        ToolCatalog([tool]),
        config=config,
        runner=SleepRunner(latency) if runner == "sleep" else None,
    )
    start = time.perf_counter()
    results = await executor.run(plan)
    wall = time.perf_counter() - start
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--length", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--wide", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--wide-latency", type=float, default=0.05)
    parser.add_argument("--wide-rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS / "parallel.json")
    args = parser.parse_args()
    if args.quick:
        args.latency, args.repeat, args.width = 0.02, 1, 20
        args.wide, args.wide_rounds = [100], 2
    logger.remove()
    shapes = {
        "fanout": fanout(args.width),
        "diamond": diamond(args.depth),
        "chain": chain(args.length),
    }
    rows = []
    for runner, (name, (plan, path_len)) in (
        (r, item) for r in ("langchain", "sleep") for item in shapes.items()
    ):
        critical = path_len * args.latency
        walls = [asyncio.run(once(plan, args.latency, None, runner)) for _ in range(args.repeat)]
        best = min(walls)
        ratio = best / critical
        rows.append(
            {
                "runner": runner,
                "shape": name,
                "steps": len(plan.steps),
                "critical_path_steps": path_len,
                "critical_path_s": round(critical, 4),
                "wall_s": [round(w, 4) for w in walls],
                "ratio_best": round(ratio, 4),
                "ratio_median": round(sorted(walls)[len(walls) // 2] / critical, 4),
                "goal_met": ratio <= 1.05,
            }
        )
        print(
            f"{runner:9} {name:8} steps={len(plan.steps):3} critical={critical:.3f}s "
            f"wall={best:.3f}s ratio={ratio:.3f}"
        )
    wide = wide_fanouts(args.wide, args.wide_latency, args.wide_rounds)
    out = {
        "benchmark": "parallel",
        "python": platform.python_version(),
        "latency_s": args.latency,
        "repeat": args.repeat,
        "goal": 1.05,
        "rows": rows,
        "wide_fanouts": wide,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


WIDE_GOALS = {100: 1.05, 1000: 1.2}


def wide_fanouts(widths: list[int], latency: float, rounds: int) -> list[dict[str, Any]]:
    """Fan-outs of sleeping langchain tools: planexec and the floor, interleaved rounds."""
    out = []
    for width in widths:
        work = Workload("fanout", width, "sleep", latency)
        runs = {fw: PREPARE[fw](work, "langchain") for fw in ("planexec", "asyncio")}
        ratios: dict[str, list[float]] = {fw: [] for fw in runs}
        for _ in range(rounds):
            for fw, prepared in runs.items():
                ratios[fw].append(measure(prepared).wall / work.critical_path)
        ours = summary(ratios["planexec"], 3)
        floor = summary(ratios["asyncio"], 3)
        goal = WIDE_GOALS.get(width)
        row = {
            "width": width,
            "steps": work.steps,
            "latency_s": latency,
            "critical_path_s": round(work.critical_path, 4),
            "planexec_wall_over_critical": ours,
            "floor_wall_over_critical": floor,
            "planexec_over_floor": round(ours["median"] / floor["median"], 3),
            "goal": goal,
            "goal_met": None if goal is None else ours["median"] <= goal,
        }
        out.append(row)
        state = "" if goal is None else (" met" if row["goal_met"] else " MISS") + f" (goal {goal})"
        print(
            f"fan-out of {width:5} sleeping {latency * 1000:.0f} ms: wall ÷ critical path "
            f"{ours['median']} [{ours['min']}-{ours['max']}]{state}; bare asyncio "
            f"{floor['median']} [{floor['min']}-{floor['max']}]; planexec ÷ floor "
            f"{row['planexec_over_floor']}"
        )
    return out


if __name__ == "__main__":
    main()
