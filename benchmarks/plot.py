"""Draw the benchmark results (benchmarks/results/*.json) as PNG pictures.

    python benchmarks/plot.py            # writes benchmarks/results/*.png

Each picture is drawn only when its JSON exists. Needs matplotlib (planexec[plot]).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> Any | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _save(plt: Any, fig: Any, name: str) -> Path:
    """Write ``fig`` to ``benchmarks/results/NAME.png``, close it and return the path."""
    out = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_linear_growth(plt: Any) -> Path | None:
    """Per-step cost against plan size: a flat line means linear growth."""
    parse, sched = _load("parse"), _load("scheduler")
    if parse is None and sched is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    if parse is not None:
        rows = parse["synthetic"]
        ax.plot(
            [r["steps"] for r in rows],
            [r["parse_plan_us_per_step"] for r in rows],
            marker="o",
            label="parse_plan",
        )
    if sched is not None:
        for row in sched["rows"]:
            sizes = sorted(int(k) for k in row["us_per_step"])
            ax.plot(
                sizes,
                [row["us_per_step"][str(n)] for n in sizes],
                marker="s",
                label=f"executor, {row['runner']} tools, {row['shape']}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps in the plan")
    ax.set_ylabel("µs per step")
    ax.set_title("Cost per step stays flat as plans grow (linear total cost)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return _save(plt, fig, "linear_growth")


def plot_parallel(plt: Any) -> Path | None:
    """Wall time ÷ critical-path time for each DAG shape."""
    data = _load("parallel")
    if data is None:
        return None
    rows = data["rows"]
    labels = [f"{r['shape']}\n{r['runner']}" for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(labels, [r["ratio_best"] for r in rows], color="tab:blue")
    ax.axhline(data.get("goal", 1.05), color="tab:red", linestyle="--", label="goal")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylim(0.95, max(1.3, max(r["ratio_best"] for r in rows) + 0.05))
    ax.set_ylabel("wall time ÷ critical path")
    ax.set_title("Parallel efficiency on DAGs of sleeping tools")
    ax.legend()
    return _save(plt, fig, "parallel")


def plot_recovery(plt: Any) -> Path | None:
    """Success rate per injected-failure scenario, planexec against the baselines."""
    data = _load("recovery")
    if data is None:
        return None
    systems = data["systems"]
    scenarios = list(data["scenarios"])
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, system in enumerate(systems):
        xs = [j + i * width for j in range(len(scenarios))]
        ax.bar(
            xs,
            [data["scenarios"][s][system]["success_rate"] for s in scenarios],
            width,
            label=system,
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(scenarios))])
    ax.set_xticklabels([s.replace("_", "\n") for s in scenarios], fontsize=8)
    ax.set_ylabel("success rate")
    ax.set_title("Recovery on scripted scenarios with injected failures")
    ax.legend(fontsize=8)
    return _save(plt, fig, "recovery")


def main() -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('plot.py needs matplotlib: pip install "planexec[plot]"', file=sys.stderr)
        return 2
    for draw in (plot_linear_growth, plot_parallel, plot_recovery):
        out = draw(plt)
        if out is not None:
            print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
