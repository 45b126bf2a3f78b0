"""Cancel a run from anywhere: a durable request in the store, seen by the run's driver.

`cancel_run` records a ``RunCancelRequested`` event (who, when, why) in the run store,
committed and flushed before it returns. What happens next depends on whether a process
drives the run:

- **a live driver** (the run is ``RUNNING`` and its lease, if it holds one, is live):
  `cancel_watch`, which every driver runs beside the run (`PlanExecuteAgent` and
  ``planexec run``), reads the store every `CANCEL_POLL` seconds, and on the request
  cancels the run's executor: running steps get cancellation (a call that ignores it is
  detached and reported, as for timeouts), nothing new starts, and the run ends
  ``CANCELLED`` with the request's words as its error;
- **no live driver** (waiting for approval, interrupted): the run is ``CANCELLED`` at
  once, and its open approval requests are withdrawn.

A run with a cancel request does not resume (`planexec.runs.plan_resume` refuses it), and
no decision is recorded for it. A run its own caller stopped (Ctrl-C, a cancelled task)
is ``CANCELLED`` too but records no request: it may be resumed, or cancelled for good.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

from planexec._log import run_log
from planexec.errors import ErrorKind, RunError, RunNotFoundError
from planexec.events import RunCancelRequested
from planexec.results import RunStatus
from planexec.store.base import CancelRequest, RequestState, RunStore

__all__ = ["CANCEL_POLL", "CancelOutcome", "CancelWatch", "cancel_run", "cancel_watch"]

CANCEL_POLL = 0.5
"""Seconds between two reads of the store by a driver's `cancel_watch`: the bound on how
long a live run goes on after a cancel request (plus the time its tools take to stop)."""

_FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.INCOMPLETE)


@dataclass(frozen=True)
class CancelOutcome:
    """What `cancel_run` did."""

    request: CancelRequest
    """The request as recorded."""
    stopped: bool
    """True when no process drove the run and it is ``CANCELLED`` now; False when its
    driver stops it (within `CANCEL_POLL` seconds and the time its tools take to stop)."""
    withdrawn: tuple[int, ...] = ()
    """The steps whose open approval requests were withdrawn."""


async def cancel_run(
    store: RunStore, run_id: str, *, reason: str, by: str | None = None
) -> CancelOutcome:
    """Ask ``run_id`` to stop: record the request; stop the run at once if nobody drives it.

    Args:
        store: The run store holding the run.
        run_id: The run.
        reason: Why (shown with the run, and by ``planexec run`` when it stops).
        by: Who asks.

    Raises:
        RunNotFoundError: no such run.
        RunError: the run has already finished.
    """
    record = store.get_run(run_id)
    earlier = store.cancel_request(run_id)
    if earlier is not None:
        raise RunError(f"run {run_id} was already {earlier.describe()}")
    if record.status in _FINISHED and record.status is not RunStatus.CANCELLED:
        raise RunError(f"run {run_id} is already {record.status.value}: nothing to cancel")
    # a run stopped by its own caller (Ctrl-C: CANCELLED, resumable) becomes final here
    event = RunCancelRequested(run_id=run_id, reason=reason, by=by)
    await store.handle(event)
    await store.flush()
    request = CancelRequest(run_id=run_id, reason=reason, by=by, requested_at=event.ts)
    log = run_log(run_id)
    if _driven(store, run_id, record.status):
        log.info("run {}: {}; its driver stops it", run_id, request.describe())
        return CancelOutcome(request, stopped=False)
    withdrawn = []
    for r in store.approval_requests(run_id):
        if r.state in (RequestState.OPEN, RequestState.DECIDED) and store.withdraw_request(
            run_id, r.plan_version, r.step_id, f"the run was {request.describe()}"
        ):
            withdrawn.append(r.step_id)
    store.mark_status(
        run_id, RunStatus.CANCELLED, error=f"the run was {request.describe()}",
        error_kind=ErrorKind.CANCELLED.value,
    )
    log.info("run {}: {}; no process drove it: CANCELLED now", run_id, request.describe())
    return CancelOutcome(request, stopped=True, withdrawn=tuple(dict.fromkeys(withdrawn)))


def _driven(store: RunStore, run_id: str, status: RunStatus) -> bool:
    """Whether a live process drives the run (it is RUNNING, and its lease, if any, is live)."""
    if status is not RunStatus.RUNNING:
        return False
    lease = store.get_lease(run_id)
    return lease is None or lease.live(time.time())


@dataclass
class CancelWatch:
    """A driver's watch over its run's cancel requests (see `cancel_watch`)."""

    request: CancelRequest | None = None
    """The request seen, once one is."""


@asynccontextmanager
async def cancel_watch(
    store: Any,
    run_id: str,
    cancel: Callable[[CancelRequest], None],
    *,
    every: float | None = None,
) -> AsyncIterator[CancelWatch]:
    """While inside, read ``store`` for a cancel request of ``run_id`` every ``every`` s.

    On the first request seen, ``cancel(request)`` is called once (it cancels the run's
    executor) and the watch stops reading. Without a store (``None``) nothing is watched.
    The reads run in a worker thread, so a slow store never blocks the run's loop.
    """
    watch = CancelWatch()
    if store is None:
        yield watch
        return
    period = CANCEL_POLL if every is None else every

    async def poll() -> None:
        while True:
            await asyncio.sleep(period)
            try:
                found = await asyncio.to_thread(store.cancel_request, run_id)
            except RunNotFoundError:  # not recorded yet (its first events are on the way)
                continue
            if found is not None:
                watch.request = found
                run_log(run_id).warning("run {}: {}: stopping it", run_id, found.describe())
                cancel(found)
                return

    task = asyncio.get_running_loop().create_task(poll())
    try:
        yield watch
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
