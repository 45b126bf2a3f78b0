"""With tokens, runs belong to the principal that started them (issue 25, "also seen").

Any client of a shared ``planexec serve --http`` could read, approve and resume any run
of that server. With ``--tokens FILE`` each token names a principal: another principal
gets "no run" for get_run, approve_step, reject_step, resume_run and cancel_run; an
admin principal (``--admin``) sees every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from planexec.errors import ConfigError  # noqa: E402
from planexec.examples import example_path  # noqa: E402
from planexec.mcp.client import _http_transport  # noqa: E402
from planexec.mcp.principals import load_principals  # noqa: E402
from planexec.store import MemoryRunStore, SQLiteRunStore  # noqa: E402

pytestmark = pytest.mark.mcp

PLAN = example_path("plans/chiller_sensors.txt").read_text()
TOKENS = {"alice": "alice-token-1", "bob": "bob-token-22", "ops": "ops-token-333"}


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[str]:
    """A ``planexec serve --http`` with three principals, ``ops`` an admin."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": TOKENS}), encoding="utf-8")
    env = dict(os.environ)
    env.pop("PLANEXEC_SERVE_TOKEN", None)
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "planexec.cli", "serve",
            "--tools", "planexec.examples.tools:TOOLS",
            "--store", str(tmp_path / "runs.sqlite3"),
            "--http", "--port", str(port), "--tokens", str(tokens), "--admin", "ops",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def as_(principal: str, url: str) -> Client:
    headers = {"Authorization": f"Bearer {TOKENS[principal]}"}
    return Client(_http_transport(url, headers), read_timeout_seconds=60)


async def test_another_principal_gets_not_found_and_an_admin_sees_every_run(
    shared: str,
) -> None:
    async with as_("alice", shared) as alice:
        ran = await alice.call_tool("execute_plan", {"text": PLAN})
        assert not ran.is_error, _text(ran)
        run_id = ran.structured_content["run_id"]
        mine = await alice.call_tool("get_run", {"run_id": run_id})
        assert not mine.is_error, _text(mine)
        # deciding her own finished run is refused for what it is, not as unknown
        own = await alice.call_tool("approve_step", {"run_id": run_id, "step": 1})
        assert own.is_error and "started by you" not in _text(own)

    async with as_("bob", shared) as bob:
        calls = [
            ("get_run", {"run_id": run_id}),
            ("approve_step", {"run_id": run_id, "step": 1}),
            ("reject_step", {"run_id": run_id, "step": 1, "reason": "mine now"}),
            ("resume_run", {"run_id": run_id}),
            ("cancel_run", {"run_id": run_id}),
        ]
        for tool, arguments in calls:
            refused = await bob.call_tool(tool, arguments)
            assert refused.is_error, (tool, _text(refused))
            assert f"no run with id {run_id!r}" in _text(refused), (tool, _text(refused))
        unknown = await bob.call_tool("get_run", {"run_id": "000000000000"})
        assert unknown.is_error  # the same answer as for a run that does not exist

    async with as_("ops", shared) as ops:
        seen = await ops.call_tool("get_run", {"run_id": run_id})
        assert not seen.is_error, _text(seen)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_store_keeps_the_first_owner_of_a_run(kind: str, tmp_path: Path) -> None:
    store: Any = MemoryRunStore() if kind == "memory" else SQLiteRunStore(tmp_path / "r.db")
    assert store.owner("r1") is None
    store.set_owner("r1", "alice")
    store.set_owner("r1", "bob")  # a later claim does not take it over
    assert store.owner("r1") == "alice" and store.owner("r2") is None
    store.close()
    if kind == "sqlite":  # durable: a new process reads it back
        again = SQLiteRunStore(tmp_path / "r.db")
        assert again.owner("r1") == "alice"
        again.close()


def test_the_tokens_file_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"tokens": TOKENS, "admins": ["ops"]}), encoding="utf-8")
    assert load_principals(path).admins == {"ops"}
    assert load_principals(path, ["bob"]).admins == {"ops", "bob"}
    bad = [
        {"tokens": {"a": "short"}},
        {"tokens": {"a": "same-token-1", "b": "same-token-1"}},
        {"tokens": TOKENS, "admins": ["nobody"]},
        {"tokens": TOKENS, "admin": ["ops"]},
        {"tokenz": TOKENS},
    ]
    for data in bad:
        path.write_text(json.dumps(data), encoding="utf-8")
        with pytest.raises(ConfigError):
            load_principals(path)
