"""Retries, timeouts and circuit breakers without a model client (internal).

The public face is `planexec.resilience`, which re-exports every name here and adds
`ResilientModelClient`; the executor imports from this module, so that importing it
loads no model client (``tests/test_imports.py``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from langchain_core.tools import BaseTool
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from planexec.errors import (
    CircuitOpenError,
    ConfigError,
    ErrorKind,
    RetryableToolError,
    ToolArgumentsError,
)

__all__ = [
    "BreakerRegistry",
    "BreakerState",
    "CircuitBreaker",
    "RetryOn",
    "RetryPolicy",
    "ToolFailure",
    "classify_tool_failure",
    "default_tool_retry_on",
    "retry_async",
    "tool_retry_on",
    "with_timeout",
]

T = TypeVar("T")

BreakerState = Literal["closed", "open", "half_open"]
"""The state of a circuit breaker."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a call that is safe to repeat.

    The delay before retry ``n`` (1-based) is ``base_delay * 2 ** (n - 1)`` plus a
    random jitter in ``[0, jitter]``, capped at ``max_delay``.
    """

    attempts: int = 3
    """Total attempts, the first one included (1 means no retry)."""
    base_delay: float = 0.2
    """Seconds before the first retry (doubled for each further retry)."""
    max_delay: float = 5.0
    """Upper bound on any delay, jitter included."""
    jitter: float = 0.1
    """Maximum random seconds added to each delay."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if min(self.base_delay, self.max_delay, self.jitter) < 0:
            raise ConfigError("RetryPolicy delays must not be negative")

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that makes a single attempt."""
        return cls(attempts=1, base_delay=0.0, max_delay=0.0, jitter=0.0)

    def wait(self) -> wait_exponential_jitter:
        """The tenacity wait strategy of this policy."""
        return wait_exponential_jitter(
            multiplier=self.base_delay, max=self.max_delay, jitter=self.jitter
        )


RetryHook = Callable[[int, BaseException, float], Awaitable[None] | None]
"""Called before each retry with (the attempt that failed, its error, the delay)."""


async def retry_async(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    retry_if: Callable[[BaseException], bool] = lambda exc: isinstance(exc, Exception),
    *,
    on_retry: RetryHook | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> T:
    """Call ``fn`` until it succeeds, ``retry_if`` rejects its error, or attempts run out.

    The last error is re-raised as is. Cancellation is never retried.

    Args:
        fn: A zero-argument coroutine function making one attempt.
        policy: Attempts and backoff.
        retry_if: Whether an error is worth another attempt.
        on_retry: Called before each retry (log it, emit an event): never silent.
        sleep: The sleep function (tests may inject one that does not wait).

    Returns:
        The first successful result.
    """

    def _should_retry(exc: BaseException) -> bool:
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
            return False
        return retry_if(exc)

    # Fast path: the first attempt runs without tenacity's machinery (most calls
    # succeed at once); tenacity takes over for the retries, numbered from 2.
    try:
        return await fn()
    except BaseException as exc:
        if policy.attempts <= 1 or not _should_retry(exc):
            raise
        first_error = exc
    do_sleep = sleep if sleep is not None else asyncio.sleep
    first_delay = float(policy.wait()(RetryCallState(AsyncRetrying(), None, (), {})))
    if on_retry is not None:
        out = on_retry(1, first_error, first_delay)
        if out is not None:
            await out
    await do_sleep(first_delay)

    async def _before_sleep(state: RetryCallState) -> None:
        if on_retry is None or state.outcome is None:
            return
        exc = state.outcome.exception()
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        if exc is not None:
            out = on_retry(state.attempt_number + 1, exc, float(delay))
            if out is not None:
                await out

    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.attempts - 1),
        wait=wait_exponential_jitter(
            multiplier=policy.base_delay * 2, max=policy.max_delay, jitter=policy.jitter
        ),
        retry=retry_if_exception(_should_retry),
        before_sleep=_before_sleep,
        reraise=True,
        sleep=do_sleep,
    )
    result: T = await retrying(fn)
    return result


async def with_timeout(aw: Awaitable[T], seconds: float | None) -> T:
    """Await ``aw``, cancelling it after ``seconds`` (None: no limit).

    Raises:
        TimeoutError: the time ran out (the awaited work was cancelled).
    """
    if seconds is None:
        return await aw
    return await asyncio.wait_for(aw, seconds)


class CircuitBreaker:
    """A circuit breaker: fail fast while a dependency keeps failing.

    ``closed``: calls go through; ``failure_threshold`` consecutive failures open it.
    ``open``: calls fail fast with `CircuitOpenError` until ``recovery_time`` passed.
    ``half_open``: one trial call goes through; success closes the breaker, failure
    opens it again for another ``recovery_time``.

    Example:
        >>> now = [0.0]
        >>> b = CircuitBreaker("tool:iot", failure_threshold=2, recovery_time=10,
        ...                    clock=lambda: now[0])
        >>> b.record_failure(); b.record_failure(); b.state
        'open'
        >>> now[0] = 10.0; b.state
        'half_open'
    """

    def __init__(
        self,
        name: str,
        failure_threshold: int = 5,
        recovery_time: float = 30.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ConfigError("failure_threshold must be >= 1")
        self.name = name
        """The breaker's name, e.g. ``tool:iot`` or ``model:openai``."""
        self.failure_threshold = failure_threshold
        """Consecutive failures that open the breaker."""
        self.recovery_time = recovery_time
        """Seconds an open breaker waits before letting a trial call through."""
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False
        self.opened_count = 0
        """How many times the breaker has opened."""

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (computed with the clock)."""
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.recovery_time:
            return "half_open"
        return "open"

    @property
    def failures(self) -> int:
        """Consecutive failures counted since the last success."""
        return self._failures

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial call through (0 if not open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self.recovery_time - self._clock())

    def before_call(self) -> None:
        """Ask to make a call.

        Raises:
            CircuitOpenError: the breaker is open, or half-open with its trial call
                already under way.
        """
        if self._opened_at is None:  # closed: the common case
            return
        state = self.state
        if state == "open":
            raise CircuitOpenError(self.name, self.retry_in())
        if state == "half_open":
            if self._trial_in_flight:
                raise CircuitOpenError(self.name, 0.0)
            self._trial_in_flight = True

    def record_success(self) -> None:
        """A call succeeded: close the breaker and reset the failure count."""
        self._failures = 0
        self._opened_at = None
        self._trial_in_flight = False

    def record_failure(self) -> None:
        """A call failed: count it, opening the breaker at the threshold.

        A failed half-open trial opens the breaker again for ``recovery_time``.
        """
        self._failures += 1
        was_trial = self._trial_in_flight
        self._trial_in_flight = False
        state = self.state
        if state == "open":
            return  # a call that started before the breaker opened; keep its timer
        if was_trial or state == "half_open" or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()
            self.opened_count += 1

    def release(self) -> None:
        """A call was abandoned (e.g. cancelled) without an outcome: free the trial."""
        self._trial_in_flight = False

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Make one call through the breaker (any exception counts as a failure)."""
        self.before_call()
        try:
            result = await fn()
        except asyncio.CancelledError:
            self.release()
            raise
        except Exception:
            self.record_failure()
            raise
        self.record_success()
        return result

    def snapshot(self) -> dict[str, Any]:
        """The breaker's state as JSON-ready data."""
        return {
            "name": self.name,
            "state": self.state,
            "failures": self._failures,
            "failure_threshold": self.failure_threshold,
            "recovery_time": self.recovery_time,
            "retry_in": round(self.retry_in(), 3),
            "opened_count": self.opened_count,
        }

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, state={self.state!r}, failures={self._failures})"


class BreakerRegistry:
    """One `CircuitBreaker` per name, created on first use with shared settings.

    Names used by planexec: ``model:<provider>``, ``tool:<server>`` for the tools of a
    server (MCP: one breaker per server), and ``tool:local:<name>`` for each tool that
    comes from no server (a flaky local tool does not block the others).
    """

    def __init__(
        self,
        failure_threshold: int = 5,
        recovery_time: float = 30.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = failure_threshold
        """Consecutive failures that open each breaker."""
        self.recovery_time = recovery_time
        """Seconds an open breaker waits before a trial call."""
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, name: str) -> CircuitBreaker:
        """The breaker called ``name`` (created closed if new)."""
        breaker = self._breakers.get(name)
        if breaker is None:
            breaker = CircuitBreaker(
                name, self.failure_threshold, self.recovery_time, clock=self._clock
            )
            self._breakers[name] = breaker
        return breaker

    def tool(self, server: str | None, name: str | None = None) -> CircuitBreaker:
        """The breaker of a tool: its server's, or its own for a local tool.

        Args:
            server: The tool's server (None for a local tool).
            name: The tool's name: a local tool gets ``tool:local:<name>``
                (``tool:local`` when no name is given).
        """
        return self.get(self.tool_breaker_name(server, name))

    @staticmethod
    def tool_breaker_name(server: str | None, name: str | None = None) -> str:
        """The name of a tool's breaker (see `tool`), without creating the breaker."""
        if server:
            return f"tool:{server}"
        return f"tool:local:{name}" if name else "tool:local"

    def is_open(self, name: str) -> bool:
        """Whether the breaker called ``name`` exists and is open (half-open is not)."""
        breaker = self._breakers.get(name)
        return breaker is not None and breaker.state == "open"

    def model(self, provider: str) -> CircuitBreaker:
        """The breaker of a model provider."""
        return self.get(f"model:{provider}")

    def states(self) -> dict[str, BreakerState]:
        """Every breaker's state, by name."""
        return {name: b.state for name, b in sorted(self._breakers.items())}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every breaker's snapshot, by name."""
        return {name: b.snapshot() for name, b in sorted(self._breakers.items())}

    def __contains__(self, name: object) -> bool:
        return name in self._breakers

    def __len__(self) -> int:
        return len(self._breakers)


RetryOn: TypeAlias = (
    type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
)
"""Which failures of a tool another attempt may fix: exception classes, or a predicate
(as LangGraph's ``RetryPolicy.retry_on``). Set per tool in
``tool.metadata["planexec"]["retry_on"]`` (`planexec.testing.fake_tool` takes it)."""

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504, 529})
"""HTTP statuses a retry may fix: timeouts, too early, rate limits, server errors."""

_NEVER_RETRIED: tuple[type[BaseException], ...] = (
    ToolArgumentsError,  # the tool or its server refused the arguments (-32602)
    ValidationError,  # pydantic: the arguments do not fit the schema
    LookupError,  # KeyError, IndexError: the same lookup fails again
    TypeError,
    ValueError,
    AttributeError,
    NameError,
    ArithmeticError,
    ImportError,
    NotImplementedError,
    AssertionError,
    SyntaxError,
    RecursionError,
)
"""Validation and programming errors: another attempt with the same arguments fails
the same way, whatever caused them."""


def _status(exc: BaseException) -> int | None:
    """An HTTP status carried by an exception (``status_code``, or its response's)."""
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _transient_class(exc: BaseException) -> bool:
    if isinstance(exc, RetryableToolError | TimeoutError | ConnectionError):
        return True
    httpx = sys.modules.get("httpx")  # an httpx error exists only if httpx is loaded
    if httpx is not None and isinstance(exc, httpx.TransportError):
        return True  # connect, read, write, pool and protocol errors, timeouts
    status = _status(exc)
    return status is not None and (status in _RETRY_STATUS or 500 <= status < 600)


def default_tool_retry_on(exc: BaseException) -> bool:
    """Whether another attempt may fix a tool's failure (the default ``retry_on``).

    Retried: `RetryableToolError` (a tool's own transient error), `TimeoutError`,
    `ConnectionError`, httpx transport errors, and errors carrying an HTTP status of a
    timeout, rate limit or server error (408, 425, 429, 5xx). Never retried: argument
    refusals (`ToolArgumentsError`, an MCP server's ``-32602``), validation errors and
    programming errors (``LookupError``, ``TypeError``, ``ValueError``, ...), whatever
    their cause. Anything else (a plain `RuntimeError`, a tool's `ToolException`) is
    retried only when its explicit cause (``raise ... from``) is transient: planexec's
    MCP client chains the transport's error that way.

    LangGraph's ``default_retry_on`` is the reference point: it too never retries
    ``ValueError``, ``TypeError``, ``LookupError``, ``ArithmeticError``, ... and retries
    ``ConnectionError`` and 5xx; but it retries every exception it does not list,
    where this default retries only what it knows a retry can fix.
    """
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 8:
        if isinstance(cause, _NEVER_RETRIED):
            return False
        if _transient_class(cause):
            return True
        cause = cause.__cause__
        seen += 1
    return False


def tool_retry_on(tool: BaseTool | None) -> RetryOn:
    """A tool's ``retry_on`` (``tool.metadata["planexec"]["retry_on"]``), or the default.

    Raises:
        ConfigError: the tool's ``retry_on`` is neither exception classes nor callable.
    """
    meta = (tool.metadata or {}).get("planexec") if tool is not None else None
    found = meta.get("retry_on") if isinstance(meta, Mapping) else None
    if found is None:
        return default_tool_retry_on
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    if isinstance(found, tuple) and all(
        isinstance(t, type) and issubclass(t, BaseException) for t in found
    ):
        return found
    if callable(found):
        return found  # type: ignore[no-any-return]
    raise ConfigError(
        f"tool {tool.name if tool is not None else '?'!r}: metadata['planexec']['retry_on'] "
        f"must be exception classes or a predicate, got {found!r}"
    )


@dataclass(frozen=True)
class ToolFailure:
    """What a tool's failure means for the step (see `classify_tool_failure`)."""

    kind: ErrorKind
    """``ARGS_INVALID``, ``TOOL_TIMEOUT`` or ``TOOL_ERROR``."""
    retry: bool
    """Whether another attempt may succeed (the tool must also be safe to repeat)."""


def classify_tool_failure(exc: BaseException, tool: BaseTool | None = None) -> ToolFailure:
    """Classify an exception a tool call raised, by its class and the tool's ``retry_on``.

    `ToolArgumentsError` (and a pydantic ``ValidationError``) is ``ARGS_INVALID``,
    never retried, whatever ``retry_on`` says: the same arguments are refused again. A
    `TimeoutError` is ``TOOL_TIMEOUT``; anything else is ``TOOL_ERROR``. ``retry`` is the
    tool's ``retry_on`` applied to the exception (`tool_retry_on`; by default
    `default_tool_retry_on`).

    Raises:
        ConfigError: the tool's ``retry_on`` is not usable.
    """
    if isinstance(exc, ToolArgumentsError | ValidationError):
        return ToolFailure(ErrorKind.ARGS_INVALID, False)
    kind = ErrorKind.TOOL_TIMEOUT if isinstance(exc, TimeoutError) else ErrorKind.TOOL_ERROR
    retry_on = tool_retry_on(tool)
    if isinstance(retry_on, type | tuple):
        retry = isinstance(exc, retry_on)
    else:
        retry = bool(retry_on(exc))
    return ToolFailure(kind, retry)
