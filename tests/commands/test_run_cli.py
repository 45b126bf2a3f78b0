from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from planexec.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "planexec" / "examples"
DEMO_TOOLS = "planexec.examples.tools:TOOLS"

TOOLS_MODULE = textwrap.dedent(
    """
    from planexec.testing import fake_tool

    TOOLS = [
        fake_tool("sites", {"sites": [{"name": "MAIN"}]}, hints={"read_only": True}),
        fake_tool("assets", {"assets": ["CH-6"]}, args={"site_name": str}),
        fake_tool("broken", {"error": "backend unavailable"}),
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


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` points loguru at the captured stderr; point it back at whatever is current."""
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cli_fake_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cli_fake_tools:TOOLS"


def write_plan(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_run_prints_a_table_of_steps_and_exits_zero(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", write_plan(tmp_path, PLAN), "--tools", tools])
    out = capsys.readouterr().out
    assert code == 0
    assert "SUCCEEDED" in out and "assets" in out and "site_name=path" in out
    assert "2 succeeded" in out


def test_run_json_gives_steps_usage_and_diagnostics(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", write_plan(tmp_path, PLAN), "--tools", tools, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [s["status"] for s in data["steps"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert data["steps"][1]["args"] == {"site_name": "MAIN"}
    assert data["steps"][1]["resolution"] == {"site_name": "path"}
    assert data["usage"]["tool_calls"] == 2
    assert data["usage"]["llm_calls"] == {}  # as the library: only the purposes called
    assert (data["status"], data["ok"], data["error"]) == ("SUCCEEDED", True, None)
    assert isinstance(data["diagnostics"], list)


def test_a_failed_step_makes_the_exit_code_one(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = "#Step1: x\n#Tool1: broken\n#Args1: {}\n\n#Step2: y\n#Tool2: sitez\n#Args2: {}\n"
    code = main(["run", write_plan(tmp_path, plan), "--tools", tools, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    kinds = {s["step_id"]: s["error_kind"] for s in data["steps"]}
    assert kinds == {1: "TOOL_ERROR", 2: "UNKNOWN_TOOL"}
    assert "backend unavailable" in data["steps"][0]["error"]
    assert "sites" in data["steps"][1]["error"]  # the close name is suggested


def test_text_without_a_plan_exits_two(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", write_plan(tmp_path, "I cannot help with that."), "--tools", tools])
    assert code == 2
    assert "no plan" in capsys.readouterr().err


def test_a_replay_model_fills_a_hinted_reference_and_is_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = EXAMPLES / "plans" / "hinted_ref.txt"
    replies = EXAMPLES / "replies" / "hinted_ref.json"
    if not plan.exists() or not replies.exists():
        pytest.skip("demo plans are not available")
    code = main(["run", str(plan), "--tools", DEMO_TOOLS, "--model", f"replay:{replies}", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["usage"]["llm_calls"] == {"resolve": 1}
    assert "llm" in {m for s in data["steps"] for m in s["resolution"].values()}


def test_a_model_spec_for_a_missing_package_is_an_error_naming_it(
    tmp_path: Path,
    tools: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "langchain_groq" else real(name, *a),
    )
    code = main(["run", write_plan(tmp_path, PLAN), "--tools", tools, "--model", "groq:llama"])
    assert code == 2
    assert "langchain-groq" in capsys.readouterr().err


def test_run_json_gives_raw_output_wall_time_and_zero_llm_calls(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", write_plan(tmp_path, PLAN), "--tools", tools, "--json", "--no-store"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert all("raw_output" in s for s in data["steps"])
    assert data["steps"][0]["raw_output"] == {"sites": [{"name": "MAIN"}]}
    assert data["usage"]["wall_time"] > 0
    assert data["usage"]["llm_calls"] == {}


def test_run_json_keeps_the_resolution_of_arguments_that_resolved_on_a_failed_step(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = PLAN.replace(
        '{"site_name": "{step_1.sites[0].name}"}',
        '{"site_name": "{step_1.sites[0].name}", "asset": "ASSET_ID_FROM_STEP_1"}',
    )
    code = main(["run", write_plan(tmp_path, plan), "--tools", tools, "--json", "--no-store"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    step = data["steps"][1]
    assert step["error_kind"] == "RESOLUTION_FAILED" and "'asset'" in step["error"]
    assert step["resolution"] == {"site_name": "path"}
