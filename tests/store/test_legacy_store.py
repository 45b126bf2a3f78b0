"""A store file written before `StepError` existed reads and resumes on today's code.

``data/legacy_v3.sqlite`` was written by planexec's main branch before failures
became data (schema v3, results without a ``failure`` object): run ``legacy-failed``
(step 2 failed with RESOLUTION_FAILED: a path that does not exist, no model) and run
``legacy-crash`` (its process died inside step 2's tool call, after step 1 succeeded).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from planexec.agent import PlanExecuteAgent
from planexec.errors import ErrorKind
from planexec.examples.tools import demo_tools
from planexec.results import RunStatus, StepStatus
from planexec.store import SQLiteRunStore
from planexec.store.base import HOST
from planexec.testing import FunctionModel, ModelCall

LEGACY = Path(__file__).parent / "data" / "legacy_v3.sqlite"


def legacy_copy(tmp_path: Path) -> Path:
    """A private copy, its crashed run's owner on this host (the file came from another)."""
    path = tmp_path / "legacy.sqlite"
    shutil.copyfile(LEGACY, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET host = ? WHERE run_id = 'legacy-crash'", (HOST,))
    return path


def test_an_old_failed_step_reads_back_with_its_kind_and_message_as_a_step_error(
    tmp_path: Path,
) -> None:
    store = SQLiteRunStore(legacy_copy(tmp_path))
    try:
        [failed] = [s.result for s in store.step_results("legacy-failed") if not s.result.ok]
    finally:
        store.close()
    assert failed.failure is not None
    assert failed.failure.kind is ErrorKind.RESOLUTION_FAILED
    assert failed.failure.message == failed.error and "asset_key" in failed.failure.message
    assert failed.failure.args == ()  # old records named no arguments as data
    assert failed.failure.retryable is None  # nor the executor's judgement: unknown


async def test_an_old_interrupted_run_resumes_without_rerunning_its_finished_step(
    tmp_path: Path,
) -> None:
    store = SQLiteRunStore(legacy_copy(tmp_path))
    try:
        assert store.get_run("legacy-crash").status is RunStatus.INTERRUPTED
        run = await PlanExecuteAgent(None, demo_tools(), store=store).resume("legacy-crash")
        events = store.events("legacy-crash")
    finally:
        store.close()
    assert run.status is RunStatus.SUCCEEDED
    started = [e["step_id"] for e in events if e["type"] == "ToolCallStarted"]
    assert started.count(1) == 1  # only the original call, before the crash
    assert {r.step_id: r.status for r in run.results} == {
        1: StepStatus.SUCCEEDED, 2: StepStatus.SUCCEEDED
    }


async def test_an_old_failed_run_resumes_and_its_step_is_re_resolved_from_the_new_error(
    tmp_path: Path,
) -> None:
    def reply(call: ModelCall, messages: list[object]) -> str:
        assert call.purpose in ("resolve", "answer")
        return json.dumps({"asset_id": "CWC04006"}) if call.purpose == "resolve" else "done"

    model = FunctionModel(function=reply)
    store = SQLiteRunStore(legacy_copy(tmp_path))
    try:
        run = await PlanExecuteAgent(model, demo_tools(), store=store).resume("legacy-failed")
    finally:
        store.close()
    assert run.status is RunStatus.SUCCEEDED
    assert [c.keys for c in model.calls_made if c.purpose == "resolve"] == [("asset_id",)]
    assert run.results[-1].args == {"site_name": "MAIN", "asset_id": "CWC04006"}
