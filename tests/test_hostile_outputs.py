"""Misbehaving tools and hostile outputs (issue 14, items 4, 6, 9 and 12).

No test sleeps or measures time: tools block on events the test releases, and every
wait is bounded by ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import enum
import json
import threading
import uuid
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

import pytest
from langchain_core.tools import BaseTool, StructuredTool

from planexec.config import AgentConfig, ExecutorSettings, RetrySettings
from planexec.errors import ConfigError, ErrorKind
from planexec.events import Event, EventBus, FallbackUsed, RunFinished, StepFinished
from planexec.executor import Executor
from planexec.parsing import parse_plan
from planexec.plan import Plan, Ref, Step
from planexec.results import MAX_JSON_DEPTH, StepResult, StepStatus, encode_json, jsonable
from planexec.runs import execute_recorded
from planexec.runtime import Runtime
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolOutputError, check_output

pytestmark = pytest.mark.timeout(60)  # before the fixes, some of these hung for ever

FAST = RetrySettings(attempts=3, base_delay=0.0, max_delay=0.0, jitter=0.0)
SAFE = {"read_only": True}
BOUND = 10.0
"""Seconds any wait of these tests may take at most (they never need it)."""


class Harness:
    def __init__(self, tools: list[BaseTool], config: ExecutorSettings | None = None) -> None:
        self.events: list[Event] = []
        self.bus = EventBus([self.events.append])
        self.executor = Executor(
            ToolCatalog(tools),
            config=config or ExecutorSettings(tool_retry=FAST),
            bus=self.bus,
            run_id="run-1",
        )

    async def run(self, *steps: Step) -> dict[int, StepResult]:
        results = await asyncio.wait_for(self.executor.run(Plan(steps=tuple(steps))), BOUND)
        return {r.step_id: r for r in results}

    def warnings(self, code: str) -> list[FallbackUsed]:
        return [e for e in self.events if isinstance(e, FallbackUsed) and e.code == code]


def strict_json(text: str) -> Any:
    """Parse JSON text, refusing the bare NaN/Infinity tokens that are not JSON."""

    def refuse(token: str) -> Any:
        raise ValueError(f"invalid JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def returning(name: str, value: Any, **kw: Any) -> BaseTool:
    def fn() -> Any:
        return value

    return fake_tool(name, function=fn, **kw)


# -- item 4: cyclic and very deep outputs ----------------------------------------------


async def test_a_cyclic_output_is_a_tool_error_and_the_run_goes_on() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    h = Harness([returning("loop", cyclic, hints=SAFE), returning("ok", "fine")])
    res = await h.run(Step(id=1, tool="loop"), Step(id=2, tool="ok"))
    assert res[1].status is StepStatus.FAILED and res[1].error_kind is ErrorKind.TOOL_ERROR
    assert "cycle" in (res[1].error or "") and "step 1" in (res[1].error or "")
    assert res[1].attempts == 1  # not retried: the same output would come back
    assert res[1].output is None and res[1].raw_output is None  # never kept
    assert res[2].ok
    for r in res.values():
        strict_json(json.dumps(r.to_dict(), allow_nan=False))


@pytest.mark.parametrize("deep", [nested(100_000), "[" * 100_000 + "]" * 100_000])
async def test_a_very_deep_output_is_a_tool_error(deep: Any) -> None:
    h = Harness([returning("deep", deep)])
    res = await h.run(Step(id=1, tool="deep"))
    assert res[1].error_kind is ErrorKind.TOOL_ERROR, res[1]
    assert f"{MAX_JSON_DEPTH}" in (res[1].error or "")
    json.dumps(res[1].to_dict(), allow_nan=False)


def test_jsonable_never_raises_on_a_cycle_or_a_deep_value() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert jsonable({"x": cyclic}) == {"x": ["[cycle]"]}
    deep = jsonable(nested(100_000))
    json.dumps(deep, allow_nan=False)
    assert encode_json(nested(100_000)).error is not None
    shared = [1]
    assert jsonable({"a": shared, "b": shared}) == {"a": [1], "b": [1]}  # not a cycle


# -- item 6: tools that ignore cancellation -------------------------------------------


def stubborn_tool(name: str, release: asyncio.Event, started: asyncio.Event) -> BaseTool:
    """An async tool that swallows every cancellation until ``release`` is set."""

    async def fn() -> str:
        started.set()
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # swallowed: the misbehaviour under test
        return "late"

    return StructuredTool.from_function(coroutine=fn, name=name, description="stubborn")


async def test_an_async_tool_that_swallows_cancellation_times_out_and_is_detached() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    tool = stubborn_tool("stubborn", release, started)
    h = Harness([tool], ExecutorSettings(tool_timeout=0.05, tool_retry=FAST))
    res = await h.run(Step(id=1, tool="stubborn"))
    assert res[1].error_kind is ErrorKind.TOOL_TIMEOUT
    assert "left running, detached" in (res[1].error or "")
    assert h.executor.detached_calls == 1
    release.set()
    for _ in range(100):  # bounded: the detached call ends a few loop turns after release
        if h.executor.detached_calls == 0:
            break
        await asyncio.sleep(0)
    assert h.executor.detached_calls == 0


async def test_a_sync_tool_that_blocks_is_abandoned_in_its_thread() -> None:
    release = threading.Event()

    def blocking() -> str:
        release.wait(BOUND)
        return "late"

    tool = StructuredTool.from_function(func=blocking, name="blocking", description="sync")
    h = Harness([tool], ExecutorSettings(tool_timeout=0.05, tool_retry=FAST))
    try:
        res = await h.run(Step(id=1, tool="blocking"))
    finally:
        release.set()
    assert res[1].error_kind is ErrorKind.TOOL_TIMEOUT
    assert "thread cannot be stopped" in (res[1].error or "")


async def test_the_step_timeout_does_not_wait_for_a_tool_that_swallows_cancellation() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    h = Harness(
        [stubborn_tool("stubborn", release, started)],
        ExecutorSettings(step_timeout=0.05, tool_retry=FAST),
    )
    try:
        res = await h.run(Step(id=1, tool="stubborn"))
    finally:
        release.set()
    assert res[1].error_kind is ErrorKind.TOOL_TIMEOUT
    assert "step timeout" in (res[1].error or "")


async def test_cancel_does_not_wait_for_a_tool_that_swallows_cancellation() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    h = Harness([stubborn_tool("stubborn", release, started)])
    task = asyncio.create_task(h.run(Step(id=1, tool="stubborn")))
    await asyncio.wait_for(started.wait(), BOUND)
    h.executor.cancel("stopped by the test")
    try:
        res = await asyncio.wait_for(task, BOUND)
    finally:
        release.set()
    assert res[1].status is StepStatus.CANCELLED
    assert "stopped by the test" in (res[1].error or "")
    assert h.executor.cancel_reason == "stopped by the test"


async def test_a_cancelled_call_left_running_is_counted_until_it_ends() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    h = Harness([stubborn_tool("stubborn", release, started)])  # no timeouts at all
    task = asyncio.create_task(h.run(Step(id=1, tool="stubborn")))
    await asyncio.wait_for(started.wait(), BOUND)
    h.executor.cancel()
    res = await asyncio.wait_for(task, BOUND)
    assert res[1].status is StepStatus.CANCELLED
    assert h.executor.detached_calls == 1  # it swallowed the cancellation: still running
    release.set()
    for _ in range(100):  # bounded: the detached call ends a few loop turns after release
        if h.executor.detached_calls == 0:
            break
        await asyncio.sleep(0)
    assert h.executor.detached_calls == 0


@pytest.mark.parametrize("step_timeout", [None, BOUND])
async def test_a_tools_own_timeout_is_the_tools_not_the_steps(step_timeout: float | None) -> None:
    """A cancellation the tool brings on itself (its own timeout) is passed to it."""

    async def patient() -> str:
        try:
            async with asyncio.timeout(0):
                await asyncio.Event().wait()
        except TimeoutError:
            return "gave up waiting"
        return "never"

    tool = StructuredTool.from_function(coroutine=patient, name="patient", description="t")
    h = Harness([tool], ExecutorSettings(step_timeout=step_timeout, tool_retry=FAST))
    res = await h.run(Step(id=1, tool="patient"))
    assert res[1].status is StepStatus.SUCCEEDED, res[1]
    assert res[1].output == "gave up waiting"
    assert h.executor.detached_calls == 0


async def test_a_tool_call_runs_in_a_context_of_its_own() -> None:
    """Context variables a tool sets do not leak into its step (as with a task per call)."""
    probe: contextvars.ContextVar[str] = contextvars.ContextVar("probe", default="unset")

    async def setter() -> str:
        probe.set("set by the tool")
        await asyncio.sleep(0)  # suspended once: the rest runs in the same context
        return probe.get()

    seen: list[str] = []

    def on_event(event: Event) -> None:
        if isinstance(event, StepFinished):
            seen.append(probe.get())

    tool = StructuredTool.from_function(coroutine=setter, name="setter", description="t")
    h = Harness([tool])
    h.bus.subscribe(on_event)
    res = await h.run(Step(id=1, tool="setter"))
    assert res[1].output == "set by the tool"
    assert seen == ["unset"]


async def test_the_run_timeout_cancels_the_run_and_records_its_reason() -> None:
    release, started = asyncio.Event(), asyncio.Event()
    events: list[Event] = []
    bus = EventBus([events.append])
    catalog = ToolCatalog([stubborn_tool("stubborn", release, started), fake_tool("after", "ok")])
    config = AgentConfig.from_dict({"executor": {"run_timeout": 0.05}})
    executor = Runtime(None, catalog, config).open_run(run_id="r", usage=_usage(), bus=bus)
    plan = Plan(steps=(Step(id=1, tool="stubborn"), Step(id=2, tool="after", depends_on=(1,))))
    try:
        results = await asyncio.wait_for(
            execute_recorded(executor.executor, plan, "text", bus=bus), BOUND
        )
    finally:
        release.set()
    by_id = {r.step_id: r for r in results}
    assert {r.status for r in results} == {StepStatus.CANCELLED}
    assert "run timeout of 0.05s exceeded" in (by_id[1].error or "")
    assert "run timeout of 0.05s exceeded" in (by_id[2].error or "")
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "CANCELLED"
    assert finished.error == "run timeout of 0.05s exceeded"


def test_the_run_timeout_has_a_default_and_can_be_turned_off() -> None:
    assert ExecutorSettings().run_timeout == 600.0
    assert ExecutorSettings(run_timeout=None).run_timeout is None


def _usage() -> Any:
    from planexec.results import Usage

    return Usage()


# -- item 9: outputs JSON cannot keep as they are -------------------------------------


async def test_colliding_keys_are_a_warning_naming_both_keys() -> None:
    h = Harness([returning("keys", {1: "a", "1": "b"})])
    res = await h.run(Step(id=1, tool="keys"))
    assert res[1].ok
    (warning,) = h.warnings("OUTPUT_NOT_JSON")
    assert "1 and '1'" in warning.message
    assert res[1].note is not None and "1 and '1'" in res[1].note
    assert res[1].to_dict()["output"] == {"1": "b"}


class Colour(enum.Enum):
    RED = "red"


async def test_dates_decimals_uuids_paths_and_enums_are_encoded_faithfully() -> None:
    value = {
        "when": datetime.datetime(2024, 1, 1, 0, 0),
        "day": datetime.date(2024, 1, 2),
        "at": datetime.time(12, 30),
        "price": Decimal("1.10"),
        "id": uuid.UUID(int=1),
        "path": PurePosixPath("/data/x.csv"),
        "colour": Colour.RED,
    }
    h = Harness([returning("typed", value)])
    res = await h.run(Step(id=1, tool="typed"))
    assert res[1].ok and res[1].note is None and not h.warnings("OUTPUT_NOT_JSON")
    assert res[1].to_dict()["output"] == {
        "when": "2024-01-01T00:00:00",
        "day": "2024-01-02",
        "at": "12:30:00",
        "price": "1.10",
        "id": "00000000-0000-0000-0000-000000000001",
        "path": "/data/x.csv",
        "colour": "red",
    }


async def test_an_object_that_is_not_json_data_is_a_warning_and_a_note() -> None:
    h = Harness([returning("gen", {"items": (i for i in range(3))})])
    res = await h.run(Step(id=1, tool="gen"))
    assert res[1].ok
    (warning,) = h.warnings("OUTPUT_NOT_JSON")
    assert "generator" in warning.message and '$["items"]' in warning.message
    assert res[1].note is not None and "generator" in res[1].note


async def test_nan_and_infinity_in_an_output_are_written_as_valid_json() -> None:
    h = Harness([returning("nums", {"a": float("nan"), "b": float("inf"), "c": -float("inf")})])
    res = await h.run(Step(id=1, tool="nums"))
    text = json.dumps(res[1].to_dict(), allow_nan=False)
    assert strict_json(text)["output"] == {"a": "NaN", "b": "Infinity", "c": "-Infinity"}


@pytest.mark.parametrize("value", [float("inf"), float("nan"), [1.0, float("-inf")]])
async def test_a_non_finite_argument_is_args_invalid_and_the_tool_is_not_called(
    value: Any,
) -> None:
    tool = fake_tool("scale", 1, args={"x": Any})
    h = Harness([tool])
    res = await h.run(Step(id=1, tool="scale", args={"x": value}))
    assert res[1].error_kind is ErrorKind.ARGS_INVALID, res[1]
    assert "'x'" in (res[1].error or "") and "finite" in (res[1].error or "")
    assert res[1].failure is not None and res[1].failure.args == ("x",)
    assert tool.metadata["calls"].calls == []  # type: ignore[index]


async def test_a_plan_literal_1e999_never_reaches_a_float_tool() -> None:
    tool = fake_tool("scale", 1, args={"x": float})
    plan = parse_plan('#Step1: scale\n#Tool1: scale\n#Args1: {"x": 1e999}\n')
    h = Harness([tool])
    results = await asyncio.wait_for(h.executor.run(plan), BOUND)
    assert results[0].status is StepStatus.FAILED
    assert tool.metadata["calls"].calls == []  # type: ignore[index]


# -- item 12: the output cap -------------------------------------------------------------


async def test_an_output_over_the_cap_fails_naming_its_size_and_the_limit() -> None:
    h = Harness([returning("big", "x" * 150, hints=SAFE)], ExecutorSettings(max_output_chars=100))
    res = await h.run(Step(id=1, tool="big"))
    assert res[1].error_kind is ErrorKind.TOOL_ERROR
    assert "150" in (res[1].error or "") and "100" in (res[1].error or "")
    assert res[1].output is None and res[1].raw_output is None
    assert res[1].attempts == 1


async def test_a_per_tool_output_limit_replaces_the_default_and_counts_json() -> None:
    config = ExecutorSettings(max_output_chars=1000, tool_output_limits={"rows": 20})
    h = Harness([returning("rows", {"rows": list(range(50))}), returning("ok", "y" * 500)], config)
    res = await h.run(Step(id=1, tool="rows"), Step(id=2, tool="ok"))
    assert res[1].error_kind is ErrorKind.TOOL_ERROR
    assert "as JSON" in (res[1].error or "") and "20" in (res[1].error or "")
    assert res[2].ok


def test_check_output_refuses_what_cannot_be_kept() -> None:
    with pytest.raises(ToolOutputError, match="over the limit of 3"):
        check_output("abcd", limit=3)
    assert check_output('{"a": 1}', limit=8) == ({"a": 1}, '{"a": 1}', [])


def test_output_limits_are_settings_checked_against_the_catalog() -> None:
    with pytest.raises(ConfigError, match="max_output_chars"):
        AgentConfig.from_dict({"executor": {"max_output_chars": 0}})
    config = AgentConfig.from_dict({"executor": {"tool_output_limits": {"nope": 10}}})
    with pytest.raises(ConfigError, match="tool_output_limits"):
        Runtime(None, ToolCatalog([fake_tool("sites", [])]), config)


# -- item 8: nonsense settings -----------------------------------------------------------


def _float_settings(model: type[Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every float setting of a settings model, nested models included."""
    import types
    import typing

    from pydantic import BaseModel

    paths = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        args = typing.get_args(ann) if isinstance(ann, types.UnionType) else (ann,)
        for arg in args:
            if arg is float:
                paths.append((*prefix, name))
            elif isinstance(arg, type) and issubclass(arg, BaseModel):
                paths.extend(_float_settings(arg, (*prefix, name)))
    return paths


def test_every_float_setting_refuses_nan_and_infinity() -> None:
    paths = _float_settings(AgentConfig)
    assert ("executor", "run_timeout") in paths and ("model", "timeout") in paths
    for path in paths:
        for bad in (float("nan"), float("inf")):
            data: dict[str, Any] = {}
            node = data
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = bad
            with pytest.raises(ConfigError, match=path[-1]):
                AgentConfig.from_dict(data)


@pytest.mark.parametrize(
    "executor",
    [{"tool_timeout": 0}, {"step_timeout": -1}, {"run_timeout": 0}, {"tool_timeouts": {"a": 0}}],
)
def test_timeouts_must_be_above_zero(executor: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        AgentConfig.from_dict({"executor": executor})


@pytest.mark.parametrize("path", [(), ("a",), ("b",)])
async def test_a_non_finite_number_taken_from_an_output_never_reaches_a_tool(
    path: tuple[str, ...],
) -> None:
    tool = fake_tool("scale", 1, args={"x": Any}, hints=SAFE)
    h = Harness([returning("nums", {"a": float("nan"), "b": [1.0, float("inf")]}), tool])
    res = await h.run(
        Step(id=1, tool="nums"),
        Step(id=2, tool="scale", args={"x": Ref(1, path)}, depends_on=(1,)),
    )
    assert res[1].ok
    assert res[2].error_kind is ErrorKind.ARGS_INVALID, res[2]
    assert res[2].failure is not None and res[2].failure.args == ("x",)
    assert tool.metadata["calls"].calls == []  # type: ignore[index]
