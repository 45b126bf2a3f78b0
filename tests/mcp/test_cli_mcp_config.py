"""`planexec run` / `planexec ask` with tools from MCP servers (``--mcp-config``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planexec.cli import main
from planexec.examples import example_path

pytest.importorskip("mcp")
pytestmark = pytest.mark.mcp


def _config(tmp_path: Path, *names: str) -> Path:
    path = tmp_path / "mcp.json"
    servers = {
        n: {"command": sys.executable, "args": ["-m", "planexec.examples.mcp_server", n]}
        for n in names
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def test_run_executes_a_plan_against_real_mcp_servers_over_stdio(tmp_path, capsys):
    config = _config(tmp_path, "iot", "fmsr")
    plan = example_path("plans/failure_analysis.txt")
    code = main(["run", str(plan), "--mcp-config", str(config), "--no-store", "--json"])
    out = json.loads(capsys.readouterr().out)
    statuses = {s["step_id"]: s["status"] for s in out["steps"]}
    assert statuses == {1: "SUCCEEDED", 2: "SUCCEEDED", 3: "SUCCEEDED", 4: "SUCCEEDED",
                        5: "SKIPPED"}
    step3 = next(s for s in out["steps"] if s["step_id"] == 3)
    assert step3["args"]["sensor"] == "Purge Runtime"  # a path into fmsr's structured output
    assert step3["resolution"]["sensor"] == "path"
    assert code == 0


def test_run_without_any_tools_says_which_options_give_them(tmp_path, capsys):
    plan = example_path("plans/failure_analysis.txt")
    assert main(["run", str(plan), "--no-store"]) == 2
    assert "--mcp-config" in capsys.readouterr().err
