"""``planexec serve``: options, the bearer token, and serving tools from MCP servers."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from planexec.cli import main  # noqa: E402

pytestmark = pytest.mark.mcp

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def _post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(
        url,
        data=json.dumps(INIT).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_serve_without_tools_or_mcp_config_exits_with_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve"]) == 2
    assert "--tools MODULE:ATTR or --mcp-config FILE" in capsys.readouterr().err


def test_serve_with_an_invalid_mcp_config_exits_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"iot": {"cmd": "python"}}}')
    assert main(["serve", "--mcp-config", str(config), "--store", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert "mcp.json" in err and "cmd" in err


def test_http_requests_without_the_bearer_token_are_refused(
    http_serve_factory: Callable[..., Any],
) -> None:
    served = http_serve_factory("--token", "s3cret")
    status, headers = _post(served.url, {})
    assert status == 401
    assert headers.get("www-authenticate", headers.get("WWW-Authenticate", "")).startswith(
        "Bearer"
    )
    assert _post(served.url, {"Authorization": "Bearer wrong"})[0] == 401
    assert _post(served.url, {"Authorization": "Bearer s3cret"})[0] == 200
    assert _post(served.url, {"Authorization": "bearer s3cret"})[0] == 200  # RFC 7235
    assert _post(served.url, {"Authorization": "BEARER  s3cret"})[0] == 200
    assert _post(served.url, {"Authorization": "Basic s3cret"})[0] == 401
    assert _post(served.url, {"Authorization": "s3cret"})[0] == 401


async def test_a_wrong_token_is_reported_by_planexecs_client_as_http_401(
    http_serve_factory: Callable[..., Any],
) -> None:
    from planexec.errors import ToolLoadError
    from planexec.mcp import MCPToolset

    served = http_serve_factory("--token", "s3cret")
    config = {"mcpServers": {"pe": {"url": served.url,
                                    "headers": {"Authorization": "Bearer wrong"}}}}
    with pytest.raises(ToolLoadError) as exc:
        async with MCPToolset(config, startup_timeout=20):
            pass
    message = str(exc.value)
    assert "'pe'" in message and "401" in message and "headers.Authorization" in message


async def test_serve_exposes_tools_from_mcp_servers_and_runs_plans_over_them(
    tmp_path: Path,
    demo_config: Callable[..., dict[str, Any]],
    serve_command: Callable[..., tuple[list[str], dict[str, str]]],
) -> None:
    config = tmp_path / "mcp.json"
    pid_log = tmp_path / "pids.txt"
    config.write_text(json.dumps(demo_config("iot", "fmsr", pid_log=pid_log)))
    args, env = serve_command(tmp_path / "runs.sqlite3", "--expose-tools")
    args[args.index("--tools") : args.index("--tools") + 2] = ["--mcp-config", str(config)]
    plan = (
        '#Task1: assets\n#Server1: iot\n#Tool1: assets\n#Args1: {"site_name": "MAIN"}\n'
        "#Dependency1: None\n\n"
        '#Task2: modes\n#Server2: fmsr\n#Tool2: failure_modes\n'
        '#Args2: {"asset_type": "<step_1.assets[0].type>"}\n#Dependency2: #S1\n'
    )
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with Client(params, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"execute_plan", "assets", "failure_modes"} <= names
        result = await client.call_tool("execute_plan", {"text": plan})
        assert not result.is_error
        assert result.structured_content is not None
        assert [r["status"] for r in result.structured_content["results"]] == [
            "SUCCEEDED",
            "SUCCEEDED",
        ]
        assert result.structured_content["results"][1]["args"] == {"asset_type": "chiller"}
        direct = await client.call_tool("sites", {})
        assert not direct.is_error
    assert sorted(line.split()[0] for line in pid_log.read_text().splitlines()) == ["fmsr", "iot"]
