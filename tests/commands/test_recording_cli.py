"""``planexec run`` and ``planexec ask`` record every run in the store unless ``--no-store``."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from loguru import logger

from planexec.cli import main
from planexec.config import AgentConfig
from planexec.parsing import parse_plan
from planexec.store import SQLiteRunStore

TOOLS_MODULE = textwrap.dedent(
    """
    import os

    from planexec.testing import fake_tool

    def _assets(site_name):
        if os.environ.get("REC_BACKEND_UP") != "1":
            return {"error": "backend unavailable"}
        return {"assets": ["CH-6"]}

    TOOLS = [
        fake_tool("sites", {"sites": [{"name": "MAIN"}]}, hints={"read_only": True}),
        fake_tool("assets", args={"site_name": str}, function=_assets),
    ]
    """
)

PLAN = textwrap.dedent(
    """
    #Step1: sites
    #Tool1: sites
    #Args1: {}
    #Dependency1: None

    #Step2: assets at the first site
    #Tool2: assets
    #Args2: {"site_name": "{step_1.sites[0].name}"}
    #Dependency2: #S1
    """
)

ASK_PLAN = (
    "#Task1: list sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
    '#Task2: assets\n#Tool2: assets\n#Args2: {"site_name": "<step_1.sites[0].name>"}\n'
    "#Dependency2: #S1\n"
)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` points loguru at the captured stderr; point it back at whatever is current."""
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    (tmp_path / "rec_cli_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REC_BACKEND_UP", "1")
    sys.modules.pop("rec_cli_tools", None)
    return importlib.import_module("rec_cli_tools")


def calls(module: ModuleType) -> dict[str, list[dict[str, object]]]:
    return {t.name: t.metadata["calls"].calls for t in module.TOOLS}


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_run_records_the_plan_and_each_step_in_the_store_it_is_given(
    tmp_path: Path, tools: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "given.sqlite3"
    plan = write(tmp_path, "plan.txt", PLAN)
    code = main(["run", plan, "--tools", "rec_cli_tools:TOOLS", "--json", "--store", str(db)])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 0
    assert [s["status"] for s in data["steps"]] == ["SUCCEEDED", "SUCCEEDED"]
    run_id = data["run_id"]
    assert f"recorded as run {run_id}" in err and f"--store {db}" in err
    with SQLiteRunStore(db) as store:
        record = store.get_run(run_id)
        assert record.status.value == "SUCCEEDED"
        assert record.step_counts == {"SUCCEEDED": 2}
        # the whole configuration the run used, and where its tools came from
        assert AgentConfig.model_validate(
            {k: v for k, v in record.config.items() if k != "tool_source"}
        ) == AgentConfig()
        assert record.config["tool_source"]["tools"] == "rec_cli_tools:TOOLS"
        [recorded] = store.plans(run_id)
        assert recorded.plan is not None
        assert recorded.plan.steps == parse_plan(PLAN).steps
        assert store.step_results(run_id)[1].result.args == {"site_name": "MAIN"}


def test_run_records_by_default_in_the_store_of_the_environment(
    tmp_path: Path,
    tools: ModuleType,
    capsys: pytest.CaptureFixture[str],
    _store_in_tmp: Path,
) -> None:
    assert main(["run", write(tmp_path, "plan.txt", PLAN), "--tools", "rec_cli_tools:TOOLS"]) == 0
    assert "2 succeeded" in capsys.readouterr().out
    with SQLiteRunStore(_store_in_tmp) as store:
        assert [r.status.value for r in store.list_runs()] == ["SUCCEEDED"]


def test_run_with_no_store_records_nothing(
    tmp_path: Path,
    tools: ModuleType,
    capsys: pytest.CaptureFixture[str],
    _store_in_tmp: Path,
) -> None:
    plan = write(tmp_path, "plan.txt", PLAN)
    assert main(["run", plan, "--tools", "rec_cli_tools:TOOLS", "--no-store"]) == 0
    assert "recorded as run" not in capsys.readouterr().err
    assert not _store_in_tmp.exists()


def test_a_failed_run_is_a_dead_letter_that_resume_finishes_once_its_cause_is_fixed(
    tmp_path: Path,
    tools: ModuleType,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = str(tmp_path / "runs.sqlite3")
    monkeypatch.setenv("REC_BACKEND_UP", "0")
    plan = write(tmp_path, "plan.txt", PLAN)
    code = main(["run", plan, "--tools", "rec_cli_tools:TOOLS", "--json", "--store", db])
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    assert code == 1
    with SQLiteRunStore(db) as store:
        [dead] = store.list_runs(status="FAILED")
        assert dead.run_id == run_id and dead.error is not None
        assert "backend unavailable" in dead.error

    monkeypatch.setenv("REC_BACKEND_UP", "1")
    assert main(["runs", "resume", run_id, "--tools", "rec_cli_tools:TOOLS", "--store", db]) == 0
    assert f"run {run_id}: SUCCEEDED" in capsys.readouterr().out
    assert len(calls(tools)["sites"]) == 1  # the succeeded step is not run again
    assert len(calls(tools)["assets"]) == 2


def test_ask_records_the_run_with_its_question_and_answer(
    tmp_path: Path, tools: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ask.sqlite3"
    model = "replay:" + write(tmp_path, "replies.json", json.dumps([ASK_PLAN, "CH-6 at MAIN."]))
    code = main(
        [
            "ask",
            "Which assets?",
            "--tools",
            "rec_cli_tools:TOOLS",
            "--model",
            model,
            "--store",
            str(db),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0 and out.strip() == "CH-6 at MAIN."
    with SQLiteRunStore(db) as store:
        [record] = store.list_runs()
        assert (record.question, record.status.value) == ("Which assets?", "SUCCEEDED")
        assert record.answer == "CH-6 at MAIN."
        assert record.step_counts == {"SUCCEEDED": 2}
        # where the tools came from, for `planexec runs resume` (the agent's config is kept)
        assert record.config["tool_source"]["tools"] == "rec_cli_tools:TOOLS"
        assert "executor" in record.config and "planner" in record.config
    assert f"recorded as run {record.run_id}" in err


def test_ask_records_by_default_and_not_with_no_store(
    tmp_path: Path,
    tools: ModuleType,
    capsys: pytest.CaptureFixture[str],
    _store_in_tmp: Path,
) -> None:
    replies = json.dumps([ASK_PLAN, "CH-6."])
    base = ["ask", "Which assets?", "--tools", "rec_cli_tools:TOOLS", "--quiet"]
    model = "replay:" + write(tmp_path, "a.json", replies)
    assert main([*base, "--model", model, "--no-store"]) == 0
    assert not _store_in_tmp.exists()
    model = "replay:" + write(tmp_path, "b.json", replies)
    assert main([*base, "--model", model]) == 0
    assert capsys.readouterr().err == ""  # --quiet: not even the "recorded as" line
    with SQLiteRunStore(_store_in_tmp) as store:
        assert [r.question for r in store.list_runs()] == ["Which assets?"]
