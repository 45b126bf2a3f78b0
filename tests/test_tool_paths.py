"""The direct tool path gives what langchain's ``ainvoke`` gives, for every tool shape.

`planexec.tools.invoke_tool` calls a plain `StructuredTool`'s function directly when no
callback would see the call, and goes through ``ainvoke`` otherwise. Each shape below
is run through both paths (``direct=True`` / ``direct=False``; end to end through the
executor with the default runner and with a runner forced onto ``ainvoke``), and the
outcomes compared: output, exception type and message, validation errors, artifacts,
error payloads. The oracle is langchain-core's own ``ainvoke``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool, ToolException
from langchain_core.tracers.context import collect_runs
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from planexec.config import ExecutorSettings
from planexec.executor import Executor
from planexec.plan import Plan, Step
from planexec.results import StepResult
from planexec.tools import ToolCallError, ToolCatalog, ToolSpec, invoke_tool


class Point(BaseModel):
    x: int
    y: int = 0


class Upper(BaseModel):
    name: str
    count: int = 3

    @field_validator("name")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class Reading(BaseModel):
    sensor: str
    value: float


def _echo(**kwargs: Any) -> dict[str, Any]:
    """What the function received (models as their type and data)."""
    return {
        k: ([type(v).__name__, v.model_dump()] if isinstance(v, BaseModel) else v)
        for k, v in kwargs.items()
    }


async def _async_echo(**kwargs: Any) -> dict[str, Any]:
    return _echo(**kwargs)


def _structured(
    name: str,
    fn: Callable[..., Any] | None = None,
    coroutine: Callable[..., Any] | None = None,
    schema: type[BaseModel] | None = None,
    **extra: Any,
) -> StructuredTool:
    return StructuredTool.from_function(
        func=fn, coroutine=coroutine, name=name, description=name, args_schema=schema, **extra
    )


async def _typed(site: str, limit: int = 2, tags: list[str] | None = None) -> dict[str, Any]:
    return {"site": site, "limit": limit, "tags": tags}


def _sync_json(site: str) -> str:
    return json.dumps({"site": site, "items": [1, 2]})


async def _no_args() -> list[str]:
    return ["MAIN", "NORTH"]


async def _raises_tool_exception(site: str) -> Any:
    raise ToolException(f"no site {site}")


def _raises_value_error(site: str) -> Any:
    raise ValueError(f"bad site {site}")


async def _error_payload(site: str) -> dict[str, Any]:
    return {"error": f"site {site} is offline"}


async def _model_output(site: str) -> Reading:
    return Reading(sensor=site, value=1.5)


async def _pair(site: str) -> tuple[str, dict[str, Any]]:
    return f"report {site}", {"structured_content": {"site": site}}


async def _with_point(point: Point, scale: int = 1) -> dict[str, Any]:
    return {"point": [type(point).__name__, point.x * scale, point.y], "scale": scale}


async def _artifact(site: str) -> tuple[str, dict[str, Any]]:
    return f"summary of {site}", {"site": site, "rows": [1, 2]}


async def _with_config(site: str, config: RunnableConfig) -> dict[str, Any]:
    return {"site": site, "has_config": config is not None}


async def _injected(site: str, secret: Annotated[str, InjectedToolArg]) -> str:
    return f"{site}:{secret}"


class Subclassed(BaseTool):
    """A BaseTool subclass with its own _arun."""

    name: str = "subclassed"
    description: str = "a subclass"

    def _run(self, site: str) -> str:
        return f"sync {site}"

    async def _arun(self, site: str) -> str:
        return f"async {site}"


@dataclass(frozen=True)
class Shape:
    id: str
    tool: BaseTool
    args: dict[str, Any]
    direct: bool
    """Whether the shape is eligible for the direct path."""


def shapes() -> Iterator[Shape]:
    yield Shape("async-dict", _structured("typed", coroutine=_typed), {"site": "MAIN"}, True)
    yield Shape(
        "async-all-args",
        _structured("typed", coroutine=_typed),
        {"site": "MAIN", "limit": "7", "tags": ["a"]},  # "7": lax validation makes it 7
        True,
    )
    yield Shape("sync-json-text", _structured("sync", fn=_sync_json), {"site": "N"}, True)
    yield Shape("no-args", _structured("none", coroutine=_no_args), {}, True)
    yield Shape(
        "tool-exception",
        _structured("raises", coroutine=_raises_tool_exception),
        {"site": "X"},
        True,
    )
    yield Shape(
        "sync-value-error", _structured("fails", fn=_raises_value_error), {"site": "X"}, True
    )
    yield Shape(
        "error-payload", _structured("payload", coroutine=_error_payload), {"site": "X"}, True
    )
    yield Shape("model-output", _structured("model", coroutine=_model_output), {"site": "S"}, True)
    yield Shape("content-pair", _structured("pair", coroutine=_pair), {"site": "S"}, True)
    yield Shape(
        "nested-model-arg",
        _structured("point", coroutine=_with_point),
        {"point": {"x": "3"}, "scale": 2},
        True,
    )
    yield Shape(
        "validator-and-default",
        _structured("upper", coroutine=_async_echo, schema=Upper),
        {"name": "main"},
        True,
    )
    yield Shape(
        "extra-allowed",
        _structured("open", coroutine=_async_echo, schema=Open),
        {"name": "a", "more": 1},
        True,
    )
    yield Shape(
        "invalid-type",
        _structured("typed", coroutine=_typed),
        {"site": "MAIN", "limit": "many"},
        True,
    )
    yield Shape("missing-arg", _structured("typed", coroutine=_typed), {}, True)
    # Not plain: always through ainvoke (both paths are then the same path).
    yield Shape(
        "content-and-artifact",
        _structured("artifact", coroutine=_artifact, response_format="content_and_artifact"),
        {"site": "S"},
        False,
    )
    yield Shape(
        "handled-tool-error",
        _structured("handled", coroutine=_raises_tool_exception, handle_tool_error=True),
        {"site": "X"},
        False,
    )
    yield Shape("subclass", Subclassed(), {"site": "S"}, False)
    yield Shape(
        "takes-config", _structured("config", coroutine=_with_config), {"site": "S"}, False
    )
    yield Shape(
        "injected-arg",
        _structured("injected", coroutine=_injected),
        {"site": "S", "secret": "k"},
        False,
    )


SHAPES = list(shapes())


def outcome(run: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call gave: its output, or its exception (type, message, errors)."""
    try:
        value = run()
    except ValidationError as exc:
        return ("validation", exc.title, exc.errors(include_url=False))
    except Exception as exc:  # noqa: BLE001 - compared, whatever it is
        return ("raised", type(exc), str(exc))
    if isinstance(value, BaseModel):
        return ("ok", type(value), value.model_dump())
    return ("ok", value)


def spec_of(shape: Shape) -> ToolSpec:
    return ToolCatalog([shape.tool]).get(shape.tool.name)


@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_a_tool_shape_takes_the_direct_path_only_when_it_is_plain(shape: Shape) -> None:
    assert (spec_of(shape).direct is not None) is shape.direct


@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_both_paths_give_the_same_outputs_errors_and_artifacts(shape: Shape) -> None:
    spec = spec_of(shape)
    via_ainvoke = outcome(lambda: asyncio.run(invoke_tool(spec, shape.args, direct=False)))
    direct = outcome(lambda: asyncio.run(invoke_tool(spec, shape.args)))
    assert direct == via_ainvoke


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.direct], ids=lambda s: s.id)
def test_the_resolvers_validated_model_gives_what_validating_again_gives(shape: Shape) -> None:
    spec = spec_of(shape)
    try:
        model = spec.parse(shape.args)
    except ValidationError:
        pytest.skip("the resolver refuses these arguments: the tool is never called")
    again = outcome(lambda: asyncio.run(invoke_tool(spec, shape.args)))
    once = outcome(lambda: asyncio.run(invoke_tool(spec, shape.args, validated=model)))
    assert once == again


class AinvokeRunner:
    """A runner that always goes through langchain's ainvoke."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        return await invoke_tool(spec, args, direct=False)


def _run_step(shape: Shape, runner: AinvokeRunner | None) -> StepResult:
    step = Step(id=1, tool=shape.tool.name, args=dict(shape.args))
    executor = Executor(
        ToolCatalog([shape.tool]), config=ExecutorSettings(max_concurrency=1), runner=runner
    )
    [result] = asyncio.run(executor.run(Plan(steps=(step,))))
    return result


def _comparable(result: StepResult) -> dict[str, Any]:
    data = result.to_dict()
    for key in ("started_at", "duration"):
        data.pop(key, None)
    return data


@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_both_paths_give_the_same_step_results_end_to_end(shape: Shape) -> None:
    default = _run_step(shape, None)
    forced = _run_step(shape, AinvokeRunner())
    assert _comparable(default) == _comparable(forced)


def test_the_direct_path_does_not_call_ainvoke(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = StructuredTool.ainvoke

    async def counting(self: StructuredTool, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.name)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(StructuredTool, "ainvoke", counting)
    spec = ToolCatalog([_structured("typed", coroutine=_typed)]).get("typed")
    assert asyncio.run(invoke_tool(spec, {"site": "A"}))["site"] == "A"
    assert calls == []
    assert asyncio.run(invoke_tool(spec, {"site": "A"}, direct=False))["site"] == "A"
    assert calls == ["typed"]


def test_a_handled_error_still_raises_tool_call_error() -> None:
    shape = next(s for s in SHAPES if s.id == "handled-tool-error")
    with pytest.raises(ToolCallError, match="no site X"):
        asyncio.run(invoke_tool(spec_of(shape), shape.args))


class Recorder(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.tools: list[str] = []

    async def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kw: Any) -> None:
        self.tools.append(serialized["name"])


def test_a_call_with_callbacks_goes_through_ainvoke_and_they_see_it() -> None:
    spec = ToolCatalog([_structured("typed", coroutine=_typed)]).get("typed")
    recorder = Recorder()
    config: RunnableConfig = {"callbacks": [recorder]}
    asyncio.run(invoke_tool(spec, {"site": "A"}, config))
    assert recorder.tools == ["typed"]


def test_callbacks_in_the_context_take_the_call_through_ainvoke() -> None:
    spec = ToolCatalog([_structured("typed", coroutine=_typed)]).get("typed")
    with collect_runs() as collector:
        asyncio.run(invoke_tool(spec, {"site": "A"}))
    assert [run.name for run in collector.traced_runs] == ["typed"]
