"""Ctrl-C and pauses say which run was recorded and the exact command that continues it.

The command printed is run as printed (split as a shell would) and continues the run.
"""

from __future__ import annotations

import os
import selectors
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from planexec import AgentConfig, PlanExecuteAgent
from planexec.cli import main
from planexec.examples import example_path
from planexec.examples.tools import demo_tools
from planexec.store import SQLiteRunStore

pytestmark = pytest.mark.timeout(180)

TOOLS = textwrap.dedent(
    """
    import asyncio
    import sys
    from pathlib import Path

    from planexec.testing import fake_tool

    async def _gate():
        print("TOOL STARTED", file=sys.stderr, flush=True)
        for _ in range(1200):  # bounded: 60 s
            if Path(__file__).with_name("open").exists():
                return "through"
            await asyncio.sleep(0.05)
        return "timed out"

    TOOLS = [fake_tool("gate", function=_gate, hints={"read_only": True})]
    """
)


def _read_until(proc: subprocess.Popen[str], needle: str, deadline: float) -> str:
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
def test_ctrl_c_prints_the_run_and_the_command_that_continues_it(tmp_path: Path) -> None:
    module = tmp_path / "gate_tools_for_continue.py"
    module.write_text(TOOLS, encoding="utf-8")
    plan = tmp_path / "plan.txt"
    plan.write_text("#Step1: wait\n#Tool1: gate\n#Args1: {}\n", encoding="utf-8")
    store = tmp_path / "my runs.sqlite3"  # a space: the command must quote it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    env.pop("PLANEXEC_STORE", None)
    cli = [sys.executable, "-c", "import sys; from planexec.cli import main; sys.exit(main())"]
    proc = subprocess.Popen(
        [*cli, "run", str(plan), "--tools", "gate_tools_for_continue:TOOLS",
         "--store", str(store)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        assert "TOOL STARTED" in _read_until(proc, "TOOL STARTED", deadline)
        proc.send_signal(signal.SIGINT)
        said = _read_until(proc, "continue it with:", deadline)
        said += proc.stderr.read() if proc.stderr else ""
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
    line = next(x for x in said.splitlines() if "continue it with:" in x)
    command = line.split("continue it with: ", 1)[1]
    words = shlex.split(command)
    assert words[:3] == ["planexec", "runs", "resume"] and "--store" in words
    run_id = words[3]
    assert f"run {run_id}" in line
    (tmp_path / "open").write_text("", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"  # the command works from another folder too
    elsewhere.mkdir()
    done = subprocess.run(
        [*cli, *words[1:]], capture_output=True, text=True, env=env, cwd=elsewhere,
        timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"run {run_id}: SUCCEEDED" in done.stdout


def test_a_paused_library_run_is_continued_with_its_tools_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(str(store_path))
    config = AgentConfig.model_validate({"approval": {"enabled": True}})
    agent = PlanExecuteAgent(None, demo_tools(), config=config, store=store)
    paused = agent.execute_plan_sync(example_path("plans/work_order.txt").read_text())
    store.close()
    assert main(["runs", "list", "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    resume = f"planexec runs resume {paused.run_id} --tools MODULE:ATTR --store {store_path}"
    assert resume in out  # a library run recorded no tool source: resume needs --tools
    assert main(["runs", "reject", paused.run_id, "3", "--reason", "no", "--store",
                 str(store_path)]) == 0
    assert resume in capsys.readouterr().out
    words = shlex.split(resume.replace("MODULE:ATTR", "planexec.examples.tools:TOOLS"))
    assert main(words[1:]) == 1  # continued: the rejected step fails, and without a model
    assert f"run {paused.run_id}: FAILED" in capsys.readouterr().out


def test_a_run_paused_by_planexec_run_names_the_command_with_its_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "agent.toml").write_text("[approval]\nenabled = true\n", encoding="utf-8")
    store = str(tmp_path / "runs.sqlite3")
    code = main(["run", str(example_path("plans/work_order.txt")), "--tools",
                 "planexec.examples.tools:TOOLS", "--config", str(tmp_path / "agent.toml"),
                 "--store", store])
    assert code == 3
    err = capsys.readouterr().err
    assert "then planexec runs resume " in err and f"--store {store}" in err
    assert "--tools MODULE:ATTR" not in err  # the run recorded its tools
