"""A tiny stdio MCP server for the langchain-mcp-adapters test (mcp<2's FastMCP).

``assets`` and ``sensors`` are read-only; ``sensors`` fails its first call (then
succeeds); ``wipe`` is destructive and fails its first call. Outputs are dicts, so the
server answers them as structured content.
"""

from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("adapter-demo")
calls: dict[str, int] = {}


def _count(name: str) -> int:
    calls[name] = calls.get(name, 0) + 1
    return calls[name]


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False))
def assets(site_name: str) -> dict[str, Any]:
    """The assets of a site."""
    return {"site": site_name, "assets": [{"id": "CH-6", "name": "Chiller 6"},
                                          {"id": "CH-9", "name": "Chiller 9"}]}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False))
def sensors(site_name: str, asset_id: str) -> dict[str, Any]:
    """The sensors of an asset (busy on its first call)."""
    n = _count("sensors")
    if n == 1:
        raise RuntimeError(f"sensors is busy (call {n})")
    return {"asset_id": asset_id, "sensors": ["Supply Temperature"], "call": n}


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                         idempotentHint=False))
def wipe(asset_id: str) -> dict[str, Any]:
    """Erase an asset's history (fails on its first call)."""
    n = _count("wipe")
    if n == 1:
        raise RuntimeError(f"wipe failed half-way (call {n})")
    return {"asset_id": asset_id, "wiped": True, "call": n}


if __name__ == "__main__":
    server.run("stdio")
