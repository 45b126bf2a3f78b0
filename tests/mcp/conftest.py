"""Fixtures and helpers for the MCP tests (skipped when the MCP SDK is not installed).

Tests run with ``--import-mode=importlib``, so helpers reach tests as fixtures.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

DEMO_PLAN_TOOLS = "planexec.examples.tools:TOOLS"


def demo_server_config(
    *names: str, pid_log: Path | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An MCP config running the demo servers with this interpreter."""
    env = {"PLANEXEC_MCP_PID_LOG": str(pid_log)} if pid_log else {}
    servers: dict[str, Any] = {
        n: {
            "command": sys.executable,
            "args": ["-m", "planexec.examples.mcp_server", n],
            "env": env,
        }
        for n in names
    }
    servers.update(extra or {})
    return {"mcpServers": servers}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Poll until something listens on the port (bounded); fail if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"server exited with {proc.returncode}:\n{out}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on port {port} within {timeout}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def serve_args(store: Path, *extra: str) -> list[str]:
    return [
        "-m", "planexec.cli", "serve", "--tools", DEMO_PLAN_TOOLS, "--store", str(store), *extra
    ]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PLANEXEC_SERVE_TOKEN", None)
    return env


class HTTPServe:
    """A ``planexec serve --http`` subprocess on a free loopback port."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *serve_args(tmp / "runs.sqlite3", "--http", "--port", str(self.port), *extra),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        wait_for_port(self.port, self.proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"




@pytest.fixture
def demo_config() -> Callable[..., dict[str, Any]]:
    """``demo_config("iot", "fmsr", pid_log=path)``: an MCP config for the demo servers."""
    return demo_server_config


@pytest.fixture
def serve_command() -> Callable[..., tuple[list[str], dict[str, str]]]:
    """``serve_command(store, *extra)``: argv (after the interpreter) and env for serve."""

    def make(store: Path, *extra: str) -> tuple[list[str], dict[str, str]]:
        return serve_args(store, *extra), child_env()

    return make


@pytest.fixture
def http_serve_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[HTTPServe] = []

    def start(*extra: str) -> HTTPServe:
        server = HTTPServe(tmp_path, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        stop(server.proc)
