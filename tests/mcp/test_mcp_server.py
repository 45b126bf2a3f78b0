"""planexec as an MCP server, seen through the SDK's own Client over every transport."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from planexec.config import ExecutorSettings  # noqa: E402
from planexec.examples import example_path  # noqa: E402
from planexec.examples.questions import DEMO_QUESTIONS  # noqa: E402
from planexec.examples.tools import demo_tools  # noqa: E402
from planexec.mcp.server import PLANEXEC_TOOLS, build_server  # noqa: E402
from planexec.models import load_model  # noqa: E402
from planexec.store import open_store  # noqa: E402

pytestmark = pytest.mark.mcp

QUESTION = DEMO_QUESTIONS[0]
PLAN = example_path("plans/chiller_sensors.txt").read_text()
BAD_TYPE_PLAN = """#Task1: List the assets of a site.
#Tool1: assets
#Args1: {"site_name": 42}
#Dependency1: None
"""
UNKNOWN_TOOL_PLAN = PLAN.replace("#Tool1: assets", "#Tool1: asets")


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@asynccontextmanager
async def _client(
    transport: str,
    tmp_path: Path,
    http_serve_factory: Callable[..., Any],
    serve_command: Callable[..., tuple[list[str], dict[str, str]]],
) -> AsyncIterator[Client]:
    store = tmp_path / "runs.sqlite3"
    replies = example_path(QUESTION["replies"])
    model_args = ("--model", f"replay:{replies}")
    if transport == "inproc":
        server = build_server(
            demo_tools(), model=load_model(f"replay:{replies}"), store=open_store(store)
        )
        target: Any = server
    elif transport == "stdio":
        args, env = serve_command(store, *model_args)
        target = StdioServerParameters(command=sys.executable, args=args, env=env)
    else:
        target = http_serve_factory(*model_args).url
    async with Client(target, read_timeout_seconds=60) as client:
        yield client


@pytest.mark.parametrize("transport", ["inproc", "stdio", "http"])
async def test_every_planexec_tool_answers_and_rejects_bad_input_over_each_transport(
    transport: str,
    tmp_path: Path,
    http_serve_factory: Callable[..., Any],
    serve_command: Callable[..., tuple[list[str], dict[str, str]]],
) -> None:
    async with _client(transport, tmp_path, http_serve_factory, serve_command) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == set(PLANEXEC_TOOLS)  # no --expose-tools: planexec's own only
        for name in PLANEXEC_TOOLS:
            tool = listed[name]
            assert tool.description and len(tool.description) > 40
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema and tool.output_schema.get("type") == "object"

        # parse_plan: a plan, then text with no plan, then an argument of the wrong type.
        parsed = await client.call_tool("parse_plan", {"text": PLAN})
        assert not parsed.is_error
        assert parsed.structured_content is not None
        assert parsed.structured_content["dialect"] == "hashstep"
        assert [s["tool"] for s in parsed.structured_content["steps"]][0] == "assets"
        prose = await client.call_tool("parse_plan", {"text": "Sure! Here is what I would do."})
        assert prose.is_error and "no usable plan" in _text(prose)
        wrong = await client.call_tool("parse_plan", {"text": 5})
        assert wrong.is_error and "text" in _text(wrong)

        # validate_plan: unknown tools are reported with a close match.
        checked = await client.call_tool("validate_plan", {"text": UNKNOWN_TOOL_PLAN})
        assert not checked.is_error and checked.structured_content is not None
        assert checked.structured_content["valid"] is False
        assert checked.structured_content["unknown_tools"] == ["asets"]
        assert any("assets" in d["message"] for d in checked.structured_content["diagnostics"])
        good = await client.call_tool("validate_plan", {"text": PLAN})
        assert good.structured_content is not None and good.structured_content["valid"] is True

        # execute_plan: results for every step, and a progress notification per step.
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        ran = await client.call_tool("execute_plan", {"text": PLAN}, progress_callback=on_progress)
        assert not ran.is_error, _text(ran)
        out = ran.structured_content
        assert out is not None and out["ok"] is True
        steps = len(parsed.structured_content["steps"])
        assert [r["step_id"] for r in out["results"]] == list(range(1, steps + 1))
        assert all(r["status"] == "SUCCEEDED" for r in out["results"])
        assert out["results"][0]["output"]["site_name"] == "MAIN"
        assert sorted(p[0] for p in progress) == list(range(1, steps + 1))
        assert all(p[1] == steps for p in progress)
        # a plan with errors follows the one rule (planexec.plan_errors): the step fails
        # with its kind (close matches in its error), the rest runs, ok is false
        unknown = await client.call_tool("execute_plan", {"text": UNKNOWN_TOOL_PLAN})
        assert not unknown.is_error, _text(unknown)
        first = unknown.structured_content["results"][0]
        assert unknown.structured_content["ok"] is False
        assert first["error_kind"] == "UNKNOWN_TOOL" and "assets" in first["error"]
        # a literal of another type is coerced to the schema's, as in the library (the
        # demo tool then knows no site "42")
        bad_type = await client.call_tool("execute_plan", {"text": BAD_TYPE_PLAN})
        assert not bad_type.is_error and bad_type.structured_content["ok"] is False
        first = bad_type.structured_content["results"][0]
        assert first["status"] == "FAILED" and "site_name" in first["error"]

        # get_run: the run execute_plan recorded; an unknown id is an error.
        run = await client.call_tool("get_run", {"run_id": out["run_id"]})
        assert not run.is_error, _text(run)
        assert run.structured_content is not None
        assert run.structured_content["run"]["run"]["run_id"] == out["run_id"]
        missing = await client.call_tool("get_run", {"run_id": "no-such-run"})
        assert missing.is_error and "no-such-run" in _text(missing)

        # ask: an empty question is an error; a real one is answered from the replies.
        empty = await client.call_tool("ask", {"question": "  "})
        assert empty.is_error and "empty" in _text(empty)
        answered = await client.call_tool("ask", {"question": QUESTION["question"]})
        assert not answered.is_error, _text(answered)
        assert answered.structured_content is not None
        assert answered.structured_content["status"] == "SUCCEEDED"
        assert "Chiller 6" in (answered.structured_content["answer"] or "")

        # After every error the server still serves.
        assert len((await client.list_tools()).tools) == len(PLANEXEC_TOOLS)


async def test_ask_without_a_model_is_an_error_result_naming_the_option(tmp_path: Path) -> None:
    server = build_server(demo_tools(), store=open_store(tmp_path / "runs.sqlite3"))
    async with Client(server) as client:
        result = await client.call_tool("ask", {"question": "Which sites are there?"})
    assert result.is_error and "--model" in _text(result)


async def test_get_run_without_a_store_is_an_error_result() -> None:
    async with Client(build_server(demo_tools())) as client:
        result = await client.call_tool("get_run", {"run_id": "abc"})
    assert result.is_error and "--store" in _text(result)


async def test_expose_tools_adds_the_underlying_tools_with_hints_and_errors() -> None:
    async with Client(build_server(demo_tools(), expose_tools=True)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert {"sites", "assets", "create_work_order"} <= set(listed)
        assert listed["assets"].input_schema["required"] == ["site_name"]
        assert listed["assets"].annotations is not None
        assert listed["assets"].annotations.read_only_hint is True
        assert listed["create_work_order"].annotations is not None
        assert listed["create_work_order"].annotations.destructive_hint is True
        ok = await client.call_tool("assets", {"site_name": "MAIN"})
        assert not ok.is_error and ok.structured_content is not None
        assert ok.structured_content["site_name"] == "MAIN"
        wrong = await client.call_tool("assets", {"site_name": 7})
        assert wrong.is_error and "site_name" in _text(wrong)
        unknown_site = await client.call_tool("assets", {"site_name": "NOWHERE"})
        assert unknown_site.is_error and "NOWHERE" in _text(unknown_site)


async def test_execute_plan_records_its_plan_and_config_and_runs_resume_continues_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import sqlite3

    from planexec.cli import main

    path = tmp_path / "runs.sqlite3"
    store = open_store(path)
    source = {"tools": "planexec.examples.tools:TOOLS"}
    async with Client(build_server(demo_tools(), store=store, tool_source=source)) as client:
        ran = await client.call_tool("execute_plan", {"text": PLAN})
        assert not ran.is_error, _text(ran)
        assert ran.structured_content is not None
        run_id = ran.structured_content["run_id"]
        got = await client.call_tool("get_run", {"run_id": run_id})
    assert got.structured_content is not None
    doc = got.structured_content["run"]
    [recorded_plan] = doc["plans"]
    assert recorded_plan["version"] == 1 and recorded_plan["text"] == PLAN
    assert len(recorded_plan["plan"]["steps"]) == len(ran.structured_content["results"])
    config = doc["run"]["config"]
    assert config["executor"]["max_concurrency"] == ExecutorSettings().max_concurrency
    assert config["tool_source"] == source
    assert doc["run"]["status"] == "SUCCEEDED"
    store.close()

    # Cut the run short after its first step, as a killed server would leave it.
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM step_results WHERE run_id = ? AND step_id > 1", (run_id,))
    conn.execute(
        "UPDATE runs SET status = 'RUNNING', finished_at = NULL, pid = ? WHERE run_id = ?",
        (2**22 + 4242, run_id),
    )
    conn.commit()
    conn.close()
    monkeypatch.setenv("PLANEXEC_STORE", str(path))
    # no --tools: resume uses the tools the run recorded
    code = await asyncio.to_thread(main, ["runs", "resume", run_id])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "reuse [1]" in out.out and f"run {run_id}: SUCCEEDED" in out.out
    assert "using the run's recorded tools" in out.err


async def test_get_run_returns_only_this_servers_runs_unless_all_runs(tmp_path: Path) -> None:
    from planexec.agent import PlanExecuteAgent

    path = tmp_path / "runs.sqlite3"
    with open_store(path) as other:  # a run the user made elsewhere
        await PlanExecuteAgent(None, demo_tools(), store=other).execute_plan(
            PLAN, run_id="private-run"
        )
    store = open_store(path)
    async with Client(build_server(demo_tools(), store=store)) as client:
        hidden = await client.call_tool("get_run", {"run_id": "private-run"})
        assert hidden.is_error and "--all-runs" in _text(hidden)
    async with Client(build_server(demo_tools(), store=store, all_runs=True)) as client:
        shown = await client.call_tool("get_run", {"run_id": "private-run"})
        assert not shown.is_error, _text(shown)
    store.close()


async def test_exposed_tools_declare_an_output_schema_their_results_satisfy() -> None:
    from langchain_core.tools import StructuredTool

    def count(n: int) -> list[int]:
        """Count to n."""
        return list(range(n))

    def greet(name: str) -> str:
        """Greet."""
        return f"hello {name}"

    tools = [
        *demo_tools(), StructuredTool.from_function(count), StructuredTool.from_function(greet)
    ]
    async with Client(build_server(tools, expose_tools=True)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        for name, tool in listed.items():
            assert tool.output_schema and tool.output_schema["type"] == "object", name
        assert listed["count"].output_schema["properties"]["result"]["type"] == "array"
        counted = await client.call_tool("count", {"n": 3})  # the SDK client validates it
        assert counted.structured_content == {"result": [0, 1, 2]}
        greeted = await client.call_tool("greet", {"name": "ann"})
        assert greeted.structured_content == {"result": "hello ann"}
        assert _text(greeted) == "hello ann"
        sites = await client.call_tool("sites", {})
        assert not sites.is_error and isinstance(sites.structured_content, dict)


async def test_planexecs_client_gets_a_string_output_back_as_a_string() -> None:
    from langchain_core.tools import StructuredTool

    from planexec.mcp.client import result_value

    def greet(name: str) -> str:
        """Greet."""
        return f"hello {name}"

    async with Client(
        build_server([StructuredTool.from_function(greet)], expose_tools=True)
    ) as client:
        result = await client.call_tool("greet", {"name": "ann"})
    assert result_value(result) == "hello ann"
