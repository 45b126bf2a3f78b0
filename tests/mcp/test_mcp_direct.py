"""planexec calls its own MCP tools through their session, not through ``ainvoke``.

An MCP tool loaded by `MCPToolset` declares how it may be called directly
(`planexec.tools.DIRECT_ARGUMENTS`): the executor then skips langchain's per-call
machinery. The direct path must be the general one, call for call: on random arguments
(valid, invalid, aliased names, defaults left out) the server receives the same
arguments and the caller gets the same output or the same exception both ways.
"""

from __future__ import annotations

import json
import random
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

pytest.importorskip("mcp")

import planexec.tools as tools_module  # noqa: E402
from planexec.errors import ErrorKind  # noqa: E402
from planexec.executor import Executor  # noqa: E402
from planexec.mcp import MCPToolset  # noqa: E402
from planexec.parsing import parse_plan  # noqa: E402
from planexec.results import StepStatus  # noqa: E402
from planexec.tools import ToolCatalog, invoke_tool  # noqa: E402

pytestmark = pytest.mark.mcp

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "note": {"type": "string"},
        "from": {"type": "string"},
        "a-b": {"type": "integer", "default": 7},
        "tags": {"type": "array", "items": {"type": "string"}},
        "item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
        },
    },
    "required": ["n"],
}
OPEN_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": {"not": {"type": "null"}}}
"""Names no property and allows others: langchain alone would call it with none."""

SERVER = textwrap.dedent(
    """
    import json, sys
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

    LOG = sys.argv[1]
    SCHEMA = json.loads(sys.argv[2])
    OPEN = json.loads(sys.argv[3])
    READ = types.ToolAnnotations(read_only_hint=True)

    async def list_tools(ctx, params):
        tools = [
            types.Tool(name=name, description=name, input_schema=SCHEMA, annotations=READ)
            for name in ("echo", "broken", "picky", "plain")
        ] + [types.Tool(name="open", description="open", input_schema=OPEN, annotations=READ)]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
        with open(LOG, "a") as f:
            f.write(json.dumps({"tool": params.name, "args": params.arguments}) + "\\n")
        args = params.arguments or {}
        if params.name == "picky" and args.get("n", 0) % 2:
            raise MCPError(types.INVALID_PARAMS, "n must be even")
        if params.name == "broken":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"no luck with {args}")],
                is_error=True,
            )
        if params.name == "plain":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=json.dumps(args))]
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="ok")],
            structured_content={"got": args},
        )

    server = Server("wire", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    """
)


def _config(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    script = tmp_path / "wire_server.py"
    script.write_text(SERVER)
    log = tmp_path / "calls.jsonl"
    log.touch()
    args = [str(script), str(log), json.dumps(SCHEMA), json.dumps(OPEN_SCHEMA)]
    return {"mcpServers": {"wire": {"command": sys.executable, "args": args}}}, log


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line]


VALUES: dict[str, list[Any]] = {
    "n": [0, 1, 2, -5, 10**12, "3", 2.0, 2.5, None, [1]],
    "note": ["", "hi", "ünï", 4, None],
    "from": ["here", "", 1],
    "f_from": ["by field name"],
    "a-b": [0, 7, 8, "x"],
    "f_a_b": [9],
    "tags": [[], ["a", "b"], "a", [1], None],
    "item": [{"sku": "x"}, {}, {"sku": 1}, "x", {"sku": "y", "extra": [1]}],
    "unknown": [1],
}


def _random_args(rng: random.Random) -> dict[str, Any]:
    keys = [k for k in VALUES if rng.random() < (0.9 if k == "n" else 0.3)]
    return {k: rng.choice(VALUES[k]) for k in keys}


def _outcome(coro_result: Any = None, exc: BaseException | None = None) -> Any:
    if exc is None:
        return ("returned", coro_result)
    if isinstance(exc, ValidationError):
        return ("invalid", [(e["type"], e["loc"]) for e in exc.errors()])
    return ("raised", type(exc), str(exc), getattr(exc, "data", None))


async def _call(spec: Any, args: dict[str, Any], *, direct: bool) -> Any:
    try:
        return _outcome(await invoke_tool(spec, args, direct=direct))
    except Exception as exc:  # noqa: BLE001 - the exception is the outcome compared
        return _outcome(exc=exc)


async def test_an_mcp_tool_called_directly_gives_what_ainvoke_gives_on_random_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ainvoke = tools_module._ainvoke
    through_ainvoke: list[str] = []

    async def counted(tool: Any, payload: Any, config: Any = None) -> Any:
        through_ainvoke.append(tool.name)
        return await real_ainvoke(tool, payload, config)

    monkeypatch.setattr(tools_module, "_ainvoke", counted)
    config, log = _config(tmp_path)
    rng = random.Random(20261126)
    async with MCPToolset(config) as toolset:
        catalog = ToolCatalog(toolset.tools)
        specs = [catalog.get(name) for name in ("echo", "broken", "picky", "plain", "open")]
        assert all(spec.direct is not None for spec in specs)
        for case in range(150):
            spec = rng.choice(specs)
            args = _random_args(rng)
            seen = f"case {case}: {spec.name}({args})"
            general = await _call(spec, args, direct=False)
            assert through_ainvoke == [spec.name], seen
            through_ainvoke.clear()
            sent_general = _calls(log)
            if spec.name == "open" and general[0] == "returned":  # nothing dropped
                assert sent_general == [{"tool": "open", "args": args}], seen
            log.write_text("")
            direct = await _call(spec, args, direct=True)
            assert through_ainvoke == [], f"{seen} went through ainvoke"
            assert direct == general, seen
            assert _calls(log) == sent_general, seen
            log.write_text("")


async def test_the_executor_calls_an_mcp_tool_without_ainvoke_and_the_server_gets_the_given_args(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(tool: Any, payload: Any, config: Any = None) -> Any:
        raise AssertionError(f"{tool.name} went through ainvoke")

    monkeypatch.setattr(tools_module, "_ainvoke", refuse)
    config, log = _config(tmp_path)
    plan = parse_plan(
        '#Step1: go\n#Tool1: echo\n#Args1: {"n": 2, "from": "here", "a-b": 1}\n'
        "#Dependency1: None\n"
        '#Step2: go\n#Tool2: broken\n#Args2: {"n": 1}\n#Dependency2: None\n'
    )
    async with MCPToolset(config) as toolset:
        catalog = ToolCatalog(toolset.tools)
        # the server's names, as its schema gives them (not the model's f_from, f_a_b)
        assert catalog.get("echo").arg_names == ["n", "note", "from", "a-b", "tags", "item"]
        assert "from: str?" in catalog.get("echo").signature()
        ok, failed = await Executor(catalog).run(plan)
    given = {"n": 2, "from": "here", "a-b": 1}
    assert ok.status is StepStatus.SUCCEEDED, ok.error
    assert ok.output == {"got": given}
    assert failed.status is StepStatus.FAILED
    assert failed.error_kind is ErrorKind.TOOL_ERROR
    assert _calls(log)[0] == {"tool": "echo", "args": given}


async def test_an_approvers_edit_of_an_aliased_argument_reaches_the_server_by_its_schema_name(
    tmp_path: Path,
) -> None:
    from planexec.agent import PlanExecuteAgent
    from planexec.approval import ApprovalDecision, ApprovalRequest
    from planexec.config import AgentConfig
    from planexec.results import ResolutionMethod, RunStatus

    decisions = [
        ApprovalDecision.edit({"f_from": "there"}),  # the model's Python name: not the tool's
        ApprovalDecision.edit({"from": "there", "a-b": 3}),
    ]
    requests: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        requests.append(request)
        return decisions.pop(0)

    config, log = _config(tmp_path)
    cfg = AgentConfig.model_validate({"approval": {"enabled": True, "tools": ["echo"]}})
    async with MCPToolset(config) as toolset:
        agent = PlanExecuteAgent(None, ToolCatalog(toolset.tools), config=cfg, approver=approver)
        run = await agent.execute_plan(
            '#Step1: go\n#Tool1: echo\n#Args1: {"n": 2, "from": "here"}\n#Dependency1: None\n'
        )
    assert run.status is RunStatus.SUCCEEDED, run.error
    first, second = requests
    assert first.args == {"n": 2, "from": "here"} and first.problems == ()
    # the unknown name is refused and asked again, never dropped nor mapped by guess
    assert any("f_from" in p for p in second.problems)
    assert [c["args"] for c in _calls(log)] == [{"n": 2, "from": "there", "a-b": 3}]
    [result] = run.results
    assert result.args == {"n": 2, "from": "there", "a-b": 3}
    assert result.resolution["from"] is ResolutionMethod.EDITED
    assert result.resolution["a-b"] is ResolutionMethod.EDITED
