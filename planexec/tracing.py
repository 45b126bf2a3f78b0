"""Tracing through langchain's callbacks, and OpenTelemetry spans (the ``otel`` extra).

A traced run is one langchain callback tree, so any callback handler (LangSmith's
included) sees it whole::

    planexec                          (chain: one per agent.run / execute_plan)
    ├── planexec:plan                 (chat model: the planner)
    ├── planexec:plan attempt 1       (chain: one executor round of plan version 1)
    │   ├── planexec:step 1           (chain: one step)
    │   │   └── step 1 sites          (tool)
    │   └── planexec:step 2
    │       ├── planexec:resolve step 2   (chat model: the resolver's fallback)
    │       └── step 2 assets         (tool)
    └── planexec:answer               (chat model)

A run is traced when its caller traces: callbacks given to the agent
(``PlanExecuteAgent(..., callbacks=[...])``) or in the run's config
(``agent.run(question, config={"callbacks": [...], "tags": [...]})``, also a parent
run's config when the agent runs inside a runnable), langchain's own tracing switched
on (``LANGSMITH_TRACING=true``), or OpenTelemetry enabled with `enable_otel`. Otherwise
`start_trace` returns None and every call takes the untraced path.

A tool call's progress (`planexec.events.ToolProgress`) is a langchain custom event
named `PROGRESS_EVENT` on its step's chain run (``on_custom_event``, with the data
``step_id``, ``tool``, ``progress``, ``total``, ``message``), and an event of that name
on the step's span for `OpenTelemetryHandler`.

`OpenTelemetryHandler` turns that same tree into OpenTelemetry spans (run → plan
attempt → step → model or tool call) with the GenAI semantic-convention attributes
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.tool.name``, ...). opentelemetry is imported only when a handler is built.

**Handlers are bounded.** Each trace event (a chain run's start or end, for the run, a
plan attempt or a step) waits at most ``handler_timeout`` seconds
(``executor.callback_timeout``, `HANDLER_TIMEOUT` by default) for the handlers; a
cancellation of the run (its ``run_timeout``, the caller's) is never held up by one. A
handler that does not return in time (or ignores cancellation) is abandoned, still
running, with a warning, and the run's trace is abandoned with it: later events of the
run, and its model and tool calls, carry no callbacks. A synchronous handler marked
``run_inline`` runs on the event loop's thread and cannot be bounded: keep those quick.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.callbacks.manager import (
    AsyncCallbackManager,
    AsyncCallbackManagerForChainRun,
)
from langchain_core.runnables import RunnableConfig as RunnableConfig  # re-exported
from langchain_core.runnables import ensure_config

from planexec._log import run_log
from planexec.errors import MissingExtraError

if TYPE_CHECKING:
    from langchain_core.callbacks import Callbacks
    from langchain_core.outputs import LLMResult

    from planexec.events import ModelCall
    from planexec.results import StepResult

__all__ = [
    "HANDLER_TIMEOUT",
    "PROGRESS_EVENT",
    "CallbackRecorder",
    "OpenTelemetryHandler",
    "RunTrace",
    "disable_otel",
    "enable_otel",
    "otel_handler",
    "start_trace",
]

_KIND = "planexec_kind"
"""Metadata key naming what a planexec chain run is: ``run``, ``attempt`` or ``step``."""

_otel: OpenTelemetryHandler | None = None

PROGRESS_EVENT = "planexec.tool.progress"
"""The name of a tool call's progress: a custom event on its step's run, a span event."""

HANDLER_TIMEOUT = 10.0
"""Seconds one trace event waits for the callback handlers before abandoning them."""

_T = TypeVar("_T")
_ABANDONED: set[asyncio.Task[Any]] = set()
"""Handler calls abandoned still running (kept referenced until they end)."""


class _HandlerHung(Exception):
    """A trace event's handlers did not return within the handler timeout."""


async def _bounded(aw: Awaitable[_T], timeout: float, what: str, run_id: str) -> _T:
    """Await a trace event's handlers for at most ``timeout`` seconds.

    The handlers run in a task of their own: a cancellation of the caller cancels them
    and returns at once (never waiting for a handler that ignores it); on timeout they
    are cancelled and abandoned the same way.

    While the caller is being cancelled (closing a cancelled run) nobody waits: the
    handlers get the event in a task left to run.

    Raises:
        _HandlerHung: the handlers did not return in time (a warning is logged), or
            were not waited for (the caller is being cancelled).
    """
    task: asyncio.Task[_T] = asyncio.ensure_future(aw)
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        # closing a cancelled run: the handlers get the event, nobody waits for them
        _detach(task)
        raise _HandlerHung(what)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        _abandon(task)
        raise
    if done:
        return task.result()
    _abandon(task)
    run_log(run_id).warning(
        "a callback handler did not return from {} within {}s: abandoned (left running); "
        "the rest of the run is not traced",
        what,
        timeout,
    )
    raise _HandlerHung(what)


def _abandon(task: asyncio.Task[Any]) -> None:
    task.cancel()
    _detach(task)


def _detach(task: asyncio.Task[Any]) -> None:
    if task.done():
        _forget(task)
    else:
        _ABANDONED.add(task)
        task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned handler's error is not reported again


def enable_otel(tracer_provider: Any = None) -> OpenTelemetryHandler:
    """Emit OpenTelemetry spans for every later run (needs the ``otel`` extra).

    Args:
        tracer_provider: The provider to get the tracer from (the global one by
            default, as set with ``opentelemetry.trace.set_tracer_provider``).

    Returns:
        The handler added to every run's callbacks.

    Raises:
        MissingExtraError: opentelemetry is not installed.
    """
    global _otel
    _otel = OpenTelemetryHandler(tracer_provider)
    return _otel


def disable_otel() -> None:
    """Stop emitting OpenTelemetry spans for later runs (see `enable_otel`)."""
    global _otel
    _otel = None


def otel_handler() -> OpenTelemetryHandler | None:
    """The handler `enable_otel` installed, or None."""
    return _otel


def _langchain_tracing() -> bool:
    from langchain_core.tracers.context import _tracing_v2_is_enabled

    return bool(_tracing_v2_is_enabled())


async def start_trace(
    config: RunnableConfig | None,
    callbacks: Callbacks = None,
    *,
    run_id: str,
    inputs: Mapping[str, Any],
    handler_timeout: float = HANDLER_TIMEOUT,
) -> RunTrace | None:
    """Open a run's parent callback run, when the caller traces (else None).

    Args:
        config: The run's config (merged with a parent runnable's, see
            ``langchain_core.runnables.ensure_config``): its ``callbacks``, ``tags``,
            ``metadata`` and ``run_name`` (``planexec`` by default) apply to the run.
        callbacks: More handlers (the agent's), inherited by every call of the run.
        run_id: planexec's id of the run (in every call's metadata).
        inputs: What the parent run is shown as its inputs.
        handler_timeout: Seconds each trace event waits for the handlers (see the
            module: a handler that takes longer is abandoned, and the trace with it).

    Returns:
        The run's trace, or None when nobody traces (no callbacks, no langchain
        tracing, no OpenTelemetry) or when the handlers did not return from the run's
        start in time.
    """
    cfg = ensure_config(config)
    given = cfg.get("callbacks")
    extra: list[BaseCallbackHandler] = []
    if isinstance(callbacks, BaseCallbackManager):
        extra = list(callbacks.handlers)
    elif callbacks:
        extra = list(callbacks)
    if _otel is not None:
        extra.append(_otel)
    if not given and not extra and not _langchain_tracing():
        return None
    metadata = {**cfg.get("metadata", {}), "planexec_run_id": run_id}
    manager = AsyncCallbackManager.configure(
        inheritable_callbacks=given,
        local_callbacks=None,
        inheritable_tags=list(cfg.get("tags", [])),
        inheritable_metadata=metadata,
        local_metadata={_KIND: "run"},
    )
    for handler in extra:
        if handler not in manager.handlers:
            manager.add_handler(handler, inherit=True)
    try:
        root = await _bounded(
            manager.on_chain_start(
                None,
                dict(inputs),
                run_id=cfg.get("run_id"),
                name=cfg.get("run_name") or "planexec",
            ),
            handler_timeout,
            "the run's start",
            run_id,
        )
    except _HandlerHung:
        return None
    return RunTrace(root, run_id, handler_timeout)


def _child(
    parent: AsyncCallbackManagerForChainRun, metadata: dict[str, Any]
) -> AsyncCallbackManager:
    """A child manager of ``parent`` with ``metadata`` for the child run only."""
    manager = parent.get_child()
    manager.add_metadata(metadata, inherit=False)
    return manager


class RunTrace:
    """One traced run: its parent callback run, its open attempt and steps.

    Built by `start_trace`; the runtime gives it to the run's model client and
    executor, which ask it for each call's config (`model_config`, `tool_config`).
    """

    def __init__(
        self,
        root: AsyncCallbackManagerForChainRun,
        run_id: str,
        handler_timeout: float = HANDLER_TIMEOUT,
    ) -> None:
        self.root = root
        """The run's parent callback run."""
        self.run_id = run_id
        """planexec's id of the run."""
        self.handler_timeout = handler_timeout
        """Seconds each trace event waits for the handlers."""
        self.abandoned = False
        """True once a handler hung: later events and calls are not traced."""
        self.attempt: AsyncCallbackManagerForChainRun | None = None
        """The executor round under way, if any."""
        self.steps: dict[int, AsyncCallbackManagerForChainRun] = {}
        """The steps under way, by id."""

    def _parent(self, step_id: int | None) -> AsyncCallbackManagerForChainRun:
        if step_id is not None and step_id in self.steps:
            return self.steps[step_id]
        return self.root

    async def _event(self, aw: Awaitable[_T], what: str) -> _T | None:
        """One trace event, bounded; None (and the trace abandoned) if a handler hung."""
        if self.abandoned:
            close = getattr(aw, "close", None)
            if close is not None:
                close()  # never awaited: not traced
            return None
        try:
            return await _bounded(aw, self.handler_timeout, what, self.run_id)
        except _HandlerHung:
            self.abandoned = True
            self.steps.clear()
            self.attempt = None
            return None

    def model_config(self, call: ModelCall) -> RunnableConfig:
        """The config of one model call: parented under its step (or the run)."""
        base = call.config()
        if self.abandoned:
            return RunnableConfig(metadata=base["metadata"])
        step = f" step {call.step_id}" if call.step_id is not None else ""
        return RunnableConfig(
            callbacks=self._parent(call.step_id).get_child(),
            run_name=f"planexec:{call.purpose}{step}",
            tags=[f"planexec:{call.purpose}"],
            metadata=base["metadata"],
        )

    def tool_config(self, step_id: int, tool: str) -> RunnableConfig:
        """The config of one tool call of step ``step_id``."""
        if self.abandoned:
            return RunnableConfig(
                run_name=f"step {step_id} {tool}",
                metadata={"planexec_step_id": step_id, "planexec_run_id": self.run_id},
            )
        return RunnableConfig(
            callbacks=self._parent(step_id).get_child(),
            run_name=f"step {step_id} {tool}",
            tags=["planexec:tool"],
            metadata={"planexec_step_id": step_id, "planexec_run_id": self.run_id},
        )

    async def start_attempt(self, version: int, steps: int) -> None:
        """Open the chain run of one executor round of plan version ``version``."""
        if self.abandoned:
            return
        manager = _child(self.root, {_KIND: "attempt", "planexec_plan_version": version})
        self.attempt = await self._event(
            manager.on_chain_start(
                None,
                {"plan_version": version, "steps": steps},
                name=f"planexec:plan attempt {version}",
            ),
            f"the start of plan attempt {version}",
        )

    async def end_attempt(
        self, results: Sequence[StepResult] | None, error: BaseException | None = None
    ) -> None:
        """Close the open executor round with its results (or the error that ended it)."""
        attempt, self.attempt = self.attempt, None
        if attempt is None:
            return
        if error is not None:
            await self._event(attempt.on_chain_error(error), "a plan attempt's error")
            return
        done = results or ()
        await self._event(
            attempt.on_chain_end({"steps": {str(r.step_id): str(r.status) for r in done}}),
            "the end of a plan attempt",
        )

    async def start_step(self, step_id: int, tool: str | None) -> None:
        """Open the chain run of one step (under the open attempt)."""
        if self.abandoned:
            return
        parent = self.attempt if self.attempt is not None else self.root
        manager = _child(parent, {_KIND: "step", "planexec_step_id": step_id})
        started = await self._event(
            manager.on_chain_start(
                None, {"step_id": step_id, "tool": tool}, name=f"planexec:step {step_id}"
            ),
            f"the start of step {step_id}",
        )
        if started is not None:
            self.steps[step_id] = started

    async def end_step(self, result: StepResult) -> None:
        """Close a step's chain run with its status (and error, as data)."""
        step = self.steps.pop(result.step_id, None)
        if step is None:
            return
        await self._event(
            step.on_chain_end(
                {
                    "status": str(result.status),
                    "error": result.error,
                    "error_kind": str(result.error_kind) if result.error_kind else None,
                }
            ),
            f"the end of step {result.step_id}",
        )

    async def tool_progress(
        self, step_id: int, tool: str, progress: float, total: float | None, message: str | None
    ) -> None:
        """Record a tool call's progress on its step's run (`PROGRESS_EVENT`)."""
        if self.abandoned:
            return
        parent = self._parent(step_id)
        data = {
            "step_id": step_id,
            "tool": tool,
            "progress": progress,
            "total": total,
            "message": message,
        }
        await self._event(
            parent.get_child().on_custom_event(PROGRESS_EVENT, data, run_id=parent.run_id),
            f"the progress of step {step_id}",
        )

    async def end(self, outputs: Mapping[str, Any], error: BaseException | None = None) -> None:
        """Close the run (after any open attempt and steps)."""
        for sid in list(self.steps):
            step = self.steps.pop(sid, None)
            if step is not None:
                await self._event(
                    step.on_chain_end({"status": "unfinished"}), f"the end of step {sid}"
                )
        await self.end_attempt(None, error)
        if error is not None:
            await self._event(self.root.on_chain_error(error), "the run's error")
        else:
            await self._event(self.root.on_chain_end(dict(outputs)), "the run's end")


class OpenTelemetryHandler(BaseCallbackHandler):
    """Turns planexec's callback tree into OpenTelemetry spans.

    The run is an ``invoke_agent planexec`` span; plan attempts and steps are spans
    under it; each model call is a ``chat <model>`` span and each tool call an
    ``execute_tool <name>`` span, under its step, with the GenAI semantic-convention
    attributes. A failed step or call sets the span's status to ERROR.

    Args:
        tracer_provider: The provider (the global one by default).

    Raises:
        MissingExtraError: opentelemetry is not installed (``pip install planexec[otel]``).
    """

    run_inline = True
    """Called in order, on the caller's thread (spans open before their children)."""

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise MissingExtraError(
                "OpenTelemetry spans need the otel extra: pip install 'planexec[otel]'",
                module="opentelemetry",
                install="planexec[otel]",
            ) from exc
        self._trace = trace
        self.tracer = trace.get_tracer("planexec", tracer_provider=tracer_provider)
        """The OpenTelemetry tracer."""
        self._spans: dict[UUID, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ spans

    def _start(
        self, run_id: UUID, parent_run_id: UUID | None, name: str, attrs: Mapping[str, Any]
    ) -> None:
        with self._lock:
            parent = self._spans.get(parent_run_id) if parent_run_id is not None else None
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(
            name,
            context=context,
            attributes={k: v for k, v in attrs.items() if v is not None},
        )
        with self._lock:
            self._spans[run_id] = span

    def _end(
        self,
        run_id: UUID,
        attrs: Mapping[str, Any] | None = None,
        error: BaseException | str | None = None,
    ) -> None:
        with self._lock:
            span = self._spans.pop(run_id, None)
        if span is None:
            return
        for key, value in (attrs or {}).items():
            if value is not None:
                span.set_attribute(key, value)
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            if isinstance(error, BaseException):
                span.record_exception(error)
                span.set_attribute("error.type", type(error).__name__)
            else:
                span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, str(error)[:500]))
        span.end()

    # ------------------------------------------------------------------ chains

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a span for planexec's run, plan attempts and steps."""
        meta = metadata or {}
        kind = meta.get(_KIND)
        name = str(kwargs.get("name") or "chain")
        attrs: dict[str, Any] = {"planexec.run_id": meta.get("planexec_run_id")}
        if kind == "run":
            name = "invoke_agent planexec"
            attrs |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planexec"}
        elif kind == "attempt":
            attrs["planexec.plan_version"] = meta.get("planexec_plan_version")
        elif kind == "step":
            attrs |= {"planexec.step_id": meta.get("planexec_step_id")}
            tool = inputs.get("tool") if isinstance(inputs, dict) else None
            attrs["planexec.tool"] = tool
        self._start(run_id, parent_run_id, name, attrs)

    def on_chain_end(self, outputs: dict[str, Any], *, run_id: UUID, **kwargs: Any) -> None:
        """Close the chain's span (ERROR when a step failed)."""
        attrs: dict[str, Any] = {}
        error: str | None = None
        if isinstance(outputs, dict):
            if outputs.get("status") is not None:
                attrs["planexec.status"] = str(outputs["status"])
            if outputs.get("error"):
                error = str(outputs.get("error_kind") or "error")
                attrs["planexec.error"] = str(outputs["error"])[:500]
        self._end(run_id, attrs, error)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the chain's span with the error."""
        self._end(run_id, error=error)

    # ------------------------------------------------------------------ models

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a ``chat <model>`` span."""
        meta = metadata or {}
        params = kwargs.get("invocation_params") or {}
        model = meta.get("ls_model_name") or params.get("model") or params.get("model_name")
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": meta.get("ls_provider"),
            "planexec.purpose": meta.get("planexec_purpose"),
            "planexec.step_id": meta.get("planexec_step_id"),
            "planexec.run_id": meta.get("planexec_run_id"),
        }
        self._start(run_id, parent_run_id, f"chat {model}" if model else "chat", attrs)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the model call's span with its token usage."""
        attrs: dict[str, Any] = {}
        for generations in response.generations:
            for gen in generations:
                usage = getattr(getattr(gen, "message", None), "usage_metadata", None) or {}
                for key in ("input_tokens", "output_tokens"):
                    if key in usage:
                        attrs[f"gen_ai.usage.{key}"] = int(usage[key])
                meta = getattr(getattr(gen, "message", None), "response_metadata", None) or {}
                if meta.get("model_name"):
                    attrs["gen_ai.response.model"] = str(meta["model_name"])
        self._end(run_id, attrs)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the model call's span with the error."""
        self._end(run_id, error=error)

    # ------------------------------------------------------------------ tools

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open an ``execute_tool <name>`` span."""
        meta = metadata or {}
        tool = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.description": (serialized or {}).get("description"),
            "gen_ai.tool.call.id": kwargs.get("tool_call_id"),
            "planexec.step_id": meta.get("planexec_step_id"),
            "planexec.run_id": meta.get("planexec_run_id"),
        }
        self._start(run_id, parent_run_id, f"execute_tool {tool}", attrs)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the tool call's span."""
        self._end(run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Add a tool call's progress (`PROGRESS_EVENT`) to its step's span as an event."""
        if name != PROGRESS_EVENT or not isinstance(data, Mapping):
            return
        with self._lock:
            span = self._spans.get(run_id)
        if span is None:
            return
        attrs = {
            "planexec.step_id": data.get("step_id"),
            "gen_ai.tool.name": data.get("tool"),
            "planexec.progress": data.get("progress"),
            "planexec.progress.total": data.get("total"),
            "planexec.progress.message": data.get("message"),
        }
        span.add_event(PROGRESS_EVENT, {k: v for k, v in attrs.items() if v is not None})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the tool call's span with the error."""
        self._end(run_id, error=error)


class CallbackRecorder(BaseCallbackHandler):
    """A callback handler that records the runs it sees, to print them as a tree.

    What LangSmith would show, without LangSmith: give it to an agent
    (``PlanExecuteAgent(..., callbacks=[recorder])``), run, then ``print(recorder.tree())``.
    """

    run_inline = True
    """Called in order, on the caller's thread."""

    def __init__(self) -> None:
        self.runs: dict[UUID, dict[str, Any]] = {}
        """Every run seen, by id: ``kind`` (chain, chat_model, tool), ``name``,
        ``parent`` (its parent's id), ``tags``, ``metadata``, ``error``."""
        self.custom_events: list[tuple[UUID, str, Any]] = []
        """Custom events (a tool call's progress, `PROGRESS_EVENT`): the run they were
        sent on, their name and data, in order."""
        self._lock = threading.Lock()

    def _record(self, kind: str, run_id: UUID, parent: UUID | None, **info: Any) -> None:
        with self._lock:
            self.runs[run_id] = {
                "kind": kind,
                "name": info.get("name"),
                "parent": parent,
                "tags": list(info.get("tags") or ()),
                "metadata": dict(info.get("metadata") or {}),
                "error": None,
            }

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a chain run (planexec's run, attempts and steps)."""
        self._record("chain", run_id, parent_run_id, **kwargs)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a model call."""
        self._record("chat_model", run_id, parent_run_id, **kwargs)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a tool call."""
        kwargs.setdefault("name", (serialized or {}).get("name"))
        self._record("tool", run_id, parent_run_id, **kwargs)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a custom event (a tool call's progress)."""
        with self._lock:
            self.custom_events.append((run_id, name, data))

    def _error(self, error: BaseException, run_id: UUID) -> None:
        with self._lock:
            if run_id in self.runs:
                self.runs[run_id]["error"] = f"{type(error).__name__}: {error}"

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Note a chain's error."""
        self._error(error, run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Note a model call's error."""
        self._error(error, run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Note a tool call's error."""
        self._error(error, run_id)

    def children(self, parent: UUID | None) -> list[UUID]:
        """The runs under ``parent`` (None: the roots), in the order they started."""
        with self._lock:
            return [rid for rid, r in self.runs.items() if r["parent"] == parent]

    def roots(self) -> list[UUID]:
        """The runs whose parent was not seen (the top of each tree)."""
        with self._lock:
            return [rid for rid, r in self.runs.items() if r["parent"] not in self.runs]

    def tree(self) -> str:
        """The runs as an indented tree: ``name  (kind)``, one run a line."""
        lines: list[str] = []

        def walk(rid: UUID, depth: int) -> None:
            run = self.runs[rid]
            error = "  !" if run["error"] else ""
            lines.append(f"{'    ' * depth}{run['name']}  ({run['kind']}){error}")
            for child in self.children(rid):
                walk(child, depth + 1)

        for root in self.roots():
            walk(root, 0)
        return "\n".join(lines)
