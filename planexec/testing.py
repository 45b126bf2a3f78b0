"""Fakes shipped in the package, so tests never call a real model or the network.

- `ScriptedChatModel`: a langchain-core chat model that replies from a script (strings,
  exceptions to raise, or functions of the request) and records every request.
- `FunctionChatModel`: a chat model whose reply is computed by a function of the messages.
- `FunctionModel`: the fake at planexec's own seam (like pydantic-ai's ``FunctionModel``):
  its function receives a `ModelCall` — the call's purpose (``plan``, ``resolve``,
  ``reason``, ``select``, ``answer``, ``evaluate``), the step, the keys a resolution must
  fill (for ``select``: the candidate tools' qualified names) — so a
  test answers by what the call is for, never by reading prompt text. With
  ``structured=True`` it also plays a model with native structured output
  (``with_structured_output``); by default it is text-only, like `ScriptedChatModel`.
- `StreamingModel`: a `FunctionModel` that streams its reply (``astream``) in chunks at
  a given token rate, paced by a `FakeClock` (or real time) and an optional ``gate``
  awaited before each chunk, so a test can play a slow real model without sleeping.
  With ``structured=True`` its structured output streams too: a tool call whose
  arguments come in chunks (langchain's own ``with_structured_output``), or JSON-mode
  content (``structured_method="json_mode"``).
- `FakeClock`: time that passes only when a test says so (`FakeClock.advance`).
- `fake_tool`: a langchain-core tool with a canned output, error or latency, that
  records its calls.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, UsageMetadata
from langchain_core.messages.tool import invalid_tool_call, tool_call, tool_call_chunk
from langchain_core.output_parsers import JsonOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableMap,
    RunnablePassthrough,
)
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model
from pydantic.v1 import BaseModel as BaseModelV1

from planexec._models import ModelCall
from planexec.errors import RetryableToolError
from planexec.resilience import RetryOn

__all__ = [
    "FakeClock",
    "FunctionChatModel",
    "FunctionModel",
    "ModelCall",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "StreamingModel",
    "ToolCallLog",
    "fake_tool",
    "messages_text",
]

Reply = str | BaseException | Callable[[list[BaseMessage]], str]
"""A scripted reply: text, an exception to raise, or a function of the messages."""


class ScriptExhaustedError(AssertionError):
    """A scripted model was called more times than its script has replies."""


def messages_text(messages: Sequence[BaseMessage]) -> str:
    """Join the text of messages, one per paragraph (for assertions on prompts)."""
    parts = []
    for m in messages:
        content = m.content
        if isinstance(content, list):
            content = "".join(
                c if isinstance(c, str) else str(c.get("text", "")) for c in content
            )
        parts.append(f"[{m.type}] {content}")
    return "\n\n".join(parts)


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script and records every request.

    Example:
        >>> model = ScriptedChatModel(replies=['{"site_name": "MAIN"}'])
        >>> model.invoke("fill the args").content
        '{"site_name": "MAIN"}'
        >>> len(model.requests)
        1
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    replies: list[Any] = Field(default_factory=list)
    """Replies in order: strings, exceptions (raised), or functions of the messages."""
    delay: float = 0.0
    """Seconds to wait before replying (async calls only), to test timeouts."""
    repeat_last: bool = False
    """Keep answering with the last reply once the script is used up."""
    usage: dict[str, int] | None = None
    """Token usage to report on every reply, e.g. ``{"input_tokens": 10, ...}``."""
    name_: str = "scripted"
    """A name for the fake (its ``model_name`` unless one is given)."""
    model_name: str | None = None
    """The model's name in traces (``ls_model_name``) and in each reply's
    ``response_metadata["model_name"]``; `name_` when None. A call's ``model=...``
    keyword overrides it for that call, as providers' models do."""
    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _index: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "planexec-scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name or self.name_}

    def _model_for(self, kwargs: Mapping[str, Any]) -> str:
        """The model a call answers as: its ``model`` keyword, else `model_name`."""
        model = kwargs.get("model")
        if isinstance(model, str) and model:
            return model
        return self.model_name or self.name_

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_model_name"] = self._model_for(kwargs)
        return params

    def _usage(self) -> UsageMetadata | None:
        """The usage every reply reports (from `usage`), or None."""
        if not self.usage:
            return None
        inp, out = self.usage.get("input_tokens", 0), self.usage.get("output_tokens", 0)
        return UsageMetadata(
            input_tokens=inp,
            output_tokens=out,
            total_tokens=self.usage.get("total_tokens", inp + out),
        )

    @property
    def requests(self) -> list[list[BaseMessage]]:
        """Every request received, as its list of messages."""
        return self._requests

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self._requests)

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        return max(0, len(self.replies) - self._index)

    def _next(self, messages: list[BaseMessage]) -> str:
        self._requests.append(list(messages))
        if self._index >= len(self.replies):
            if self.repeat_last and self.replies:
                reply = self.replies[-1]
            else:
                raise ScriptExhaustedError(
                    f"ScriptedChatModel was called {len(self._requests)} times but has "
                    f"{len(self.replies)} replies; last request:\n"
                    f"{messages_text(messages)[:2000]}"
                )
        else:
            reply = self.replies[self._index]
            self._index += 1
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return str(reply(list(messages)))
        return str(reply)

    def _result(self, text: str, kwargs: Mapping[str, Any] | None = None) -> ChatResult:
        return self._message_result(AIMessage(content=text), kwargs)

    def _message_result(
        self, msg: AIMessage, kwargs: Mapping[str, Any] | None = None
    ) -> ChatResult:
        """``msg`` with the usage and the model's name, as a `ChatResult`."""
        usage = self._usage()
        if usage is not None:
            msg.usage_metadata = usage
        msg.response_metadata = {
            **msg.response_metadata, "model_name": self._model_for(kwargs or {})
        }
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        return self._result(self._next(messages), kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._result(self._next(messages), kwargs)

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """Stream as langchain does; the whole reply (this fake does not stream) is one chunk.

        (It implements no ``_stream``, so planexec does not stream its plans:
        `planexec.streaming.model_streams`; langchain then yields the whole message,
        which is turned into the one last `AIMessageChunk` a stream is made of.)
        """
        for out in super().stream(input, config, stop=stop, **kwargs):
            yield out if isinstance(out, AIMessageChunk) else _as_chunk(out)

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """Stream as langchain does; the whole reply is one chunk (see `stream`)."""
        async for out in super().astream(input, config, stop=stop, **kwargs):
            yield out if isinstance(out, AIMessageChunk) else _as_chunk(out)

    def _stream_chat_model_events(
        self,
        messages: list[BaseMessage],
        *,
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """``stream_events(version="v3")``: the whole reply's events (it does not stream)."""
        from langchain_core.language_models._compat_bridge import chunks_to_events

        result = self._generate(messages, stop, run_manager, **kwargs)
        whole = ChatGenerationChunk(message=_as_chunk(result.generations[0].message))
        yield from chunks_to_events(iter([whole]))

    async def _astream_chat_model_events(
        self,
        messages: list[BaseMessage],
        *,
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """``astream_events(version="v3")``: the whole reply's events (see above)."""
        from langchain_core.language_models._compat_bridge import chunks_to_events

        result = await self._agenerate(messages, stop, run_manager, **kwargs)
        whole = ChatGenerationChunk(message=_as_chunk(result.generations[0].message))
        for event in chunks_to_events(iter([whole])):
            yield event


def _as_chunk(message: BaseMessage) -> AIMessageChunk:
    """A whole reply as the one (last) chunk of a stream."""
    calls = getattr(message, "tool_calls", None) or []
    chunk = AIMessageChunk(
        content=message.content,
        tool_call_chunks=[
            tool_call_chunk(
                name=c["name"], args=json.dumps(c["args"]), id=c.get("id"), index=i
            )
            for i, c in enumerate(calls)
        ],
        usage_metadata=getattr(message, "usage_metadata", None),
        response_metadata=dict(message.response_metadata),
        id=message.id,
        chunk_position="last",
    )
    return chunk


_CALL: ContextVar[ModelCall | None] = ContextVar("planexec_testing_call", default=None)
"""The `ModelCall` of the chat model call under way in this context (see `FunctionModel`)."""


def _as_schema(schema: Any, data: Any) -> Any:
    """``data`` as an instance of ``schema`` when that is a pydantic model, else as is.

    Raises:
        ValueError: the data does not fit the model (a pydantic ``ValidationError``).
    """
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_validate(data)
    if isinstance(schema, type) and issubclass(schema, BaseModelV1):
        return schema.parse_obj(data)
    return data


class FunctionChatModel(ScriptedChatModel):
    """A chat model whose every reply is ``function(messages)``."""

    function: Callable[[list[BaseMessage]], str] = Field(default=lambda m: "")
    """Computes the reply text from the request's messages."""

    def _next(self, messages: list[BaseMessage]) -> str:
        self._requests.append(list(messages))
        return str(self.function(list(messages)))


class FunctionModel(ScriptedChatModel):
    r"""A chat model whose reply is ``function(call, messages)``; ``call`` says what for.

    ``call`` is the `ModelCall` planexec sent with the request (purpose, step, keys to
    fill, run). A request that planexec did not make (a direct ``invoke``) gets a call
    of purpose ``"direct"``. The function may return text, raise (the model fails), or
    be a coroutine function (awaited: ``await asyncio.Event().wait()`` makes a model
    that hangs). Every call is recorded in `calls_made`.

    With ``structured=True``, ``with_structured_output(schema)`` returns a runnable that
    asks the same function (``call.purpose`` is the call's, e.g. ``"plan"``) and returns
    its value: a dict (or a JSON text, parsed; one that does not parse is the
    ``parsing_error`` of an ``include_raw`` call). Without it, ``with_structured_output``
    raises `NotImplementedError`, as langchain's text-only chat models do.

    Example:
        >>> import json
        >>> def reply(call: ModelCall, messages: list) -> str:
        ...     if call.purpose == "resolve":
        ...         return json.dumps({key: "CH-6" for key in call.keys})
        ...     return "#Task1: list sites\n#Tool1: sites\n#Args1: {}"
        >>> model = FunctionModel(function=reply)
    """

    function: Callable[..., Any] = Field(default=lambda call, messages: "")
    """Computes the reply from the `ModelCall` and the messages (sync or async)."""
    structured: bool = False
    """Whether the model has native structured output (``with_structured_output``)."""
    _calls: list[ModelCall] = PrivateAttr(default_factory=list)

    def with_structured_output(
        self, schema: dict[str, Any] | type, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """A runnable that answers with the function's value (``structured=True`` only).

        The call goes through the chat model (callbacks and tracing see it, with
        ``ls_structured_output_format``; sync and async; any `LanguageModelInput`): the
        function's value is the reply's JSON text, parsed (into ``schema`` when it is a
        pydantic model). A reply that does not parse is the ``parsing_error`` of an
        ``include_raw`` call, and raises otherwise.

        Raises:
            NotImplementedError: the model is text-only (``structured=False``).
        """
        if not self.structured:
            raise NotImplementedError(
                "with_structured_output is not implemented for this model "
                "(FunctionModel(structured=False))"
            )

        method = kwargs.get("method") or "json_schema"
        llm = self.bind(
            response_format={"type": "json_object"},
            ls_structured_output_format={
                "kwargs": {"method": method},
                "schema": convert_to_json_schema(schema),
            },
        )

        def parse(message: BaseMessage) -> Any:
            return _as_schema(schema, json.loads(message.text))

        def parse_raw(message: BaseMessage) -> dict[str, Any]:
            try:
                return {"raw": message, "parsed": parse(message), "parsing_error": None}
            except ValueError as exc:  # not JSON, or not the schema's (pydantic)
                return {"raw": message, "parsed": None, "parsing_error": exc}

        if include_raw:
            return llm | RunnableLambda(parse_raw, name="FunctionModel.structured")
        return llm | RunnableLambda(parse, name="FunctionModel.structured")

    def invoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """`BaseChatModel.invoke`, with the call's `ModelCall` at hand (see `_ask`)."""
        token = _CALL.set(ModelCall.from_metadata((config or {}).get("metadata")))
        try:
            return super().invoke(input, config, stop=stop, **kwargs)
        finally:
            _CALL.reset(token)

    async def ainvoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """`BaseChatModel.ainvoke`, with the call's `ModelCall` at hand (see `_ask`)."""
        token = _CALL.set(ModelCall.from_metadata((config or {}).get("metadata")))
        try:
            return await super().ainvoke(input, config, stop=stop, **kwargs)
        finally:
            _CALL.reset(token)

    @property
    def calls_made(self) -> list[ModelCall]:
        """Every call received, in order."""
        return self._calls

    def purposes(self) -> list[str]:
        """The purpose of every call received, in order."""
        return [c.purpose for c in self._calls]

    def _ask(self, messages: list[BaseMessage], run_manager: Any) -> Any:
        """Record the call and ask the function (its result may be a coroutine).

        The `ModelCall` is read from the run's metadata; langchain gives a streamed
        call (``_stream``, ``_astream``) no run manager, so it is then the one the
        call's config carried into `invoke`, `ainvoke`, `stream` or `astream`.
        """
        metadata = getattr(run_manager, "metadata", None)
        call = ModelCall.from_metadata(metadata)
        if call is None and run_manager is None:
            call = _CALL.get()
        call = call or ModelCall("direct")
        self._calls.append(call)
        self._requests.append(list(messages))
        return self.function(call, list(messages))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        out = self._ask(messages, run_manager)
        if asyncio.iscoroutine(out):
            out.close()
            raise TypeError("FunctionModel: an async function needs an async call (ainvoke)")
        return self._result(self._text_of(out, kwargs), kwargs)

    def _text_of(self, out: Any, kwargs: Mapping[str, Any]) -> str:
        """The reply's text: JSON for a structured call (``response_format``), else str."""
        if "response_format" in kwargs and not isinstance(out, str):
            return json.dumps(out, default=str)
        return str(out)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        out = self._ask(messages, run_manager)
        if asyncio.iscoroutine(out):
            out = await out
        return self._result(self._text_of(out, kwargs), kwargs)


class FakeClock:
    """Time that passes only when told: `sleep` waits until `advance` reaches its end.

    Example:
        >>> async def demo() -> list[str]:
        ...     clock, seen = FakeClock(), []
        ...     async def sleeper() -> None:
        ...         await clock.sleep(1.0)
        ...         seen.append(f"woke at {clock.now}")
        ...     task = asyncio.create_task(sleeper())
        ...     await asyncio.sleep(0)  # the sleeper starts sleeping at 0.0
        ...     await clock.advance(0.5)
        ...     seen.append("half way")
        ...     await clock.advance(0.5)
        ...     await task
        ...     return seen
        >>> asyncio.run(demo())
        ['half way', 'woke at 1.0']
    """

    def __init__(self) -> None:
        self.now = 0.0
        """Seconds of fake time since the clock was made."""
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def sleeping(self) -> int:
        """How many `sleep` calls are waiting."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has advanced by ``seconds``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), fut))
        await fut

    async def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``, waking each sleeper due (in time order)."""
        target = self.now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            due, _, fut = heapq.heappop(self._sleepers)
            self.now = max(self.now, due)
            if not fut.done():
                fut.set_result(None)
                await asyncio.sleep(0)  # let the sleeper run before the next one wakes
        self.now = target


class StreamingModel(FunctionModel):
    """A `FunctionModel` that streams its reply in chunks, like a real model decoding.

    ``astream`` (what planexec uses when `planexec.config.PlannerSettings.stream` is on)
    yields the reply ``tokens_per_chunk`` tokens at a time (a token is
    ``chars_per_token`` characters), waiting ``tokens_per_chunk / tokens_per_second``
    seconds of ``clock`` before each chunk (real time when no clock is given; no wait
    when ``tokens_per_second`` is None) and awaiting ``gate(index, text_so_far)`` when one
    is given, so a test decides when each chunk goes out. ``ainvoke`` answers with the
    whole reply after the time the whole stream takes (one wait; no gate).

    Example:
        >>> model = StreamingModel(function=lambda call, messages: "#Task1: list sites",
        ...                        chars_per_token=4, tokens_per_chunk=2)
        >>> async def chunks() -> list[str]:
        ...     return [c.content async for c in model.astream("plan") if c.content]
        >>> asyncio.run(chunks())
        ['#Task1: ', 'list sit', 'es']
    """

    tokens_per_second: float | None = None
    """Decoding speed; None: no waiting between chunks."""
    chars_per_token: int = 4
    """Characters per token (a rough rule for English text)."""
    tokens_per_chunk: int = 1
    """Tokens per streamed chunk."""
    clock: Any = None
    """Where the waits happen: a `FakeClock` (or anything with ``async sleep(seconds)``);
    None: real time (``asyncio.sleep``), for benchmarks."""
    gate: Callable[[int, str], Awaitable[None]] | None = None
    """Awaited before chunk ``index`` goes out, with the reply's text sent so far."""
    structured_method: str = "function_calling"
    """With ``structured=True``, how ``with_structured_output`` asks for the value, as
    real providers do: ``function_calling`` (langchain's own
    ``BaseChatModel.with_structured_output`` over `bind_tools`: the reply is a tool call
    whose arguments stream as ``tool_call_chunks``) or ``json_mode`` (the reply's
    content is the JSON text)."""
    chunk_times: list[float] = Field(default_factory=list)
    """When each chunk went out (the clock's ``now`` or ``time.perf_counter()``)."""

    def with_structured_output(
        self, schema: dict[str, Any] | type, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """Structured output through the chat model itself, so it streams (``structured``).

        The function's reply (a dict, or a JSON text) becomes a tool call's arguments
        (``function_calling``) or the content (``json_mode``); the parsing is
        langchain's own.

        Raises:
            NotImplementedError: the model is text-only (``structured=False``).
        """
        if not self.structured:
            return super().with_structured_output(schema, include_raw=include_raw)
        if self.structured_method == "function_calling":
            return BaseChatModel.with_structured_output(self, schema, include_raw=include_raw)
        if self.structured_method != "json_mode":
            raise ValueError(f"unknown structured_method {self.structured_method!r}")
        llm = self.bind(response_format={"type": "json_object"})
        parser = JsonOutputParser()
        if not include_raw:
            return llm | parser
        with_parsed = RunnablePassthrough.assign(
            parsed=itemgetter("raw") | parser, parsing_error=lambda _: None
        ).with_fallbacks(
            [RunnablePassthrough.assign(parsed=lambda _: None)], exception_key="parsing_error"
        )
        return RunnableMap(raw=llm) | with_parsed

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools: the reply is then a call of one (its arguments the function's value).

        The tool called is the one ``tool_choice`` names (a name, or
        ``{"type": "function", "function": {"name": ...}}``), else the first one.
        Other keywords (``ls_structured_output_format``, for tracing) are bound too.
        """
        bound = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=bound, **kwargs)

    def _reply_text(self, out: Any) -> str:
        return out if isinstance(out, str) else json.dumps(out, default=str)

    def _now(self) -> float:
        return float(self.clock.now) if self.clock is not None else time.perf_counter()

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """`BaseChatModel.stream` (it streams), with the call's `ModelCall` at hand."""
        _CALL.set(ModelCall.from_metadata((config or {}).get("metadata")))
        yield from BaseChatModel.stream(self, input, config, stop=stop, **kwargs)

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """`BaseChatModel.astream` (it streams), with the call's `ModelCall` at hand."""
        _CALL.set(ModelCall.from_metadata((config or {}).get("metadata")))
        async for chunk in BaseChatModel.astream(self, input, config, stop=stop, **kwargs):
            yield chunk

    def _stream_chat_model_events(
        self,
        messages: list[BaseMessage],
        *,
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """``stream_events(version="v3")`` over `_stream`'s chunks (it streams)."""
        from langchain_core.language_models._compat_bridge import chunks_to_events

        yield from chunks_to_events(self._stream(messages, stop, run_manager, **kwargs))

    async def _astream_chat_model_events(
        self,
        messages: list[BaseMessage],
        *,
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """``astream_events(version="v3")`` over `_astream`'s chunks (it streams)."""
        from langchain_core.language_models._compat_bridge import achunks_to_events

        chunks = self._astream(messages, stop, run_manager, **kwargs)
        async for event in achunks_to_events(chunks):
            yield event

    @property
    def _sleep(self) -> Callable[[float], Awaitable[None]]:
        """The clock's sleep (real time without a clock)."""
        return self.clock.sleep if self.clock is not None else asyncio.sleep

    def _shape(self, out: Any, kwargs: dict[str, Any]) -> tuple[str | None, str]:
        """The tool a structured call asks for (None: plain text) and the reply's text."""
        tool = _tool_name(kwargs)
        structured = tool is not None or "response_format" in kwargs
        return tool, self._reply_text(out) if structured else str(out)

    async def _reply(self, out: Any, kwargs: dict[str, Any]) -> tuple[str | None, str]:
        """`_shape` of the function's answer, awaited when the function is async."""
        if asyncio.iscoroutine(out):
            out = await out
        return self._shape(out, kwargs)

    def _sync_reply(self, out: Any, kwargs: dict[str, Any]) -> tuple[str | None, str]:
        """`_shape` for a sync call (``invoke``, ``stream``), which cannot await.

        Raises:
            TypeError: the function is async, or a ``clock`` or ``gate`` paces the
                chunks: those need an async call.
        """
        if asyncio.iscoroutine(out):
            out.close()
            raise TypeError("StreamingModel: an async function needs an async call")
        if self.clock is not None or self.gate is not None:
            raise TypeError("StreamingModel: a clock or a gate needs an async call")
        return self._shape(out, kwargs)

    def _pieces(self, text: str) -> list[str]:
        size = max(1, self.chars_per_token * self.tokens_per_chunk)
        return [text[start : start + size] for start in range(0, max(len(text), 1), size)]

    def _delay(self) -> float:
        """Seconds before each chunk (0: no waiting)."""
        return self.tokens_per_chunk / self.tokens_per_second if self.tokens_per_second else 0.0

    def _chunk(
        self, tool: str | None, index: int, piece: str, last: bool, kwargs: dict[str, Any]
    ) -> ChatGenerationChunk:
        """Chunk ``index`` of a reply; the last one carries the usage and the model."""
        if tool is None:
            message = AIMessageChunk(content=piece)
        else:
            first = index == 0
            part = tool_call_chunk(
                name=tool if first else None,
                args=piece,
                id="call_0" if first else None,
                index=0,
            )
            message = AIMessageChunk(content="", tool_call_chunks=[part])
        if last:
            message.chunk_position = "last"
            message.usage_metadata = self._usage()
            message.response_metadata = {"model_name": self._model_for(kwargs)}
        return ChatGenerationChunk(message=message)

    def _whole(self, tool: str | None, text: str, kwargs: dict[str, Any]) -> ChatResult:
        """The whole reply: text, or a call of ``tool`` with the text as its arguments."""
        if tool is None:
            return self._result(text, kwargs)
        message = AIMessage(content="")
        try:
            args = json.loads(text)
        except ValueError as exc:
            args = exc
        if isinstance(args, dict):
            message.tool_calls = [tool_call(name=tool, args=args, id="call_0")]
        else:
            message.invalid_tool_calls = [
                invalid_tool_call(name=tool, args=text, id="call_0", error=str(args))
            ]
        return self._message_result(message, kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        tool, text = await self._reply(self._ask(messages, run_manager), kwargs)
        pieces = self._pieces(text)
        delay = self._delay()
        sleep = self._sleep
        begun = self._now()
        sent = 0
        for index, piece in enumerate(pieces):
            if delay:  # against the start, so waits do not add up their overshoots
                await sleep(max(0.0, begun + (index + 1) * delay - self._now()))
            if self.gate is not None:
                await self.gate(index, text[:sent])
            self.chunk_times.append(self._now())
            sent += len(piece)
            yield self._chunk(tool, index, piece, index == len(pieces) - 1, kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        tool, text = self._sync_reply(self._ask(messages, run_manager), kwargs)
        pieces = self._pieces(text)
        delay = self._delay()
        begun = time.perf_counter()
        for index, piece in enumerate(pieces):
            if delay:  # real time: a sync call has no clock to wait on
                time.sleep(max(0.0, begun + (index + 1) * delay - time.perf_counter()))
            self.chunk_times.append(self._now())
            yield self._chunk(tool, index, piece, index == len(pieces) - 1, kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tool, text = await self._reply(self._ask(messages, run_manager), kwargs)
        if self.tokens_per_second:
            chunks = len(self._pieces(text))
            await self._sleep(chunks * self.tokens_per_chunk / self.tokens_per_second)
        return self._whole(tool, text, kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tool, text = self._sync_reply(self._ask(messages, run_manager), kwargs)
        if self.tokens_per_second:
            time.sleep(len(self._pieces(text)) * self.tokens_per_chunk / self.tokens_per_second)
        return self._whole(tool, text, kwargs)


def _tool_name(kwargs: dict[str, Any]) -> str | None:
    """The tool a call's reply calls (``bind_tools``), None when no tool is bound.

    The one ``tool_choice`` names, else the first bound one.
    """
    tools = kwargs.get("tools") or []
    if not tools:
        return None
    names = [str(t["function"]["name"]) for t in tools]
    choice = kwargs.get("tool_choice")
    if isinstance(choice, Mapping):
        choice = (choice.get("function") or {}).get("name") or choice.get("name")
    return choice if isinstance(choice, str) and choice in names else names[0]


@dataclass
class ToolCallLog:
    """The calls a fake tool received."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    """The keyword arguments of each call, in order."""

    @property
    def count(self) -> int:
        """How many calls were made."""
        return len(self.calls)


def fake_tool(
    name: str,
    output: Any = None,
    *,
    description: str | None = None,
    args: dict[str, type | tuple[type, Any]] | type[BaseModel] | None = None,
    error: str | BaseException | None = None,
    fail_times: int = 0,
    latency: float = 0.0,
    function: Callable[..., Any] | None = None,
    hints: dict[str, bool] | None = None,
    retry_on: RetryOn | None = None,
) -> BaseTool:
    """Build a langchain-core tool with canned behaviour that records its calls.

    Args:
        name: The tool's name.
        output: What it returns (ignored when ``function`` is given).
        description: Its description (a default one otherwise).
        args: Its arguments: ``{"name": type}`` or ``{"name": (type, default)}`` or a
            pydantic model. Without it, the tool takes no arguments.
        error: Raise this on every call, or on the first ``fail_times`` calls when
            ``fail_times`` > 0. A message becomes a `planexec.errors.RetryableToolError`
            (a transient failure, which the executor retries for a safe tool); an
            exception is raised as it is, and retried only if its class says a retry
            can help (`planexec.resilience.default_tool_retry_on`).
        fail_times: With ``error``, fail only this many times, then succeed (flaky tool).
        latency: Seconds to sleep (asynchronously) before answering.
        function: Compute the output from the keyword arguments instead.
        hints: Safety hints stored in ``tool.metadata["planexec"]``, e.g.
            ``{"read_only": True}``.
        retry_on: Which of its failures a retry may fix (exception classes or a
            predicate), stored as ``tool.metadata["planexec"]["retry_on"]``.

    The calls are recorded in ``tool.metadata["calls"]`` (a `ToolCallLog`).
    """
    log = ToolCallLog()
    schema: type[BaseModel]
    if isinstance(args, type):
        schema = args
    else:
        fields: dict[str, Any] = {}
        for arg, spec in (args or {}).items():
            fields[arg] = spec if isinstance(spec, tuple) else (spec, ...)
        schema = create_model(f"{name}_args", **fields)

    async def _run(**kwargs: Any) -> Any:
        log.calls.append(dict(kwargs))
        if latency:
            await asyncio.sleep(latency)
        if error is not None and (fail_times == 0 or log.count <= fail_times):
            raise error if isinstance(error, BaseException) else RetryableToolError(error)
        if function is not None:
            result = function(**kwargs)
            if asyncio.iscoroutine(result):
                result = await result
            return result
        return output

    def _sync(**kwargs: Any) -> Any:
        return asyncio.run(_run(**kwargs))

    tool = StructuredTool.from_function(
        func=_sync,
        coroutine=_run,
        name=name,
        description=description or f"Fake tool {name}.",
        args_schema=schema,
    )
    meta: dict[str, Any] = dict(hints or {})
    if retry_on is not None:
        meta["retry_on"] = retry_on
    tool.metadata = {"calls": log, "planexec": meta}
    return tool
