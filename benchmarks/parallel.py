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
≤ 1.05. Writes ``benchmarks/results/parallel.json``.

    python benchmarks/parallel.py [--latency 0.1] [--width 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
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


async def once(plan: Plan, latency: float, concurrency: int, runner: str) -> float:
    tool = fake_tool(
        "sleep",
        {"ok": True},
        args={"inputs": (list[Any], None)},
        latency=latency,
        hints={"read_only": True},
    )
    executor = Executor(
        ToolCatalog([tool]),
        config=ExecutorSettings(max_concurrency=concurrency),
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
    args = parser.parse_args()
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
        walls = [
            asyncio.run(once(plan, args.latency, max(8, args.width + 2), runner))
            for _ in range(args.repeat)
        ]
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
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "parallel",
        "python": platform.python_version(),
        "latency_s": args.latency,
        "repeat": args.repeat,
        "goal": 1.05,
        "rows": rows,
    }
    (RESULTS / "parallel.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
