"""The demo domain's tools as MCP servers: ``python -m planexec.examples.mcp_server iot``.

One process serves one demo server's tools (``iot``, ``fmsr`` or ``wo``; see
`planexec.examples.tools`) over stdio, or over streamable HTTP with ``--http``::

    python -m planexec.examples.mcp_server iot
    python -m planexec.examples.mcp_server fmsr --http --port 8001

``planexec/examples/mcp.json`` configures all three (for `planexec.mcp.MCPToolset` and
``planexec serve --mcp-config``).

When the environment variable ``PLANEXEC_MCP_PID_LOG`` names a file, the process appends
one line ``<server> <pid>`` to it when it starts (tests use it to check that each server
is started once per run). Diagnostics go to stderr; stdout carries only the protocol.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["PID_LOG_ENV", "build_demo_server", "main"]

PID_LOG_ENV = "PLANEXEC_MCP_PID_LOG"
"""Environment variable naming a file where each started server appends ``name pid``."""


def build_demo_server(name: str) -> object:
    """Build the MCP server for one demo server's tools.

    Raises:
        KeyError: not a demo server.
    """
    from planexec.examples.tools import tools_for_server
    from planexec.mcp.server import tools_server

    return tools_server(
        tools_for_server(name),
        name=f"planexec-demo-{name}",
        instructions=f"The planexec demo domain's {name!r} tools.",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one demo MCP server until its client disconnects (stdio) or it is stopped."""
    from planexec.examples.tools import SERVERS

    parser = argparse.ArgumentParser(
        prog="python -m planexec.examples.mcp_server",
        description="Serve one demo server's tools over MCP (stdio by default).",
    )
    parser.add_argument("server", choices=SERVERS, help="which demo server")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port")
    args = parser.parse_args(argv)

    pid_log = os.environ.get(PID_LOG_ENV)
    if pid_log:
        with open(pid_log, "a", encoding="utf-8") as f:
            f.write(f"{args.server} {os.getpid()}\n")
    server = build_demo_server(args.server)
    print(f"planexec demo MCP server {args.server!r} (pid {os.getpid()})", file=sys.stderr)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)  # type: ignore[attr-defined]
        return 0
    server.run()  # type: ignore[attr-defined]
    # The client closed stdin: the session is over. Exit now rather than wait ~2 s for the
    # SDK's idle stdin worker thread to be joined at interpreter shutdown (the client
    # would otherwise wait out its grace period and signal the process).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
