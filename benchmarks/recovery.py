"""Recovery benchmark: scripted scenarios with injected failures, three systems, one harness.

Systems (same agent, same scripted model and tools; only the recovery settings differ):

- ``planexec``: the default recovery (planner re-prompts, re-resolution, retries of
  safe tools inside the step and by the agent, re-plans that keep succeeded steps,
  model retries with backoff);
- ``no_recovery``: every failure stops the run; no planner re-prompts;
- ``replan_always``: every failure re-plans (same re-plan budget); no planner re-prompts.

All three keep the same resilience layer: model retries (``model.retry``) and retries of
safe tools inside a step (``executor.tool_retry``), so the comparison isolates the
recovery policy and re-planning.

Scenarios: a hallucinated tool name, wrong argument names, read-only tools failing at
random (10/30/50% per call, seeded RNG), and a slow model whose first call of each run
exceeds the model timeout.

Usage::

    python benchmarks/recovery.py            # writes benchmarks/results/recovery.json
    python benchmarks/recovery.py --traces   # prints the three traces of docs/recovery.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, model_validator

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ErrorKind
from planexec.events import (
    Event,
    FallbackUsed,
    LLMCalled,
    PlanCreated,
    RecoveryDecided,
    RunFinished,
    StepFinished,
    ToolCallStarted,
)
from planexec.results import Run, RunStatus
from planexec.testing import FunctionModel, ModelCall, fake_tool

RESULTS = Path(__file__).parent / "results" / "recovery.json"
READ = {"read_only": True}
FAST_RETRY = {"base_delay": 0.005, "max_delay": 0.02, "jitter": 0.005}


def step(sid: int, tool: str, args: str, deps: str) -> str:
    return (
        f"#Task{sid}: call {tool}\n#Tool{sid}: {tool}\n#Args{sid}: {args}\n"
        f"#Dependency{sid}: {deps}\n#ExpectedOutput{sid}: the {tool} result\n"
    )


GOOD_PLAN = "\n".join(
    [
        step(1, "sites", "{}", "None"),
        step(2, "assets", '{"site_name": "<step_1[0]>"}', "#S1"),
        step(3, "sensors", '{"asset_id": "<step_2[0].id>"}', "#S2"),
        step(4, "history", '{"sensor": "<step_3[0]>", "start": "2024-01-01"}', "#S3"),
    ]
)
HALLUCINATED_PLAN = GOOD_PLAN.replace("#Tool2: assets", "#Tool2: list_assets")
WRONG_ARGS_PLAN = GOOD_PLAN.replace('{"site_name": "<step_1[0]>"}', '{"site": "<step_1[0]>"}')
EXPECTED = [{"t": "2024-01-01", "v": 7.5}]


class Router:
    """The scripted model: replies by the purpose each call says it has."""

    def __init__(self, first_plan: str, *, slow_first: float = 0.0) -> None:
        self.first_plan = first_plan
        self.plan_calls = 0
        self.slow_first = slow_first
        self.calls = 0

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> str:
        self.calls += 1
        if call.purpose == "plan":
            self.plan_calls += 1
            # a planner that writes its first plan with the injected fault and fixes it
            # once it is shown feedback (a re-prompt or a re-plan)
            return self.first_plan if self.plan_calls == 1 else GOOD_PLAN
        if call.purpose == "resolve":
            return json.dumps({k: "MAIN" for k in call.keys if k == "site_name"})
        return "Sensor T-1 of CH-6 at MAIN read 7.5 on 2024-01-01."


class SlowModel(FunctionModel):
    """A function model whose first call sleeps (to exceed the model timeout)."""

    slow_first: float = 0.0

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> Any:
        if self.slow_first and self.calls == 0:
            self._requests.append(list(messages))
            await asyncio.sleep(self.slow_first)
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


def make_tools(rng: random.Random, fail_rate: float) -> list[Any]:
    def flaky(name: str, value: Callable[..., Any]) -> Callable[..., Any]:
        def fn(**kwargs: Any) -> Any:
            if rng.random() < fail_rate:
                raise RuntimeError(f"{name}: 503 service unavailable")
            return value(**kwargs)

        return fn

    return [
        fake_tool("sites", function=flaky("sites", lambda: ["MAIN", "WEST"]), hints=READ),
        fake_tool(
            "assets",
            args={"site_name": str},
            function=flaky("assets", lambda site_name: [{"id": f"CH-6@{site_name}"}]),
            hints=READ,
        ),
        fake_tool(
            "sensors",
            args={"asset_id": str},
            function=flaky("sensors", lambda asset_id: ["T-1", "T-2"]),
            hints=READ,
        ),
        fake_tool(
            "history",
            args={"sensor": str, "start": str},
            function=flaky("history", lambda sensor, start: EXPECTED),
            hints=READ,
        ),
    ]


def system_config(system: str, *, model_timeout: float) -> AgentConfig:
    base: dict[str, Any] = {"model": {"timeout": model_timeout, "retry": dict(FAST_RETRY)}}
    base["executor"] = {"tool_retry": dict(FAST_RETRY)}
    if system == "planexec":
        return AgentConfig.from_dict(base)
    action = "STOP" if system == "no_recovery" else "REPLAN"
    policy = {k.value: action for k in ErrorKind if k is not ErrorKind.CANCELLED}
    base["planner"] = {"max_reprompts": 0}
    base["recovery"] = {"policy": policy}
    # Model and tool retries stay as planexec's: only the policy and re-prompts differ.
    return AgentConfig.from_dict(base)


async def one_run(
    system: str, first_plan: str, fail_rate: float, seed: int, slow: float
) -> dict[str, Any]:
    rng = random.Random(seed)
    router = Router(first_plan)
    model = SlowModel(function=router, slow_first=slow)
    agent = PlanExecuteAgent(
        model, make_tools(rng, fail_rate), config=system_config(system, model_timeout=0.1)
    )
    t0 = time.perf_counter()
    run = await agent.run("What did the first sensor of the first site's asset read?")
    ok = run.status is RunStatus.SUCCEEDED and any(
        r.tool == "history" and r.ok and r.output == EXPECTED for r in run.results
    )
    return {
        "ok": ok,
        "llm_calls": run.usage.total_llm_calls,
        "tool_calls": run.usage.tool_calls,
        "plans": len(run.attempts),
        "wall": time.perf_counter() - t0,
        "error_kind": str(run.error_kind) if run.error_kind else None,
    }


SCENARIOS: dict[str, dict[str, Any]] = {
    "hallucinated_tool": {"plan": HALLUCINATED_PLAN, "fail": 0.0, "slow": 0.0, "runs": 10},
    "wrong_argument_names": {"plan": WRONG_ARGS_PLAN, "fail": 0.0, "slow": 0.0, "runs": 10},
    "flaky_10": {"plan": GOOD_PLAN, "fail": 0.1, "slow": 0.0, "runs": 100},
    "flaky_30": {"plan": GOOD_PLAN, "fail": 0.3, "slow": 0.0, "runs": 100},
    "flaky_50": {"plan": GOOD_PLAN, "fail": 0.5, "slow": 0.0, "runs": 100},
    "slow_model": {"plan": GOOD_PLAN, "fail": 0.0, "slow": 0.3, "runs": 5},
}
SYSTEMS = ("planexec", "no_recovery", "replan_always")


async def benchmark() -> dict[str, Any]:
    from loguru import logger

    logger.remove()
    out: dict[str, Any] = {"systems": list(SYSTEMS), "scenarios": {}}
    for name, sc in SCENARIOS.items():
        row: dict[str, Any] = {}
        for system in SYSTEMS:
            runs = [
                await one_run(system, sc["plan"], sc["fail"], seed, sc["slow"])
                for seed in range(sc["runs"])
            ]
            row[system] = {
                "runs": len(runs),
                "success_rate": round(sum(r["ok"] for r in runs) / len(runs), 3),
                "llm_calls_per_run": round(statistics.mean(r["llm_calls"] for r in runs), 2),
                "tool_calls_per_run": round(statistics.mean(r["tool_calls"] for r in runs), 2),
                "plans_per_run": round(statistics.mean(r["plans"] for r in runs), 2),
                "wall_ms_per_run": round(1000 * statistics.mean(r["wall"] for r in runs), 1),
                "failures": sorted({r["error_kind"] for r in runs if r["error_kind"]}),
            }
        out["scenarios"][name] = row
        print(name, json.dumps(row), file=sys.stderr)
    return out


# ---------------------------------------------------------------------- traces


def tracer(lines: list[str]) -> Callable[[Event], None]:
    def on(e: Event) -> None:
        if isinstance(e, PlanCreated):
            n = len(e.plan.steps) if e.plan else 0
            tools = ", ".join(f"{s.id}:{s.tool}" for s in e.plan.steps) if e.plan else ""
            lines.append(f"PlanCreated v{e.version} ({n} steps: {tools})")
        elif isinstance(e, ToolCallStarted):
            lines.append(f"  ToolCallStarted step {e.step_id} {e.tool}({json.dumps(e.args)}) "
                         f"attempt {e.attempt}")
        elif isinstance(e, StepFinished):
            r = e.result
            what = f" {r.error_kind}: {r.error}" if r.error else f" → {json.dumps(r.output)}"
            note = " (reused)" if r.reused else ""
            lines.append(f"  StepFinished step {r.step_id} {r.status.value}{note}{what}")
        elif isinstance(e, RecoveryDecided):
            lines.append(f"RecoveryDecided {e.action}: {e.reason}")
        elif isinstance(e, FallbackUsed):
            lines.append(f"  FallbackUsed {e.code}: {e.message}")
        elif isinstance(e, LLMCalled):
            lines.append(f"  LLMCalled {e.purpose}" + (f" step {e.step_id}" if e.step_id else ""))
        elif isinstance(e, RunFinished):
            lines.append(f"RunFinished {e.status}")

    return on


def usage_line(run: Run) -> str:
    return (f"usage: llm_calls={run.usage.llm_calls} tool_calls={run.usage.tool_calls} "
            f"plans={len(run.attempts)}")


async def trace_hallucinated() -> str:
    lines: list[str] = []
    first = "\n".join([step(1, "sites", "{}", "None"),
                       step(2, "list_assets", '{"site_name": "<step_1[0]>"}', "#S1")])
    second = step(3, "assets", '{"site_name": "<step_1[0]>"}', "#S1")
    replies = iter([first, second])

    def fn(call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "plan":
            return next(replies)
        return "CH-6@MAIN is the asset at MAIN."

    tools = make_tools(random.Random(0), 0.0)
    cfg = AgentConfig.from_dict({"planner": {"max_reprompts": 0}})
    agent = PlanExecuteAgent(FunctionModel(function=fn), tools[:2], config=cfg,
                             event_handlers=[tracer(lines)])
    run = await agent.run("Which asset is at the first site?")
    return "\n".join([*lines, usage_line(run)])


class HistoryArgs(BaseModel):
    sensor: str
    start: str
    final: str

    @model_validator(mode="after")
    def _order(self) -> HistoryArgs:
        if self.final < self.start:
            raise ValueError(f"final ({self.final}) must not be before start ({self.start})")
        return self


async def trace_reresolve() -> str:
    lines: list[str] = []
    plan = "\n".join([
        step(1, "sensors", '{"asset_id": "CH-6"}', "None"),
        step(2, "history", '{"sensor": "<step_1.names[0]>", "start": "2024-01-01", '
             '"final": "<step_1.since>"}', "#S1"),
    ])

    def fn(call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "plan":
            return plan
        if call.purpose == "resolve":  # asked only for the values taken from references
            return json.dumps({"sensor": "T-1", "final": "2024-02-01"} | {
                k: "?" for k in call.keys if k not in ("sensor", "final")})
        return "T-1 read 7.5 on 2024-01-01."

    tools = [
        fake_tool("sensors", {"names": ["T-1", "T-2"], "since": "2023-12-01"},
                  args={"asset_id": str}, hints=READ),
        fake_tool("history", EXPECTED, args=HistoryArgs, hints=READ),
    ]
    agent = PlanExecuteAgent(FunctionModel(function=fn), tools,
                             event_handlers=[tracer(lines)])
    run = await agent.run("What did the first sensor of CH-6 read in January?")
    return "\n".join([*lines, usage_line(run)])


async def trace_retry() -> str:
    lines: list[str] = []
    plan = "\n".join([
        step(1, "sites", "{}", "None"),
        step(2, "assets", '{"site_name": "<step_1[0]>"}', "#S1"),
    ])

    def fn(call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "plan":
            return plan
        return "CH-6 is at MAIN."

    tools = [
        fake_tool("sites", ["MAIN"], hints=READ),
        fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str},
                  error="503 service unavailable", fail_times=3, hints=READ),
    ]
    cfg = AgentConfig.from_dict({"executor": {"tool_retry": dict(FAST_RETRY)}})
    agent = PlanExecuteAgent(FunctionModel(function=fn), tools, config=cfg,
                             event_handlers=[tracer(lines)])
    run = await agent.run("Which asset is at the first site?")
    return "\n".join([*lines, usage_line(run)])


async def traces() -> None:
    from loguru import logger

    logger.remove()
    for title, fn in (("hallucinated tool → re-plan", trace_hallucinated),
                      ("bad arguments → re-resolution", trace_reresolve),
                      ("flaky read-only tool → retries in the step, then a re-plan", trace_retry)):
        print(f"### {title}\n```\n{await fn()}\n```\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", action="store_true", help="print the docs' traces")
    args = parser.parse_args()
    if args.traces:
        asyncio.run(traces())
        return
    data = asyncio.run(benchmark())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
