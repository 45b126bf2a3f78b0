"""`parse_plan(..., catalog=)` and `planexec parse --tools`: a JSON plan read with the tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planexec.cli import main
from planexec.parsing import parse_plan
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

TOOLS_MODULE = """\
from planexec.testing import fake_tool

TOOLS = [fake_tool("sites", ["MAIN"]), fake_tool("assets", [], args={"site_name": str})]
"""

# only the catalog says that "call" holds the tool, and which parameter "MAIN" is for
PLAN = json.dumps({"steps": [
    {"id": 1, "call": "sites", "why": "first"},
    {"id": 2, "call": "assets", "args": ["<step_1[0]>"], "depends_on": [1]},
]})


@pytest.fixture
def tools_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "p26_cli_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "p26_cli_tools:TOOLS"


def test_parse_with_tools_reads_the_tool_and_maps_positional_args(
    tmp_path: Path, tools_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(PLAN, encoding="utf-8")
    assert main(["parse", str(path), "--tools", tools_spec, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["tool"], s["args"]) for s in data["steps"]] == [
        ("sites", {}), ("assets", {"site_name": "<step_1[0]>"})
    ]
    codes = {d["code"] for d in data["diagnostics"]}
    assert {"JSON_TOOL_KEY", "ARGS_POSITIONAL_MAPPED", "JSON_FIELD_UNKNOWN"} <= codes


def test_parse_without_tools_says_what_it_could_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(PLAN, encoding="utf-8")
    assert main(["parse", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["tool"] for s in data["steps"]] == [None, None]
    codes = {d["code"] for d in data["diagnostics"]}
    assert {"JSON_NO_TOOL", "JSON_FIELD_UNKNOWN"} <= codes


def test_parse_plan_with_a_catalog_also_runs_the_catalog_checks() -> None:
    catalog = ToolCatalog([fake_tool("assets", args={"site_name": str})])
    plan = parse_plan('[{"tool": "asets", "args": {}}]', catalog=catalog)
    assert {"TOOL_UNKNOWN"} <= {d.code for d in plan.errors}
    # a hashstep plan is checked against the catalog too
    plan = parse_plan("#Task1: a\n#Tool1: assets\n#Args1: {}\n", catalog=catalog)
    assert "ARGS_MISSING_REQUIRED" in {d.code for d in plan.errors}
