"""Whole agent runs on Ray workers: results, streamed events, the driver's store, crashes."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from planexec.events import Event
from planexec.results import RunStatus
from planexec.store import MemoryRunStore

pytest.importorskip("ray")

import ray_helpers as h  # noqa: E402 - after the skip

from planexec.distributed import arun_many, run_jobs  # noqa: E402

pytestmark = [pytest.mark.ray]

ONE_CPU = {"num_cpus": 1}


async def test_many_questions_run_on_workers_and_stream_events_to_the_store(
    ray_session: Any,
) -> None:
    store = MemoryRunStore()
    seen: list[Event] = []
    outcomes = await arun_many(
        ["q1", "q2", "q3"], "ray_helpers:demo_agent", store=store,
        event_handlers=[seen.append], options={"num_cpus": 0.5},
    )
    assert [o.name for o in outcomes] == ["q1", "q2", "q3"]
    for o in outcomes:
        assert o.status == "SUCCEEDED" and o.attempts == 1 and o.error is None
        run = o.run
        assert run is not None and run.status is RunStatus.SUCCEEDED
        assert run.answer == "MAIN has chiller CH-6."
        assert [r.output for r in run.results] == [["MAIN", "WEST"], [{"id": "CH-6"}]]
        record = store.get_run(run.run_id)
        assert record.status is RunStatus.SUCCEEDED and record.question == o.name
        types = [e["type"] for e in store.events(run.run_id)]
        assert types[0] == "RunStarted" and types[-1] == "RunFinished"
        assert types.count("ToolCallStarted") == 2 and types.count("StepFinished") == 2
        assert len(store.step_results(run.run_id)) == 2
    assert {e.run_id for e in seen} == {o.run_id for o in outcomes}


async def test_a_job_that_raises_is_failed_with_its_reason_and_not_retried(
    ray_session: Any,
) -> None:
    outcomes = await arun_many(["q"], "ray_helpers:failing_factory", options={"num_cpus": 0.5})
    (o,) = outcomes
    assert o.status == "FAILED" and o.attempts == 1 and o.run is None
    assert o.error is not None and "ValueError: no agent for you" in o.error


async def test_a_run_whose_worker_dies_is_retried_elsewhere_when_its_tools_are_safe(
    ray_session: Any, tmp_path: Path
) -> None:
    store = MemoryRunStore()
    factory = functools.partial(h.crash_agent, str(tmp_path), True)
    (o,) = await arun_many(["q"], factory, store=store, run_ids=["run-a"], options=ONE_CPU)
    assert o.status == "SUCCEEDED", o.error
    assert o.run_ids == ("run-a", "run-a.retry1") and o.run is not None
    assert o.run.run_id == "run-a.retry1" and h.calls_of(tmp_path, "crashy") == 2
    dead = store.get_run("run-a")
    assert dead.status is RunStatus.FAILED
    assert dead.error is not None and "died mid-run" in dead.error
    assert "retried" in dead.error and "run-a.retry1" in dead.error
    assert store.get_run("run-a.retry1").status is RunStatus.SUCCEEDED


async def test_a_run_whose_worker_dies_in_an_unsafe_call_is_failed_with_the_reason(
    ray_session: Any, tmp_path: Path
) -> None:
    store = MemoryRunStore()
    factory = functools.partial(h.crash_agent, str(tmp_path), False)
    (o,) = await arun_many(["q"], factory, store=store, run_ids=["run-b"], options=ONE_CPU)
    assert o.status == "FAILED" and o.run_ids == ("run-b",) and o.run is None
    assert o.error is not None and "not retried" in o.error and "crashy" in o.error
    assert h.calls_of(tmp_path, "crashy") == 1
    record = store.get_run("run-b")
    assert record.status is RunStatus.FAILED and record.error == o.error


async def test_plain_jobs_run_with_their_own_run_ids_and_a_timeout(ray_session: Any) -> None:
    outcomes = await run_jobs(
        "ray_helpers:sleepy_job", [0.0, 30.0], names=["fast", "slow"],
        run_ids=["j1", "j2"], timeout=1.5, options={"num_cpus": 0.5},
    )
    fast, slow = outcomes
    assert fast.status == "SUCCEEDED" and fast.result == {"slept": 0.0, "run_id": "j1"}
    assert slow.status == "FAILED" and slow.error is not None and "timed out" in slow.error
    assert fast.nodes and fast.nodes[0] == ray_session.get_runtime_context().get_node_id()
    assert os.getpid() > 0
