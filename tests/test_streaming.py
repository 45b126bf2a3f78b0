"""Streamed plans: safe steps start while the plan is written; drafts never leak a call.

The model is `StreamingModel`, paced by a ``gate`` that waits for what the test needs
to have happened (a tool call finished) before the next chunk goes out: no sleeps, no
timing thresholds; every wait is bounded so a bug fails instead of hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec import AgentConfig, PlanExecuteAgent
from planexec.errors import ErrorKind
from planexec.events import Event, StepDiscarded, StepFinished
from planexec.executor import Executor
from planexec.plan import Plan, Ref, Step
from planexec.results import StepStatus
from planexec.stepfeed import FeedItem, PlanComplete, StepArrived
from planexec.streaming import model_streams
from planexec.testing import FakeClock, FunctionModel, ModelCall, StreamingModel, fake_tool
from planexec.tools import ToolCatalog

BOUND = 10.0  # seconds: only a bound on waits, never asserted on


def block(n: int, tool: str, args: str, dep: str = "None") -> str:
    return (
        f"#Task{n}: call {tool}\n#Tool{n}: {tool}\n#Args{n}: {args}\n"
        f"#Dependency{n}: {dep}\n#ExpectedOutput{n}: its output\n"
    )


DRAFT_1 = (
    block(1, "sites", "{}")
    + block(2, "assets", '{"site_name": "MAIN"}')
    + block(3, "delete_site", '{"site_name": "MAIN"}')
)
DRAFT_2 = "\nRevised plan:\n" + block(1, "sites", "{}") + block(
    2, "history", '{"site_name": "MAIN"}'
)


class Tools:
    """Fake tools whose calls set events the stream's gate can wait for."""

    def __init__(self) -> None:
        self.done: dict[str, asyncio.Event] = {}
        self.tools = [
            self.tool("sites", ["MAIN"], {"read_only": True}),
            self.tool("assets", ["CH-6"], {"read_only": True}, site_name=str),
            self.tool("history", [1, 2], {"idempotent": True}, site_name=str),
            self.tool("delete_site", "deleted", {"destructive": True}, site_name=str),
        ]

    def tool(self, name: str, output: Any, hints: dict[str, bool], **args: type) -> Any:
        event = self.done.setdefault(name, asyncio.Event())

        async def run(**kwargs: Any) -> Any:
            event.set()
            return output

        return fake_tool(name, function=run, args=dict(args) or None, hints=hints)

    def calls(self, name: str) -> int:
        tool = next(t for t in self.tools if t.name == name)
        return int(tool.metadata["calls"].count)

    async def wait(self, name: str) -> None:
        await asyncio.wait_for(self.done[name].wait(), BOUND)


def planner_model(reply: str, gate: Any = None) -> StreamingModel:
    def answer(call: ModelCall, messages: list[Any]) -> str:
        return reply if call.purpose == "plan" else "the answer"

    return StreamingModel(function=answer, chars_per_token=8, gate=gate)


def line_gate(after: str, then: Any) -> Any:
    """A gate that, once the text sent holds ``after``, awaits ``then()`` (once)."""
    state = {"waited": False}

    async def gate(index: int, sent: str) -> None:
        if not state["waited"] and after in sent:
            state["waited"] = True
            await then()

    return gate


class Finished:
    """Events set when a step (by tool) has finished: its result is recorded."""

    def __init__(self) -> None:
        self.events: dict[str, asyncio.Event] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, StepFinished) and event.result.tool is not None:
            self.events.setdefault(event.result.tool, asyncio.Event()).set()

    async def wait(self, tool: str) -> None:
        await asyncio.wait_for(self.events.setdefault(tool, asyncio.Event()).wait(), BOUND)


async def run_agent(
    model: Any, tools: Tools, *, finished: Finished | None = None, **config: Any
) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    cfg = AgentConfig.model_validate({"recovery": {"max_replans": 0}, **config})
    handlers = [events.append] + ([finished] if finished is not None else [])
    agent = PlanExecuteAgent(model, tools.tools, config=cfg, event_handlers=handlers)
    run = await asyncio.wait_for(agent.run("clean up MAIN"), BOUND)
    return run, events


def test_the_test_model_streams_and_function_model_does_not() -> None:
    assert model_streams(planner_model("x"))
    assert not model_streams(FunctionModel(function=lambda c, m: "x"))


async def test_a_safe_step_starts_before_the_reply_is_complete() -> None:
    tools = Tools()
    reply = block(1, "sites", "{}") + block(2, "history", '{"site_name": "MAIN"}')
    seen_before_end: list[int] = []

    async def sites_ran() -> None:
        await tools.wait("sites")
        seen_before_end.append(tools.calls("sites"))

    # the reply stops before its last line until `sites` (step 1) has run
    gate = line_gate("#Task2: call history\n", sites_ran)
    run, events = await run_agent(planner_model(reply, gate), tools)
    assert seen_before_end == [1]
    results = {r.step_id: r for r in run.attempts[0].results}
    assert results[1].streamed and results[1].ok
    assert results[2].ok
    assert tools.calls("sites") == 1


async def test_a_restarting_draft_never_runs_its_unsafe_step_and_discards_the_safe_one() -> None:
    tools = Tools()

    async def draft_1_ran() -> None:
        # draft 1 is complete (the next block started): its safe steps ran
        await tools.wait("assets")

    gate = line_gate("Revised plan:\n#Task1: call sites\n", draft_1_ran)
    run, events = await run_agent(planner_model(DRAFT_1 + DRAFT_2, gate), tools)

    assert tools.calls("delete_site") == 0  # unsafe: waited for the whole plan, then dropped
    assert tools.calls("assets") == 1  # safe: ran early ...
    discarded = [e for e in events if isinstance(e, StepDiscarded)]
    assert [(e.step_id, e.tool) for e in discarded] == [(2, "assets")]  # ... then discarded
    plan = run.attempts[0].plan
    assert plan is not None
    codes = [(d.code, d.step) for d in plan.diagnostics if d.code == "STREAM_STEP_DISCARDED"]
    assert codes == [("STREAM_STEP_DISCARDED", 2)]
    assert [s.tool for s in plan.steps] == ["sites", "history"]
    results = {r.step_id: r for r in run.attempts[0].results}
    assert results[2].tool == "history" and results[2].ok
    assert tools.calls("sites") == 1  # the same step in both drafts ran once


async def test_a_json_plan_only_the_catalog_reads_starts_its_safe_step_while_streamed() -> None:
    """A JSON plan naming its tools under a key of its own (``skill``) is read as tool
    steps only with the catalog (without: steps without a tool). The stream reads it with
    the run's tools, as the planner reads the whole reply, so step 1 runs before the reply
    is complete."""
    tools = Tools()
    reply = (
        '{"steps": [\n'
        ' {"id": 1, "skill": "sites"},\n'
        ' {"id": 2, "skill": "history", "args": {"site_name": "MAIN"}, "depends_on": [1]}\n'
        "]}\n"
    )
    seen_before_end: list[int] = []

    async def sites_ran() -> None:
        await tools.wait("sites")
        seen_before_end.append(tools.calls("sites"))

    gate = line_gate('"skill": "history"', sites_ran)
    run, _ = await run_agent(planner_model(reply, gate), tools)
    assert seen_before_end == [1]
    results = {r.step_id: r for r in run.attempts[0].results}
    assert results[1].tool == "sites" and results[1].streamed and results[1].ok
    assert results[2].tool == "history" and results[2].ok
    assert tools.calls("sites") == 1


async def test_streaming_off_waits_for_the_whole_reply() -> None:
    tools = Tools()
    run, events = await run_agent(
        planner_model(DRAFT_1 + DRAFT_2), tools, planner={"stream": False}
    )
    assert tools.calls("assets") == 0 and tools.calls("delete_site") == 0
    assert not any(isinstance(e, StepDiscarded) for e in events)
    assert not any(r.streamed for r in run.attempts[0].results)


# -- the executor's side: a feed of steps ----------------------------------------------


class Feed:
    """A feed the test hands items to, one at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[FeedItem] = asyncio.Queue()

    async def items(self) -> AsyncIterator[FeedItem]:
        while True:
            item = await self.queue.get()
            yield item
            if isinstance(item, PlanComplete):
                return


async def test_a_forward_reference_waits_for_its_step_and_then_runs() -> None:
    tools = Tools()
    executor = Executor(ToolCatalog(tools.tools))
    feed = Feed()
    run = asyncio.create_task(executor.run_feed(feed.items()))
    first = Step(id=1, tool="assets", args={"site_name": Ref(2, (0,))}, depends_on=(2,))
    second = Step(id=2, tool="sites")
    feed.queue.put_nowait(StepArrived(first))
    feed.queue.put_nowait(StepArrived(second))
    await tools.wait("assets")  # both ran before the plan is complete
    feed.queue.put_nowait(PlanComplete(Plan(steps=(first, second))))
    results = {r.step_id: r for r in await asyncio.wait_for(run, BOUND)}
    assert results[1].ok and results[1].args == {"site_name": "MAIN"}
    assert results[1].streamed and results[2].streamed


async def test_a_forward_reference_that_never_arrives_fails_as_missing_reference() -> None:
    tools = Tools()
    executor = Executor(ToolCatalog(tools.tools))
    feed = Feed()
    run = asyncio.create_task(executor.run_feed(feed.items()))
    first = Step(id=1, tool="assets", args={"site_name": Ref(2)}, depends_on=(2,))
    feed.queue.put_nowait(StepArrived(first))
    feed.queue.put_nowait(PlanComplete(Plan(steps=(first,))))
    (result,) = await asyncio.wait_for(run, BOUND)
    assert result.status is StepStatus.FAILED
    assert result.error_kind is ErrorKind.MISSING_REFERENCE
    assert "step 2" in (result.error or "")
    assert tools.calls("assets") == 0
    assert not result.streamed  # it never started before the plan was complete


async def test_an_unsafe_step_waits_for_the_whole_plan() -> None:
    tools = Tools()
    executor = Executor(ToolCatalog(tools.tools))
    feed = Feed()
    run = asyncio.create_task(executor.run_feed(feed.items()))
    unsafe = Step(id=1, tool="delete_site", args={"site_name": "MAIN"})
    safe = Step(id=2, tool="sites")
    feed.queue.put_nowait(StepArrived(unsafe))
    feed.queue.put_nowait(StepArrived(safe))
    await tools.wait("sites")
    assert tools.calls("delete_site") == 0
    feed.queue.put_nowait(PlanComplete(Plan(steps=(unsafe, safe))))
    results = {r.step_id: r for r in await asyncio.wait_for(run, BOUND)}
    assert results[1].ok and not results[1].streamed
    assert results[2].streamed
    assert tools.calls("delete_site") == 1


async def test_a_feed_that_ends_without_a_plan_discards_what_it_started() -> None:
    tools = Tools()
    events: list[Event] = []
    executor = Executor(ToolCatalog(tools.tools))
    executor.bus.subscribe(events.append)
    feed = Feed()
    run = asyncio.create_task(executor.run_feed(feed.items()))
    feed.queue.put_nowait(StepArrived(Step(id=1, tool="sites")))
    await tools.wait("sites")
    feed.queue.put_nowait(PlanComplete(Plan(steps=())))
    assert await asyncio.wait_for(run, BOUND) == []
    assert [r.step_id for r in executor.discarded] == [1]
    assert [e.step_id for e in events if isinstance(e, StepDiscarded)] == [1]


@pytest.mark.parametrize("stream", [True, False])
async def test_streamed_and_whole_runs_give_the_same_results(stream: bool) -> None:
    tools = Tools()
    reply = block(1, "sites", "{}") + block(2, "assets", '{"site_name": "<step_1[0]>"}', "#S1")
    run, _ = await run_agent(planner_model(reply), tools, planner={"stream": stream})
    got = {r.step_id: (r.status, r.output) for r in run.attempts[0].results}
    assert got == {1: (StepStatus.SUCCEEDED, ["MAIN"]), 2: (StepStatus.SUCCEEDED, ["CH-6"])}


async def test_the_timeline_shows_the_planner_stream_with_steps_started_under_it(
    tmp_path: Any,
) -> None:
    from planexec.commands.runs import timeline_bars
    from planexec.store.sqlite import SQLiteRunStore

    tools = Tools()
    reply = block(1, "sites", "{}") + block(2, "history", '{"site_name": "MAIN"}')
    step1_done = asyncio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, StepFinished) and event.result.step_id == 1:
            step1_done.set()

    async def step1_finished() -> None:
        await asyncio.wait_for(step1_done.wait(), BOUND)

    gate = line_gate("#Task2: call history\n", step1_finished)
    with SQLiteRunStore(tmp_path / "runs.sqlite3") as store:
        cfg = AgentConfig.model_validate({"recovery": {"max_replans": 0}})
        agent = PlanExecuteAgent(planner_model(reply, gate), tools.tools, config=cfg,
                                 store=store, event_handlers=[on_event])
        run = await asyncio.wait_for(agent.run("sites?"), BOUND)
        _, bars = timeline_bars(store, run.run_id)
    planner = [b for b in bars if b.status == "PLANNER"]
    assert [b.label for b in planner] == ["planner stream 1"]
    step1 = next(b for b in bars if "#1 sites" in b.label)
    assert "(streamed)" in step1.label
    # step 1 started and ended under the planner's bar (the gate held the reply open)
    assert planner[0].start <= step1.start
    assert step1.start + step1.duration <= planner[0].start + planner[0].duration


async def test_a_replan_streams_too_and_reuses_the_kept_step() -> None:
    tools = Tools()
    broken = fake_tool("broken", error="boom", hints={"read_only": True})
    tools.tools.append(broken)
    replies = [
        block(1, "sites", "{}") + block(2, "broken", "{}"),
        block(1, "sites", "{}") + block(3, "history", '{"site_name": "MAIN"}'),
    ]

    def answer(call: ModelCall, messages: list[Any]) -> str:
        if call.purpose == "plan":
            return replies.pop(0)
        return "the answer"

    model = StreamingModel(function=answer, chars_per_token=8)
    run, events = await run_agent(model, tools, recovery={"max_replans": 1})
    assert len(run.attempts) == 2
    second = {r.step_id: r for r in run.attempts[1].results}
    assert second[3].ok and second[3].streamed  # the re-plan's new step streamed
    assert tools.calls("sites") == 1  # the kept step was reused, not run again
    assert tools.calls("history") == 1


async def test_cancelling_the_run_while_the_plan_streams_stops_what_it_started() -> None:
    tools = Tools()
    hang = asyncio.Event()

    async def hold(index: int, sent: str) -> None:
        if "#Task2: call history\n" in sent:
            await tools.wait("sites")
            hang.set()
            await asyncio.Event().wait()  # the reply never ends

    reply = block(1, "sites", "{}") + block(2, "history", '{"site_name": "MAIN"}')
    agent = PlanExecuteAgent(planner_model(reply, hold), tools.tools)
    task = asyncio.create_task(agent.run("sites?"))
    await asyncio.wait_for(hang.wait(), BOUND)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, BOUND)
    left = [t for t in asyncio.all_tasks() if "run_feed" in repr(t.get_coro())]
    assert all(t.done() for t in left)  # the executor's run of the stream ended too


async def test_a_renumbering_draft_reuses_the_same_calls_instead_of_running_them_again() -> None:
    tools = Tools()
    first = block(1, "sites", "{}") + block(2, "assets", '{"site_name": "MAIN"}')
    revised = "\nRevised plan:\n" + (
        block(1, "history", '{"site_name": "MAIN"}')
        + block(2, "sites", "{}")
        + block(3, "assets", '{"site_name": "MAIN"}')
    )
    finished = Finished()
    gate = line_gate("Revised plan:\n#Task1: call history\n", lambda: finished.wait("assets"))
    run, events = await run_agent(planner_model(first + revised, gate), tools, finished=finished)
    results = {r.step_id: r for r in run.attempts[0].results}
    assert {sid: r.tool for sid, r in results.items()} == {1: "history", 2: "sites", 3: "assets"}
    assert all(r.ok for r in results.values())
    assert results[2].reused and results[3].reused  # the calls of draft 1, renumbered
    assert (tools.calls("sites"), tools.calls("assets"), tools.calls("history")) == (1, 1, 1)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_the_store_forgets_a_discarded_result(tmp_path: Any, kind: str) -> None:
    from planexec.store.memory import MemoryRunStore
    from planexec.store.sqlite import SQLiteRunStore

    tools = Tools()
    gate = line_gate("Revised plan:\n#Task1: call sites\n", lambda: tools.wait("assets"))
    store: Any = SQLiteRunStore(tmp_path / "runs.db") if kind == "sqlite" else MemoryRunStore()
    try:
        cfg = AgentConfig.model_validate({"recovery": {"max_replans": 0}})
        draft_1 = (  # its safe step 3 runs, then the revised plan has no step 3
            block(1, "sites", "{}")
            + block(2, "delete_site", '{"site_name": "MAIN"}')
            + block(3, "assets", '{"site_name": "MAIN"}')
        )
        agent = PlanExecuteAgent(planner_model(draft_1 + DRAFT_2, gate), tools.tools,
                                 config=cfg, store=store)
        run = await asyncio.wait_for(agent.run("clean up MAIN"), BOUND)
        recorded = {s.result.step_id: s.result.tool for s in store.step_results(run.run_id)}
    finally:
        if kind == "sqlite":
            store.close()
    assert tools.calls("assets") == 1
    assert recorded == {1: "sites", 2: "history"}  # not draft 1's assets (discarded)


@settings(max_examples=25, deadline=None)
@given(chars=st.integers(1, 60), order=st.permutations([0, 1, 2]))
async def test_whatever_the_chunking_no_dropped_draft_calls_its_unsafe_step(
    chars: int, order: list[int]
) -> None:
    tools = Tools()
    firsts = [block(1, "sites", "{}"), block(2, "assets", '{"site_name": "MAIN"}'),
              block(3, "delete_site", '{"site_name": "MAIN"}')]
    draft_1 = "".join(firsts[i].replace(f"{i + 1}:", f"{n + 1}:") for n, i in enumerate(order))
    model = StreamingModel(function=lambda call, m: draft_1 + DRAFT_2 if call.purpose == "plan"
                           else "the answer", chars_per_token=chars)
    run, _ = await run_agent(model, tools)
    assert tools.calls("delete_site") == 0
    got = {r.step_id: (r.tool, r.status) for r in run.attempts[0].results}
    assert got == {1: ("sites", StepStatus.SUCCEEDED), 2: ("history", StepStatus.SUCCEEDED)}


async def test_the_streaming_model_keeps_its_token_rate_on_a_fake_clock() -> None:
    clock = FakeClock()
    model = StreamingModel(function=lambda call, m: "abcdefgh" * 3, tokens_per_second=4.0,
                           chars_per_token=2, clock=clock)  # 12 tokens: 3 s of fake time
    got: list[str] = []

    async def consume() -> None:
        async for chunk in model.astream("plan"):
            if chunk.content:
                got.append(str(chunk.content))

    async def settle() -> None:  # let the consumer run up to its next wait (no time passes)
        for _ in range(50):
            await asyncio.sleep(0)

    task = asyncio.create_task(consume())
    await settle()
    assert got == [] and clock.sleeping == 1
    await clock.advance(1.0)
    await settle()
    assert len(got) == 4  # one token each 0.25 s of fake time
    await clock.advance(2.0)
    await asyncio.wait_for(task, BOUND)
    assert "".join(got) == "abcdefgh" * 3
    assert model.chunk_times == [0.25 * (i + 1) for i in range(12)]
