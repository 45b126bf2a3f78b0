"""The MCP conformance runner's client: planexec's MCP client (`MCPToolset`).

The runner starts a test server and runs ``python .ci/mcp_conformance_client.py URL``
with ``MCP_CONFORMANCE_SCENARIO`` set. This opens a toolset on the URL (initialize and
tools/list, as planexec does), then calls every tool the server lists, through the
langchain tool planexec built for it (so its arguments are checked against the
server's schema first), with the arguments the scenario's tool asks for.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from planexec.mcp import MCPToolset

ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 2, "b": 3}}
"""Arguments for the conformance servers' tools (the others take none)."""


def server_config(url: str) -> dict[str, Any]:
    """The server's config; with OAuth client credentials when the scenario gives them.

    The runner passes a scenario's context (``MCP_CONFORMANCE_CONTEXT``, JSON): the auth
    scenarios' ``client_id`` and ``client_secret``. The secret goes through the
    environment, as a planexec config names it (``auth.client_secret_env``).
    """
    server: dict[str, Any] = {"url": url, "timeout": 30}
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    if context.get("client_id") and context.get("client_secret"):
        os.environ["CONFORMANCE_CLIENT_SECRET"] = str(context["client_secret"])
        server["auth"] = {
            "type": "oauth",
            "client_id": str(context["client_id"]),
            "client_secret_env": "CONFORMANCE_CLIENT_SECRET",
        }
    return server


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    config = {"mcpServers": {"conformance": server_config(url)}}
    async with MCPToolset(config) as toolset:
        for tool in toolset.tools:
            out = await tool.ainvoke(ARGUMENTS.get(tool.name, {}))
            print(f"{scenario}: {tool.name} -> {out!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
