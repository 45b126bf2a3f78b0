"""Cost of recording a run, per step: no store vs MemoryRunStore vs SQLiteRunStore.

Runs 1,000-step plans of a no-op (read-only) tool with the `Executor`, with the store
attached to the event bus, and compares wall times measured in this one run:

- ``chain``: step i depends on step i-1, so every ``StepFinished`` commit is on the
  critical path (the worst case for a durable store);
- ``fan``: independent steps, run 8 at a time.

Stores: ``none``, ``memory``, and `SQLiteRunStore` in each durability mode:
``sqlite_calls`` (the default: every commit survives a killed process; call starts and
run ends are flushed to disk), ``sqlite_full`` (every commit flushed) and
``sqlite_process`` (none flushed). Each configuration runs ``--repeat`` times,
interleaved; the median is kept. A flush (fsync) costs what the disk makes it cost:
``fsync_ms`` records one measured in the same run.
Writes ``benchmarks/results/store.json``; figures of merit are the ratios to ``none``
and the added milliseconds per step.

    python benchmarks/store.py [--steps 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loguru import logger

from planexec.config import ExecutorSettings
from planexec.events import EventBus, PlanCreated, RunFinished, RunStarted
from planexec.executor import Executor
from planexec.plan import Plan, Step
from planexec.store import MemoryRunStore, RunStore, SQLiteRunStore
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

RESULTS = Path(__file__).resolve().parent / "results"
STORES = ("none", "memory", "sqlite_calls", "sqlite_full", "sqlite_process")


def make_plan(steps: int, shape: str) -> Plan:
    return Plan(
        steps=tuple(
            Step(id=i, tool="noop", depends_on=(i - 1,) if shape == "chain" and i > 1 else ())
            for i in range(1, steps + 1)
        )
    )


def make_store(kind: str, directory: Path, n: int) -> RunStore | None:
    if kind == "none":
        return None
    if kind == "memory":
        return MemoryRunStore()
    durability = kind.removeprefix("sqlite_")
    return SQLiteRunStore(directory / f"{kind}-{n}.sqlite3", durability=durability)


async def one_run(catalog: ToolCatalog, plan: Plan, store: RunStore | None, run_id: str) -> float:
    bus = EventBus()
    if store is not None:
        store.attach(bus)
    executor = Executor(catalog, config=ExecutorSettings(max_concurrency=8), bus=bus,
                        run_id=run_id)
    t0 = time.perf_counter()
    await bus.emit(RunStarted(run_id=run_id, question="benchmark"))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=plan))
    results = await executor.run(plan)
    await bus.emit(RunFinished(run_id=run_id, status="SUCCEEDED"))
    if store is not None:
        await store.flush()
    elapsed = time.perf_counter() - t0
    assert len(results) == len(plan.steps) and all(r.ok for r in results)
    return elapsed


def fsync_ms(directory: Path, n: int = 100) -> float:
    """Median milliseconds of one small WAL commit with ``synchronous=FULL``."""
    import sqlite3

    conn = sqlite3.connect(directory / "fsync.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (x TEXT)")
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
        conn.execute("COMMIT")
        times.append(time.perf_counter() - t0)
    conn.close()
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    logger.remove()
    catalog = ToolCatalog([fake_tool("noop", {"ok": True}, hints={"read_only": True})])
    out: dict[str, Any] = {
        "benchmark": "store",
        "steps": args.steps,
        "repeat": args.repeat,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "shapes": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        out["fsync_ms"] = round(fsync_ms(directory), 3)
        print(f"one WAL commit with fsync: {out['fsync_ms']} ms")
        for shape in ("chain", "fan"):
            plan = make_plan(args.steps, shape)
            asyncio.run(one_run(catalog, plan, None, "warmup"))
            times: dict[str, list[float]] = {k: [] for k in STORES}
            for n in range(args.repeat):
                for kind in STORES:  # interleaved, so drift hits every store alike
                    store = make_store(kind, directory, n)
                    times[kind].append(
                        asyncio.run(one_run(catalog, plan, store, f"{shape}-{kind}-{n}"))
                    )
                    if store is not None:
                        store.close()
            base = statistics.median(times["none"])
            shape_out: dict[str, Any] = {}
            for kind in STORES:
                med = statistics.median(times[kind])
                shape_out[kind] = {
                    "median_s": round(med, 4),
                    "runs_s": [round(t, 4) for t in times[kind]],
                    "ratio_to_none": round(med / base, 3),
                    "added_ms_per_step": round((med - base) * 1000 / args.steps, 4),
                }
            out["shapes"][shape] = shape_out
            print(f"{shape:>5}: " + ", ".join(
                f"{k} {v['median_s']:.3f}s (x{v['ratio_to_none']}, "
                f"+{v['added_ms_per_step']:.3f} ms/step)" for k, v in shape_out.items()
            ))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "store.json"
    path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
