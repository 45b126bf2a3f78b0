"""Streamed plans: tools start while the planner is still writing the plan.

A `PlanStream` is the `planexec._models.ReplySink` of the planner's model call (a text
reply, or the JSON text of a plan asked for through structured output, parsed in the
json dialect): it parses the reply as it streams
(`planexec.parsing.streaming.StreamingPlanParser`) and feeds each complete step to
`planexec.executor.Executor.run_feed`, which starts it as soon as its dependencies are
done. The rules (see ``docs/streaming.md``):

- only *safe* steps start before the reply is complete: a known tool that is read-only
  or idempotent and not destructive, or a reasoning step
  (`planexec.executor.Executor.may_start_early`); a destructive or unknown-safety step
  waits for the whole plan and its checks (cycles, forward references, drafts, the
  planner's re-prompts);
- when the reply turns out to hold another draft (numbering restarts, "revised plan"),
  or the final plan differs from what was streamed, the steps started that the final plan
  does not hold are cancelled or their results discarded: a `planexec.events.StepDiscarded`
  event and a ``STREAM_STEP_DISCARDED`` Diagnostic on the plan (`discard_diagnostics`);
  a step that arrives again identical (same tool, same arguments, same inputs) keeps its
  run, it is not run again;
- a step whose references point forward waits until the referenced step has arrived;
  if the reply ends without it, it fails as ``MISSING_REFERENCE``;
- a re-plan streams too: a step of a kept id is streamed only when it makes the kept
  call (it then reuses the kept result), as the planner's merge would.

Results of steps that started before the plan was complete have
`planexec.results.StepResult.streamed` set.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel

from planexec._log import run_log
from planexec.executor import Executor
from planexec.parsing.streaming import StreamingPlanParser, StreamUpdate
from planexec.plan import Diagnostic, Plan, Severity, Step
from planexec.planner import same_call
from planexec.results import StepError, StepResult
from planexec.stepfeed import FeedItem, PlanComplete, StepArrived, StepWithdrawn, same_work

__all__ = ["PlanStream", "discard_diagnostics", "model_streams"]


def model_streams(model: Any) -> bool:
    """Whether a chat model streams its replies (it implements ``_astream`` or ``_stream``).

    A model without either still answers ``astream``, in one chunk at the end: streaming
    it would change nothing, so `planexec.config.PlannerSettings.stream` leaves it off.
    """
    if not isinstance(model, BaseChatModel):
        return False
    kind = type(model)
    return (
        kind._astream is not BaseChatModel._astream or kind._stream is not BaseChatModel._stream
    )


def discard_diagnostics(discarded: list[StepResult]) -> list[Diagnostic]:
    """One ``STREAM_STEP_DISCARDED`` warning per step started from a streamed plan and dropped.

    Args:
        discarded: `planexec.executor.Executor.discarded` after the streamed run.
    """
    out = []
    for r in discarded:
        what = "was cancelled" if r.status.value == "CANCELLED" else (
            f"ended {r.status.value} and its result was discarded"
        )
        out.append(
            Diagnostic(
                None,
                Severity.WARNING,
                "STREAM_STEP_DISCARDED",
                f"step {r.step_id} ({r.tool or 'reasoning'}) started while the plan was "
                f"streamed and {what}: the final plan does not hold it as it was streamed",
                r.step_id,
            )
        )
    return out


class PlanStream:
    """Feeds a streamed planner reply into an executor run (a `ReplySink`).

    Args:
        executor: The run's executor; `open` starts its `Executor.run_feed`.
        dialect: The dialect to parse the reply in (as the planner's).
        draft_policy: As the planner's.
        kept: For a re-plan: the kept steps and their results (as `ReplanContext.kept`).
        plan_version: The version of the plan being written.
        run_id: For logs.
    """

    def __init__(
        self,
        executor: Executor,
        *,
        dialect: str = "auto",
        draft_policy: str = "last_complete",
        kept: Mapping[int, tuple[Step, StepResult]] | None = None,
        plan_version: int = 1,
        run_id: str = "-",
    ) -> None:
        self.executor = executor
        self.dialect = dialect
        self.draft_policy = draft_policy
        self.kept = dict(kept or {})
        self.plan_version = plan_version
        self.run_id = run_id
        self.parser = self._parser(dialect)
        self.sent: dict[int, Step] = {}
        """The steps the executor has, as sent."""
        self.arrivals = 0
        """Steps sent to the executor before the plan was complete."""
        self._queue: asyncio.Queue[FeedItem] = asyncio.Queue()
        self._task: asyncio.Task[list[StepResult]] | None = None
        self._completed = False

    def _parser(self, dialect: str) -> StreamingPlanParser:
        """A parser of one reply, reading it with the executor's tools (as the planner does)."""
        return StreamingPlanParser(
            dialect, draft_policy=self.draft_policy, catalog=self.executor.catalog
        )

    def open(self, feedback: Mapping[int, StepError] | None = None) -> None:
        """Start the executor's run of the feed (prior: the kept results)."""
        prior = {sid: result for sid, (_, result) in self.kept.items()}
        self._task = asyncio.create_task(
            self.executor.run_feed(
                self._items(), prior=prior, feedback=feedback, plan_version=self.plan_version
            )
        )

    async def _items(self) -> AsyncIterator[FeedItem]:
        while True:
            item = await self._queue.get()
            yield item
            if isinstance(item, PlanComplete):
                return

    # -- ReplySink --------------------------------------------------------------------

    async def begin(self, *, structured: bool = False) -> None:
        """A new reply (or a new attempt at one) starts: parse it afresh.

        A structured reply (the JSON text of a plan asked for through structured output)
        is parsed in the json dialect, as the planner parses its value.
        What earlier replies sent stays with the executor until the final plan decides.
        """
        self.parser = self._parser("json" if structured else self.dialect)

    async def chunk(self, text: str) -> None:
        """Parse the next piece; send what became complete or was withdrawn."""
        self._send(self.parser.feed(text), self.parser)

    async def end(self) -> None:
        """The reply is complete: send the last step(s) of the whole-text parse."""
        self._send(self.parser.finish().update, self.parser)

    # -- the end ------------------------------------------------------------------------

    async def complete(
        self, plan: Plan, prior: Mapping[int, StepResult] | None = None
    ) -> list[StepResult]:
        """The final, checked plan: the executor runs it to the end; its results.

        Steps started that ``plan`` does not hold as they were streamed are cancelled or
        discarded (`Executor.discarded`, `discard_diagnostics`).
        """
        assert self._task is not None, "PlanStream.open was not called"
        if not self._completed:
            self._completed = True
            self._queue.put_nowait(PlanComplete(plan, dict(prior or {})))
        return await self._task

    async def abandon(self, reason: str) -> None:
        """No plan will run (none was found, or the run stops): discard everything started."""
        if self._task is None or self._completed:
            return
        self._completed = True
        self._queue.put_nowait(
            PlanComplete(Plan(steps=()), reason=f"no plan runs from this reply: {reason}")
        )
        await self._task

    @property
    def started_early(self) -> bool:
        """Whether any step was sent before the plan was complete."""
        return self.arrivals > 0

    # -- internals --------------------------------------------------------------------

    def _send(self, update: StreamUpdate, parser: StreamingPlanParser) -> None:
        if self._completed:
            return
        current = {s.id for s in parser.steps}
        for sid in update.withdrawn:
            if sid in self.sent and sid not in current:
                del self.sent[sid]
                self._queue.put_nowait(
                    StepWithdrawn(sid, "a later part of the reply (a new draft) drops it")
                )
        for step in update.arrived:
            known = self.sent.get(step.id)
            if known is not None and same_work(known, step):
                continue  # the same step again (e.g. a new draft repeats it): keep its run
            kept = self.kept.get(step.id)
            if kept is not None and not same_call(kept[0], step):
                continue  # the planner's merge decides about a rewritten kept step
            self.sent[step.id] = step
            self.arrivals += 1
            run_log(self.run_id, step_id=step.id).debug(
                "streamed step {} ({}) arrived", step.id, step.tool or "reasoning"
            )
            self._queue.put_nowait(StepArrived(step, parser.dialect_seen))
