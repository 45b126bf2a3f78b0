"""Parse throughput: the shared corpus, and synthetic hashstep plans of growing size.

Run:  python benchmarks/parse.py [--repeat N] [--out benchmarks/results/parse.json]

For the synthetic plans (10, 100, 1,000 and 10,000 steps; every step after the first
refers to earlier steps with whole-value, path and embedded references, and lists
them in #Dependency) it reports the time per step of `parse_plan` (parse + structural
checks) and of `parse_hashstep` alone, and the ratio of the per-step time at 10,000
steps to that at 100 steps: cost that grows linearly gives a ratio near 1. The ratios
are measured in one run, so they compare like with like; no absolute threshold is
asserted. Each figure is the best of several runs (the least disturbed one), in CPU
time of this process (``time.process_time``), so other load on the machine does not
count.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger

from planexec.errors import PlanParseError
from planexec.parsing import parse_hashstep, parse_plan

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "real_plans"
SIZES = (10, 100, 1_000, 10_000, 20_000)
"""The sizes asked for, plus 20,000 to show where the per-step time levels off."""


def synthetic_plan(n: int) -> str:
    """A hashstep plan of ``n`` steps with references to earlier steps."""
    out = []
    for i in range(1, n + 1):
        if i == 1:
            args = '{"site_name": "MAIN"}'
            deps = "None"
        else:
            a, b = i - 1, max(1, i // 2)
            args = (
                f'{{"site_name": "{{step_{a}}}", "asset_id": "<step_{b}.items[0].id>", '
                f'"note": "after {{{{step_{a}}}}} finished", "limit": {i % 50}, '
                f'"tags": ["t{i}", "{{step_{a}.tags[1]}}"]}}'
            )
            deps = f"#S{a}" if a == b else f"#S{b}, #S{a}"
        out.append(
            f"#Task{i}: Do step {i} with the results of earlier steps.\n"
            f"#Agent{i}: IoTAgent\n"
            f"#Tool{i}: tool_{i % 7}\n"
            f"#Args{i}: {args}\n"
            f"#Dependency{i}: {deps}\n"
            f"#ExpectedOutput{i}: A list of things for step {i}.\n"
        )
    return "\n".join(out)


def best_time(fn: Callable[[], Any], repeat: int, *, collect: bool = True) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        if not collect:
            gc.disable()
        try:
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
    return best


def bench_corpus(repeat: int) -> dict[str, Any]:
    files = sorted(CORPUS.glob("*.txt")) if CORPUS.is_dir() else []
    texts = [p.read_text(encoding="utf-8") for p in files]
    if not texts:
        return {"files": 0, "note": f"no corpus at {CORPUS}"}
    parsed = failed = steps = 0

    def run() -> None:
        nonlocal parsed, failed, steps
        parsed = failed = steps = 0
        for text in texts:
            try:
                steps += len(parse_plan(text).steps)
                parsed += 1
            except PlanParseError:
                failed += 1

    seconds = best_time(run, repeat)
    chars = sum(len(t) for t in texts)
    return {
        "files": len(texts),
        "parsed": parsed,
        "no_plan": failed,
        "steps": steps,
        "seconds": seconds,
        "files_per_second": len(texts) / seconds,
        "steps_per_second": steps / seconds,
        "chars_per_second": chars / seconds,
    }


def bench_synthetic(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for n in SIZES:
        text = synthetic_plan(n)
        plan = parse_plan(text)
        assert len(plan.steps) == n, (n, len(plan.steps))
        assert not plan.has_errors, plan.errors[:3]
        refs = sum(len(s.refs) for s in plan.steps)
        del plan  # a large live heap makes every garbage collection in the timed runs dearer
        reps = max(3, min(repeat * 4, int(repeat * 1_000 / n)))
        full = best_time(lambda t=text: parse_plan(t), reps)
        hashstep = best_time(lambda t=text: parse_hashstep(t), reps)
        no_gc = best_time(lambda t=text: parse_plan(t), reps, collect=False)
        rows.append(
            {
                "steps": n,
                "refs": refs,
                "chars": len(text),
                "runs": reps,
                "parse_plan_seconds": full,
                "parse_plan_us_per_step": full / n * 1e6,
                "parse_hashstep_seconds": hashstep,
                "parse_hashstep_us_per_step": hashstep / n * 1e6,
                "parse_plan_no_gc_us_per_step": no_gc / n * 1e6,
            }
        )
        print(
            f"{n:>6} steps {refs:>6} refs  parse_plan {full * 1e3:9.2f} ms "
            f"({full / n * 1e6:7.1f} us/step)  parse_hashstep {hashstep * 1e3:9.2f} ms "
            f"({hashstep / n * 1e6:7.1f} us/step)  parse_plan without gc "
            f"{no_gc / n * 1e6:7.1f} us/step",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "parse.json"))
    args = parser.parse_args(argv)
    logger.remove()  # parser diagnostics are logged as warnings; keep the output readable

    corpus = bench_corpus(args.repeat)
    print(f"corpus: {json.dumps(corpus)}", flush=True)
    rows = bench_synthetic(args.repeat)
    per = {r["steps"]: r for r in rows}
    ratio = {
        key: per[10_000][f"{key}_us_per_step"] / per[100][f"{key}_us_per_step"]
        for key in ("parse_plan", "parse_hashstep", "parse_plan_no_gc")
    }
    ratio_20k = {
        key: per[20_000][f"{key}_us_per_step"] / per[10_000][f"{key}_us_per_step"]
        for key in ("parse_plan", "parse_hashstep", "parse_plan_no_gc")
    }
    print(
        "per-step time ratio 10,000 vs 100 steps: "
        + ", ".join(f"{k} {v:.2f}" for k, v in ratio.items())
        + " (1.0 = linear)"
    )
    print(
        "per-step time ratio 20,000 vs 10,000 steps: "
        + ", ".join(f"{k} {v:.2f}" for k, v in ratio_20k.items())
    )
    result = {
        "benchmark": "parse",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "repeat": args.repeat,
        "corpus": corpus,
        "synthetic": rows,
        "per_step_ratio_10000_vs_100": ratio,
        "per_step_ratio_20000_vs_10000": ratio_20k,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
