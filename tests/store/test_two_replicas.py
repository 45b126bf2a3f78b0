"""Two ``planexec serve --http`` replicas on one PostgreSQL database (issue 30, item 5).

A run pauses for approval on replica A, is approved through replica B, and both replicas
are asked to resume it at once. The destructive tool runs exactly once (oracle: the
tool's own call log, written by whichever process called it), and the run's record
is complete wherever it is read.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from planexec.results import RunStatus  # noqa: E402
from planexec.store import open_store  # noqa: E402

pytestmark = [pytest.mark.mcp, pytest.mark.slow]

HERE = Path(__file__).parent
WAIT = 120.0
PLAN = """#Task1: find the asset
#Tool1: assets
#Args1: {}
#Dependency1: None
#Task2: open a work order for it
#Tool2: open_order
#Args2: {"asset": "<step_1[0]>", "priority": "high"}
#Dependency2: #S1
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replica:
    """One ``planexec serve --http`` process on the shared store."""

    def __init__(self, store: str, config: Path, log: Path) -> None:
        self.port = _free_port()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PLANEXEC_REPLICA_LOG": str(log),
        }
        env.pop("PLANEXEC_SERVE_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "planexec.cli", "serve", "--tools", "replica_tools:TOOLS",
             "--store", store, "--all-runs", "--config", str(config), "--http",
             "--port", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"replica exited with {self.proc.returncode}:\n{err}")
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"replica on port {self.port} not listening within {WAIT}s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def replicas(postgres_url: str, tmp_path: Path) -> Iterator[tuple[Replica, Replica, Path]]:
    config = tmp_path / "agent.toml"
    config.write_text("[approval]\nenabled = true\n", encoding="utf-8")
    log = tmp_path / "calls.log"
    pair = (Replica(postgres_url, config, log), Replica(postgres_url, config, log))
    try:
        for r in pair:
            r.wait_ready()
        yield pair[0], pair[1], log
    finally:
        for r in pair:
            r.stop()


async def _call(url: str, tool: str, args: dict[str, Any]) -> Any:
    async with Client(url, read_timeout_seconds=WAIT) as client:
        return await client.call_tool(tool, args)


async def pause_and_approve(a: Replica, b: Replica, log: Path) -> str:
    """Pause a run on ``a`` (step 2 waits for approval), approve step 2 through ``b``."""
    paused = await _call(a.url, "execute_plan", {"text": PLAN})
    assert not paused.is_error, paused.content
    out = paused.structured_content
    assert out["status"] == "WAITING_APPROVAL"
    run_id = out["run_id"]
    assert [p["step_id"] for p in out["pending_approval"]] == [2]
    assert not log.exists()  # nothing destructive ran yet

    approved = await _call(b.url, "approve_step", {"run_id": run_id, "step": 2, "by": "ann"})
    assert not approved.is_error, approved.content
    return run_id


def assert_ran_once(postgres_url: str, run_id: str, log: Path, replies: Any) -> None:
    """The destructive call happened once (its log), and the run is recorded as done."""
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    assert [c.split()[0] for c in calls] == ["CH-6"], (
        f"the destructive tool ran {len(calls)} times: {calls}; replies: {replies}"
    )
    store = open_store(postgres_url)
    try:
        record = store.get_run(run_id)
        starts = [e for e in store.events(run_id)
                  if e["type"] == "ToolCallStarted" and e.get("tool") == "open_order"]
    finally:
        store.close()
    assert record.status is RunStatus.SUCCEEDED
    assert len(starts) == 1


async def test_a_run_paused_on_one_replica_is_approved_and_resumed_on_the_other(
    replicas: tuple[Replica, Replica, Path], postgres_url: str
) -> None:
    a, b, log = replicas
    run_id = await pause_and_approve(a, b, log)
    done = await _call(b.url, "resume_run", {"run_id": run_id})
    assert not done.is_error, done.content
    assert done.structured_content["status"] == "SUCCEEDED"
    assert_ran_once(postgres_url, run_id, log, done.content)


async def test_a_run_resumed_by_both_replicas_at_once_calls_the_tool_once(
    replicas: tuple[Replica, Replica, Path], postgres_url: str
) -> None:
    a, b, log = replicas
    run_id = await pause_and_approve(a, b, log)

    both = await asyncio.wait_for(
        asyncio.gather(_call(a.url, "resume_run", {"run_id": run_id}),
                       _call(b.url, "resume_run", {"run_id": run_id})),
        WAIT,
    )
    assert_ran_once(postgres_url, run_id, log, [r.content for r in both])
    # one resume finished the run; the other was refused (the lease) or found it done
    finished = [r for r in both
                if not r.is_error and r.structured_content["status"] == "SUCCEEDED"]
    assert len(finished) >= 1
