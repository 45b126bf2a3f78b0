"""planexec is quiet as a library and loud (once) in the CLI (planexec._log, planexec.cli)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from planexec import disable_logging, enable_logging
from planexec.agent import PlanExecuteAgent
from planexec.cli import main
from planexec.results import RunStatus
from planexec.testing import FunctionModel, ModelCall, fake_tool

ROOT = Path(__file__).resolve().parents[1]

HINTED = (
    "#Task1: list sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
    "#Task2: assets\n#Tool2: assets\n#Args2: {\"site_name\": \"{step_1_best_site}\"}\n"
    "#Dependency2: #S1\n"
)
"""Step 2's argument is a hinted reference: the resolver warns it asks its LLM fallback."""

FALLBACK_WARNING = "asking the LLM fallback for argument 'site_name'"

LIBRARY_RUN = textwrap.dedent(
    """
    import asyncio, json
    from loguru import logger
    import planexec
    from planexec.testing import FunctionModel, fake_tool

    PLAN = {plan!r}

    def reply(call, messages):
        if call.purpose == "plan":
            return PLAN
        if call.purpose == "resolve":
            raise RuntimeError("the fallback is down")
        return "no answer"

    tools = [fake_tool("sites", error="sites are down", fail_times=1),
             fake_tool("assets", ["CH-6"], args={{"site_name": str}})]
    agent = planexec.PlanExecuteAgent(FunctionModel(function=reply), tools)
    run = asyncio.run(agent.run("which assets?"))
    print(run.status, len(run.results))
    """
)


def warn_in_planexec(message: str) -> None:
    """Log a warning as a planexec module does (loguru reads the caller's module name)."""
    from planexec._log import step_log

    code = compile("step_log('r9', 4).warning(message)", "planexec_fake.py", "exec")
    exec(code, {"__name__": "planexec.fake", "step_log": step_log, "message": message})


@pytest.fixture
def _sinks_restored() -> Iterator[None]:
    yield
    disable_logging()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")  # loguru's default


def test_a_library_run_with_failures_writes_nothing_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # a fresh program with loguru's default stderr sink, as any program using planexec
    code = subprocess.run(
        [sys.executable, "-c", LIBRARY_RUN.format(plan=HINTED)],
        cwd=ROOT,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        check=False,
    ).returncode
    out, err = capfd.readouterr()
    assert code == 0, err
    assert out.split() == ["FAILED", "2"], out  # failures (logged as warnings) happened
    assert err == ""


@pytest.mark.usefixtures("_sinks_restored")
async def test_enable_logging_routes_records_into_stdlib_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def reply(call: ModelCall, messages: list[object]) -> str:
        if call.purpose == "plan":
            return HINTED
        if call.purpose == "resolve":
            return json.dumps({key: "MAIN" for key in call.keys})
        return "CH-6."

    tools = [fake_tool("sites", ["MAIN"]), fake_tool("assets", ["CH-6"], args={"site_name": str})]
    agent = PlanExecuteAgent(FunctionModel(function=reply), tools)
    sink = enable_logging(stdlib=True)
    assert sink is not None
    with caplog.at_level(logging.WARNING, logger="planexec"):
        run = await agent.run("which assets?", run_id="r-log")
    disable_logging(sink)
    assert run.status is RunStatus.SUCCEEDED
    records = [r for r in caplog.records if FALLBACK_WARNING in r.getMessage()]
    assert len(records) == 1
    record = records[0]
    assert record.name == "planexec.resolver" and record.levelno == logging.WARNING
    assert record.__dict__["run_id"] == "r-log" and record.__dict__["step_id"] == 2
    # off again: nothing more
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="planexec"):
        await agent.run("which assets?")
    assert not [r for r in caplog.records if r.name.startswith("planexec")]


@pytest.mark.usefixtures("_sinks_restored")
def test_enable_logging_with_a_sink_takes_planexec_records_only() -> None:
    lines: list[str] = []
    sink = enable_logging(lines.append, level="INFO")
    logger.bind(run_id="r", step_id=3).warning("not planexec's")  # from a tests module
    warn_in_planexec("careful")
    disable_logging(sink)
    warn_in_planexec("not shown")
    assert lines == ["WARNING run=r9 step=4 | careful\n"]


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "logging_cli_tools.py").write_text(
        textwrap.dedent(
            """
            from planexec.testing import fake_tool

            TOOLS = [
                fake_tool("sites", ["MAIN", "WEST"], hints={"read_only": True}),
                fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str},
                          hints={"read_only": True}),
            ]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.sqlite3"))
    sys.modules.pop("logging_cli_tools", None)
    return tmp_path


@pytest.mark.usefixtures("_sinks_restored")
def test_the_cli_shows_a_warning_exactly_once(
    tools_module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replies = tools_module / "replies.json"
    replies.write_text(json.dumps([HINTED, '{"site_name": "MAIN"}', "CH-6 is at MAIN."]))
    code = main(
        ["ask", "Which assets?", "--tools", "logging_cli_tools:TOOLS", "--model",
         f"replay:{replies}"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "step 2 SUCCEEDED" in err  # the progress display is on
    assert err.count(FALLBACK_WARNING) == 1, err
    assert "⚠" not in err
    line = next(x for x in err.splitlines() if FALLBACK_WARNING in x)
    assert line.startswith("WARNING") and "step=2" in line
    # after the command, planexec is a quiet library again
    seen: list[str] = []
    sink = logger.add(seen.append, level="WARNING")
    warn_in_planexec("after the CLI")
    logger.remove(sink)
    assert seen == []
