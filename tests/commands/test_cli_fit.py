"""CLI edges: --version, table widths, one run-id format, the planner status line,
what the LLM fallback chose in ``runs show``, resume from another directory, and the
timeline's reused steps and planner calls."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from planexec.agent import PlanExecuteAgent
from planexec.cli import main
from planexec.commands._display import DEFAULT_WIDTH, PlannerStatus, terminal_width
from planexec.commands.runs import timeline_bars
from planexec.config import AgentConfig
from planexec.events import EventBus, PlanCreated, RunFinished, RunStarted, StepFinished
from planexec.examples import example_path
from planexec.parsing import parse_plan
from planexec.results import ResolutionMethod, StepResult, StepStatus, new_run_id
from planexec.store import SQLiteRunStore
from planexec.testing import FunctionModel, ModelCall, fake_tool

RUN_ID = re.compile(r"^[0-9a-f]{12}$")


@pytest.fixture()
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a pipe or a CI log: no standard stream is a terminal, COLUMNS unset."""

    def not_a_terminal(fd: int = 1) -> os.terminal_size:
        raise OSError("not a terminal")

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", not_a_terminal)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert re.fullmatch(r"planexec \S+\n", capsys.readouterr().out)


def test_the_width_is_the_terminals_or_columns_or_the_default(
    monkeypatch: pytest.MonkeyPatch, no_terminal: None
) -> None:
    assert terminal_width() == DEFAULT_WIDTH
    monkeypatch.setenv("COLUMNS", "97")
    assert terminal_width() == 97
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(os, "get_terminal_size",
                        lambda fd=1: os.terminal_size((211, 50)))
    assert terminal_width() == 211


def test_the_run_table_uses_the_width_not_80_columns(
    no_terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = example_path("plans/failure_analysis.txt")
    main(["run", str(plan), "--tools", "planexec.examples.tools:TOOLS", "--no-store"])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) > 80
    assert all(len(line) <= DEFAULT_WIDTH for line in lines)


def test_run_ids_have_one_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert RUN_ID.match(new_run_id())
    plan = example_path("plans/failure_analysis.txt")
    main(["run", str(plan), "--tools", "planexec.examples.tools:TOOLS", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert RUN_ID.match(data["run_id"])


def test_the_planner_status_shows_only_while_planning_and_only_on_a_terminal() -> None:
    tty = Console(file=io.StringIO(), force_terminal=True)
    status = PlannerStatus(tty)
    status(RunStarted(run_id="r", question="q"))
    assert status.active
    status(PlanCreated(run_id="r", version=1, plan=None))
    assert not status.active
    status(RunStarted(run_id="r", question="q"))
    status(RunFinished(run_id="r", status="FAILED"))
    assert not status.active

    piped = PlannerStatus(Console(file=io.StringIO(), force_terminal=False))
    piped(RunStarted(run_id="r", question="q"))
    assert not piped.active


def test_runs_show_says_what_the_fallback_chose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"

    async def record() -> None:
        with SQLiteRunStore(db) as store:
            bus = EventBus()
            store.attach(bus)
            await bus.emit(RunStarted(run_id="r1", question="q"))
            plan = parse_plan('#Task1: a\n#Tool1: assets\n#Args1: {"site_name": "{step_0_x}"}\n'
                              "#Dependency1: None\n")
            await bus.emit(PlanCreated(run_id="r1", version=1, plan=plan))
            result = StepResult(step_id=1, tool="assets", status=StepStatus.SUCCEEDED,
                                args={"site_name": "MAIN", "limit": 3},
                                resolution={"site_name": ResolutionMethod.LLM,
                                            "limit": ResolutionMethod.LITERAL})
            await bus.emit(StepFinished(run_id="r1", result=result))
            await bus.emit(RunFinished(run_id="r1", status="SUCCEEDED"))

    asyncio.run(record())
    assert main(["runs", "show", "r1", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert 'site_name = "MAIN"  (chosen by the LLM fallback)' in out
    assert "limit = 3" not in out  # only what the fallback chose


def test_resume_imports_the_tools_from_where_the_run_found_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "fit_resume_tools.py").write_text(
        "from planexec.testing import fake_tool\n"
        "TOOLS = [fake_tool('sites', ['MAIN'], hints={'read_only': True})]\n"
    )
    plan = tmp_path / "plan.txt"
    plan.write_text("#Task1: a\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
                    "#Task2: b\n#Tool2: nosuchtool\n#Args2: {}\n#Dependency2: None\n")
    db = tmp_path / "runs.sqlite3"
    monkeypatch.chdir(folder)
    assert main(["run", str(plan), "--tools", "fit_resume_tools:TOOLS",
                 "--store", str(db), "--json"]) == 1
    run_id = json.loads(capsys.readouterr().out)["run_id"]

    # From another directory, in a process that never imported the module.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    monkeypatch.delitem(sys.modules, "fit_resume_tools")
    code = main(["runs", "resume", run_id, "--dry-run", "--store", str(db)])
    err = capsys.readouterr().err
    assert "cannot import" not in err
    assert f"(imported from {folder.resolve()})" in err
    assert code in (0, 1)


def test_the_timeline_draws_a_reused_step_as_reused_and_planner_calls_as_bars(
    tmp_path: Path,
) -> None:
    plan = ("#Task1: a\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
            '#Task2: b\n#Tool2: assets\n#Args2: {"site_name": "<step_1[0]>"}\n'
            "#Dependency2: #S1\n")

    def model(call: ModelCall, _messages: object) -> str:
        return plan if call.purpose == "plan" else "ANSWER"

    tools = [fake_tool("sites", ["MAIN"], hints={"read_only": True}),
             fake_tool("assets", ["CH-6"], args={"site_name": str}, error="503", fail_times=1)]
    config = AgentConfig.from_dict({"planner": {"max_reprompts": 0},
                                    "executor": {"tool_retry": {"attempts": 1}}})
    db = tmp_path / "runs.sqlite3"

    async def go() -> str:
        with SQLiteRunStore(db) as store:
            agent = PlanExecuteAgent(FunctionModel(function=model), tools, config=config,
                                     store=store)
            run = await agent.run("Which assets?")
            assert len(run.attempts) == 2  # the unsafe failure re-planned
            return run.run_id

    run_id = asyncio.run(go())
    with SQLiteRunStore(db) as store:
        _, bars = timeline_bars(store, run_id)
    step1 = [b for b in bars if "#1 sites" in b.label]
    assert [b.status for b in step1] == ["SUCCEEDED", "REUSED"]
    assert step1[1].duration == 0.0 and "(reused)" in step1[1].label
    assert [b.label for b in bars if b.status == "PLANNER"] == ["planner call 1",
                                                                "planner call 2"]
