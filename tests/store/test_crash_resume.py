"""Kill a real run with SIGKILL at several points, resume it, and check every step ran
to completion, each step whose result was recorded ran exactly once, and each step
whose result was lost (a safe step's result held in memory) ran once more.

The run is a subprocess (crash_driver.py) with tools that append each call to a log
file. A kill point is reached deterministically: the process writes a marker file and
blocks there; the test polls for the marker (bounded) and then kills the process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planexec.errors import ErrorKind
from planexec.results import RunStatus, StepStatus
from planexec.store import RunStore, open_store

pytestmark = [
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"),
    pytest.mark.slow,
]

HERE = Path(__file__).parent
LABELS = {1: "s1", 2: "s2", 3: "s3", 4: "s4"}
DEADLINE = 90.0


@pytest.fixture(params=["sqlite", "postgres"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the killed run records: a SQLite file, or a PostgreSQL database (a URL)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "runs.sqlite3")


class Crash:
    def __init__(self, tmp_path: Path, store: str) -> None:
        self.store = store
        self.log = tmp_path / "calls.log"
        self.marker = tmp_path / "reached"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PLANEXEC_CRASH_LOG": str(self.log),
            "PLANEXEC_CRASH_MARKER": str(self.marker),
            "PLANEXEC_STORE": str(self.store),
        }

    def start_and_kill(
        self, run_id: str, point: str, tool2: str = "read", result_delay: str = ""
    ) -> None:
        env = {**self.env, "PLANEXEC_CRASH_BLOCK": point,
               "PLANEXEC_CRASH_RESULT_DELAY": result_delay}
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "crash_driver.py"), self.store, run_id, tool2],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + DEADLINE
            while not self.marker.exists():
                if proc.poll() is not None:
                    out, err = proc.communicate()
                    pytest.fail(f"the run ended before {point} (code {proc.returncode}):\n"
                                f"{out.decode()}\n{err.decode()}")
                if time.monotonic() > deadline:
                    pytest.fail(f"{point} not reached within {DEADLINE}s")
                time.sleep(0.01)
            assert self.marker.read_text().split()[0] == point
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=DEADLINE)
        assert proc.returncode == -signal.SIGKILL
        self.marker.unlink()

    def resume(self, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "planexec.cli", "runs", "resume", run_id,
             "--tools", "crash_tools:TOOLS", *extra],
            env={**self.env, "PLANEXEC_CRASH_BLOCK": ""}, capture_output=True, text=True,
            timeout=DEADLINE,
        )

    def calls(self) -> collections.Counter[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return collections.Counter(line.split()[0] for line in lines)

    def open(self) -> RunStore:
        return open_store(self.store)

    def succeeded(self, run_id: str) -> set[int]:
        store = self.open()
        try:
            return {s.result.step_id for s in store.step_results(run_id) if s.result.ok}
        finally:
            store.close()


DEPENDS = {2: 1, 3: 2, 4: 1}
"""Each step's input (the plan: 1 → 2 → 3 and 1 → 4)."""

POINTS = [
    # (kill point, recorded at the kill when every result is a checkpoint)
    ("tool:s2", {1}),  # during a tool call: step 2's call started, never finished
    ("after:s2", {1, 2}),  # between steps: step 2 finished, step 3 not started
    ("commit:s2", {1}),  # during a write: inside the transaction recording step 2
    ("tool:s3", {1, 2}),  # during a later tool call
    ("commit:s3", {1, 2}),  # during the write of a later step
]


@pytest.mark.parametrize(("point", "strict"), POINTS)
@pytest.mark.parametrize("result_delay", ["0", "60"])
def test_a_killed_run_resumes_and_each_recorded_step_ran_once(
    tmp_path: Path, store_at: str, point: str, strict: set[int], result_delay: str
) -> None:
    """Every step is safe. With ``result_delay=0`` each result is committed before the
    next step starts; with the default durability a safe step's result is held (here up
    to 60 s: nothing commits it before the kill) and the step simply runs again on
    resume. Either way a recorded step ran exactly once, the others run once more, and
    a recorded step's input is recorded too (a commit is a prefix of the events)."""
    crash = Crash(tmp_path, store_at)
    crash.start_and_kill("run-k", point, result_delay=result_delay)

    recorded = crash.succeeded("run-k")
    if result_delay == "0":
        assert strict <= recorded  # step 4 runs alongside, and may be recorded too
    else:
        assert recorded == set()  # held in memory, lost with the process
    assert all(DEPENDS[sid] in recorded for sid in recorded if sid in DEPENDS)
    with contextlib.closing(crash.open()) as store:
        assert store.get_run("run-k").status is RunStatus.INTERRUPTED
    before = crash.calls()

    done = crash.resume("run-k")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run run-k: SUCCEEDED" in done.stdout

    calls = crash.calls()
    with contextlib.closing(crash.open()) as store:
        record = store.get_run("run-k")
        results = {s.result.step_id: s.result for s in store.step_results("run-k")}
        assert store.started_calls_without_result("run-k") == []
    assert record.status is RunStatus.SUCCEEDED
    assert {sid: r.status for sid, r in results.items()} == {
        sid: StepStatus.SUCCEEDED for sid in LABELS
    }
    for sid, label in LABELS.items():
        if sid in recorded:
            assert calls[label] == 1, f"{label} was recorded before the kill, ran {calls}"
        else:
            assert calls[label] == before[label] + 1, f"{label} must run once more: {calls}"


def test_an_unsafe_call_cut_short_stops_the_run_until_forced(
    tmp_path: Path, store_at: str
) -> None:
    """Step 2 calls an unsafe tool. Its call start committed the queue first, so its
    input (step 1's safe result, held up to 60 s otherwise) is recorded before the call."""
    crash = Crash(tmp_path, store_at)
    crash.start_and_kill("run-u", "tool:s2", tool2="write", result_delay="60")
    assert 1 in crash.succeeded("run-u")
    with contextlib.closing(crash.open()) as store:
        started = {c.step_id: c for c in store.started_calls_without_result("run-u")}
    # step 4 (a safe read running alongside) may have its call start in the commit that
    # step 2's unsafe call start made of the whole queue: resume runs it again either way
    assert set(started) in ({2}, {2, 4})
    assert started[2].args == {"label": "s2", "prev": "s1-out"}

    stopped = crash.resume("run-u")
    assert stopped.returncode == 1
    assert "planexec runs resume run-u --rerun-unsafe" in stopped.stderr
    with contextlib.closing(crash.open()) as store:
        record = store.get_run("run-u")
        step2 = next(s.result for s in store.step_results("run-u") if s.result.step_id == 2)
    assert (record.status, record.error_kind) == (RunStatus.FAILED, "UNKNOWN_OUTCOME")
    assert step2.error_kind is ErrorKind.UNKNOWN_OUTCOME
    assert crash.calls()["s2"] == 1  # not called again

    still = crash.resume("run-u")  # without the flag it stays stopped
    assert still.returncode == 1 and crash.calls()["s2"] == 1

    forced = crash.resume("run-u", "--rerun-unsafe")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    calls = crash.calls()
    assert calls["s2"] == 2 and calls["s1"] == 1 and calls["s3"] == 1
    assert crash.succeeded("run-u") == set(LABELS)


def test_an_unsafe_result_lost_with_the_process_leaves_its_outcome_unknown(
    tmp_path: Path, store_at: str
) -> None:
    """Step 2's unsafe call returned and its step finished, but its result rides with the
    next commit (held up to 60 s here) and dies with the process. Its call start was
    durable before the call, so resume knows the call may have happened: it stops with
    ``UNKNOWN_OUTCOME`` and never makes the call again without ``--rerun-unsafe``."""
    crash = Crash(tmp_path, store_at)
    crash.start_and_kill("run-r", "after:s2", tool2="write", result_delay="60")
    assert crash.calls()["s2"] == 1
    assert 2 not in crash.succeeded("run-r")  # the result was held, and lost
    with contextlib.closing(crash.open()) as store:
        started = {c.step_id for c in store.started_calls_without_result("run-r")}
    assert 2 in started

    stopped = crash.resume("run-r")
    assert stopped.returncode == 1
    with contextlib.closing(crash.open()) as store:
        record = store.get_run("run-r")
    assert (record.status, record.error_kind) == (RunStatus.FAILED, "UNKNOWN_OUTCOME")
    assert crash.calls()["s2"] == 1  # not called again
