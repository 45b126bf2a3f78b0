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
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HEADER_TIMEOUT", "header_deadline_protocol", "max_connections", "uvicorn_options"]

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
