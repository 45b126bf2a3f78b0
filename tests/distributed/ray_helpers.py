"""Tools and agent factories for the Ray tests.

This module is importable inside Ray workers (the test session puts its directory on
the workers' PYTHONPATH), so factories named ``ray_helpers:...`` resolve there. State
that must survive a worker (call counts, "started" markers) lives in files.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import RetryableToolError
from planexec.testing import ScriptedChatModel, fake_tool

HERE = Path(__file__).resolve().parent
READ = {"read_only": True}
WRITE = {"destructive": True}
WAIT_LIMIT = 60.0
"""Seconds a blocking tool waits for its release file, at most."""


def worker_env() -> dict[str, str]:
    """The environment Ray processes started by the tests need (this folder importable)."""
    paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), "RAY_AUTH_MODE": "disabled"}


def plan_text(*steps: tuple[int, str, str, str]) -> str:
    out = []
    for sid, tool, args, deps in steps:
        out.append(
            f"#Task{sid}: do {tool}\n#Tool{sid}: {tool}\n#Args{sid}: {args}\n"
            f"#Dependency{sid}: {deps}\n#ExpectedOutput{sid}: something\n"
        )
    return "\n".join(out)


def count_call(directory: str, name: str) -> int:
    """Append one line to ``<directory>/<name>.calls``; return the number of calls so far."""
    path = Path(directory) / f"{name}.calls"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")
    return len(path.read_text(encoding="utf-8").splitlines())


def calls_of(directory: str | Path, name: str) -> int:
    path = Path(directory) / f"{name}.calls"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def wait_for(path: Path, limit: float = WAIT_LIMIT) -> bool:
    """Wait until ``path`` exists (polling), at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- tools for the executor tests -----------------------------------------------------------


def where_tool() -> BaseTool:
    """Returns the process id and Ray node it ran in, and the resources it was given."""

    def where() -> dict[str, Any]:
        info: dict[str, Any] = {"pid": os.getpid()}
        try:
            import ray

            if ray.is_initialized():
                ctx = ray.get_runtime_context()
                info["node"] = ctx.get_node_id()
                try:
                    info["resources"] = dict(ctx.get_assigned_resources())
                except AssertionError:  # the driver, not a worker: no task resources
                    pass
        except ImportError:  # pragma: no cover - Ray tests skip without Ray
            pass
        return info

    return StructuredTool.from_function(
        func=where, name="where", description="Where am I?",
        metadata={"planexec": {"read_only": True, "ray": {"num_cpus": 0.5}}},
    )


def flaky_tool(directory: str, fail_times: int) -> BaseTool:
    """A read-only tool that fails its first ``fail_times`` calls (counted in a file)."""

    def flaky(x: int) -> dict[str, Any]:
        n = count_call(directory, "flaky")
        if n <= fail_times:
            raise RetryableToolError(f"flaky failure {n}")  # transient: retried
        return {"x": x, "call": n}

    return StructuredTool.from_function(
        func=flaky, name="flaky", description="Flaky.", metadata={"planexec": READ}
    )


def crash_once_tool(directory: str, hints: dict[str, bool]) -> BaseTool:
    """Kills its worker process on the first call (counted in a file), then answers."""

    def crashy() -> dict[str, Any]:
        if count_call(directory, "crashy") == 1:
            os._exit(1)
        return {"ok": True}

    return StructuredTool.from_function(
        func=crashy, name="crashy", description="Crashes once.", metadata={"planexec": hints}
    )


def unpicklable_tools() -> list[BaseTool]:
    """Tools holding a lock (which does not pickle): only a factory spec ships them."""
    lock = threading.Lock()

    def locked(word: str) -> dict[str, Any]:
        with lock:
            return {"word": word.upper(), "pid": os.getpid()}

    return [
        StructuredTool.from_function(
            func=locked, name="locked", description="Needs a lock.",
            metadata={"planexec": READ},
        )
    ]


def big_tools(size: int) -> list[BaseTool]:
    """``produce`` returns a large dict; ``consume`` takes it whole and sizes it."""

    def produce() -> dict[str, Any]:
        return {"rows": list(range(size)), "pid": os.getpid()}

    def consume(table: dict[str, Any]) -> dict[str, Any]:
        return {"n": len(table["rows"]), "pid": os.getpid()}

    return [
        StructuredTool.from_function(
            func=produce, name="produce", description="Make a table.",
            metadata={"planexec": READ},
        ),
        StructuredTool.from_function(
            func=consume, name="consume", description="Size a table.",
            metadata={"planexec": READ},
        ),
    ]


def counter_tools(hints: dict[str, Any] | None = None) -> list[BaseTool]:
    """``count`` returns how often it was called; ``note``/``notes`` share one list.

    All their state is in-process (closures), as in most real tools: it survives between
    calls only if the calls reach the same tool objects.
    """
    calls = {"n": 0}
    notes: list[str] = []

    def count() -> dict[str, Any]:
        calls["n"] += 1
        return {"n": calls["n"], "pid": os.getpid()}

    def note(text: str) -> dict[str, Any]:
        notes.append(text)
        return {"noted": text}

    def read_notes() -> dict[str, Any]:
        return {"notes": list(notes), "pid": os.getpid()}

    meta = {"planexec": dict(hints or READ)}
    return [
        StructuredTool.from_function(func=count, name="count", description="Count.",
                                     metadata=meta),
        StructuredTool.from_function(func=note, name="note", description="Note.",
                                     metadata=meta),
        StructuredTool.from_function(func=read_notes, name="notes", description="Notes.",
                                     metadata=meta),
    ]


# -- agents for run_many --------------------------------------------------------------------

QUICK = AgentConfig.from_dict(
    {
        "planner": {"max_reprompts": 0},
        "executor": {"tool_retry": {"attempts": 1}},
        "model": {"retry": {"attempts": 1}},
        "recovery": {"max_replans": 0, "max_retries_per_step": 0},
    }
)


def demo_agent() -> PlanExecuteAgent:
    """Two read-only steps and an answer, with a scripted model."""
    tools = [
        fake_tool("sites", ["MAIN", "WEST"], hints=READ),
        fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str}, hints=READ),
    ]
    model = ScriptedChatModel(
        replies=[
            plan_text(
                (1, "sites", "{}", "None"),
                (2, "assets", '{"site_name": "<step_1[0]>"}', "#S1"),
            ),
            "MAIN has chiller CH-6.",
        ]
    )
    return PlanExecuteAgent(model, tools, config=QUICK)


def failing_factory() -> PlanExecuteAgent:
    """A factory that cannot build its agent."""
    raise ValueError("no agent for you")


def crash_agent(directory: str, safe: bool) -> PlanExecuteAgent:
    """An agent whose one tool kills its worker on the first call."""
    tool = crash_once_tool(directory, READ if safe else WRITE)
    model = ScriptedChatModel(replies=[plan_text((1, "crashy", "{}", "None")), "done"])
    return PlanExecuteAgent(model, [tool], config=QUICK)


def blocking_tool(directory: str, name: str, hints: dict[str, bool]) -> BaseTool:
    """On its first call: writes ``<name>.started`` (with its node) and blocks.

    It blocks until ``<name>.release`` exists (at most `WAIT_LIMIT` seconds). Later calls
    answer at once. Used to hold a run on a node while the test removes the node.
    """

    def block() -> dict[str, Any]:
        n = count_call(directory, name)
        if n == 1:
            import ray

            node = ray.get_runtime_context().get_node_id()
            tmp = Path(directory) / f"{name}.started.tmp"
            tmp.write_text(json.dumps({"node": node, "pid": os.getpid()}), encoding="utf-8")
            tmp.rename(Path(directory) / f"{name}.started")
            wait_for(Path(directory) / f"{name}.release")
        return {"tool": name, "call": n}

    return StructuredTool.from_function(
        func=block, name=name, description="Blocks once.", metadata={"planexec": hints}
    )


def blocking_agent(directory: str, name: str, safe: bool) -> PlanExecuteAgent:
    tool = blocking_tool(directory, name, READ if safe else WRITE)
    model = ScriptedChatModel(replies=[plan_text((1, name, "{}", "None")), "done"])
    return PlanExecuteAgent(model, [tool], config=QUICK)


async def sleepy_job(payload: Any, ctx: Any) -> dict[str, Any]:
    """A plain job for run_jobs: declares no unsafe tools and sleeps."""
    await ctx.declare(unsafe_tools=[])
    await asyncio.sleep(float(payload))
    return {"slept": payload, "run_id": ctx.run_id}
