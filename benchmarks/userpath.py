"""The path users run: the agent with its default store and ordinary tools, in one run.

Issue 29's benchmark. Four ways of running the same plan, side by side:

- ``agent``: `PlanExecuteAgent.execute_plan` (no model) with a `SQLiteRunStore` (the
  default store of ``planexec run``, default settings, a fresh file per run) and an
  ordinary ``@tool`` with no safety hints (so not safe to call again: every call start
  is committed and flushed to disk before the call);
- ``executor``: the `Executor` alone (no store, no agent), the same tools;
- ``langgraph_sqlite``: a LangGraph ``StateGraph`` (one node per step, as in
  ``compare.py``) with ``AsyncSqliteSaver`` on a fresh file per run and
  ``durability="sync"`` (each step's checkpoint written before the next step starts:
  the promise closest to planexec's);
- ``asyncio``: the bare floor, one task per step awaiting its dependencies' tasks.

Each is run with the tools called two ways: ``direct`` (an ordinary ``@tool``: planexec
calls its function itself; LangGraph and the floor await the function) and ``ainvoke``
(a `StructuredTool` subclass, which planexec's runner must call through ``ainvoke``, as
it does MCP tools, tools with callbacks and ``BaseTool`` subclasses; LangGraph and the
floor call ``ainvoke`` too).

Workloads:

- ``chain`` of 1,000 no-op steps (each takes the previous step's output): CPU and wall
  µs per step; also the agent with a read-only hint (``agent_safe``) and without a store
  (``agent_nostore``), to show what the store adds;
- ``fanout`` of 1,000 sleeping steps (``--latency``, 50 ms) between a no-op root and a
  no-op join: wall ÷ the fan-out's own critical path (one sleep), so the excess is what
  the framework adds to start and finish 1,000 calls that run at once;
- linearity: the agent and the executor on a chain of 10,000 (50,000 with ``--huge``):
  per-step cost against the chain of 1,000;
- ``parse_plan`` CPU µs per step of the chain's hashstep text at 1,000 and 10,000 steps
  (50,000 with ``--huge``);
- the store's commits per step, counted (not timed) in one more agent run per shape:
  commits, commits flushed to disk (an fsync of the WAL each) and WAL checkpoints.

Rounds are interleaved (every cell once per round, in turn); each figure is the median
of ``--rounds`` rounds with the fastest and slowest. The load average before and after
is recorded: other work on the machine inflates every figure, so compare the ratios of
one run. Writes ``benchmarks/results/userpath.json`` and ``userpath.png`` (with
matplotlib).

    python benchmarks/userpath.py [--rounds 3] [--latency 0.05] [--huge] [--quick] [--docs]

``--docs`` also copies the tables into ``docs/performance.md`` (between its markers);
``--replot JSON`` only draws the picture of a result file.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from loguru import logger

RESULTS = Path(__file__).resolve().parent / "results"
PATHS = ("agent", "executor", "langgraph_sqlite", "asyncio")
CALLS = ("direct", "ainvoke")
NAMES = {
    "agent": "planexec agent + SQLite store",
    "agent_safe": "planexec agent + SQLite store, read-only tool",
    "agent_nostore": "planexec agent, no store",
    "executor": "planexec `Executor` alone",
    "langgraph_sqlite": "LangGraph + `AsyncSqliteSaver`",
    "asyncio": "bare asyncio",
}


def _require_langgraph() -> None:
    for module in ("langgraph", "langgraph.checkpoint.sqlite"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            print(
                f"benchmarks/userpath.py needs {module}, which planexec does not depend on: "
                "install the benchmark extra (pip install 'planexec[bench]') and run it again.",
                file=sys.stderr,
            )
            raise SystemExit(2)


# -- workloads -------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """A chain of ``n`` no-op steps, or a fan-out of ``n`` sleeping steps."""

    shape: str
    n: int
    latency: float = 0.0

    @property
    def deps(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(step id, dependencies)`` in topological order."""
        if self.shape == "chain":
            return [(1, ())] + [(i, (i - 1,)) for i in range(2, self.n + 1)]
        middle = tuple(range(2, self.n + 2))
        return [(1, ())] + [(i, (1,)) for i in middle] + [(self.n + 2, middle)]

    @property
    def steps(self) -> int:
        """The number of steps."""
        return len(self.deps)

    def sleeps(self, sid: int) -> bool:
        """Whether a step calls the sleeping tool (the fan-out's middle steps)."""
        return self.shape == "fanout" and 1 < sid < self.n + 2

    def args(self, sid: int, deps: tuple[int, ...], out: Callable[[int], Any]) -> dict[str, Any]:
        """A step's arguments from its dependencies' outputs."""
        if not deps:
            return {}
        if len(deps) > 1:
            return {"inputs": [out(d) for d in deps]}
        return {"v": out(deps[0])}

    def label(self) -> str:
        """E.g. ``chain-1000``."""
        return f"{self.shape}-{self.n}"


def make_tools(work: Work, calls: str) -> dict[str, Any]:
    """The workload's tools by name: ``work`` (no-op or sleeping) and ``quick`` (no-op).

    ``direct``: ordinary ``@tool`` functions; ``ainvoke``: a `StructuredTool` subclass
    (planexec's runner calls it through ``ainvoke``).
    """
    from langchain_core.tools import StructuredTool, tool

    latency = work.latency

    async def noop(v: Any = None, inputs: list[Any] | None = None) -> dict[str, Any]:
        """Do nothing."""
        return {"ok": 1}

    async def sleep(v: Any = None, inputs: list[Any] | None = None) -> dict[str, Any]:
        """Sleep."""
        await asyncio.sleep(latency)
        return {"ok": 1}

    class Subclassed(StructuredTool):
        """A StructuredTool subclass: planexec's runner calls it through ``ainvoke``."""

    out: dict[str, Any] = {}
    for name, fn in (("work", sleep if work.shape == "fanout" else noop), ("quick", noop)):
        if calls == "direct":
            out[name] = tool(name)(fn)
        else:
            out[name] = Subclassed.from_function(coroutine=fn, name=name, description="a tool")
    return out


def tool_of(work: Work, sid: int) -> str:
    """The tool a step calls."""
    return "work" if work.shape == "chain" or work.sleeps(sid) else "quick"


def make_plan(work: Work) -> Any:
    """The workload as a planexec `Plan` (whole-value references)."""
    from planexec.parsing.refs import find_refs
    from planexec.plan import Plan, Step

    steps = []
    for sid, deps in work.deps:
        refs = work.args(sid, deps, lambda d: f"<step_{d}>")
        steps.append(Step(id=sid, tool=tool_of(work, sid), args=find_refs(refs), depends_on=deps))
    return Plan(steps=tuple(steps))


def plan_text(n: int) -> str:
    """The chain of ``n`` steps as the hashstep text a planner writes."""
    out = []
    for i in range(1, n + 1):
        args = "{}" if i == 1 else f'{{"v": "<step_{i - 1}>"}}'
        dep = "None" if i == 1 else f"#S{i - 1}"
        out.append(f"#Step{i}: step {i}\n#Tool{i}: work\n#Args{i}: {args}\n#Dependency{i}: {dep}\n")
    return "\n".join(out)


# -- one cell: setup (not timed), run (timed), teardown --------------------------------


@dataclass
class Cell:
    """A path on a workload with its tools called one way."""

    path: str
    calls: str
    work: Work
    directory: Path
    runs: int = 0
    plan: Any = None
    tools: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tools = make_tools(self.work, self.calls)
        if self.path.startswith(("agent", "executor")):
            self.plan = make_plan(self.work)

    def key(self) -> tuple[str, str, str]:
        """``(workload, path, calls)``."""
        return (self.work.label(), self.path, self.calls)

    def file(self) -> Path:
        """A fresh database file for this run."""
        self.runs += 1
        return self.directory / f"{self.path}-{self.calls}-{self.work.label()}-{self.runs}.sqlite3"

    async def setup(self) -> Any:
        """What one run needs, built before the clock starts."""
        if self.path.startswith("agent"):
            return self._agent()
        if self.path == "executor":
            return None
        if self.path == "langgraph_sqlite":
            return await self._langgraph()
        return None

    def _agent(self) -> Any:
        from planexec import PlanExecuteAgent
        from planexec.config import AgentConfig, LimitSettings
        from planexec.store import SQLiteRunStore

        store = None if self.path == "agent_nostore" else SQLiteRunStore(self.file())
        safe = {"read_only": True}
        hints = {"work": safe, "quick": safe} if self.path == "agent_safe" else None
        config = AgentConfig(limits=LimitSettings(max_steps=None))  # the default stops at 50
        agent = PlanExecuteAgent(
            None, list(self.tools.values()), store=store, config=config, hints=hints
        )
        return agent, store

    async def _langgraph(self) -> Any:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = self.file()
        manager = AsyncSqliteSaver.from_conn_string(str(path))
        saver = await manager.__aenter__()
        await saver.setup()
        return _langgraph_graph(self.work, self.tools, self.calls, saver), manager, path

    async def run(self, ctx: Any) -> None:
        """The timed part: run the workload once, check every step gave an output."""
        work = self.work
        if self.path.startswith("agent"):
            agent, _ = ctx
            run = await agent.execute_plan(self.plan)
            assert run.status == "SUCCEEDED" and len(run.results) == work.steps, run.error
        elif self.path == "executor":
            from planexec.config import ExecutorSettings
            from planexec.executor import Executor
            from planexec.tools import ToolCatalog

            executor = Executor(ToolCatalog(list(self.tools.values())), config=ExecutorSettings())
            results = await executor.run(self.plan)
            assert len(results) == work.steps and all(r.ok for r in results)
        elif self.path == "langgraph_sqlite":
            graph = ctx[0]
            config = {"configurable": {"thread_id": "t"}, "recursion_limit": work.steps + 10}
            state = await graph.ainvoke({"out": {}}, config=config, durability="sync")
            assert len(state["out"]) == work.steps
        else:
            await _floor(work, self.tools, self.calls)

    async def teardown(self, ctx: Any) -> None:
        """Close what setup opened and delete the run's file."""
        if self.path.startswith("agent"):
            store = ctx[1]
            if store is not None:
                store.close()
                for f in store.path.parent.glob(store.path.name + "*"):
                    f.unlink()
        elif self.path == "langgraph_sqlite":
            _, manager, path = ctx
            await manager.__aexit__(None, None, None)
            for f in path.parent.glob(path.name + "*"):
                f.unlink()


def _merge(a: dict[int, Any], b: dict[int, Any]) -> dict[int, Any]:
    return {**a, **b}


class State(TypedDict):
    """LangGraph's state: every step's output, by step id (as in ``compare.py``)."""

    out: Annotated[dict[int, Any], _merge]


def _langgraph_graph(work: Work, tools: dict[str, Any], calls: str, saver: Any) -> Any:
    from _frameworks import wire_graph
    from langgraph.graph import StateGraph

    builder: Any = StateGraph(State)

    def node(sid: int, deps: tuple[int, ...]) -> Callable[[State], Awaitable[State]]:
        tool = tools[tool_of(work, sid)]
        coroutine = tool.coroutine

        async def run(state: State) -> State:
            args = work.args(sid, deps, state["out"].__getitem__)
            out = await (coroutine(**args) if calls == "direct" else tool.ainvoke(args))
            return {"out": {sid: out}}

        return run

    wire_graph(builder, work.deps, node)
    return builder.compile(checkpointer=saver)


async def _floor(work: Work, tools: dict[str, Any], calls: str) -> None:
    tasks: dict[int, asyncio.Task[Any]] = {}

    async def step(sid: int, deps: tuple[int, ...]) -> Any:
        outputs = {d: await tasks[d] for d in deps}
        args = work.args(sid, deps, outputs.__getitem__)
        tool = tools[tool_of(work, sid)]
        return await (tool.coroutine(**args) if calls == "direct" else tool.ainvoke(args))

    for sid, deps in work.deps:
        tasks[sid] = asyncio.create_task(step(sid, deps))
    results = await asyncio.gather(*tasks.values())
    assert len(results) == work.steps


@dataclass(frozen=True)
class Measure:
    """One run: CPU seconds (every thread of the process) and wall seconds."""

    cpu: float
    wall: float


def measure(cell: Cell) -> Measure:
    """Run a cell once on a fresh event loop; setup and teardown not counted."""

    async def timed() -> Measure:
        ctx = await cell.setup()
        gc.collect()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            await cell.run(ctx)
            return Measure(time.process_time() - cpu0, time.perf_counter() - wall0)
        finally:
            await cell.teardown(ctx)

    return asyncio.run(timed())


def summary(values: list[float], digits: int = 1) -> dict[str, float]:
    """Median, min and max."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "median": round(median, digits),
        "min": round(ordered[0], digits),
        "max": round(ordered[-1], digits),
    }


# -- counting (not timing) -------------------------------------------------------------


def count_commits(work: Work, path: str, directory: Path) -> dict[str, Any]:
    """Commits, flushed commits and WAL checkpoints of the agent's store in one run.

    Counted on the store instance: every transaction of events (`_write_batch`), whether
    its connection flushes the commit to disk (``PRAGMA synchronous`` FULL: one fsync of
    the WAL), and the store's WAL checkpoints. The store's few other writes (the run's
    row, its lease) are not counted: they are a handful per run, not per step.
    """
    cell = Cell(path, "direct", work, directory)
    counts = {"commits": 0, "flushed_commits": 0, "wal_checkpoints": 0}

    async def counted() -> None:
        ctx = await cell.setup()
        store = ctx[1]
        write_batch, checkpoint = store._write_batch, store._checkpoint

        def counting_write(conn: Any, batch: Any) -> None:
            counts["commits"] += 1
            if conn.execute("PRAGMA synchronous").fetchone()[0] >= 2:  # FULL or EXTRA
                counts["flushed_commits"] += 1
            write_batch(conn, batch)

        def counting_checkpoint() -> None:
            counts["wal_checkpoints"] += 1
            checkpoint()

        store._write_batch, store._checkpoint = counting_write, counting_checkpoint
        try:
            await cell.run(ctx)
        finally:
            await cell.teardown(ctx)

    asyncio.run(counted())
    unsafe_calls = 0 if path == "agent_safe" else work.steps  # no tool has hints
    return {
        "path": path,
        "shape": work.shape,
        "n": work.n,
        "steps": work.steps,
        "unsafe_calls": unsafe_calls,
        **{f"{k}_per_step": round(v / work.steps, 4) for k, v in counts.items()},
        **counts,
    }


# -- the run -----------------------------------------------------------------------------


def cells(args: argparse.Namespace, directory: Path) -> list[Cell]:
    chain, fan = Work("chain", args.chain), Work("fanout", args.fanout, args.latency)
    out = [Cell(p, c, chain, directory) for p in PATHS for c in CALLS]
    out += [Cell(p, "direct", chain, directory) for p in ("agent_safe", "agent_nostore")]
    out += [Cell(p, c, fan, directory) for p in PATHS for c in CALLS]
    for n in args.long:
        out += [Cell(p, "direct", Work("chain", n), directory) for p in ("agent", "executor")]
    return out


def parse_cpu(n: int, text: str) -> float:
    """CPU seconds of one `parse_plan` of ``text`` (asserting its ``n`` steps)."""
    from planexec.parsing import parse_plan

    gc.collect()
    t0 = time.process_time()
    plan = parse_plan(text)
    elapsed = time.process_time() - t0
    assert len(plan.steps) == n
    return elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    from store import fsync_ms  # benchmarks/store.py: one flushed WAL commit, measured

    load_before = list(os.getloadavg())
    directory = Path(tempfile.mkdtemp(prefix="planexec-userpath-"))
    try:
        flush_before = fsync_ms(directory, 50)
        plan = cells(args, directory)
        for cell in plan:  # warm-up: imports, caches, first-call costs
            if not args.quick and cell.work.n <= max(args.chain, args.fanout):
                measure(cell)
        texts = {n: plan_text(n) for n in args.parse_sizes}
        samples: dict[tuple[str, str, str], list[Measure]] = {c.key(): [] for c in plan}
        parse_samples: dict[int, list[float]] = {n: [] for n in texts}
        for r in range(args.rounds):
            for cell in plan:
                samples[cell.key()].append(measure(cell))
            for n, text in texts.items():
                parse_samples[n].append(parse_cpu(n, text))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        rows = []
        for cell in plan:
            work, got = cell.work, samples[cell.key()]
            row: dict[str, Any] = {
                "path": cell.path,
                "calls": cell.calls,
                "shape": work.shape,
                "n": work.n,
                "steps": work.steps,
                "cpu_us_per_step": summary([m.cpu / work.steps * 1e6 for m in got]),
                "wall_us_per_step": summary([m.wall / work.steps * 1e6 for m in got]),
            }
            if work.shape == "fanout":
                row["latency_s"] = work.latency
                row["wall_over_critical"] = summary([m.wall / work.latency for m in got], 3)
            rows.append(row)
        counts = [
            count_commits(Work("chain", args.chain), "agent", directory),
            count_commits(Work("chain", args.chain), "agent_safe", directory),
            count_commits(Work("fanout", args.fanout, args.latency), "agent", directory),
        ]
        parse = [
            {"n": n, "cpu_us_per_step": summary([s / n * 1e6 for s in got])}
            for n, got in parse_samples.items()
        ]
        (directory / "fsync.sqlite3").unlink()
        flush_after = fsync_ms(directory, 50)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    data: dict[str, Any] = {
        "benchmark": "userpath",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "fsync_ms_before": round(flush_before, 3),
        "fsync_ms_after": round(flush_after, 3),
        "rounds": args.rounds,
        "latency_s": args.latency,
        "quick": args.quick,
        "command": "python benchmarks/userpath.py " + " ".join(args.argv),
        "rows": rows,
        "parse": parse,
        "store_counts": counts,
    }
    data["goals"] = goals(data, args)
    return data


def _find(rows: list[dict[str, Any]], **where: Any) -> dict[str, Any]:
    for row in rows:
        if all(row.get(k) == v for k, v in where.items()):
            return row
    raise KeyError(where)


def _what(metric: str) -> str:
    return "CPU" if metric.startswith("cpu") else "wall"


def _goal(goal: str, value: float, target: float, **more: Any) -> dict[str, Any]:
    return {"goal": goal, "value": round(value, 3), "target": target, "met": value <= target,
            **more}


def goals(data: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Issue 29's goals, as ratios of this run's medians (and counts)."""
    rows, out = data["rows"], []
    chain, fan = args.chain, args.fanout

    def med(metric: str = "wall_us_per_step", **where: Any) -> float:
        return float(_find(rows, **where)[metric]["median"])

    for calls in CALLS:
        ratio = med(path="agent", calls=calls, shape="chain", n=chain) / med(
            path="langgraph_sqlite", calls=calls, shape="chain", n=chain
        )
        out.append(_goal(f"1. agent ÷ LangGraph + AsyncSqliteSaver, wall per step, chain of "
                         f"{chain:,}, tools {calls}", ratio, 0.25))
    for n in args.long:
        for path in ("agent", "executor"):
            for metric in ("wall_us_per_step", "cpu_us_per_step"):
                ratio = med(metric, path=path, calls="direct", shape="chain", n=n) / med(
                    metric, path=path, calls="direct", shape="chain", n=chain
                )
                out.append(_goal(f"2. {path}: {_what(metric)} per step, chain of {n:,} ÷ of "
                                 f"{chain:,}", ratio, 1.2))
    for path in ("agent", "agent_nostore"):
        for metric in ("wall_us_per_step", "cpu_us_per_step"):
            ratio = med(metric, path=path, calls="direct", shape="chain", n=chain) / med(
                metric, path="executor", calls="direct", shape="chain", n=chain
            )
            out.append(_goal(f"2. {NAMES[path]} ÷ executor, {_what(metric)} per step, chain "
                             f"of {chain:,}", ratio, 1.2))
    counts = {(c["path"], c["shape"]): c for c in data["store_counts"]}
    for shape in ("chain", "fanout"):
        c = counts[("agent", shape)]
        # the run's end (RunFinished) is flushed once per run, whatever its steps
        per_call = (c["flushed_commits"] - 1) / max(1, c["unsafe_calls"])
        out.append(_goal(f"3. flushed commits (fsyncs) per unsafe call start, {shape} of "
                         f"{c['n']:,} (the run's one flushed end not counted)",
                         per_call, 1.0, commits_per_step=c["commits_per_step"]))
    for metric in ("wall_us_per_step", "cpu_us_per_step"):
        added = med(metric, path="agent_safe", calls="direct", shape="chain", n=chain) - med(
            metric, path="agent_nostore", calls="direct", shape="chain", n=chain
        )
        out.append(_goal(f"3. µs ({_what(metric)}) the store adds per step, read-only tool, "
                         f"chain of {chain:,}", added, 30))
    parse = {p["n"]: p["cpu_us_per_step"]["median"] for p in data["parse"]}
    sizes = sorted(parse)
    for n in sizes:
        out.append(_goal(f"4. parse_plan CPU µs per step, {n:,} steps", parse[n], 30))
    if len(sizes) > 1:
        out.append(_goal(f"4. parse_plan per step, {sizes[-1]:,} ÷ {sizes[0]:,} steps",
                         parse[sizes[-1]] / parse[sizes[0]], 1.2))
    ratio = med("wall_over_critical", path="agent", calls="ainvoke", shape="fanout", n=fan) / med(
        "wall_over_critical", path="asyncio", calls="ainvoke", shape="fanout", n=fan
    )
    out.append(_goal(f"5. agent fan-out of {fan:,} through ainvoke ÷ bare asyncio's, wall ÷ "
                     "critical path", ratio, 1.0))
    return out


# -- tables and picture ------------------------------------------------------------------


def _cell(s: dict[str, Any], unit: str) -> str:
    return f"{s['median']:,}{unit} ({s['min']:,}–{s['max']:,})"


def tables_md(data: dict[str, Any]) -> str:
    """The markdown tables `docs/performance.md` quotes."""
    rows = data["rows"]
    lines = [
        "| path | what it measures | tools called | chain: wall per step | "
        "chain: CPU per step | fan-out: wall ÷ critical path |",
        "|---|---|---|---|---|---|",
    ]
    what = {
        "agent": "`PlanExecuteAgent.execute_plan`, default `SQLiteRunStore`, no safety hints",
        "agent_safe": "the same, the tool hinted read-only",
        "agent_nostore": "the same, no store",
        "executor": "`Executor.run` alone: no agent, no store",
        "langgraph_sqlite": '`StateGraph`, `AsyncSqliteSaver`, `durability="sync"`',
        "asyncio": "a task per step awaiting its dependencies",
    }
    chain_n = min(r["n"] for r in rows if r["shape"] == "chain")
    for path in ("agent", "agent_safe", "agent_nostore", "executor", "langgraph_sqlite",
                 "asyncio"):
        for calls in CALLS:
            chain = [r for r in rows if r["path"] == path and r["calls"] == calls
                     and r["shape"] == "chain" and r["n"] == chain_n]
            if not chain:
                continue
            fan = [r for r in rows if r["path"] == path and r["calls"] == calls
                   and r["shape"] == "fanout"]
            fan_cell = _cell(fan[0]["wall_over_critical"], "×") if fan else "–"
            lines.append(
                f"| {NAMES[path]} | {what[path]} | {calls} | "
                f"{_cell(chain[0]['wall_us_per_step'], ' µs')} | "
                f"{_cell(chain[0]['cpu_us_per_step'], ' µs')} | {fan_cell} |"
            )
    lines += ["", "| goal (issue 29) | measured | target | met |", "|---|---|---|---|"]
    for g in data["goals"]:
        lines.append(f"| {g['goal']} | {g['value']:,} | {g['target']} | "
                     f"{'yes' if g['met'] else 'no'} |")
    lines += ["", "| store: counted in one run | steps | commits / step | "
              "flushed commits (fsyncs) / step | WAL checkpoints / step |", "|---|---|---|---|---|"]
    for c in data["store_counts"]:
        label = f"{NAMES[c['path']]}, {c['shape']} of {c['n']:,}"
        lines.append(f"| {label} | {c['steps']:,} | {c['commits_per_step']} | "
                     f"{c['flushed_commits_per_step']} | {c['wal_checkpoints_per_step']} |")
    lines += ["", f"One flushed commit (a small WAL commit with `synchronous=FULL`) took "
              f"{data['fsync_ms_before']} ms before the run and {data['fsync_ms_after']} ms "
              f"after it (medians); load average {data['load_average_before'][0]} before, "
              f"{data['load_average_after'][0]} after, on {data['cpus']} CPUs."]
    return "\n".join(lines)


def plot(data: dict[str, Any], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no picture (pip install planexec[plot])")
        return None
    rows = data["rows"]
    chain_n = min(r["n"] for r in rows if r["shape"] == "chain")
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    order = ["agent", "agent_safe", "agent_nostore", "executor", "langgraph_sqlite", "asyncio"]
    for ax, (shape, metric, title) in zip(axes[:2], (
        ("chain", "wall_us_per_step", f"chain of {chain_n:,}: wall µs per step (log)"),
        ("fanout", "wall_over_critical", "fan-out: wall ÷ its critical path (log)"),
    ), strict=True):
        labels, ys, errs, colors = [], [], [[], []], []
        for path in order:
            for calls in CALLS:
                found = [r for r in rows if r["path"] == path and r["calls"] == calls
                         and r["shape"] == shape and (shape != "chain" or r["n"] == chain_n)]
                if not found:
                    continue
                s = found[0][metric]
                labels.append(f"{path}\n{calls}")
                ys.append(s["median"])
                errs[0].append(s["median"] - s["min"])
                errs[1].append(s["max"] - s["median"])
                colors.append("tab:blue" if path.startswith(("agent", "executor"))
                              else "tab:orange" if path.startswith("langgraph") else "tab:gray")
        ax.bar(range(len(ys)), ys, yerr=errs, color=colors, capsize=3)
        ax.set_xticks(range(len(ys)), labels, rotation=60, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    ax = axes[2]
    for path, color in (("agent", "tab:blue"), ("executor", "tab:cyan")):
        pts = sorted((r for r in rows if r["path"] == path and r["calls"] == "direct"
                      and r["shape"] == "chain"), key=lambda r: r["n"])
        for metric, style in (("wall_us_per_step", "-o"), ("cpu_us_per_step", ":o")):
            ax.plot([r["n"] for r in pts], [r[metric]["median"] for r in pts], style,
                    color=color, label=f"{path} ({_what(metric)})")
    pts = sorted(data["parse"], key=lambda p: p["n"])
    ax.plot([p["n"] for p in pts], [p["cpu_us_per_step"]["median"] for p in pts], "--s",
            color="tab:green", label="parse_plan (CPU)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps")
    ax.set_title("µs per step against plan size (flat = linear)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    load = data["load_average_before"][0]
    fig.suptitle(f"The user's path (medians of {data['rounds']} rounds; load average {load} "
                 f"on {data['cpus']} CPUs)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
_BEGIN, _END = "<!-- userpath.json tables -->", "<!-- end of userpath.json tables -->"


def update_docs(data: dict[str, Any], page: Path = DOCS) -> None:
    """Put ``data``'s tables between the page's markers (what the docs test checks)."""
    text = page.read_text(encoding="utf-8")
    head, rest = text.split(_BEGIN, 1)
    _, tail = rest.split(_END, 1)
    page.write_text(f"{head}{_BEGIN}\n\n{data['tables_md']}\n\n{_END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chain", type=int, default=1000, help="the chain's length")
    parser.add_argument("--fanout", type=int, default=1000, help="the fan-out's width")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--huge", action="store_true", help="also chains of 50,000 steps")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS / "userpath.json")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--replot", type=Path, default=None, metavar="JSON",
                        help="only draw the picture of a result file written before")
    parser.add_argument("--docs", action="store_true",
                        help="also copy the tables into docs/performance.md")
    args = parser.parse_args(argv)
    if args.replot is not None:
        data = json.loads(args.replot.read_text(encoding="utf-8"))
        print(f"wrote {plot(data, args.replot.with_suffix('.png'))}")
        return 0
    args.argv = list(sys.argv[1:] if argv is None else argv)
    _require_langgraph()
    args.long = [10_000] + ([50_000] if args.huge else [])
    if args.quick:
        args.rounds, args.chain, args.fanout, args.latency = 1, 10, 10, 0.01
        args.long = [30]
    args.parse_sizes = sorted({args.chain, *args.long})
    logger.remove()  # planexec's warnings are not part of the figures
    data = run(args)
    data["tables_md"] = tables_md(data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(data["tables_md"])
    if args.docs:
        update_docs(data)
    picture = None if args.no_plot else plot(data, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out}" + (f" and {picture}" if picture else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
