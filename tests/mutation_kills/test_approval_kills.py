"""Approval behaviours that once survived mutation (issue 33; mutation/mutants.toml).

Each test names the mutant ids it kills. Oracles: the fake tools' own call logs, the
events on the bus (and the store's reading of them), the approver's request count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planexec.agent import PlanExecuteAgent
from planexec.approval import (
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    pending_approvals,
    recorded_decisions,
)
from planexec.config import AgentConfig
from planexec.events import ApprovalDecided, ApprovalRequested, Event
from planexec.results import RunStatus, StepStatus
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
    """Kills approval-raise-runs."""
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
