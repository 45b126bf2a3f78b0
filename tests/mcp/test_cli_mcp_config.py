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


BROKEN = {
    "command": sys.executable,
    "args": ["-c", "import sys; sys.stderr.write('boom: no licence\\n'); sys.exit(2)"],
}
BROKEN_PLAN = """#Task1: the assets of MAIN
#Server1: iot
#Tool1: assets
#Args1: {"site_name": "MAIN"}
#Dependency1: None
#Task2: failure modes, on the broken server
#Server2: broken
#Tool2: failure_modes
#Args2: {"asset_type": "chiller"}
#Dependency2: None
#Task3: a qualified tool of the broken server
#Tool3: broken.diagnose
#Args3: {}
#Dependency3: None
"""


def test_a_server_that_fails_to_start_fails_only_its_steps_with_tool_error(tmp_path, capsys):
    config = tmp_path / "mcp.json"
    servers = {
        "iot": {"command": sys.executable, "args": ["-m", "planexec.examples.mcp_server", "iot"]},
        "broken": BROKEN,
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    plan = tmp_path / "plan.txt"
    plan.write_text(BROKEN_PLAN)
    code = main(["run", str(plan), "--mcp-config", str(config), "--no-store", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    steps = {s["step_id"]: s for s in out["steps"]}
    assert steps[1]["status"] == "SUCCEEDED"
    for sid in (2, 3):
        assert steps[sid]["status"] == "FAILED"
        assert steps[sid]["error_kind"] == "TOOL_ERROR"
        assert "'broken'" in steps[sid]["error"] and "boom: no licence" in steps[sid]["error"]
    assert code == 1
    # the startup error is shown once, as a warning naming the server and its stderr
    assert captured.err.count("stderr tail of 'broken'") == 1
    assert "WARNING" in captured.err and "boom: no licence" in captured.err


async def test_resume_reopens_the_mcp_servers_the_run_recorded(tmp_path, capsys, monkeypatch):
    import asyncio
    import sqlite3

    from planexec.store import SQLiteRunStore

    store = tmp_path / "runs.sqlite3"
    monkeypatch.setenv("PLANEXEC_STORE", str(store))
    config = _config(tmp_path, "iot", "fmsr")
    plan = example_path("plans/failure_analysis.txt")
    code = await asyncio.to_thread(main, ["run", str(plan), "--mcp-config", str(config)])
    assert code == 0, capsys.readouterr().err
    [record] = SQLiteRunStore(store).list_runs()
    assert record.config["tool_source"] == {"mcp_config": str(config.resolve())}
    conn = sqlite3.connect(store)  # as if the process died after step 1
    conn.execute("DELETE FROM step_results WHERE step_id > 1")
    conn.execute("UPDATE runs SET status = 'RUNNING', finished_at = NULL, pid = ?",
                 (2**22 + 4242,))
    conn.commit()
    conn.close()
    capsys.readouterr()
    # explicit options are accepted (and override the record) ...
    code = await asyncio.to_thread(
        main, ["runs", "resume", record.run_id, "--mcp-config", str(config), "--dry-run"]
    )
    assert code == 0
    assert "using the run's recorded tools" not in capsys.readouterr().err
    # ... and without them resume starts the servers the run recorded
    code = await asyncio.to_thread(main, ["runs", "resume", record.run_id])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"--mcp-config {config.resolve()}" in captured.err
    assert "reuse [1]" in captured.out and f"run {record.run_id}: SUCCEEDED" in captured.out
