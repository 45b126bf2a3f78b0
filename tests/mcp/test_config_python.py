"""A config's ``python`` command is the Python running planexec (any environment)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planexec.examples import example_path
from planexec.mcp.client import StdioServerConfig, load_mcp_config


@pytest.mark.parametrize("command", ["python", "python3"])
def test_python_means_the_python_running_planexec(command: str) -> None:
    config = load_mcp_config({"mcpServers": {"s": {"command": command, "args": ["-m", "x"]}}})
    server = config.servers["s"]
    assert isinstance(server, StdioServerConfig) and server.command == sys.executable


@pytest.mark.parametrize("command", ["/usr/bin/python3", "python3.11", "uvx"])
def test_other_commands_are_kept(command: str) -> None:
    config = load_mcp_config({"mcpServers": {"s": {"command": command}}})
    assert getattr(config.servers["s"], "command") == command  # noqa: B009


@pytest.mark.mcp
def test_the_readme_mcp_example_runs_without_the_environment_on_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    from planexec.cli import main

    # As from a shell where the virtual environment is not activated.
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    plan = example_path("plans/failure_analysis.txt")
    code = main(["run", str(plan), "--mcp-config", str(example_path("mcp.json")),
                 "--no-store", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {s["step_id"]: s["status"] for s in out["steps"]}[3] == "SUCCEEDED"
