"""PostgresRunStore beyond the contract suite: opening (URLs, errors, schema versions),
what each durability mode waits for, held results, and a lost connection."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from store_fixtures import record_partial_run

from planexec.cli import main
from planexec.config import AgentConfig
from planexec.errors import ConfigError, StoreError
from planexec.events import EventBus, RunStarted, StepFinished, StepStarted, ToolCallStarted
from planexec.results import StepResult, StepStatus
from planexec.store import PostgresRunStore, open_store
from planexec.store import postgres as pg

CLOSED = "postgresql://postgres:s3cret@127.0.0.1:1/planexec"
"""A URL whose server is not there (port 1 refuses), with a password."""


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (CLOSED, "Connection refused"),
        ("postgresql://postgres:s3cret@127.0.0.1:notaport/db", "notaport"),
    ],
)
def test_a_bad_url_or_an_unreachable_server_is_one_line_and_exit_2(
    url: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("planexec: error: cannot open the run store")
    assert why in err
    assert "s3cret" not in err and "postgres:***@127.0.0.1" in err


def test_the_config_store_url_is_used_when_no_store_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text("#Task1: sites\n#Tool1: sites\n#Args1: {}\n", encoding="utf-8")
    config = tmp_path / "agent.toml"
    config.write_text('[store]\nurl = "postgresql://postgres@127.0.0.1:1/planexec"\n',
                      encoding="utf-8")
    code = main(["run", str(plan), "--tools", "planexec.examples.tools:TOOLS",
                 "--config", str(config)])
    assert code == 2
    assert "cannot open the run store postgresql://postgres@127.0.0.1:1/planexec" in (
        capsys.readouterr().err
    )


def test_a_config_store_url_with_a_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="PGPASSWORD"):
        AgentConfig.from_dict({"store": {"url": CLOSED}})
    assert AgentConfig.from_dict({"store": {"url": "runs.sqlite3"}}).store.url == "runs.sqlite3"


def test_open_store_takes_a_postgres_url(postgres_url: str) -> None:
    store = open_store(postgres_url)
    try:
        assert isinstance(store, PostgresRunStore)
        assert store.schema_version() == pg.SCHEMA_VERSION
    finally:
        store.close()


def test_a_database_with_a_newer_schema_is_refused(postgres_url: str) -> None:
    import psycopg

    PostgresRunStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE planexec_schema SET version = %s", (pg.SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this planexec understands"):
        PostgresRunStore(postgres_url)


def test_replicas_opening_a_new_database_at_once_migrate_it_once(postgres_url: str) -> None:
    opened: list[PostgresRunStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        barrier.wait(timeout=30)
        try:
            opened.append(PostgresRunStore(postgres_url))
        except BaseException as exc:  # noqa: BLE001 - counted below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(opened) == 4
    assert opened[0].schema_version() == pg.SCHEMA_VERSION
    for s in opened:
        s.close()


async def test_runs_written_by_one_replica_are_read_by_another(postgres_url: str) -> None:
    with PostgresRunStore(postgres_url) as one, PostgresRunStore(postgres_url) as two:
        await record_partial_run(one)
        assert two.get_run("run-1").question == "which assets?"
        assert [c.step_id for c in two.started_calls_without_result("run-1")] == [2]


class Spy(PostgresRunStore):
    """Records each commit's events and whether it waited for the WAL flush."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.batches: list[tuple[list[str], bool]] = []
        super().__init__(*args, **kwargs)

    def _write_batch(self, batch: Any, flush: bool) -> None:
        self.batches.append(([q[0][2] for q in batch], flush))
        super()._write_batch(batch, flush)


def _result(step_id: int) -> StepResult:
    return StepResult(step_id=step_id, tool="t", status=StepStatus.SUCCEEDED, output=1)


@pytest.mark.parametrize(
    ("durability", "flushed"),
    [("calls", [False, True, False]), ("full", [True, True, True]),
     ("process", [False, False, False])],
)
async def test_which_commits_wait_for_the_wal_flush(
    postgres_url: str, durability: str, flushed: list[bool]
) -> None:
    """An unsafe call's start waits for the flush in "calls" mode; its result does not."""
    store = Spy(postgres_url, durability=durability)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(StepStarted(run_id="r", step_id=1, tool="t"))
    await bus.emit(ToolCallStarted(run_id="r", step_id=1, tool="t", args={}, safe=False))
    await bus.emit(StepFinished(run_id="r", result=_result(1), safe=False))
    store.close()
    assert store.batches == [
        (["RunStarted"], flushed[0]),
        (["StepStarted", "ToolCallStarted"], flushed[1]),
        (["StepFinished"], flushed[2]),
    ]


async def test_a_safe_result_is_held_until_the_next_commit(postgres_url: str) -> None:
    """Held in memory (another replica does not see it) until a checkpoint commits it
    with itself: a commit is a prefix of the events."""
    store = Spy(postgres_url, result_delay=60)
    other = PostgresRunStore(postgres_url)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(StepFinished(run_id="r", result=_result(1), safe=True))
    assert other.step_results("r") == []
    await bus.emit(ToolCallStarted(run_id="r", step_id=2, tool="t", args={}, safe=False))
    assert [s.result.step_id for s in other.step_results("r")] == [1]
    assert store.batches[-1][0] == ["StepFinished", "ToolCallStarted"]
    store.close()
    other.close()


def test_a_lost_connection_fails_one_call_and_the_next_reconnects(postgres_url: str) -> None:
    import psycopg

    with PostgresRunStore(postgres_url) as store:
        assert store.list_runs() == []
        conn = store._conn
        assert conn is not None
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(StoreError, match="terminating connection"):
            store.list_runs()
        assert store.list_runs() == []


async def test_a_held_result_is_committed_within_result_delay_when_nothing_else_comes(
    postgres_url: str,
) -> None:
    import asyncio
    import time

    store = PostgresRunStore(postgres_url, result_delay=0.05)
    other = PostgresRunStore(postgres_url)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(StepFinished(run_id="r", result=_result(1), safe=True))
    deadline = time.monotonic() + 30  # bounded: the timer commits it after 0.05 s
    while not other.step_results("r") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert [s.result.step_id for s in other.step_results("r")] == [1]
    store.close()
    other.close()
