"""``planexec console``: a local web app to read runs and decide approvals in a browser.

It reads any run store: the runs (waiting approvals first, filtered by status, updated
live while runs execute), one run (its plans as text and graph, each step's arguments
with how each was resolved and where its value was found, errors with their kind, the
timeline), and a waiting step's request (tool, resolved arguments, why it needs
approval, the schema), with approve / edit / reject forms that record decisions through
the same code as ``planexec runs approve|reject``, and a button that resumes the run as
``planexec runs resume`` does. See ``docs/console.md``.

Security is that of ``planexec serve --http``: loopback by default, the ``Host`` and
``Origin`` checks on every request, a token required off loopback, a deadline on each
request's headers (`planexec.mcp.http_guard`), and a CSRF token on every form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planexec.console._app import ConsoleSettings, create_app
from planexec.errors import ConfigError
from planexec.mcp import http_guard
from planexec.mcp.principals import Principals
from planexec.store import RunStore

__all__ = ["ConsoleSettings", "create_app", "serve_console"]


async def serve_console(
    store: RunStore,
    *,
    host: str = "127.0.0.1",
    port: int = 8780,
    token: str | None = None,
    principals: Principals | None = None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    on_ready: Callable[[str], None] | None = None,
    header_timeout: float = http_guard.HEADER_TIMEOUT,
) -> None:
    """Serve the console until stopped.

    Args:
        store: The run store to read and record decisions in.
        host: The address to bind (loopback by default).
        port: The port (0: any free port; ``on_ready`` gets the address).
        token: Require this token (needed off loopback).
        principals: Tokens that name principals (`planexec.mcp.principals`): each sees
            the runs the store records as theirs, an admin every run.
        allowed_hosts: More ``Host`` values to accept (a reverse proxy's name).
        allowed_origins: More ``Origin`` values to accept.
        on_ready: Called with the console's address once it listens.
        header_timeout: Seconds a request may take to send its headers (a slower
            connection is closed, as for ``planexec serve --http``).

    Raises:
        ConfigError: a non-loopback address without a token, or an address that cannot
            be bound.
    """
    from planexec.mcp.server import allowed_hosts_for, bind_socket, host_header, is_loopback

    if not is_loopback(host) and not token and principals is None:
        raise ConfigError(
            f"the console would listen on {host}, which is not loopback: give --token "
            "(or listen on 127.0.0.1)"
        )
    sock = bind_socket(host, port)
    bound = int(sock.getsockname()[1])
    security = allowed_hosts_for(
        host, bound, extra_hosts=allowed_hosts, extra_origins=allowed_origins
    )
    settings = ConsoleSettings(
        store=store,
        allowed_hosts=frozenset(security.allowed_hosts),
        allowed_origins=frozenset(security.allowed_origins),
        token=token,
        principals=principals,
    )
    try:
        await http_guard.serve(
            create_app(settings),
            sock,
            address=f"http://{host_header(host)}:{bound}/",
            header_timeout=header_timeout,
            on_ready=on_ready,
        )
    finally:
        for resume in list(settings.resumes.values()):
            resume.cancel()
