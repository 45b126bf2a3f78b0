from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk

from planexec.errors import CircuitOpenError, ConfigError, ModelError, ModelTimeoutError
from planexec.events import Event, EventBus, FallbackUsed
from planexec.resilience import (
    BreakerRegistry,
    CircuitBreaker,
    ResilientModelClient,
    RetryPolicy,
    is_transient_model_error,
    model_provider,
    retry_async,
    with_timeout,
)
from planexec.results import Usage
from planexec.testing import ScriptedChatModel

FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0, jitter=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Flaky:
    def __init__(self, failures: int, exc: type[Exception] = RuntimeError) -> None:
        self.failures = failures
        self.calls = 0
        self.exc = exc

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"failure {self.calls}")
        return "ok"


# -- RetryPolicy / retry_async -------------------------------------------------------


def test_a_policy_with_no_attempt_is_rejected() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(attempts=0)


async def test_retry_async_retries_until_the_call_succeeds_and_reports_each_retry() -> None:
    fn = Flaky(2)
    seen: list[tuple[int, str]] = []

    def on_retry(n: int, exc: BaseException, delay: float) -> None:
        seen.append((n, str(exc)))

    assert await retry_async(fn, FAST, on_retry=on_retry) == "ok"
    assert fn.calls == 3
    assert seen == [(1, "failure 1"), (2, "failure 2")]


async def test_retry_async_reraises_the_last_error_when_attempts_run_out() -> None:
    fn = Flaky(5)
    with pytest.raises(RuntimeError, match="failure 3"):
        await retry_async(fn, FAST)
    assert fn.calls == 3


async def test_retry_async_does_not_retry_errors_the_predicate_rejects() -> None:
    fn = Flaky(5, ValueError)
    with pytest.raises(ValueError):
        await retry_async(fn, FAST, lambda exc: not isinstance(exc, ValueError))
    assert fn.calls == 1


async def test_retry_async_never_retries_a_cancellation() -> None:
    calls = 0

    async def cancelled() -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await retry_async(cancelled, FAST, lambda exc: True)
    assert calls == 1


async def test_backoff_grows_exponentially_with_bounded_jitter_and_a_cap() -> None:
    delays: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)

    policy = RetryPolicy(attempts=6, base_delay=1.0, max_delay=5.0, jitter=0.5)
    with pytest.raises(RuntimeError):
        await retry_async(Flaky(10), policy, sleep=fake_sleep)
    assert len(delays) == 5
    for n, delay in enumerate(delays):
        low = min(1.0 * 2**n, 5.0)
        assert low <= delay <= min(low + 0.5, 5.0)
    assert delays[-1] == 5.0


async def test_with_timeout_cancels_slow_work_and_lets_fast_work_through() -> None:
    with pytest.raises(TimeoutError):
        await with_timeout(asyncio.sleep(5), 0.05)
    assert await with_timeout(asyncio.sleep(0, "done"), 1) == "done"
    assert await with_timeout(asyncio.sleep(0, "done"), None) == "done"


# -- CircuitBreaker ------------------------------------------------------------------


def test_a_breaker_opens_after_consecutive_failures_only() -> None:
    b = CircuitBreaker("tool:iot", failure_threshold=3, recovery_time=10, clock=Clock())
    b.record_failure()
    b.record_failure()
    b.record_success()  # resets the count
    b.record_failure()
    b.record_failure()
    assert b.state == "closed"
    b.record_failure()
    assert b.state == "open"
    assert b.opened_count == 1


def test_an_open_breaker_fails_fast_naming_itself_and_the_wait() -> None:
    clock = Clock()
    b = CircuitBreaker("tool:iot", failure_threshold=1, recovery_time=10, clock=clock)
    b.record_failure()
    clock.now += 4
    with pytest.raises(CircuitOpenError, match="tool:iot") as info:
        b.before_call()
    assert info.value.retry_in == pytest.approx(6.0)


def test_a_half_open_breaker_lets_one_trial_through_and_closes_on_success() -> None:
    clock = Clock()
    b = CircuitBreaker("m", failure_threshold=1, recovery_time=10, clock=clock)
    b.record_failure()
    clock.now += 10
    assert b.state == "half_open"
    b.before_call()  # the trial
    with pytest.raises(CircuitOpenError):
        b.before_call()  # a second caller while the trial runs
    b.record_success()
    assert b.state == "closed"
    b.before_call()


def test_a_failed_trial_opens_the_breaker_for_another_recovery_time() -> None:
    clock = Clock()
    b = CircuitBreaker("m", failure_threshold=2, recovery_time=10, clock=clock)
    b.record_failure()
    b.record_failure()
    clock.now += 11
    b.before_call()
    b.record_failure()
    assert b.state == "open"
    assert b.retry_in() == pytest.approx(10.0)
    assert b.opened_count == 2
    snap = b.snapshot()
    assert snap["state"] == "open" and snap["name"] == "m" and snap["failures"] == 3


async def test_breaker_call_counts_exceptions_as_failures() -> None:
    b = CircuitBreaker("x", failure_threshold=2, recovery_time=10, clock=Clock())
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await b.call(Flaky(1))
    with pytest.raises(CircuitOpenError):
        await b.call(Flaky(0))


def test_each_local_tool_has_its_own_breaker_and_a_server_shares_one() -> None:
    reg = BreakerRegistry(failure_threshold=1, recovery_time=5, clock=Clock())
    assert reg.tool(None, "flaky") is reg.get("tool:local:flaky")
    assert reg.tool("iot", "sites") is reg.tool("iot", "assets") is reg.get("tool:iot")
    reg.tool(None, "flaky").record_failure()
    assert reg.is_open("tool:local:flaky") and not reg.is_open("tool:local:good")
    assert reg.tool(None, "good").state == "closed"
    assert BreakerRegistry.tool_breaker_name(None, "x") == "tool:local:x"


def test_the_registry_keeps_one_breaker_per_name_and_reports_states() -> None:
    reg = BreakerRegistry(failure_threshold=1, recovery_time=5, clock=Clock())
    assert reg.tool(None) is reg.get("tool:local")
    reg.tool("iot").record_failure()
    reg.model("openai")
    assert reg.states() == {"model:openai": "closed", "tool:iot": "open", "tool:local": "closed"}
    assert reg.snapshot()["tool:iot"]["state"] == "open"
    assert "tool:iot" in reg and len(reg) == 3


# -- ResilientModelClient ------------------------------------------------------------


class StatusError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def test_transient_model_errors_are_told_apart_from_permanent_ones() -> None:
    def wrapped(cause: BaseException) -> ModelError:
        err = ModelError("failed")
        err.__cause__ = cause
        return err

    assert is_transient_model_error(ModelTimeoutError("slow"))
    assert is_transient_model_error(wrapped(ConnectionError("reset")))
    assert is_transient_model_error(wrapped(StatusError(429)))
    assert is_transient_model_error(wrapped(StatusError(503)))
    assert not is_transient_model_error(wrapped(StatusError(401)))
    assert not is_transient_model_error(wrapped(ValueError("bad request")))
    assert not is_transient_model_error(CircuitOpenError("m", 1.0))


MSGS: list[BaseMessage] = [HumanMessage("hi")]


async def test_the_resilient_client_retries_a_transient_error_and_counts_each_attempt() -> None:
    model = ScriptedChatModel(replies=[ConnectionError("reset"), "answer"])
    events: list[Event] = []
    bus = EventBus([events.append])
    usage = Usage()
    client = ResilientModelClient(model, retry=FAST, usage=usage, bus=bus, run_id="r1")
    assert await client.complete(MSGS, purpose="resolve", step_id=2) == "answer"
    assert model.calls == 2
    assert usage.llm_calls == {"resolve": 2}
    retries = [e for e in events if isinstance(e, FallbackUsed)]
    assert len(retries) == 1 and retries[0].code == "MODEL_RETRY" and retries[0].step_id == 2
    assert client.breaker.state == "closed"


async def test_the_resilient_client_does_not_retry_a_permanent_error() -> None:
    model = ScriptedChatModel(replies=[ValueError("bad request"), "never"])
    client = ResilientModelClient(model, retry=FAST)
    with pytest.raises(ModelError, match="bad request"):
        await client.complete(MSGS, purpose="plan")
    assert model.calls == 1


async def test_an_open_model_breaker_fails_fast_without_calling_the_model() -> None:
    reg = BreakerRegistry(failure_threshold=2, recovery_time=60, clock=Clock())
    model = ScriptedChatModel(replies=[ConnectionError("down")], repeat_last=True)
    client = ResilientModelClient(model, retry=FAST, breakers=reg)
    with pytest.raises(CircuitOpenError):
        # attempt 1 and 2 fail and open the breaker; attempt 3 fails fast
        await client.complete(MSGS, purpose="plan")
    assert model.calls == 2
    assert reg.states() == {f"model:{model_provider(model)}": "open"}
    with pytest.raises(CircuitOpenError):
        await client.complete(MSGS, purpose="plan")
    assert model.calls == 2


async def test_the_timeout_is_enforced_per_attempt_and_then_raised() -> None:
    model = ScriptedChatModel(replies=["late"], repeat_last=True, delay=5)
    usage = Usage()
    client = ResilientModelClient(model, retry=RetryPolicy(2, 0, 0, 0), timeout=0.05, usage=usage)
    with pytest.raises(ModelTimeoutError):
        await client.complete(MSGS, purpose="answer")
    assert usage.llm_calls == {"answer": 2}


class SlowStreamModel(ScriptedChatModel):
    chunk_delay: float = 0.0
    chunks: list[str] = []

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        self._requests.append(list(messages))
        for text in self.chunks:
            await asyncio.sleep(self.chunk_delay)
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))


async def test_a_streamed_reply_is_merged_from_its_chunks() -> None:
    model = SlowStreamModel(chunks=["an", "sw", "er"])
    client = ResilientModelClient(model, stream=True, retry=FAST)
    assert await client.complete(MSGS, purpose="answer") == "answer"


async def test_the_timeout_bounds_the_whole_stream_not_each_chunk() -> None:
    # each chunk arrives well within the timeout; the whole stream does not
    model = SlowStreamModel(chunks=["a"] * 50, chunk_delay=0.01)
    client = ResilientModelClient(model, stream=True, retry=RetryPolicy.none(), timeout=0.05)
    with pytest.raises(ModelTimeoutError):
        await client.complete(MSGS, purpose="answer")


async def test_a_bound_resilient_client_keeps_its_breaker_and_policy() -> None:
    model = ScriptedChatModel(replies=["x"])
    client = ResilientModelClient(model, retry=FAST)
    usage = Usage()
    bound = client.bind(usage=usage, bus=None, run_id="r")
    assert isinstance(bound, ResilientModelClient)
    assert bound.breaker is client.breaker and bound.retry is FAST
    assert await bound.complete(MSGS, purpose="reason") == "x"
    assert usage.llm_calls == {"reason": 1}
