"""The contract every run store meets (memory, SQLite and PostgreSQL alike)."""

from __future__ import annotations

import json

import pytest
from store_fixtures import StoreFactory, record_failed_run, record_partial_run, sample_plan

from planexec.errors import RunNotFoundError
from planexec.events import EventBus, RunFinished, StepFinished
from planexec.plan import Ref, Template
from planexec.results import ResolutionMethod, RunStatus, StepStatus
from planexec.store import MemoryRunStore, RunStore


async def test_a_run_is_recorded_with_its_question_config_and_status(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    await record_partial_run(store)
    record = store.get_run("run-1")
    assert record.question == "which assets?"
    assert record.config == {"k": 1}
    assert record.status is RunStatus.RUNNING
    assert record.created_at == 100.0
    assert record.plan_version == 1
    assert record.step_counts == {"SUCCEEDED": 1}


async def test_a_plan_comes_back_equal_with_its_references_and_diagnostics(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    await record_partial_run(store)
    [recorded] = store.plans("run-1")
    assert recorded.version == 1
    assert recorded.text == "plan text"
    assert recorded.plan == sample_plan()
    assert isinstance(recorded.plan.step(2).args["site"], Ref)
    assert isinstance(recorded.plan.step(3).args["text"], Template)
    assert recorded.plan.step(3).args["literal"] == {"__planexec_ref__": "not a ref"}
    assert [d.code for d in recorded.diagnostics] == ["ARGS_REPAIRED"]


async def test_a_version_without_a_plan_keeps_its_error_and_drafts_through_the_store(
    make_store: StoreFactory,
) -> None:
    from planexec.events import PlanCreated, RunStarted
    from planexec.store import run_from_store

    store = make_store()
    bus = EventBus()
    store.attach(bus)
    drafts = ({"text": "no plan", "problems": ["prose without any step: 'no plan'"]},)
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(PlanCreated(run_id="r", version=1, plan=None, text="still none",
                               error="prose without any step: 'still none'", drafts=drafts))
    [recorded] = store.plans("r")
    assert recorded.plan is None and recorded.error == "prose without any step: 'still none'"
    assert recorded.drafts == drafts
    assert recorded.to_dict()["drafts"] == list(drafts)
    [attempt] = run_from_store(store, "r").attempts
    assert (attempt.error, attempt.drafts) == (recorded.error, list(drafts))
    assert store.get_run("r").plan_steps is None


async def test_step_results_come_back_with_output_resolution_and_timing(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    await record_partial_run(store)
    [step] = store.step_results("run-1")
    assert step.plan_version == 1
    assert step.result.status is StepStatus.SUCCEEDED
    assert step.result.output == ["MAIN", "EAST"]
    assert step.result.raw_output == "['MAIN', 'EAST']"
    assert step.result.resolution == {"site": ResolutionMethod.PATH}
    assert (step.result.started_at, step.result.duration) == (100.0, 0.25)


async def test_a_call_started_without_a_result_is_reported(make_store: StoreFactory) -> None:
    store = make_store()
    await record_partial_run(store)
    [call] = store.started_calls_without_result("run-1")
    assert (call.step_id, call.tool, call.args) == (2, "assets", {"site": "MAIN"})


async def test_every_event_is_recorded_in_order(make_store: StoreFactory) -> None:
    store = make_store()
    await record_partial_run(store)
    await store.flush()
    types = [e["type"] for e in store.events("run-1")]
    assert types == [
        "RunStarted", "PlanCreated", "StepStarted", "ToolCallStarted", "LLMCalled",
        "StepFinished", "StepStarted", "ToolCallStarted",
    ]


async def test_a_failed_run_keeps_its_reason_and_lists_as_a_dead_letter(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    await record_partial_run(store)
    await record_failed_run(store)
    [failed] = store.list_runs(status="FAILED")
    assert failed.run_id == "run-failed"
    assert failed.error == "step 1: tool 'sites' raised: boom"
    assert failed.error_kind == "TOOL_ERROR"
    assert failed.finished_at is not None
    assert [r.run_id for r in store.list_runs()] == ["run-failed", "run-1"]
    assert [r.run_id for r in store.list_runs(limit=1)] == ["run-failed"]


async def test_a_finished_run_records_its_answer(make_store: StoreFactory) -> None:
    store = make_store()
    await record_partial_run(store)
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunFinished(run_id="run-1", status="SUCCEEDED", answer="CH-6"))
    record = store.get_run("run-1")
    assert (record.status, record.answer, record.error_kind) == (RunStatus.SUCCEEDED, "CH-6", None)


async def test_a_result_recorded_again_replaces_the_earlier_one(make_store: StoreFactory) -> None:
    store = make_store()
    await record_partial_run(store)
    bus = EventBus()
    store.attach(bus)
    from store_fixtures import ok

    await bus.emit(StepFinished(run_id="run-1", result=ok(2, "assets", {"items": []})))
    await bus.emit(StepFinished(run_id="run-1", result=ok(1, "sites", ["WEST"])))
    await store.flush()  # results ride with the next commit
    steps = store.step_results("run-1")
    assert [(s.result.step_id, s.result.output) for s in steps] == [
        (2, {"items": []}), (1, ["WEST"])
    ]
    assert store.started_calls_without_result("run-1") == []


async def test_the_export_is_one_json_document_with_everything(make_store: StoreFactory) -> None:
    store = make_store()
    await record_partial_run(store)
    await store.flush()
    doc = json.loads(json.dumps(store.export("run-1")))
    assert doc["format"] == "planexec.run/1"
    assert doc["run"]["question"] == "which assets?"
    assert doc["plans"][0]["plan"]["steps"][1]["args"]["site"] == "<step_1[0]>"
    assert doc["steps"][0]["output"] == ["MAIN", "EAST"]
    assert len(doc["events"]) == 8


async def test_mark_status_sets_status_and_reason(make_store: StoreFactory) -> None:
    store = make_store()
    await record_partial_run(store)
    store.mark_status("run-1", RunStatus.FAILED, error="gave up", error_kind="UNKNOWN_OUTCOME")
    record = store.get_run("run-1")
    assert (record.status, record.error, record.error_kind) == (
        RunStatus.FAILED, "gave up", "UNKNOWN_OUTCOME"
    )
    assert record.finished_at is not None


def test_an_unknown_run_is_not_found(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        store.get_run("nope")
    with pytest.raises(RunNotFoundError):
        store.events("nope")
    with pytest.raises(RunNotFoundError):
        store.mark_status("nope", RunStatus.FAILED)


def test_both_stores_satisfy_the_protocol(make_store: StoreFactory) -> None:
    assert isinstance(make_store(), RunStore)


async def test_a_run_recorded_by_a_dead_process_is_interrupted() -> None:
    store = MemoryRunStore()
    await record_partial_run(store)
    store._runs["run-1"].pid = 2**22 + 12345  # no such process
    assert store.get_run("run-1").status is RunStatus.INTERRUPTED
    assert [r.run_id for r in store.list_runs(status="INTERRUPTED")] == ["run-1"]
    assert store.list_runs(status="RUNNING") == []


async def test_the_latest_cancel_request_is_read_back_from_another_store(
    make_store: StoreFactory,
) -> None:
    from planexec.events import RunCancelRequested, RunStarted

    store = make_store()
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    assert store.cancel_request("r") is None
    await bus.emit(RunCancelRequested(run_id="r", reason="first", by="ann", ts=10.0))
    await bus.emit(RunCancelRequested(run_id="r", reason="wrong account", by="dana", ts=11.0))
    other = make_store()  # another process's store on the same file or database
    request = other.cancel_request("r")
    assert request is not None
    assert (request.reason, request.by, request.requested_at) == ("wrong account", "dana", 11.0)
