from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.tools import BaseTool

from planexec._models import ModelClient
from planexec.config import ExecutorSettings, RetrySettings
from planexec.errors import ErrorKind
from planexec.events import (
    ArgResolved,
    Event,
    EventBus,
    FallbackUsed,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.executor import Executor, LocalToolRunner
from planexec.parsing import parse_plan
from planexec.parsing.refs import contains_placeholder, find_refs
from planexec.plan import Plan, Ref, Step, Template, format_path
from planexec.reasoning import ModelReasoner
from planexec.resilience import BreakerRegistry
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, Usage
from planexec.testing import FunctionChatModel, ScriptedChatModel, fake_tool, messages_text
from planexec.tools import ToolCatalog, ToolSpec

FAST = RetrySettings(attempts=3, base_delay=0.0, max_delay=0.0, jitter=0.0)
SAFE = {"read_only": True}


def mk(
    sid: int,
    tool: str | None = None,
    args: dict[str, Any] | None = None,
    deps: tuple[int, ...] = (),
    **kw: Any,
) -> Step:
    """A step whose reference strings (``<step_1.x>``) become real `Ref`s."""
    parsed = find_refs(args or {})
    step = Step(id=sid, tool=tool, args=parsed, explicit_deps=tuple(sorted(deps)), **kw)
    depends = sorted(set(deps) | {r.step for r in step.refs})
    return Step(
        id=sid,
        tool=tool,
        args=parsed,
        explicit_deps=tuple(sorted(deps)),
        depends_on=tuple(depends),
        **kw,
    )


def calls(tool: BaseTool) -> list[dict[str, Any]]:
    return list(tool.metadata["calls"].calls)  # type: ignore[index]


class Harness:
    def __init__(self, tools: list[BaseTool], **kwargs: Any) -> None:
        self.events: list[Event] = []
        self.bus = EventBus([self.events.append])
        self.usage = kwargs.pop("usage", None) or Usage()
        config = kwargs.pop("config", None) or ExecutorSettings(tool_retry=FAST)
        self.executor = Executor(
            ToolCatalog(tools),
            config=config,
            bus=self.bus,
            usage=self.usage,
            run_id="run-1",
            **kwargs,
        )

    async def run(self, *steps: Step, **kwargs: Any) -> dict[int, StepResult]:
        results = await self.executor.run(Plan(steps=tuple(steps)), **kwargs)
        return {r.step_id: r for r in results}

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def assert_failed(r: StepResult, kind: ErrorKind, *words: str, status: StepStatus | None = None):
    assert r.status is (status or StepStatus.FAILED), r
    assert r.error_kind is kind, r.error
    assert r.error is not None
    assert f"step {r.step_id}" in r.error
    for w in words:
        assert w in r.error, (w, r.error)


# -- scheduling ----------------------------------------------------------------------


async def test_independent_steps_run_at_once_and_a_dependent_waits_for_all_of_them() -> None:
    started: list[str] = []
    all_started = asyncio.Event()
    finished: list[str] = []

    def make(name: str) -> BaseTool:
        async def fn() -> dict[str, str]:
            started.append(name)
            if len(started) == 3:
                all_started.set()
            # only returns once all three are in flight: proves they run concurrently
            await asyncio.wait_for(all_started.wait(), 2)
            finished.append(name)
            return {"name": name}

        return fake_tool(name, function=fn)

    def join_fn(a: str, b: str, c: str) -> str:
        assert sorted(finished) == ["a", "b", "c"]
        return f"{a}{b}{c}"

    join = fake_tool("join", function=join_fn, args={"a": str, "b": str, "c": str})
    h = Harness([make("a"), make("b"), make("c"), join])
    res = await h.run(
        mk(1, "a"),
        mk(2, "b"),
        mk(3, "c"),
        mk(4, "join", {"a": "<step_1.name>", "b": "<step_2.name>", "c": "<step_3.name>"}),
    )
    assert all(r.ok for r in res.values())
    assert res[4].output == "abc"


async def test_max_concurrency_bounds_the_steps_running_at_once() -> None:
    in_flight = 0
    peak = 0

    async def fn() -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        for _ in range(5):
            await asyncio.sleep(0)
        in_flight -= 1
        return "ok"

    tool = fake_tool("work", function=fn)
    h = Harness([tool], config=ExecutorSettings(max_concurrency=3))
    res = await h.run(*(mk(i, "work") for i in range(1, 11)))
    assert len(res) == 10 and all(r.ok for r in res.values())
    assert peak == 3


async def test_tool_concurrency_bounds_one_tools_calls_and_not_the_others() -> None:
    in_flight: dict[str, int] = {"heavy": 0, "light": 0}
    peak: dict[str, int] = {"heavy": 0, "light": 0}

    def counted(name: str) -> Any:
        async def fn() -> str:
            in_flight[name] += 1
            peak[name] = max(peak[name], in_flight[name])
            for _ in range(5):
                await asyncio.sleep(0)
            in_flight[name] -= 1
            return "ok"

        return fn

    heavy = fake_tool("heavy", function=counted("heavy"))
    light = fake_tool("light", function=counted("light"))
    h = Harness([heavy, light], config=ExecutorSettings(tool_concurrency={"heavy": 2}))
    steps = [mk(i, "heavy" if i % 2 else "light") for i in range(1, 21)]
    res = await h.run(*steps)
    assert len(res) == 20 and all(r.ok for r in res.values())
    assert peak == {"heavy": 2, "light": 10}
    # a second run gets slots of its own
    assert all(r.ok for r in (await h.run(*steps)).values())


def test_the_default_concurrency_starts_a_wide_fan_out_in_one_wave() -> None:
    assert ExecutorSettings().max_concurrency >= 1000
    assert ExecutorSettings().concurrency_for(ToolCatalog([fake_tool("t", 1)]).get("t")) is None


async def test_step_finished_is_handled_by_subscribers_before_a_dependent_step_starts() -> None:
    log: list[str] = []

    async def slow_store(event: Event) -> None:
        if isinstance(event, StepFinished):
            await asyncio.sleep(0.01)
            log.append(f"stored {event.result.step_id}")

    first = fake_tool("first", {"v": 1})
    second = fake_tool(
        "second", function=lambda v: log.append("called second") or "ok", args={"v": int}
    )
    h = Harness([first, second])
    h.bus.subscribe(slow_store)
    await h.run(mk(1, "first"), mk(2, "second", {"v": "<step_1.v>"}))
    assert log == ["stored 1", "called second", "stored 2"]


async def test_events_of_a_step_come_in_order_with_the_run_id() -> None:
    h = Harness([fake_tool("sites", ["MAIN"])])
    await h.run(mk(1, "sites"))
    kinds = [type(e).__name__ for e in h.events if e.type != "ArgResolved"]
    assert kinds == ["StepStarted", "ToolCallStarted", "StepFinished"]
    assert {e.run_id for e in h.events} == {"run-1"}


async def test_a_dependency_cycle_fails_its_steps_instead_of_hanging() -> None:
    tool = fake_tool("t", "x", args={"v": (str, None)})
    h = Harness([tool])
    res = await h.run(mk(1, "t", {"v": "<step_2>"}), mk(2, "t", {"v": "<step_1>"}), mk(3, "t"))
    assert res[3].ok
    assert_failed(res[1], ErrorKind.MISSING_REFERENCE, "cycle", "step 2")
    assert_failed(res[2], ErrorKind.MISSING_REFERENCE, "cycle", "step 1")
    assert len(calls(tool)) == 1  # only step 3


# -- results and resolution ----------------------------------------------------------


async def test_a_succeeded_step_fills_every_result_field() -> None:
    sites = fake_tool("sites", json.dumps({"sites": [{"name": "MAIN", "id": 7}]}), hints=SAFE)
    assets = fake_tool(
        "assets",
        function=lambda site, site_id, label: {"assets": ["CH-6"]},
        args={"site": dict, "site_id": int, "label": str},
    )
    h = Harness([sites, assets])
    res = await h.run(
        mk(1, "sites"),
        mk(
            2,
            "assets",
            {
                "site": "<step_1.sites[0]>",
                "site_id": "{step_1.sites[0].id}",
                "label": "site <step_1.sites[0].name>!",
            },
        ),
    )
    one, two = res[1], res[2]
    assert one.output == {"sites": [{"name": "MAIN", "id": 7}]}
    assert isinstance(one.raw_output, str) and json.loads(one.raw_output) == one.output
    assert calls(assets) == [
        {"site": {"name": "MAIN", "id": 7}, "site_id": 7, "label": "site MAIN!"}
    ]
    assert two.args == {"site": {"name": "MAIN", "id": 7}, "site_id": 7, "label": "site MAIN!"}
    assert two.resolution == {
        "site": ResolutionMethod.PATH,
        "site_id": ResolutionMethod.PATH,
        "label": ResolutionMethod.INTERPOLATED,
    }
    assert two.status is StepStatus.SUCCEEDED and two.error is None and two.error_kind is None
    assert two.attempts == 1 and two.llm_calls == 0 and two.tool == "assets"
    assert two.started_at is not None and two.duration is not None and two.duration >= 0
    assert h.usage.tool_calls == 2
    assert len(h.of(ArgResolved)) == 3


async def test_results_come_back_in_completion_order_for_a_parsed_plan() -> None:
    text = (
        "#Step1: list sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
        '#Step2: assets\n#Tool2: assets\n#Args2: {"site": "{step_1[0]}"}\n'
        "#Dependency2: #S1\n"
    )
    assets = fake_tool("assets", ["CH-6"], args={"site": str})
    h = Harness([fake_tool("sites", ["MAIN"]), assets])
    results = await h.executor.run(parse_plan(text))
    assert [r.step_id for r in results] == [1, 2]
    assert calls(assets) == [{"site": "MAIN"}]


async def test_the_llm_fallback_resolves_a_hinted_reference_and_is_counted() -> None:
    model = ScriptedChatModel(replies=['{"site": "MAIN"}'])
    assets = fake_tool("assets", ["CH-6"], args={"site": str})
    usage = Usage()  # the resolver's client counts its calls where the run counts
    resolver = ArgResolver(ModelClient(model, usage=usage))
    h = Harness([fake_tool("sites", ["MAIN", "WEST"]), assets], resolver=resolver, usage=usage)
    res = await h.run(mk(1, "sites"), mk(2, "assets", {"site": "{step_1_selected_site}"}))
    assert res[2].ok and res[2].llm_calls == 1
    assert res[2].resolution == {"site": ResolutionMethod.LLM}
    assert calls(assets) == [{"site": "MAIN"}]
    assert h.usage.llm_calls == {"resolve": 1}


async def test_without_a_model_a_hinted_reference_fails_naming_step_and_argument() -> None:
    assets = fake_tool("assets", ["CH-6"], args={"site": str})
    h = Harness([fake_tool("sites", ["MAIN"]), assets])
    res = await h.run(mk(1, "sites"), mk(2, "assets", {"site": "{step_1_selected_site}"}))
    assert_failed(res[2], ErrorKind.RESOLUTION_FAILED, "site")
    assert calls(assets) == []


async def test_feedback_for_a_step_reaches_the_resolver() -> None:
    seen: dict[int, StepError | None] = {}

    class Recording(ArgResolver):
        async def resolve(
            self, step: Step, spec: ToolSpec | None, results: Mapping[int, StepResult], **kw: Any
        ) -> ResolvedArgs | ResolutionFailure:
            seen[step.id] = kw.get("feedback")
            return await super().resolve(step, spec, results, **kw)

    h = Harness([fake_tool("sites", ["MAIN"])], resolver=Recording())
    error = StepError(ErrorKind.ARGS_INVALID, "site must be upper case", args=("site",))
    await h.run(mk(1, "sites"), feedback={1: error})
    assert seen == {1: error}


# -- failures before the call ----------------------------------------------------------


async def test_unreadable_args_fail_with_args_syntax_and_the_tool_is_not_called() -> None:
    tool = fake_tool("history", [1], args={"site": str})
    h = Harness([tool])
    res = await h.run(mk(1, "history", args_valid=False, args_text='{"site": "MAIN",'))
    assert_failed(res[1], ErrorKind.ARGS_SYNTAX, "history", '{"site": "MAIN",')
    assert calls(tool) == []


async def test_an_unknown_tool_fails_with_close_names_suggested() -> None:
    h = Harness([fake_tool("sites", ["MAIN"])])
    res = await h.run(mk(1, "site"))
    assert_failed(res[1], ErrorKind.UNKNOWN_TOOL, "'site'", "sites")


async def test_a_reference_to_a_step_not_in_the_plan_is_a_missing_reference() -> None:
    tool = fake_tool("assets", ["CH-6"], args={"site": str})
    h = Harness([tool])
    res = await h.run(mk(2, "assets", {"site": "<step_9.name>"}))
    assert_failed(res[2], ErrorKind.MISSING_REFERENCE, "'site'", "step 9", "<step_9.name>")
    assert calls(tool) == []


async def test_a_dependency_on_a_step_not_in_the_plan_is_a_missing_reference() -> None:
    tool = fake_tool("sites", ["MAIN"])
    h = Harness([tool])
    res = await h.run(mk(2, "sites", deps=(5,)))
    assert_failed(res[2], ErrorKind.MISSING_REFERENCE, "step 5")
    assert calls(tool) == []


async def test_a_step_referring_to_a_failed_step_is_blocked_naming_argument_and_cause() -> None:
    broken = fake_tool("sites", error="database is down")
    assets = fake_tool("assets", ["CH-6"], args={"site": str})
    report = fake_tool("report", "ok", args={"assets": list})
    h = Harness([broken, assets, report])
    res = await h.run(
        mk(1, "sites"),
        mk(2, "assets", {"site": "<step_1[0]>"}),
        mk(3, "report", {"assets": "<step_2>"}),
    )
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "database is down")
    assert_failed(
        res[2],
        ErrorKind.UPSTREAM_FAILED,
        "'site'",
        "step 1",
        "database is down",
        status=StepStatus.BLOCKED,
    )
    assert_failed(
        res[3], ErrorKind.UPSTREAM_FAILED, "'assets'", "step 2", status=StepStatus.BLOCKED
    )
    assert calls(assets) == [] and calls(report) == []
    assert res[2].args is None and res[2].attempts == 0


async def test_an_explicit_only_dependency_that_failed_blocks_too() -> None:
    after = fake_tool("after", "ok")
    h = Harness([fake_tool("before", error="boom"), after])
    res = await h.run(mk(1, "before"), mk(2, "after", deps=(1,)))
    assert_failed(
        res[2], ErrorKind.UPSTREAM_FAILED, "depends on step 1", "boom", status=StepStatus.BLOCKED
    )
    assert calls(after) == []


async def test_the_guard_stops_a_step_with_limit_exceeded() -> None:
    seen: list[tuple[int, str]] = []

    def guard(step: Step, tool: str) -> str | None:
        seen.append((step.id, tool))
        return "max_steps=1 reached" if step.id > 1 else None

    tool = fake_tool("sites", ["MAIN"])
    h = Harness([tool], guard=guard)
    res = await h.run(mk(1, "sites"), mk(2, "sites", deps=(1,)))
    assert res[1].ok
    assert_failed(res[2], ErrorKind.LIMIT_EXCEEDED, "max_steps=1 reached")
    assert seen == [(1, "sites"), (2, "sites")]
    assert len(calls(tool)) == 1


class LeakyResolver(ArgResolver):
    """A broken resolver that lets a placeholder through."""

    def __init__(self, leak: Any) -> None:
        super().__init__()
        self.leak = leak

    async def resolve(
        self, step: Step, spec: ToolSpec | None, results: Mapping[int, StepResult], **kw: Any
    ) -> ResolvedArgs | ResolutionFailure:
        return ResolvedArgs(args={"site": self.leak}, methods={"site": ResolutionMethod.LLM})


@pytest.mark.parametrize(
    "leak",
    [
        "{step_1}",
        {"nested": ["ok", "<step_2.id>"]},
        "{{step_3}}",
        "{step_1_selected_site}",
        Ref(step=1),
        Template(parts=("a ", Ref(step=1, whole_value=False))),
        {"{step_1}": 1},
        [{"ok": {"<site_name>": "MAIN"}}],
        "ASSET_ID_FROM_STEP_1",
    ],
    ids=["braces", "nested", "double", "hinted", "ref", "template", "key", "nested-key",
         "named-step"],
)
async def test_the_invariant_stops_a_call_with_an_unresolved_placeholder(leak: Any) -> None:
    tool = fake_tool("assets", ["CH-6"], args={"site": Any})
    h = Harness([tool], resolver=LeakyResolver(leak))
    res = await h.run(mk(1, "assets"))
    assert_failed(res[1], ErrorKind.RESOLUTION_FAILED, "'site'", "unresolved")
    assert calls(tool) == [] and h.of(ToolCallStarted) == []


# -- tool failures -------------------------------------------------------------------


async def test_a_tool_exception_is_a_tool_error_with_its_message_and_arguments() -> None:
    tool = fake_tool("history", error="no data for CH-6", args={"asset": str})
    h = Harness([tool])
    res = await h.run(mk(1, "history", {"asset": "CH-6"}))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "'history'", "no data for CH-6", "CH-6")
    assert res[1].args == {"asset": "CH-6"} and res[1].attempts == 1


async def test_an_error_payload_counts_as_a_failure_not_a_success() -> None:
    tool = fake_tool("sites", {"error": "site not found: EAST"})
    after = fake_tool("after", "ok", args={"v": Any})
    h = Harness([tool, after])
    res = await h.run(mk(1, "sites"), mk(2, "after", {"v": "<step_1>"}))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "site not found: EAST")
    assert res[1].output == {"error": "site not found: EAST"}
    assert res[2].status is StepStatus.BLOCKED and calls(after) == []


async def test_an_error_payload_of_a_safe_tool_is_retried_like_an_exception() -> None:
    tool = fake_tool("sites", {"error": "busy"}, hints=SAFE)
    h = Harness([tool])
    res = await h.run(mk(1, "sites"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "busy", "after 3 attempts")
    assert len(calls(tool)) == 3


async def test_retrying_error_payloads_can_be_turned_off() -> None:
    tool = fake_tool("sites", {"error": "unknown site"}, hints=SAFE)
    h = Harness([tool], config=ExecutorSettings(tool_retry=FAST, retry_error_payloads=False))
    res = await h.run(mk(1, "sites"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "unknown site")
    assert len(calls(tool)) == 1


async def test_error_payload_keys_are_configurable() -> None:
    tool = fake_tool("sites", {"fault": "quota exceeded", "error": None})
    h = Harness([tool], config=ExecutorSettings(error_payload_keys=("fault",), tool_retry=FAST))
    res = await h.run(mk(1, "sites"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "quota exceeded")


async def test_an_mcp_style_is_error_result_is_a_tool_error() -> None:
    tool = fake_tool("sites", {"isError": True, "content": [{"type": "text", "text": "denied"}]})
    h = Harness([tool])
    res = await h.run(mk(1, "sites"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "denied")


async def test_a_slow_tool_times_out_with_tool_timeout() -> None:
    tool = fake_tool("history", [1], latency=5, args={"asset": str})
    h = Harness([tool], config=ExecutorSettings(tool_timeouts={"history": 0.05}, tool_retry=FAST))
    res = await h.run(mk(1, "history", {"asset": "CH-6"}))
    assert_failed(res[1], ErrorKind.TOOL_TIMEOUT, "'history'", "0.05", "CH-6")


async def test_the_step_timeout_bounds_the_whole_step() -> None:
    tool = fake_tool("history", [1], latency=5, hints=SAFE)
    h = Harness([tool], config=ExecutorSettings(step_timeout=0.05, tool_retry=FAST))
    res = await h.run(mk(1, "history"))
    assert_failed(res[1], ErrorKind.TOOL_TIMEOUT, "step timeout", "'history'")


@pytest.mark.parametrize("empty", [None, "", "  ", [], {}])
async def test_an_empty_output_fails_by_default(empty: Any) -> None:
    tool = fake_tool("search", empty, args={"q": str})
    h = Harness([tool])
    res = await h.run(mk(1, "search", {"q": "chillers"}))
    assert_failed(res[1], ErrorKind.EMPTY_OUTPUT, "'search'", "chillers")


async def test_an_empty_output_can_be_accepted_with_a_warning() -> None:
    tool = fake_tool("search", [], args={"q": str}, hints=SAFE)
    h = Harness([tool], config=ExecutorSettings(empty_output="warn", tool_retry=FAST))
    res = await h.run(mk(1, "search", {"q": "chillers"}))
    assert res[1].ok and res[1].output == [] and res[1].note and "empty" in res[1].note
    assert [e.code for e in h.of(FallbackUsed)] == ["EMPTY_OUTPUT_ACCEPTED"]
    assert res[1].attempts == 1


async def test_a_safe_tool_returning_nothing_is_retried_once() -> None:
    tool = fake_tool("search", [], hints=SAFE)
    h = Harness([tool])
    res = await h.run(mk(1, "search"))
    assert_failed(res[1], ErrorKind.EMPTY_OUTPUT)
    assert res[1].attempts == 2


# -- retries and breakers ------------------------------------------------------------


async def test_a_flaky_read_only_tool_is_retried_and_each_retry_is_reported() -> None:
    tool = fake_tool("sensors", ["T1"], error="connection reset", fail_times=2, hints=SAFE)
    h = Harness([tool])
    res = await h.run(mk(1, "sensors"))
    assert res[1].ok and res[1].attempts == 3 and res[1].output == ["T1"]
    retries = h.of(FallbackUsed)
    assert [e.code for e in retries] == ["TOOL_RETRY", "TOOL_RETRY"]
    assert all("step 1" in e.message for e in retries)
    assert [e.attempt for e in h.of(ToolCallStarted)] == [1, 2, 3]
    assert h.usage.tool_calls == 3


async def test_a_safe_tool_that_keeps_failing_stops_after_its_attempts() -> None:
    tool = fake_tool("sensors", error="down", hints={"idempotent": True})
    h = Harness([tool])
    res = await h.run(mk(1, "sensors"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "down", "after 3 attempts")
    assert len(calls(tool)) == 3


async def test_a_tool_of_unknown_safety_is_never_retried() -> None:
    tool = fake_tool("create_order", error="timeout upstream", fail_times=1)
    h = Harness([tool])
    res = await h.run(mk(1, "create_order"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "not retried")
    assert len(calls(tool)) == 1 and h.of(FallbackUsed) == []


@pytest.mark.parametrize("retry_unsafe", [False, True])
async def test_a_destructive_tool_is_never_retried(retry_unsafe: bool) -> None:
    tool = fake_tool(
        "delete_order", error="flaky", fail_times=1, hints={"idempotent": True, "destructive": True}
    )
    h = Harness([tool], config=ExecutorSettings(tool_retry=FAST, retry_unsafe=retry_unsafe))
    res = await h.run(mk(1, "delete_order"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "destructive")
    assert len(calls(tool)) == 1


async def test_retry_unsafe_allows_retrying_tools_of_unknown_safety() -> None:
    tool = fake_tool("lookup", "ok", error="flaky", fail_times=1)
    h = Harness([tool], config=ExecutorSettings(tool_retry=FAST, retry_unsafe=True))
    res = await h.run(mk(1, "lookup"))
    assert res[1].ok and res[1].attempts == 2


async def test_an_open_breaker_fails_steps_on_its_server_fast() -> None:
    breakers = BreakerRegistry(failure_threshold=1, recovery_time=60)
    down = fake_tool("sites", error="503", hints={"server": "iot"})
    other = fake_tool("assets", ["CH-6"], hints={"server": "iot"})
    local = fake_tool("notes", "ok")
    h = Harness([down, other, local], breakers=breakers)
    res = await h.run(mk(1, "sites"), mk(2, "assets", deps=(3,)), mk(3, "notes"))
    assert_failed(res[1], ErrorKind.TOOL_ERROR, "503")
    assert_failed(res[2], ErrorKind.CIRCUIT_OPEN, "'assets'", "tool:iot")
    assert calls(other) == [] and res[2].attempts == 0
    assert res[3].ok
    # one breaker per server (MCP), one per local tool
    assert breakers.states() == {"tool:iot": "open", "tool:local:notes": "closed"}


async def test_a_custom_runner_makes_the_tool_calls() -> None:
    made: list[tuple[str, dict[str, Any]]] = []

    class Runner:
        async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
            made.append((spec.name, args))
            return {"remote": True}

    tool = fake_tool("sites", ["MAIN"], args={"n": int})
    h = Harness([tool], runner=Runner())
    res = await h.run(mk(1, "sites", {"n": 2}))
    assert res[1].output == {"remote": True}
    assert made == [("sites", {"n": 2})] and calls(tool) == []


# -- reasoning steps -----------------------------------------------------------------


async def test_a_reasoning_step_without_a_model_is_skipped_never_echoing_its_expectation() -> None:
    expected = "The chiller with the highest temperature: CH-6"
    use = fake_tool("use", "ok", args={"v": str})
    h = Harness([fake_tool("temps", {"CH-6": 9}), use])
    res = await h.run(
        mk(1, "temps"),
        mk(2, None, task="pick the hottest chiller", deps=(1,), expected_output=expected),
        mk(3, "use", {"v": "<step_2>"}),
    )
    assert res[2].status is StepStatus.SKIPPED
    assert res[2].output is None and res[2].raw_output is None
    assert res[2].note and "skipped" in res[2].note
    assert expected not in json.dumps([r.to_dict() for r in res.values()])
    assert [e.code for e in h.of(FallbackUsed)] == ["REASONING_SKIPPED"]
    # a step relying on it never receives the expected output as a value
    assert_failed(res[3], ErrorKind.UPSTREAM_FAILED, "'v'", "step 2", status=StepStatus.BLOCKED)
    assert calls(use) == []


async def test_a_reasoning_step_with_a_model_answers_from_its_dependencies() -> None:
    expected = "EXPECTED-OUTPUT-TEXT"
    model = ScriptedChatModel(replies=["CH-6 is the hottest"])
    usage = Usage()
    reasoner = ModelReasoner(
        ModelClient(model, usage=usage), question="Which chiller is hottest?"
    )
    h = Harness([fake_tool("temps", {"CH-6": 9, "CH-7": 4})], reasoner=reasoner, usage=usage)
    res = await h.run(
        mk(1, "temps"),
        mk(2, None, task="pick the hottest chiller", deps=(1,), expected_output=expected),
    )
    assert res[2].ok and res[2].output == "CH-6 is the hottest" and res[2].llm_calls == 1
    prompt = messages_text(model.requests[0])
    assert "pick the hottest chiller" in prompt and '"CH-6": 9' in prompt
    assert "Which chiller is hottest?" in prompt
    assert expected not in prompt
    assert h.usage.llm_calls == {"reason": 1}


async def test_a_reasoning_step_gets_the_steps_its_task_text_refers_to() -> None:
    plan = parse_plan(
        '#Task1: a\n#Tool1: temps\n#Args1: {}\n#Dependency1: None\n'
        "#Task2: Pick the hottest chiller from {step_1}\n#Tool2: none\n#Dependency2: None\n"
    )
    order: list[str] = []

    def temps() -> dict[str, int]:
        order.append("temps")
        return {"CH-6": 9}

    def reply(messages: Any) -> str:
        order.append("reason")
        return "CH-6"

    model = FunctionChatModel(function=reply)
    h = Harness([fake_tool("temps", function=temps)], reasoner=ModelReasoner(ModelClient(model)))
    results = await h.executor.run(plan)
    res = {r.step_id: r for r in results}
    assert res[2].ok and order == ["temps", "reason"]
    prompt = messages_text(model.requests[0])
    assert '"CH-6": 9' in prompt and "No earlier step results" not in prompt


async def test_a_reasoning_step_with_args_shows_them_to_its_model() -> None:
    model = ScriptedChatModel(replies=["MAIN"])
    h = Harness([], reasoner=ModelReasoner(ModelClient(model)))
    res = await h.run(mk(1, None, {"site": "MAIN"}, task="think"))
    assert res[1].ok
    prompt = messages_text(model.requests[0])
    assert "Arguments written in the plan" in prompt and '"site": "MAIN"' in prompt


async def test_a_failed_resolution_keeps_the_methods_of_the_arguments_that_resolved() -> None:
    tool = fake_tool("assets", ["CH-6"], args={"site": str, "asset": str})
    h = Harness([fake_tool("sites", {"name": "MAIN"}), tool])
    res = await h.run(
        mk(1, "sites"),
        mk(2, "assets", {"site": "<step_1.name>", "asset": "{asset_id_from_step_1}"}),
    )
    assert_failed(res[2], ErrorKind.RESOLUTION_FAILED, "'asset'")
    assert res[2].resolution == {"site": ResolutionMethod.PATH}
    assert calls(tool) == []


async def test_a_reference_in_a_dict_key_fails_the_step_before_any_call() -> None:
    tool = fake_tool("sensors", ["s1"], args={"asset_id": str, "tags": (Any, None)})
    h = Harness([fake_tool("sites", {"name": "MAIN"}), tool])
    plan = parse_plan(
        "#Task1: a\n#Tool1: sites\n#Args1: {}\n"
        '#Task2: b\n#Tool2: sensors\n#Args2: {"asset_id": "A1", "tags": {"{step_1}": 1}}\n'
    )
    res = {r.step_id: r for r in await h.executor.run(plan)}
    assert_failed(res[2], ErrorKind.ARGS_SYNTAX, "sensors")
    assert calls(tool) == []


async def test_a_reasoning_step_whose_model_fails_is_a_model_error() -> None:
    model = ScriptedChatModel(replies=[ValueError("provider down")])
    h = Harness([], reasoner=ModelReasoner(ModelClient(model)))
    res = await h.run(mk(1, None, task="think"))
    assert_failed(res[1], ErrorKind.MODEL_ERROR, "provider down")


async def test_an_empty_reasoning_answer_is_an_empty_output() -> None:
    model = ScriptedChatModel(replies=["   "])
    h = Harness([], reasoner=ModelReasoner(ModelClient(model)))
    res = await h.run(mk(1, None, task="think", expected_output="the answer"))
    assert_failed(res[1], ErrorKind.EMPTY_OUTPUT)
    assert res[1].output is None


# -- prior results -------------------------------------------------------------------


async def test_succeeded_prior_steps_are_reused_and_visible_to_references() -> None:
    sites = fake_tool("sites", ["NEW"])
    assets = fake_tool("assets", ["CH-6"], args={"site": str, "region": str})
    prior = {
        1: StepResult(step_id=1, tool="sites", status=StepStatus.SUCCEEDED, output=["MAIN"]),
        7: StepResult(
            step_id=7, tool="regions", status=StepStatus.SUCCEEDED, output={"region": "EU"}
        ),
        2: StepResult(
            step_id=2,
            tool="assets",
            status=StepStatus.FAILED,
            error="step 2: boom",
            error_kind=ErrorKind.TOOL_ERROR,
        ),
    }
    h = Harness([sites, assets])
    res = await h.run(
        mk(1, "sites"),
        mk(2, "assets", {"site": "<step_1[0]>", "region": "<step_7.region>"}),
        prior=prior,
    )
    assert calls(sites) == []
    assert res[1].ok and res[1].note and "reused" in res[1].note
    assert res[2].ok and calls(assets) == [{"site": "MAIN", "region": "EU"}]
    assert 7 not in res
    assert [e.result.step_id for e in h.of(StepFinished)] == [1, 2]


async def test_a_prior_failure_of_a_step_in_a_cycle_does_not_hide_it() -> None:
    tool = fake_tool("t", "x", args={"v": (str, None)})
    prior = {1: StepResult(step_id=1, tool="t", status=StepStatus.FAILED, error="step 1: old")}
    h = Harness([tool])
    res = await h.run(mk(1, "t", {"v": "<step_2>"}), mk(2, "t", {"v": "<step_1>"}), prior=prior)
    assert set(res) == {1, 2}
    assert_failed(res[1], ErrorKind.MISSING_REFERENCE, "cycle")


# -- cancellation --------------------------------------------------------------------


async def test_cancel_marks_running_and_waiting_steps_cancelled_and_returns() -> None:
    slow = fake_tool("slow", "late", latency=5)
    after = fake_tool("after", "ok")
    h = Harness([slow, after, fake_tool("quick", "ok")])

    async def cancel_on_call(event: Event) -> None:
        if isinstance(event, ToolCallStarted) and event.tool == "slow":
            asyncio.get_running_loop().call_soon(h.executor.cancel)

    h.bus.subscribe(cancel_on_call)
    # "slow" waits for "quick": the cancellation comes after "quick" succeeded, whatever
    # the number of loop turns a tool call takes
    res = await asyncio.wait_for(
        h.run(mk(1, "quick"), mk(2, "slow", deps=(1,)), mk(3, "after", deps=(2,))), 2
    )
    assert res[1].ok
    assert_failed(res[2], ErrorKind.CANCELLED, "cancelled", status=StepStatus.CANCELLED)
    assert_failed(res[3], ErrorKind.CANCELLED, "before it started", status=StepStatus.CANCELLED)
    assert calls(after) == []
    assert {e.result.step_id for e in h.of(StepFinished)} == {1, 2, 3}
    assert h.executor.cancelled


async def test_cancelling_the_task_records_cancelled_steps_then_propagates() -> None:
    slow = fake_tool("slow", "late", latency=5)
    h = Harness([slow, fake_tool("after", "ok")])
    task = asyncio.create_task(h.run(mk(1, "slow"), mk(2, "after", deps=(1,))))

    async def cancel_on_call(event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            asyncio.get_running_loop().call_soon(task.cancel)

    h.bus.subscribe(cancel_on_call)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    statuses = {sid: r.status for sid, r in h.executor.results.items()}
    assert statuses == {1: StepStatus.CANCELLED, 2: StepStatus.CANCELLED}
    assert {e.result.step_id for e in h.of(StepFinished)} == {1, 2}
    assert len(h.of(StepStarted)) == 1


# -- the invariant, by property ------------------------------------------------------

KEYS = st.text(alphabet="abcdxyz ", min_size=1, max_size=4)  # "a b" needs ["a b"]
SCALARS = st.one_of(
    st.integers(-5, 1000), st.booleans(), st.text(alphabet="abc xyz", min_size=1, max_size=8)
)
REF_FORMS = ("<step_{n}{path}>", "{{step_{n}{path}}}", "{{{{step_{n}{path}}}}}")
"""The canonical, single-brace and double-brace forms (``str.format`` templates)."""
PLACEHOLDERS = ("{step_1}", "<step_2.id>", "{{step_3}}", "{value_from_step_1}", "<site_name>")
"""What a misbehaving fallback model writes instead of values."""


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, min_size=1, max_size=3),
        st.dictionaries(KEYS, inner, min_size=1, max_size=3),
    )


VALUES = st.recursive(SCALARS, _containers, max_leaves=8)
OUTPUTS = st.dictionaries(KEYS, VALUES, min_size=1, max_size=3)


def paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_in(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_in(v, (*prefix, i))
    return out


def follow(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


Expected = list[tuple[tuple[Any, ...], Any]]
"""Where a whole-value reference sits in a step's args, and the value it must receive."""


@st.composite
def random_plans(
    draw: st.DrawFn,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Expected], list[set[str]]]:
    """Outputs per step, plan args per step, whole-value refs expected per step, and the
    top-level arguments of each step that need the LLM fallback."""
    n = draw(st.integers(1, 5))
    outputs = [draw(OUTPUTS) for _ in range(n)]
    plans: list[dict[str, Any]] = []
    expected: list[Expected] = []
    fallback: list[set[str]] = []

    def arg_value(
        i: int, depth: int, where: tuple[Any, ...], found: Expected, needs: set[str]
    ) -> Any:
        kinds = ["literal", "whole", "embedded", "hinted", "missing", "key"]
        kind = draw(st.sampled_from(kinds + (["list", "dict"] if depth < 3 else [])))
        if kind in ("whole", "embedded", "hinted", "missing", "key") and i > 0:
            j = draw(st.integers(0, i - 1))
            path = draw(st.sampled_from(paths_in(outputs[j])))
            form = draw(st.sampled_from(REF_FORMS))
            if kind == "hinted":
                needs.add(where[0])
                return f"{{value_{len(path)}_from_step_{j + 1}}}"
            if kind == "missing":
                needs.add(where[0])
                return form.format(n=j + 1, path=format_path((*path, "no such key")))
            ref = form.format(n=j + 1, path=format_path(path))
            if kind == "key":  # a placeholder as a dict key: never resolved, never passed
                needs.add(where[0])
                return {ref: draw(SCALARS)}
            if kind == "whole":
                found.append((where, follow(outputs[j], path)))
                return ref
            return f"value {ref} here"
        if kind == "list":
            return [
                arg_value(i, depth + 1, (*where, k), found, needs)
                for k in range(draw(st.integers(1, 3)))
            ]
        if kind == "dict":
            return {
                f"k{k}": arg_value(i, depth + 1, (*where, f"k{k}"), found, needs)
                for k in range(draw(st.integers(1, 3)))
            }
        return draw(SCALARS)

    for i in range(n):
        found: Expected = []
        needs: set[str] = set()
        args = {
            name: arg_value(i, 0, (name,), found, needs)
            for name in draw(st.sets(st.sampled_from(["a", "b", "c"]), max_size=3))
        }
        plans.append(args)
        # a top-level argument the fallback fills loses its whole-value references
        expected.append([(w, v) for w, v in found if w[0] not in needs])
        fallback.append(needs)
    return outputs, plans, expected, fallback


def fallback_model(behaviour: str) -> FunctionChatModel:
    """A fallback that fills every asked key with a value, or (``bad``) with placeholders."""
    replies = iter(range(10_000))

    def reply(messages: Any) -> str:
        text = "\n".join(str(m.content) for m in messages)
        asked = re.search(r"exactly these keys: (.*?)\. Each value", text)
        assert asked is not None, text
        keys = json.loads(f"[{asked.group(1)}]")
        k = next(replies)
        if behaviour == "good" or (behaviour == "flaky" and k % 2):
            return json.dumps({key: f"filled {key}" for key in keys})
        bad = PLACEHOLDERS[k % len(PLACEHOLDERS)]
        return json.dumps({key: ({bad: 1} if k % 3 == 0 else bad) for key in keys})

    return FunctionChatModel(function=reply)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_plans(), st.sampled_from(["good", "flaky", "bad"]))
def test_no_tool_is_ever_called_with_a_reference_and_whole_values_keep_their_type(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]], list[Expected], list[set[str]]],
    behaviour: str,
) -> None:
    outputs, plan_args, expected, fallback = case
    seen: list[dict[str, Any]] = []

    def make(i: int) -> BaseTool:
        def fn(**kw: Any) -> Any:
            seen.append(kw)
            assert not contains_placeholder(kw)
            return outputs[i]

        return fake_tool(
            f"t{i + 1}", function=fn, args={"a": (Any, None), "b": (Any, None), "c": (Any, None)}
        )

    tools = [make(i) for i in range(len(outputs))]
    steps = [mk(i + 1, f"t{i + 1}", plan_args[i]) for i in range(len(outputs))]
    model = fallback_model(behaviour)
    # The fake fallback invents values ("filled a"): grounding is tested elsewhere
    # (tests/test_grounding.py); here only the invariant is, so ungrounded ones pass.
    executor = Executor(ToolCatalog(tools), ArgResolver(model, ungrounded="warn"))
    results = asyncio.run(executor.run(Plan(steps=tuple(steps))))
    by_id = {r.step_id: r for r in results}
    for call in seen:
        assert not contains_placeholder(call)
    for i in range(len(outputs)):
        r = by_id[i + 1]
        if not r.ok:
            # only a misbehaving fallback may fail a step (or block the steps after it)
            assert behaviour != "good" and r.args is None, r.error
            assert r.error_kind in (ErrorKind.RESOLUTION_FAILED, ErrorKind.UPSTREAM_FAILED)
            assert fallback[i] or r.error_kind is ErrorKind.UPSTREAM_FAILED, r.error
            continue
        assert r.args is not None
        assert not contains_placeholder(r.args)
        for name in fallback[i]:
            assert r.resolution.get(name) is ResolutionMethod.LLM
        for where, value in expected[i]:
            got = follow(r.args, where)
            assert got == value and type(got) is type(value)
    assert len(seen) == sum(1 for r in results if r.ok)


# -- robustness ----------------------------------------------------------------------


async def test_a_failing_event_subscriber_stops_the_run_with_its_error() -> None:
    class StoreDown(Exception):
        pass

    def store(event: Event) -> None:
        if isinstance(event, StepFinished) and event.result.step_id == 1:
            raise StoreDown("disk full")

    after = fake_tool("after", "ok")
    h = Harness([fake_tool("first", "ok"), after])
    h.bus.subscribe(store)
    with pytest.raises(StoreDown):
        await h.run(mk(1, "first"), mk(2, "after", deps=(1,)))
    assert calls(after) == []
    assert h.executor.results[2].status is StepStatus.CANCELLED


async def test_a_resolver_bug_propagates_instead_of_becoming_a_step_error() -> None:
    class Buggy(ArgResolver):
        async def resolve(
            self, step: Step, spec: ToolSpec | None, results: Mapping[int, StepResult], **kw: Any
        ) -> ResolvedArgs | ResolutionFailure:
            raise KeyError("oops")

    tool = fake_tool("sites", ["MAIN"])
    h = Harness([tool, fake_tool("other", "ok")], resolver=Buggy())
    with pytest.raises(KeyError, match="oops"):
        await h.run(mk(1, "sites"))
    assert calls(tool) == []


async def test_an_executor_runs_again_after_a_cancelled_run() -> None:
    tool = fake_tool("sites", ["MAIN"])
    h = Harness([tool])
    h.executor.cancel()
    res = await h.run(mk(1, "sites"))
    assert res[1].status is StepStatus.CANCELLED and calls(tool) == []
    res = await h.run(mk(1, "sites"))
    assert res[1].ok


@pytest.mark.parametrize("how", ["subclass", "instance"])
async def test_a_resolver_whose_resolve_is_replaced_is_asked_for_every_step(how: str) -> None:
    asked: list[int] = []

    class Counting(ArgResolver):
        async def resolve(self, step: Step, *args: Any, **kwargs: Any) -> Any:
            asked.append(step.id)
            return await super().resolve(step, *args, **kwargs)

    resolver: ArgResolver
    if how == "subclass":
        resolver = Counting()
    else:
        resolver = ArgResolver()
        original = resolver.resolve

        async def counting(step: Step, *args: Any, **kwargs: Any) -> Any:
            asked.append(step.id)
            return await original(step, *args, **kwargs)

        resolver.resolve = counting  # type: ignore[method-assign]
    tool = fake_tool("t", {"ok": 1}, args={"v": (Any, None)}, hints=SAFE)
    plan = Plan(steps=(
        Step(id=1, tool="t"), Step(id=2, tool="t", args={"v": Ref(1)}, depends_on=(1,)),
    ))
    results = await Executor(ToolCatalog([tool]), resolver).run(plan)
    assert all(r.ok for r in results)
    assert sorted(asked) == [1, 2]  # the fast path never steps around it


async def test_a_local_runner_whose_call_is_wrapped_makes_every_call() -> None:
    runner = LocalToolRunner()
    original = runner.call
    calls: list[str] = []

    async def counting(spec: ToolSpec, args: dict[str, Any], **kwargs: Any) -> Any:
        calls.append(spec.name)
        return await original(spec, args, **kwargs)

    runner.call = counting  # type: ignore[method-assign]
    tool = fake_tool("t", {"ok": 1}, hints=SAFE)
    plan = Plan(steps=(Step(id=1, tool="t"), Step(id=2, tool="t", depends_on=(1,))))
    results = await Executor(ToolCatalog([tool]), runner=runner).run(plan)
    assert all(r.ok for r in results)
    assert calls == ["t", "t"]  # the direct path never steps around the wrapper
