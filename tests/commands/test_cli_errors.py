"""A newcomer's mistakes at the command line: one line, exit 2, and a "did you mean".

Every command that imports a tools module reports one that fails to import (a syntax
error, an exception its code raises) as one line with exit 2, as it does a missing one;
every config file the CLI reads names an unknown key with the close keys it accepts, at
the path written in the file (never a pydantic union tag).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from planexec._validation import describe_errors, keys_at
from planexec.cli import main
from planexec.config import AgentConfig
from planexec.examples import example_path
from planexec.mcp.client import MCPConfig
from planexec.regress.scenario import Scenario

pytestmark = pytest.mark.timeout(120)

PLAN = str(example_path("plans/chiller_sensors.txt"))
DEMO_TOOLS = "planexec.examples.tools:TOOLS"
REPLIES = example_path("replies/hinted_ref.json")


def run_main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "using the run's" not in line]
    assert len(lines) == 1, err
    assert lines[0].startswith("planexec"), err
    assert "Traceback" not in err
    return lines[0]


BROKEN_MODULES = {
    "syntax": ("def f(:\n", "syntax error"),
    "raises": ('raise RuntimeError("the backend is down")\n', "RuntimeError"),
    "missing": (None, "cannot import"),
}


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Tools modules that fail to import, by how (a fresh name each, not cached)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = {}
    for how, (source, _) in BROKEN_MODULES.items():
        name = f"newcomer_tools_{how}"
        if source is not None:
            (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        monkeypatch.delitem(sys.modules, name, raising=False)
        specs[how] = f"{name}:TOOLS"
    return specs


@pytest.mark.parametrize("how", sorted(BROKEN_MODULES))
@pytest.mark.parametrize(
    "command",
    [
        ["run", PLAN, "--no-store"],
        ["validate", PLAN],
        ["ask", "which sites?", "--model", f"replay:{REPLIES}", "--no-store"],
        ["serve"],
    ],
    ids=lambda c: c[0],
)
def test_a_tools_module_that_fails_to_import_is_one_line_exit_2(
    command: list[str],
    how: str,
    broken: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_main([*command, "--tools", broken[how]]) == 2
    line = one_error_line(capsys)
    assert BROKEN_MODULES[how][1] in line and broken[how].split(":")[0] in line


def test_an_agent_config_typo_says_what_was_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[limits]\nmax_step = 3\n", encoding="utf-8")
    argv = ["run", PLAN, "--tools", DEMO_TOOLS, "--config", str(config), "--no-store"]
    assert run_main(argv) == 2
    line = one_error_line(capsys)
    assert "'limits.max_step'" in line and "did you mean 'max_steps'" in line


def test_an_mcp_config_typo_is_named_at_its_path_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"iot": {"comand": "python"}}}), "utf-8")
    assert run_main(["run", PLAN, "--mcp-config", str(config), "--no-store"]) == 2
    line = one_error_line(capsys)
    assert "'mcpServers.iot.comand'; did you mean 'command'?" in line
    assert "stdio" not in line and "pydantic" not in line  # no union tag, no pydantic link


def test_a_scenario_typo_says_what_was_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "typo.scenario.yaml"
    scenario.write_text(
        "question: which sites?\ntools: planexec.examples.tools:TOOLS\nexpcet: {}\n"
        "config: {limits: {max_step: 3}}\n",
        encoding="utf-8",
    )
    run_main(["regress", str(scenario)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "did you mean 'expect'?" in text
    assert "did you mean 'max_steps'?" in text


def test_runs_approve_args_typo_says_what_was_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.sqlite3")
    config = tmp_path / "approval.toml"
    config.write_text("[approval]\nenabled = true\n", encoding="utf-8")
    plan = str(example_path("plans/work_order.txt"))
    argv = ["run", plan, "--tools", DEMO_TOOLS, "--config", str(config), "--store", store]
    assert run_main([*argv, "--json"]) == 3  # waits for approval
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    edit = json.dumps({"prority": "medium"})
    assert run_main(["runs", "approve", run_id, "3", "--args", edit, "--store", store]) == 2
    line = one_error_line(capsys)
    assert "'prority'; did you mean 'priority'?" in line


class _Inner(BaseModel, extra="forbid"):
    timeout: float = 1.0


class _Outer(BaseModel, extra="forbid"):
    servers: dict[str, _Inner | None] = {}
    items: list[_Inner] = []


def test_describe_errors_walks_the_model_to_the_keys_accepted_there() -> None:
    data = {"servers": {"a": {"timout": 2}}, "items": [{}, {"timeot": 1}], "sevrers": 1}
    with pytest.raises(ValidationError) as info:
        _Outer.model_validate(data)
    lines = describe_errors(info.value, data, _Outer)
    assert "unknown key 'servers.a.timout'; did you mean 'timeout'?" in lines
    assert "unknown key 'items.1.timeot'; did you mean 'timeout'?" in lines
    assert "unknown key 'sevrers'; did you mean 'servers'?" in lines
    assert keys_at(AgentConfig, ("limits",)) >= {"max_steps"}
    assert keys_at(MCPConfig, ("mcpServers", "x", "http")) >= {"url", "headers"}
    assert keys_at(Scenario, ()) >= {"question", "expect"}


def test_a_union_members_tag_is_not_shown_as_a_key() -> None:
    class Value(BaseModel, extra="forbid"):
        v: int | str

    data = {"v": [1]}
    with pytest.raises(ValidationError) as info:
        Value.model_validate(data)
    lines = describe_errors(info.value, data, Value)
    assert lines and all(line.startswith("v: ") for line in lines), lines
