"""One driver per run, one decider per request, and open requests honoured on resume, in real
processes (issue 25, defects 3, 4 and 6).

Oracle: the crash tools append each call's label to a log file, so the test counts what
really ran, independently of the store.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_approval_durable import DEADLINE, HERE, Cli

from planexec.results import RunStatus
from planexec.store import SQLiteRunStore

pytestmark = [
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"),
    pytest.mark.slow,
]


def start(cli: Cli, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "planexec.cli", *argv], env=cli.env, cwd=cli.tmp,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=DEADLINE)
    return proc.returncode, out + err


def test_two_deciders_at_once_one_wins_and_the_other_is_told_by_whom(tmp_path: Path) -> None:
    """Defect 3: an edit and a rejection at once were both told "recorded"."""
    cli = Cli(tmp_path)
    run_id = cli.start_paused_run()
    editor = start(cli, "runs", "approve", run_id, "2", "--args", '{"label": "s2-edited"}',
                   "--by", "edith")
    rejecter = start(cli, "runs", "reject", run_id, "2", "--reason", "not today", "--by", "rita")
    (code_e, out_e), (code_r, out_r) = finish(editor), finish(rejecter)
    assert sorted([code_e, code_r])[0] == 0 and sorted([code_e, code_r])[1] != 0, out_e + out_r
    loser_out, winner = (out_r, "edith") if code_e == 0 else (out_e, "rita")
    assert "already decided" in loser_out and winner in loser_out, loser_out
    with SQLiteRunStore(cli.store) as store:
        decided = [r for r in store.approval_requests(run_id) if r.action is not None]
    assert [r.by for r in decided] == [winner]


@pytest.mark.parametrize("trial", range(2))
def test_two_resumers_at_once_call_the_destructive_tool_once(tmp_path: Path, trial: int) -> None:
    """Defect 4: two processes resuming one approved run both called the tool.

    Both resumers are started and wait for one barrier file, so they resume at once.
    """
    cli = Cli(tmp_path)
    run_id = cli.start_paused_run()
    ok = cli.planexec("runs", "approve", run_id, "2", "--by", "ann")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    barrier = tmp_path / "go"
    resumers = [
        subprocess.Popen(
            [sys.executable, str(HERE / "resume_driver.py"), str(cli.store), run_id,
             str(barrier)],
            env=cli.env, cwd=cli.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]
    deadline = time.monotonic() + DEADLINE
    while len(list(tmp_path.glob("go.ready.*"))) < 2:  # both imported, waiting
        assert time.monotonic() < deadline and all(p.poll() is None for p in resumers)
        time.sleep(0.01)
    barrier.write_text("go")
    outcomes = [finish(p) for p in resumers]
    assert cli.calls()["s2"] == 1, outcomes
    for code, out in outcomes:  # each one finished it, found it done, or was refused
        assert code == 0 or (code == 2 and "driven by another process" in out), out
    with SQLiteRunStore(cli.store) as store:
        assert store.get_run(run_id).status is RunStatus.SUCCEEDED
        assert store.get_lease(run_id) is None  # released by its holder


def test_a_run_killed_while_asking_is_not_resumed_past_its_open_request(tmp_path: Path) -> None:
    """Defect 6: `planexec runs resume` of a run paused by an in-process callback called the
    destructive tool with no decision (the resumed config had no approval gate)."""
    cli = Cli(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "approval_driver.py"), str(cli.store), "run-k"],
        env={**cli.env, "PLANEXEC_CRASH_BLOCK": "approval:s2"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not cli.marker.exists():
            assert proc.poll() is None, "the run ended before asking"
            assert time.monotonic() < deadline, f"approval not asked within {DEADLINE}s"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=DEADLINE)
    resumed = cli.planexec("runs", "resume", "run-k", "--tools", "crash_tools:TOOLS")
    assert "s2" not in cli.calls(), resumed.stdout + resumed.stderr
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr  # paused again
    with SQLiteRunStore(cli.store) as store:
        assert store.get_run("run-k").status is RunStatus.WAITING_APPROVAL
    ok = cli.planexec("runs", "approve", "run-k", "2", "--by", "ann")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    done = cli.planexec("runs", "resume", "run-k", "--tools", "crash_tools:TOOLS")
    assert done.returncode == 0, done.stdout + done.stderr
    assert cli.calls()["s2"] == 1
