"""``planexec runs``: list (and the dead-letter view), show, resume, export, timeline."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from planexec.cli import main
from planexec.commands.runs import add_store_arguments, store_from_args
from planexec.events import EventBus, PlanCreated, RunStarted, StepFinished, ToolCallStarted
from planexec.parsing import parse_plan
from planexec.results import StepResult, StepStatus
from planexec.store import MemoryRunStore, SQLiteRunStore

STORE_TESTS = Path(__file__).parents[1] / "store"
DEAD_PID = 2**22 + 4242


@pytest.fixture()
def tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.syspath_prepend(str(STORE_TESTS))
    monkeypatch.setenv("PLANEXEC_CRASH_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("PLANEXEC_CRASH_BLOCK", "")
    import crash_tools

    return crash_tools


@pytest.fixture()
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "runs.sqlite3"
    monkeypatch.setenv("PLANEXEC_STORE", str(path))
    return path


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


async def finished_runs(path: Path, tools: Any) -> None:
    from planexec.agent import PlanExecuteAgent

    with SQLiteRunStore(path) as store:
        agent = PlanExecuteAgent(None, tools.TOOLS, store=store)
        ok = await agent.execute_plan(tools.plan_text(), question="all good", run_id="good")
        bad = await agent.execute_plan(tools.plan_text("nosuchtool"), question="doomed",
                                       run_id="bad")
    assert (ok.status.value, bad.status.value) == ("SUCCEEDED", "FAILED")


async def interrupted_run(path: Path, tools: Any, tool2: str = "read") -> None:
    """Step 1 recorded, step 2's call started, then the process 'died'."""
    with SQLiteRunStore(path) as store:
        bus = EventBus()
        store.attach(bus)
        await bus.emit(RunStarted(run_id="cut", question="cut short"))
        plan = parse_plan(tools.plan_text(tool2))
        await bus.emit(PlanCreated(run_id="cut", version=1, plan=plan))
        result = StepResult(step_id=1, tool="read", status=StepStatus.SUCCEEDED,
                            args={"label": "s1"}, output={"label": "s1", "value": "s1-out"},
                            started_at=1.0, duration=0.1)
        await bus.emit(StepFinished(run_id="cut", result=result))
        await bus.emit(ToolCallStarted(run_id="cut", step_id=2, tool=tool2,
                                       args={"label": "s2", "prev": "s1-out"}))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET pid = ? WHERE run_id = 'cut'", (DEAD_PID,))
    conn.commit()
    conn.close()


def test_an_empty_store_lists_no_runs(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list"]) == 0
    assert "no runs" in capsys.readouterr().out
    assert main(["runs", "list", "--status", "failed"]) == 0
    assert "no runs with status FAILED" in capsys.readouterr().out


async def test_list_shows_runs_newest_first_and_the_dead_letter_view_shows_reasons(
    store_path: Path, tools: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished_runs(store_path, tools)
    assert main(["runs", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("RUN_ID")
    assert [line.split()[:2] for line in lines[1:]] == [["bad", "FAILED"], ["good", "SUCCEEDED"]]

    assert main(["runs", "list", "--status", "failed", "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "REASON" in out and "bad" in out and "good" not in out
    assert "[UNKNOWN_TOOL]" in out and "nosuchtool" in out

    assert main(["runs", "list", "--json", "--limit", "1"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record["run_id"] == "bad" and record["error_kind"] == "UNKNOWN_TOOL"


async def test_show_prints_plans_steps_resolution_methods_and_errors(
    store_path: Path, tools: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished_runs(store_path, tools)
    assert main(["runs", "show", "good"]) == 0
    out = capsys.readouterr().out
    assert "run good  SUCCEEDED" in out
    assert "plan v1: 4 step(s)" in out
    assert "label=literal, prev=path" in out
    assert main(["runs", "show", "bad"]) == 0
    out = capsys.readouterr().out
    assert "UNKNOWN_TOOL" in out and "reason:" in out

    assert main(["runs", "show", "good", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["status"] == "SUCCEEDED"
    assert sorted(s["step_id"] for s in data["steps"]) == [1, 2, 3, 4]
    assert all(s["duration"] is not None for s in data["steps"])


async def test_show_lists_calls_left_without_a_result(
    store_path: Path, tools: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await interrupted_run(store_path, tools)
    assert main(["runs", "show", "cut"]) == 0
    out = capsys.readouterr().out
    assert "run cut  INTERRUPTED" in out
    assert "calls started without a recorded result:" in out and "v1 #2 read" in out


async def test_list_counts_ok_steps_against_the_latest_plan_of_an_interrupted_run(
    store_path: Path, tools: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await interrupted_run(store_path, tools)
    assert main(["runs", "list"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("cut ")]
    assert " 1/4 " in line
    assert main(["runs", "list", "--json"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record["plan_steps"] == 4 and record["step_counts"] == {"SUCCEEDED": 1}


async def test_show_says_why_a_plan_version_has_no_plan_and_lists_rejected_drafts(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from planexec.agent import PlanExecuteAgent
    from planexec.config import AgentConfig
    from planexec.testing import FunctionModel, ModelCall, fake_tool

    good = "#Task1: list sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
    bad = good.replace("sites\n#Args", "sitez\n#Args")
    replies = ["Sorry, I cannot plan that.", "Still no plan, sorry.", bad, good]

    def reply(call: ModelCall, messages: Any) -> str:
        if call.purpose == "plan":
            return replies.pop(0)
        return "MAIN"

    config = AgentConfig.from_dict({"planner": {"max_reprompts": 1},
                                    "recovery": {"early_replan": False}})
    with SQLiteRunStore(store_path) as store:
        agent = PlanExecuteAgent(FunctionModel(function=reply),
                                 [fake_tool("sites", ["MAIN"], hints={"read_only": True})],
                                 config=config, store=store)
        run = await agent.run("which sites?", run_id="noplan")
    assert run.status.value == "SUCCEEDED"
    assert main(["runs", "show", "noplan"]) == 0
    out = capsys.readouterr().out
    assert "(no usable plan: prose without any step: 'Still no plan, sorry.')" in out
    assert out.count("1 rejected draft(s) before this reply:") == 2 and "sitez" in out
    assert main(["runs", "show", "noplan", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans[0]["plan"] is None and plans[0]["error"].startswith("prose without any step")
    assert [d["text"] for d in plans[0]["drafts"]] == ["Sorry, I cannot plan that."]
    assert [d["text"] for d in plans[1]["drafts"]] == [bad]
    assert plans[1]["error"] is None


def test_an_unknown_run_is_an_error(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "show", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


async def test_export_prints_or_writes_one_json_document(
    store_path: Path, tools: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await finished_runs(store_path, tools)
    assert main(["runs", "export", "good"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "planexec.run/1"
    assert {e["type"] for e in doc["events"]} >= {"RunStarted", "StepFinished", "RunFinished"}
    out = tmp_path / "good.json"
    assert main(["runs", "export", "good", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["run"]["run_id"] == "good"


async def test_resume_continues_an_interrupted_run(
    store_path: Path, tools: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await interrupted_run(store_path, tools)
    assert await _in_thread(["runs", "resume", "cut", "--tools", "crash_tools:TOOLS",
                             "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "reuse [1], re-run interrupted [2], run [3, 4]" in out
    assert calls(tmp_path) == []

    code = await _in_thread(["runs", "resume", "cut", "--tools", "crash_tools:TOOLS"])
    assert code == 0
    assert "run cut: SUCCEEDED" in capsys.readouterr().out
    assert sorted(calls(tmp_path)) == ["s2", "s3", "s4"]  # step 1 is not run again

    assert await _in_thread(["runs", "resume", "cut", "--tools", "crash_tools:TOOLS"]) == 0
    assert "already SUCCEEDED" in capsys.readouterr().out


async def test_resume_of_an_unsafe_call_stops_and_says_how_to_force_it(
    store_path: Path, tools: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await interrupted_run(store_path, tools, tool2="write")
    code = await _in_thread(["runs", "resume", "cut", "--tools", "crash_tools:TOOLS"])
    assert code == 1
    captured = capsys.readouterr()
    assert "unknown outcome [2]" in captured.out
    assert "planexec runs resume cut --rerun-unsafe" in captured.err
    assert calls(tmp_path) == []
    code = await _in_thread(["runs", "resume", "cut", "--tools", "crash_tools:TOOLS",
                             "--rerun-unsafe"])
    assert code == 0
    assert sorted(calls(tmp_path)) == ["s2", "s3", "s4"]


async def test_resume_needs_the_tools_when_the_run_recorded_none(
    store_path: Path, tools: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await interrupted_run(store_path, tools)  # recorded without a tool source
    assert await _in_thread(["runs", "resume", "cut"]) == 2
    err = capsys.readouterr().err
    assert "--tools MODULE:ATTR" in err and "--mcp-config FILE" in err


async def test_resume_uses_the_tools_recorded_by_run_and_force_overrides_a_live_pid(
    store_path: Path, tools: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(tools.plan_text("nosuchtool"))
    assert await _in_thread(["run", str(plan), "--tools", "crash_tools:TOOLS"]) == 1
    [record] = SQLiteRunStore(store_path).list_runs()
    assert record.config["tool_source"]["tools"] == "crash_tools:TOOLS"
    # a run still owned by a live process (this one) is refused, --force resumes it
    with SQLiteRunStore(store_path) as store:
        store.mark_status(record.run_id, "RUNNING")
    assert await _in_thread(["runs", "resume", record.run_id, "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "still running" in captured.err and "--force" in captured.err
    code = await _in_thread(["runs", "resume", record.run_id, "--dry-run", "--force"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "using the run's recorded tools: --tools crash_tools:TOOLS" in captured.err
    assert "--force" in captured.err and "warning" in captured.err


def test_list_refuses_a_limit_below_one(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["runs", "list", "--limit", "0"])
    assert exc.value.code == 2
    assert "at least 1" in capsys.readouterr().err


async def test_the_html_timeline_is_self_contained_with_one_bar_per_step(
    store_path: Path, tools: Any, tmp_path: Path
) -> None:
    await finished_runs(store_path, tools)
    await interrupted_run(store_path, tools)
    out = tmp_path / "good.html"
    assert main(["runs", "timeline", "good", "--out", str(out)]) == 0
    page = out.read_text()
    assert page.count('class="bar status-succeeded"') == 4
    assert "<svg" in page and "<script" not in page and "src=" not in page
    cut = tmp_path / "cut.html"
    assert main(["runs", "timeline", "cut", "--out", str(cut)]) == 0
    page = cut.read_text()
    assert page.count('class="bar status-in_flight"') == 1
    assert page.count('class="bar status-succeeded"') == 1


async def test_the_timeline_shows_each_arguments_provenance(
    store_path: Path, tools: Any, tmp_path: Path
) -> None:
    from planexec.commands.runs import timeline_bars
    from planexec.grounding import Grounding
    from planexec.results import ResolutionMethod as M

    with SQLiteRunStore(store_path) as store:
        bus = EventBus()
        store.attach(bus)
        await bus.emit(RunStarted(run_id="prov", question="which chiller"))
        await bus.emit(PlanCreated(run_id="prov", version=1, plan=parse_plan(tools.plan_text())))
        filled = StepResult(
            step_id=1, tool="read", status=StepStatus.SUCCEEDED, args={"label": "CWC04006"},
            resolution={"label": M.FILTERED}, started_at=1.0, duration=0.1,
            grounding={"label": Grounding("grounded", ("step_0.assets[0].id",),
                                          via="find(name='Chiller 6')")},
        )
        guessed = StepResult(
            step_id=2, tool="read", status=StepStatus.SUCCEEDED,
            args={"label": "CWC09999", "prev": "x"}, started_at=1.2, duration=0.1,
            resolution={"label": M.LLM, "prev": M.LITERAL},
            grounding={"label": Grounding("ungrounded", missing=("'CWC09999'",))},
        )
        for result in (filled, guessed):
            await bus.emit(StepFinished(run_id="prov", result=result))
        await store.flush()  # results ride with the next commit
        _, bars = timeline_bars(store, "prov")
    by_step = {b.label: b for b in bars if b.label.startswith("v1 #")}
    assert by_step["v1 #1 read"].provenance == (
        "label ← filtered, grounded at step_0.assets[0].id; via find(name='Chiller 6')",
    )
    assert by_step["v1 #2 read"].provenance == (
        "label ← llm, UNGROUNDED: 'CWC09999' found nowhere", "prev ← literal",
    )
    assert by_step["v1 #1 read"].filled == ("label ← filtered at step_0.assets[0].id",)
    assert by_step["v1 #2 read"].filled == ("label ← llm, UNGROUNDED",)
    out = tmp_path / "prov.html"
    assert main(["runs", "timeline", "prov", "--out", str(out)]) == 0
    page = out.read_text()
    assert "label ← filtered, grounded at step_0.assets[0].id" in page
    assert "label ← llm, UNGROUNDED: &#x27;CWC09999&#x27; found nowhere" in page
    if importlib.util.find_spec("matplotlib") is not None:  # drawn beside the bars
        png = tmp_path / "prov.png"
        assert main(["runs", "timeline", "prov", "--out", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_the_png_timeline_is_drawn_with_matplotlib(
    store_path: Path, tools: Any, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    await finished_runs(store_path, tools)
    for run_id in ("good", "bad"):
        out = tmp_path / f"{run_id}.png"
        assert main(["runs", "timeline", run_id, "--out", str(out)]) == 0
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_a_png_without_matplotlib_names_the_plot_extra(
    store_path: Path, tools: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await finished_runs(store_path, tools)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["runs", "timeline", "good", "--out", str(tmp_path / "x.png")]) == 2
    assert "planexec[plot]" in capsys.readouterr().err


def test_a_timeline_needs_an_html_svg_or_png_file(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "timeline", "x", "--out", "x.pdf"]) == 2
    assert ".html, .svg or .png" in capsys.readouterr().err


def test_store_arguments_choose_a_file_memory_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    add_store_arguments(parser)
    assert store_from_args(parser.parse_args(["--no-store"])) is None
    store = store_from_args(parser.parse_args(["--store", str(tmp_path / "a.sqlite3")]))
    assert isinstance(store, SQLiteRunStore) and store.path == tmp_path / "a.sqlite3"
    store.close()
    assert isinstance(store_from_args(parser.parse_args(["--store", ":memory:"])),
                      MemoryRunStore)
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "env.sqlite3"))
    store = store_from_args(parser.parse_args([]))
    assert isinstance(store, SQLiteRunStore) and store.path == tmp_path / "env.sqlite3"
    store.close()


async def _in_thread(argv: list[str]) -> int:
    """``main`` starts its own event loop, so call it from a thread in async tests."""
    import asyncio

    return await asyncio.to_thread(main, argv)


async def test_show_prints_each_waiting_requests_key_and_a_decision_with_a_stale_key_records_nothing(  # noqa: E501
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``runs show`` prints the key of what step 1 asks (pay bob 5); a resume re-asks it
    (pay bob 500); ``runs approve|reject --seen`` with the key read first records nothing."""
    from planexec.agent import PlanExecuteAgent
    from planexec.config import AgentConfig
    from planexec.runs import request_key, resume_run, waiting_steps
    from planexec.testing import FunctionModel, fake_tool

    picks = iter([{"amount": 5, "to": "bob"}, {"amount": 500, "to": "bob"}])

    def select(call: Any, messages: Any) -> str:
        return "done" if call.purpose == "answer" else json.dumps(
            {"tool": "pay", "args": next(picks)}
        )

    pay = fake_tool("pay", {"paid": True}, args={"amount": int, "to": str})
    pay.metadata = {**(pay.metadata or {}), "planexec": {"destructive": True, "server": "bank"}}
    config = AgentConfig.from_dict({"model": {"retry": {"attempts": 1}},
                                    "approval": {"enabled": True}})
    with SQLiteRunStore(store_path) as store:
        agent = PlanExecuteAgent(FunctionModel(function=select), [pay], config=config,
                                 store=store)
        await agent.execute_plan("#Task1: pay bob\n#Agent1: bank\n#Dependency1: None\n",
                                 run_id="pay")
        [first] = waiting_steps(store, "pay")
    assert await _in_thread(["runs", "show", "pay"]) == 0
    seen = request_key(first)
    assert seen in capsys.readouterr().out
    with SQLiteRunStore(store_path) as store:
        agent.store = store
        await resume_run(agent, store, "pay")  # step 1 asks again: 500
        [now] = waiting_steps(store, "pay")
    assert now.args["amount"] == 500
    for decide in (["approve"], ["reject", "--reason", "no"]):
        assert await _in_thread(["runs", *decide[:1], "pay", "1", *decide[1:],
                                 "--seen", seen]) == 2
        assert request_key(now) in capsys.readouterr().err  # the key to decide the new one
    with SQLiteRunStore(store_path) as store:
        assert waiting_steps(store, "pay") == [now]  # still open: nothing recorded
        assert not [e for e in store.events("pay") if e["type"] == "ApprovalDecided"]
    assert await _in_thread(["runs", "show", "pay"]) == 0
    assert request_key(now) in capsys.readouterr().out
    assert await _in_thread(["runs", "approve", "pay", "1", "--seen", request_key(now)]) == 0
    with SQLiteRunStore(store_path) as store:
        [decided] = [e for e in store.events("pay") if e["type"] == "ApprovalDecided"]
        assert decided["args"] == {"amount": 500, "to": "bob"}
    assert pay.metadata["calls"].calls == []  # type: ignore[index]
