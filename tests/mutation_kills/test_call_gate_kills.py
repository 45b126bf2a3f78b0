"""The call gate's behaviours that once survived mutation (issue 33; mutation/mutants.toml).

Through the `Executor`'s public seams only (its ``selector`` and ``approvals`` hooks,
`Executor.may_start_early`), so the tests hold whatever the executor's inside looks
like. Oracles: the fake tools' call logs and the step results' typed fields.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from planexec.approval import ApprovalAction, ApprovalDecision, ApprovalGate, ApprovalPolicy
from planexec.errors import ClaimRefusal, DecisionClaimError, ErrorKind
from planexec.events import EventBus
from planexec.executor import Executor
from planexec.plan import Plan, Ref, Step
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.selection import ToolChoice
from planexec.store import ApprovalRecord, MemoryRunStore, RequestState, RunStore, SQLiteRunStore
from planexec.store.codec import args_digest
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog, ToolSpec

READ = {"read_only": True}
DESTRUCTIVE = {"destructive": True}


def catalog() -> ToolCatalog:
    wipe = fake_tool("wipe", {"wiped": True}, args={"site": str}, hints=DESTRUCTIVE)
    wipe.metadata["planexec"] = {**wipe.metadata.get("planexec", {}), "server": "iot"}
    return ToolCatalog([
        fake_tool("sites", {"level": float("nan"), "names": ["MAIN"]}, hints=READ),
        fake_tool("setpoint", {"ok": True}, args={"value": float}, hints=READ),
        wipe,
    ])


def calls(cat: ToolCatalog, name: str) -> list[dict[str, Any]]:
    spec = cat.lookup(name)
    assert spec is not None
    return [dict(c) for c in spec.tool.metadata["calls"].calls]


class Gate:
    """An approvals hook at the executor's seam: answers every review with ``decision``."""

    def __init__(self, decision: ApprovalDecision | None) -> None:
        self.decision = decision
        self.reviewed: list[tuple[int, str, dict[str, Any]]] = []

    async def review(
        self,
        step: Step,
        spec: ToolSpec,
        args: Mapping[str, Any],
        resolution: Mapping[str, ResolutionMethod],
        *,
        plan_version: int,
        dialect: str | None = None,
    ) -> ApprovalDecision | None:
        self.reviewed.append((step.id, spec.name, dict(args)))
        return self.decision

    def claim(self, step_id: int, plan_version: int, tool: str, args: Mapping[str, Any],
              start: Any, *, server: str | None = None) -> None:
        """Every call this stub decided may go ahead."""

    async def withdraw(self, step_id: int, plan_version: int, reason: str) -> None:
        """Nothing to withdraw."""


class Selector:
    """Selects ``wipe`` for any step that names a server but no tool."""

    async def select(self, step: Step, catalog: ToolCatalog, inputs: Mapping[int, StepResult],
                     *, feedback: Any = None) -> ToolChoice:
        spec = catalog.get("wipe", "iot")
        return ToolChoice(spec=spec, args={"site": "MAIN"}, candidates=("iot.wipe",),
                          scope="server 'iot'")


async def run(cat: ToolCatalog, *steps: Step, **kw: Any) -> dict[int, StepResult]:
    results = await Executor(cat, **kw).run(Plan(steps=tuple(steps)))
    return {r.step_id: r for r in results}


async def test_a_step_that_selects_its_tool_passes_the_approval_gate() -> None:
    """Kills exec-selected-skips-gate: the selected destructive tool is not called
    while its approval is deferred."""
    cat = catalog()
    gate = Gate(ApprovalDecision.defer("wait"))
    out = await run(cat, Step(id=1, task="wipe the main site", server="iot"),
                    selector=Selector(), approvals=gate)
    assert [(s, t) for s, t, _ in gate.reviewed] == [(1, "wipe")]
    assert out[1].status is StepStatus.WAITING_APPROVAL
    assert calls(cat, "wipe") == []


async def test_an_approval_without_arguments_is_treated_as_deferred() -> None:
    """Kills exec-argless-decision-runs: an approve the gate did not fill in (no args)."""
    cat = catalog()
    gate = Gate(ApprovalDecision(ApprovalAction.APPROVE))
    out = await run(cat, Step(id=1, tool="wipe", server="iot", args={"site": "MAIN"}),
                    approvals=gate)
    assert out[1].status is StepStatus.WAITING_APPROVAL
    assert calls(cat, "wipe") == []


async def test_an_approval_with_arguments_calls_the_tool_with_them() -> None:
    """Kills exec-approval-args-ignored."""
    cat = catalog()
    gate = Gate(ApprovalDecision(ApprovalAction.EDIT, args={"site": "SOUTH"},
                                 edited={"site": "SOUTH"}))
    out = await run(cat, Step(id=1, tool="wipe", server="iot", args={"site": "MAIN"}),
                    approvals=gate)
    assert out[1].status is StepStatus.SUCCEEDED
    assert calls(cat, "wipe") == [{"site": "SOUTH"}]
    assert out[1].resolution["site"] is ResolutionMethod.EDITED


async def test_a_rejection_fails_the_step_rejected_without_a_call() -> None:
    """Kills exec-reject-runs."""
    cat = catalog()
    out = await run(cat, Step(id=1, tool="wipe", server="iot", args={"site": "MAIN"}),
                    approvals=Gate(ApprovalDecision.reject("no")))
    assert out[1].error_kind is ErrorKind.REJECTED
    assert calls(cat, "wipe") == []


def test_a_cut_off_step_never_starts_before_the_plan_is_complete() -> None:
    """Kills exec-cut-off-starts-early."""
    ex = Executor(catalog())
    assert ex.may_start_early(Step(id=1, tool="sites"))
    assert not ex.may_start_early(Step(id=1, tool="sites", cut_off=True))
    assert not ex.may_start_early(Step(id=1, tool="sites", args_valid=False))
    assert not ex.may_start_early(Step(id=1, tool="wipe", server="iot", args={"site": "x"}))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_a_non_finite_plan_literal_is_refused_before_the_call(bad: float) -> None:
    """Kills exec-literal-nan-passes and exec-literal-nan-not-literal."""
    cat = catalog()
    out = await run(cat, Step(id=1, tool="setpoint", args={"value": bad}))
    assert out[1].error_kind is ErrorKind.ARGS_INVALID
    assert calls(cat, "setpoint") == []
    # a plan literal: no re-resolution changes it, so recovery must re-plan (was a bug:
    # the failure named no literal, and the run spent a re-resolution on it)
    assert out[1].failure is not None and out[1].failure.literal_args == ("value",)
    nested = await run(cat, Step(id=1, tool="setpoint", args={"value": [1.0, bad]}))
    assert nested[1].failure is not None and nested[1].failure.literal_args == ("value",)


async def test_a_non_finite_resolved_value_is_refused_before_the_call() -> None:
    """Kills res-nan-passes: a reference to an output holding NaN."""
    cat = catalog()
    out = await run(cat, Step(id=1, tool="sites"),
                    Step(id=2, tool="setpoint", args={"value": Ref(1, ("level",))},
                         depends_on=(1,)))
    assert out[2].error_kind is ErrorKind.ARGS_INVALID
    assert calls(cat, "setpoint") == []


@pytest.mark.parametrize("bad", [math.nan, math.inf])
async def test_non_finite_edited_arguments_are_refused_before_the_call(bad: float) -> None:
    """Kills exec-call-nan-passes: the approval put a NaN/inf in the arguments."""
    cat = catalog()
    gate = Gate(ApprovalDecision(ApprovalAction.EDIT, args={"value": bad}, edited={"value": bad}))
    setpoint = ToolCatalog([fake_tool("setpoint", {"ok": True}, args={"value": float},
                                      hints=DESTRUCTIVE)])
    out = await run(setpoint, Step(id=1, tool="setpoint", args={"value": 1.5}), approvals=gate)
    assert out[1].error_kind is ErrorKind.ARGS_INVALID
    assert calls(setpoint, "setpoint") == []
    assert calls(cat, "setpoint") == []


# -- the gate: an approved call claims its decision --------------------------------------


class ClaimRefused(Gate):
    """Approves every call, but no claim succeeds (the decision was taken by another)."""

    def claim(self, step_id: int, plan_version: int, tool: str, args: Mapping[str, Any],
              start: Any, *, server: str | None = None) -> None:
        raise DecisionClaimError("claimed already", refusal=ClaimRefusal.ALREADY_CLAIMED)


async def test_a_refused_claim_leaves_the_tool_uncalled() -> None:
    """Kills exec-claim-refusal-runs."""
    cat = catalog()
    gate = ClaimRefused(ApprovalDecision(ApprovalAction.APPROVE, args={"site": "MAIN"}))
    out = await run(cat, Step(id=1, tool="wipe", server="iot", args={"site": "MAIN"}),
                    approvals=gate)
    assert out[1].status is StepStatus.WAITING_APPROVAL
    assert calls(cat, "wipe") == []


async def test_an_approved_call_claims_its_decision_in_the_store() -> None:
    """Kills exec-claim-skipped: the decision is spent by the call (claimed, with the
    call's start recorded), so it cannot allow a second one."""
    cat = catalog()
    store = MemoryRunStore()

    async def approve(request: Any) -> ApprovalDecision:
        return ApprovalDecision.approve(by="ann")

    gate = ApprovalGate(ApprovalPolicy(), approve, bus=EventBus(), run_id="r", store=store)
    out = await run(cat, Step(id=1, tool="wipe", server="iot", args={"site": "MAIN"}),
                    approvals=gate, run_id="r")
    assert out[1].status is StepStatus.SUCCEEDED
    [record] = store.approval_requests("r")
    assert record.state is RequestState.CLAIMED
    assert [e["type"] for e in store.events("r")].count("ToolCallStarted") == 1


@pytest.mark.parametrize(
    ("edit", "kind"),
    [({"site": "<step_1.id>"}, ErrorKind.RESOLUTION_FAILED),
     ({"site": ["MAIN", "SOUTH"]}, ErrorKind.ARGS_INVALID)],
)
async def test_edited_arguments_are_checked_before_the_call(
    edit: dict[str, Any], kind: ErrorKind
) -> None:
    """Kills exec-edited-args-unchecked: an edit holding a placeholder, or failing the
    tool's schema, is refused after approval (the hook is ours, not the gate's)."""
    cat = catalog()
    gate = Gate(ApprovalDecision(ApprovalAction.EDIT, args=edit, edited=edit))
    out = await run(cat, Step(id=1, tool="wipe", server="iot", args={"site": "MAIN"}),
                    approvals=gate)
    assert out[1].error_kind is kind
    assert calls(cat, "wipe") == []


class PlaceholderSelector(Selector):
    """Selects ``wipe`` with an argument that still holds a placeholder."""

    async def select(self, step: Step, catalog: ToolCatalog, inputs: Mapping[int, StepResult],
                     *, feedback: Any = None) -> ToolChoice:
        spec = catalog.get("wipe", "iot")
        return ToolChoice(spec=spec, args={"site": "<main_site_id>"}, candidates=("iot.wipe",),
                          scope="server 'iot'")


async def test_a_selected_tool_is_not_called_with_a_placeholder() -> None:
    """Kills exec-invariant-unchecked."""
    cat = catalog()
    out = await run(cat, Step(id=1, task="wipe the main site", server="iot"),
                    selector=PlaceholderSelector(), approvals=Gate(None))
    assert out[1].status is StepStatus.FAILED
    assert calls(cat, "wipe") == []


async def test_the_limits_guard_is_asked_before_every_call() -> None:
    """Kills exec-guard-skipped."""
    cat = catalog()
    asked: list[tuple[int, str]] = []

    def guard(step: Step, tool: str) -> str | None:
        asked.append((step.id, tool))
        return "max_steps reached"

    out = await run(cat, Step(id=1, tool="sites"), guard=guard)
    assert asked == [(1, "sites")]
    assert out[1].error_kind is ErrorKind.LIMIT_EXCEEDED
    assert calls(cat, "sites") == []


# -- the store's claim rule (memory and SQLite: the stores a claim goes through) ----------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunStore]:
    made: RunStore = (MemoryRunStore() if request.param == "memory"
                      else SQLiteRunStore(tmp_path / "runs.db"))
    yield made
    made.close()


ARGS = {"amount": 5, "to": "bob"}


def decided(store: RunStore, *, plan_version: int = 1, action: str = "approve") -> None:
    store.open_request(ApprovalRecord(
        run_id="r", plan_version=plan_version, step_id=2, tool="pay", args=dict(ARGS),
        digest=args_digest(ARGS), reason="tool 'pay' is destructive"))
    store.decide_request("r", plan_version, 2, action=action,
                         args=None if action == "reject" else dict(ARGS), reason="r")


def refusal(store: RunStore, *, plan_version: int = 1, tool: str = "pay",
            args: dict[str, Any] = ARGS, claimer: str = "d",
            server: str | None = None) -> ClaimRefusal | None:
    try:
        store.claim_decision("r", plan_version, 2, tool=tool, digest=args_digest(args),
                             claimer=claimer, server=server)
    except DecisionClaimError as exc:
        return exc.refusal
    return None


def test_a_decision_for_plan_version_1_is_not_claimed_by_plan_version_2(
    store: RunStore,
) -> None:
    """Kills claim-any-version-memory and claim-any-version-sqlite: the same step id of a
    later plan is another step; the decision does not allow its call."""
    decided(store)
    assert refusal(store, plan_version=2) is ClaimRefusal.NO_REQUEST
    assert refusal(store) is None  # plan version 1's call: allowed, once


def test_a_decision_allows_one_call_of_its_tool_with_its_arguments(store: RunStore) -> None:
    """Kills claim-other-args, claim-other-tool, claim-other-server, claim-twice and
    claim-no-request."""
    assert refusal(store) is ClaimRefusal.NO_REQUEST
    decided(store)
    assert refusal(store, args={"amount": 500, "to": "bob"}) is ClaimRefusal.ARGS_MISMATCH
    assert refusal(store, tool="close_account") is ClaimRefusal.TOOL_MISMATCH
    assert refusal(store, server="bank_b") is ClaimRefusal.TOOL_MISMATCH  # its namesake
    assert refusal(store) is None
    assert refusal(store) is ClaimRefusal.ALREADY_CLAIMED


def test_undecided_rejected_and_withdrawn_requests_allow_no_call(store: RunStore) -> None:
    """Kills claim-undecided and claim-withdrawn (claim-rejected's refusal is typed too)."""
    store.open_request(ApprovalRecord(
        run_id="r", plan_version=1, step_id=2, tool="pay", args=dict(ARGS),
        digest=args_digest(ARGS), reason="tool 'pay' is destructive"))
    assert refusal(store) is ClaimRefusal.UNDECIDED
    store.decide_request("r", 1, 2, action="approve", args=dict(ARGS))
    store.withdraw_request("r", 1, 2, "the draft was discarded")
    assert refusal(store) is ClaimRefusal.WITHDRAWN
    decided(store, action="reject")
    assert refusal(store) is ClaimRefusal.REJECTED


def test_only_the_lease_holder_claims_a_decision(store: RunStore) -> None:
    """Kills claim-lease-ignored."""
    decided(store)
    store.acquire_lease("r", "driver-a", ttl=60)
    assert refusal(store, claimer="driver-b") is ClaimRefusal.LEASE_LOST
    assert refusal(store, claimer="driver-a") is None
