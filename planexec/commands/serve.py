"""``planexec serve``: planexec as an MCP server (stdio, or streamable HTTP on request)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from planexec.commands._args import port_number
from planexec.errors import ConfigError

__all__ = ["TOKEN_ENV", "register"]

TOKEN_ENV = "PLANEXEC_SERVE_TOKEN"
"""Environment variable holding the bearer token for ``--http`` (same as ``--token``)."""


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand."""
    p = subparsers.add_parser(
        "serve",
        help="run planexec as an MCP server",
        description=(
            "Expose parse_plan, validate_plan, execute_plan, ask, get_run, approve_step, "
            "reject_step, cancel_run and resume_run as MCP tools, over stdio (default) or "
            "streamable HTTP (--http, bound to 127.0.0.1)."
        ),
    )
    p.add_argument("--tools", metavar="MODULE:ATTR", help="tools plans may call")
    p.add_argument(
        "--mcp-config", metavar="FILE", help="MCP servers whose tools plans may call (JSON)"
    )
    p.add_argument("--model", metavar="SPEC", help="chat model for ask and the resolver fallback")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="agent settings (.toml or .yaml) for execute_plan and ask: model timeout, "
        "retries and breaker, limits, executor settings",
    )
    p.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8000, help="HTTP port (default 8000)")
    p.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="close an HTTP connection whose request headers are not complete within "
        "SECONDS (default 10)",
    )
    p.add_argument(
        "--token",
        default=None,
        help=f"require 'Authorization: Bearer TOKEN' on HTTP requests (or set ${TOKEN_ENV})",
    )
    p.add_argument(
        "--tokens",
        metavar="FILE",
        default=None,
        help="principals and their bearer tokens for --http (JSON or TOML: "
        '{"tokens": {"alice": "...", "ops": "..."}, "admins": ["ops"]}): a run belongs to '
        "the principal that started it, and other principals get 'no run' for it",
    )
    p.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="NAME",
        help="a principal of --tokens that may read and decide every run (repeatable)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="also accept this Host header on HTTP requests (repeatable; 'name:*' for any "
        "port). The bind address with its port (and, on loopback, localhost) is always "
        "accepted; any other Host is refused (DNS-rebinding protection)",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also accept this Origin header on HTTP requests (repeatable), e.g. "
        "https://app.example.com",
    )
    p.add_argument(
        "--max-plan-chars",
        type=int,
        default=None,
        metavar="N",
        help="the longest plan text parse_plan, validate_plan and execute_plan accept "
        "(default 200000 characters)",
    )
    p.add_argument(
        "--expose-tools", action="store_true", help="also expose the underlying tools themselves"
    )
    p.add_argument(
        "--store", metavar="PATH|URL",
        help="run store: a file, or a postgresql:// URL shared by several replicas "
        "(default: the user's run store)",
    )
    p.add_argument(
        "--all-runs",
        action="store_true",
        help="let get_run return any run of the store (by default only the runs this server "
        "made: the store may hold the user's other runs)",
    )
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Run the server until it is stopped; returns the exit code."""
    from planexec.errors import require_extra

    require_extra("mcp", "mcp")
    from planexec._log import logger
    from planexec.mcp.client import MCPToolset
    from planexec.mcp.server import MAX_PLAN_CHARS, build_server, is_loopback, serve
    from planexec.runs import tool_source
    from planexec.store import open_store
    from planexec.tools import load_tools

    if not args.tools and not args.mcp_config:
        raise ConfigError("planexec serve needs --tools MODULE:ATTR or --mcp-config FILE")
    token: Any = args.token or os.environ.get(TOKEN_ENV) or None
    admins: frozenset[str] = frozenset()
    if args.admin and not args.tokens:
        raise ConfigError("--admin names a principal of --tokens FILE; give the file")
    if args.tokens:
        from planexec.mcp.principals import load_principals

        if args.token:
            raise ConfigError("give --token or --tokens, not both")
        principals = load_principals(args.tokens, args.admin)
        token, admins = principals.tokens, principals.admins
    if args.http and not is_loopback(args.host) and not token:
        raise ConfigError(
            f"refusing to serve on {args.host} without a token: anyone who can reach it could "
            f"run the tools; pass --token TOKEN (or set {TOKEN_ENV}), or bind a loopback address"
        )
    max_plan_chars = args.max_plan_chars if args.max_plan_chars is not None else MAX_PLAN_CHARS
    if max_plan_chars < 1:
        raise ConfigError(f"--max-plan-chars must be positive, not {max_plan_chars}")
    if token and not args.http:
        logger.bind(run_id="-", step_id=None).warning(
            "--token only applies to --http; stdio needs none"
        )
    config = None
    if args.config:
        from planexec.config import load_config

        config = load_config(args.config)  # read before serving: a bad file fails at once
    tools = load_tools(args.tools) if args.tools else []
    toolset = MCPToolset(args.mcp_config) if args.mcp_config else None
    model = None
    if args.model:
        from planexec.models import load_model

        model = load_model(args.model)
    store = open_store(args.store or (config.store.url if config is not None else None))

    source = tool_source(args.tools, args.mcp_config)

    def factory(all_tools: list[Any]) -> Any:
        return build_server(
            all_tools,
            model=model,
            store=store,
            expose_tools=args.expose_tools,
            tool_source=source,
            all_runs=args.all_runs,
            config=config,
            max_plan_chars=max_plan_chars,
            admins=admins,
        )

    def ready(endpoint: str) -> None:
        if endpoint != "stdio":
            auth = " (bearer token required)" if token else ""
            print(f"planexec: serving MCP at {endpoint}{auth}", file=sys.stderr, flush=True)

    try:
        asyncio.run(
            serve(
                factory,
                tools=tools,
                toolset=toolset,
                http=args.http,
                host=args.host,
                port=args.port,
                token=token if args.http else None,
                allowed_hosts=args.allowed_host,
                allowed_origins=args.allowed_origin,
                on_ready=ready,
                header_timeout=args.header_timeout,
            )
        )
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()
    return 0
