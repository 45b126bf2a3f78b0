"""The compare-and-set records of a store, written once for every store (internal).

A store keeps the lease of each run and each step's approval requests in its own way
(in memory, in rows of SQLite or PostgreSQL); what taking, renewing and giving up a
lease, and opening, deciding, withdrawing and claiming a request do to those records is
the same everywhere, and is written here. A store gives `CompareAndSet` these:

- ``_cas(run_id, fn, event)``: run ``fn(tx)`` in one transaction of the store (with the
  run's lock where other processes may write), appending ``event`` in the same
  transaction when given; ``fn`` raising leaves everything as it was;
- ``_latest_request(tx, run_id, plan_version, step_id)``: the step's latest request;
- ``_put_request(tx, record)``: write a request, replacing the one with its number;
- ``_lease_row(tx, run_id)``: the run's lease;
- ``_put_lease(tx, lease)``: write the run's lease;
- ``_drop_lease(tx, run_id, owner)``: delete the run's lease if ``owner`` holds it
  (whether it did).

``tx`` is whatever the store's transaction works on (a connection; None in memory).
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from planexec.events import Event
from planexec.store.base import (
    LEASE_TTL,
    ApprovalRecord,
    Lease,
    RequestState,
    check_claim,
    check_decidable,
    decided,
    lease_lost,
    lease_refused,
    new_lease,
)
from planexec.store.codec import args_digest

__all__ = ["CompareAndSet"]

Tx = TypeVar("Tx")
T = TypeVar("T")

SUPERSEDED = "superseded: the step asked again"
"""Why a step's open or decided request is withdrawn when the step asks again."""


class CompareAndSet(ABC, Generic[Tx]):
    """A store's leases and approval requests, each change one compare-and-set.

    Each operation reads the record it changes and writes the new one in one transaction
    of the store (see the module's docstring for what the store provides).
    """

    @abstractmethod
    def _cas(self, run_id: str, fn: Callable[[Tx], T], event: Event | None = None) -> T:
        ...

    @abstractmethod
    def _latest_request(
        self, tx: Tx, run_id: str, plan_version: int, step_id: int
    ) -> ApprovalRecord | None:
        ...

    @abstractmethod
    def _put_request(self, tx: Tx, rec: ApprovalRecord) -> None:
        ...

    @abstractmethod
    def _lease_row(self, tx: Tx, run_id: str) -> Lease | None:
        ...

    @abstractmethod
    def _put_lease(self, tx: Tx, lease: Lease) -> None:
        ...

    @abstractmethod
    def _drop_lease(self, tx: Tx, run_id: str, owner: str) -> bool:
        ...

    def acquire_lease(self, run_id: str, owner: str, *, ttl: float = LEASE_TTL) -> Lease:
        """Take the run's lease (see `planexec.store.RunStore.acquire_lease`)."""

        def cas(tx: Tx) -> Lease:
            now = time.time()
            held = self._lease_row(tx, run_id)
            if held is not None and held.owner != owner and held.live(now):
                raise lease_refused(run_id, held)
            lease = new_lease(run_id, owner, ttl, now, held)
            self._put_lease(tx, lease)
            return lease

        return self._cas(run_id, cas)

    def renew_lease(self, run_id: str, owner: str) -> Lease:
        """Renew ``owner``'s lease (raises `LeaseHeldError` when it lost it)."""

        def cas(tx: Tx) -> Lease:
            held = self._lease_row(tx, run_id)
            if held is None or held.owner != owner:
                raise lease_lost(run_id, owner, held)
            lease = new_lease(run_id, owner, held.ttl, time.time(), held)
            self._put_lease(tx, lease)
            return lease

        return self._cas(run_id, cas)

    def release_lease(self, run_id: str, owner: str) -> bool:
        """Give up ``owner``'s lease (whether it held it)."""
        return self._cas(run_id, lambda tx: self._drop_lease(tx, run_id, owner))

    def open_request(
        self, request: ApprovalRecord, *, event: Event | None = None
    ) -> ApprovalRecord:
        """Record an open request (see `planexec.store.RunStore.open_request`)."""

        def cas(tx: Tx) -> ApprovalRecord:
            prev = self._latest_request(tx, request.run_id, request.plan_version,
                                        request.step_id)
            number = 1
            if prev is not None:
                number = prev.request_no + 1
                if prev.state in (RequestState.OPEN, RequestState.DECIDED):
                    self._put_request(tx, dataclasses.replace(
                        prev, state=RequestState.WITHDRAWN, withdrawn_reason=SUPERSEDED))
            rec = dataclasses.replace(request, request_no=number, state=RequestState.OPEN,
                                      opened_at=request.opened_at or time.time())
            self._put_request(tx, rec)
            return rec

        return self._cas(request.run_id, cas, event)

    def decide_request(
        self,
        run_id: str,
        plan_version: int,
        step_id: int,
        *,
        action: str,
        args: dict[str, Any] | None,
        edited: dict[str, Any] | None = None,
        reason: str | None = None,
        by: str | None = None,
        at: float | None = None,
        request_no: int | None = None,
        event: Event | None = None,
    ) -> ApprovalRecord:
        """Decide the step's latest request, compare-and-set."""
        digest = args_digest(args) if args is not None else None

        def cas(tx: Tx) -> ApprovalRecord:
            rec = check_decidable(self._latest_request(tx, run_id, plan_version, step_id),
                                  run_id, plan_version, step_id, request_no)
            new = decided(rec, action=action, args=args, digest=digest, edited=edited,
                          reason=reason, by=by, at=at if at is not None else time.time())
            self._put_request(tx, new)
            return new

        return self._cas(run_id, cas, event)

    def withdraw_request(
        self, run_id: str, plan_version: int, step_id: int, reason: str
    ) -> ApprovalRecord | None:
        """Withdraw the step's latest request unless a call claimed it."""

        def cas(tx: Tx) -> ApprovalRecord | None:
            rec = self._latest_request(tx, run_id, plan_version, step_id)
            if rec is None or rec.state in (RequestState.CLAIMED, RequestState.WITHDRAWN):
                return None
            new = dataclasses.replace(rec, state=RequestState.WITHDRAWN, withdrawn_reason=reason)
            self._put_request(tx, new)
            return new

        return self._cas(run_id, cas)

    def claim_decision(
        self,
        run_id: str,
        plan_version: int,
        step_id: int,
        *,
        tool: str,
        digest: str,
        claimer: str,
        event: Event | None = None,
        server: str | None = None,
    ) -> ApprovalRecord:
        """Claim the step's decision and record the call start, in one transaction."""

        def cas(tx: Tx) -> ApprovalRecord:
            now = time.time()
            rec = self._latest_request(tx, run_id, plan_version, step_id)
            check_claim(rec, run_id=run_id, step_id=step_id, tool=tool, digest=digest,
                        claimer=claimer, lease=self._lease_row(tx, run_id), now=now,
                        server=server)
            assert rec is not None
            new = dataclasses.replace(rec, state=RequestState.CLAIMED, claimed_by=claimer,
                                      claimed_at=now)
            self._put_request(tx, new)
            return new

        return self._cas(run_id, cas, event)
