"""OAuth for HTTP MCP servers: the client credentials grant, through the MCP SDK's client auth.

The server here is an MCP server behind OAuth (the SDK's resource-server support: a
``401`` naming its protected resource metadata) with a small authorization server in
the same app, whose token endpoint logs every request. The conformance runner's
``auth/client-credentials-basic`` and ``auth/pre-registration`` scenarios check the same
flow against servers nobody on the project wrote (``.ci/conformance.sh``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from planexec.errors import ConfigError, ToolLoadError  # noqa: E402
from planexec.mcp import MCPToolset  # noqa: E402
from planexec.mcp.client import load_mcp_config  # noqa: E402

pytestmark = pytest.mark.mcp

GUARDED_SERVER = textwrap.dedent(
    """
    # An MCP server behind OAuth, and its authorization server (client credentials), in one app.
    import base64, json, sys
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer

    PORT, LOG = int(sys.argv[1]), sys.argv[2]
    BASE = f"http://127.0.0.1:{PORT}"
    ISSUED: dict[str, list[str]] = {}


    class Verifier:
        async def verify_token(self, token: str) -> AccessToken | None:
            scopes = ISSUED.get(token)
            if scopes is None:
                return None
            return AccessToken(
                token=token, client_id="planner", scopes=scopes, resource=f"{BASE}/mcp"
            )


    server = MCPServer(
        "guarded", token_verifier=Verifier(),
        auth=AuthSettings(issuer_url=BASE, resource_server_url=f"{BASE}/mcp",
                          required_scopes=["tools:read"], validate_token_resource=True),
    )


    @server.tool(description="Say hello.")
    def hello(name: str) -> str:
        return f"hello {name}"


    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse({
            "issuer": BASE, "token_endpoint": f"{BASE}/token",
            "authorization_endpoint": f"{BASE}/authorize", "response_types_supported": ["code"],
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        })


    async def token(request: Request) -> JSONResponse:
        form = await request.form()
        auth = request.headers.get("authorization", "")
        who = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else None
        with open(LOG, "a") as f:
            asked = {"grant": form.get("grant_type"), "client": who,
                     "scope": form.get("scope"), "resource": form.get("resource")}
            f.write(json.dumps(asked) + "\\n")
        if who != "planner:s3cret":
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        value = f"tok-{len(ISSUED) + 1}"
        ISSUED[value] = str(form.get("scope") or "").split()
        return JSONResponse({"access_token": value, "token_type": "Bearer", "expires_in": 3600,
                             "scope": form.get("scope") or ""})


    app = server.streamable_http_app()
    app.router.routes.append(Route("/.well-known/oauth-authorization-server", metadata))
    app.router.routes.append(Route("/token", token, methods=["POST"]))
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
    """
)


class Guarded:
    """The guarded server in a subprocess on a free loopback port."""

    def __init__(self, tmp: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        script = tmp / "guarded_server.py"
        script.write_text(GUARDED_SERVER)
        self.log = tmp / "tokens.jsonl"
        self.log.touch()
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(self.port), str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"the guarded server exited: {err}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("the guarded server did not listen within 30s")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self, **auth: Any) -> dict[str, Any]:
        oauth = {"type": "oauth", "client_id": "planner", "client_secret_env": "GUARDED_SECRET",
                 "scopes": ["tools:read"], "issuer": self.base, **auth}
        return {"mcpServers": {"guarded": {"url": f"{self.base}/mcp", "auth": oauth}}}

    def token_requests(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Guarded]:
    server = Guarded(tmp_path)
    try:
        yield server
    finally:
        server.stop()


async def test_client_credentials_get_a_token_and_the_calls_carry_it(
    guarded: Guarded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUARDED_SECRET", "s3cret")
    async with MCPToolset(guarded.config()) as toolset:
        [hello] = toolset.tools
        assert await hello.ainvoke({"name": "Ada"}) == "hello Ada"
        assert await hello.ainvoke({"name": "Bob"}) == "hello Bob"
    # one token for the session (kept in memory), asked with the client's credentials
    assert guarded.token_requests() == [{
        "grant": "client_credentials", "client": "planner:s3cret", "scope": "tools:read",
        "resource": f"{guarded.base}/mcp",
    }]


async def test_a_wrong_secret_fails_loading_naming_the_server(
    guarded: Guarded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUARDED_SECRET", "wrong")
    with pytest.raises(ToolLoadError, match="guarded"):
        async with MCPToolset(guarded.config()):
            pass
    assert [r["client"] for r in guarded.token_requests()] == ["planner:wrong"]


async def test_an_unset_secret_fails_loading_naming_the_variable_and_asks_nothing(
    guarded: Guarded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GUARDED_SECRET", raising=False)
    with pytest.raises(ToolLoadError, match="GUARDED_SECRET"):
        async with MCPToolset(guarded.config()):
            pass
    assert guarded.token_requests() == []


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ({"headers": {"Authorization": "Bearer x"}}, "both set"),
        ({"auth": {"grant": "authorization_code"}}, "grant"),
        ({"auth": {"client_secret": "in the file"}}, "client_secret"),
        ({"auth": {"client_id": ""}}, "client_id"),
    ],
)
def test_an_auth_config_that_cannot_be_used_is_refused(
    server: dict[str, Any], words: str
) -> None:
    auth = {"type": "oauth", "client_id": "planner", "client_secret_env": "S",
            **server.get("auth", {})}
    entry: dict[str, Any] = {"url": "http://127.0.0.1:9/mcp", "auth": auth}
    entry.update({k: v for k, v in server.items() if k != "auth"})
    with pytest.raises(ConfigError, match=words):
        load_mcp_config({"mcpServers": {"guarded": entry}})
