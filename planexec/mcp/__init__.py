"""MCP both ways: tools from MCP servers, and planexec as an MCP server.

This package needs the ``mcp`` extra (``pip install "planexec[mcp]"``); importing it
without the extra raises `planexec.errors.MissingExtraError` with that command.
Importing `planexec` itself never imports the MCP SDK.

- `planexec.mcp.client`: `load_mcp_config`, `MCPToolset` (one persistent session per
  server, its tools as langchain-core tools).
- `planexec.mcp.server`: `build_server` (``planexec serve``).
"""

from __future__ import annotations

from planexec.errors import require_extra

require_extra("mcp", "mcp")

from planexec.mcp.client import (  # noqa: E402
    HTTPServerConfig,
    MCPArgumentsError,
    MCPConfig,
    MCPServerSession,
    MCPSessionPool,
    MCPToolset,
    StdioServerConfig,
    load_mcp_config,
    mcp_tool_to_langchain,
    schema_to_model,
)

__all__ = [
    "HTTPServerConfig",
    "MCPArgumentsError",
    "MCPConfig",
    "MCPServerSession",
    "MCPSessionPool",
    "MCPToolset",
    "StdioServerConfig",
    "load_mcp_config",
    "mcp_tool_to_langchain",
    "schema_to_model",
]
