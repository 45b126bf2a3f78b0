"""planexec serve against hostile input (issue 14): DNS rebinding, unknown arguments,
oversize and slow plans, results too large for one event, malformed stdio requests.

Every wait is bounded; nothing sleeps; only loopback is used.
"""

from __future__ import annotations

import json
import queue
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from langchain_core.tools import StructuredTool  # noqa: E402
from mcp import Client  # noqa: E402

from planexec.cli import main  # noqa: E402
from planexec.examples import example_path  # noqa: E402
from planexec.examples.tools import demo_tools  # noqa: E402
from planexec.mcp.server import (  # noqa: E402
    MAX_PLAN_CHARS,
    allowed_hosts_for,
    build_server,
)
from planexec.mcp.stdio_guard import MAX_DEPTH, check_line  # noqa: E402
from planexec.store import open_store  # noqa: E402

pytestmark = pytest.mark.mcp

DEMO_TOOLS = "planexec.examples.tools:TOOLS"
PLAN = example_path("plans/chiller_sensors.txt").read_text()
WAIT = 60.0  # the bound on every wait for a subprocess
SERVING = re.compile(r"serving MCP at (http://\S+/mcp)")


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("PLANEXEC_SERVE_TOKEN", None)
    return env


_PUMPS: dict[int, threading.Thread] = {}


def _lines(stream: Any) -> queue.Queue[bytes | None]:
    """Lines of a pipe, read on a daemon thread (None at EOF)."""
    out: queue.Queue[bytes | None] = queue.Queue()

    def pump() -> None:
        for line in iter(stream.readline, b""):
            out.put(line)
        out.put(None)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    _PUMPS[id(stream)] = thread
    return out


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the process (bounded waits), let the pipe readers finish, close the pipes."""
    if proc.stdin:
        proc.stdin.close()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            pump = _PUMPS.pop(id(stream), None)
            if pump is not None:
                pump.join(timeout=10)
            stream.close()


class _HTTPServer:
    """``planexec serve --http --port 0 ...``; the URL is read from its ready line."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        args = [
            sys.executable, "-m", "planexec.cli", "serve", "--tools", DEMO_TOOLS,
            "--store", str(tmp / "runs.sqlite3"), "--http", "--port", "0", *extra,
        ]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=_env(),
        )
        assert self.proc.stderr is not None
        lines = _lines(self.proc.stderr)
        seen: list[str] = []
        while True:  # bounded: each get waits at most WAIT, and the server ends at EOF
            line = lines.get(timeout=WAIT)
            if line is None:
                raise AssertionError(f"serve exited before listening:\n{''.join(seen)}")
            seen.append(line.decode(errors="replace"))
            found = SERVING.search(seen[-1])
            if found:
                self.url = found.group(1)
                self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
                return


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Any]:
    started: list[_HTTPServer] = []

    def start(*extra: str) -> _HTTPServer:
        server = _HTTPServer(tmp_path, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        _stop(server.proc)


def _post(url: str, headers: dict[str, str]) -> int:
    init = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}},
    }
    request = urllib.request.Request(
        url, data=json.dumps(init).encode(), method="POST",
        headers={"Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _can_bind(host: str) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, 0))
        except OSError:
            return False
    return True


# ------------------------------------------------------------- 1. DNS rebinding


@pytest.mark.skipif(not _can_bind("127.0.0.2"), reason="127.0.0.2 is not a loopback address here")
def test_host_and_origin_are_checked_on_another_loopback_address(http_server: Any) -> None:
    served = http_server(
        "--host", "127.0.0.2",
        "--allowed-host", "proxy.example:*", "--allowed-origin", "https://app.example",
    )
    port = served.port
    assert served.url == f"http://127.0.0.2:{port}/mcp"
    # a rebinding attack: the browser sends the attacker's name as Host and Origin
    assert _post(served.url, {"Host": f"evil.com:{port}", "Origin": "http://evil.com"}) == 421
    assert _post(served.url, {"Host": f"evil.com:{port}"}) == 421
    assert _post(served.url, {"Origin": "http://evil.com"}) == 403
    # the bind address itself, the extra host and the extra origin pass
    assert _post(served.url, {}) == 200
    assert _post(served.url, {"Origin": f"http://127.0.0.2:{port}"}) == 200
    assert _post(served.url, {"Host": f"proxy.example:{port}"}) == 200
    assert _post(served.url, {"Origin": "https://app.example"}) == 200


def test_a_non_loopback_bind_without_a_token_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PLANEXEC_SERVE_TOKEN", raising=False)
    argv = ["serve", "--tools", DEMO_TOOLS, "--store", ":memory:", "--http", "--host", "0.0.0.0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "0.0.0.0" in err and "--token" in err


def test_allowed_hosts_are_derived_from_the_bind_address_and_port() -> None:
    loop = allowed_hosts_for("127.0.0.2", 8123)
    assert loop.enable_dns_rebinding_protection
    assert "127.0.0.2:8123" in loop.allowed_hosts and "localhost:8123" in loop.allowed_hosts
    assert "http://127.0.0.2:8123" in loop.allowed_origins
    assert not any(h.endswith(":*") for h in loop.allowed_hosts)  # this port only
    six = allowed_hosts_for("::1", 9000, extra_hosts=["mcp.example"])
    assert "[::1]:9000" in six.allowed_hosts and "mcp.example" in six.allowed_hosts
    public = allowed_hosts_for("192.0.2.7", 80)
    assert public.allowed_hosts == ["192.0.2.7:80", "192.0.2.7"]


# ------------------------------------------------------------- 2. unknown arguments


def _counting_tool(calls: list[str]) -> StructuredTool:
    def ping(note: str = "") -> dict[str, str]:
        """Record a call."""
        calls.append(note)
        return {"note": note}

    return StructuredTool.from_function(ping)


async def test_planexecs_tools_refuse_unknown_arguments_with_close_matches() -> None:
    calls: list[str] = []
    plan = '#Task1: ping\n#Tool1: ping\n#Args1: {"note": "ran"}\n#Dependency1: None\n'
    server = build_server([_counting_tool(calls)], store=open_store(":memory:"), expose_tools=True)
    async with Client(server) as client:
        dry = await client.call_tool("execute_plan", {"text": plan, "dry_run": True})
        assert dry.is_error
        assert "'dry_run'" in _text(dry) and "text" in _text(dry) and "dialect" in _text(dry)
        assert calls == []  # nothing ran

        dialekt = await client.call_tool("parse_plan", {"text": plan, "dialekt": "rewoo"})
        assert dialekt.is_error and "did you mean 'dialect'" in _text(dialekt)
        both = await client.call_tool("validate_plan", {"text": plan, "txt": 1, "zzz": 2})
        assert both.is_error and "'txt'" in _text(both) and "'zzz'" in _text(both)
        runid = await client.call_tool("get_run", {"runid": "x"})
        assert runid.is_error and "did you mean 'run_id'" in _text(runid)
        asked = await client.call_tool("ask", {"question": "q", "model": "x"})
        assert asked.is_error and "'model'" in _text(asked)

        # the re-exposed tools use the same check
        exposed = await client.call_tool("ping", {"nots": "x"})
        assert exposed.is_error and "did you mean 'note'" in _text(exposed)
        assert calls == []

        ran = await client.call_tool("execute_plan", {"text": plan, "dialect": "auto"})
        assert not ran.is_error, _text(ran)
        assert calls == ["ran"]


# ------------------------------------------------------------- 5. plan size, parsing off-loop


async def test_plan_text_over_the_limit_is_refused_with_a_clear_error() -> None:
    small = build_server(demo_tools(), max_plan_chars=len(PLAN) - 1)
    async with Client(small) as client:
        for tool in ("parse_plan", "validate_plan", "execute_plan"):
            result = await client.call_tool(tool, {"text": PLAN})
            assert result.is_error, tool
            message = _text(result)
            assert f"limit of {len(PLAN) - 1:,}" in message and "--max-plan-chars" in message
    async with Client(build_server(demo_tools())) as client:
        huge = await client.call_tool("parse_plan", {"text": "x" * (MAX_PLAN_CHARS + 1)})
        assert huge.is_error and f"{MAX_PLAN_CHARS:,}" in _text(huge)
        fits = await client.call_tool("parse_plan", {"text": PLAN})
        assert not fits.is_error


async def test_a_parse_in_progress_does_not_block_other_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import planexec.parsing as parsing

    real = parsing.parse_plan
    entered = threading.Event()
    release = threading.Event()
    released_by_test: list[bool] = []

    def slow_parse(text: str, dialect: str = "auto", **kwargs: Any) -> Any:
        entered.set()
        released_by_test.append(release.wait(timeout=WAIT))
        return real(text, dialect, **kwargs)

    monkeypatch.setattr(parsing, "parse_plan", slow_parse)
    server = build_server(demo_tools(), store=open_store(":memory:"))
    async with Client(server) as first, Client(server) as second:
        outcome: dict[str, Any] = {}

        async def execute() -> None:
            outcome["result"] = await first.call_tool("execute_plan", {"text": PLAN})

        try:
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(execute)
                    assert await anyio.to_thread.run_sync(entered.wait, WAIT)
                    # the parse is blocked: another client is still served meanwhile
                    listed = await second.list_tools()
                    missing = await second.call_tool("get_run", {"run_id": "none"})
                    release.set()
        finally:
            release.set()  # never leave the worker thread waiting
        assert {t.name for t in listed.tools} >= {"execute_plan", "get_run"}
        assert missing.is_error and "none" in _text(missing)
        assert released_by_test == [True]
        assert not outcome["result"].is_error, _text(outcome["result"])


# ------------------------------------------------------------- 10. large results


async def test_a_huge_run_returns_its_id_and_get_run_pages_through_every_step(
    http_server: Any, tmp_path: Path
) -> None:
    steps = 3000  # about 4 MB of results: far over the client's 1 MiB per event
    plan = "".join(f"{i}. sites()\n" for i in range(1, steps + 1)) + f"{steps + 1}. join()\n"
    config = tmp_path / "agent.toml"
    config.write_text(f"[limits]\nmax_steps = {steps}\n")
    served = http_server("--config", str(config))
    async with Client(served.url, read_timeout_seconds=WAIT) as client:
        ran = await client.call_tool("execute_plan", {"text": plan})
        assert not ran.is_error, _text(ran)[:500]
        out = ran.structured_content
        assert out is not None and out["ok"] is True
        run_id = out["run_id"]
        assert out["results_total"] == steps
        assert out["status_counts"] == {"SUCCEEDED": steps}
        assert 0 < len(out["results"]) <= 100 and out["next_offset"] == len(out["results"])
        assert len(_text(ran).encode()) < 512 * 1024

        seen: list[int] = []
        offset: int | None = 0
        pages = 0
        while offset is not None and pages < steps:  # bounded
            page = await client.call_tool(
                "get_run", {"run_id": run_id, "offset": offset, "limit": 1000}
            )
            assert not page.is_error, _text(page)[:500]
            doc = page.structured_content
            assert doc is not None and doc["offset"] == offset and doc["steps_total"] == steps
            seen += [s["step_id"] for s in doc["run"]["steps"]]
            offset = doc["next_offset"]
            pages += 1
        assert seen == list(range(1, steps + 1))
        assert seen[: len(out["results"])] == [r["step_id"] for r in out["results"]]
        assert pages > 1  # one page could not hold them all

        too_far = await client.call_tool("get_run", {"run_id": run_id, "offset": steps})
        assert too_far.structured_content is not None
        assert too_far.structured_content["run"]["steps"] == []
        bad_limit = await client.call_tool("get_run", {"run_id": run_id, "limit": 0})
        assert bad_limit.is_error


async def test_a_step_output_over_the_budget_is_cut_and_says_so() -> None:
    def big() -> str:
        """A huge output."""
        return "x" * 900_000  # under the executor's output limit, over the result budget

    server = build_server([StructuredTool.from_function(big)], store=open_store(":memory:"))
    plan = "#Task1: big\n#Tool1: big\n#Args1: {}\n#Dependency1: None\n"
    async with Client(server) as client:
        ran = await client.call_tool("execute_plan", {"text": plan})
        assert not ran.is_error
        out = ran.structured_content
        assert out is not None and out["ok"] is True and out["next_offset"] is None
        [step] = out["results"]
        assert "output" in step["truncated"] and "truncated" in step["output"]
        assert len(json.dumps(out)) < 512 * 1024
        got = await client.call_tool("get_run", {"run_id": out["run_id"]})
        assert got.structured_content is not None
        [recorded] = got.structured_content["run"]["steps"]
        assert "output" in recorded["truncated"]
        assert len(json.dumps(got.structured_content)) < 512 * 1024


# ------------------------------------------------------------- 11. stdio replies


def test_check_line_answers_what_the_sdk_would_drop() -> None:
    def verdict(line: str | bytes) -> tuple[Any, Any]:
        text, reply = check_line(line if isinstance(line, bytes) else line.encode())
        return text, reply and (reply["id"], reply["error"]["code"])

    ok = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert verdict(ok) == (ok, None)
    assert verdict("   ") == (None, None)
    assert verdict('{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}')[1] == (2, -32602)
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    assert verdict('{"jsonrpc":"2.0","id":3,"method":"ping","params":{"a":' + deep + "}}")[
        1
    ] == (3, -32600)
    assert verdict('{"jsonrpc":"2.0","id":"s","method":"ping","params":{"a":"\\ud800"}}')[
        1
    ] == ("s", -32600)
    assert verdict(b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"a":"\xff"}}')[1] == (
        5,
        -32600,
    )
    assert verdict('{"jsonrpc":')[1] == (None, -32700)
    assert verdict('{"jsonrpc":"2.0","id":1.5,"method":"ping"}')[1] == (None, -32600)
    assert verdict('[{"jsonrpc":"2.0","id":6,"method":"ping"}]')[1] == (None, -32600)
    # a bad notification gets no reply
    assert verdict('{"jsonrpc":"2.0","method":"notifications/x","params":"x"}') == (None, None)


def test_every_malformed_stdio_request_with_an_id_gets_an_error_reply() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "planexec.cli", "serve", "--tools", DEMO_TOOLS,
         "--store", ":memory:"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    replies = _lines(proc.stdout)

    def send(line: str | bytes) -> None:
        assert proc.stdin is not None
        proc.stdin.write((line if isinstance(line, bytes) else line.encode()) + b"\n")
        proc.stdin.flush()

    def reply() -> dict[str, Any]:
        line = replies.get(timeout=WAIT)
        assert line is not None, "the server closed stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    try:
        send(json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}},
        }))
        assert reply()["id"] == 1
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}')

        deep = "[" * 100_000 + "]" * 100_000
        bad: list[tuple[str | bytes, Any, int]] = [
            ('{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}', 2, -32602),
            ('{"jsonrpc":"2.0","id":3,"method":"ping","params":{"a":' + deep + "}}", 3, -32600),
            ('{"jsonrpc":"2.0","id":4,"method":"ping","params":{"a":"\\ud800"}}', 4, -32600),
            (b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"a":"\xff"}}', 5, -32600),
            ('{"jsonrpc":"2.0","id":6,"method":"ping","params":[1]}', 6, -32602),
            ('{"jsonrpc":"1.0","id":7,"method":"ping"}', 7, -32600),
            ('{"jsonrpc":"2.0","id":8,"method":5}', 8, -32600),
            ('{"jsonrpc": "2.0", "id": 9, "method": "ping", ', 9, -32700),
            ("not json at all", None, -32700),
            ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None, -32600),
        ]
        for line, _, _ in bad:
            send(line)
        send('{"jsonrpc":"2.0","id":99,"method":"ping"}')
        got: list[tuple[Any, int]] = []
        while True:  # bounded: each reply waits at most WAIT; the ping's reply comes last
            message = reply()
            if message.get("id") == 99:
                assert message["result"] == {}
                break
            got.append((message["id"], message["error"]["code"]))
        assert sorted(got, key=str) == sorted(((i, c) for _, i, c in bad), key=str)
    finally:
        _stop(proc)
