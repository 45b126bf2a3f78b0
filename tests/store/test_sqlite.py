"""SQLiteRunStore: one file, WAL, versioned schema, retries on a locked database."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from store_fixtures import record_failed_run, record_partial_run, sample_plan

from planexec.errors import StoreError
from planexec.events import EventBus, StepStarted
from planexec.results import RunStatus
from planexec.store import (
    SCHEMA_VERSION,
    MemoryRunStore,
    SQLiteRunStore,
    default_store_path,
    open_store,
)
from planexec.store import sqlite as sqlite_module


def test_a_new_file_is_created_in_wal_mode_at_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "runs.sqlite3"
    with SQLiteRunStore(path) as store:
        assert path.exists()
        assert store.journal_mode() == "wal"
        assert store.schema_version() == SCHEMA_VERSION == 5


async def test_runs_survive_closing_and_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path)
    await record_partial_run(store)
    await record_failed_run(store)
    store.close()
    with SQLiteRunStore(path) as again:
        assert again.plans("run-1")[0].plan == sample_plan()
        assert [r.run_id for r in again.list_runs(status="FAILED")] == ["run-failed"]
        assert again.started_calls_without_result("run-1")[0].step_id == 2


def test_an_empty_version_0_file_is_migrated_to_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE unrelated (x)")  # a file that exists, at user_version 0
    conn.commit()
    conn.close()
    with SQLiteRunStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.list_runs() == []


async def test_a_file_is_migrated_to_a_later_schema_keeping_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path)
    await record_partial_run(store)
    store.close()

    def v2(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT '[]'")

    later = SCHEMA_VERSION + 1
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", [*sqlite_module.MIGRATIONS, (later, v2)])
    with SQLiteRunStore(path) as migrated:
        assert migrated.schema_version() == later
        assert migrated.get_run("run-1").question == "which assets?"
        columns = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(runs)")]
        assert "tags" in columns


def test_a_failing_migration_leaves_the_file_at_its_old_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite3"
    SQLiteRunStore(path).close()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("THIS IS NOT SQL")

    later = SCHEMA_VERSION + 1
    monkeypatch.setattr(
        sqlite_module, "MIGRATIONS", [*sqlite_module.MIGRATIONS, (later, broken)]
    )
    with pytest.raises(StoreError, match="syntax error"):
        SQLiteRunStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half_done" not in tables


def test_a_file_from_a_newer_planexec_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 99, newer than"):
        SQLiteRunStore(path)


async def test_minor_events_are_committed_with_the_next_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path)
    await record_partial_run(store)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(StepStarted(run_id="run-1", step_id=3, tool="create_work_order"))
    reader = SQLiteRunStore(path)
    assert [e["type"] for e in reader.events("run-1")][-1] == "ToolCallStarted"
    await store.flush()
    assert [e["type"] for e in reader.events("run-1")][-1] == "StepStarted"
    reader.close()
    store.close()


async def test_without_buffering_every_event_is_committed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path, buffer_events=False)
    await record_partial_run(store)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(StepStarted(run_id="run-1", step_id=3, tool="create_work_order"))
    with SQLiteRunStore(path) as reader:
        assert [e["type"] for e in reader.events("run-1")][-1] == "StepStarted"
    store.close()


async def test_a_write_waits_for_another_writer_and_then_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path, busy_timeout=0.05, retries=50)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    release = threading.Timer(0.2, lambda: other.execute("COMMIT"))
    release.start()
    try:
        await record_failed_run(store)  # retried until the lock is released
    finally:
        release.join()
        other.close()
    assert store.get_run("run-failed").status is RunStatus.FAILED
    store.close()


async def test_a_lock_held_too_long_fails_with_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    store = SQLiteRunStore(path, busy_timeout=0.01, retries=2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="database is locked"):
            await record_failed_run(store)
    finally:
        other.execute("ROLLBACK")
        other.close()
        store.close()


def test_an_invalid_durability_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="durability must be one of calls, full, process"):
        SQLiteRunStore(tmp_path / "x.sqlite3", durability="sometimes")


@pytest.mark.parametrize(
    ("durability", "flushed"),
    [
        # the result rides with the run's end
        ("calls", ["RunStarted:NORMAL", "ToolCallStarted:FULL", "RunFinished:FULL"]),
        ("full", ["RunStarted:FULL", "ToolCallStarted:FULL", "StepFinished:FULL",
                  "RunFinished:FULL"]),
        ("process", ["RunStarted:NORMAL", "ToolCallStarted:NORMAL", "RunFinished:NORMAL"]),
    ],
)
async def test_the_durability_mode_chooses_which_commits_are_flushed_to_disk(
    tmp_path: Path, durability: str, flushed: list[str]
) -> None:
    from store_fixtures import ok

    from planexec.events import RunFinished, RunStarted, StepFinished, ToolCallStarted

    seen: list[str] = []

    class Spy(SQLiteRunStore):
        def _before_commit(self, batch: list[dict[str, object]]) -> None:
            # the commit runs on whichever connection is in a transaction
            conn = next(c for c in (self._conn, self._fast) if c and c.in_transaction)
            mode = {1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
                conn.execute("PRAGMA synchronous").fetchone()[0]
            ]
            seen.append(f"{batch[-1]['type']}:{mode}")

    store = Spy(tmp_path / "runs.sqlite3", durability=durability)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=1, tool="sites", args={}))
    await bus.emit(StepFinished(run_id="r", result=ok(1, "sites", [])))
    await bus.emit(RunFinished(run_id="r", status="SUCCEEDED"))
    store.close()
    assert seen == flushed


def test_the_default_path_follows_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "env.sqlite3"))
    assert default_store_path() == tmp_path / "env.sqlite3"
    store = open_store()
    assert isinstance(store, SQLiteRunStore) and store.path == tmp_path / "env.sqlite3"
    store.close()
    monkeypatch.delenv("PLANEXEC_STORE")
    assert default_store_path().name == "runs.sqlite3"
    assert "planexec" in str(default_store_path())
    assert isinstance(open_store(":memory:"), MemoryRunStore)


async def test_a_v1_file_gets_the_process_start_column_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    conn = sqlite3.connect(path)
    sqlite_module._migrate_v1(conn)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO runs (run_id, question, status, created_at, pid, host) "
        "VALUES ('old', 'q', 'SUCCEEDED', 1.0, 1, 'h')"
    )
    conn.commit()
    conn.close()
    with SQLiteRunStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        record = store.get_run("old")
        assert (record.question, record.pid_start) == ("q", None)


async def test_a_run_whose_pid_was_reused_by_another_process_is_interrupted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    with SQLiteRunStore(path) as store:
        await record_partial_run(store)
        assert store.get_run("run-1").status is RunStatus.RUNNING  # this live process
        assert store.get_run("run-1").pid_start is not None
    conn = sqlite3.connect(path)
    # pid 1 exists (and so does this process), but neither started at time 12.0
    for pid in (1, os.getpid()):
        conn.execute("UPDATE runs SET pid = ?, pid_start = 12.0 WHERE run_id = 'run-1'", (pid,))
        conn.commit()
        with SQLiteRunStore(path) as store:
            assert store.get_run("run-1").status is RunStatus.INTERRUPTED
            assert [r.run_id for r in store.list_runs(status="INTERRUPTED")] == ["run-1"]
    conn.close()


async def test_the_store_file_and_its_wal_are_readable_by_the_owner_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite3"
    with SQLiteRunStore(path) as store:
        await record_failed_run(store)
        files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
        present = [f for f in files if f.exists()]
        assert path in present
        for f in present:
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_an_existing_world_readable_store_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    SQLiteRunStore(path).close()
    path.chmod(0o644)
    SQLiteRunStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_a_limit_below_one_lists_no_runs(tmp_path: Path) -> None:
    for store in (SQLiteRunStore(tmp_path / "runs.sqlite3"), MemoryRunStore()):
        await record_failed_run(store)
        assert len(store.list_runs(limit=1)) == 1
        assert store.list_runs(limit=0) == [] and store.list_runs(limit=-3) == []
        store.close()


async def test_write_events_records_what_the_bus_records(tmp_path: Path) -> None:
    """Encoded events written in one batch give the records the same events give live.

    The live path encodes the hot events straight to text; `write_events` takes
    `event_to_json` data: the two must agree on events, results, plans and runs.
    """
    memory = MemoryRunStore()
    live = SQLiteRunStore(tmp_path / "live.sqlite3")

    class Both:
        """Both stores on one bus: they get the very same events."""

        def attach(self, bus: EventBus) -> None:
            memory.attach(bus)
            live.attach(bus)

    both: Any = Both()
    await record_partial_run(both)
    await record_failed_run(both)
    await live.flush()
    written = SQLiteRunStore(tmp_path / "written.sqlite3")
    for run_id in ("run-1", "run-failed"):
        written.write_events(memory.events(run_id))
    for run_id in ("run-1", "run-failed"):
        for store in (live, written):
            assert store.events(run_id) == memory.events(run_id)
            assert store.step_results(run_id) == memory.step_results(run_id)
            assert store.plans(run_id) == memory.plans(run_id)
            assert store.started_calls_without_result(run_id) == (
                memory.started_calls_without_result(run_id)
            )
        a, b = live.get_run(run_id), written.get_run(run_id)
        assert (a.status, a.error_kind, a.plan_version, a.step_counts, a.created_at,
                a.updated_at) == (b.status, b.error_kind, b.plan_version, b.step_counts,
                                  b.created_at, b.updated_at)
    live.close()
    written.close()
