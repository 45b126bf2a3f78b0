"""The one rule for plans with error diagnostics, held at every entry point (issue 25, defect 10).

A step an error diagnostic names never runs (a typed kind naming the diagnostic); the steps
depending on it are UPSTREAM_FAILED; the rest runs; an error naming no step stops everything.
The same in `Executor.run`, `PlanExecuteAgent.execute_plan`, ``planexec run`` and the MCP
server's ``execute_plan``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from planexec.agent import PlanExecuteAgent
from planexec.errors import ErrorKind
from planexec.executor import Executor
from planexec.parsing import check_plan, parse_plan
from planexec.plan import Diagnostic, Plan, Severity
from planexec.plan_errors import error_kind_of, step_failures
from planexec.resolver import ArgResolver
from planexec.results import StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

# step 1 depends on itself (DEPENDENCY_SELF, an error); step 2 on step 1; step 3 on nothing
SELF_PLAN = textwrap.dedent(
    """
    #Task1: wipe it
    #Tool1: wipe
    #Args1: {}
    #Dependency1: #S1

    #Task2: read after
    #Tool2: read
    #Args2: {"after": "<step_1>"}
    #Dependency2: #S1

    #Task3: read alone
    #Tool3: read
    #Args3: {"after": "x"}
    #Dependency3: None
    """
)

TOOLS_MODULE = textwrap.dedent(
    """
    from planexec.testing import fake_tool

    TOOLS = [
        fake_tool("wipe", {"wiped": True}),
        fake_tool("read", {"ok": 1}, args={"after": str}, hints={"read_only": True}),
    ]
    """
)

EXPECTED = {
    1: (StepStatus.FAILED, ErrorKind.MISSING_REFERENCE),
    2: (StepStatus.BLOCKED, ErrorKind.UPSTREAM_FAILED),
    3: (StepStatus.SUCCEEDED, None),
}


def tools() -> list[Any]:
    return [
        fake_tool("wipe", {"wiped": True}),
        fake_tool("read", {"ok": 1}, args={"after": str}, hints={"read_only": True}),
    ]


def calls(tool: Any) -> int:
    return int(tool.metadata["calls"].count)


def test_the_rule_maps_codes_to_kinds() -> None:
    plan = parse_plan(SELF_PLAN)
    assert "DEPENDENCY_SELF" in {d.code for d in plan.errors}
    failures = step_failures(plan)
    assert set(failures) == {1}
    assert failures[1].kind is ErrorKind.MISSING_REFERENCE
    assert "DEPENDENCY_SELF" in failures[1].message
    assert error_kind_of("TOOL_UNKNOWN") is ErrorKind.UNKNOWN_TOOL
    assert error_kind_of("ARGS_SYNTAX") is ErrorKind.ARGS_SYNTAX
    assert error_kind_of("SOMETHING_NEW") is ErrorKind.PLAN_PARSE
    assert step_failures(parse_plan("#Task1: a\n#Tool1: read\n#Args1: {}\n")) == {}


async def test_executor_runs_the_rest_but_never_the_step_an_error_names() -> None:
    ts = tools()
    executor = Executor(ToolCatalog(ts), ArgResolver())
    results = {r.step_id: r for r in await executor.run(parse_plan(SELF_PLAN))}
    assert {sid: (r.status, r.error_kind) for sid, r in results.items()} == EXPECTED
    assert results[2].failure is not None and results[2].failure.upstream == 1
    assert calls(ts[0]) == 0 and calls(ts[1]) == 1


async def test_an_error_naming_no_step_stops_everything() -> None:
    plan = parse_plan("#Task1: read\n#Tool1: read\n#Args1: {\"after\": \"x\"}\n")
    plan = plan.with_diagnostics([Diagnostic(None, Severity.ERROR, "PLAN_BROKEN", "broken")])
    ts = tools()
    results = await Executor(ToolCatalog(ts), ArgResolver()).run(plan)
    assert [(r.status, r.error_kind) for r in results] == [
        (StepStatus.FAILED, ErrorKind.PLAN_PARSE)
    ]
    assert calls(ts[1]) == 0


async def test_agent_execute_plan_follows_the_rule() -> None:
    ts = tools()
    run = await PlanExecuteAgent(None, ts).execute_plan(SELF_PLAN)
    got = {r.step_id: (r.status, r.error_kind) for r in run.results}
    assert got == EXPECTED
    assert calls(ts[0]) == 0
    assert str(run.status) != "SUCCEEDED"


@pytest.fixture
def _restore_logging() -> Iterator[None]:
    yield
    logger.remove()
    logger.add(sys.stderr, level="WARNING")


@pytest.mark.usefixtures("_restore_logging")
def test_planexec_run_follows_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from planexec.cli import main

    (tmp_path / "rule_fake_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "plan.txt"
    path.write_text(SELF_PLAN, encoding="utf-8")
    store = str(tmp_path / "runs.sqlite3")
    code = main(["run", str(path), "--tools", "rule_fake_tools:TOOLS", "--json", "--store", store])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    got = {s["step_id"]: (s["status"], s["error_kind"]) for s in data["steps"]}
    assert got == {sid: (str(st), k and str(k)) for sid, (st, k) in EXPECTED.items()}


async def test_mcp_execute_plan_follows_the_rule() -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from planexec.mcp.server import build_server
    from planexec.store import open_store

    ts = tools()
    server = build_server(ts, store=open_store(":memory:"))
    async with Client(server) as client:
        ran = await client.call_tool("execute_plan", {"text": SELF_PLAN})
        assert not ran.is_error
        out = ran.structured_content
        assert out is not None and out["ok"] is False
        got = {r["step_id"]: (r["status"], r["error_kind"]) for r in out["results"]}
        assert got == {sid: (str(st), k and str(k)) for sid, (st, k) in EXPECTED.items()}
    assert calls(ts[0]) == 0 and calls(ts[1]) == 1


def test_check_plan_keeps_the_rule_for_a_catalog_error() -> None:
    plan = check_plan(
        parse_plan("#Task1: a\n#Tool1: wip\n#Args1: {}\n\n#Task2: b\n#Tool2: read\n"
                   '#Args2: {"after": "x"}\n'),
        ToolCatalog(tools()),
    )
    failures = step_failures(plan)
    assert set(failures) == {1} and failures[1].kind is ErrorKind.UNKNOWN_TOOL
    assert isinstance(plan, Plan)


async def test_a_streamed_step_the_whole_plans_checks_name_is_discarded_and_fails() -> None:
    from collections.abc import AsyncIterator

    from planexec.stepfeed import FeedItem, PlanComplete, StepArrived

    plan = parse_plan('#Task1: read\n#Tool1: read\n#Args1: {"after": "x"}\n')
    flagged = plan.with_diagnostics([Diagnostic(1, Severity.ERROR, "ARGS_NEW", "bad", 1)])
    ts = tools()
    executor = Executor(ToolCatalog(ts), ArgResolver())

    async def feed() -> AsyncIterator[FeedItem]:
        yield StepArrived(plan.steps[0], "hashstep")
        while calls(ts[1]) == 0:  # the safe step started early and called its tool
            await asyncio.sleep(0.01)
        yield PlanComplete(flagged)

    results = await asyncio.wait_for(executor.run_feed(feed()), 30)
    assert [(r.status, r.error_kind) for r in results] == [
        (StepStatus.FAILED, ErrorKind.ARGS_SYNTAX)
    ]
    assert [r.step_id for r in executor.discarded] == [1]
