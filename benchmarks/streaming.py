"""Streamed plans: wall time with streaming vs without, against the best possible.

The planner is a `planexec.testing.StreamingModel` that streams its plan at 30 and 100
tokens per second (a token is 4 characters; real time), over the demo plans
(``planexec/examples/plans``, with the demo tools) and two synthetic shapes (``fanout``:
six independent steps and a join; ``chain``: six steps each using the previous one).
Every tool call sleeps 50–500 ms (a fixed duration per tool, from a hash of its name)
before the real (fast) tool answers. Each round runs every shape and rate with streaming
on and off, interleaved; figures are medians over the rounds, with min and max.

For each shape and rate, from the plan text alone (not from the runs):

- ``stream_s``: the time the reply takes to stream;
- ``last_arrival_s``: when the last step's block is complete (it arrives);
- ``critical_s``: the longest dependency path of tool sleeps;
- ``bound_s`` = max(stream_s, critical_s + last_arrival_s), the issue's bound;
- ``ideal_s``: the earliest finish of an ideal streamed schedule (each step starts at
  its arrival — the end of the reply for a step that is not safe to start early — or
  when its dependencies end, whichever is later; unlimited concurrency).

The goal is a streamed wall ≤ 1.1 × ``bound_s``, and a speed-up over the non-streamed
wall (≈ stream_s + critical_s). The machine is shared and noisy: compare the ratios of
one run, not absolute times. Writes ``benchmarks/results/streaming.json`` and one PNG per
plan shape (``streaming_<shape>.png``, when matplotlib is installed).

    python benchmarks/streaming.py [--quick] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
import zlib
from pathlib import Path
from typing import Any

from loguru import logger

from planexec import AgentConfig, PlanExecuteAgent
from planexec.examples.tools import demo_tools
from planexec.executor import Executor, LocalToolRunner
from planexec.parsing import parse_plan
from planexec.parsing.streaming import StreamingPlanParser
from planexec.plan import Plan
from planexec.testing import ModelCall, StreamingModel, fake_tool
from planexec.tools import ToolCatalog, ToolSpec

RESULTS = Path(__file__).resolve().parent / "results"
PLANS = Path(__file__).resolve().parents[1] / "planexec" / "examples" / "plans"
REPLIES = PLANS.parent / "replies"
CHARS_PER_TOKEN = 4
RATES = (30.0, 100.0)


def duration(tool: str) -> float:
    """The fixed sleep of a tool: 50–500 ms, from a hash of its name."""
    return (50 + zlib.crc32(tool.encode()) % 451) / 1000


class SleepingRunner(LocalToolRunner):
    """Calls each tool after sleeping its `duration`."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        await asyncio.sleep(duration(spec.name))
        return await super().call(spec, args)


def synthetic_tools() -> list[Any]:
    hints = {"read_only": True}
    return [
        fake_tool(f"probe{i}", function=lambda **kw: {"value": 1}, hints=hints,
                  args={"after": (Any, None)})
        for i in range(1, 8)
    ]


def synthetic(shape: str) -> str:
    blocks = []
    for i in range(1, 8):
        if shape == "fanout":
            deps = list(range(1, 7)) if i == 7 else []
        else:
            deps = [i - 1] if i > 1 else []
        args = {"after": [f"<step_{d}>" for d in deps]} if deps else {}
        dep = ", ".join(f"#S{d}" for d in deps) or "None"
        blocks.append(
            f"#Task{i}: probe the system, part {i}\n#Tool{i}: probe{i}\n"
            f"#Args{i}: {json.dumps(args)}\n#Dependency{i}: {dep}\n"
            f"#ExpectedOutput{i}: the probe's value\n"
        )
    return "\n".join(blocks)


def shapes(quick: bool) -> dict[str, tuple[str, str]]:
    """Plan shapes: name → (plan text, tool set)."""
    out = {"fanout": (synthetic("fanout"), "synthetic"), "chain": (synthetic("chain"), "synthetic")}
    demo = sorted(PLANS.glob("*.txt"))
    if quick:
        demo = [p for p in demo if p.stem in ("fanout_history", "llmcompiler_sites")]
    for p in demo:
        out[p.stem] = (p.read_text(encoding="utf-8"), "demo")
    return out


def recorded_values(shape: str) -> dict[str, Any]:
    """The argument values the demo's recorded resolution replies give (by key)."""
    path = REPLIES / f"{shape}.json"
    values: dict[str, Any] = {}
    if not path.exists():
        return values
    for reply in json.loads(path.read_text(encoding="utf-8")):
        try:
            got = json.loads(reply)
        except ValueError:
            continue  # a plan or an answer
        if isinstance(got, dict):
            values.update(got)
    return values


def catalog_for(kind: str) -> list[Any]:
    return synthetic_tools() if kind == "synthetic" else demo_tools()


def analyse(text: str, rate: float, kind: str) -> dict[str, float]:
    """Stream time, arrivals, critical path and the bounds, from the text alone."""
    size = CHARS_PER_TOKEN
    chunks = [text[i : i + size] for i in range(0, len(text), size)]
    stream_s = len(chunks) / rate
    parser = StreamingPlanParser()
    arrival: dict[int, float] = {}
    for n, chunk in enumerate(chunks, 1):
        for s in parser.feed(chunk).arrived:
            arrival[s.id] = n / rate
        # withdrawn-and-arrived-again steps keep their latest arrival
    for s in parser.finish().update.arrived:
        arrival[s.id] = stream_s
    plan: Plan = parse_plan(text)
    executor = Executor(ToolCatalog(catalog_for(kind)))
    dur = {s.id: duration(s.tool) if s.tool else 0.0 for s in plan.steps}
    ids = set(plan.ids)
    longest: dict[int, float] = {}
    earliest: dict[int, float] = {}
    for s in plan.steps:  # plan order is a topological order for these plans
        deps = [d for d in s.depends_on if d in ids and d in longest]
        longest[s.id] = max((longest[d] for d in deps), default=0.0) + dur[s.id]
        start = arrival.get(s.id, stream_s) if executor.may_start_early(s) else stream_s
        earliest[s.id] = max([start, *(earliest[d] for d in deps)]) + dur[s.id]
    critical = max(longest.values(), default=0.0)
    last = max(arrival.values(), default=stream_s)
    return {
        "stream_s": stream_s,
        "last_arrival_s": last,
        "critical_s": critical,
        "bound_s": max(stream_s, critical + last),
        "ideal_s": max(stream_s, max(earliest.values(), default=0.0)),
        "steps": float(len(plan.steps)),
    }


async def one_run(
    text: str, kind: str, rate: float, stream: bool, values: dict[str, Any]
) -> tuple[float, str]:
    def answer(call: ModelCall, messages: list[Any]) -> str:
        if call.purpose == "plan":
            return text
        if call.purpose == "resolve":  # as the demo's recorded replies
            return json.dumps({k: values.get(k, "MAIN") for k in call.keys})
        return "done"

    model = StreamingModel(
        function=answer, tokens_per_second=rate, chars_per_token=CHARS_PER_TOKEN
    )
    config = AgentConfig.model_validate(
        {"planner": {"stream": stream, "max_reprompts": 0}, "recovery": {"max_replans": 0}}
    )
    agent = PlanExecuteAgent(model, catalog_for(kind), config=config, runner=SleepingRunner())
    t0 = time.perf_counter()
    run = await agent.run("benchmark question")
    return time.perf_counter() - t0, str(run.status)


async def timeline(out: Path, shape: str = "chain", rate: float = 100.0) -> None:
    """Draw the `planexec runs timeline` picture of one streamed run (docs/streaming.md)."""
    import tempfile

    from planexec.commands.runs import render_timeline_png, timeline_bars
    from planexec.store.sqlite import SQLiteRunStore

    text, kind = shapes(quick=False)[shape]

    def answer(call: ModelCall, messages: list[Any]) -> str:
        return text if call.purpose == "plan" else "done"

    model = StreamingModel(function=answer, tokens_per_second=rate,
                           chars_per_token=CHARS_PER_TOKEN)
    with tempfile.TemporaryDirectory() as tmp, SQLiteRunStore(Path(tmp) / "runs.db") as store:
        agent = PlanExecuteAgent(model, catalog_for(kind), store=store, runner=SleepingRunner())
        run = await agent.run(f"a streamed {shape} plan at {rate:.0f} tokens/s")
        record, bars = timeline_bars(store, run.run_id)
        render_timeline_png(record, bars, out)


def summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def plot(rows: list[dict[str, Any]]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no PNG")
        return []
    written = []
    for shape in sorted({r["shape"] for r in rows}):
        mine = [r for r in rows if r["shape"] == shape]
        fig, ax = plt.subplots(figsize=(6, 3.6))
        width = 0.2
        bars = (
            ("not streamed", lambda r: r["wall_off_s"]["median"], "#999999"),
            ("streamed", lambda r: r["wall_on_s"]["median"], "#1f77b4"),
            ("bound", lambda r: r["bound_s"], "#2ca02c"),
            ("ideal", lambda r: r["ideal_s"], "#98df8a"),
        )
        for k, (label, value, color) in enumerate(bars):
            xs = [i + (k - 1.5) * width for i in range(len(mine))]
            ax.bar(xs, [value(r) for r in mine], width, label=label, color=color)
        ax.set_xticks(range(len(mine)), [f"{r['rate']:.0f} tok/s" for r in mine])
        ax.set_ylabel("wall time (s), median")
        ax.set_title(f"streamed plan: {shape}")
        ax.legend(fontsize=8)
        out = RESULTS / f"streaming_{shape}.png"
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(str(out))
    return written


async def main(args: argparse.Namespace) -> dict[str, Any]:
    logger.remove()
    plans = shapes(args.quick)
    rates = RATES
    walls: dict[tuple[str, float, bool], list[float]] = {}
    statuses: dict[tuple[str, float, bool], set[str]] = {}
    for _ in range(args.rounds):
        for name, (text, kind) in plans.items():
            for rate in rates:
                for stream in (True, False):
                    wall, status = await one_run(
                        text, kind, rate, stream, recorded_values(name)
                    )
                    walls.setdefault((name, rate, stream), []).append(wall)
                    statuses.setdefault((name, rate, stream), set()).add(status)
    rows = []
    for name, (text, kind) in plans.items():
        for rate in rates:
            facts = analyse(text, rate, kind)
            on, off = walls[(name, rate, True)], walls[(name, rate, False)]
            rows.append({
                "shape": name,
                "rate": rate,
                **facts,
                "wall_on_s": summary(on),
                "wall_off_s": summary(off),
                "on_over_bound": statistics.median(on) / facts["bound_s"],
                "on_over_ideal": statistics.median(on) / facts["ideal_s"],
                "speedup": statistics.median(off) / statistics.median(on),
                "status": sorted(statuses[(name, rate, True)] | statuses[(name, rate, False)]),
            })
    result = {
        "benchmark": "streaming",
        "quick": args.quick,
        "rounds": args.rounds,
        "chars_per_token": CHARS_PER_TOKEN,
        "python": platform.python_version(),
        "rows": rows,
        "worst_on_over_bound": max(r["on_over_bound"] for r in rows),
        "goal_on_over_bound": 1.1,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "streaming.json").write_text(json.dumps(result, indent=2) + "\n")
    result["pngs"] = plot(rows)
    return result


def report(result: dict[str, Any]) -> None:
    head = (f"{'shape':24} {'tok/s':>5} {'stream':>6} {'crit':>5} {'bound':>6} {'ideal':>6} "
            f"{'on':>6} {'off':>6} {'on/bnd':>6} {'on/ideal':>8} {'speedup':>7}")
    print(head)
    for r in result["rows"]:
        print(
            f"{r['shape']:24} {r['rate']:5.0f} {r['stream_s']:6.2f} {r['critical_s']:5.2f} "
            f"{r['bound_s']:6.2f} {r['ideal_s']:6.2f} {r['wall_on_s']['median']:6.2f} "
            f"{r['wall_off_s']['median']:6.2f} {r['on_over_bound']:6.2f} "
            f"{r['on_over_ideal']:8.2f} {r['speedup']:7.2f}"
        )
    print(f"worst streamed wall / bound: {result['worst_on_over_bound']:.3f} (goal ≤ 1.1)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two demo plans, one round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--timeline", type=Path, metavar="FILE.png",
                        help="only draw the timeline of one streamed chain run to FILE.png")
    ns = parser.parse_args()
    if ns.timeline is not None:
        logger.remove()
        asyncio.run(timeline(ns.timeline))
        raise SystemExit(0)
    if ns.quick:
        ns.rounds = 1
    report(asyncio.run(main(ns)))
