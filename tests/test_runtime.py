"""The runtime assembles every run from the config; the library gets its timeouts,
retries, breaker and limits (the CLI's and the MCP server's are in their own tests)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig, ExecutorSettings, RetrySettings
from planexec.errors import ConfigError, ErrorKind
from planexec.events import EventBus
from planexec.executor import LocalToolRunner
from planexec.reasoning import ModelReasoner
from planexec.resilience import BreakerRegistry, ResilientModelClient, model_provider
from planexec.results import Run, StepResult, StepStatus, Usage
from planexec.runtime import Runtime
from planexec.testing import ScriptedChatModel, fake_tool
from planexec.tools import ToolCatalog

SAFE = {"read_only": True}

REASONING_PLAN = """#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: Say which site is the main one.
#Tool2: none
#Dependency2: #S1
"""

TWO_TOOLS_PLAN = """#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: List the assets of the first site.
#Tool2: assets
#Args2: {"site_name": "<step_1.sites[0]>"}
#Dependency2: #S1
"""


def tools() -> list[Any]:
    return [
        fake_tool("sites", {"sites": ["MAIN"]}, hints=SAFE),
        fake_tool("assets", {"assets": ["CH-6"]}, args={"site_name": str}, hints=SAFE),
    ]


def config(**sections: dict[str, Any]) -> AgentConfig:
    return AgentConfig.from_dict(sections)


NO_RETRY = {"attempts": 1}
QUICK_RETRY = {"attempts": 2, "base_delay": 0, "max_delay": 0, "jitter": 0}


def latest(run: Run, step_id: int) -> StepResult:
    return next(r for r in run.results if r.step_id == step_id)


# ------------------------------------------------------------------ what it assembles


def test_a_run_gets_one_client_shared_by_its_resolver_reasoner_and_executor() -> None:
    cfg = config(
        model={"timeout": 7.0, "retry": QUICK_RETRY, "stream": True},
        resolver={"output_budget": 900},
        executor={"max_concurrency": 3, "reason_budget": 500},
    )
    model = ScriptedChatModel(replies=[])
    runtime = Runtime(model, ToolCatalog(tools()), cfg)
    usage = Usage()
    run = runtime.open_run(run_id="r1", usage=usage, bus=EventBus(), question="Which site?")

    client = run.client
    assert isinstance(client, ResilientModelClient)
    assert (client.timeout, client.stream, client.usage, client.run_id) == (7.0, True, usage, "r1")
    assert client.retry == cfg.model.retry.policy()
    assert client.breaker is runtime.breakers.model(model_provider(model))
    assert run.resolver.client is client and run.resolver.output_budget == 900
    assert isinstance(run.reasoner, ModelReasoner)
    assert run.reasoner.client is client and run.reasoner.budget == 500
    assert run.reasoner.question == "Which site?"
    ex = run.executor
    assert ex.resolver is run.resolver and ex.reasoner is run.reasoner
    assert ex.config is cfg.executor and ex.usage is usage and ex.run_id == "r1"
    assert ex.breakers is runtime.breakers and ex.runner is runtime.runner
    assert ex.guard is not None


def test_without_a_model_a_run_has_no_client_and_no_reasoner() -> None:
    runtime = Runtime(None, ToolCatalog(tools()))
    run = runtime.open_run(run_id="r1", usage=Usage(), bus=EventBus())
    assert run.client is None and run.reasoner is None and run.resolver.client is None
    assert isinstance(runtime.runner, LocalToolRunner)


def test_the_breakers_come_from_the_model_settings_unless_given() -> None:
    cfg = config(model={"breaker_failure_threshold": 2, "breaker_recovery_time": 9.0})
    own = Runtime(None, ToolCatalog(tools()), cfg).breakers
    assert (own.failure_threshold, own.recovery_time) == (2, 9.0)
    given = BreakerRegistry()
    assert Runtime(None, ToolCatalog(tools()), cfg, breakers=given).breakers is given


def test_a_config_naming_a_tool_the_catalog_lacks_is_rejected_when_the_runtime_is_built() -> None:
    cfg = config(limits={"per_tool_limits": {"site": 2}}, executor={"tool_timeouts": {"x": 1}})
    with pytest.raises(ConfigError) as err:
        Runtime(None, ToolCatalog(tools()), cfg)
    assert "limits.per_tool_limits['site']" in str(err.value) and "'sites'" in str(err.value)
    assert "executor.tool_timeouts['x']" in str(err.value)


def test_retry_settings_build_their_policy_once() -> None:
    settings = RetrySettings(attempts=4, base_delay=0.5)
    policy = settings.policy()
    assert policy is settings.policy() is RetrySettings(attempts=4, base_delay=0.5).policy()
    assert (policy.attempts, policy.base_delay, policy.jitter) == (4, 0.5, settings.jitter)


def test_a_tool_timeout_is_found_by_qualified_name_then_name_then_the_default() -> None:
    spec = ToolCatalog([fake_tool("history", [1], hints={"server": "iot"})]).get("history")
    assert ExecutorSettings(tool_timeout=3).timeout_for(spec) == 3
    assert ExecutorSettings(tool_timeout=3, tool_timeouts={"history": 2}).timeout_for(spec) == 2
    both = ExecutorSettings(tool_timeouts={"history": 2, "iot.history": 1})
    assert both.timeout_for(spec) == 1


def test_the_executor_module_imports_no_model_code() -> None:
    package = Path(__file__).resolve().parents[1] / "planexec" / "executor"
    imported: set[str] = set()
    sources = sorted(package.glob("*.py"))
    assert len(sources) > 1  # the package's modules, each read
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert not {m for m in imported if m.startswith("langchain_core")}
    assert "planexec._models" not in imported and "planexec.reasoning" not in imported


@pytest.mark.parametrize(("retry", "calls"), [(True, 3), (False, 1)])
async def test_retry_error_payloads_in_the_config_decides_whether_a_payload_is_retried(
    retry: bool, calls: int
) -> None:
    sites = fake_tool("sites", {"error": "unknown site"}, hints=SAFE)
    cfg = config(
        executor={
            "retry_error_payloads": retry,
            "tool_retry": {"attempts": 3, "base_delay": 0, "max_delay": 0, "jitter": 0},
        },
        recovery={"max_retries_per_step": 0},
    )
    agent = PlanExecuteAgent(None, [sites], config=cfg)
    run = await agent.execute_plan("#Task1: sites\n#Tool1: sites\n#Args1: {}\n")
    assert latest(run, 1).error_kind is ErrorKind.TOOL_ERROR
    assert len(sites.metadata["calls"].calls) == calls  # type: ignore[index]


# ------------------------------------------------------------------ the library


@pytest.mark.timeout(60)
async def test_the_library_gives_up_on_a_hanging_model_after_the_configured_timeout() -> None:
    model = ScriptedChatModel(replies=["never sent"], delay=3600)  # hangs on every call
    cfg = config(model={"timeout": 0.2, "retry": NO_RETRY}, recovery={"max_retries_per_step": 0})
    agent = PlanExecuteAgent(model, tools(), config=cfg)
    async with asyncio.timeout(30):
        run = await agent.execute_plan(REASONING_PLAN)
    assert latest(run, 1).status is StepStatus.SUCCEEDED
    assert latest(run, 2).status is StepStatus.FAILED
    assert latest(run, 2).error_kind is ErrorKind.MODEL_ERROR


async def test_the_library_retries_a_transient_model_error_and_counts_both_calls() -> None:
    model = ScriptedChatModel(
        replies=[ConnectionError("connection reset"), "MAIN is the main site.", "MAIN."]
    )
    agent = PlanExecuteAgent(model, tools(), config=config(model={"retry": QUICK_RETRY}))
    run = await agent.execute_plan(REASONING_PLAN)
    assert latest(run, 2).ok and latest(run, 2).output == "MAIN is the main site."
    assert run.usage.llm_calls["reason"] == 2


async def test_the_library_stops_a_plan_at_the_step_limit() -> None:
    agent = PlanExecuteAgent(None, tools(), config=config(limits={"max_steps": 1}))
    run = await agent.execute_plan(TWO_TOOLS_PLAN)
    assert latest(run, 1).ok
    assert latest(run, 2).error_kind is ErrorKind.LIMIT_EXCEEDED
    assert run.error_kind is ErrorKind.LIMIT_EXCEEDED


async def test_the_library_shares_the_model_breaker_between_runs_of_an_agent() -> None:
    model = ScriptedChatModel(replies=[ValueError("provider down")], repeat_last=True)
    cfg = config(model={"retry": NO_RETRY, "breaker_failure_threshold": 1})
    agent = PlanExecuteAgent(model, tools(), config=cfg)
    first = await agent.execute_plan(REASONING_PLAN)
    assert ErrorKind.MODEL_ERROR in {r.error_kind for a in first.attempts for r in a.results}
    second = await agent.execute_plan(REASONING_PLAN)
    assert latest(second, 2).error_kind is ErrorKind.CIRCUIT_OPEN
    assert model.calls == 1  # every later call met the open breaker
    states = {n: s for n, s in agent.breakers.states().items() if n.startswith("model:")}
    assert list(states.values()) == ["open"]
