"""The store's contract for leases, approval requests, decisions and claims.

Run against every store (memory, SQLite): `make_store` gives two handles on one store
(two connections for SQLite), so a compare-and-set is checked across handles.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from store_fixtures import StoreFactory

from planexec.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ClaimRefusal,
    DecisionClaimError,
    LeaseHeldError,
)
from planexec.events import ApprovalDecided, ApprovalRequested, EventBus, ToolCallStarted
from planexec.store import ApprovalRecord, Lease, RequestState, SQLiteRunStore
from planexec.store.base import HOST
from planexec.store.codec import args_digest, canonical_json

RUN = "run-1"


def request(
    args: dict[str, object] | None = None, tool: str = "pay", step: int = 2
) -> ApprovalRecord:
    args = {"amount": 5, "to": "bob"} if args is None else args
    return ApprovalRecord(
        run_id=RUN, plan_version=1, step_id=step, tool=tool, args=dict(args),
        digest=args_digest(args), policy={"require": ["destructive"], "tools": [], "allow": []},
        reason="tool 'pay' is destructive",
    )


# -- the digest ------------------------------------------------------------------------


def test_the_digest_is_of_canonical_json_whatever_the_key_order() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'
    assert args_digest({"a": 1, "b": 2}) == args_digest({"b": 2, "a": 1})
    assert args_digest({"a": 1}) != args_digest({"a": "1"})
    assert args_digest({"a": 1}) != args_digest({"a": 1, "b": None})


# -- leases ----------------------------------------------------------------------------


def test_a_second_owner_is_refused_with_the_holder_named(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    lease = one.acquire_lease(RUN, "driver-a", ttl=60)
    assert (lease.owner, lease.pid, lease.host) == ("driver-a", os.getpid(), HOST)
    with pytest.raises(LeaseHeldError) as info:
        two.acquire_lease(RUN, "driver-b", ttl=60)
    assert isinstance(info.value.holder, Lease)
    assert info.value.holder.owner == "driver-a"
    assert info.value.run_id == RUN
    assert "driver-a" in str(info.value)
    # the holder renews and re-acquires; the other cannot renew what it never held
    assert one.renew_lease(RUN, "driver-a").heartbeat_at >= lease.heartbeat_at
    assert one.acquire_lease(RUN, "driver-a", ttl=60).acquired_at == lease.acquired_at
    with pytest.raises(LeaseHeldError):
        two.renew_lease(RUN, "driver-b")
    assert two.release_lease(RUN, "driver-b") is False
    assert one.release_lease(RUN, "driver-a") is True
    assert two.get_lease(RUN) is None
    assert two.acquire_lease(RUN, "driver-b", ttl=60).owner == "driver-b"


def test_an_expired_lease_is_taken_over(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    one.acquire_lease(RUN, "driver-a", ttl=0.01)
    time.sleep(0.05)
    assert two.acquire_lease(RUN, "driver-b", ttl=60).owner == "driver-b"
    with pytest.raises(LeaseHeldError) as info:  # the old holder learns it lost it
        one.renew_lease(RUN, "driver-a")
    assert info.value.holder is not None and info.value.holder.owner == "driver-b"


def test_a_lease_of_a_dead_process_is_taken_over_at_once(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    code = (
        "import sys; from planexec.store import SQLiteRunStore; "
        "s = SQLiteRunStore(sys.argv[1]); s.acquire_lease('run-1', 'dead', ttl=3600); s.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    with SQLiteRunStore(path) as store:
        held = store.get_lease(RUN)
        assert held is not None and held.owner == "dead" and not held.live()
        assert store.acquire_lease(RUN, "alive", ttl=60).owner == "alive"


# -- requests and decisions --------------------------------------------------------------


def test_a_request_is_durable_with_its_policy_and_digest(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    opened = one.open_request(request())
    assert (opened.request_no, opened.state) == (1, RequestState.OPEN)
    (seen,) = two.approval_requests(RUN)
    assert seen == opened
    assert seen.policy["require"] == ["destructive"]
    assert seen.digest == args_digest({"to": "bob", "amount": 5})


def test_a_request_event_given_is_recorded_once(make_store: StoreFactory) -> None:
    store = make_store()
    bus = EventBus()
    store.attach(bus)
    event = ApprovalRequested(run_id=RUN, step_id=2, tool="pay", args={"amount": 5})
    store.open_request(request(), event=event)
    import asyncio

    asyncio.run(bus.emit(event))  # the bus delivers it too: not recorded twice
    asyncio.run(store.flush())
    kinds = [e["type"] for e in store.events(RUN)]
    assert kinds.count("ApprovalRequested") == 1


def test_a_second_decider_is_told_who_decided_first(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    one.open_request(request())
    first = one.decide_request(RUN, 1, 2, action="reject", args=None, reason="no", by="ann")
    assert (first.state, first.action, first.by) == (RequestState.DECIDED, "reject", "ann")
    with pytest.raises(AlreadyDecidedError) as info:
        two.decide_request(RUN, 1, 2, action="edit", args={"amount": 1, "to": "bob"},
                           edited={"amount": 1}, by="bob")
    assert (info.value.action, info.value.by, info.value.state) == ("reject", "ann", "decided")
    assert info.value.at == first.decided_at
    (kept,) = two.approval_requests(RUN)
    assert kept.action == "reject" and kept.by == "ann"


def test_deciding_without_a_request_or_a_withdrawn_one_fails(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(ApprovalError):
        store.decide_request(RUN, 1, 2, action="approve", args={})
    store.open_request(request())
    withdrawn = store.withdraw_request(RUN, 1, 2, "the draft was withdrawn")
    assert withdrawn is not None and withdrawn.state is RequestState.WITHDRAWN
    assert store.withdraw_request(RUN, 1, 2, "again") is None
    with pytest.raises(ApprovalError) as info:
        store.decide_request(RUN, 1, 2, action="approve", args={"amount": 5, "to": "bob"})
    assert not isinstance(info.value, AlreadyDecidedError)


def test_asking_again_supersedes_an_unclaimed_decision(make_store: StoreFactory) -> None:
    store = make_store()
    store.open_request(request())
    store.decide_request(RUN, 1, 2, action="approve", args={"amount": 5, "to": "bob"})
    again = store.open_request(request({"amount": 7, "to": "bob"}))
    assert again.request_no == 2
    first, second = store.approval_requests(RUN)
    assert first.state is RequestState.WITHDRAWN and second.state is RequestState.OPEN
    with pytest.raises(ApprovalError):  # the decider saw request 1: it is gone
        store.decide_request(RUN, 1, 2, action="approve", args={"amount": 7, "to": "bob"},
                             request_no=1)


# -- claims ----------------------------------------------------------------------------


def start(args: dict[str, object], tool: str = "pay") -> ToolCallStarted:
    return ToolCallStarted(run_id=RUN, step_id=2, tool=tool, args=dict(args), plan_version=1)


def test_a_decision_is_claimed_once_with_the_call_start(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    args = {"amount": 5, "to": "bob"}
    one.open_request(request(args))
    one.decide_request(RUN, 1, 2, action="approve", args=args, by="ann")
    event = start(args)
    claimed = one.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args),
                                 claimer="driver-a", event=event)
    assert (claimed.state, claimed.claimed_by) == (RequestState.CLAIMED, "driver-a")
    assert [e["type"] for e in two.events(RUN)].count("ToolCallStarted") == 1
    with pytest.raises(DecisionClaimError) as info:
        two.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args), claimer="driver-b",
                           event=start(args))
    assert info.value.refusal is ClaimRefusal.ALREADY_CLAIMED
    # the refused claim recorded nothing
    assert [e["type"] for e in two.events(RUN)].count("ToolCallStarted") == 1
    with pytest.raises(AlreadyDecidedError) as late:
        two.decide_request(RUN, 1, 2, action="reject", args=None, reason="late")
    assert late.value.state == "claimed"


@pytest.mark.parametrize(
    ("decide", "tool", "args", "refusal"),
    [
        (None, "pay", {"amount": 5, "to": "bob"}, ClaimRefusal.UNDECIDED),
        ("reject", "pay", {"amount": 5, "to": "bob"}, ClaimRefusal.REJECTED),
        ("approve", "close_account", {"amount": 5, "to": "bob"}, ClaimRefusal.TOOL_MISMATCH),
        ("approve", "pay", {"amount": 500, "to": "bob"}, ClaimRefusal.ARGS_MISMATCH),
    ],
)
def test_a_call_that_the_decision_does_not_allow_is_refused(
    make_store: StoreFactory, decide: str | None, tool: str, args: dict[str, object],
    refusal: ClaimRefusal,
) -> None:
    store = make_store()
    asked = {"amount": 5, "to": "bob"}
    store.open_request(request(asked), event=ApprovalRequested(run_id=RUN, step_id=2, tool="pay",
                                                               args=asked))
    if decide is not None:
        store.decide_request(RUN, 1, 2, action=decide, args=None if decide == "reject" else asked,
                             reason="r")
    with pytest.raises(DecisionClaimError) as info:
        store.claim_decision(RUN, 1, 2, tool=tool, digest=args_digest(args), claimer="d",
                             event=start(args, tool))
    assert info.value.refusal is refusal
    assert "ToolCallStarted" not in [e["type"] for e in store.events(RUN)]


@pytest.mark.parametrize(("made_for", "called_on"),
                         [("bank_a", "bank_b"), ("bank_a", None), (None, "bank_b")])
def test_a_decision_for_a_tool_of_one_server_allows_no_call_of_its_namesake(
    make_store: StoreFactory, made_for: str | None, called_on: str | None
) -> None:
    """Two servers may offer a tool of one name: the decision names the server too."""
    store = make_store()
    args = {"amount": 5, "to": "bob"}
    store.open_request(replace(request(args), server=made_for))
    store.decide_request(RUN, 1, 2, action="approve", args=args)
    with pytest.raises(DecisionClaimError) as info:
        store.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args), claimer="d",
                             server=called_on)
    assert info.value.refusal is ClaimRefusal.TOOL_MISMATCH
    assert store.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args), claimer="d",
                                server=made_for).state is RequestState.CLAIMED


def test_no_request_and_withdrawn_requests_allow_no_call(make_store: StoreFactory) -> None:
    store = make_store()
    args = {"amount": 5, "to": "bob"}
    with pytest.raises(DecisionClaimError) as info:
        store.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args), claimer="d")
    assert info.value.refusal is ClaimRefusal.NO_REQUEST
    store.open_request(request(args))
    store.decide_request(RUN, 1, 2, action="approve", args=args)
    store.withdraw_request(RUN, 1, 2, "the draft was withdrawn")
    with pytest.raises(DecisionClaimError) as info:
        store.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args), claimer="d")
    assert info.value.refusal is ClaimRefusal.WITHDRAWN


def test_a_claim_needs_the_lease_when_another_driver_holds_it(make_store: StoreFactory) -> None:
    store = make_store()
    args = {"amount": 5, "to": "bob"}
    store.open_request(request(args))
    store.decide_request(RUN, 1, 2, action="edit", args=args, edited={"amount": 5})
    store.acquire_lease(RUN, "driver-a", ttl=60)
    with pytest.raises(DecisionClaimError) as info:
        store.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args), claimer="driver-b")
    assert info.value.refusal is ClaimRefusal.LEASE_LOST
    assert store.claim_decision(RUN, 1, 2, tool="pay", digest=args_digest(args),
                                claimer="driver-a").state is RequestState.CLAIMED


def test_records_round_trip(make_store: StoreFactory) -> None:
    store = make_store()
    rec = store.open_request(replace(request(), server="bank", opened_at=123.0))
    assert rec.opened_at == 123.0
    assert store.approval_requests(RUN)[0].to_dict()["state"] == "open"
    decided = store.decide_request(RUN, 1, 2, action="approve", args={"amount": 5, "to": "bob"},
                                   event=ApprovalDecided(run_id=RUN, step_id=2, action="approve"))
    assert decided.decided_digest == rec.digest
    assert store.approval_requests(RUN) == [decided]
