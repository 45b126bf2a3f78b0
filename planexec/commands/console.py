"""``planexec console``: the runs console in the browser (see `planexec.console`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from planexec.commands._args import port_number
from planexec.commands.runs import add_store_arguments
from planexec.errors import ConfigError, require_extra

__all__ = ["TOKEN_ENV", "register"]

TOKEN_ENV = "PLANEXEC_CONSOLE_TOKEN"
"""Environment variable holding the console's token (same as ``--token``)."""


def register(subparsers: Any) -> None:
    """Add the ``console`` subcommand."""
    p = subparsers.add_parser(
        "console",
        help="the runs console in the browser: runs, plans, timelines, approvals",
        description=(
            "Serve a local web page over the run store: every run (waiting approvals "
            "first, live), a run's plan, steps, provenance and timeline, and the approve / "
            "edit / reject forms of waiting steps (the same checks as 'planexec runs "
            "approve|reject'), with a button to resume."
        ),
    )
    add_store_arguments(p, allow_disable=False)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8780, help="port (default 8780; 0: any)")
    p.add_argument(
        "--token",
        default=None,
        help=f"require this token (needed off loopback; or set ${TOKEN_ENV}); a browser "
        "logs in once at /login?token=TOKEN",
    )
    p.add_argument(
        "--tokens",
        metavar="FILE",
        default=None,
        help="principals and their tokens (the file `planexec serve --tokens` reads): each "
        "sees only the runs the store records as theirs; admins see every run",
    )
    p.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="NAME",
        help="a principal of --tokens that sees every run (repeatable)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="close a connection whose request headers are not complete within SECONDS "
        "(default 10)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="also accept this Host header (a reverse proxy's name; repeatable)",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also accept this Origin on form posts (repeatable)",
    )
    p.set_defaults(func=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    """Handle ``planexec console``."""
    require_extra("starlette", "mcp")
    from planexec.console import serve_console
    from planexec.mcp.http_guard import HEADER_TIMEOUT
    from planexec.store import open_store

    token = args.token or os.environ.get(TOKEN_ENV) or None
    principals = None
    if args.admin and not args.tokens:
        raise ConfigError("--admin names a principal of --tokens FILE; give the file")
    if args.tokens:
        from planexec.mcp.principals import load_principals

        if token:
            raise ConfigError("give --token or --tokens, not both")
        principals = load_principals(args.tokens, args.admin)
    store = open_store(args.store)

    def ready(address: str) -> None:
        print(f"planexec console: {address}", file=sys.stderr, flush=True)

    try:
        asyncio.run(
            serve_console(
                store,
                host=args.host,
                port=args.port,
                token=token,
                principals=principals,
                allowed_hosts=args.allowed_host,
                allowed_origins=args.allowed_origin,
                on_ready=ready,
                header_timeout=(
                    HEADER_TIMEOUT if args.header_timeout is None else args.header_timeout
                ),
            )
        )
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return 0
