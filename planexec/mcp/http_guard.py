"""A deadline on HTTP request headers for ``planexec serve --http``.

uvicorn holds a connection whose request never completes its headers for as long as the
client keeps it open (its keep-alive timer only runs between requests, and any byte
received resets it): a few hundred such connections exhaust the process's descriptors,
and the server refuses everyone else for as long as they stay open.

`header_deadline_protocol` gives uvicorn an HTTP/1.1 protocol (its own h11 one) that
closes a connection whose request headers are not complete ``timeout`` seconds after the
connection opened, or after the previous response on a kept-alive connection. Bytes
trickling in do not extend the deadline. Once such connections are dropped their
descriptors are free, and the server accepts again.

It also keeps the process clear of its descriptor limit: a connection beyond
`max_connections` (the soft ``RLIMIT_NOFILE`` less a reserve for the process's own
files) is closed as soon as it is accepted, and the listening backlog (how many connections
one accept round takes before those run) is kept within the reserve. Running out of
descriptors would make asyncio's accept loop spin on ``EMFILE`` (it re-arms itself once
per queued connection), starving the very timers that free them. `uvicorn_options`
gives both to ``uvicorn.Config``.

Descriptors can still run out for a moment (one accept round takes up to ``backlog``
connections before any of them is counted). asyncio then pauses accepting for a second
and resumes, but only after logging the error, and a logger that needs a descriptor of
its own to format it (the MCP SDK's rich handler imports a module on its first traceback)
raised out of the accept loop and stopped the server. `serve` runs uvicorn with
`out_of_descriptors_handler` on its loop: the error is one line written to stderr's
descriptor, never a file opened, and the accept loop pauses and resumes as designed.
`serve` is the one way ``planexec serve --http`` and ``planexec console`` run uvicorn.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, Literal

__all__ = [
    "HEADER_TIMEOUT",
    "header_deadline_protocol",
    "max_connections",
    "out_of_descriptors_handler",
    "serve",
    "uvicorn_options",
]

HEADER_TIMEOUT = 10.0
"""Seconds a request may take to send its headers (``planexec serve --header-timeout``)."""


def _soft_limit() -> int:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def max_connections() -> int:
    """Connections the process can hold without running out of descriptors.

    The soft ``RLIMIT_NOFILE`` less a reserve (an eighth of it, at least 32) for the
    process's own files (the store, logs, pipes, MCP client sessions) and one accept
    round.
    """
    soft = _soft_limit()
    return max(1, soft - max(32, soft // 8))


def uvicorn_options(timeout: float) -> dict[str, Any]:
    """``uvicorn.Config`` options: the header deadline and a backlog within the reserve."""
    reserve = _soft_limit() - max_connections()
    return {
        "http": header_deadline_protocol(timeout),
        "backlog": max(4, min(2048, reserve // 2)),
    }


def header_deadline_protocol(
    timeout: float, limit: int | None = None
) -> type[asyncio.Protocol]:
    """The h11 protocol of uvicorn, closing connections whose headers take over ``timeout`` s.

    Args:
        timeout: Seconds from the connection (or the previous response) to the end of
            the request's headers.
        limit: Open connections at most (`max_connections` by default); one more is
            closed as soon as it is accepted.

    Returns:
        A protocol class for ``uvicorn.Config(http=...)``.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    most = max_connections() if limit is None else limit

    class HeaderDeadline(H11Protocol):
        """H11Protocol with a deadline on each request's headers."""

        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # noqa: D102
            super().connection_made(transport)
            if len(self.connections) > most:  # over capacity: free the descriptor now
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:  # noqa: D102
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the request line and headers are in
                self._disarm()

        def on_response_complete(self) -> None:  # noqa: D102
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.logger.warning(
                    "closing a connection whose request headers took over %ss", timeout
                )
                self.transport.close()

    return HeaderDeadline


_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _say(line: str) -> None:
    """Write one line to stderr's descriptor: no file opened, no module imported."""
    try:
        os.write(sys.stderr.fileno(), line.encode(errors="replace") + b"\n")
    except (OSError, ValueError):  # stderr closed or not a file: nowhere to say it
        pass


def out_of_descriptors_handler(
    loop: asyncio.AbstractEventLoop, context: dict[str, Any]
) -> None:
    """An event loop exception handler that survives running out of descriptors.

    An accept failing for want of descriptors (``EMFILE``, ``ENFILE``, ``ENOBUFS``,
    ``ENOMEM``) is one line on stderr; asyncio then pauses accepting for a second. Every
    other context goes to the loop's default handler; if logging it fails for want of
    descriptors too, one line on stderr says what could not be logged.
    """
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS:
        _say(f"planexec: {exc.strerror or exc}: accepting paused for a second")
        return
    try:
        loop.default_exception_handler(context)
    except OSError as failure:
        if failure.errno not in _OUT_OF_DESCRIPTORS:
            raise
        _say(f"planexec: {context.get('message', 'error')} (not logged: {failure.strerror})")


async def serve(
    app: Any,
    sock: socket.socket,
    *,
    address: str,
    header_timeout: float = HEADER_TIMEOUT,
    lifespan: Literal["on", "off"] = "off",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve an ASGI app with uvicorn on a bound socket until stopped, guarded.

    The header deadline and connection cap of `uvicorn_options`, and
    `out_of_descriptors_handler` on the running loop for as long as it serves.

    Args:
        app: The ASGI app.
        sock: A bound socket (it is closed when serving ends).
        address: What ``on_ready`` is told once the server listens.
        header_timeout: Seconds a request may take to send its headers.
        lifespan: Run the app's lifespan (``on``) or not.
        on_ready: Called with ``address`` once the server listens.
    """
    import uvicorn

    userver = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", lifespan=lifespan, **uvicorn_options(header_timeout)
        )
    )
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(out_of_descriptors_handler)

    async def announce() -> None:
        for _ in range(600):  # bounded: 30 s
            if userver.started:
                if on_ready:
                    on_ready(address)
                return
            await asyncio.sleep(0.05)

    task = asyncio.create_task(announce())
    try:
        await userver.serve(sockets=[sock])
    finally:
        task.cancel()
        sock.close()
        loop.set_exception_handler(previous)
