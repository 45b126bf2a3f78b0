"""Hostile input at the command line (issue 14, items 4, 6, 7, 8, 9).

Every CLI error is one line on standard error with exit status 2; the JSON printed is
always valid JSON; Ctrl-C stops ``planexec run`` (twice: at once). No test sleeps;
every wait is bounded.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from planexec.cli import main, one_line
from planexec.commands._args import port_number, positive_float
from planexec.commands._interrupt import InterruptHandler, run_interruptible

pytestmark = pytest.mark.timeout(120)

MODULE = "hostile_cli_tools"
TOOLS = textwrap.dedent(
    """
    import asyncio
    import sys

    from langchain_core.tools import StructuredTool
    from planexec.testing import fake_tool

    def _cyclic():
        d = {}
        d["self"] = d
        return d

    async def _stubborn():
        print("TOOL STARTED", file=sys.stderr, flush=True)
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                continue

    async def _blocks_the_loop():
        import threading
        print("TOOL STARTED", file=sys.stderr, flush=True)
        threading.Event().wait(60)  # blocks the event loop itself (bounded)
        return "late"

    async def _deaf():
        import signal
        import threading
        # Blocks the loop where no Python signal handler can run: SIGINT is held back
        # from this (the main) thread, as in C code that retries on EINTR.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        print("TOOL STARTED", file=sys.stderr, flush=True)
        threading.Event().wait(90)
        return "late"

    TOOLS = [
        fake_tool("sites", ["MAIN"], hints={"read_only": True}),
        fake_tool("cyclic", function=_cyclic),
        fake_tool("nums", {"a": float("nan"), "b": float("inf")}),
        fake_tool("scale", 1, args={"x": float}),
        StructuredTool.from_function(coroutine=_stubborn, name="stubborn", description="x"),
        StructuredTool.from_function(
            coroutine=_blocks_the_loop, name="blocker", description="x"
        ),
        StructuredTool.from_function(coroutine=_deaf, name="deaf", description="x"),
    ]
    """
)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / f"{MODULE}.py").write_text(TOOLS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return f"{MODULE}:TOOLS"


def plan_file(tmp_path: Path, tool: str, args: str = "{}") -> str:
    path = tmp_path / f"plan-{tool}.txt"
    path.write_text(f"#Step1: call\n#Tool1: {tool}\n#Args1: {args}\n", encoding="utf-8")
    return str(path)


def strict_json(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"invalid JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def run_main(argv: list[str]) -> int:
    """`main`'s exit status, also when argparse exits."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


# -- item 7: one line, exit 2 ----------------------------------------------------------


@pytest.fixture
def bad(tmp_path: Path) -> dict[str, str]:
    """Files that are not UTF-8 text, one per suffix a command reads."""
    files = {}
    for suffix in ("txt", "json", "toml", "yaml"):
        path = tmp_path / f"bad.{suffix}"
        path.write_bytes(b"\xff\xfe#Step1: x\n")
        files[suffix] = str(path)
    return files


def command_lines(tools: str, good: str, bad: dict[str, str]) -> list[list[str]]:
    return [
        ["parse", bad["txt"]],
        ["validate", bad["txt"], "--tools", tools],
        ["show", bad["txt"]],
        ["run", bad["txt"], "--tools", tools, "--no-store"],
        ["run", good, "--tools", tools, "--mcp-config", bad["json"], "--no-store"],
        ["run", good, "--tools", tools, "--config", bad["toml"], "--no-store"],
        ["run", good, "--tools", tools, "--model", f"replay:{bad['json']}", "--no-store"],
        ["ask", "q", "--tools", tools, "--model", "replay:x.json", "--config", bad["yaml"]],
        ["ask", "q", "--tools", tools, "--model", f"replay:{bad['json']}", "--no-store"],
        ["ask", "q", "--mcp-config", bad["json"], "--model", "replay:x.json", "--no-store"],
        ["demo", "--config", bad["toml"], "--no-store"],
        ["demo", "--question", "99", "--no-store"],
        ["regress", bad["yaml"]],
        ["regress", bad["yaml"], "--workers", "0"],
        ["runs", "list", "--limit", "0"],
        ["run", good, "--tools", tools, "--timeout", "-1"],
        ["serve", "--http", "--port", "99999", "--tools", tools],
        ["serve", "--http", "--port", "-1", "--tools", tools],
    ]


def test_every_command_reports_bad_input_on_one_line_with_exit_2(
    tools: str, tmp_path: Path, bad: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    good = plan_file(tmp_path, "sites")
    for argv in command_lines(tools, good, bad):
        code = run_main(argv)
        assert code == 2, argv
        line = error_line(capsys)
        assert "error" in line and "Traceback" not in line, (argv, line)


def test_non_utf8_files_are_named_in_the_error(
    tools: str, tmp_path: Path, bad: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    good = plan_file(tmp_path, "sites")
    for argv, name in [
        (["run", bad["txt"], "--tools", tools, "--no-store"], bad["txt"]),
        (["run", good, "--tools", tools, "--mcp-config", bad["json"]], bad["json"]),
        (["run", good, "--tools", tools, "--config", bad["toml"]], bad["toml"]),
        (["regress", bad["yaml"]], bad["yaml"]),
    ]:
        assert run_main(argv) == 2
        line = error_line(capsys)
        assert name in line and "not UTF-8" in line, line


def test_a_plan_on_standard_input_that_is_not_utf8_is_one_line(
    tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    stdin = io.TextIOWrapper(io.BytesIO(b"\xff#Step1"), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert run_main(["run", "-", "--tools", tools, "--no-store"]) == 2
    assert "standard input" in error_line(capsys)


def test_multi_line_errors_are_joined_on_one_line() -> None:
    assert one_line("invalid configuration:\n  a: bad\n  b: worse") == (
        "invalid configuration: a: bad; b: worse"
    )


def test_port_numbers_are_checked_by_argparse() -> None:
    import argparse

    assert port_number("0") == 0 and port_number("65535") == 65535
    for text in ("65536", "99999", "-1", "http"):
        with pytest.raises(argparse.ArgumentTypeError):
            port_number(text)


# -- item 8: nonsense settings ----------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "soon"])
def test_run_refuses_a_nonsense_timeout_before_calling_anything(
    value: str, tools: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", plan_file(tmp_path, "sites"), "--tools", tools, "--no-store"]
    assert run_main([*argv, f"--timeout={value}"]) == 2
    line = error_line(capsys)
    assert "--timeout" in line and value in line


def test_positive_float_accepts_only_finite_numbers_above_zero() -> None:
    import argparse

    assert positive_float("2.5") == 2.5
    for text in ("0", "-0.0", "nan", "inf", "1e999"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(text)


def test_run_refuses_a_max_concurrency_below_one(
    tools: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", plan_file(tmp_path, "sites"), "--tools", tools, "--max-concurrency", "0"]
    assert run_main(argv) == 2
    assert "--max-concurrency" in error_line(capsys)


def test_a_config_file_with_a_nan_or_zero_timeout_is_one_line(
    tools: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for body in ("[executor]\ntool_timeout = nan\n", "[executor]\nrun_timeout = 0\n"):
        config = tmp_path / "bad-settings.toml"
        config.write_text(body, encoding="utf-8")
        argv = ["run", plan_file(tmp_path, "sites"), "--tools", tools, "--config", str(config)]
        assert run_main(argv) == 2
        assert "executor." in error_line(capsys)


# -- items 4 and 9: the JSON printed is always valid -----------------------------------


def test_a_cyclic_output_fails_its_step_and_run_json_and_runs_show_json_are_valid(
    tools: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.sqlite3")
    for tool in ("cyclic", "nums"):
        code = run_main(["run", plan_file(tmp_path, tool), "--tools", tools, "--json",
                         "--store", store])
        captured = capsys.readouterr()
        data = strict_json(captured.out)
        step = data["steps"][0]
        if tool == "cyclic":
            assert code == 1 and step["error_kind"] == "TOOL_ERROR"
            assert "cycle" in step["error"]
        else:
            assert code == 0 and step["output"] == {"a": "NaN", "b": "Infinity"}
        assert run_main(["runs", "show", data["run_id"], "--json", "--store", store]) == 0
        shown = strict_json(capsys.readouterr().out)
        assert json.dumps(shown, allow_nan=False)


def test_a_plan_literal_1e999_is_refused_before_the_call(
    tools: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_file(tmp_path, "scale", '{"x": 1e999}')
    assert run_main(["run", plan, "--tools", tools, "--json", "--no-store"]) == 1
    step = strict_json(capsys.readouterr().out)["steps"][0]
    assert step["error_kind"] == "ARGS_INVALID" and step["attempts"] == 0


# -- item 6: Ctrl-C -----------------------------------------------------------------------


def test_the_first_interrupt_cancels_and_the_second_exits_at_once() -> None:
    cancelled: list[bool] = []
    exits: list[int] = []
    import io

    err = io.StringIO()
    handler = InterruptHandler(lambda: cancelled.append(True), exit=exits.append, stderr=err)
    handler()
    assert cancelled == [True] and exits == []
    handler()
    assert cancelled == [True] and exits == [130]
    assert "again" in err.getvalue()


def test_run_interruptible_turns_a_first_interrupt_into_keyboard_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import planexec.commands._interrupt as interrupt

    monkeypatch.setattr(interrupt, "SHUTDOWN_GRACE", 0.01)
    handlers: list[InterruptHandler] = []

    def factory(cancel: Any) -> InterruptHandler:
        handlers.append(InterruptHandler(cancel, exit=lambda code: None))
        return handlers[0]

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                continue

    async def command() -> None:
        asyncio.get_running_loop().create_task(stubborn())  # left behind, never ends
        asyncio.get_running_loop().call_soon(handlers[0])  # "Ctrl-C"
        await asyncio.Event().wait()

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(command(), handler_factory=factory)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_real_sigint_cancels_the_command_and_the_previous_handlers_come_back() -> None:
    import asyncio

    before = signal.getsignal(signal.SIGINT)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    os.set_blocking(read_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd)
    usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    exits: list[int] = []
    import io

    try:

        async def command() -> None:
            os.kill(os.getpid(), signal.SIGUSR1)  # someone else's signal: passed on
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.Event().wait()

        def factory(cancel: Any) -> InterruptHandler:
            return InterruptHandler(cancel, exit=exits.append, stderr=io.StringIO())

        with pytest.raises(KeyboardInterrupt):
            run_interruptible(command(), handler_factory=factory)
        assert exits == []
        assert signal.getsignal(signal.SIGINT) is before
        assert signal.set_wakeup_fd(previous_fd) == write_fd
        assert os.read(read_fd, 64) == bytes([signal.SIGUSR1])
    finally:
        signal.signal(signal.SIGUSR1, usr1)
        os.close(read_fd)
        os.close(write_fd)


def _read_until(proc: subprocess.Popen[str], needle: str, deadline: float) -> str:
    """Read the process's stderr until ``needle`` shows up (or the deadline passes)."""
    assert proc.stderr is not None
    seen = ""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while needle not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                break
            line = proc.stderr.readline()
            if not line:
                break
            seen += line
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize(
    ("tool", "interrupts"),
    [("stubborn", 1), ("blocker", 2), ("deaf", 2)],
    ids=[
        "a-tool-ignoring-cancellation-stops-on-one-ctrl-c",
        "a-blocked-loop-exits-on-two",
        "a-loop-blocked-out-of-signals-reach-exits-on-two",
    ],
)
def test_ctrl_c_stops_planexec_run(tool: str, interrupts: int, tools: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from planexec.cli import main; sys.exit(main())",
         "run", plan_file(tmp_path, tool), "--tools", tools, "--no-store"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        assert "TOOL STARTED" in _read_until(proc, "TOOL STARTED", deadline)
        proc.send_signal(signal.SIGINT)
        assert "interrupted" in _read_until(proc, "interrupted", deadline)
        if interrupts == 2:
            proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
