"""The durable approval path in real processes: a run pauses WAITING_APPROVAL and its
process exits (or is SIGKILLed while a person is being asked); a second process records
the decision through ``planexec runs approve|reject``, a third resumes the run.

Oracle: the tools append each call's label to a log file (crash_tools), so the test
counts what really ran, and with which arguments, independently of the store.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_tools import plan_text

from planexec.approval import pending_approvals, recorded_decisions
from planexec.results import RunStatus, StepStatus
from planexec.store import SQLiteRunStore

pytestmark = [
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"),
    pytest.mark.slow,
]

HERE = Path(__file__).parent
DEADLINE = 90.0


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.store = tmp_path / "runs.sqlite3"
        self.log = tmp_path / "calls.log"
        self.marker = tmp_path / "reached"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PLANEXEC_CRASH_LOG": str(self.log),
            "PLANEXEC_CRASH_MARKER": str(self.marker),
            "PLANEXEC_CRASH_BLOCK": "",
            "PLANEXEC_STORE": str(self.store),
        }

    def planexec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "planexec.cli", *argv], env=self.env, cwd=self.tmp,
            capture_output=True, text=True, timeout=DEADLINE,
        )

    def calls(self) -> collections.Counter[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return collections.Counter(line.split()[0] for line in lines)

    def start_paused_run(self) -> str:
        (self.tmp / "plan.txt").write_text(plan_text("write"))
        (self.tmp / "approval.toml").write_text('[approval]\nenabled = true\ntools = ["write"]\n')
        out = self.planexec("run", "plan.txt", "--tools", "crash_tools:TOOLS",
                            "--config", "approval.toml")
        assert out.returncode == 3, out.stdout + out.stderr  # paused: neither 0 nor 1
        found = re.search(r"recorded as run (\w+)", out.stderr)
        assert found, out.stderr
        run_id = found.group(1)
        assert f"run {run_id} waits for approval of step(s) 2" in out.stderr
        return run_id


def test_a_paused_run_is_approved_and_resumed_by_other_processes(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    run_id = cli.start_paused_run()
    # steps 1 and 4 ran; step 2 (write) waits, step 3 (after it) never started
    assert cli.calls() == {"s1": 1, "s4": 1}
    with SQLiteRunStore(cli.store) as store:
        assert store.get_run(run_id).status is RunStatus.WAITING_APPROVAL
        [waiting] = pending_approvals(store.events(run_id))
        assert (waiting.step_id, waiting.tool, waiting.args) == (
            2, "write", {"label": "s2", "prev": "s1-out"}
        )

    listed = cli.planexec("runs", "list", "--status", "waiting_approval")
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stdout + listed.stderr
    assert f"run {run_id} waits for approval of step(s) 2" in listed.stdout

    bad = cli.planexec("runs", "approve", run_id, "2", "--args", '{"label": ["x"]}')
    assert bad.returncode != 0 and "label" in bad.stderr, bad.stdout + bad.stderr
    not_waiting = cli.planexec("runs", "approve", run_id, "3")
    assert not_waiting.returncode != 0 and "not waiting" in not_waiting.stderr

    ok = cli.planexec("runs", "approve", run_id, "2", "--args", '{"label": "s2-approved"}',
                      "--by", "alice")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert cli.calls() == {"s1": 1, "s4": 1}  # a decision calls nothing

    done = cli.planexec("runs", "resume", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {run_id}: SUCCEEDED" in done.stdout
    # the destructive call was made exactly once, with the approved arguments; nothing
    # that finished before the pause ran again
    assert cli.calls() == {"s1": 1, "s4": 1, "s2-approved": 1, "s3": 1}
    with SQLiteRunStore(cli.store) as store:
        results = {s.result.step_id: s.result for s in store.step_results(run_id)}
        decision = recorded_decisions(store.events(run_id))[(1, 2)]
    assert {sid: r.status for sid, r in results.items()} == dict.fromkeys(
        (1, 2, 3, 4), StepStatus.SUCCEEDED
    )
    assert results[2].args == {"label": "s2-approved", "prev": "s1-out"}
    assert results[2].resolution["label"] == "edited"
    assert (decision.by, decision.edited) == ("alice", {"label": "s2-approved"})

    shown = cli.planexec("runs", "show", run_id, "--json")
    data = json.loads(shown.stdout)
    assert data["approvals"]["waiting"] == []
    assert [(d["step_id"], d["action"], d["by"]) for d in data["approvals"]["decisions"]] == [
        (2, "edit", "alice")
    ]
    text = cli.planexec("runs", "show", run_id).stdout
    assert "approval decisions:" in text and "edit by alice" in text
    drawn = cli.planexec("runs", "timeline", run_id, "--out", "t.html")
    assert drawn.returncode == 0, drawn.stderr
    page = (tmp_path / "t.html").read_text()
    assert "status-edited" in page and "edit by alice" in page
    again = cli.planexec("runs", "resume", run_id)
    assert "already SUCCEEDED" in again.stdout and cli.calls()["s2-approved"] == 1


def test_a_rejected_step_is_never_called(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    run_id = cli.start_paused_run()
    rejected = cli.planexec("runs", "reject", run_id, "2", "--reason", "not today")
    assert rejected.returncode == 0, rejected.stdout + rejected.stderr
    done = cli.planexec("runs", "resume", run_id)
    # no model to re-plan with: the run stops, and the write was never made
    assert done.returncode == 1, done.stdout + done.stderr
    assert "s2" not in cli.calls() and "s3" not in cli.calls()
    with SQLiteRunStore(cli.store) as store:
        results = {s.result.step_id: s.result for s in store.step_results(run_id)}
        assert store.get_run(run_id).status is RunStatus.FAILED
    assert results[2].failure is not None and results[2].failure.cause == "not today"
    assert str(results[2].error_kind) == "REJECTED"


def test_a_sigkill_while_waiting_for_a_decision_loses_nothing(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "approval_driver.py"), str(cli.store), "run-w"],
        env={**cli.env, "PLANEXEC_CRASH_BLOCK": "approval:s2"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not cli.marker.exists():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"the run ended before asking (code {proc.returncode}):\n"
                            f"{out.decode()}\n{err.decode()}")
            if time.monotonic() > deadline:
                pytest.fail(f"approval not asked within {DEADLINE}s")
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=DEADLINE)
    assert proc.returncode == -signal.SIGKILL
    with SQLiteRunStore(cli.store) as store:
        assert store.get_run("run-w").status is RunStatus.INTERRUPTED
        [waiting] = pending_approvals(store.events("run-w"))  # the request survived
        assert (waiting.step_id, waiting.args) == (2, {"label": "s2", "prev": "s1-out"})
        recorded = {s.result.step_id for s in store.step_results("run-w") if s.result.ok}
    # the request committed step 1's result, which step 2's arguments come from; step 4
    # (safe, alongside) may have finished after it, its result still held in memory
    assert 1 in recorded
    before = cli.calls()
    assert "s2" not in before

    ok = cli.planexec("runs", "approve", "run-w", "2")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    done = cli.planexec("runs", "resume", "run-w", "--tools", "crash_tools:TOOLS")
    assert done.returncode == 0, done.stdout + done.stderr
    calls = cli.calls()
    assert calls["s1"] == 1 and calls["s2"] == 1 and calls["s3"] == 1
    # a recorded step never runs again; an unrecorded safe one runs once more
    assert calls["s4"] == (1 if 4 in recorded else before["s4"] + 1)
