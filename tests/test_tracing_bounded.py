"""Callback handlers cannot hold a run (issue 25, defect 11).

A tracing handler whose ``on_chain_end`` (or any event) never returns, ignoring
cancellation, used to hang ``agent.run`` forever, past ``run_timeout`` and through
``asyncio.wait_for``. Each run below is driven on a thread of its own and joined with a
bound, so the old behaviour fails these tests instead of hanging them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import BaseMessage
from loguru import logger

from planexec._models import ModelCall
from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.results import RunStatus
from planexec.testing import FunctionModel, fake_tool

PLAN = (
    "#Task1: sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
    '#Task2: assets\n#Tool2: assets\n#Args2: {"site_name": "{step_1.sites[0]}"}\n'
    "#Dependency2: #S1\n"
)
JOIN = 60.0
"""Seconds a run may take here before the test fails (the fixed code takes ~1 s)."""


def model() -> FunctionModel:
    def reply(call: ModelCall, messages: Sequence[BaseMessage]) -> str:
        return PLAN if call.purpose == "plan" else "ANSWER"

    return FunctionModel(function=reply)


def tools() -> list[Any]:
    return [
        fake_tool("sites", {"sites": ["MAIN"]}, hints={"read_only": True}),
        fake_tool("assets", ["CH-6"], args={"site_name": str}, hints={"read_only": True}),
    ]


class NeverEnds(AsyncCallbackHandler):
    """``on_chain_end`` never returns and swallows every cancellation."""

    def __init__(self, events: set[str]) -> None:
        self.events = events
        self.entered = 0
        self.release = threading.Event()
        """Set by the test once the run is over: then the handler ends."""

    async def _hang(self) -> None:
        self.entered += 1
        while not self.release.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue

    async def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        if "end" in self.events:
            await self._hang()

    async def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        if "start" in self.events:
            await self._hang()


class BlockingSync(BaseCallbackHandler):
    """A sync handler (run in langchain's thread pool) whose ``on_chain_end`` blocks."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self.release.wait()


def drive(make: Callable[[], Coroutine[Any, Any, Any]], release: threading.Event) -> Any:
    """Run a coroutine on a thread with its own loop; fail (not hang) past `JOIN`.

    ``release`` lets the hung handlers end once the run has returned (or failed to), so
    the loop's shutdown (which waits for every task) can finish.
    """
    box: dict[str, Any] = {}
    returned = threading.Event()

    async def main() -> None:
        try:
            box["value"] = await make()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        returned.set()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ended = returned.wait(JOIN)
    release.set()
    thread.join(JOIN)
    assert ended, "the run hung on a callback handler"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def warnings_seen() -> Any:
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    yield seen
    logger.remove(sink)


@pytest.mark.parametrize("events", [{"end"}, {"start"}, {"start", "end"}])
def test_a_handler_that_never_returns_is_abandoned_and_the_run_ends(
    events: set[str], warnings_seen: list[str]
) -> None:
    handler = NeverEnds(events)
    config = AgentConfig.model_validate({"executor": {"callback_timeout": 0.2}})
    agent = PlanExecuteAgent(model(), tools(), config=config, callbacks=[handler])
    run = drive(lambda: agent.run("which assets?"), handler.release)
    assert run.status is RunStatus.SUCCEEDED and run.answer == "ANSWER"
    assert handler.entered == 1  # abandoned once; the rest of the run untraced
    assert any("callback handler did not return" in w for w in warnings_seen)


def test_a_blocking_sync_handler_is_abandoned_too() -> None:
    handler = BlockingSync()
    config = AgentConfig.model_validate({"executor": {"callback_timeout": 0.2}})
    agent = PlanExecuteAgent(model(), tools(), config=config, callbacks=[handler])
    run = drive(lambda: agent.run("which assets?"), handler.release)
    assert run.status is RunStatus.SUCCEEDED


def test_the_run_timeout_and_the_callers_deadline_hold_whatever_a_handler_does() -> None:
    # the handler timeout is long; the run's own deadline (and the caller's wait_for)
    # must still end the run on time: a cancellation never waits for a handler
    handler = NeverEnds({"end"})
    config = AgentConfig.model_validate(
        {"executor": {"callback_timeout": 3600, "run_timeout": 0.5}}
    )
    agent = PlanExecuteAgent(model(), tools(), config=config, callbacks=[handler])

    async def bounded() -> Any:
        return await asyncio.wait_for(agent.run("which assets?"), 2.0)

    with pytest.raises(asyncio.TimeoutError):
        drive(bounded, handler.release)
