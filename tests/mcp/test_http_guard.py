"""The HTTP guard survives running out of descriptors (issue 25, #12).

When descriptors run out, asyncio's accept loop reports the error to the loop's exception
handler, then pauses accepting for a second. Under load on CI, the default handler's
logger (the MCP SDK's rich handler, which imports a module on its first traceback) needed
a descriptor itself, raised, and the server stopped. `serve` runs uvicorn with
`out_of_descriptors_handler`, which never needs a descriptor to report.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from planexec.mcp import http_guard  # noqa: E402
from planexec.mcp.server import bind_socket  # noqa: E402


class _Raising(logging.Handler):
    """A log handler that fails as rich's did: opening a file with no descriptor left."""

    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        raise OSError(self.code, "Too many open files" if self.code == errno.EMFILE else "no")


@pytest.fixture
def asyncio_log() -> Iterator[list[logging.Handler]]:
    """Handlers put on asyncio's logger for one test (propagation off)."""
    logger = logging.getLogger("asyncio")
    added: list[logging.Handler] = []
    propagate = logger.propagate
    logger.propagate = False
    try:
        yield added
    finally:
        for h in added:
            logger.removeHandler(h)
        logger.propagate = propagate


def _use(added: list[logging.Handler], handler: logging.Handler) -> None:
    logging.getLogger("asyncio").addHandler(handler)
    added.append(handler)


def _accept_failed(code: int) -> dict[str, Any]:
    return {"message": "socket.accept() out of system resource", "exception": OSError(code, "x")}


def test_an_accept_out_of_descriptors_is_one_line_on_stderr_and_nothing_is_logged(
    asyncio_log: list[logging.Handler], capfd: pytest.CaptureFixture[str]
) -> None:
    failing = _Raising(errno.EMFILE)
    _use(asyncio_log, failing)
    loop = asyncio.new_event_loop()
    try:
        http_guard.out_of_descriptors_handler(loop, _accept_failed(errno.EMFILE))
    finally:
        loop.close()
    assert failing.records == []  # the logger was never asked
    err = capfd.readouterr().err
    assert len(err.splitlines()) == 1 and "accepting paused" in err


def test_another_error_is_logged_as_the_default_handler_logs_it(
    asyncio_log: list[logging.Handler],
) -> None:
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    _use(asyncio_log, Keep())
    loop = asyncio.new_event_loop()
    try:
        http_guard.out_of_descriptors_handler(
            loop, {"message": "a callback failed", "exception": ValueError("bad")}
        )
    finally:
        loop.close()
    assert [r.getMessage().splitlines()[0] for r in seen] == ["a callback failed"]


def test_when_logging_an_error_runs_out_of_descriptors_the_handler_still_returns(
    asyncio_log: list[logging.Handler], capfd: pytest.CaptureFixture[str]
) -> None:
    _use(asyncio_log, _Raising(errno.EMFILE))
    loop = asyncio.new_event_loop()
    try:  # must not raise: raising here stopped the server
        http_guard.out_of_descriptors_handler(
            loop, {"message": "a callback failed", "exception": ValueError("bad")}
        )
    finally:
        loop.close()
    err = capfd.readouterr().err
    assert "a callback failed" in err and "not logged" in err


def test_a_logging_failure_of_another_kind_is_not_hidden(
    asyncio_log: list[logging.Handler],
) -> None:
    _use(asyncio_log, _Raising(errno.EACCES))
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(OSError) as raised:
            http_guard.out_of_descriptors_handler(
                loop, {"message": "a callback failed", "exception": ValueError("bad")}
            )
    finally:
        loop.close()
    assert raised.value.errno == errno.EACCES


async def test_serve_puts_the_handler_on_the_loop_while_serving_and_restores_the_old_one() -> None:
    loop = asyncio.get_running_loop()

    def before(_: asyncio.AbstractEventLoop, __: dict[str, Any]) -> None:
        return None

    loop.set_exception_handler(before)
    during: list[object] = []
    ready = asyncio.Event()

    def on_ready(address: str) -> None:
        during.append(loop.get_exception_handler())
        ready.set()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise AssertionError("no request is made")

    sock = bind_socket("127.0.0.1", 0)
    task = asyncio.create_task(
        http_guard.serve(app, sock, address="http://test/", on_ready=on_ready)
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    try:
        assert during == [http_guard.out_of_descriptors_handler]
        assert loop.get_exception_handler() is before
        assert sock.fileno() == -1  # closed when serving ended
    finally:
        loop.set_exception_handler(None)
