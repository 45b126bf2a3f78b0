"""``--tools MODULE:ATTR`` and ``--mcp-config FILE``: where a command's tools come from."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langchain_core.tools import BaseTool

from planexec.commands._args import read_text_file
from planexec.errors import ConfigError, ToolLoadError
from planexec.tools import load_tools

__all__ = ["add_tool_arguments", "open_tools"]


def add_tool_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--tools`` and ``--mcp-config`` (at least one is needed at run time)."""
    parser.add_argument(
        "--tools", metavar="MODULE:ATTR", help="a list of langchain-core tools to use"
    )
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help='tools from MCP servers ({"mcpServers": {...}}); one session per server is '
        "kept open for the whole run (needs planexec[mcp])",
    )


@asynccontextmanager
async def open_tools(args: argparse.Namespace) -> AsyncIterator[list[BaseTool]]:
    """Load the tools named by `add_tool_arguments`; MCP sessions stay open inside.

    An MCP server that fails to start does not stop the command: its error (naming it,
    with its stderr tail) is logged once as a warning, and the tools yielded carry a
    marker for it (`planexec.mcp.client.unavailable_marker`), so that steps using it
    fail with ``TOOL_ERROR`` and that message.

    Raises:
        ConfigError: neither option was given, or the MCP config file cannot be read
            as UTF-8 text.
        ToolLoadError: a module or an MCP server could not give its tools.
    """
    if not args.tools and not args.mcp_config:
        raise ConfigError("give the tools: --tools MODULE:ATTR and/or --mcp-config FILE")
    if args.mcp_config:
        read_text_file(args.mcp_config, "MCP config file")  # a one-line error, up front
    tools = load_tools(args.tools) if args.tools else []
    if not args.mcp_config:
        yield tools
        return
    from planexec.mcp import MCPToolset

    async with MCPToolset(args.mcp_config, strict=False) as toolset:
        if not toolset.tools and toolset.failures and not tools:
            raise ToolLoadError(
                "no MCP server of the config could start:\n" + "\n".join(toolset.failures.values())
            )
        yield [*tools, *toolset.tools, *toolset.markers]
