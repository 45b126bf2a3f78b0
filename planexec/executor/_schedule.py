"""The scheduler's state for one run (`Schedule`), and the streamed feed's queue.

`Schedule`: steps known, waiting, ready, running, done. `pump`: a feed's items onto
the scheduler's queue.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from planexec.plan import Step, to_jsonable
from planexec.results import StepError, StepResult, StepStatus
from planexec.stepfeed import FeedItem, PlanComplete


def waits(result: StepResult | None) -> bool:
    """Whether a step waits for a person's decision."""
    return result is not None and result.status is StepStatus.WAITING_APPROVAL


def held_back(steps: list[Step], results: Mapping[int, StepResult]) -> set[int]:
    """The steps without a result that depend, directly or not, on a waiting step."""
    blocked = {sid for sid, r in results.items() if waits(r)}
    held: set[int] = set()
    grew = True
    while grew:
        grew = False
        for s in steps:
            if s.id not in results and s.id not in held and s.deps & (blocked | held):
                held.add(s.id)
                grew = True
    return held


def call_key(step: Step) -> str:
    """The call a step makes, as text: tool, server and arguments (as written)."""
    return json.dumps(
        [step.tool, step.server, to_jsonable(step.args), to_jsonable(list(step.positional))],
        sort_keys=True,
        default=str,
    )


@dataclass(frozen=True)
class Fed:
    """A feed item on the scheduler's queue (``item`` None: the feed ended)."""

    item: FeedItem | None


async def pump(feed: AsyncIterator[FeedItem], queue: asyncio.Queue[Any]) -> None:
    """Move a feed's items onto the scheduler's queue, then its end."""
    async for item in feed:
        queue.put_nowait(Fed(item))
        if isinstance(item, PlanComplete):
            return
    queue.put_nowait(Fed(None))


class Schedule:
    """The scheduler's state for one run: steps known, waiting, ready, running, done."""

    def __init__(
        self,
        prior: dict[int, StepResult],
        feedback: Mapping[int, StepError],
        view: Mapping[int, StepResult],
    ) -> None:
        self.prior = prior
        self.feedback = feedback
        self.view = view
        self.steps: dict[int, Step] = {}
        self.ids: set[int] = set()
        """The ids of the steps known (a live set: a step's references are checked in it)."""
        self.complete = False
        self.blockers: dict[int, set[int]] = {}
        """Steps not started, with the dependencies they still wait for."""
        self.waiters: dict[int, set[int]] = {}
        """For a step id, the steps whose blockers hold it."""
        self.held: set[int] = set()
        """Steps not started that wait for the whole plan (not safe to start early)."""
        self.ready: deque[int] = deque()
        self.running: dict[int, asyncio.Task[Any]] = {}
        self.done: set[int] = set()
        self.order: list[int] = []
        self.live = False
        """Whether the scheduler loop runs (ending steps release their dependents)."""
        self.spare: dict[str, StepResult] = {}
        """Succeeded results of withdrawn steps without references, by call
        (`call_key`): a step making the same call reuses one instead of running."""

    def pending(self) -> list[Step]:
        """The steps with no result in this run yet."""
        return [s for sid, s in self.steps.items() if sid not in self.done]

    def wait(self, step: Step, *, early: bool) -> None:
        """Queue a step: it starts when its dependencies are done (and it may start)."""
        sid = step.id
        self.blockers[sid] = {
            d
            for d in step.deps
            if d != sid
            and (
                (d in self.steps and d not in self.done)
                or (not self.complete and d not in self.steps and d not in self.view)
            )
        }
        waiters = self.waiters
        for d in self.blockers[sid]:
            users = waiters.get(d)
            if users is None:
                users = waiters[d] = set()
            users.add(sid)
        if not early:
            self.held.add(sid)
        self._check(sid)

    def _check(self, sid: int) -> None:
        if not self.blockers.get(sid, True) and sid not in self.held:
            del self.blockers[sid]
            self.ready.append(sid)

    def finished(self, sid: int, *, release: bool = True) -> None:
        """A step has its result; ``release``: its dependents may go on."""
        self.done.add(sid)
        self.order.append(sid)
        if not release:
            return
        for other in self.waiters.pop(sid, ()):
            deps = self.blockers.get(other)
            if deps is not None and sid in deps:
                deps.discard(sid)
                self._check(other)

    def started_users(self, sid: int) -> list[int]:
        """Steps that started or finished using this step's result (transitively)."""
        out: list[int] = []
        todo = [sid]
        while todo:
            cur = todo.pop()
            for other, step in self.steps.items():
                if other in out or other == sid or cur not in step.deps:
                    continue
                if other in self.running or other in self.done:
                    out.append(other)
                    todo.append(other)
        return out

    def unstart(self, sid: int) -> None:
        """Forget a step's start and end (it was cancelled or its result discarded)."""
        self.done.discard(sid)
        if sid in self.order:
            self.order.remove(sid)
        if sid in self.ready:
            self.ready.remove(sid)
        self.blockers.pop(sid, None)
        self.held.discard(sid)

    def forget(self, sid: int) -> None:
        """Drop a withdrawn step; the steps waiting for it wait for its successor."""
        self.unstart(sid)
        self.steps.pop(sid, None)
        self.ids.discard(sid)
        for other, step in self.steps.items():
            if other in self.blockers and sid in step.deps and not self.complete:
                self.blockers[other].add(sid)
                self.waiters.setdefault(sid, set()).add(other)

    def release_all(self) -> None:
        """The plan is complete: nothing is held, nobody waits for a step never written."""
        self.held.clear()
        steps, done = self.steps, self.done
        for sid in list(self.blockers):  # linear in the dependencies, not in the steps
            deps = self.blockers[sid]
            if deps:
                deps.intersection_update([d for d in deps if d in steps and d not in done])
            self._check(sid)
