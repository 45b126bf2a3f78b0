"""Cancel a run from anywhere: another process, the library, an MCP client; the promises after."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cancel_tools import PAY_PLAN, SLOW_PLAN, TOOLS

from planexec.agent import PlanExecuteAgent
from planexec.cancelling import cancel_run
from planexec.config import AgentConfig
from planexec.errors import ErrorKind, RunCancelledError, RunError
from planexec.results import RunStatus, StepStatus
from planexec.runs import plan_resume, waiting_request
from planexec.store import RequestState, SQLiteRunStore

HERE = Path(__file__).parent
CLI = ["-c", "import sys; from planexec.cli import main; sys.exit(main())"]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}


def start_run(tmp_path: Path, store: Path) -> tuple[subprocess.Popen[str], Path]:
    """``planexec run`` of the slow plan in a subprocess; returns it and its stderr file."""
    plan = tmp_path / "slow.txt"
    plan.write_text(SLOW_PLAN, encoding="utf-8")
    log = tmp_path / "run.log"
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [sys.executable, *CLI, "run", str(plan), "--tools", "cancel_tools:TOOLS",
             "--store", str(store)],
            stdout=subprocess.DEVNULL, stderr=err, text=True, env=env(), cwd=tmp_path,
        )
    return proc, log


def wait_for(log: Path, text: str, proc: subprocess.Popen[str], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text(encoding="utf-8"):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run exited ({proc.returncode}) first: {log.read_text()}")
        time.sleep(0.1)
    pytest.fail(f"{text!r} not seen within {seconds} s: {log.read_text()}")


def only_run(path: Path) -> str:
    store = SQLiteRunStore(path)
    try:
        [record] = store.list_runs()
        return record.run_id
    finally:
        store.close()


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=15)


def test_a_planexec_run_is_cancelled_from_a_second_process_and_exits_130(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    proc, log = start_run(tmp_path, path)
    try:
        wait_for(log, "TOOL STARTED s2", proc)
        run_id = only_run(path)
        asked = subprocess.run(
            [sys.executable, *CLI, "runs", "cancel", run_id, "--reason", "runaway job",
             "--by", "ops", "--store", str(path)],
            capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=60, check=False,
        )
        assert asked.returncode == 0, asked.stderr
        t0 = time.monotonic()
        code = proc.wait(timeout=30)
        assert time.monotonic() - t0 < 15  # not the tool's 60 s
    finally:
        stop(proc)
    assert code == 130
    assert "cancelled by ops: runaway job" in log.read_text(encoding="utf-8")
    store = SQLiteRunStore(path)
    try:
        record = store.get_run(run_id)
        assert record.status is RunStatus.CANCELLED
        assert record.error is not None and "runaway job" in record.error
        steps = {s.result.step_id: s.result.status for s in store.step_results(run_id)}
        assert steps[1] is StepStatus.SUCCEEDED and steps[2] is StepStatus.CANCELLED
        assert 3 not in steps or steps[3] is not StepStatus.SUCCEEDED  # nothing new started
        with pytest.raises(RunCancelledError):  # and it does not resume
            plan_resume(store, run_id, is_safe=lambda tool: True)
        starts = [e for e in store.events(run_id)
                  if e["type"] == "ToolCallStarted" and e.get("step_id") == 2]
        assert len(starts) == 1  # the unsafe call in flight was never repeated
    finally:
        store.close()


async def test_a_run_waiting_for_approval_is_cancelled_at_once_and_its_request_withdrawn(
    tmp_path: Path,
) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite3")
    try:
        config = AgentConfig.model_validate({"approval": {"enabled": True}})
        agent = PlanExecuteAgent(None, TOOLS, config=config, store=store)
        run = await agent.execute_plan(PAY_PLAN)
        assert run.status is RunStatus.WAITING_APPROVAL
        live = (RequestState.OPEN, RequestState.DECIDED)
        before = [r.step_id for r in store.approval_requests(run.run_id) if r.state in live]
        assert before == [1]  # the paused step's request, open
        outcome = await cancel_run(store, run.run_id, reason="not today", by="dana")
        assert outcome.stopped and outcome.withdrawn == tuple(before)
        record = store.get_run(run.run_id)
        assert record.status is RunStatus.CANCELLED and record.error_kind == "CANCELLED"
        assert not [r for r in store.approval_requests(run.run_id) if r.state in live]
        with pytest.raises(RunError):  # no decision is recorded for it
            waiting_request(store, run.run_id, 1)
        with pytest.raises(RunCancelledError):
            plan_resume(store, run.run_id, is_safe=lambda tool: True)
        with pytest.raises(RunError):  # and it is not cancelled twice
            await cancel_run(store, run.run_id, reason="again")
        assert TOOLS[2].metadata["calls"].count == 0  # type: ignore[index]
    finally:
        store.close()


async def test_a_library_run_stops_when_another_store_handle_asks(tmp_path: Path) -> None:
    """The agent's watch reads the store: a request written through another connection
    (as another process would) stops the run, with who and why as its error."""
    path = tmp_path / "runs.sqlite3"
    store, other = SQLiteRunStore(path), SQLiteRunStore(path)
    try:
        agent = PlanExecuteAgent(None, TOOLS, store=store)
        task = asyncio.create_task(agent.execute_plan(SLOW_PLAN))
        for _ in range(600):  # bounded: 60 s
            await asyncio.sleep(0.1)
            runs = other.list_runs()
            if runs and other.started_calls_without_result(runs[0].run_id):
                break
        run_id = other.list_runs()[0].run_id
        outcome = await cancel_run(other, run_id, reason="stop it", by="lib")
        assert not outcome.stopped  # a live driver: it stops the run itself
        run = await asyncio.wait_for(task, timeout=20)
        assert run.status is RunStatus.CANCELLED and run.error_kind is ErrorKind.CANCELLED
        assert run.error is not None and "cancelled by lib: stop it" in run.error
        assert other.get_run(run_id).status is RunStatus.CANCELLED
    finally:
        store.close()
        other.close()


async def test_a_run_its_caller_stopped_may_resume_until_it_is_cancelled_for_good(
    tmp_path: Path,
) -> None:
    """Ctrl-C (a cancelled task) leaves the run CANCELLED but resumable: no request was
    recorded. `cancel_run` then makes it final."""
    store = SQLiteRunStore(tmp_path / "runs.sqlite3")
    try:
        agent = PlanExecuteAgent(None, TOOLS, store=store)
        task = asyncio.create_task(agent.execute_plan(SLOW_PLAN))
        for _ in range(600):  # bounded: 60 s
            await asyncio.sleep(0.1)
            runs = store.list_runs()
            if runs and store.started_calls_without_result(runs[0].run_id):
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        run_id = store.list_runs()[0].run_id
        assert store.get_run(run_id).status is RunStatus.CANCELLED
        assert store.cancel_request(run_id) is None
        plan_resume(store, run_id, is_safe=lambda tool: True)  # not refused
        outcome = await cancel_run(store, run_id, reason="for good", by="ops")
        assert outcome.stopped
        with pytest.raises(RunCancelledError):
            plan_resume(store, run_id, is_safe=lambda tool: True)
    finally:
        store.close()
