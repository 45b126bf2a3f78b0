"""What recording one read-only step costs at the least, part by part (issue 29, goal 3).

``benchmarks/userpath.py`` measures what the default store adds to the agent's step
with a read-only tool; issue 29's goal is 30 µs. This measures, apart from any run, the
parts of that record a safe step cannot skip as long as it is recorded as four events
and a result, each part alone on ``--steps`` steps:

- ``build``: building the step's four events (``StepStarted``, ``ArgResolved``,
  ``ToolCallStarted``, ``StepFinished`` with its `StepResult`), as a run builds them;
- ``encode``: the store's encoding of each to its queued row
  (`planexec.store.rows.encode`);
- ``insert``: `SQLiteRunStore` writing those rows (its own write of a batch, 256 events
  a transaction as its queue commits them, not flushed to disk, as a held commit) into
  a fresh file: five rows a step (four ``events`` rows, one ``step_results`` row);
- ``build_result_only``, ``encode_result_only``, ``insert_result_only``: the same for
  the ``StepFinished`` event alone: what a record of a safe step as its result alone
  would cost (two rows a step).

Rounds are interleaved; each figure is the median µs per step of ``--rounds`` rounds,
with the fastest and slowest. Writes ``benchmarks/results/store_floor.json``; its
``line_md`` is the sentence docs/performance.md quotes (a test checks it).

    python benchmarks/store_floor.py [--steps 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from userpath import _cell, summary  # one format for the benchmarks' figures

RESULTS = Path(__file__).resolve().parent / "results"
PARTS = ("build", "encode", "insert", "build_result_only", "encode_result_only",
         "insert_result_only")
BATCH = 256  # events a commit takes at most (planexec.store.rows.MAX_BUFFERED)
RUN_ID = "9b2f4c1e-52a8-4c1e-9def-0123456789ab"  # a run id as the agent makes them


def step_finished(i: int) -> Any:
    """The ``StepFinished`` of one read-only step of the user's-path chain (step ``i``)."""
    from planexec.events import StepFinished
    from planexec.results import ResolutionMethod, StepResult, StepStatus

    return StepFinished(
        run_id=RUN_ID, safe=True,
        result=StepResult(
            step_id=i, tool="work", status=StepStatus.SUCCEEDED, args={"v": {"ok": 1}},
            output={"ok": 1}, raw_output={"ok": 1},
            resolution={"v": ResolutionMethod.REFERENCE}, started_at=time.time(),
            duration=0.0001,
        ),
    )


def step_events(i: int) -> list[Any]:
    """The four events of one read-only step of the user's-path chain (step ``i``)."""
    from planexec.events import ArgResolved, StepStarted, ToolCallStarted
    from planexec.results import ResolutionMethod

    return [
        StepStarted(run_id=RUN_ID, step_id=i, tool="work"),
        ArgResolved(run_id=RUN_ID, step_id=i, arg="v", method=ResolutionMethod.REFERENCE),
        ToolCallStarted(run_id=RUN_ID, step_id=i, tool="work", args={"v": {"ok": 1}},
                        safe=True),
        step_finished(i),
    ]


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def one_round(steps: int, directory: Path, n: int) -> dict[str, float]:
    """Each part once: CPU µs per step."""
    from planexec.store import SQLiteRunStore
    from planexec.store.rows import encode

    out: dict[str, float] = {}
    events: list[list[Any]] = []
    out["build"] = _timed(lambda: events.extend(step_events(i) for i in range(1, steps + 1)))
    items: list[Any] = []
    out["encode"] = _timed(lambda: items.extend(encode(e) for es in events for e in es))
    finished = [item for item in items if item[0][2] == "StepFinished"]
    results: list[Any] = []
    out["build_result_only"] = _timed(
        lambda: results.extend(step_finished(i) for i in range(1, steps + 1))
    )
    out["encode_result_only"] = _timed(lambda: [encode(e) for e in results])
    for part, batch in (("insert", items), ("insert_result_only", finished)):
        store = SQLiteRunStore(directory / f"{part}-{n}.sqlite3")
        conn = store._fast_connection()  # the store's own connection for held commits

        def write(conn: Any = conn, store: Any = store, batch: list[Any] = batch) -> None:
            for j in range(0, len(batch), BATCH):
                store._write_batch(conn, batch[j : j + BATCH])

        out[part] = _timed(write)
        store.close()
    return {k: v * 1e6 / steps for k, v in out.items()}


def line_md(data: dict[str, Any]) -> str:
    """The sentence docs/performance.md quotes."""
    p = data["parts"]

    def us(part: str) -> str:
        return _cell(p[part], " µs")

    floor = round(p["build"]["median"] + p["encode"]["median"] + p["insert"]["median"], 1)
    alone = round(
        sum(p[f"{part}_result_only"]["median"] for part in ("build", "encode", "insert")), 1
    )
    return (
        f"Recording one read-only step apart from any run (`benchmarks/store_floor.py`, "
        f"{data['steps']:,} steps, median of {data['rounds']} rounds, CPU per step): "
        f"building its four events {us('build')}, encoding them {us('encode')}, "
        f"inserting their five rows {us('insert')} — {floor:,.1f} µs together; "
        f"for the result alone (its `StepFinished` and its two rows): building "
        f"{us('build_result_only')}, encoding {us('encode_result_only')}, "
        f"inserting {us('insert_result_only')} — {alone:,.1f} µs together."
    )


def run(steps: int, rounds: int) -> dict[str, Any]:
    """Measure every part, ``rounds`` times interleaved."""
    samples: dict[str, list[float]] = {part: [] for part in PARTS}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for part, value in one_round(steps, Path(tmp), n).items():
                samples[part].append(value)
    data: dict[str, Any] = {
        "benchmark": "store_floor",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "steps": steps,
        "rounds": rounds,
        "command": "python benchmarks/store_floor.py "
                   f"--steps {steps} --rounds {rounds}",
        "parts": {part: summary(values) for part, values in samples.items()},
    }
    data["line_md"] = line_md(data)
    return data


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "store_floor.json")
    args = parser.parse_args(argv)
    data = run(args.steps, args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(data["line_md"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
