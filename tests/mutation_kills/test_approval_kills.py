"""Approval behaviours that once survived mutation (issue 33; mutation/mutants.toml).

Each test names the mutant ids it kills. Oracles: the fake tools' own call logs, the
events on the bus (and the store's reading of them), the approver's request count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from planexec.agent import PlanExecuteAgent
from planexec.approval import (
    ApprovalAction,
    ApprovalDecision,
    ApprovalGate,
    ApprovalPolicy,
    ApprovalRequest,
    pending_approvals,
    recorded_decisions,
)
from planexec.config import AgentConfig
from planexec.events import ApprovalDecided, ApprovalRequested, Event, EventBus
from planexec.executor import Executor
from planexec.plan import Plan, Step
from planexec.results import RunStatus, StepStatus
from planexec.store import MemoryRunStore
from planexec.store.codec import event_to_json
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec

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
"""


def tools() -> list[Any]:
    return [
        fake_tool("assets", ["CH-6"], hints=READ),
        fake_tool(
            "open_order",
            function=lambda asset, priority: {"id": f"WO-{asset}-{priority}"},
            args={"asset": str, "priority": int | str},
            hints=DESTRUCTIVE,
        ),
    ]


def calls(catalog: ToolCatalog, name: str) -> list[dict[str, Any]]:
    spec = catalog.lookup(name)
    assert spec is not None
    return [dict(c) for c in spec.tool.metadata["calls"].calls]


class Approver:
    """A scripted approval callback that records the requests it got."""

    def __init__(self, decisions: Sequence[ApprovalDecision | BaseException]) -> None:
        self.decisions = list(decisions)
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        answer = self.decisions.pop(0) if len(self.decisions) > 1 else self.decisions[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def agent(approver: Approver | None, **approval: Any) -> tuple[PlanExecuteAgent, list[Event]]:
    events: list[Event] = []
    cfg = AgentConfig.model_validate({"approval": approval, "planner": {"max_reprompts": 0}})
    return (
        PlanExecuteAgent(None, ToolCatalog(tools()), config=cfg, approver=approver,
                         event_handlers=[events.append]),
        events,
    )


def spec_of(name: str, hints: dict[str, Any], server: str | None = None) -> ToolSpec:
    tool = fake_tool(name, 1, hints=hints)
    if server is not None:
        tool.metadata["planexec"] = {**tool.metadata.get("planexec", {}), "server": server}
    spec = ToolCatalog([tool]).lookup(name, server)
    assert spec is not None and spec.server == server
    return spec


# -- the callback ------------------------------------------------------------------


async def test_a_callback_that_raises_leaves_the_tool_uncalled_and_the_step_waiting() -> None:
    """A raising callback: the step waits (approval-raise-runs is killed by
    test_a_callback_that_raises_leaves_the_limits_uncounted: the claim at the call stops
    the tool whatever the callback's branch answers)."""
    approver = Approver([RuntimeError("approval service down")])
    a, events = agent(approver)
    run = await a.execute_plan(PLAN)
    assert calls(a.catalog, "open_order") == []
    assert run.status is RunStatus.WAITING_APPROVAL
    step2 = next(r for r in run.results if r.step_id == 2)
    assert step2.status is StepStatus.WAITING_APPROVAL
    assert not [e for e in events if isinstance(e, ApprovalDecided)]


async def test_a_deferring_callback_records_no_decision_and_the_request_stays_open() -> None:
    """Kills approval-defer-recorded: a deferral is no decision (nothing to replay)."""
    approver = Approver([ApprovalDecision.defer("ask the shift lead")])
    a, events = agent(approver)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(a.catalog, "open_order") == []
    assert not [e for e in events if isinstance(e, ApprovalDecided)]
    recorded = [event_to_json(e) for e in events]
    assert recorded_decisions(recorded) == {}
    assert [(r.step_id, r.tool) for r in pending_approvals(recorded)] == [(2, "open_order")]


async def test_the_approver_is_asked_exactly_max_edit_attempts_times() -> None:
    """Kills approval-edit-attempts-plus-one (and minus one)."""
    approver = Approver([ApprovalDecision.edit({"priority": [1]})])  # always invalid
    a, _ = agent(approver, max_edit_attempts=2)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(a.catalog, "open_order") == []
    assert len(approver.requests) == 2
    assert approver.requests[0].problems == ()
    assert approver.requests[1].problems  # the second ask says why the first was refused


async def test_an_edit_is_merged_over_the_resolved_arguments() -> None:
    """Kills approval-edit-merge-order and approval-approve-ignores-edit."""
    approver = Approver([ApprovalDecision.edit({"priority": "low"})])
    a, _ = agent(approver)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.SUCCEEDED
    assert calls(a.catalog, "open_order") == [{"asset": "CH-6", "priority": "low"}]


# -- recorded decisions ---------------------------------------------------------------


def _decided(step_id: int, plan_version: int, decision: ApprovalDecision) -> dict[str, Any]:
    return event_to_json(
        ApprovalDecided(run_id="r", step_id=step_id, plan_version=plan_version,
                        action=str(decision.action), args=decision.args,
                        edited=decision.edited, reason=decision.reason, by=decision.by,
                        decided_at=decision.at)
    )


def test_the_latest_recorded_decision_of_a_step_wins() -> None:
    """Kills approval-first-decision-wins."""
    events = [
        _decided(2, 1, ApprovalDecision.reject("not now", by="alice")),
        _decided(2, 1, ApprovalDecision.approve(by="bob")),
    ]
    decided = recorded_decisions(events)
    assert list(decided) == [(1, 2)]
    assert (decided[(1, 2)].action.value, decided[(1, 2)].by) == ("approve", "bob")


def test_a_decision_answers_only_the_request_of_its_plan_version() -> None:
    """Kills approval-pending-any-version."""
    request = event_to_json(ApprovalRequested(run_id="r", step_id=2, tool="open_order",
                                              args={}, plan_version=2))
    events = [request, _decided(2, 1, ApprovalDecision.approve(by="bob"))]
    assert [(r.plan_version, r.step_id) for r in pending_approvals(events)] == [(2, 2)]
    events = [request, _decided(2, 2, ApprovalDecision.approve(by="bob"))]
    assert pending_approvals(events) == []


# -- the policy -------------------------------------------------------------------------


def test_approval_tools_match_a_tool_by_its_server_qualified_name() -> None:
    """Kills approval-tools-qualified-name."""
    spec = spec_of("open", READ, server="iot")
    assert ApprovalPolicy(tools=frozenset({"iot.open"})).reason(spec) is not None
    assert ApprovalPolicy(tools=frozenset({"open"})).reason(spec) is not None
    assert ApprovalPolicy(tools=frozenset({"other.open"})).reason(spec) is None
    assert ApprovalPolicy(require=frozenset({"all"}),
                          allow=frozenset({"iot.open"})).reason(spec) is None


def test_require_unknown_leaves_read_only_tools_alone() -> None:
    """Kills approval-unknown-catches-read-only."""
    unknown = ApprovalPolicy(require=frozenset({"unknown"}))
    assert unknown.reason(spec_of("read", READ)) is None
    assert unknown.reason(spec_of("vague", {})) is not None
    assert unknown.reason(spec_of("safe", {"destructive": False})) is None
    assert unknown.reason(spec_of("kill", DESTRUCTIVE)) is None  # that is "destructive"'s


def test_the_default_policy_asks_for_destructive_tools_only() -> None:
    """Kills approval-destructive-negated and approval-all-ignored."""
    default = ApprovalPolicy()
    assert default.reason(spec_of("kill", DESTRUCTIVE)) is not None
    assert default.reason(spec_of("read", READ)) is None
    assert default.reason(spec_of("vague", {})) is None
    assert ApprovalPolicy(require=frozenset({"all"})).reason(spec_of("read", READ)) is not None


async def test_a_step_without_a_callback_is_deferred_and_the_request_recorded() -> None:
    """Kills approval-no-callback-approves."""
    a, events = agent(None, enabled=True)
    run = await a.execute_plan(PLAN)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(a.catalog, "open_order") == []
    assert [e.step_id for e in events if isinstance(e, ApprovalRequested)] == [2]


# -- the gate over the store (requests, decisions and claims are records) ------------------


def gate_of(approver: Approver | None, store: MemoryRunStore | None = None,
            policy: ApprovalPolicy | None = None) -> ApprovalGate:
    return ApprovalGate(policy or ApprovalPolicy(), approver, bus=EventBus(), run_id="r",
                        store=store if store is not None else MemoryRunStore())


def open_order() -> ToolSpec:
    spec = ToolCatalog(tools()).lookup("open_order")
    assert spec is not None
    return spec


ORDER = Step(id=2, tool="open_order", args={"asset": "CH-6", "priority": "high"})


async def review(gate: ApprovalGate, args: dict[str, Any], *, plan_version: int = 1,
                 spec: ToolSpec | None = None, step: Step = ORDER) -> ApprovalDecision | None:
    return await gate.review(step, spec or open_order(), args, {}, plan_version=plan_version)


async def test_a_decision_of_plan_version_1_does_not_apply_to_a_later_plan() -> None:
    """Kills approval-decision-any-version: the same step id in plan version 2 is
    another step; its call is asked about again (and recorded for version 2)."""
    approver = Approver([ApprovalDecision.approve(by="ann")])
    gate = gate_of(approver)
    args = {"asset": "CH-6", "priority": "high"}
    first = await review(gate, args)
    assert first is not None and first.args == args
    again = await review(gate, args, plan_version=2)
    assert len(approver.requests) == 2
    assert [r.plan_version for r in approver.requests] == [1, 2]
    assert again is not None and again.action is ApprovalAction.APPROVE
    assert sorted(r.plan_version for r in gate.store.approval_requests("r")) == [1, 2]


async def test_a_recorded_decision_applies_only_to_its_tool_and_arguments() -> None:
    """Kills approval-recorded-other-args and approval-recorded-other-tool."""
    approver = Approver([ApprovalDecision.approve(by="ann")])
    gate = gate_of(approver)
    first = await review(gate, {"asset": "CH-6", "priority": "high"})
    assert first is not None and first.args == {"asset": "CH-6", "priority": "high"}
    other = await review(gate, {"asset": "CH-7", "priority": "high"})
    assert len(approver.requests) == 2  # other arguments: asked again
    assert other is not None and other.args == {"asset": "CH-7", "priority": "high"}
    close = fake_tool("close_order", function=lambda asset, priority: "closed",
                      args={"asset": str, "priority": int | str}, hints=DESTRUCTIVE)
    spec = ToolCatalog([close]).lookup("close_order")
    assert spec is not None
    third = await review(gate, {"asset": "CH-7", "priority": "high"}, spec=spec)
    assert len(approver.requests) == 3  # another tool, same arguments: asked again
    assert third is not None and approver.requests[-1].tool == "close_order"


async def test_a_recorded_decision_applies_only_to_its_servers_tool() -> None:
    """Kills approval-recorded-other-server: two servers offer ``open_order``; the
    decision made for one is not applied to the other's, which is asked about again."""
    approver = Approver([ApprovalDecision.approve(by="ann")])
    gate = gate_of(approver)
    args = {"asset": "CH-6", "priority": "high"}
    await review(gate, args, spec=replace(open_order(), server="plant_a"))
    again = await review(gate, args, spec=replace(open_order(), server="plant_b"))
    assert [r.server for r in approver.requests] == ["plant_a", "plant_b"]
    assert again is not None and again.action is ApprovalAction.APPROVE


async def test_a_claimed_decision_is_not_applied_again() -> None:
    """Kills approval-claimed-decision-reapplied: once a call claimed the decision, the
    next call of the step (a retry by recovery) asks again."""
    approver = Approver([ApprovalDecision.approve(by="ann")])
    gate = gate_of(approver)
    args = {"asset": "CH-6", "priority": "high"}
    await review(gate, args)
    gate.claim(ORDER.id, 1, "open_order", args, None)
    again = await review(gate, args)
    assert len(approver.requests) == 2
    assert again is not None and again.action is ApprovalAction.APPROVE
    gate.claim(ORDER.id, 1, "open_order", args, None)  # the new decision allows one call


async def test_asking_twice_about_the_same_call_keeps_one_open_request() -> None:
    """Kills approval-open-request-reopened."""
    gate = gate_of(None)
    seen: list[Event] = []
    gate.bus = EventBus([seen.append])
    args = {"asset": "CH-6", "priority": "high"}
    for _ in range(2):
        decision = await review(gate, args)
        assert decision is not None and decision.action is ApprovalAction.DEFER
    assert len(gate.store.approval_requests("r")) == 1
    assert len([e for e in seen if isinstance(e, ApprovalRequested)]) == 1


async def test_the_policy_recorded_for_the_run_holds_under_another_config() -> None:
    """Kills approval-recorded-policy-ignored: a run that asked under require = all
    resumes under the default policy; its read-only steps still need approval."""
    store = MemoryRunStore()
    every = gate_of(None, store, ApprovalPolicy(require=frozenset({"all"})))
    await review(every, {"asset": "CH-6", "priority": "high"})
    resumed = gate_of(None, store)
    read = ToolCatalog(tools()).lookup("assets")
    assert read is not None
    assert resumed.needs(read, 1, 1) is not None
    assert gate_of(None).needs(read, 1, 1) is None  # the default policy alone: no


async def test_a_decision_on_record_wins_over_the_callback_that_came_second() -> None:
    """Kills approval-late-decider-wins: another decider (a person on the console) was
    first; the callback's approval is not what the gate answers."""
    store = MemoryRunStore()

    class Late(Approver):
        async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
            store.decide_request("r", request.plan_version, request.step_id,
                                 action="reject", args=None, reason="not today", by="bob")
            return await super().__call__(request)

    gate = gate_of(Late([ApprovalDecision.approve(by="ann")]), store)
    decision = await review(gate, {"asset": "CH-6", "priority": "high"})
    assert decision is not None
    assert (decision.action, decision.by) == (ApprovalAction.REJECT, "bob")


async def test_a_callback_that_raises_leaves_the_limits_uncounted() -> None:
    """Kills approval-raise-runs: a step waiting for a decision is not admitted by the
    limits guard (it would count against max_steps and the per-tool limits)."""
    admitted: list[tuple[int, str]] = []

    def guard(step: Step, tool: str) -> str | None:
        admitted.append((step.id, tool))
        return None

    cat = ToolCatalog(tools())
    gate = gate_of(Approver([RuntimeError("approval service down")]))
    results = await Executor(cat, approvals=gate, guard=guard).run(
        Plan(steps=(ORDER,)))
    assert [r.status for r in results] == [StepStatus.WAITING_APPROVAL]
    assert admitted == []
    assert calls(cat, "open_order") == []
