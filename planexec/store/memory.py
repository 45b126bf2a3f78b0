"""`MemoryRunStore`: the run store for tests and short-lived processes.

It keeps the same records as `SQLiteRunStore`, in memory, encoded the same way (so a
run that records in one records in the other), and loses them with the process.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from planexec.errors import RunNotFoundError
from planexec.events import Event, EventBus
from planexec.results import RunStatus, StepStatus
from planexec.store.base import (
    HOST,
    MY_START,
    RUN_FIELDS,
    ApprovalRecord,
    CancelRequest,
    Lease,
    RecordedPlan,
    RecordedStep,
    RunRecord,
    StartedCall,
    export_document,
    run_record,
    unmatched_calls,
)
from planexec.store.cas import CompareAndSet
from planexec.store.codec import event_to_json, plan_from_json, result_from_json

__all__ = ["MemoryRunStore"]

_FAILED = str(StepStatus.FAILED)


T = TypeVar("T")

@dataclass
class _RunState:
    run_id: str
    question: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    status: str = "RUNNING"
    created_at: float | None = None
    updated_at: float | None = None
    finished_at: float | None = None
    answer: str | None = None
    error: str | None = None
    error_kind: str | None = None
    plan_version: int | None = None
    pid: int | None = None
    host: str | None = None
    pid_start: float | None = None
    plans: dict[int, dict[str, Any]] = field(default_factory=dict)
    steps: dict[tuple[int, int], tuple[int, dict[str, Any], float]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


class MemoryRunStore(CompareAndSet[None]):
    """A `RunStore` that keeps every record in memory.

    Example:
        >>> store = MemoryRunStore()
        >>> bus = EventBus()
        >>> store.attach(bus)
    """

    def __init__(self) -> None:
        self._runs: dict[str, _RunState] = {}
        self._seq = 0
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._requests: dict[str, list[ApprovalRecord]] = {}
        self._written: dict[int, Event] = {}
        """Events a store method wrote itself: ignored when a bus delivers them."""
        self._owners: dict[str, str] = {}

    # -- recording -----------------------------------------------------------------

    def attach(self, bus: EventBus) -> None:
        """Subscribe `record` to ``bus`` (`handle`'s work, without a coroutine per event).

        (A subclass that overrides `handle` gets `handle` subscribed.)
        """
        overridden = type(self).handle is not MemoryRunStore.handle
        bus.subscribe(self.handle if overridden else self.record)

    async def handle(self, event: Event) -> None:
        """Record one event (at once: memory has nothing to commit)."""
        self.record(event)

    async def flush(self) -> None:
        """Nothing is held back; present for the protocol."""

    def record(self, event: Event) -> None:
        """Record one event synchronously."""
        with self._lock:
            if self._written and self._written.pop(id(event), None) is event:
                return  # a store method recorded it already, in its own transaction
            self._record_locked(event)

    def _record_locked(self, event: Event) -> None:
        data = event_to_json(event)
        self._seq += 1
        state = self._runs.get(event.run_id)
        if state is None:
            state = self._runs[event.run_id] = _RunState(
                run_id=event.run_id, created_at=event.ts, pid=os.getpid(), host=HOST,
                pid_start=MY_START,
            )
        state.updated_at = event.ts
        state.events.append(data)
        kind = data["type"]
        if kind == "RunStarted":
            state.question = data.get("question", "")
            state.config = dict(data.get("config") or {})
            state.status = str(RunStatus.RUNNING)
            state.finished_at = None
            state.error = None
            state.pid, state.host, state.pid_start = os.getpid(), HOST, MY_START
        elif kind == "PlanCreated":
            version = int(data["version"])
            state.plans[version] = data
            state.plan_version = max(state.plan_version or 0, version)
        elif kind == "StepFinished":
            result = data["result"]
            key = (int(data.get("plan_version", 1)), int(result["step_id"]))
            # a re-recorded result replaces the step's; readers order results by seq
            state.steps[key] = (self._seq, result, event.ts)
            if result["status"] == _FAILED and result.get("error_kind"):
                state.error_kind = result["error_kind"]
        elif kind == "StepDiscarded":  # a streamed step the final plan does not hold
            state.steps.pop((int(data.get("plan_version", 1)), int(data["step_id"])), None)
        elif kind == "RecoveryDecided" and data.get("error_kind"):
            state.error_kind = data["error_kind"]
        elif kind == "RunFinished":
            state.status = str(RunStatus(data["status"]))
            state.answer = data.get("answer")
            state.error = data.get("error")
            state.finished_at = event.ts

    # -- reading ---------------------------------------------------------------------

    def _state(self, run_id: str) -> _RunState:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFoundError(f"no run {run_id!r} in the store", run_id=run_id) from None

    def _record(self, s: _RunState) -> RunRecord:
        counts: dict[str, int] = {}
        for (version, _), (_, result, _) in s.steps.items():
            if version == s.plan_version or s.plan_version is None:
                counts[result["status"]] = counts.get(result["status"], 0) + 1
        fields = {name: getattr(s, name) for name in RUN_FIELDS}
        fields["config"] = dict(s.config)
        latest = s.plans.get(s.plan_version) if s.plan_version is not None else None
        plan = (latest or {}).get("plan")
        return run_record(fields, counts, len(plan["steps"]) if plan else None)

    def get_run(self, run_id: str) -> RunRecord:
        """Return a run's record (raises `RunNotFoundError`)."""
        with self._lock:
            return self._record(self._state(run_id))

    def list_runs(self, status: RunStatus | str | None = None, limit: int = 50) -> list[RunRecord]:
        """Return runs, newest first, optionally only those with ``status``."""
        with self._lock:
            records = [self._record(s) for s in self._runs.values()]
        if status is not None:
            records = [r for r in records if r.status is RunStatus(status)]
        records.sort(key=lambda r: r.created_at or 0.0, reverse=True)
        return records[: max(0, limit)]

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's events in order, as JSON data."""
        with self._lock:
            return list(self._state(run_id).events)

    def step_results(self, run_id: str, plan_version: int | None = None) -> list[RecordedStep]:
        """Return the latest result of each step, in the order they were recorded."""
        with self._lock:
            items = sorted(self._state(run_id).steps.items(), key=lambda kv: kv[1][0])
        return [
            RecordedStep(plan_version=v, result=result_from_json(res), recorded_at=ts)
            for (v, _), (_, res, ts) in items
            if plan_version is None or v == plan_version
        ]

    def plans(self, run_id: str) -> list[RecordedPlan]:
        """Return every plan version of a run, oldest first."""
        with self._lock:
            plans = sorted(self._state(run_id).plans.items())
        return [
            RecordedPlan(
                version=v,
                plan=plan_from_json(d["plan"]) if d.get("plan") else None,
                text=d.get("text", ""),
                reason=d.get("reason"),
                created_at=d.get("ts"),
                error=d.get("error"),
                drafts=tuple(d.get("drafts") or ()),
            )
            for v, d in plans
        ]

    def started_calls_without_result(self, run_id: str) -> list[StartedCall]:
        """Return the steps whose tool call started and whose result was never recorded."""
        return unmatched_calls(self.events(run_id))

    def cancel_request(self, run_id: str) -> CancelRequest | None:
        """Return the run's latest cancel request, if any."""
        with self._lock:
            events = self._state(run_id).events
            found = next((e for e in reversed(events) if e["type"] == "RunCancelRequested"), None)
        return None if found is None else CancelRequest.from_event(found)

    def export(self, run_id: str) -> dict[str, Any]:
        """Return everything recorded about a run as one JSON document."""
        return export_document(self, run_id)

    def mark_status(
        self,
        run_id: str,
        status: RunStatus | str,
        *,
        error: str | None = None,
        error_kind: str | None = None,
    ) -> None:
        """Set a run's status and reason (and, for ``RUNNING``, claim it for this process)."""
        st = RunStatus(status)
        with self._lock:
            s = self._state(run_id)
            s.status = str(st)
            s.error = error
            s.updated_at = time.time()
            if error_kind is not None:
                s.error_kind = error_kind
            if st is RunStatus.RUNNING:
                s.pid, s.host, s.pid_start, s.finished_at = os.getpid(), HOST, MY_START, None
            elif st is not RunStatus.INTERRUPTED:
                s.finished_at = s.updated_at

    # -- leases ----------------------------------------------------------------------

    def _cas(self, run_id: str, fn: Callable[[None], T], event: Event | None = None) -> T:
        """Run ``fn`` and record ``event`` under the store's lock (``fn`` raising: neither)."""
        with self._lock:
            out = fn(None)
            self._write_event(event)
            return out

    def _lease_row(self, tx: None, run_id: str) -> Lease | None:
        return self._leases.get(run_id)

    def _put_lease(self, tx: None, lease: Lease) -> None:
        self._leases[lease.run_id] = lease

    def _drop_lease(self, tx: None, run_id: str, owner: str) -> bool:
        held = self._leases.get(run_id)
        if held is None or held.owner != owner:
            return False
        del self._leases[run_id]
        return True

    def get_lease(self, run_id: str) -> Lease | None:
        """The run's lease as recorded, or None."""
        with self._lock:
            return self._leases.get(run_id)

    # -- approvals -------------------------------------------------------------------

    def _latest_request(
        self, tx: None, run_id: str, plan_version: int, step_id: int
    ) -> ApprovalRecord | None:
        for r in reversed(self._requests.get(run_id, [])):
            if r.plan_version == plan_version and r.step_id == step_id:
                return r
        return None

    def _put_request(self, tx: None, rec: ApprovalRecord) -> None:
        rows = self._requests.setdefault(rec.run_id, [])
        for i, r in enumerate(rows):
            if (r.plan_version, r.step_id, r.request_no) == (
                rec.plan_version, rec.step_id, rec.request_no
            ):
                rows[i] = rec
                return
        rows.append(rec)

    def _write_event(self, event: Event | None) -> None:
        if event is not None:
            self._record_locked(event)
            self._written[id(event)] = event
            while len(self._written) > 1024:  # never delivered: forget the oldest
                del self._written[next(iter(self._written))]

    def approval_requests(self, run_id: str) -> list[ApprovalRecord]:
        """Every request of a run, in the order opened."""
        with self._lock:
            return list(self._requests.get(run_id, []))

    def set_owner(self, run_id: str, principal: str) -> None:
        """Record the principal that started a run (the first one recorded stands)."""
        with self._lock:
            self._owners.setdefault(run_id, principal)

    def owner(self, run_id: str) -> str | None:
        """The principal that started a run (None: none was recorded)."""
        with self._lock:
            return self._owners.get(run_id)

    def close(self) -> None:
        """Nothing to release."""

