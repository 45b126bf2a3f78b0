"""Local asyncio vs Ray: throughput of whole runs and the overhead Ray adds per tool call.

Usage::

    RAY_AUTH_MODE=disabled python benchmarks/ray_throughput.py [--runs 16] [--sleep 0.1]

Measured in one process, one phase after the other (ratios compare phases of this run):

1. ``runs_local``: N agent runs of a demo scenario (a scripted model, a plan of two
   steps whose tools block for ``--sleep`` seconds each, then an answer), concurrently
   on one asyncio loop (sync tools run in its thread pool).
2. ``runs_ray``: the same N runs with `planexec.distributed.run_many` on a local Ray
   (``num_cpus=2``, each run asking for ``--run-cpus``), after a warm-up pass that
   starts the workers (their start-up is reported separately).
3. ``runs_cluster``: the same on a simulated two-node `ray.cluster_utils.Cluster` (a
   head without CPUs and two nodes of one CPU each), on this same machine.
4. ``tool_calls``: the per-call overhead: M sequential calls of a no-op tool through the
   executor, `LocalToolRunner` vs `RayToolRunner` (calls to the tool's actor, the
   default, and stateless tasks, the opt-in), and a plan of K parallel blocking
   steps on both backends.

Writes ``benchmarks/results/ray_throughput.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from langchain_core.tools import StructuredTool  # noqa: E402

from planexec.agent import PlanExecuteAgent  # noqa: E402
from planexec.config import (
    AgentConfig,  # noqa: E402
    ExecutorSettings,  # noqa: E402
)
from planexec.executor import Executor  # noqa: E402
from planexec.plan import Plan, Step  # noqa: E402
from planexec.testing import ScriptedChatModel  # noqa: E402
from planexec.tools import ToolCatalog  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "ray_throughput.json"
SLEEP = 0.1

PLAN = """#Task1: list the sites
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: the sites

#Task2: the assets of the first site
#Tool2: assets
#Args2: {"site_name": "<step_1.sites[0]>"}
#Dependency2: #S1
#ExpectedOutput2: its assets
"""

QUICK = {
    "planner": {"max_reprompts": 0},
    "executor": {"tool_retry": {"attempts": 1}},
    "model": {"retry": {"attempts": 1}},
}


def sleeping_tools(sleep: float) -> list[StructuredTool]:
    def sites() -> dict[str, Any]:
        time.sleep(sleep)
        return {"sites": ["MAIN", "WEST"]}

    def assets(site_name: str) -> dict[str, Any]:
        time.sleep(sleep)
        return {"site": site_name, "assets": ["CH-6", "CH-7"]}

    read = {"planexec": {"read_only": True}}
    return [
        StructuredTool.from_function(func=sites, name="sites", description="Sites.",
                                     metadata=read),
        StructuredTool.from_function(func=assets, name="assets", description="Assets.",
                                     metadata=read),
    ]


def demo_agent(sleep: float = SLEEP) -> PlanExecuteAgent:
    model = ScriptedChatModel(replies=[PLAN, "MAIN has CH-6 and CH-7."])
    return PlanExecuteAgent(model, sleeping_tools(sleep), config=AgentConfig.from_dict(QUICK))


class Factory:
    """A picklable agent factory (a zero-argument callable)."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep

    def __call__(self) -> PlanExecuteAgent:
        return demo_agent(self.sleep)


# -- phases -------------------------------------------------------------------------------


async def runs_local(n: int, sleep: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    runs = await asyncio.gather(*(demo_agent(sleep).run(f"q{i}") for i in range(n)))
    wall = time.perf_counter() - t0
    assert all(r.status == "SUCCEEDED" for r in runs), [r.error for r in runs]
    return {"runs": n, "wall_s": wall, "runs_per_s": n / wall}


def _workers_import_this_directory() -> None:
    """Ray processes started after this inherit a PYTHONPATH holding this directory."""
    here = str(Path(__file__).resolve().parent)
    paths = [here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


async def runs_on_ray(n: int, sleep: float, run_cpus: float) -> dict[str, Any]:
    from planexec.distributed import arun_many

    factory = Factory(sleep)
    t0 = time.perf_counter()
    warm = await arun_many([f"w{i}" for i in range(n)], factory, options={"num_cpus": run_cpus})
    warmup = time.perf_counter() - t0
    assert all(o.status == "SUCCEEDED" for o in warm), [o.error for o in warm]
    t0 = time.perf_counter()
    outcomes = await arun_many(
        [f"q{i}" for i in range(n)], factory, options={"num_cpus": run_cpus}
    )
    wall = time.perf_counter() - t0
    assert all(o.status == "SUCCEEDED" for o in outcomes), [o.error for o in outcomes]
    return {
        "runs": n,
        "run_cpus": run_cpus,
        "first_pass_wall_s": warmup,
        "wall_s": wall,
        "runs_per_s": n / wall,
        "nodes_used": len({node for o in outcomes for node in o.nodes}),
    }


def _noop_catalog() -> ToolCatalog:
    def noop() -> dict[str, Any]:
        return {"ok": True}

    return ToolCatalog([StructuredTool.from_function(func=noop, name="noop",
                                                     description="Nothing.")])


async def per_call(runner: Any, calls: int) -> list[float]:
    catalog = _noop_catalog()
    plan = Plan(steps=(Step(id=1, tool="noop"),))
    times = []
    for _ in range(calls):
        ex = Executor(catalog, config=ExecutorSettings(), runner=runner)
        t0 = time.perf_counter()
        (r,) = await ex.run(plan)
        times.append(time.perf_counter() - t0)
        assert r.ok, r.error
    return times


async def parallel_steps(runner: Any, k: int, sleep: float) -> float:
    def block(i: int) -> dict[str, Any]:
        time.sleep(sleep)
        return {"i": i}

    catalog = ToolCatalog([StructuredTool.from_function(
        func=block, name="block", description="Block.", metadata={"planexec": {"read_only": True}}
    )])
    plan = Plan(steps=tuple(Step(id=i, tool="block", args={"i": i}) for i in range(1, k + 1)))
    ex = Executor(catalog, config=ExecutorSettings(max_concurrency=k), runner=runner)
    t0 = time.perf_counter()
    results = await ex.run(plan)
    wall = time.perf_counter() - t0
    assert all(r.ok for r in results), [r.error for r in results]
    return wall


async def tool_calls(calls: int, k: int, sleep: float) -> dict[str, Any]:
    from planexec.distributed import RayOptions, RaySettings, RayToolRunner

    # default: calls go to the tool's actor; opt-in: one stateless task per call
    ray_runner = RayToolRunner(RaySettings(default=RayOptions(num_cpus=0.25)))
    task_runner = RayToolRunner(RaySettings(default=RayOptions(num_cpus=0.25, stateless=True)))
    await per_call(ray_runner, 5)  # warm-up: the actor, tool shipping
    await per_call(task_runner, 5)  # warm-up: task workers
    local = await per_call(None, calls)
    on_ray = await per_call(ray_runner, calls)
    as_tasks = await per_call(task_runner, calls)
    local_par = await parallel_steps(None, k, sleep)
    ray_par = await parallel_steps(ray_runner, k, sleep)
    task_par = await parallel_steps(task_runner, k, sleep)
    lm, rm = statistics.median(local), statistics.median(on_ray)
    tm = statistics.median(as_tasks)
    return {
        "stateless_median_ms": tm * 1000,
        "stateless_over_local_per_call": tm / lm,
        "parallel_stateless_wall_s": task_par,
        "parallel_stateless_over_local": task_par / local_par,
        "calls": calls,
        "local_median_ms": lm * 1000,
        "ray_median_ms": rm * 1000,
        "ray_overhead_ms_per_call": (rm - lm) * 1000,
        "ray_over_local_per_call": rm / lm,
        "parallel_steps": k,
        "step_sleep_s": sleep,
        "parallel_local_wall_s": local_par,
        "parallel_ray_wall_s": ray_par,
        "parallel_ray_over_local": ray_par / local_par,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--sleep", type=float, default=SLEEP)
    parser.add_argument("--run-cpus", type=float, default=0.25)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--no-cluster", action="store_true")
    args = parser.parse_args()

    import ray

    out: dict[str, Any] = {
        "benchmark": "ray_throughput",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "ray": ray.__version__, "load_avg_at_start": os.getloadavg()},
        "params": vars(args),
    }
    out["runs_local"] = asyncio.run(runs_local(args.runs, args.sleep))
    print("local asyncio:", out["runs_local"])

    _workers_import_this_directory()
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    out["ray_init_s"] = time.perf_counter() - t0
    try:
        out["runs_ray"] = asyncio.run(runs_on_ray(args.runs, args.sleep, args.run_cpus))
        print("local Ray:", out["runs_ray"])
        out["tool_calls"] = asyncio.run(tool_calls(args.calls, args.steps, args.sleep))
        print("tool calls:", out["tool_calls"])
    finally:
        ray.shutdown()

    if not args.no_cluster:
        from ray.cluster_utils import Cluster

        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, connect=True,
                          head_node_args={"num_cpus": 0, "include_dashboard": False})
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        out["cluster_start_s"] = time.perf_counter() - t0
        try:
            out["runs_cluster"] = asyncio.run(runs_on_ray(args.runs, args.sleep, args.run_cpus))
            print("two-node cluster:", out["runs_cluster"])
        finally:
            ray.shutdown()
            cluster.shutdown()

    local_rate = out["runs_local"]["runs_per_s"]
    out["ratios"] = {
        "ray_runs_per_s_over_local": out["runs_ray"]["runs_per_s"] / local_rate,
        "ray_per_call_over_local": out["tool_calls"]["ray_over_local_per_call"],
        "ray_parallel_steps_wall_over_local": out["tool_calls"]["parallel_ray_over_local"],
        "ray_stateless_per_call_over_local": out["tool_calls"]["stateless_over_local_per_call"],
        "ray_stateless_parallel_steps_wall_over_local": (
            out["tool_calls"]["parallel_stateless_over_local"]
        ),
    }
    if "runs_cluster" in out:
        out["ratios"]["cluster_runs_per_s_over_local"] = (
            out["runs_cluster"]["runs_per_s"] / local_rate
        )
        out["ratios"]["cluster_runs_per_s_over_ray"] = (
            out["runs_cluster"]["runs_per_s"] / out["runs_ray"]["runs_per_s"]
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out["ratios"], indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    # Run as the module ``ray_throughput`` (not ``__main__``), so Ray workers import its
    # tools and factory by name instead of unpickling copies without their imports.
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    importlib.import_module("ray_throughput").main()
