"""plan_resume decides what resuming does with each step; resume_run carries it out."""

from __future__ import annotations

import os
from typing import Any

import pytest
from store_fixtures import ok, record_partial_run, sample_plan

from planexec.errors import ErrorKind, RunError, RunNotFoundError
from planexec.events import (
    EventBus,
    PlanCreated,
    RunFinished,
    RunStarted,
    StepFinished,
    ToolCallStarted,
)
from planexec.plan import Plan, Ref, Step
from planexec.results import RunStatus, StepResult, StepStatus
from planexec.runs import force_hint, plan_resume, resume_run
from planexec.store import MemoryRunStore, run_from_store
from planexec.testing import fake_tool

DEAD_PID = 2**22 + 4242


def safe_tools(tool: str) -> bool:
    return tool in {"sites", "assets"}


def orphan(store: MemoryRunStore, run_id: str = "run-1") -> None:
    """Pretend the process that recorded the run is gone."""
    store._runs[run_id].pid = DEAD_PID


async def partial(run_id: str = "run-1") -> MemoryRunStore:
    store = MemoryRunStore()
    await record_partial_run(store, run_id)
    orphan(store, run_id)
    return store


async def test_finished_steps_are_reused_and_a_safe_interrupted_call_reruns() -> None:
    store = await partial()
    rp = plan_resume(store, "run-1", is_safe=safe_tools)
    assert rp.record.status is RunStatus.INTERRUPTED
    assert (rp.finished, rp.rerun, rp.unknown, rp.pending) == ((1,), (2,), (), (3,))
    assert rp.prior[1].output == ["MAIN", "EAST"]
    assert rp.plan == sample_plan() and rp.plan_version == 1
    assert rp.can_continue and rp.message is None


async def test_an_unsafe_interrupted_call_has_an_unknown_outcome_with_the_force_hint() -> None:
    store = await partial()
    rp = plan_resume(store, "run-1", is_safe=lambda tool: False)
    assert (rp.rerun, rp.unknown) == ((), (2,))
    assert not rp.can_continue
    assert rp.message is not None
    assert "step 2 (assets)" in rp.message
    assert force_hint("run-1") == "planexec runs resume run-1 --rerun-unsafe"
    assert force_hint("run-1") in rp.message


async def test_rerun_unsafe_forces_the_unknown_call_to_run_again() -> None:
    store = await partial()
    rp = plan_resume(store, "run-1", is_safe=lambda tool: False, rerun_unsafe=True)
    assert (rp.rerun, rp.forced, rp.unknown) == ((2,), (2,), ())
    assert rp.can_continue


async def test_a_run_still_running_in_a_live_process_is_not_resumed() -> None:
    store = MemoryRunStore()
    await record_partial_run(store)  # recorded by this very (live) process
    assert store.get_run("run-1").pid == os.getpid()
    with pytest.raises(RunError, match="still running"):
        plan_resume(store, "run-1", is_safe=safe_tools)
    assert plan_resume(store, "run-1", is_safe=safe_tools, allow_running=True).rerun == (2,)


async def test_a_succeeded_run_has_nothing_to_resume() -> None:
    store = await partial()
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunFinished(run_id="run-1", status="SUCCEEDED"))
    rp = plan_resume(store, "run-1", is_safe=safe_tools)
    assert rp.complete and not rp.can_continue


def test_an_unknown_run_cannot_be_resumed() -> None:
    with pytest.raises(RunNotFoundError):
        plan_resume(MemoryRunStore(), "nope", is_safe=safe_tools)


async def test_a_run_without_a_plan_must_plan_again() -> None:
    store = MemoryRunStore()
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id="r", question="q"))
    orphan(store, "r")
    rp = plan_resume(store, "r", is_safe=safe_tools)
    assert rp.plan is None and rp.plan_version is None


async def failed_step(kind: ErrorKind, *, call_started: bool) -> MemoryRunStore:
    store = MemoryRunStore()
    bus = EventBus()
    store.attach(bus)
    plan = Plan(steps=(Step(id=1, tool="create_work_order"),))
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(PlanCreated(run_id="r", version=1, plan=plan))
    if call_started:
        await bus.emit(ToolCallStarted(run_id="r", step_id=1, tool="create_work_order", args={}))
    result = StepResult(step_id=1, tool="create_work_order", status=StepStatus.FAILED,
                        error="step 1: boom", error_kind=kind)
    await bus.emit(StepFinished(run_id="r", result=result))
    await bus.emit(RunFinished(run_id="r", status="FAILED", error="step 1: boom"))
    return store


@pytest.mark.parametrize(
    ("kind", "call_started", "unknown"),
    [
        (ErrorKind.TOOL_TIMEOUT, True, True),  # it may have taken effect
        (ErrorKind.CANCELLED, True, True),
        (ErrorKind.UNKNOWN_OUTCOME, False, True),  # stopped by an earlier resume
        (ErrorKind.TOOL_TIMEOUT, False, False),  # never called
        (ErrorKind.TOOL_ERROR, True, False),  # the tool answered with an error
        (ErrorKind.ARGS_INVALID, False, False),
    ],
)
async def test_a_failed_unsafe_step_is_unknown_only_if_its_effect_is_uncertain(
    kind: ErrorKind, call_started: bool, unknown: bool
) -> None:
    store = await failed_step(kind, call_started=call_started)
    rp = plan_resume(store, "r", is_safe=lambda tool: False)
    assert rp.record.status is RunStatus.FAILED
    assert (rp.unknown, rp.pending) == (((1,), ()) if unknown else ((), (1,)))


# ---------------------------------------------------------------------- with the agent


def agent_tools() -> list[Any]:
    return [
        fake_tool("sites", ["MAIN", "EAST"], hints={"read_only": True}),
        fake_tool("assets", {"items": [{"id": "CH-6"}]}, args={"site": str, "note": (str, "")},
                  hints={"read_only": True}),
        fake_tool("create_work_order", {"wo": 7}, args={"text": str, "literal": dict}),
    ]


def calls(tools: list[Any]) -> dict[str, list[dict[str, Any]]]:
    return {t.name: t.metadata["calls"].calls for t in tools}


async def test_resume_run_finishes_an_interrupted_run_without_rerunning_finished_steps() -> None:
    from planexec.agent import PlanExecuteAgent

    store = await partial()
    tools = agent_tools()
    agent = PlanExecuteAgent(None, tools, store=store)
    run = await resume_run(agent, store, "run-1")

    assert run.status is RunStatus.SUCCEEDED
    made = calls(tools)
    assert made["sites"] == []  # finished before the crash: reused
    assert made["assets"] == [{"site": "MAIN", "note": "x"}]  # interrupted, safe: re-run
    assert made["create_work_order"] == [
        {"text": "fix CH-6", "literal": {"__planexec_ref__": "not a ref"}}
    ]
    record = store.get_run("run-1")
    assert record.status is RunStatus.SUCCEEDED
    assert record.step_counts == {"SUCCEEDED": 3}
    types = [e["type"] for e in store.events("run-1")]
    assert types.count("RunStarted") == 2 and types[-1] == "RunFinished"
    decided = [e for e in store.events("run-1") if e["type"] == "RecoveryDecided"]
    assert decided[0]["action"] == "resume"
    rerun = [e for e in store.events("run-1") if e["type"] == "FallbackUsed"]
    assert [(e["code"], e["step_id"]) for e in rerun] == [("RESUME_RERUN", 2)]
    assert [a.version for a in run.attempts] == [1]
    assert {r.step_id for r in run.results} == {1, 2, 3}


async def test_resume_run_stops_on_an_unknown_outcome_until_forced() -> None:
    from planexec.agent import PlanExecuteAgent

    store = await partial()
    tools = [*agent_tools()[:1], fake_tool("assets", {"items": [{"id": "CH-6"}]},
                                           args={"site": str, "note": str}), agent_tools()[2]]
    agent = PlanExecuteAgent(None, tools, store=store)

    stopped = await resume_run(agent, store, "run-1")
    assert stopped.status is RunStatus.FAILED
    assert stopped.error_kind is ErrorKind.UNKNOWN_OUTCOME
    assert stopped.error is not None and force_hint("run-1") in stopped.error
    assert all(c == [] for c in calls(tools).values())
    assert store.list_runs(status="FAILED")[0].error_kind == "UNKNOWN_OUTCOME"

    again = await resume_run(agent, store, "run-1")
    assert again.status is RunStatus.FAILED and calls(tools)["assets"] == []

    forced = await resume_run(agent, store, "run-1", rerun_unsafe=True)
    assert forced.status is RunStatus.SUCCEEDED
    assert calls(tools)["assets"] == [{"site": "MAIN", "note": "x"}]
    forced_events = [e for e in store.events("run-1") if e["type"] == "FallbackUsed"]
    assert "forced with --rerun-unsafe" in forced_events[-1]["message"]


async def test_a_resumed_replan_sees_the_steps_kept_from_earlier_plans() -> None:
    from planexec.agent import PlanExecuteAgent

    store = MemoryRunStore()
    bus = EventBus()
    store.attach(bus)
    v1 = Plan(steps=(Step(id=1, tool="sites"), Step(id=2, tool="broken")))
    v2 = Plan(steps=(
        Step(id=3, tool="assets", args={"site": Ref(1, (1,))}, depends_on=(1,)),
    ))
    await bus.emit(RunStarted(run_id="r", question="q"))
    await bus.emit(PlanCreated(run_id="r", version=1, plan=v1))
    await bus.emit(StepFinished(run_id="r", result=ok(1, "sites", ["MAIN", "EAST"])))
    await bus.emit(PlanCreated(run_id="r", version=2, plan=v2, reason="step 2 failed"))
    orphan(store, "r")

    tools = agent_tools()
    run = await resume_run(PlanExecuteAgent(None, tools, store=store), store, "r")
    assert run.status is RunStatus.SUCCEEDED
    assert calls(tools)["assets"] == [{"site": "EAST", "note": ""}]
    assert calls(tools)["sites"] == []
    assert [a.version for a in run.attempts] == [1, 2]
    assert run_from_store(store, "r").status is RunStatus.SUCCEEDED


async def test_a_resumed_run_replans_after_the_recorded_versions() -> None:
    from langchain_core.messages import BaseMessage

    from planexec.agent import PlanExecuteAgent
    from planexec.testing import FunctionChatModel, messages_text

    store = MemoryRunStore()
    bus = EventBus()
    store.attach(bus)
    v1 = Plan(steps=(Step(id=1, tool="sites"), Step(id=2, tool="nosuchtool", depends_on=(1,))))
    await bus.emit(RunStarted(run_id="r", question="which assets?"))
    await bus.emit(PlanCreated(run_id="r", version=1, plan=v1))
    await bus.emit(StepFinished(run_id="r", result=ok(1, "sites", ["MAIN", "EAST"])))
    orphan(store, "r")

    prompts: list[str] = []

    def reply(messages: list[BaseMessage]) -> str:
        text = messages_text(messages)
        prompts.append(text)
        if "Step results" in text:
            return "EAST has CH-6."
        return (
            "#Task3: assets of the second site\n#Tool3: assets\n"
            '#Args3: {"site": "<step_1[1]>"}\n#Dependency3: #S1\n'
        )

    tools = agent_tools()
    agent = PlanExecuteAgent(FunctionChatModel(function=reply), tools, store=store)
    run = await resume_run(agent, store, "r")

    assert run.status is RunStatus.SUCCEEDED, run.error
    assert [a.version for a in run.attempts] == [1, 2]
    assert calls(tools)["sites"] == []
    assert calls(tools)["assets"] == [{"site": "EAST", "note": ""}]
    assert run.answer == "EAST has CH-6."
    assert [p.version for p in store.plans("r")] == [1, 2]
    assert store.plans("r")[1].reason is not None
    assert store.get_run("r").plan_version == 2


async def test_a_live_process_with_the_runs_pid_but_another_start_time_does_not_own_it() -> None:
    store = MemoryRunStore()
    await record_partial_run(store)
    store._runs["run-1"].pid_start = 12.0  # this pid, but a process started long ago
    assert store.get_run("run-1").status is RunStatus.INTERRUPTED
    assert plan_resume(store, "run-1", is_safe=safe_tools).rerun == (2,)
