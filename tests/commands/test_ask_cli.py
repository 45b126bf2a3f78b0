from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from planexec.cli import main


@pytest.fixture(autouse=True)
def _no_sink_left_on_a_closed_capture() -> object:
    # main() adds a loguru sink on the (captured) stderr; remove it after each test
    yield
    from loguru import logger

    logger.remove()

TOOLS = textwrap.dedent(
    '''
    from planexec.testing import fake_tool

    TOOLS = [
        fake_tool("sites", ["MAIN", "WEST"], hints={"read_only": True}),
        fake_tool("assets", [{"id": "CH-6"}], args={"site_name": str},
                  hints={"read_only": True}),
    ]
    '''
)

PLAN = (
    "#Task1: list sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
    "#ExpectedOutput1: sites\n\n"
    "#Task2: assets\n#Tool2: assets\n#Args2: {\"site_name\": \"<step_1[0]>\"}\n"
    "#Dependency2: #S1\n#ExpectedOutput2: assets\n"
)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    module = tmp_path / "ask_cli_tools.py"
    module.write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("ask_cli_tools", None)
    return tmp_path


def write_replies(path: Path, replies: list[str]) -> str:
    target = path / "replies.json"
    target.write_text(json.dumps(replies))
    return f"replay:{target}"


def test_ask_prints_the_answer_and_shows_progress_on_stderr(
    setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = write_replies(setup, [PLAN, "CH-6 is at MAIN."])
    code = main(["ask", "Which assets?", "--tools", "ask_cli_tools:TOOLS", "--model", model])
    out, err = capsys.readouterr()
    assert code == 0
    assert out.strip() == "CH-6 is at MAIN."
    assert "plan 1" in err and "step 2 SUCCEEDED" in err and "run SUCCEEDED" in err


def test_ask_json_prints_the_run(setup: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_replies(setup, [PLAN, "CH-6."])
    code = main(["ask", "Which assets?", "--tools", "ask_cli_tools:TOOLS", "--model", model,
                 "--json", "--quiet"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 0 and data["status"] == "SUCCEEDED" and data["answer"] == "CH-6."
    assert data["usage"]["llm_calls"] == {"plan": 1, "answer": 1}
    assert err == ""


def test_ask_uses_a_config_file_and_fails_with_exit_code_1(
    setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = setup / "agent.toml"
    cfg.write_text("[limits]\nper_tool_limits = { assets = 0 }\n")
    model = write_replies(setup, [PLAN, "Could not tell."])
    code = main(["ask", "Which assets?", "--tools", "ask_cli_tools:TOOLS", "--model", model,
                 "--config", str(cfg)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "LIMIT_EXCEEDED" in err or "per_tool_limits" in err
    assert "run FAILED" in err


def test_ask_rejects_a_config_with_unknown_keys(
    setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = setup / "agent.toml"
    cfg.write_text("[limits]\nmax_step = 3\n")
    model = write_replies(setup, [PLAN])
    code = main(["ask", "q", "--tools", "ask_cli_tools:TOOLS", "--model", model,
                 "--config", str(cfg)])
    assert code == 2
    assert "unknown key 'limits.max_step'" in capsys.readouterr().err
