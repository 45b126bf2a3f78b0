"""Tools from MCP servers: configuration, schemas, persistent sessions and failures."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types  # noqa: E402
from langchain_core.tools import ToolException  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from planexec.errors import ConfigError, ErrorKind, ToolLoadError  # noqa: E402
from planexec.executor import Executor  # noqa: E402
from planexec.mcp import MCPToolset, load_mcp_config, schema_to_model  # noqa: E402
from planexec.mcp.client import StdioServerConfig, result_value  # noqa: E402
from planexec.parsing import parse_plan  # noqa: E402
from planexec.results import StepStatus  # noqa: E402
from planexec.tools import ToolCatalog  # noqa: E402

pytestmark = pytest.mark.mcp

# A small MCP server with tools that misbehave on purpose.
ODD_SERVER = textwrap.dedent(
    '''
    import os, sys
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    server = MCPServer("odd")

    @server.tool(description="Sleep, then answer.")
    async def nap(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "awake"

    @server.tool(description="Crash the whole server.")
    def die() -> str:
        sys.stderr.write("fatal: disk on fire\\n")
        sys.stderr.flush()
        os._exit(7)

    @server.tool(description="Refuse, with a reason.")
    def refuse(reason: str) -> str:
        raise ToolError(f"refused: {reason}")

    @server.tool(
        description="The first n numbers.",
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    def numbers(n: int) -> list[int]:
        return list(range(n))

    @server.tool(description="Wipe.", annotations=ToolAnnotations(destructive_hint=True))
    def wipe(confirm: bool = False) -> dict[str, bool]:
        return {"wiped": confirm}

    if __name__ == "__main__":
        print("odd server up", file=sys.stderr, flush=True)
        server.run()
    '''
)


@pytest.fixture
def odd_config(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    script = tmp_path / "odd_server.py"
    script.write_text(ODD_SERVER)

    def make(**options: Any) -> dict[str, Any]:
        return {
            "mcpServers": {"odd": {"command": sys.executable, "args": [str(script)], **options}}
        }

    return make


# --------------------------------------------------------------------------- config


def test_a_config_with_stdio_and_http_servers_loads_with_relative_cwd_resolved(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "iot": {"command": "python", "args": ["-m", "x"], "env": {"A": "1"},
                            "cwd": "work"},
                    "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "k"}},
                }
            }
        )
    )
    config = load_mcp_config(path)
    iot = config.servers["iot"]
    assert isinstance(iot, StdioServerConfig)
    assert iot.args == ["-m", "x"] and iot.env == {"A": "1"}
    assert iot.cwd == str(tmp_path.resolve() / "work")
    remote = config.servers["remote"]
    assert getattr(remote, "url") == "http://127.0.0.1:9/mcp"  # noqa: B009
    assert getattr(remote, "headers") == {"X-Key": "k"}  # noqa: B009


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"mcpServers": {"iot": {"command": "python", "argz": []}}}, "argz"),
        ({"mcpServers": {"r": {"url": "http://h/mcp", "header": {}}}}, "header"),
        ({"mcpServers": {}, "extra": 1}, "extra"),
        ({"mcpServers": {}}, "empty"),
        ({"servers": {"iot": {"command": "python"}}}, "mcpServers"),
        ({"mcpServers": {"io.t": {"command": "python"}}}, "io.t"),
        ({"mcpServers": {"r": {"url": "ftp://h/mcp"}}}, "http"),
    ],
)
def test_an_invalid_config_is_a_config_error_naming_the_problem(
    data: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match="invalid MCP config") as info:
        load_mcp_config(data)
    assert words in str(info.value)


def test_a_config_file_that_is_not_json_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text("{mcpServers: ")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_mcp_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_mcp_config(tmp_path / "missing.json")


def test_the_shipped_demo_config_is_valid() -> None:
    from planexec.examples import example_path

    config = load_mcp_config(example_path("mcp.json"))
    assert set(config.servers) == {"iot", "fmsr", "wo"}


# --------------------------------------------------------------------------- schemas


def test_an_input_schema_becomes_a_model_with_required_optional_and_enum_fields() -> None:
    model = schema_to_model(
        "t",
        {
            "type": "object",
            "properties": {
                "site": {"type": "string", "description": "The site."},
                "limit": {"type": "integer", "default": 10},
                "mode": {"enum": ["fast", "slow"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "filter": {"type": "object"},
                "when": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "max-items": {"type": "integer"},
                "schema": {"type": "string"},
            },
            "required": ["site", "max-items"],
        },
    )
    fields = model.model_fields
    assert fields["site"].is_required() and fields["site"].description == "The site."
    assert fields["limit"].default == 10
    ok = model.model_validate({"site": "MAIN", "max-items": "3", "mode": "fast", "schema": "s"})
    assert ok.model_dump(by_alias=True, exclude_unset=True) == {
        "site": "MAIN", "max-items": 3, "mode": "fast", "schema": "s"
    }
    with pytest.raises(ValidationError, match="mode"):
        model.model_validate({"site": "MAIN", "max-items": 1, "mode": "medium"})
    with pytest.raises(ValidationError, match="surprise"):
        model.model_validate({"site": "MAIN", "max-items": 1, "surprise": True})


def test_a_schema_that_allows_additional_properties_accepts_them() -> None:
    model = schema_to_model("t", {"type": "object", "additionalProperties": True})
    assert model.model_validate({"anything": 1}).model_extra == {"anything": 1}


def test_a_wrapped_non_object_result_is_unwrapped_only_when_its_text_matches() -> None:
    wrapped = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="[0, 1]")],
        structured_content={"result": [0, 1]},
    )
    assert result_value(wrapped) == [0, 1]
    real = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="done")],
        structured_content={"result": "ok"},
    )
    assert result_value(real) == {"result": "ok"}


# --------------------------------------------------------------------------- sessions


async def test_demo_server_tools_carry_schemas_hints_and_their_server(
    demo_config: Callable[..., dict[str, Any]],
) -> None:
    async with MCPToolset(demo_config("iot", "wo")) as toolset:
        tools = {(t.metadata or {})["planexec"]["server"] + "." + t.name: t for t in toolset.tools}
        assert {"iot.sites", "iot.assets", "wo.create_work_order"} <= set(tools)
        assert tools["iot.assets"].metadata is not None
        assert tools["iot.assets"].metadata["planexec"]["read_only"] is True
        wo_meta = tools["wo.create_work_order"].metadata or {}
        assert wo_meta["planexec"]["destructive"] is True
        catalog = ToolCatalog(toolset.tools)
        spec = catalog.get("iot.assets")
        assert spec.server == "iot" and spec.required == ["site_name"]
        assert spec.hints.safe and not catalog.get("create_work_order", "wo").hints.safe
        assert catalog.validate("assets", {"site_name": "MAIN"}, "iot") == {"site_name": "MAIN"}
        with pytest.raises(ValidationError):
            catalog.validate("assets", {"site_name": "MAIN", "sitename": "x"}, "iot")
        out = await tools["iot.assets"].ainvoke({"site_name": "MAIN"})
        assert out["site_name"] == "MAIN" and out["count"] == len(out["assets"])
        assert toolset.session("iot").calls == 1


async def test_an_error_result_raises_with_the_servers_message_and_fails_the_step_as_tool_error(
    odd_config: Callable[..., dict[str, Any]],
) -> None:
    async with MCPToolset(odd_config()) as toolset:
        refuse = toolset.tools_for("odd")[2]
        assert refuse.name == "refuse"
        with pytest.raises(ToolException, match="refused: no thanks") as info:
            await refuse.ainvoke({"reason": "no thanks"})
        assert "'odd'" in str(info.value)
        plan = parse_plan(
            '#Task1: refuse\n#Server1: odd\n#Tool1: refuse\n#Args1: {"reason": "policy"}\n'
            "#Dependency1: None\n"
        )
        results = await Executor(ToolCatalog(toolset.tools)).run(plan)
    assert results[0].status is StepStatus.FAILED
    assert results[0].error_kind is ErrorKind.TOOL_ERROR
    assert "refused: policy" in (results[0].error or "")


async def test_annotations_become_hints_and_list_outputs_stay_lists(
    odd_config: Callable[..., dict[str, Any]],
) -> None:
    async with MCPToolset(odd_config()) as toolset:
        tools = {t.name: t for t in toolset.tools}
        assert (tools["numbers"].metadata or {})["planexec"] == {
            "read_only": True, "idempotent": True, "destructive": False, "server": "odd"
        }
        assert (tools["wipe"].metadata or {})["planexec"]["destructive"] is True
        assert await tools["numbers"].ainvoke({"n": 3}) == [0, 1, 2]
        assert await tools["wipe"].ainvoke({}) == {"wiped": False}


async def test_a_server_that_fails_to_start_names_itself_and_its_stderr_tail() -> None:
    config = {
        "mcpServers": {
            "broken": {
                "command": sys.executable,
                "args": [
                    "-c", "import sys; sys.stderr.write('cannot open data.db\\n'); sys.exit(3)"
                ],
            }
        }
    }
    started = time.monotonic()
    with pytest.raises(ToolLoadError) as info:
        async with MCPToolset(config):
            pass
    message = str(info.value)
    assert "'broken'" in message and "failed to start" in message
    assert "cannot open data.db" in message
    assert time.monotonic() - started < 20


async def test_a_missing_command_and_a_silent_server_fail_to_start_within_bounds() -> None:
    with pytest.raises(ToolLoadError, match="'ghost'.*No such file"):
        async with MCPToolset({"mcpServers": {"ghost": {"command": "/no/such/server"}}}):
            pass
    silent = {
        "mcpServers": {
            "mute": {
                "command": sys.executable,
                "args": ["-c", "import sys, time; print('warming up', file=sys.stderr, "
                               "flush=True); time.sleep(60)"],
                "startup_timeout": 0.5,
            }
        }
    }
    started = time.monotonic()
    with pytest.raises(ToolLoadError, match=r"(?s)did not start within 0.5s.*warming up"):
        async with MCPToolset(silent):
            pass
    assert time.monotonic() - started < 15


async def test_without_strict_a_broken_server_is_skipped_and_recorded(
    demo_config: Callable[..., dict[str, Any]],
) -> None:
    config = demo_config(
        "fmsr", extra={"broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(1)"]}}
    )
    async with MCPToolset(config, strict=False) as toolset:
        assert "broken" in toolset.failures
        assert {(t.metadata or {})["planexec"]["server"] for t in toolset.tools} == {"fmsr"}
        [marker] = toolset.markers
        catalog = ToolCatalog([*toolset.tools, *toolset.markers])
    assert set(catalog.unavailable) == {"broken"}
    assert all(s.server == "fmsr" for s in catalog.specs())  # the marker is not a tool
    assert "broken" in (catalog.unavailable_reason("anything", "broken") or "")
    assert "broken" in (catalog.unavailable_reason("broken.anything") or "")
    assert "broken" in (catalog.unavailable_reason("no_such_tool") or "")
    assert catalog.unavailable_reason("failure_modes") is None  # a known tool
    with pytest.raises(ToolException, match="broken"):
        marker.invoke({})


async def test_steps_on_a_server_that_could_not_start_fail_with_tool_error() -> None:
    from planexec.mcp.client import unavailable_marker
    from planexec.testing import fake_tool

    marker = unavailable_marker("down", "MCP server 'down' failed to start\n--- stderr: oops")
    catalog = ToolCatalog([fake_tool("sites", ["MAIN"]), marker])
    plan = parse_plan(
        "#Task1: s\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
        "#Task2: d\n#Server2: down\n#Tool2: sites\n#Args2: {}\n#Dependency2: None\n"
        "#Task3: q\n#Tool3: down.probe\n#Args3: {}\n#Dependency3: None\n"
    )
    results = {r.step_id: r for r in await Executor(catalog).run(plan)}
    assert results[1].status is StepStatus.SUCCEEDED
    for sid in (2, 3):
        assert results[sid].error_kind is ErrorKind.TOOL_ERROR
        assert "oops" in (results[sid].error or "") and "'down'" in (results[sid].error or "")


async def test_a_server_that_dies_mid_run_fails_its_steps_with_tool_error_not_a_hang(
    odd_config: Callable[..., dict[str, Any]],
) -> None:
    plan = parse_plan(
        "#Task1: crash\n#Tool1: die\n#Args1: {}\n#Dependency1: None\n\n"
        '#Task2: count\n#Tool2: numbers\n#Args2: {"n": 2}\n#Dependency2: #S1\n'
    )
    async with MCPToolset(odd_config()) as toolset:
        catalog = ToolCatalog(toolset.tools)
        started = time.monotonic()
        results = {r.step_id: r for r in await Executor(catalog).run(plan)}
        assert time.monotonic() - started < 20
        died = results[1]
        assert died.status is StepStatus.FAILED and died.error_kind is ErrorKind.TOOL_ERROR
        assert "'odd'" in (died.error or "") and "disk on fire" in (died.error or "")
        assert results[2].status is not StepStatus.SUCCEEDED
        # Later calls fail fast with the same story.
        with pytest.raises(ToolException, match="(?s)is not running.*disk on fire"):
            await catalog.get("numbers").tool.ainvoke({"n": 1})
        assert not toolset.session("odd").alive


async def test_a_call_slower_than_its_timeout_fails_as_tool_timeout(
    odd_config: Callable[..., dict[str, Any]],
) -> None:
    plan = parse_plan('#Task1: nap\n#Tool1: nap\n#Args1: {"seconds": 30}\n#Dependency1: None\n')
    async with MCPToolset(odd_config(timeout=0.5)) as toolset:
        started = time.monotonic()
        results = await Executor(ToolCatalog(toolset.tools)).run(plan)
        assert time.monotonic() - started < 15
        # The session survives a timed-out call.
        assert await toolset.tools_for("odd")[3].ainvoke({"n": 1}) == [0]
    assert results[0].error_kind is ErrorKind.TOOL_TIMEOUT
    assert "nap" in (results[0].error or "")


async def test_tools_come_from_a_streamable_http_server_with_headers(
    http_serve_factory: Callable[..., Any],
) -> None:
    served = http_serve_factory("--expose-tools", "--token", "s3cret")
    ok = {"mcpServers": {"remote": {"url": served.url,
                                    "headers": {"Authorization": "Bearer s3cret"}}}}
    async with MCPToolset(ok) as toolset:
        tools = {t.name: t for t in toolset.tools}
        assert {"parse_plan", "sites"} <= set(tools)
        out = await tools["sites"].ainvoke({})
        assert [s["name"] for s in out["sites"]] == ["MAIN", "SITE_B"]
        assert toolset.session("remote").transport == "http"
    wrong = {"mcpServers": {"remote": {"url": served.url,
                                       "headers": {"Authorization": "Bearer nope"}}}}
    with pytest.raises(ToolLoadError, match="'remote'"):
        async with MCPToolset(wrong, startup_timeout=10):
            pass
