"""An MCP tool's JSON Schema is kept whole and enforced BEFORE the call.

The server here does not validate anything (a low-level server without
``get_tool_input_schema``): every call it receives is appended to a log file, so a test
sees whether a bad argument ever reached it. Each schema violation must fail the step
with ``ARGS_INVALID`` naming the argument and the rule, with the server never called; a
valid call succeeds; a server answering ``-32602`` (invalid params) is called once and
the step is ``ARGS_INVALID``, not a retried ``TOOL_ERROR``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from planexec.errors import ErrorKind  # noqa: E402
from planexec.executor import Executor  # noqa: E402
from planexec.mcp import MCPArgumentsError, MCPToolset, schema_to_model  # noqa: E402
from planexec.parsing import parse_plan  # noqa: E402
from planexec.results import StepStatus  # noqa: E402
from planexec.tools import ToolCatalog  # noqa: E402

pytestmark = pytest.mark.mcp

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "code": {"type": "string", "minLength": 4, "pattern": "^[A-Z]{2}-[0-9]+$"},
        "speed": {"type": "string", "enum": ["slow", "fast"]},
        "item": {"$ref": "#/$defs/Item"},
    },
    "required": ["count", "code"],
    "additionalProperties": False,
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string", "minLength": 2}},
            "required": ["sku"],
            "additionalProperties": False,
        }
    },
}

# A server that validates nothing and logs every call it gets.
LAX_SERVER = textwrap.dedent(
    """
    import json, sys
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

    LOG = sys.argv[1]
    SCHEMA = json.loads(sys.argv[2])
    READ = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[
            types.Tool(name="order", description="Order things.", input_schema=SCHEMA,
                       annotations=READ),
            types.Tool(name="picky", description="Refuses its params.",
                       input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
                       annotations=READ),
            types.Tool(name="later", description="Needs tasks.",
                       input_schema={"type": "object"},
                       execution=types.ToolExecution(task_support="required")),
        ])

    async def call_tool(ctx, params):
        with open(LOG, "a") as f:
            f.write(json.dumps({"tool": params.name, "args": params.arguments}) + "\\n")
        if params.name == "picky":
            raise MCPError(types.INVALID_PARAMS, "x must be prime")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="ok")],
            structured_content={"ordered": params.arguments},
        )

    server = Server("lax", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    """
)


def _config(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    script = tmp_path / "lax_server.py"
    script.write_text(LAX_SERVER)
    log = tmp_path / "calls.jsonl"
    log.touch()
    args = [str(script), str(log), json.dumps(ORDER_SCHEMA)]
    return {"mcpServers": {"lax": {"command": sys.executable, "args": args}}}, log


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def _plan(tool: str, args: dict[str, Any]) -> Any:
    return parse_plan(
        f"#Task1: go\n#Tool1: {tool}\n#Args1: {json.dumps(args)}\n#Dependency1: None\n"
    )


VIOLATIONS = [
    ({"count": 50, "code": "AB-1"}, "count", "maximum"),
    ({"count": 0, "code": "AB-1"}, "count", "minimum"),
    ({"count": 2, "code": "ab-1"}, "code", "pattern"),
    ({"count": 2, "code": "A-"}, "code", "minLength"),
    ({"count": 2, "code": "AB-1", "speed": "warp"}, "speed", "warp"),
    ({"count": 2, "code": "AB-1", "colour": "red"}, "colour", "colour"),
    ({"count": 2, "code": "AB-1", "item": {"sku": "x"}}, "item", "minLength"),
    ({"count": 2, "code": "AB-1", "item": {"sku": "xy", "n": 1}}, "item", "additionalProperties"),
]


async def test_each_schema_violation_is_args_invalid_and_never_reaches_the_server(
    tmp_path: Path,
) -> None:
    config, log = _config(tmp_path)
    async with MCPToolset(config) as toolset:
        catalog = ToolCatalog(toolset.tools)
        for args, arg, rule in VIOLATIONS:
            [result] = await Executor(catalog).run(_plan("order", args))
            assert result.status is StepStatus.FAILED, args
            assert result.error_kind is ErrorKind.ARGS_INVALID, (args, result.error)
            assert f"'{arg}" in (result.error or ""), (args, result.error)
            assert rule in (result.error or ""), (args, result.error)
            assert _calls(log) == [], f"{args} reached the server"
        good = {"count": 10, "code": "AB-12", "speed": "fast", "item": {"sku": "xy"}}
        [ok] = await Executor(catalog).run(_plan("order", good))
        assert ok.status is StepStatus.SUCCEEDED, ok.error
        assert ok.output == {"ordered": good}
    assert _calls(log) == [{"tool": "order", "args": good}]


async def test_the_server_gets_only_the_arguments_given_never_a_filled_in_default(
    tmp_path: Path,
) -> None:
    # langchain-core passes every optional field's default to a tool's function: the
    # server would get "speed": null, "item": null, which its schema does not allow.
    config, log = _config(tmp_path)
    given = {"count": 1, "code": "AB-1"}
    async with MCPToolset(config) as toolset:
        [result] = await Executor(ToolCatalog(toolset.tools)).run(_plan("order", given))
        assert result.status is StepStatus.SUCCEEDED, result.error
        await toolset.tools_for("lax")[0].ainvoke({**given, "speed": "slow"})
    assert _calls(log) == [
        {"tool": "order", "args": given},
        {"tool": "order", "args": {**given, "speed": "slow"}},
    ]


async def test_a_server_answering_invalid_params_is_called_once_and_the_step_is_args_invalid(
    tmp_path: Path,
) -> None:
    config, log = _config(tmp_path)
    async with MCPToolset(config) as toolset:
        with pytest.raises(MCPArgumentsError, match="x must be prime"):
            await toolset.tools_for("lax")[1].ainvoke({"x": 4})
        log.write_text("")
        [result] = await Executor(ToolCatalog(toolset.tools)).run(_plan("picky", {"x": 4}))
    assert result.error_kind is ErrorKind.ARGS_INVALID, result.error
    assert "x must be prime" in (result.error or "")
    # read-only and idempotent, so a TOOL_ERROR would have been retried: -32602 is not
    assert _calls(log) == [{"tool": "picky", "args": {"x": 4}}]


async def test_the_planner_sees_the_servers_schema(tmp_path: Path) -> None:
    config, _ = _config(tmp_path)
    async with MCPToolset(config) as toolset:
        catalog = ToolCatalog(toolset.tools)
        assert catalog.get("order").json_schema == ORDER_SCHEMA
        assert catalog.get("order").tool.tool_call_schema.model_json_schema() == ORDER_SCHEMA


def test_task_required_tools_and_invalid_schemas_are_flagged_at_load_not_offered() -> None:
    # (The SDK's dual-era server drops ``execution`` on 2026-07-28 connections; a
    # handshake-era server sends it: the listing is built here as such a server sends it.)
    import mcp_types

    from planexec.mcp.client import MCPServerSession, StdioServerConfig

    session = MCPServerSession("lax", StdioServerConfig(command="unused"))
    session.tools = [
        mcp_types.Tool(name="now", input_schema={"type": "object"}),
        mcp_types.Tool(
            name="later",
            input_schema={"type": "object"},
            execution=mcp_types.ToolExecution(task_support="required"),
        ),
        mcp_types.Tool(
            name="maybe",
            input_schema={"type": "object"},
            execution=mcp_types.ToolExecution(task_support="optional"),
        ),
        mcp_types.Tool(name="broken", input_schema={"type": "object", "minProperties": -1}),
    ]
    toolset = MCPToolset({"mcpServers": {"lax": {"command": "unused"}}})
    offered = [t.name for t in toolset._usable_tools(session)]
    assert offered == ["now", "maybe"]
    assert set(toolset.skipped) == {"lax.later", "lax.broken"}
    assert "task" in toolset.skipped["lax.later"]
    assert "minProperties" in toolset.skipped["lax.broken"]


def test_an_invalid_schema_is_refused_when_the_model_is_built() -> None:
    from planexec.schemas import InvalidSchemaError

    with pytest.raises(InvalidSchemaError, match="minimum"):
        schema_to_model("t", {"type": "object", "properties": {"n": {"minimum": "ten"}}})


def test_formats_the_validator_can_check_are_checked() -> None:
    from pydantic import ValidationError

    model = schema_to_model(
        "t", {"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}
    )
    assert model.model_validate({"mail": "a@b.example"}).model_dump(exclude_unset=True) == {
        "mail": "a@b.example"
    }
    with pytest.raises(ValidationError, match="format"):
        model.model_validate({"mail": "nobody"})


async def test_through_the_agent_a_server_answering_invalid_params_is_called_once(
    tmp_path: Path,
) -> None:
    # The step's arguments are plan literals: re-resolving would make the same call, and a
    # RETRY_STEP would too; the agent re-plans (onto `order`) instead.
    from planexec import PlanExecuteAgent
    from planexec.testing import ScriptedChatModel

    config, log = _config(tmp_path)
    good = {"count": 1, "code": "AB-1"}
    replies = [
        f"#Task1: go\n#Tool1: picky\n#Args1: {json.dumps({'x': 4})}\n#Dependency1: None\n",
        f"#Task1: go\n#Tool1: order\n#Args1: {json.dumps(good)}\n#Dependency1: None\n",
        "ordered",
    ]
    async with MCPToolset(config) as toolset:
        agent = PlanExecuteAgent(ScriptedChatModel(replies=replies), toolset.tools)
        run = await agent.run("order one")
    assert run.answer == "ordered"
    [refused] = run.attempts[0].results
    assert refused.error_kind is ErrorKind.ARGS_INVALID
    assert refused.failure is not None and refused.failure.retryable is False
    assert _calls(log) == [{"tool": "picky", "args": {"x": 4}}, {"tool": "order", "args": good}]
