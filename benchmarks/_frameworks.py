"""Workloads and runners shared by compare.py, scheduler.py and parallel.py.

A workload is a DAG of tool steps (``chain`` or ``fanout``) and a tool (``noop`` or
``sleep``); three ways of running it:

- ``planexec``: a `Plan` run by an `Executor` (default settings);
- ``langgraph``: a ``StateGraph`` with one node per step (edges from the
  dependencies; a join waits for all of its inputs), outputs merged into the state;
- ``asyncio``: the floor, one task per step awaiting its dependencies' tasks.

And two ways of calling the tool: ``langchain`` (as each framework does with a
langchain-core tool: ``ainvoke`` for LangGraph and the floor, planexec's default
runner) and ``direct`` (the tool's coroutine called directly: the framework alone).

Every step passes its dependencies' outputs on as arguments: ``v`` (one dependency)
or ``inputs`` (the join of a fan-out).
"""

from __future__ import annotations

import asyncio
import gc
import operator
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.tools import StructuredTool

from planexec.config import ExecutorSettings
from planexec.executor import Executor
from planexec.parsing.refs import find_refs
from planexec.plan import Plan, Step
from planexec.tools import ToolCatalog, ToolSpec

FRAMEWORKS = ("planexec", "langgraph", "asyncio")


@dataclass(frozen=True)
class Workload:
    """A DAG of steps calling one tool."""

    shape: str
    """``chain`` (each step depends on the previous one) or ``fanout`` (one root,
    ``n`` steps depending on it, one join depending on all of them)."""
    n: int
    """Steps in the chain, or width of the fan-out."""
    tool: str
    """``noop`` or ``sleep``."""
    latency: float = 0.0
    """Seconds each call of the ``sleep`` tool sleeps."""

    @property
    def deps(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(step id, dependencies)`` in topological order."""
        if self.shape == "chain":
            return [(1, ())] + [(i, (i - 1,)) for i in range(2, self.n + 1)]
        middle = list(range(2, self.n + 2))
        return [(1, ())] + [(i, (1,)) for i in middle] + [(self.n + 2, tuple(middle))]

    @property
    def steps(self) -> int:
        """The number of steps."""
        return len(self.deps)

    @property
    def critical_path(self) -> float:
        """Seconds of sleep on the longest path."""
        hops = self.n if self.shape == "chain" else 3
        return hops * self.latency

    def label(self) -> str:
        """E.g. ``fanout-100-sleep``."""
        return f"{self.shape}-{self.n}-{self.tool}"


def make_tool(work: Workload) -> StructuredTool:
    """The workload's langchain-core tool (the same one for every framework)."""
    latency = work.latency

    async def noop(v: Any = None, inputs: list[Any] | None = None) -> dict[str, Any]:
        return {"ok": 1}

    async def sleep(v: Any = None, inputs: list[Any] | None = None) -> dict[str, Any]:
        await asyncio.sleep(latency)
        return {"ok": 1}

    fn = noop if work.tool == "noop" else sleep
    return StructuredTool.from_function(coroutine=fn, name="work", description="a tool")


def args_for(deps: tuple[int, ...], outputs: Callable[[int], Any], join: bool) -> dict[str, Any]:
    """A step's arguments from its dependencies' outputs."""
    if not deps:
        return {}
    if join:
        return {"inputs": [outputs(d) for d in deps]}
    return {"v": outputs(deps[0])}


def is_join(work: Workload, sid: int) -> bool:
    """Whether a step is the join of a fan-out."""
    return work.shape == "fanout" and sid == work.n + 2


def make_plan(work: Workload) -> Plan:
    """The workload as a planexec plan (arguments are whole-value references)."""
    steps = []
    for sid, deps in work.deps:
        refs = {"inputs": [f"<step_{d}>" for d in deps]} if is_join(work, sid) else (
            {"v": f"<step_{deps[0]}>"} if deps else {}
        )
        steps.append(Step(id=sid, tool="work", args=find_refs(refs), depends_on=deps))
    return Plan(steps=tuple(steps))


class CoroutineRunner:
    """A planexec runner calling the tool's coroutine directly (the framework alone)."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        coroutine = getattr(spec.tool, "coroutine")  # noqa: B009 - a StructuredTool's
        return await coroutine(**args)


Prepared = Callable[[], Awaitable[Any]]
"""A workload ready to run once (everything built beforehand)."""


def prepare_planexec(work: Workload, calls: str) -> Prepared:
    tool = make_tool(work)
    catalog = ToolCatalog([tool])
    plan = make_plan(work)
    runner = CoroutineRunner() if calls == "direct" else None

    async def run() -> Any:
        executor = Executor(catalog, config=ExecutorSettings(), runner=runner)
        results = await executor.run(plan)
        assert len(results) == work.steps and all(r.ok for r in results), results[:2]
        return results

    return run


def _merge(a: dict[int, Any], b: dict[int, Any]) -> dict[int, Any]:
    return operator.or_(a, b)


class _State(TypedDict):
    out: Annotated[dict[int, Any], _merge]


def wire_graph(
    builder: Any, deps: Iterable[tuple[int, tuple[int, ...]]], node: Callable[..., Any]
) -> None:
    """Add a node per step (``node(sid, deps)``) and its dependencies' edges to a graph.

    START comes before a step without dependencies, END after a step nothing needs.
    """
    from langgraph.graph import END, START

    steps = list(deps)
    has_dependents: set[int] = set()
    for sid, before in steps:
        builder.add_node(f"s{sid}", node(sid, before))
        has_dependents.update(before)
        if not before:
            builder.add_edge(START, f"s{sid}")
        elif len(before) == 1:
            builder.add_edge(f"s{before[0]}", f"s{sid}")
        else:
            builder.add_edge([f"s{d}" for d in before], f"s{sid}")
    for sid, _ in steps:
        if sid not in has_dependents:
            builder.add_edge(f"s{sid}", END)


def prepare_langgraph(work: Workload, calls: str) -> Prepared:
    from langgraph.graph import StateGraph

    tool = make_tool(work)
    coroutine = tool.coroutine
    assert coroutine is not None
    builder: Any = StateGraph(_State)

    def node(sid: int, deps: tuple[int, ...]) -> Callable[[_State], Awaitable[_State]]:
        join = is_join(work, sid)

        async def run(state: _State) -> _State:
            args = args_for(deps, state["out"].__getitem__, join)
            out = await (coroutine(**args) if calls == "direct" else tool.ainvoke(args))
            return {"out": {sid: out}}

        return run

    wire_graph(builder, work.deps, node)
    graph = builder.compile()
    config = {"recursion_limit": work.steps + 10}

    async def run() -> Any:
        state = await graph.ainvoke({"out": {}}, config=config)
        assert len(state["out"]) == work.steps
        return state

    return run


def prepare_asyncio(work: Workload, calls: str) -> Prepared:
    tool = make_tool(work)
    coroutine = tool.coroutine
    assert coroutine is not None

    async def run() -> Any:
        tasks: dict[int, asyncio.Task[Any]] = {}

        async def step(sid: int, deps: tuple[int, ...]) -> Any:
            outputs = {d: await tasks[d] for d in deps}
            args = args_for(deps, outputs.__getitem__, is_join(work, sid))
            return await (coroutine(**args) if calls == "direct" else tool.ainvoke(args))

        for sid, deps in work.deps:
            tasks[sid] = asyncio.create_task(step(sid, deps))
        results = await asyncio.gather(*tasks.values())
        assert len(results) == work.steps
        return results

    return run


PREPARE: dict[str, Callable[[Workload, str], Prepared]] = {
    "planexec": prepare_planexec,
    "langgraph": prepare_langgraph,
    "asyncio": prepare_asyncio,
}


@dataclass(frozen=True)
class Measure:
    """One run: CPU and wall seconds, and (when traced) peak traced memory."""

    cpu: float
    wall: float
    peak_bytes: int | None = None


def measure(prepared: Prepared, *, memory: bool = False) -> Measure:
    """Run a prepared workload once on a fresh event loop; the loop itself not counted."""

    async def timed() -> Measure:
        gc.collect()
        if memory:
            tracemalloc.start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await prepared()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        peak = None
        if memory:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return Measure(cpu=cpu, wall=wall, peak_bytes=peak)

    return asyncio.run(timed())


def summary(values: list[float], digits: int = 2) -> dict[str, float]:
    """Median, min and max."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "median": round(median, digits),
        "min": round(ordered[0], digits),
        "max": round(ordered[-1], digits),
    }
