"""Adversarial audit of the promise: no argument dropped, guessed or passed through silently.

Each test reproduces a path where, before its fix, a tool's failure counted as a success or
an argument reached a tool other than as the plan wrote it. Oracles: the fake tools' own
call logs (what each tool really received) and the typed fields of the step results.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict

from planexec.errors import ErrorKind
from planexec.events import Event, EventBus, FallbackUsed
from planexec.executor import Executor
from planexec.parsing import parse_plan
from planexec.plan import Plan, Ref, Step
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec, invoke_tool

BOUND = 20.0  # seconds: a bound on waits, never asserted on


class AinvokeRunner:
    """A runner that always goes through langchain's ainvoke (never the direct path)."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        return await invoke_tool(spec, args, direct=False)


def calls(tool: BaseTool) -> list[dict[str, Any]]:
    return [dict(c) for c in tool.metadata["calls"].calls]  # type: ignore[index]


async def run(tools: list[BaseTool], *steps: Step, **kwargs: Any) -> dict[int, StepResult]:
    executor = Executor(ToolCatalog(tools), **kwargs)
    results = await asyncio.wait_for(executor.run(Plan(steps=steps)), BOUND)
    return {r.step_id: r for r in results}


# -- a tool's own error marker is a failure --------------------------------------------------


@pytest.mark.parametrize("runner", [None, AinvokeRunner()], ids=["direct", "ainvoke"])
async def test_a_tool_message_with_error_status_is_a_tool_error_and_blocks_its_dependents(
    runner: AinvokeRunner | None,
) -> None:
    """langchain's own error marker (``ToolMessage(status="error")``) is never an output."""
    failed = ToolMessage(content="no such site: EAST", status="error", tool_call_id="c1")
    sites = fake_tool("sites", failed, args={"site": str})
    after = fake_tool("after", "ok", args={"v": Any})
    res = await run(
        [sites, after],
        Step(id=1, tool="sites", args={"site": "EAST"}),
        Step(id=2, tool="after", args={"v": Ref(1)}, depends_on=(1,)),
        runner=runner,
    )
    assert res[1].status is StepStatus.FAILED
    assert res[1].error_kind is ErrorKind.TOOL_ERROR
    assert res[1].failure is not None and res[1].failure.cause == "no such site: EAST"
    assert res[2].status is StepStatus.BLOCKED and calls(after) == []


@pytest.mark.parametrize("runner", [None, AinvokeRunner()], ids=["direct", "ainvoke"])
async def test_a_tool_message_with_success_status_is_still_an_output(
    runner: AinvokeRunner | None,
) -> None:
    fine = ToolMessage(content="MAIN", status="success", tool_call_id="c1")
    res = await run([fake_tool("sites", fine)], Step(id=1, tool="sites"), runner=runner)
    assert res[1].status is StepStatus.SUCCEEDED and res[1].output == "MAIN"


@pytest.mark.mcp
async def test_planexec_as_an_mcp_server_reports_a_tool_message_error_as_is_error() -> None:
    """The same marker on a tool planexec re-exposes is an ``isError`` result, not content."""
    pytest.importorskip("mcp")
    from mcp import Client

    from planexec.mcp.server import build_server

    failed = ToolMessage(content="no such site: EAST", status="error", tool_call_id="c1")
    sites = fake_tool("sites", failed, args={"site": str})
    async with Client(build_server([sites], expose_tools=True)) as client:
        result = await asyncio.wait_for(client.call_tool("sites", {"site": "EAST"}), BOUND)
    assert result.is_error
    assert calls(sites) == [{"site": "EAST"}]


# -- arguments of a schema that names none -----------------------------------------------------


class FakeSession:
    """An MCP session that records the arguments each call sends to the server."""

    name = "srv"
    transport = "stdio"

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout: float | None = None, **_: Any
    ) -> Any:
        self.sent.append(dict(arguments))
        return {"ok": True}


OPEN_SCHEMAS = [
    {"type": "object", "additionalProperties": True},
    {"type": "object", "properties": {}, "additionalProperties": {"type": ["string", "integer"]}},
]


@pytest.mark.mcp
@pytest.mark.parametrize("schema", OPEN_SCHEMAS, ids=["any-extra", "typed-extra"])
@pytest.mark.parametrize("runner", [None, AinvokeRunner()], ids=["direct", "ainvoke"])
async def test_an_mcp_tool_without_properties_gets_every_argument_the_plan_wrote(
    schema: dict[str, Any], runner: AinvokeRunner | None
) -> None:
    """A server whose input schema names no property but allows others gets them all."""
    pytest.importorskip("mcp")
    import mcp_types

    from planexec.mcp.client import mcp_tool_to_langchain

    session = FakeSession()
    tool = mcp_tool_to_langchain(session, mcp_types.Tool(name="query", input_schema=schema))
    args = {"site": "MAIN", "limit": 3}
    res = await run([tool], Step(id=1, tool="query", args=args), runner=runner)
    assert res[1].status is StepStatus.SUCCEEDED
    assert session.sent == [args]


@pytest.mark.mcp
@pytest.mark.parametrize("runner", [None, AinvokeRunner()], ids=["direct", "ainvoke"])
async def test_an_mcp_tool_without_properties_still_holds_its_arguments_to_the_schema(
    runner: AinvokeRunner | None,
) -> None:
    pytest.importorskip("mcp")
    import mcp_types

    from planexec.mcp.client import mcp_tool_to_langchain

    session = FakeSession()
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    tool = mcp_tool_to_langchain(session, mcp_types.Tool(name="query", input_schema=schema))
    res = await run([tool], Step(id=1, tool="query", args={"site": "MAIN"}), runner=runner)
    assert res[1].error_kind is ErrorKind.ARGS_INVALID
    assert session.sent == []


class OpenArgs(BaseModel):
    """Names no argument, allows any: langchain calls such a tool with none."""

    model_config = ConfigDict(extra="allow")


def open_tool(received: list[dict[str, Any]]) -> BaseTool:
    async def query(**kwargs: Any) -> str:
        received.append(dict(kwargs))
        return "ok"

    return StructuredTool.from_function(
        coroutine=query, name="query", description="Query.", args_schema=OpenArgs
    )


@pytest.mark.parametrize("runner", [None, AinvokeRunner()], ids=["direct", "ainvoke"])
async def test_arguments_a_langchain_tool_would_drop_are_refused_not_dropped(
    runner: AinvokeRunner | None,
) -> None:
    """langchain calls a tool whose schema names no field with no arguments at all."""
    received: list[dict[str, Any]] = []
    res = await run(
        [open_tool(received)], Step(id=1, tool="query", args={"site": "MAIN"}), runner=runner
    )
    assert res[1].status is StepStatus.FAILED
    assert res[1].error_kind is ErrorKind.ARGS_INVALID
    assert res[1].failure is not None and res[1].failure.args == ("site",)
    assert received == []


async def test_a_langchain_tool_whose_schema_names_no_field_runs_without_arguments() -> None:
    received: list[dict[str, Any]] = []
    res = await run([open_tool(received)], Step(id=1, tool="query"))
    assert res[1].status is StepStatus.SUCCEEDED and received == [{}]


# -- a server's argument names, as its schema shows them -----------------------------------------

ALIASED = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "from": {"type": "string"},
        "a-b": {"type": "integer"},
    },
    "required": ["n"],
}


def aliased_tool(session: FakeSession, schema: dict[str, Any] = ALIASED) -> BaseTool:
    pytest.importorskip("mcp")
    import mcp_types

    from planexec.mcp.client import mcp_tool_to_langchain

    return mcp_tool_to_langchain(session, mcp_types.Tool(name="echo", input_schema=schema))


@pytest.mark.mcp
@pytest.mark.parametrize("extra", [False, True], ids=["closed", "additional-properties"])
@pytest.mark.parametrize(("python_name", "value"), [("f_from", "there"), ("f_a_b", 3)])
async def test_a_plan_naming_the_models_python_name_is_refused_not_renamed(
    python_name: str, value: Any, extra: bool
) -> None:
    """``f_from`` is planexec's own name for the server's ``from``: no schema shows it.

    Where the schema allows other arguments, it is not renamed ``from`` either.
    """
    session = FakeSession()
    schema = {**ALIASED, "additionalProperties": True} if extra else ALIASED
    res = await run(
        [aliased_tool(session, schema)],
        Step(id=1, tool="echo", args={"n": 2, python_name: value}),
    )
    assert res[1].error_kind is ErrorKind.ARGS_INVALID
    assert res[1].failure is not None and python_name in res[1].failure.args
    assert session.sent == []


@pytest.mark.mcp
async def test_a_coercion_of_an_aliased_argument_is_announced_and_recorded() -> None:
    """``"3"`` for the server's integer ``a-b`` is coerced like any argument: visibly."""
    session = FakeSession()
    events: list[Event] = []
    res = await run(
        [aliased_tool(session)],
        Step(id=1, tool="echo", args={"n": 2, "a-b": "3"}),
        bus=EventBus([events.append]),
    )
    assert res[1].status is StepStatus.SUCCEEDED
    assert session.sent == [{"n": 2, "a-b": 3}]
    assert res[1].args == {"n": 2, "a-b": 3}
    assert res[1].resolution["a-b"] is ResolutionMethod.COERCED
    assert [e.code for e in events if isinstance(e, FallbackUsed)] == ["ARG_COERCED"]


# -- a rewoo input that names the tool's arguments ----------------------------------------------


def assets_tool() -> BaseTool:
    return fake_tool("assets", ["CH-6"], args={"site_name": str, "limit": (int, 10)})


async def run_assets(written: str) -> tuple[StepResult, BaseTool]:
    """Run ``#E1 = assets[<written>]``: its result, and the tool (for its calls)."""
    tool = assets_tool()
    executor = Executor(ToolCatalog([tool]))
    [result] = await asyncio.wait_for(
        executor.run(parse_plan(f"Plan: list the assets\n#E1 = assets[{written}]\n")), BOUND
    )
    return result, tool


@pytest.mark.parametrize(
    "written",
    ['site_name="MAIN", limit=3', '{"site_name": "MAIN", "limit": 3}', "limit=3"],
)
async def test_an_input_naming_the_tools_arguments_is_refused_not_folded_into_the_first(
    written: str,
) -> None:
    """``assets[site_name="MAIN", limit=3]``: ``limit`` would be dropped, ``site_name`` garbled."""
    result, tool = await run_assets(written)
    assert result.error_kind is ErrorKind.ARGS_INVALID
    assert result.failure is not None and result.failure.literal_args == ("#1",)
    assert calls(tool) == []


@pytest.mark.parametrize("written", ["MAIN", "site = MAIN", "x=1", '{"site": "MAIN"}'])
async def test_an_input_that_names_no_argument_of_the_tool_is_its_first_argument(
    written: str,
) -> None:
    result, tool = await run_assets(written)
    assert result.status is StepStatus.SUCCEEDED
    assert calls(tool) == [{"site_name": written, "limit": 10}]
