"""Node failure on a simulated two-node cluster (run by test_ray_cluster.py in its own process).

Usage: ``python cluster_driver.py DIRECTORY`` — writes ``DIRECTORY/result.json``.

1. A head node without CPUs (the driver and the event sink live there) and node A with
   two CPUs: two runs start on A, a safe one and an unsafe one; each one's tool writes
   ``<name>.started`` (with its node id) and blocks.
2. When both have started (files, bounded waits), node B joins and node A is removed.
3. The safe run is retried on B (its tool answers at once on its second call); the
   unsafe one is reported as failed with the reason. Both are in the driver's store.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
import ray_helpers as h
from ray.cluster_utils import Cluster

from planexec.distributed import arun_many
from planexec.store import MemoryRunStore

FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_failure_threshold": 3,
}


def scenario(cluster: Cluster, directory: Path) -> dict[str, Any]:
    """Cluster changes happen here, on the main thread (Ray requires it); the runs go
    on in a thread of their own, with their own event loop."""
    node_a = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    store = MemoryRunStore()
    with ThreadPoolExecutor(1) as pool:
        runs = pool.submit(asyncio.run, _runs(directory, store))
        timeline: dict[str, float] = {}
        t0 = time.monotonic()
        for name in ("safe_tool", "unsafe_tool"):
            if not h.wait_for(directory / f"{name}.started", 90.0):
                raise RuntimeError(f"{name} never started")
        timeline["both_started"] = time.monotonic() - t0
        started = {
            name: json.loads((directory / f"{name}.started").read_text(encoding="utf-8"))
            for name in ("safe_tool", "unsafe_tool")
        }
        node_b = cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        timeline["b_joined"] = time.monotonic() - t0
        cluster.remove_node(node_a, allow_graceful=False)
        timeline["a_removed"] = time.monotonic() - t0
        try:
            outcomes = runs.result(timeout=120.0)
        finally:
            for name in ("safe_tool", "unsafe_tool"):
                (directory / f"{name}.release").write_text("", encoding="utf-8")
        timeline["done"] = time.monotonic() - t0
    return {
        "node_a": node_a.node_id,
        "node_b": node_b.node_id,
        "started": started,
        "timeline": timeline,
        "outcomes": [
            {
                "name": o.name,
                "status": o.status,
                "error": o.error,
                "run_ids": list(o.run_ids),
                "nodes": list(o.nodes),
                "answer": o.run.answer if o.run else None,
            }
            for o in outcomes
        ],
        "store": {
            rid: {"status": str(store.get_run(rid).status), "error": store.get_run(rid).error}
            for o in outcomes
            for rid in o.run_ids
        },
        "calls": {n: h.calls_of(directory, n) for n in ("safe_tool", "unsafe_tool")},
    }


async def _runs(directory: Path, store: MemoryRunStore) -> list[Any]:
    safe = functools.partial(h.blocking_agent, str(directory), "safe_tool", True)
    unsafe = functools.partial(h.blocking_agent, str(directory), "unsafe_tool", False)
    # Two run_many calls at once, one per agent factory, sharing the driver's store.
    first, second = await asyncio.gather(
        arun_many(["safe"], safe, store=store, run_ids=["safe-run"], options={"num_cpus": 1}),
        arun_many(
            ["unsafe"], unsafe, store=store, run_ids=["unsafe-run"], options={"num_cpus": 1}
        ),
    )
    return [*first, *second]


def main(directory: Path) -> None:
    cluster = Cluster(
        initialize_head=True,
        connect=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "_system_config": FAST_FAILURE_DETECTION,
        },
    )
    try:
        result = scenario(cluster, directory)
    finally:
        ray.shutdown()
        cluster.shutdown()
    (directory / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
