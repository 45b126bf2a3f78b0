"""Shared helpers for the store tests (imported by name; not a conftest)."""

from __future__ import annotations

from collections.abc import Callable

from planexec.errors import ErrorKind
from planexec.events import (
    EventBus,
    LLMCalled,
    PlanCreated,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    ToolCallStarted,
)
from planexec.plan import Diagnostic, Plan, Ref, Severity, Step, Template
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.store import RunStore


def sample_plan() -> Plan:
    return Plan(
        steps=(
            Step(id=1, task="list sites", tool="sites"),
            Step(
                id=2,
                task="assets of the first site",
                tool="assets",
                args={"site": Ref(1, (0,), raw="<step_1[0]>"), "note": "x"},
                depends_on=(1,),
            ),
            Step(
                id=3,
                task="create a work order",
                tool="create_work_order",
                args={
                    "text": Template(("fix ", Ref(2, ("items", 0, "id"), whole_value=False))),
                    "literal": {"__planexec_ref__": "not a ref"},
                },
                depends_on=(2,),
            ),
        ),
        diagnostics=(Diagnostic(2, Severity.WARNING, "ARGS_REPAIRED", "single quotes", 1),),
        dialect="hashstep",
        source="#Task1: list sites\n#Tool1: sites\n",
    )


def ok(step_id: int, tool: str, output: object, started_at: float = 100.0) -> StepResult:
    return StepResult(
        step_id=step_id,
        tool=tool,
        status=StepStatus.SUCCEEDED,
        args={},
        output=output,
        raw_output=str(output),
        resolution={"site": ResolutionMethod.PATH},
        attempts=1,
        started_at=started_at,
        duration=0.25,
    )


async def record_partial_run(store: RunStore, run_id: str = "run-1") -> None:
    """Step 1 finished, step 2's call started and never finished, step 3 not started."""
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id=run_id, question="which assets?", config={"k": 1}, ts=100.0))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=sample_plan(), text="plan text"))
    await bus.emit(StepStarted(run_id=run_id, step_id=1, tool="sites"))
    await bus.emit(ToolCallStarted(run_id=run_id, step_id=1, tool="sites", args={}))
    await bus.emit(LLMCalled(run_id=run_id, purpose="resolve", step_id=1))
    await bus.emit(StepFinished(run_id=run_id, result=ok(1, "sites", ["MAIN", "EAST"])))
    await bus.emit(StepStarted(run_id=run_id, step_id=2, tool="assets"))
    await bus.emit(
        ToolCallStarted(run_id=run_id, step_id=2, tool="assets", args={"site": "MAIN"})
    )


async def record_failed_run(store: RunStore, run_id: str = "run-failed") -> None:
    bus = EventBus()
    store.attach(bus)
    await bus.emit(RunStarted(run_id=run_id, question="will fail", ts=200.0))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=sample_plan()))
    failed = StepResult(
        step_id=1,
        tool="sites",
        status=StepStatus.FAILED,
        error="step 1: tool 'sites' raised: boom",
        error_kind=ErrorKind.TOOL_ERROR,
        attempts=3,
        started_at=200.0,
        duration=0.1,
    )
    await bus.emit(StepFinished(run_id=run_id, result=failed))
    await bus.emit(
        RunFinished(run_id=run_id, status="FAILED", error="step 1: tool 'sites' raised: boom")
    )


StoreFactory = Callable[[], RunStore]
