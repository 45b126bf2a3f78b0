"""Typed events, for streaming, tracing and the run store.

Every event is a frozen dataclass with the run id and a timestamp. Producers (the
executor, the agent) emit them through an `EventBus`; subscribers are awaited in order,
so a subscriber that persists a `StepFinished` (the run store) has done so before any
step that depends on it starts. Subscribers observe; they never drive the run.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, cast

from planexec._frozen import build
from planexec.errors import ErrorKind
from planexec.grounding import Grounding
from planexec.plan import Plan
from planexec.results import ResolutionMethod, Run, StepResult

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "ArgResolved",
    "Event",
    "EventBus",
    "EventHandler",
    "FallbackUsed",
    "LLMCalled",
    "ModelCall",
    "PlanCreated",
    "RecoveryDecided",
    "RunCancelRequested",
    "RunFinished",
    "RunStarted",
    "StepDiscarded",
    "StepFinished",
    "StepStarted",
    "ToolCallStarted",
    "ToolProgress",
]


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every event."""

    run_id: str
    """The run the event belongs to."""
    ts: float = field(default_factory=time.time)
    """When it happened (seconds since the epoch)."""

    @property
    def type(self) -> str:
        """The event's type name, e.g. ``StepFinished``."""
        return type(self).__name__

    @classmethod
    def of(cls, **fields: Any) -> Self:
        """``cls(**fields)``, built faster (the executor makes three events per step).

        The same event (a test holds it equal to the constructor's), without the frozen
        dataclass's ``object.__setattr__`` per field.
        """
        return build(cls, fields)


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    """A run began."""

    question: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PlanCreated(Event):
    """A plan (first or re-plan) was parsed and checked."""

    version: int
    plan: Plan | None
    text: str = ""
    reason: str | None = None
    error: str | None = None
    drafts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class StepStarted(Event):
    """A step's dependencies are done; its arguments are about to be resolved."""

    step_id: int
    tool: str | None
    plan_version: int = 1


@dataclass(frozen=True, kw_only=True)
class ArgResolved(Event):
    """One argument of a step got its value."""

    step_id: int
    arg: str
    method: ResolutionMethod
    grounding: Grounding | None = None
    """Where the value comes from, for the methods ``filtered`` and ``llm``."""


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted(Event):
    """A tool call is about to be made.

    After this point a crash leaves an unknown outcome for tools that are not safe.
    """

    step_id: int
    tool: str
    args: dict[str, Any]
    attempt: int = 1
    plan_version: int = 1
    safe: bool = False
    """Whether the tool is safe to call again (read-only or idempotent, not destructive).

    A run store may let the call start of a safe tool ride with the step's next commit
    (resume runs such a step again either way); an unsafe one is committed, and flushed
    in the default durability, before the tool is called.
    """


@dataclass(frozen=True, kw_only=True)
class ToolProgress(Event):
    """A tool call under way said how far it got.

    From an MCP server's progress notification, or `planexec.tools.report_progress`
    called inside a tool. Emitted by the executor for the step whose call it is,
    between that call's `ToolCallStarted` and the step's `StepFinished`, only when
    someone listens (the run's events or its trace). A run store records it like
    `FallbackUsed`: held in memory and committed with the run's next checkpoint, never
    a commit of its own.
    """

    step_id: int
    tool: str
    progress: float
    """How far the call got (the server's number: it only grows)."""
    total: float | None = None
    """The total, when the tool knows it."""
    message: str | None = None
    """What the tool says it is doing."""
    server: str | None = None
    """The tool's server (an MCP server's name), if any."""
    attempt: int = 1
    """The call's attempt (`ToolCallStarted.attempt`)."""
    plan_version: int = 1


@dataclass(frozen=True, kw_only=True)
class ApprovalRequested(Event):
    """A step's call needs a person's decision (`planexec.approval`).

    Its arguments are resolved and checked; the tool is not called before a decision.
    """

    step_id: int
    tool: str
    args: dict[str, Any]
    """The resolved arguments the tool would receive."""
    resolution: dict[str, ResolutionMethod] = field(default_factory=dict)
    """How each argument was resolved."""
    reason: str = ""
    """Why the step needs approval (the policy rule that matched)."""
    server: str | None = None
    plan_version: int = 1


@dataclass(frozen=True, kw_only=True)
class ApprovalDecided(Event):
    """A person decided on a step that needed approval (`planexec.approval`)."""

    step_id: int
    action: str
    """``approve``, ``edit`` or ``reject`` (a deferral is not recorded: nothing was decided)."""
    args: dict[str, Any] | None = None
    """The arguments the tool is to be called with (edited ones merged in); None on a
    rejection."""
    edited: dict[str, Any] | None = None
    """The arguments the person changed, as given."""
    reason: str | None = None
    """Why (required for a rejection)."""
    by: str | None = None
    """Who decided."""
    decided_at: float | None = None
    """When the decision was made (seconds since the epoch)."""
    plan_version: int = 1


@dataclass(frozen=True, kw_only=True)
class StepFinished(Event):
    """A step ended, whatever its status."""

    result: StepResult
    plan_version: int = 1
    safe: bool = False
    """Whether the step made no call of a tool that is not safe (a reasoning step, a
    safe tool's calls, a step that failed before its call).

    Losing such a result to a crash only makes resume run the step again; losing the
    result of a step that called an unsafe tool makes that call's outcome unknown on
    resume (never made again without a decision). Every result rides with its store's
    next commit (`planexec.store.base.is_checkpoint`). False (the default) when not
    known.
    """


@dataclass(frozen=True, kw_only=True)
class StepDiscarded(Event):
    """A step started while the plan was streamed, and the final plan does not hold it.

    Its run was cancelled (``status`` CANCELLED) or its result discarded; the result is
    not the plan's (`planexec.executor.Executor.discarded` keeps it).
    """

    step_id: int
    tool: str | None
    status: str
    """The discarded result's status."""
    reason: str
    plan_version: int = 1


@dataclass(frozen=True, kw_only=True)
class FallbackUsed(Event):
    """A fallback, repair, retry or skip happened: never silently."""

    step_id: int | None
    code: str
    message: str


@dataclass(frozen=True, kw_only=True)
class LLMCalled(Event):
    """A chat model was called."""

    purpose: str
    step_id: int | None = None
    duration: float = 0.0
    ok: bool = True
    streamed: bool = False
    """The reply was streamed into the executor (`planexec.streaming`)."""


@dataclass(frozen=True, kw_only=True)
class RecoveryDecided(Event):
    """The agent chose a recovery action for a failure."""

    error_kind: ErrorKind | None
    action: str
    reason: str
    step_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class RunCancelRequested(Event):
    """Someone asked a run to stop (`planexec.cancelling.cancel_run`): who, when, why.

    A durable fact in the run store; the process driving the run sees it within a bounded
    time and stops the run (`planexec.cancelling.CANCEL_POLL`), and a cancelled run does
    not resume.
    """

    reason: str
    by: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    """A run ended."""

    status: str
    answer: str | None = None
    error: str | None = None
    run: Run | None = field(default=None, compare=False, repr=False, metadata={"record": False})
    """The finished run, from `planexec.PlanExecuteAgent` (the last event of ``stream``).
    Not recorded by the store (`planexec.store.codec.event_to_json` leaves it out: the
    store has the run's own events)."""


_META = "planexec_"
"""The prefix of planexec's keys in a model call's langchain metadata."""


@dataclass(frozen=True)
class ModelCall:
    """What one model call is for; sent with the call, read by `planexec.testing` fakes."""

    purpose: str
    """``plan``, ``resolve``, ``reason``, ``answer``, ``evaluate`` (the judge), ..."""
    step_id: int | None = None
    """The step the call serves (resolution, reasoning), if any."""
    keys: tuple[str, ...] = ()
    """For ``resolve``: the arguments the reply must fill, in order; for ``select``: the
    candidate tools' qualified names."""
    run_id: str = "-"
    """The run."""

    def config(self) -> dict[str, Any]:
        """The ``RunnableConfig`` that carries this call (metadata and a run name)."""
        return {
            "run_name": f"planexec:{self.purpose}",
            "metadata": {
                f"{_META}purpose": self.purpose,
                f"{_META}step_id": self.step_id,
                f"{_META}keys": list(self.keys),
                f"{_META}run_id": self.run_id,
            },
        }

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> ModelCall | None:
        """The call described by a run's metadata (None if planexec did not make it)."""
        if not metadata or f"{_META}purpose" not in metadata:
            return None
        step = metadata.get(f"{_META}step_id")
        return cls(
            purpose=str(metadata[f"{_META}purpose"]),
            step_id=int(step) if step is not None else None,
            keys=tuple(str(k) for k in metadata.get(f"{_META}keys") or ()),
            run_id=str(metadata.get(f"{_META}run_id") or "-"),
        )



EventHandler = Callable[[Event], Awaitable[None] | None]
"""A subscriber: a function of an event, sync or async."""


class EventBus:
    """Delivers events to subscribers, in subscription order, awaiting each.

    A subscriber may be sync or async, or a sync function that returns an awaitable only
    when there is something to wait for (the run stores' subscribers): it is awaited
    then, and costs no coroutine when it returns None.
    """

    def __init__(self, handlers: list[EventHandler] | None = None) -> None:
        self._handlers: tuple[EventHandler, ...] = tuple(handlers or ())

    @property
    def listening(self) -> bool:
        """Whether anyone subscribes: producers need not build events nobody gets."""
        return bool(self._handlers)

    def subscribe(self, handler: EventHandler) -> None:
        """Add a subscriber."""
        self._handlers = (*self._handlers, handler)

    def unsubscribe(self, handler: EventHandler) -> None:
        """Remove a subscriber, if present."""
        if handler in self._handlers:
            handlers = list(self._handlers)
            handlers.remove(handler)
            self._handlers = tuple(handlers)

    def emit(self, event: Event) -> Coroutine[Any, Any, None]:
        """Deliver ``event`` to every subscriber; await the result to wait for them all.

        Delivery starts at once: each subscriber is called in order, and when one
        returns an awaitable (an async subscriber, or a sync one that must be waited
        for), the rest of the delivery is that awaitable, then the subscribers after it,
        in order. When nobody needs waiting for, the result is an awaitable that is
        already done (awaiting it costs no coroutine). Subscribers added or removed
        while an event is delivered take effect from the next event.
        """
        handlers = self._handlers
        for i, handler in enumerate(handlers):
            out = handler(event)
            if out is not None and inspect.isawaitable(out):
                return _deliver_rest(event, out, handlers[i + 1 :])
        return _DELIVERED


class _Delivered(Coroutine[Any, Any, None]):
    """What `EventBus.emit` returns when every subscriber has handled the event.

    A coroutine already at its end (stateless, so one serves every event): awaiting it,
    or handing it to ``asyncio.run`` or ``create_task``, returns None at once.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return cast("Generator[Any, None, None]", iter(()))

    def send(self, value: Any) -> Any:
        """End at once (returns None)."""
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise what is thrown in (nothing runs that could catch it)."""
        raise typ if val is None else val

    def close(self) -> None:
        """Nothing to close."""


_DELIVERED = _Delivered()


async def _deliver_rest(
    event: Event, pending: Awaitable[Any], handlers: tuple[EventHandler, ...]
) -> None:
    """Await one subscriber's awaitable, then deliver to the subscribers after it."""
    await pending
    for handler in handlers:
        out = handler(event)
        if out is not None and inspect.isawaitable(out):
            await out
