"""Several runs in one process, and several processes on one store file, lose nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from planexec.events import (
    EventBus,
    PlanCreated,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.plan import Plan, Step
from planexec.results import RunStatus, StepResult, StepStatus
from planexec.store import RunStore, SQLiteRunStore
from planexec.store.sqlite import SCHEMA_VERSION

STEPS = 5

WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from test_concurrency import record_runs
    from planexec.store import SQLiteRunStore

    path, prefix, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    deadline = time.monotonic() + 30
    while not go.exists():  # start together with the other writer
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.005)
    store = SQLiteRunStore(path, busy_timeout=0.05, retries=40)
    asyncio.run(record_runs(store, prefix, n))
    store.close()
    """
)


async def record_run(store: RunStore, run_id: str) -> None:
    bus = EventBus()
    store.attach(bus)
    plan = Plan(steps=tuple(Step(id=i, tool="noop") for i in range(1, STEPS + 1)))
    await bus.emit(RunStarted(run_id=run_id, question=f"q {run_id}"))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=plan))
    for i in range(1, STEPS + 1):
        await bus.emit(StepStarted(run_id=run_id, step_id=i, tool="noop"))
        await bus.emit(ToolCallStarted(run_id=run_id, step_id=i, tool="noop", args={"i": i}))
        result = StepResult(step_id=i, tool="noop", status=StepStatus.SUCCEEDED,
                            output={"run": run_id, "i": i})
        await bus.emit(StepFinished(run_id=run_id, result=result))
    await bus.emit(RunFinished(run_id=run_id, status="SUCCEEDED", answer=run_id))


async def record_runs(store: RunStore, prefix: str, n: int) -> None:
    await asyncio.gather(*(record_run(store, f"{prefix}-{j}") for j in range(n)))


def assert_complete(store: RunStore, run_ids: list[str]) -> None:
    runs = store.list_runs(limit=10_000)
    assert sorted(r.run_id for r in runs) == sorted(run_ids)
    for run_id in run_ids:
        record = store.get_run(run_id)
        assert (record.status, record.answer) == (RunStatus.SUCCEEDED, run_id)
        steps = store.step_results(run_id)
        assert [s.result.output for s in sorted(steps, key=lambda s: s.result.step_id)] == [
            {"run": run_id, "i": i} for i in range(1, STEPS + 1)
        ]
        assert len(store.events(run_id)) == 3 + 3 * STEPS
        assert store.started_calls_without_result(run_id) == []


def test_two_processes_writing_runs_to_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    SQLiteRunStore(path).close()  # create the schema once, up front
    go = tmp_path / "go"
    n = 25
    script = WRITER.format(here=str(Path(__file__).parent))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), prefix, str(n), str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for prefix in ("a", "b")
    ]
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with SQLiteRunStore(path) as store:
        assert_complete(store, [f"{p}-{j}" for p in "ab" for j in range(n)])


def test_two_processes_opening_a_new_file_at_once_both_migrate_safely(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite3"
    go = tmp_path / "go"
    script = WRITER.format(here=str(Path(__file__).parent))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), prefix, "3", str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for prefix in ("a", "b")
    ]
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with SQLiteRunStore(path) as store:
        assert store.schema_version() == SQLiteRunStore(path).schema_version() == SCHEMA_VERSION
        assert_complete(store, [f"{p}-{j}" for p in "ab" for j in range(3)])


async def test_many_concurrent_runs_in_one_process_share_one_store(tmp_path: Path) -> None:
    with SQLiteRunStore(tmp_path / "runs.sqlite3") as store:
        await record_runs(store, "c", 30)
        assert_complete(store, [f"c-{j}" for j in range(30)])


def test_runs_from_separate_event_loops_and_threads_share_one_store(tmp_path: Path) -> None:
    import threading

    with SQLiteRunStore(tmp_path / "runs.sqlite3") as store:
        asyncio.run(record_runs(store, "x", 5))
        asyncio.run(record_runs(store, "y", 5))
        threads = [
            threading.Thread(target=lambda p=p: asyncio.run(record_runs(store, p, 5)))
            for p in ("t1", "t2", "t3")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert_complete(store, [f"{p}-{j}" for p in ("x", "y", "t1", "t2", "t3")
                                for j in range(5)])


async def test_concurrent_agent_runs_are_all_recorded(tmp_path: Path) -> None:
    from planexec.agent import PlanExecuteAgent
    from planexec.testing import fake_tool

    plan = (
        '#Task1: sites\n#Tool1: sites\n#Args1: {}\n'
        '#Task2: assets\n#Tool2: assets\n#Args2: {"site": "<step_1[0]>"}\n#Dependency2: #S1\n'
    )
    with SQLiteRunStore(tmp_path / "runs.sqlite3") as store:
        agent = PlanExecuteAgent(
            None,
            [fake_tool("sites", ["MAIN"]), fake_tool("assets", ["CH-6"], args={"site": str})],
            store=store,
        )
        t0 = time.time()
        runs = await asyncio.gather(
            *(agent.execute_plan(plan, question=f"q{i}", run_id=f"agent-{i}") for i in range(8))
        )
        assert all(r.status is RunStatus.SUCCEEDED for r in runs)
        for i in range(8):
            record = store.get_run(f"agent-{i}")
            assert record.status is RunStatus.SUCCEEDED
            assert record.question == f"q{i}"
            assert record.step_counts == {"SUCCEEDED": 2}
            assert record.created_at is not None and record.created_at >= t0 - 1


PG_WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from test_concurrency import record_runs
    from planexec.store import PostgresRunStore

    url, prefix, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    deadline = time.monotonic() + 30
    while not go.exists():  # start together with the other writer
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.005)
    store = PostgresRunStore(url)
    asyncio.run(record_runs(store, prefix, n))
    store.close()
    """
)


def test_two_processes_writing_runs_to_one_postgres_database_lose_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two hosts' drivers (here: processes, each its own connection) on one database,
    each with concurrent runs sharing its group commits."""
    from planexec.store import PostgresRunStore

    go = tmp_path / "go"
    n = 10
    script = PG_WRITER.format(here=str(Path(__file__).parent))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, postgres_url, prefix, str(n), str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for prefix in ("a", "b")
    ]
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with PostgresRunStore(postgres_url) as store:
        assert_complete(store, [f"{p}-{j}" for p in "ab" for j in range(n)])
