from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

import pytest

from planexec.cli import main

PLAN = """\
Here is the plan:
#Task1: List the sites.
#Tool1: sites()
#Args1: {}
#Dependency1: None
#ExpectedOutput1: Site names.

#Task2: List the assets of the first site.
#Tool2: assets
#Args2: {"site_name": "{step_1[0]}"}
#Dependency2: #S1
#ExpectedOutput2: Assets.

#Task3: Pick one.
#Tool3: none
#Args3: {}
#Dependency3: #S2
#ExpectedOutput3: One asset.
"""

TOOLS_MODULE = """\
from planexec.testing import fake_tool

TOOLS = [
    fake_tool("sites", ["MAIN"]),
    fake_tool("assets", [], args={"site_name": str}),
    fake_tool("history", [], args={"site_name": str, "asset_id": str, "start": str}),
]
NOT_TOOLS = 42
"""


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.txt"
    path.write_text(PLAN, encoding="utf-8")
    return path


@pytest.fixture
def tools_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "p2_cli_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "p2_cli_tools:TOOLS"


def test_parse_json_prints_one_object_with_steps_refs_and_diagnostics(
    plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["parse", str(plan_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dialect"] == "hashstep"
    assert [s["tool"] for s in data["steps"]] == ["sites", "assets", None]
    second = data["steps"][1]
    assert second["args"] == {"site_name": "<step_1[0]>"}
    assert second["depends_on"] == [1] and second["args_valid"] is True
    (ref,) = second["references"]
    assert ref == {
        "step": 1,
        "path": [0],
        "hint": None,
        "raw": "{step_1[0]}",
        "whole_value": True,
        "location": "args.site_name",
    }
    for key in ("id", "task", "server", "tool", "args", "args_valid", "depends_on",
                "expected_output", "references"):
        assert key in second
    codes = {d["code"] for d in data["diagnostics"]}
    assert {"PROSE_IGNORED", "TOOL_NAME_NORMALIZED"} <= codes
    assert set(data["diagnostics"][0]) == {"line", "severity", "code", "message", "step"}


def test_parse_prints_a_readable_table(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(plan_file)]) == 0
    out = capsys.readouterr().out
    assert "3 step(s), dialect hashstep" in out
    assert "assets" in out and "(reasoning)" in out
    assert "TOOL_NAME_NORMALIZED" in out


def test_parse_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("1. add(1, 2)\n2. join()<END_OF_PLAN>"))
    assert main(["parse", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dialect"] == "llmcompiler"
    assert data["steps"][0]["tool"] == "add"


def test_parse_obeys_dialect_and_draft_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "drafts.txt"
    path.write_text("#Task1: a\n#Tool1: x\n\nBetter:\n#Task1: b\n#Tool1: y\n", encoding="utf-8")
    assert main(["parse", str(path), "--json", "--draft-policy", "first",
                 "--dialect", "hashstep"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["steps"][0]["tool"] == "x"


def test_a_reply_without_a_plan_exits_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "refusal.txt"
    path.write_text("I cannot do that with these tools.", encoding="utf-8")
    assert main(["parse", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert "prose without any step" in captured.err
    assert "prose without any step" in json.loads(captured.out)["error"]


def test_an_empty_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("", encoding="utf-8")
    assert main(["parse", str(path)]) == 2
    captured = capsys.readouterr()
    assert "empty reply" in captured.err and captured.out == ""


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", str(tmp_path / "nope.txt"), "--json"]) == 2
    captured = capsys.readouterr()
    assert "cannot read" in captured.err and "error" in json.loads(captured.out)


def test_validate_passes_a_plan_that_fits_the_tools(
    plan_file: Path, tools_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(plan_file), "--tools", tools_spec, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert not [d for d in data["diagnostics"] if d["severity"] == "error"]


def test_validate_reports_unknown_tools_and_missing_args_and_exits_1(
    tmp_path: Path, tools_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(
        textwrap.dedent(
            """\
            #Task1: a
            #Tool1: histroy
            #Args1: {}
            #Task2: b
            #Tool2: history
            #Args2: {"site_name": "MAIN"}
            """
        ),
        encoding="utf-8",
    )
    assert main(["validate", str(path), "--tools", tools_spec, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    by_code = {d["code"]: d for d in data["diagnostics"]}
    assert "'history'" in by_code["TOOL_UNKNOWN"]["message"]
    assert "'asset_id', 'start'" in by_code["ARGS_MISSING_REQUIRED"]["message"]


def test_validate_with_tools_that_cannot_be_loaded_exits_2(
    plan_file: Path, tools_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(plan_file), "--tools", "p2_cli_tools:NOT_TOOLS"]) == 2
    assert "expected a list" in capsys.readouterr().err


def test_show_mermaid_draws_nodes_and_edges(
    plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(plan_file), "--format", "mermaid"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowchart TD")
    assert 's1["1. sites"]' in out and 's3(["3. reasoning"])' in out
    assert "s1 --> s2" in out and "s2 --> s3" in out


def test_show_dot_draws_a_digraph(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(plan_file), "--format", "dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("digraph plan {") and "s1 -> s2;" in out and "s2 -> s3;" in out


def test_show_text_lists_each_step_with_what_it_waits_for(
    plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(plan_file), "--format", "text"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("2. assets") and "\u2190 #1" in lines[1]
    assert 'assets(site_name="<step_1[0]>")' in lines[1]


def test_show_marks_missing_steps_and_invalid_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.txt"
    path.write_text('#Task1: a\n#Tool1: t\n#Args1: {"x": "{step_5}"}\n#Task2: b\n#Tool2: u\n'
                    '#Args2: {"y": nope}\n', encoding="utf-8")
    assert main(["show", str(path), "--format", "mermaid"]) == 0
    out = capsys.readouterr().out
    assert "missing5" in out and "2. u \u26a0" in out
    assert main(["show", str(path), "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert "error:" in out and "REF_MISSING" in out
