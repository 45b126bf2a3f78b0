"""planexec vs LangGraph vs bare asyncio, side by side in one run.

Chains and fan-outs of 10/100/1,000 steps (`_frameworks.py` has the workloads and the
three runners), with:

- ``noop`` tools called as each framework calls a langchain-core tool (``langchain``:
  ``ainvoke`` for LangGraph and the floor, planexec's default runner) and with the
  tool's coroutine called directly (``direct``: the framework alone);
- ``sleep`` tools (``--latency``, 50 ms) called the ``langchain`` way, for
  wall ÷ critical path (chains of 1,000 sleeping steps only with ``--long``).

Per cell: CPU µs per step and wall ÷ critical path over ``--rounds`` interleaved rounds
(every framework once per round, in turn), medians with min/max; peak traced memory
(tracemalloc) per step from one more run each. The goals of issue 17 are reported as
ratios from this run. The machine may be noisy: compare the medians.

LangGraph is a benchmark-only dependency (``pip install planexec[bench]``): without it
the benchmark says so and exits with status 2.

Writes ``benchmarks/results/compare.json`` and ``compare.png`` (with matplotlib).

    python benchmarks/compare.py [--rounds 5] [--latency 0.05] [--long] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
from pathlib import Path
from typing import Any

from loguru import logger

RESULTS = Path(__file__).resolve().parent / "results"


def _require_langgraph() -> None:
    if importlib.util.find_spec("langgraph") is None:
        print(
            "benchmarks/compare.py needs LangGraph, which planexec does not depend on: "
            "install the benchmark extra (pip install 'planexec[bench]') and run it again.",
            file=sys.stderr,
        )
        raise SystemExit(2)


def cells(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from _frameworks import Workload

    out: list[tuple[Any, str]] = []
    for calls in ("direct", "langchain"):
        for shape in ("chain", "fanout"):
            for n in args.sizes:
                out.append((Workload(shape, n, "noop"), calls))
    for shape in ("fanout", "chain"):
        for n in args.sizes:
            if shape == "chain" and n * args.latency > args.max_chain_s and not args.long:
                continue
            out.append((Workload(shape, n, "sleep", args.latency), "langchain"))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from _frameworks import FRAMEWORKS, PREPARE, measure, summary

    plan = cells(args)
    prepared = {
        (w.label(), calls, fw): PREPARE[fw](w, calls) for w, calls in plan for fw in FRAMEWORKS
    }
    for key, fn in prepared.items():  # warm-up: imports, caches, first-call costs
        if key[0].endswith("noop"):
            measure(fn)
    samples: dict[tuple[str, str, str], list[Any]] = {key: [] for key in prepared}
    for r in range(args.rounds):
        for work, calls in plan:
            for fw in FRAMEWORKS:
                key = (work.label(), calls, fw)
                samples[key].append(measure(prepared[key]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    for work, calls in plan:
        for fw in FRAMEWORKS:
            key = (work.label(), calls, fw)
            got = samples[key]
            peak = measure(prepared[key], memory=True).peak_bytes or 0
            row: dict[str, Any] = {
                "framework": fw,
                "shape": work.shape,
                "n": work.n,
                "steps": work.steps,
                "tool": work.tool,
                "calls": calls,
                "cpu_us_per_step": summary([m.cpu / work.steps * 1e6 for m in got], 1),
                "wall_us_per_step": summary([m.wall / work.steps * 1e6 for m in got], 1),
                "peak_kib_per_step": round(peak / 1024 / work.steps, 2),
            }
            if work.latency:
                row["critical_path_s"] = round(work.critical_path, 4)
                row["wall_over_critical"] = summary(
                    [m.wall / work.critical_path for m in got], 3
                )
            rows.append(row)
    return {
        "benchmark": "compare",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rounds": args.rounds,
        "latency_s": args.latency,
        "rows": rows,
        "goals": goals(rows),
    }


NAMES = {"planexec": "planexec", "langgraph": "LangGraph", "asyncio": "bare asyncio"}


def _cell(summary_: dict[str, Any], unit: str) -> str:
    return f"{summary_['median']}{unit} ({summary_['min']}–{summary_['max']})"


def tables_md(data: dict[str, Any]) -> str:
    """The markdown tables `docs/performance.md` quotes: the largest cells, then the goals."""
    rows = data["rows"]
    big = max(r["n"] for r in rows)
    lines = [
        "| workload | tools called | " + " | ".join(NAMES.values()) + " |",
        "|---|---|" + "---|" * len(NAMES),
    ]
    for tool, calls, metric, unit in (
        ("noop", "direct", "cpu_us_per_step", " µs"),
        ("noop", "langchain", "cpu_us_per_step", " µs"),
        ("sleep", "langchain", "wall_over_critical", "×"),
    ):
        for shape in ("chain", "fanout"):
            for n in sorted({r["n"] for r in rows if r["tool"] == tool}):
                if tool == "noop" and n != big:
                    continue
                found = {
                    fw: _find(rows, framework=fw, shape=shape, n=n, tool=tool, calls=calls)
                    for fw in NAMES
                }
                if any(r is None for r in found.values()):
                    continue
                what = "CPU per step" if tool == "noop" else "wall ÷ critical path"
                how = "coroutine called directly" if calls == "direct" else "as langchain tools"
                cells_ = [_cell(r[metric], unit) for r in found.values() if r is not None]
                lines.append(f"| {what}, {shape} of {n:,} | {how} | " + " | ".join(cells_) + " |")
    lines += ["", "| goal (issue 17) | measured | target | met |", "|---|---|---|---|"]
    for g in data["goals"]:
        value = g.get("value_us", g.get("ratio"))
        target = g.get("target_us", g.get("target"))
        lines.append(f"| {g['goal']} | {value} | {target} | {'yes' if g['met'] else 'no'} |")
    return "\n".join(lines)


def _find(rows: list[dict[str, Any]], **where: Any) -> dict[str, Any] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in where.items()):
            return row
    return None


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 17's goals, as measured in this run (medians)."""
    out: list[dict[str, Any]] = []
    big = max(r["n"] for r in rows)
    for shape in ("chain", "fanout"):
        row = _find(rows, framework="planexec", shape=shape, n=big, tool="noop", calls="direct")
        if row is not None:
            value = row["cpu_us_per_step"]["median"]
            out.append(
                {
                    "goal": f"planexec's own CPU per step, {shape} of {big} (direct calls)",
                    "value_us": value,
                    "target_us": 30,
                    "met": value <= 30,
                }
            )
        pe = _find(rows, framework="planexec", shape=shape, n=big, tool="noop", calls="langchain")
        floor = _find(rows, framework="asyncio", shape=shape, n=big, tool="noop", calls="langchain")
        if pe is not None and floor is not None:
            for metric in ("cpu_us_per_step", "wall_us_per_step"):
                ratio = pe[metric]["median"] / floor[metric]["median"]
                out.append(
                    {
                        "goal": f"no-op tool steps ÷ bare asyncio ({metric}), {shape} of {big}",
                        "ratio": round(ratio, 3),
                        "target": 1.15,
                        "met": ratio <= 1.15,
                    }
                )
    for n, target in ((100, 1.05), (1000, 1.2)):
        row = _find(rows, framework="planexec", shape="fanout", n=n, tool="sleep")
        floor = _find(rows, framework="asyncio", shape="fanout", n=n, tool="sleep")
        if row is not None:
            ratio = row["wall_over_critical"]["median"]
            out.append(
                {
                    "goal": f"wall ÷ critical path, fan-out of {n} sleeping tools",
                    "ratio": ratio,
                    "target": target,
                    "met": ratio <= target,
                    "floor_ratio": floor["wall_over_critical"]["median"] if floor else None,
                }
            )
    return out


def plot(data: dict[str, Any], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no picture (pip install planexec[plot])")
        return None
    rows = data["rows"]
    panels = [
        ("CPU µs/step, framework alone (direct calls)", "noop", "direct", "cpu_us_per_step"),
        ("CPU µs/step, langchain-core tools", "noop", "langchain", "cpu_us_per_step"),
        ("wall ÷ critical path, sleeping tools", "sleep", "langchain", "wall_over_critical"),
        ("peak traced KiB/step, no-op (langchain)", "noop", "langchain", "peak_kib_per_step"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    colors = {"planexec": "tab:blue", "langgraph": "tab:orange", "asyncio": "tab:gray"}
    for ax, (title, tool, calls, metric) in zip(axes.flat, panels, strict=True):
        for fw, color in colors.items():
            for shape, style in (("chain", "-"), ("fanout", "--")):
                pts = [
                    r
                    for r in rows
                    if r["framework"] == fw
                    and r["shape"] == shape
                    and r["tool"] == tool
                    and r["calls"] == calls
                ]
                if not pts:
                    continue
                xs = [r["n"] for r in pts]
                if isinstance(pts[0][metric], dict):
                    ys = [r[metric]["median"] for r in pts]
                    lo = [r[metric]["median"] - r[metric]["min"] for r in pts]
                    hi = [r[metric]["max"] - r[metric]["median"] for r in pts]
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, marker="o", color=color,
                                label=f"{fw} {shape}", capsize=3)
                else:
                    ax.plot(xs, [r[metric] for r in pts], style, marker="o", color=color,
                            label=f"{fw} {shape}")
        ax.set_xscale("log")
        ax.set_xlabel("steps (chain length / fan-out width)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"planexec vs LangGraph vs bare asyncio (medians of {data['rounds']} rounds)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument(
        "--max-chain-s", type=float, default=5.0,
        help="skip sleeping chains whose critical path is longer (unless --long)",
    )
    parser.add_argument("--long", action="store_true", help="run every sleeping chain")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS / "compare.json")
    args = parser.parse_args()
    _require_langgraph()
    if args.quick:
        args.sizes, args.rounds, args.latency = [10, 100], 2, 0.01
    logger.remove()
    data = run(args)
    data["tables_md"] = tables_md(data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    names = ("planexec", "langgraph", "asyncio")
    print(f"{'cell':26} {'calls':9} " + " ".join(f"{fw:>22}" for fw in names))
    by_cell: dict[tuple[str, int, str, str], dict[str, Any]] = {}
    for r in data["rows"]:
        by_cell.setdefault((r["shape"], r["n"], r["tool"], r["calls"]), {})[r["framework"]] = r
    for (shape, n, tool, calls), fws in by_cell.items():
        metric = "wall_over_critical" if tool == "sleep" else "cpu_us_per_step"
        unit = "×" if tool == "sleep" else "µs"
        cols = []
        for fw in names:
            s = fws[fw][metric]
            cols.append(f"{s['median']:>8}{unit} [{s['min']}-{s['max']}]".rjust(22))
        print(f"{shape + '-' + str(n) + '-' + tool:26} {calls:9} " + " ".join(cols))
    print("\ngoals (medians of this run):")
    for g in data["goals"]:
        value = g.get("value_us", g.get("ratio"))
        target = g.get("target_us", g.get("target"))
        print(f"  {'met ' if g['met'] else 'MISS'} {g['goal']}: {value} (target {target})")
    picture = plot(data, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out}" + (f" and {picture}" if picture else ""))


if __name__ == "__main__":
    main()
