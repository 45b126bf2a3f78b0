"""Resilience: retries with backoff and jitter, timeouts and circuit breakers.

- `RetryPolicy` + `retry_async`: tenacity retries with exponential backoff, jitter and a
  maximum delay, for calls that are safe to repeat (the caller decides which errors are
  worth another attempt).
- `CircuitBreaker`: ``closed`` → ``open`` after N consecutive failures → ``half_open``
  after ``recovery_time`` (one trial call) → ``closed`` on success, ``open`` again on
  failure. An open breaker fails fast with `CircuitOpenError`. Its clock is injectable.
- `BreakerRegistry`: one breaker per model provider (``model:openai``), per tool
  server (``tool:iot``) and per local tool (``tool:local:<name>``: local tools do not
  share a failure), whose states can be read.
- `with_timeout`: an asyncio-enforced timeout.
- `ResilientModelClient`: a `ModelClient` that retries transient model errors with
  backoff and jitter behind a breaker, and enforces its timeout on the whole call
  (streaming included).
- `classify_tool_failure`: what a tool's exception means (``ARGS_INVALID``,
  ``TOOL_TIMEOUT`` or ``TOOL_ERROR``) and whether another attempt can help, by the
  exception's class and the tool's own ``retry_on`` (`default_tool_retry_on`,
  `tool_retry_on`): the one decision the executor asks for.

All but the model client's part live in `planexec._retry` (re-exported here), which the
executor imports: importing the executor loads no model client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from planexec._log import run_log
from planexec._models import ModelCall, ModelClient, ReplySink
from planexec._retry import (
    BreakerRegistry,
    BreakerState,
    CircuitBreaker,
    RetryOn,
    RetryPolicy,
    ToolFailure,
    classify_tool_failure,
    default_tool_retry_on,
    retry_async,
    tool_retry_on,
    with_timeout,
)
from planexec.errors import CircuitOpenError, ModelError, ModelTimeoutError
from planexec.events import EventBus, FallbackUsed
from planexec.results import Usage

__all__ = [
    "BreakerRegistry",
    "BreakerState",
    "CircuitBreaker",
    "ResilientModelClient",
    "RetryOn",
    "RetryPolicy",
    "ToolFailure",
    "classify_tool_failure",
    "default_tool_retry_on",
    "is_transient_model_error",
    "model_provider",
    "retry_async",
    "tool_retry_on",
    "with_timeout",
]


_TRANSIENT_NAMES = (
    "ratelimit",
    "timeout",
    "connection",
    "serviceunavailable",
    "internalserver",
    "overloaded",
    "apierror",
    "temporar",
)
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def is_transient_model_error(exc: BaseException) -> bool:
    """Whether a model error is worth retrying (timeouts, rate limits, 5xx, network).

    A `ModelTimeoutError` is transient; a `ModelError` is transient when its cause is a
    network error, a timeout, or a provider error whose class name or status code says
    rate limit, overload or server error. Anything else (bad request, authentication,
    a test script running out) is not retried.
    """
    if isinstance(exc, ModelTimeoutError | TimeoutError | ConnectionError):
        return True
    if isinstance(exc, CircuitOpenError):
        return False
    cause: BaseException | None = exc.__cause__ if isinstance(exc, ModelError) else exc
    seen = 0
    while cause is not None and seen < 5:
        if isinstance(cause, TimeoutError | ConnectionError | OSError):
            return True
        status = getattr(cause, "status_code", None) or getattr(cause, "status", None)
        if isinstance(status, int) and status in _TRANSIENT_STATUS:
            return True
        name = type(cause).__name__.lower()
        if any(word in name for word in _TRANSIENT_NAMES):
            return True
        cause = cause.__cause__
        seen += 1
    return False


def model_provider(model: BaseChatModel) -> str:
    """A short provider name for a chat model (``openai``, ``anthropic``, ...)."""
    try:
        params = model._get_ls_params()
        provider = params.get("ls_provider")
        if isinstance(provider, str) and provider:
            return provider
    except Exception:  # noqa: BLE001 - provider name is best effort
        pass
    llm_type = getattr(model, "_llm_type", None)
    if isinstance(llm_type, str) and llm_type:
        return llm_type
    return type(model).__name__


class ResilientModelClient(ModelClient):
    """A `ModelClient` with retries (backoff + jitter) and a circuit breaker.

    Each attempt goes through the breaker (an open breaker raises `CircuitOpenError`
    at once, without calling the model) and is bounded by ``timeout``, enforced with
    asyncio around the whole call — when ``stream`` is on, around the whole stream.
    Transient errors (see `is_transient_model_error`) are retried; every retry logs a
    warning and emits a `FallbackUsed` event. Every attempt is counted in ``usage``.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        timeout: float | None = None,
        usage: Usage | None = None,
        bus: EventBus | None = None,
        run_id: str = "-",
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        breakers: BreakerRegistry | None = None,
        stream: bool = False,
        retry_if: Callable[[BaseException], bool] = is_transient_model_error,
    ) -> None:
        super().__init__(model, timeout=timeout, usage=usage, bus=bus, run_id=run_id)
        self.retry = retry if retry is not None else RetryPolicy()
        """How transient errors are retried."""
        if breaker is None:
            registry = breakers if breakers is not None else BreakerRegistry()
            breaker = registry.model(model_provider(model))
        self.breaker = breaker
        """The breaker every attempt goes through."""
        self.stream = stream
        """Whether to stream the reply (the timeout bounds the whole stream)."""
        self.retry_if = retry_if
        """Which errors are retried."""

    async def _invoke(
        self, messages: Sequence[BaseMessage], call: ModelCall, sink: ReplySink | None = None
    ) -> Any:
        if not self.stream and sink is None:
            return await super()._invoke(messages, call)
        return await self._stream_into(messages, call, sink)

    async def complete(
        self,
        messages: Sequence[BaseMessage],
        *,
        purpose: str,
        step_id: int | None = None,
        keys: Sequence[str] = (),
        sink: ReplySink | None = None,
    ) -> str:
        """Send ``messages`` and return the reply's text, retrying transient errors.

        With ``sink``, each attempt streams into it (`ReplySink.begin` starts each one).

        Raises:
            CircuitOpenError: the model's breaker is open (no call was made).
            ModelTimeoutError: the last attempt exceeded ``timeout``.
            ModelError: the last attempt failed.
        """

        async def attempt() -> str:
            self.breaker.before_call()
            try:
                text = await ModelClient.complete(
                    self, messages, purpose=purpose, step_id=step_id, keys=keys, sink=sink
                )
            except asyncio.CancelledError:
                self.breaker.release()
                raise
            except ModelError:
                self.breaker.record_failure()
                raise
            self.breaker.record_success()
            return text

        async def on_retry(n: int, exc: BaseException, delay: float) -> None:
            message = (
                f"model call ({purpose}) attempt {n} of {self.retry.attempts} failed: "
                f"{exc}; retrying in {delay:.2f}s"
            )
            run_log(self.run_id, step_id=step_id).warning(message)
            if self.bus is not None:
                await self.bus.emit(
                    FallbackUsed(
                        run_id=self.run_id, step_id=step_id, code="MODEL_RETRY", message=message
                    )
                )

        return await retry_async(attempt, self.retry, self.retry_if, on_retry=on_retry)


# --------------------------------------------------------------------------- tool failures
