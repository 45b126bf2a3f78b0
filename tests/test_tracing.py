"""Tracing through langchain callbacks, OpenTelemetry spans (planexec.tracing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.results import RunStatus
from planexec.testing import FunctionModel, ModelCall, fake_tool
from planexec.tracing import CallbackRecorder, RunTrace, disable_otel, enable_otel, start_trace

ROOT = Path(__file__).resolve().parents[1]

PLAN = (
    "#Task1: list the sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
    "#Task2: the assets of the best site\n#Tool2: assets\n"
    '#Args2: {"site": "{step_1_best_site}"}\n#Dependency2: #S1'
)


def reply(call: ModelCall, messages: list[Any]) -> str:
    if call.purpose == "plan":
        return PLAN
    if call.purpose == "resolve":
        return json.dumps({key: "MAIN" for key in call.keys})
    return "CH-6 is at MAIN."


def make_agent(**kwargs: Any) -> tuple[PlanExecuteAgent, FunctionModel]:
    model = FunctionModel(function=reply)
    tools = [fake_tool("sites", ["MAIN"]), fake_tool("assets", ["CH-6"], args={"site": str})]
    return PlanExecuteAgent(model, tools, **kwargs), model


def tree(recorder: CallbackRecorder) -> list[tuple[int, str, str]]:
    """(depth, name, kind) of every run, depth first."""
    out: list[tuple[int, str, str]] = []

    def walk(rid: UUID, depth: int) -> None:
        run = recorder.runs[rid]
        out.append((depth, run["name"], run["kind"]))
        for child in recorder.children(rid):
            walk(child, depth + 1)

    for root in recorder.roots():
        walk(root, 0)
    return out


EXPECTED = [
    (0, "planexec", "chain"),
    (1, "planexec:plan", "chat_model"),
    (1, "planexec:plan attempt 1", "chain"),
    (2, "planexec:step 1", "chain"),
    (3, "step 1 sites", "tool"),
    (2, "planexec:step 2", "chain"),
    (3, "planexec:resolve step 2", "chat_model"),
    (3, "step 2 assets", "tool"),
    (1, "planexec:answer", "chat_model"),
]


async def test_a_callback_handler_given_to_the_agent_sees_one_tree() -> None:
    recorder = CallbackRecorder()
    agent, _ = make_agent(callbacks=[recorder])
    run = await agent.run("which assets?", run_id="r1")
    assert run.status is RunStatus.SUCCEEDED
    assert tree(recorder) == EXPECTED
    assert len(recorder.roots()) == 1
    # every call carries the run's metadata, the model calls planexec's ModelCall
    resolve = next(r for r in recorder.runs.values() if r["name"] == "planexec:resolve step 2")
    assert resolve["metadata"]["planexec_run_id"] == "r1"
    assert resolve["metadata"]["planexec_purpose"] == "resolve"
    assert resolve["metadata"]["planexec_step_id"] == 2
    tool_run = next(r for r in recorder.runs.values() if r["kind"] == "tool")
    assert tool_run["metadata"]["planexec_step_id"] == 1


async def test_a_runs_config_brings_callbacks_tags_metadata_and_a_name() -> None:
    recorder = CallbackRecorder()
    agent, _ = make_agent()
    config = RunnableConfig(
        callbacks=[recorder], tags=["nightly"], metadata={"user": "ana"}, run_name="assets bot"
    )
    await agent.run("which assets?", config=config)
    names = [name for _, name, _ in tree(recorder)]
    assert names[0] == "assets bot" and names[1:] == [n for _, n, _ in EXPECTED[1:]]
    for run in recorder.runs.values():
        assert "nightly" in run["tags"], run
        assert run["metadata"]["user"] == "ana", run


async def test_execute_plan_is_traced_too() -> None:
    recorder = CallbackRecorder()
    agent, _ = make_agent()
    run = await agent.execute_plan(PLAN, question="which assets?", config={"callbacks": [recorder]})
    assert run.status is RunStatus.SUCCEEDED
    assert [(d, n) for d, n, _ in tree(recorder)] == [
        (0, "planexec"),
        (1, "planexec:plan attempt 1"),
        (2, "planexec:step 1"),
        (3, "step 1 sites"),
        (2, "planexec:step 2"),
        (3, "planexec:resolve step 2"),
        (3, "step 2 assets"),
        (1, "planexec:answer"),
    ]


async def test_an_async_handler_sees_the_same_tree_and_a_failing_tool_as_an_error() -> None:
    seen: list[tuple[str, str, UUID | None]] = []
    errors: list[str] = []

    class Async(AsyncCallbackHandler):
        async def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
            seen.append(("chain", kw["name"], kw.get("parent_run_id")))

        async def on_tool_start(self, serialized: Any, input_str: str, **kw: Any) -> None:
            seen.append(("tool", kw["name"], kw.get("parent_run_id")))

        async def on_tool_error(self, error: BaseException, **kw: Any) -> None:
            errors.append(str(error))

    model = FunctionModel(function=reply)
    tools = [
        fake_tool("sites", error="sites are down"),
        fake_tool("assets", ["CH-6"], args={"site": str}),
    ]
    config = AgentConfig.model_validate({"recovery": {"max_replans": 0}})
    agent = PlanExecuteAgent(model, tools, config=config, callbacks=[Async()])
    run = await agent.run("which assets?")
    assert run.status is RunStatus.FAILED
    names = [name for _, name, _ in seen]
    assert names[:3] == ["planexec", "planexec:plan attempt 1", "planexec:step 1"]
    assert "step 1 sites" in names
    assert errors and "sites are down" in errors[0]


async def test_a_sync_tool_in_its_thread_is_traced_under_its_step() -> None:
    @tool
    def sites() -> list[str]:
        """List the sites."""
        return ["MAIN"]

    recorder = CallbackRecorder()
    model = FunctionModel(function=reply)
    agent = PlanExecuteAgent(
        model, [sites, fake_tool("assets", ["CH-6"], args={"site": str})], callbacks=[recorder]
    )
    await agent.run("which assets?")
    assert tree(recorder) == EXPECTED


async def test_an_agent_run_inside_a_runnable_is_parented_under_it() -> None:
    recorder = CallbackRecorder()
    agent, _ = make_agent()

    async def ask(question: str) -> str:
        run = await agent.run(question)  # picks the parent's config up from the context
        return run.answer or ""

    chain = RunnableLambda(ask).with_config(run_name="outer")
    assert await chain.ainvoke("which assets?", config={"callbacks": [recorder]}) == (
        "CH-6 is at MAIN."
    )
    flat = tree(recorder)
    assert flat[0] == (0, "outer", "chain")
    assert flat[1] == (1, "planexec", "chain")
    assert [(d - 1, n, k) for d, n, k in flat[1:]] == EXPECTED


async def test_a_run_that_raises_closes_its_trace_with_the_error() -> None:
    from planexec.events import Event, StepFinished

    def failing_store(event: Event) -> None:
        if isinstance(event, StepFinished):
            raise RuntimeError("the store is down")

    recorder = CallbackRecorder()
    agent, _ = make_agent(callbacks=[recorder], event_handlers=[failing_store])
    with pytest.raises(RuntimeError, match="the store is down"):
        await agent.run("which assets?")
    (root,) = recorder.roots()
    assert "the store is down" in recorder.runs[root]["error"]


async def test_untraced_runs_build_no_trace_and_no_per_call_config() -> None:
    assert await start_trace(None, None, run_id="r", inputs={}) is None
    agent, model = make_agent()
    seen: list[Any] = []
    original = agent.runtime.open_run

    def spy(**kwargs: Any) -> Any:
        seen.append(kwargs.get("trace"))
        return original(**kwargs)

    agent.runtime.open_run = spy  # type: ignore[method-assign]
    run = await agent.run("which assets?")
    assert run.status is RunStatus.SUCCEEDED and seen == [None]
    assert model.purposes() == ["plan", "resolve", "answer"]  # the metadata still travels


async def test_a_trace_parents_calls_of_unknown_steps_under_the_run() -> None:
    recorder = CallbackRecorder()
    trace = await start_trace({"callbacks": [recorder]}, None, run_id="r", inputs={"q": 1})
    assert isinstance(trace, RunTrace)
    config = trace.model_config(ModelCall("resolve", 9, ("x",), "r"))
    assert config["run_name"] == "planexec:resolve step 9"
    assert config["callbacks"].parent_run_id == trace.root.run_id  # type: ignore[union-attr]
    await trace.end({"status": "SUCCEEDED"})
    assert tree(recorder) == [(0, "planexec", "chain")]


# ---------------------------------------------------------------------- OpenTelemetry


@pytest.fixture
def spans() -> Iterator[Any]:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    enable_otel(provider)
    try:
        yield exporter
    finally:
        disable_otel()


def span_walk(finished: Any) -> list[tuple[int, Any]]:
    """(depth, span) of every span, depth first, children in start order."""
    by_id = {s.context.span_id: s for s in finished}
    out: list[tuple[int, Any]] = []

    def walk(span: Any, depth: int) -> None:
        out.append((depth, span))
        kids = [
            s for s in finished if s.parent is not None and s.parent.span_id == span.context.span_id
        ]
        for kid in sorted(kids, key=lambda s: s.start_time):
            walk(kid, depth + 1)

    roots = [s for s in finished if s.parent is None or s.parent.span_id not in by_id]
    for root in sorted(roots, key=lambda s: s.start_time):
        walk(root, 0)
    return out


def span_tree(finished: Any) -> list[tuple[int, str]]:
    return [(depth, span.name) for depth, span in span_walk(finished)]


async def test_opentelemetry_spans_nest_run_attempt_step_and_calls(spans: Any) -> None:
    agent, _ = make_agent()
    model = agent.model
    assert model is not None
    model.usage = {"input_tokens": 12, "output_tokens": 3}  # type: ignore[attr-defined]
    await agent.run("which assets?", run_id="r-otel")
    finished = spans.get_finished_spans()
    assert span_tree(finished) == [
        (0, "invoke_agent planexec"),
        (1, "chat scripted"),
        (1, "planexec:plan attempt 1"),
        (2, "planexec:step 1"),
        (3, "execute_tool sites"),
        (2, "planexec:step 2"),
        (3, "chat scripted"),
        (3, "execute_tool assets"),
        (1, "chat scripted"),
    ]
    trace_ids = {s.context.trace_id for s in finished}
    assert len(trace_ids) == 1
    run = next(s for s in finished if s.name == "invoke_agent planexec")
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["planexec.run_id"] == "r-otel"
    chat = next(s for s in finished if s.attributes.get("planexec.purpose") == "resolve")
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 12
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3
    assert chat.attributes["planexec.step_id"] == 2
    tool_span = next(s for s in finished if s.name == "execute_tool assets")
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_span.attributes["gen_ai.tool.name"] == "assets"


async def test_a_failed_step_is_an_error_span(spans: Any) -> None:
    from opentelemetry.trace import StatusCode

    model = FunctionModel(function=reply)
    tools = [fake_tool("sites", error="sites are down"), fake_tool("assets", ["CH-6"])]
    config = AgentConfig.model_validate({"recovery": {"max_replans": 0}})
    await PlanExecuteAgent(model, tools, config=config).run("which assets?")
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert finished["execute_tool sites"].status.status_code is StatusCode.ERROR
    step = finished["planexec:step 1"]
    assert step.status.status_code is StatusCode.ERROR
    assert step.attributes["planexec.status"] == "FAILED"


def test_planexec_needs_no_opentelemetry() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # not installed\n"
        "import asyncio, planexec, planexec.tracing\n"
        "from planexec.errors import MissingExtraError\n"
        "from planexec.tracing import CallbackRecorder, enable_otel\n"
        "from planexec.testing import fake_tool, ScriptedChatModel\n"
        "rec = CallbackRecorder()\n"
        "agent = planexec.PlanExecuteAgent(None, [fake_tool('sites', ['MAIN'])], callbacks=[rec])\n"
        "run = asyncio.run(agent.execute_plan('#Task1: x\\n#Tool1: sites\\n#Args1: {}'))\n"
        "assert str(run.status) == 'SUCCEEDED', run.status\n"
        "assert len(rec.runs) == 4, rec.tree()\n"
        "try:\n"
        "    enable_otel()\n"
        "except MissingExtraError as exc:\n"
        "    print('missing:', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "missing: OpenTelemetry spans need the otel extra" in out.stdout


def test_importing_planexec_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, planexec, planexec.tracing\n"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------- docs/observability.md

DOC = ROOT / "docs" / "observability.md"
TREE_MARK = "<!-- generated by tests/test_tracing.py: callback tree -->"
SPANS_MARK = "<!-- generated by tests/test_tracing.py: spans -->"
SHOWN = (
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.tool.name",
    "planexec.purpose",
    "planexec.status",
)


async def demo_trace() -> tuple[str, str]:
    """The callback tree and the OpenTelemetry spans of demo question 1 (recorded replies)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from planexec.examples import example_path
    from planexec.examples.questions import DEMO_QUESTIONS
    from planexec.examples.tools import demo_tools
    from planexec.models import load_replies
    from planexec.testing import ScriptedChatModel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    question = DEMO_QUESTIONS[0]
    model = ScriptedChatModel(
        replies=load_replies(example_path(question["replies"])),
        usage={"input_tokens": 812, "output_tokens": 64},
    )
    recorder = CallbackRecorder()
    enable_otel(provider)
    try:
        agent = PlanExecuteAgent(model, demo_tools(), callbacks=[recorder])
        run = await agent.run(question["question"], run_id="demo")
    finally:
        disable_otel()
    assert run.status is RunStatus.SUCCEEDED
    lines = []
    for depth, span in span_walk(exporter.get_finished_spans()):
        attrs = " ".join(f"{k}={span.attributes[k]}" for k in SHOWN if k in span.attributes)
        lines.append(f"{'    ' * depth}{span.name}" + (f"  [{attrs}]" if attrs else ""))
    return recorder.tree(), "\n".join(lines)


def doc_block(text: str, mark: str) -> str:
    """The ```text block right after ``mark`` in the page."""
    after = text.split(mark, 1)[1]
    return after.split("```text\n", 1)[1].split("\n```", 1)[0]


def write_doc(tree_text: str, spans_text: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    for mark, new in ((TREE_MARK, tree_text), (SPANS_MARK, spans_text)):
        old = f"{mark}\n```text\n{doc_block(text, mark)}\n```"
        text = text.replace(old, f"{mark}\n```text\n{new}\n```")
    DOC.write_text(text, encoding="utf-8")


async def test_the_observability_page_shows_a_demo_runs_trace() -> None:
    pytest.importorskip("opentelemetry.sdk")
    tree_text, spans_text = await demo_trace()
    text = DOC.read_text(encoding="utf-8")
    stale = "docs/observability.md is stale: regenerate it with `python tests/test_tracing.py`"
    assert doc_block(text, TREE_MARK) == tree_text, stale
    assert doc_block(text, SPANS_MARK) == spans_text, stale


if __name__ == "__main__":  # regenerate the page's samples
    import asyncio

    write_doc(*asyncio.run(demo_trace()))


def test_planexec_run_is_traced_like_an_agent_run(spans: Any, tmp_path: Any) -> None:
    from planexec.cli import main

    plan = tmp_path / "plan.txt"
    plan.write_text(
        "#Task1: List the assets at MAIN.\n#Tool1: assets\n#Args1: {\"site_name\": \"MAIN\"}\n"
        "#Dependency1: None\n",
        encoding="utf-8",
    )
    code = main(["run", str(plan), "--tools", "planexec.examples.tools:TOOLS", "--no-store"])
    assert code == 0
    assert span_tree(spans.get_finished_spans()) == [
        (0, "invoke_agent planexec"),
        (1, "planexec:plan attempt 1"),
        (2, "planexec:step 1"),
        (3, "execute_tool assets"),
    ]


async def test_a_tool_calls_progress_is_an_event_on_its_steps_span(spans: Any) -> None:
    from planexec.testing import ScriptedChatModel
    from planexec.tools import report_progress
    from planexec.tracing import PROGRESS_EVENT

    async def work() -> str:
        await report_progress(1, 2, "half")
        await report_progress(2, 2)
        return "ok"

    plan = (
        "#Task1: a\n#Tool1: idle\n#Args1: {}\n#Dependency1: None\n"
        "#Task2: b\n#Tool2: work\n#Args2: {}\n#Dependency2: None\n"
    )
    tools = [fake_tool("idle", "x"), fake_tool("work", function=work)]
    await PlanExecuteAgent(ScriptedChatModel(replies=[plan, "done"]), tools).run("go")
    finished = spans.get_finished_spans()
    with_events = {s.name: s.events for s in finished if s.events}
    assert list(with_events) == ["planexec:step 2"]
    [first, second] = with_events["planexec:step 2"]
    assert first.name == second.name == PROGRESS_EVENT
    assert dict(first.attributes) == {
        "planexec.step_id": 2, "gen_ai.tool.name": "work", "planexec.progress": 1,
        "planexec.progress.total": 2, "planexec.progress.message": "half",
    }
    assert "planexec.progress.message" not in dict(second.attributes)
