"""Human approval in process: the policy, the callback (approve, edit, invalid edit,
reject → re-plan, defer), and the pause when nobody decides.

Oracles: the fake tools' own call logs (what the tool really received, how often), the
events on the bus, and the planner's prompt (the rejection reason reaches it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from planexec.agent import PlanExecuteAgent
from planexec.approval import (
    ApprovalAction,
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    pending_approvals,
    recorded_decisions,
)
from planexec.config import AgentConfig
from planexec.errors import ErrorKind
from planexec.events import ApprovalDecided, ApprovalRequested, Event
from planexec.recovery import Action, Failure, RecoveryPolicy, RecoveryState
from planexec.results import ResolutionMethod, RunStatus, StepStatus
from planexec.store import MemoryRunStore
from planexec.store.codec import event_to_json
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text
from planexec.tools import ToolCatalog

READ = {"read_only": True}
DESTRUCTIVE = {"destructive": True}

PLAN = """#Task1: find the asset
#Tool1: assets
#Args1: {}
#Dependency1: None
#Task2: open a work order for it
#Tool2: open_order
#Args2: {"asset": "<step_1[0]>", "priority": "high"}
#Dependency2: #S1
#Task3: list sites (independent)
#Tool3: sites
#Args3: {}
#Dependency3: None
#Task4: read back the order
#Tool4: order_status
#Args4: {"order": "<step_2.id>"}
#Dependency4: #S2
"""


def tools() -> list[Any]:
    return [
        fake_tool("assets", ["CH-6"], hints=READ),
        fake_tool("sites", ["MAIN"], hints=READ),
        fake_tool(
            "open_order",
            function=lambda asset, priority: {"id": f"WO-{asset}-{priority}"},
            args={"asset": str, "priority": int | str},
            hints=DESTRUCTIVE,
        ),
        fake_tool("order_status", {"state": "open"}, args={"order": str}, hints=READ),
        fake_tool("notify", {"sent": True}, args={"text": str}, hints=READ),
    ]


def calls(catalog: ToolCatalog, name: str) -> list[dict[str, Any]]:
    spec = catalog.lookup(name)
    assert spec is not None
    return [dict(c) for c in spec.tool.metadata["calls"].calls]


class Approver:
    """A scripted approval callback that records the requests it got."""

    def __init__(self, decisions: Sequence[ApprovalDecision]) -> None:
        self.decisions = list(decisions)
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return self.decisions.pop(0)


def agent(approver: Approver | None, *, model: Any = None, **approval: Any) -> tuple[
    PlanExecuteAgent, list[Event]
]:
    events: list[Event] = []
    cfg = AgentConfig.model_validate(
        {"approval": approval, "planner": {"max_reprompts": 0}}
    )
    return (
        PlanExecuteAgent(
            model, ToolCatalog(tools()), config=cfg, approver=approver,
            event_handlers=[events.append],
        ),
        events,
    )


async def test_an_approved_step_runs_once_with_the_resolved_arguments() -> None:
    approver = Approver([ApprovalDecision.approve(by="alice")])
    a, events = agent(approver)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.SUCCEEDED
    assert calls(a.catalog, "open_order") == [{"asset": "CH-6", "priority": "high"}]
    [request] = approver.requests  # only the destructive step asked
    assert (request.step_id, request.tool, request.args) == (
        2, "open_order", {"asset": "CH-6", "priority": "high"}
    )
    assert request.resolution["asset"] is not ResolutionMethod.LITERAL
    assert request.resolution["priority"] is ResolutionMethod.LITERAL
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(e.step_id, e.action, e.by, e.args) for e in decided] == [
        (2, "approve", "alice", {"asset": "CH-6", "priority": "high"})
    ]
    assert [e.step_id for e in events if isinstance(e, ApprovalRequested)] == [2]


async def test_an_edit_replaces_the_named_arguments_and_is_marked_edited() -> None:
    approver = Approver([ApprovalDecision.edit({"priority": "low"}, by="bob")])
    a, events = agent(approver)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.SUCCEEDED
    assert calls(a.catalog, "open_order") == [{"asset": "CH-6", "priority": "low"}]
    step2 = next(r for r in run.results if r.step_id == 2)
    assert step2.resolution["priority"] is ResolutionMethod.EDITED
    assert step2.args == {"asset": "CH-6", "priority": "low"}
    # the dependent step saw the output of the edited call
    assert calls(a.catalog, "order_status") == [{"order": "WO-CH-6-low"}]
    [decided] = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.action, decided.edited) == ("edit", {"priority": "low"})


async def test_an_invalid_edit_is_refused_with_the_errors_and_asked_again() -> None:
    approver = Approver([
        ApprovalDecision.edit({"priority": [1, 2]}),  # not an int or a str
        ApprovalDecision.edit({"colour": "red"}),  # no such argument
        ApprovalDecision.edit({"priority": 3}),
    ])
    a, _ = agent(approver)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.SUCCEEDED
    assert calls(a.catalog, "open_order") == [{"asset": "CH-6", "priority": 3}]
    assert len(approver.requests) == 3
    first, second, third = approver.requests
    assert first.problems == ()
    assert any(p.startswith("priority") for p in second.problems)
    assert any("'colour'" in p for p in third.problems)


def test_an_edit_holding_a_placeholder_is_refused() -> None:
    from planexec.approval import apply_edit

    spec = ToolCatalog(tools()).lookup("open_order")
    assert spec is not None
    args, problems = apply_edit(spec, {"asset": "CH-6", "priority": "high"},
                                {"asset": "<step_1.id>"})
    assert args is None and problems and problems[0].startswith("asset:")
    args, problems = apply_edit(spec, {"asset": "CH-6", "priority": "high"}, {"asset": "CH-7"})
    assert (args, problems) == ({"asset": "CH-7", "priority": "high"}, ())


async def test_invalid_edits_past_the_limit_leave_the_step_waiting() -> None:
    approver = Approver([ApprovalDecision.edit({"priority": [1]})] * 2)
    a, _ = agent(approver, max_edit_attempts=2)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(a.catalog, "open_order") == []


async def test_a_rejection_fails_the_step_rejected_and_the_planner_routes_around() -> None:
    prompts: list[str] = []
    second = """#Task1: find the asset
#Tool1: assets
#Args1: {}
#Dependency1: None
#Task2: tell someone instead
#Tool2: notify
#Args2: {"text": "please look at CH-6"}
#Dependency2: #S1
"""

    def reply(call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "plan":
            prompts.append(messages_text(messages))
            return PLAN if len(prompts) == 1 else second
        return "done"

    approver = Approver([ApprovalDecision.reject("no work orders this week", by="carol")])
    a, _ = agent(approver, model=FunctionModel(function=reply))
    run = await a.run("open a work order for the chiller")
    assert run.status is RunStatus.SUCCEEDED
    assert calls(a.catalog, "open_order") == []
    assert calls(a.catalog, "notify") == [{"text": "please look at CH-6"}]
    first = {r.step_id: r for r in run.attempts[0].results}
    assert first[2].status is StepStatus.FAILED
    assert first[2].failure is not None and first[2].failure.kind is ErrorKind.REJECTED
    assert first[2].failure.cause == "no work orders this week"
    assert first[4].status is StepStatus.BLOCKED  # depends on the rejected step
    assert len(prompts) == 2 and "no work orders this week" in prompts[1]


def test_rejected_is_never_retried_even_when_the_table_says_so() -> None:
    policy = RecoveryPolicy(overrides={ErrorKind.REJECTED: Action.RETRY_STEP})
    failure = Failure(ErrorKind.REJECTED, "step 2: rejected", step_id=2, tool="t", safe=True)
    decision = policy.decide(failure, RecoveryState())
    assert decision.action is Action.REPLAN
    assert RecoveryPolicy().decide(failure, RecoveryState()).action is Action.REPLAN


async def test_without_a_callback_the_run_pauses_after_everything_else_ran() -> None:
    store = MemoryRunStore()
    a, events = agent(None, enabled=True)
    a.store = store
    run = await a.execute_plan(PLAN, run_id="r-wait")
    assert run.status is RunStatus.WAITING_APPROVAL
    status = {r.step_id: r.status for r in run.results}
    # the independent step and the dependency ran; the dependent of the waiting one did not
    assert status == {1: StepStatus.SUCCEEDED, 2: StepStatus.WAITING_APPROVAL,
                      3: StepStatus.SUCCEEDED}
    assert calls(a.catalog, "open_order") == [] and calls(a.catalog, "order_status") == []
    waiting = next(r for r in run.results if r.step_id == 2)
    assert waiting.args == {"asset": "CH-6", "priority": "high"} and waiting.error is None
    assert store.get_run("r-wait").status is RunStatus.WAITING_APPROVAL
    [pending] = pending_approvals(store.events("r-wait"))
    assert (pending.step_id, pending.args) == (2, {"asset": "CH-6", "priority": "high"})
    assert run.answer is None


async def test_a_deferring_callback_pauses_the_run_too() -> None:
    approver = Approver([ApprovalDecision.defer("ask the manager")])
    a, _ = agent(approver)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(a.catalog, "open_order") == []


async def test_a_recorded_decision_is_applied_on_resume_without_asking() -> None:
    store = MemoryRunStore()
    a, _ = agent(None, enabled=True)
    a.store = store
    await a.execute_plan(PLAN, run_id="r-res")
    from planexec.runs import decide_step, resume_run

    decided = await decide_step(
        store, "r-res", 2, ApprovalDecision.edit({"priority": "low"}, by="dan"),
        catalog=a.catalog,
    )
    assert decided.args == {"asset": "CH-6", "priority": "low"}
    assert recorded_decisions(store.events("r-res"))[(1, 2)].action is ApprovalAction.EDIT
    assert pending_approvals(store.events("r-res")) == []
    run = await resume_run(a, store, "r-res")
    assert run.status is RunStatus.SUCCEEDED
    assert calls(a.catalog, "open_order") == [{"asset": "CH-6", "priority": "low"}]
    assert len(calls(a.catalog, "assets")) == 1  # finished steps were not run again


@pytest.mark.parametrize(
    ("hints", "require", "named", "allow", "needs"),
    [
        (DESTRUCTIVE, ("destructive",), (), (), True),
        (READ, ("destructive",), (), (), False),
        ({}, ("destructive",), (), (), False),
        ({}, ("unknown",), (), (), True),
        ({"destructive": False}, ("unknown",), (), (), False),
        (READ, ("all",), (), (), True),
        (READ, ("destructive",), ("t",), (), True),
        (DESTRUCTIVE, ("all",), ("t",), ("t",), False),
    ],
)
def test_the_policy(
    hints: dict[str, bool], require: tuple[str, ...], named: tuple[str, ...],
    allow: tuple[str, ...], needs: bool,
) -> None:
    spec = ToolCatalog([fake_tool("t", 1, hints=hints)]).lookup("t")
    assert spec is not None
    policy = ApprovalPolicy(frozenset(require), frozenset(named), frozenset(allow))
    assert (policy.reason(spec) is not None) is needs


def test_approval_events_round_trip_through_the_store_encoding() -> None:
    event = ApprovalRequested(
        run_id="r", step_id=2, tool="t", args={"a": 1},
        resolution={"a": ResolutionMethod.PATH}, reason="why", plan_version=3,
    )
    request = ApprovalRequest.from_event(event_to_json(event))
    assert (request.plan_version, request.step_id, request.args, request.resolution) == (
        3, 2, {"a": 1}, {"a": ResolutionMethod.PATH}
    )


def test_a_rejection_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="reason"):
        ApprovalDecision.reject("  ")


async def test_the_executor_holds_every_step_behind_a_waiting_one_and_still_fails_cycles() -> None:
    from planexec.approval import ApprovalGate
    from planexec.events import EventBus
    from planexec.executor import Executor
    from planexec.plan import Plan, Ref, Step

    catalog = ToolCatalog(tools())
    bus = EventBus()
    gate = ApprovalGate(ApprovalPolicy(), bus=bus, run_id="r")
    plan = Plan(steps=(
        Step(id=1, tool="assets"),
        Step(id=2, tool="open_order", args={"asset": Ref(1, (0,)), "priority": "high"},
             depends_on=(1,)),
        Step(id=3, tool="order_status", args={"order": Ref(2, ("id",))}, depends_on=(2,)),
        Step(id=4, tool="sites", depends_on=(3,)),  # transitively behind step 2
        Step(id=5, tool="sites"),
        Step(id=6, tool="sites", depends_on=(7,)),  # a cycle: still a failure
        Step(id=7, tool="sites", depends_on=(6,)),
    ))
    results = {r.step_id: r for r in await Executor(catalog, approvals=gate, bus=bus).run(plan)}
    assert set(results) == {1, 2, 5, 6, 7}
    assert results[2].status is StepStatus.WAITING_APPROVAL
    assert results[5].status is StepStatus.SUCCEEDED
    assert results[6].error_kind is ErrorKind.MISSING_REFERENCE
    assert calls(catalog, "open_order") == [] and calls(catalog, "order_status") == []


async def test_resuming_without_a_decision_pauses_again_and_calls_nothing() -> None:
    store = MemoryRunStore()
    a, _ = agent(None, enabled=True)
    a.store = store
    await a.execute_plan(PLAN, run_id="r-again")
    from planexec.runs import resume_run

    run = await resume_run(a, store, "r-again")
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(a.catalog, "open_order") == []
    assert len(calls(a.catalog, "assets")) == 1
    assert [r.step_id for r in pending_approvals(store.events("r-again"))] == [2]
