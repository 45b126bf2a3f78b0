"""One way to call a chat model: `ModelClient`.

Every model call in planexec (planning, resolution fallback, reasoning steps,
evaluation, answers) goes through a `ModelClient`, which enforces the timeout, counts
the call (and tokens) in `Usage` by purpose, and emits an `LLMCalled` event. The
resilience layer (retries with backoff, circuit breaker) plugs in here too.

Each call tells the model what it is for: a `ModelCall` (purpose, step, the keys asked
for, run) travels in the langchain ``RunnableConfig`` metadata (``planexec_*`` keys) with
a ``run_name`` of ``planexec:<purpose>``, so tracing callbacks see named calls and the
fakes of `planexec.testing` answer by purpose instead of by reading prompt text. When
the run is traced (`planexec.tracing`), the config also carries the run's callbacks,
parented under the run's step or the run itself (``planexec:resolve step 3``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from planexec.errors import ModelError, ModelTimeoutError
from planexec.events import EventBus, LLMCalled, ModelCall
from planexec.results import Usage

if TYPE_CHECKING:
    from planexec.tracing import RunTrace

__all__ = ["ModelCall", "ModelClient", "ReplySink", "as_client", "message_text"]



class ReplySink(Protocol):
    """Takes a reply as the model streams it (`ModelClient.complete` with ``sink``)."""

    async def begin(self, *, structured: bool = False) -> None:
        """A new attempt at the reply starts (what came before belongs to a failed one).

        Args:
            structured: The reply is the JSON text of a structured value
                (`ModelClient.complete_structured`): the raw model's tool-call arguments
                or, in JSON mode, its content.
        """

    async def chunk(self, text: str) -> None:
        """The next piece of the reply's text."""

    async def end(self) -> None:
        """The reply is complete."""


def message_text(message: Any) -> str:
    """The text of a model reply (string content, or the text parts of a list)."""
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in (None, "text"):
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    return str(content)


class ModelClient:
    """Calls a chat model with a timeout, counting usage and emitting events."""

    trace: RunTrace | None = None
    """The run's trace (`planexec.tracing`): when set, each call is parented in it."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        timeout: float | None = None,
        usage: Usage | None = None,
        bus: EventBus | None = None,
        run_id: str = "-",
    ) -> None:
        self.model = model
        """The underlying langchain-core chat model."""
        self.timeout = timeout
        """Seconds a call may take (streaming included), or None for no limit."""
        self.usage = usage if usage is not None else Usage()
        """Where calls and tokens are counted."""
        self.bus = bus
        self.run_id = run_id

    def bind(self, *, usage: Usage, bus: EventBus | None, run_id: str) -> ModelClient:
        """Return a client on the same model that counts into ``usage`` for ``run_id``."""
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.usage, clone.bus, clone.run_id = usage, bus, run_id
        return clone

    def _config(self, call: ModelCall) -> Any:
        """The call's ``RunnableConfig``: parented in the run's trace when it has one."""
        return call.config() if self.trace is None else self.trace.model_config(call)

    async def _invoke(
        self, messages: Sequence[BaseMessage], call: ModelCall, sink: ReplySink | None = None
    ) -> Any:
        if sink is not None:
            return await self._stream_into(messages, call, sink)
        return await self.model.ainvoke(list(messages), config=self._config(call))

    async def _stream_into(
        self, messages: Sequence[BaseMessage], call: ModelCall, sink: ReplySink | None
    ) -> Any:
        """Stream the reply (``model.astream``), handing each chunk's text to ``sink``."""
        if isinstance(self.model, _StructuredModel):
            return await self.model.stream_into(list(messages), self._config(call), sink)
        merged: Any = None
        if sink is not None:
            await sink.begin()
        async for chunk in self.model.astream(list(messages), config=self._config(call)):
            merged = chunk if merged is None else merged + chunk
            if sink is not None:
                text = message_text(chunk)
                if text:
                    await sink.chunk(text)
        if merged is None:
            raise ModelError(
                f"model stream ({call.purpose}) ended without any chunk", purpose=call.purpose
            )
        if sink is not None:
            await sink.end()
        return merged

    async def complete(
        self,
        messages: Sequence[BaseMessage],
        *,
        purpose: str,
        step_id: int | None = None,
        keys: Sequence[str] = (),
        sink: ReplySink | None = None,
    ) -> str:
        """Send ``messages`` and return the reply's text.

        Args:
            messages: The prompt.
            purpose: What the call is for (counted in `Usage` under this name).
            step_id: The step it serves, if any.
            keys: For a resolution: the keys the reply must fill.
            sink: Takes the reply as it streams: the call streams (``model.astream``)
                and hands each chunk's text to it (`planexec.streaming`).

        Raises:
            ModelTimeoutError: the call exceeded ``timeout``.
            ModelError: the model raised.
        """
        start = time.perf_counter()
        ok = False
        call = ModelCall(purpose, step_id, tuple(keys), self.run_id)
        try:
            if self.timeout is not None:
                reply = await asyncio.wait_for(self._invoke(messages, call, sink), self.timeout)
            else:
                reply = await self._invoke(messages, call, sink)
            ok = True
        except TimeoutError as exc:
            raise ModelTimeoutError(
                f"model call ({purpose}) timed out after {self.timeout}s", purpose=purpose
            ) from exc
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - any provider error becomes ModelError
            raise ModelError(f"model call ({purpose}) failed: {exc!r}", purpose=purpose) from exc
        finally:
            tokens = None
            if ok:
                meta = getattr(reply, "usage_metadata", None) or {}
                tokens = {
                    k.removesuffix("_tokens"): int(v)
                    for k, v in dict(meta).items()
                    if k in ("input_tokens", "output_tokens", "total_tokens")
                }
            self.usage.add_llm_call(purpose, tokens)
            if self.bus is not None:
                await self.bus.emit(
                    LLMCalled(
                        run_id=self.run_id,
                        purpose=purpose,
                        step_id=step_id,
                        duration=time.perf_counter() - start,
                        ok=ok,
                        streamed=sink is not None,
                    )
                )
        return message_text(reply)

    async def complete_structured(
        self,
        messages: Sequence[BaseMessage],
        schema: Mapping[str, Any],
        *,
        purpose: str,
        step_id: int | None = None,
        sink: ReplySink | None = None,
    ) -> dict[str, Any]:
        """Ask for structured output (``with_structured_output``) and return the value.

        The call goes through `complete` (so a subclass's retries, breaker and timeout
        apply; it is timed, counted under ``purpose`` and emits `LLMCalled`).

        With ``sink``, the structured call streams (``astream_events``) and the sink gets
        the value's JSON text as the raw model writes it (``ReplySink.begin`` with
        ``structured=True``): the arguments of its first tool call (function calling),
        or its content (JSON mode). The value returned is still the one the structured
        output's own parser makes of the whole reply, and, for a tool call, only when
        the streamed arguments are complete JSON (langchain's chunk merge would accept a
        cut-off prefix, which the non-streamed call rejects).

        Args:
            messages: The prompt.
            schema: The JSON Schema of the value to return.
            purpose: What the call is for.
            step_id: The step it serves, if any.
            sink: Takes the value's JSON text as it streams (`planexec.streaming`).

        Returns:
            The value the model returned, as a dict.

        Raises:
            NotImplementedError: the model has no structured output.
            ModelTimeoutError: the call exceeded ``timeout``.
            ModelError: the model raised, or returned no value of the schema.
        """
        box = _StructuredModel(self.model.with_structured_output(dict(schema), include_raw=True))
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.__dict__.update(model=box, stream=False)
        await clone.complete(messages, purpose=purpose, step_id=step_id, sink=sink)
        value = box.parsed
        if hasattr(value, "model_dump"):
            value = value.model_dump()
        if not isinstance(value, dict):
            why = box.error or f"got {type(value).__name__}"
            raise ModelError(f"model call ({purpose}) returned no structured value: {why}")
        return value


class _StructuredModel:
    """Stands in for the chat model in one `ModelClient.complete_structured` call."""

    def __init__(self, runnable: Any) -> None:
        self.runnable = runnable
        self.parsed: Any = None
        self.error: str | None = None

    async def ainvoke(self, messages: list[BaseMessage], config: Any = None) -> Any:
        out = await self.runnable.ainvoke(messages, config=config)
        if isinstance(out, dict) and "raw" in out and "parsed" in out:
            self.parsed = out["parsed"]
            error = out.get("parsing_error")
            self.error = None if error is None else repr(error)
            return out["raw"]
        self.parsed = out
        return out

    async def stream_into(
        self, messages: list[BaseMessage], config: Any, sink: ReplySink | None
    ) -> Any:
        """Stream the structured call, handing the value's JSON text to ``sink``."""
        if sink is not None:
            await sink.begin(structured=True)
        text = _StructuredText()
        out: Any = None
        found = False
        root: Any = None  # the runnable's own run, the first event's (traced, it has parents)
        async for event in self.runnable.astream_events(messages, config=config, version="v2"):
            kind = event["event"]
            if root is None:
                root = event.get("run_id")
            if kind == "on_chat_model_stream":
                restart, piece = text.take(event["data"].get("chunk"))
                if sink is not None and restart:
                    await sink.begin(structured=True)
                if sink is not None and piece:
                    await sink.chunk(piece)
            elif kind.endswith("_end") and event.get("run_id") == root:
                out, found = event["data"].get("output"), True
        if not found:
            raise ModelError("the structured model stream ended without a value")
        if sink is not None:
            await sink.end()
        if isinstance(out, dict) and "raw" in out:
            # streamed, the parser yields nothing (no "parsed") for a reply it cannot read
            self.parsed = out.get("parsed")
            error = out.get("parsing_error")
            self.error = None if error is None else repr(error)
            raw = out["raw"]
        else:
            self.parsed, raw = out, out
        if self.parsed is not None and (text.tool_call or text.text.strip()):
            # langchain closes a cut-off JSON text (its chunk merge for tool-call
            # arguments, parse_partial_json in JSON mode): a cut reply is no value
            written = text.text if text.tool_call else _fenced_json(text.text)
            try:
                json.loads(written)
            except ValueError as exc:
                self.parsed = None
                where = "tool-call arguments" if text.tool_call else "JSON reply"
                self.error = f"the structured {where} are not complete JSON ({exc})"
        return raw


_FENCE = re.compile(r"```(?:json)?(.*)", re.DOTALL)


def _fenced_json(content: str) -> str:
    """The JSON text of a JSON-mode reply: inside a code fence when it has one.

    As langchain's ``parse_json_markdown`` reads it, but for a whole (not partial) value.
    """
    match = _FENCE.search(content)
    return (match.group(1) if match else content).strip(" \n\r\t`")


class _StructuredText:
    """The JSON text of a structured reply, taken from the raw model's stream chunks.

    Function calling: the arguments of the first tool call (``tool_call_chunks``); JSON
    mode: the content. Content that came before a tool call is not the value: the
    reply restarts at the tool call.
    """

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.tool_call = False
        """Whether the value comes as a tool call's arguments."""
        self._index: Any = None

    @property
    def text(self) -> str:
        """The value's JSON text so far."""
        return "".join(self.parts)

    def take(self, chunk: Any) -> tuple[bool, str]:
        """The piece of the value's text in ``chunk``, and whether the reply restarts."""
        calls = list(getattr(chunk, "tool_call_chunks", None) or ())
        restart = False
        if calls:
            if not self.tool_call:
                self.tool_call, self._index = True, calls[0].get("index")
                restart, self.parts = bool(self.text), []
            piece = "".join(
                str(c.get("args") or "") for c in calls if c.get("index") == self._index
            )
        elif self.tool_call or chunk is None:
            return False, ""
        else:
            piece = message_text(chunk)
        self.parts.append(piece)
        return restart, piece


def as_client(model: BaseChatModel | ModelClient | None) -> ModelClient | None:
    """Wrap a chat model in a `ModelClient` (a client or None is returned as is)."""
    if model is None or isinstance(model, ModelClient):
        return model
    return ModelClient(model)
