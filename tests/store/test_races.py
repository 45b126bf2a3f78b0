"""Replicas racing on one run: one wins each compare-and-set, the others are told why.

Each racer is its own store object (its own connection: a replica) on one shared store,
in its own thread, released at once by a barrier. SQLite and PostgreSQL: the stores that
several processes or hosts share. (What a replica of another host sees is the same as
another connection of this one: the store keeps nothing about a run in the object.)
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from planexec.errors import AlreadyDecidedError, ClaimRefusal, DecisionClaimError, LeaseHeldError
from planexec.events import ToolCallStarted
from planexec.store import RunStore, SQLiteRunStore, open_store
from planexec.store.base import ApprovalRecord
from planexec.store.codec import args_digest

RACERS = 6
ROUNDS = 3
RUN = "run-race"
ARGS = {"amount": 5, "to": "bob"}


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], RunStore]]:
    """Opens another replica's store on the one shared store."""
    if request.param == "postgres":
        where = str(request.getfixturevalue("postgres_url"))
    else:
        where = str(tmp_path / "runs.sqlite3")
        SQLiteRunStore(where).close()
    opened: list[RunStore] = []

    def replica() -> RunStore:
        store = open_store(where)
        opened.append(store)
        return store

    yield replica
    for store in opened:
        store.close()


def race(stores: list[RunStore], attempt: Callable[[int, RunStore], str]) -> Counter[str]:
    """Run ``attempt(i, store)`` in one thread per store, all released at once."""
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []
    lock = threading.Lock()

    def go(i: int, store: RunStore) -> None:
        barrier.wait(timeout=30)
        try:
            outcome = attempt(i, store)
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test counts
            outcome = f"{type(exc).__name__}"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=go, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return Counter(outcomes)


def test_one_replica_takes_a_new_runs_lease(shared: Callable[[], RunStore]) -> None:
    stores = [shared() for _ in range(RACERS)]
    for n in range(ROUNDS):  # a run with no lease row yet: nothing to lock but the run
        run_id = f"{RUN}-{n}"

        def take(i: int, store: RunStore, run_id: str = run_id) -> str:
            try:
                store.acquire_lease(run_id, f"replica-{i}", ttl=60)
            except LeaseHeldError:
                return "refused"
            return "held"

        assert race(stores, take) == Counter({"held": 1, "refused": RACERS - 1})
        lease = stores[0].get_lease(run_id)
        assert lease is not None and lease.owner.startswith("replica-")


def test_one_replica_decides_and_one_claims(shared: Callable[[], RunStore]) -> None:
    stores = [shared() for _ in range(RACERS)]
    for n in range(ROUNDS):
        run_id = f"{RUN}-{n}"
        stores[0].open_request(ApprovalRecord(run_id=run_id, plan_version=1, step_id=2,
                                              tool="pay", args=ARGS, digest=args_digest(ARGS)))

        def decide(i: int, store: RunStore, run_id: str = run_id) -> str:
            try:
                store.decide_request(run_id, 1, 2, action="approve", args=ARGS, by=f"r{i}")
            except AlreadyDecidedError:
                return "already decided"
            return "decided"

        assert race(stores, decide) == Counter({"decided": 1, "already decided": RACERS - 1})

        def claim(i: int, store: RunStore, run_id: str = run_id) -> str:
            start = ToolCallStarted(run_id=run_id, step_id=2, tool="pay", args=dict(ARGS))
            try:
                store.claim_decision(run_id, 1, 2, tool="pay", digest=args_digest(ARGS),
                                     claimer=f"replica-{i}", event=start)
            except DecisionClaimError as exc:
                return str(exc.refusal)
            return "claimed"

        assert race(stores, claim) == Counter(
            {"claimed": 1, str(ClaimRefusal.ALREADY_CLAIMED): RACERS - 1}
        )
        # the call start went in with the one claim, and only with it
        starts = [e for e in stores[-1].events(run_id) if e["type"] == "ToolCallStarted"]
        assert len(starts) == 1
