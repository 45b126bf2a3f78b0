"""``planexec serve --http`` and ``planexec console`` drop connections that never finish
their headers (issue 25, #12).

The server runs with a lowered descriptor limit (``RLIMIT_NOFILE``, set in the child
before it starts); more connections than it has descriptors send half a request and
hold. They must be closed after the header timeout, and the server must serve again.
Under CPU load, accept rounds can run out of descriptors before their connections are
counted: the server must survive that too (`tests/mcp/test_http_guard.py`).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

pytestmark = pytest.mark.mcp

FD_LIMIT = 64
"""Descriptors the server process may hold: well under the connections below."""
HELD = 120
"""Connections that send part of their headers and hold."""
HEADER_TIMEOUT = "1"
WAIT = 90.0
"""Seconds (bounded) for the server to serve again."""

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _limit_fds() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _request(url: str) -> int:
    """The MCP endpoint gets an ``initialize`` post, the console a page."""
    request = urllib.request.Request(
        url,
        data=json.dumps(INIT).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        method="POST",
    ) if url.endswith("/mcp") else urllib.request.Request(url)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _serves(url: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if _request(url) == 200:
                return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    return False


@pytest.fixture(params=["serve", "console"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = dict(os.environ)
    env.pop("PLANEXEC_SERVE_TOKEN", None)
    env.pop("PLANEXEC_CONSOLE_TOKEN", None)
    log = (tmp_path / "serve.log").open("wb")
    store = ["--store", str(tmp_path / "runs.sqlite3")]
    limits = ["--port", str(port), "--header-timeout", HEADER_TIMEOUT]
    if request.param == "serve":
        command = ["serve", "--tools", "planexec.examples.tools:TOOLS", *store, "--http"]
        url = f"http://127.0.0.1:{port}/mcp"
    else:
        command = ["console", *store]
        url = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen(
        [sys.executable, "-m", "planexec.cli", *command, *limits],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=env,
        preexec_fn=_limit_fds,  # noqa: PLW1509 - a single-threaded setrlimit
    )
    try:
        if not _serves(url, WAIT):
            pytest.fail("the server never served:\n" + (tmp_path / "serve.log").read_text())
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def test_connections_that_never_finish_their_headers_are_dropped_and_it_serves_again(
    server: str,
) -> None:
    port = int(server.split(":")[2].split("/")[0])  # http://127.0.0.1:PORT/...
    held: list[socket.socket] = []
    try:
        for _ in range(HELD):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:  # the server's backlog is short while it is full
                continue
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            held.append(s)
        assert len(held) > FD_LIMIT  # more than the server has descriptors for
        # more connections than descriptors: some wait in the backlog; once the
        # server drops the slow ones it accepts the rest, drops those too, and serves
        assert _serves(server, WAIT), "the server did not serve again"
        # the connections it accepted were closed by the server (EOF), never answered
        closed = 0
        for s in held:
            s.settimeout(WAIT)
            try:
                if s.recv(1024) == b"":
                    closed += 1
            except (TimeoutError, ConnectionResetError):
                pass
        assert closed >= FD_LIMIT // 2, closed
    finally:
        for s in held:
            s.close()
