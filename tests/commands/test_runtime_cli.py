"""``planexec run --model`` and ``planexec ask`` get the library's runtime from
``--config``: the model timeout, retries, circuit breaker and limits."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from loguru import logger

from planexec.cli import main
from planexec.commands.run import run_config
from planexec.testing import ScriptedChatModel

TOOLS_MODULE = textwrap.dedent(
    """
    from planexec.testing import fake_tool

    SAFE = {"read_only": True}
    TOOLS = [
        fake_tool("sites", {"sites": ["MAIN"]}, hints=SAFE),
        fake_tool("assets", {"assets": ["CH-6"]}, args={"site_name": str}, hints=SAFE),
    ]
    """
)

REASONING_PLAN = """#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: Say which site is the main one.
#Tool2: none
#Dependency2: #S1
"""

TWO_REASONING_STEPS_PLAN = REASONING_PLAN + """
#Task3: Say how many sites there are.
#Tool3: none
#Dependency3: #S1
"""

TWO_TOOLS_PLAN = """#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: List the assets of the first site.
#Tool2: assets
#Args2: {"site_name": "<step_1.sites[0]>"}
#Dependency2: #S1
"""

HANG = "<never replies>"


class HangingModel(ScriptedChatModel):
    """A scripted model whose reply `HANG` never comes (the call waits until cancelled)."""

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = self._next(messages)
        if text == HANG:
            await asyncio.Event().wait()
        return self._result(text)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` points loguru at the captured stderr; point it back at whatever is current."""
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "runtime_cli_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "runtime_cli_tools:TOOLS"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def use_model(monkeypatch: pytest.MonkeyPatch, command: str, model: Any) -> None:
    """``--model SPEC`` loads ``model`` (in process) for ``planexec <command>``."""
    monkeypatch.setattr(f"planexec.commands.{command}.load_model", lambda spec: model)


def run_json(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> tuple[int, dict[str, Any]]:
    code = main([*argv, "--json", "--no-store"])
    return code, json.loads(capsys.readouterr().out)


def steps_of(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {s["step_id"]: s for s in data["steps"]}


def latest_of(run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The latest result of each step of an ``ask --json`` run."""
    out: dict[int, dict[str, Any]] = {}
    for attempt in run["attempts"]:
        for r in attempt["results"]:
            out[r["step_id"]] = r
    return out


NO_RETRY = 'retry = { attempts = 1 }'
QUICK_RETRY = 'retry = { attempts = 2, base_delay = 0, max_delay = 0, jitter = 0 }'


# ------------------------------------------------------------------ planexec run


def test_run_config_overrides_the_file_only_with_the_flags_given(tmp_path: Path) -> None:
    path = write(tmp_path, "agent.toml", "[executor]\nmax_concurrency = 3\nstep_timeout = 9.0\n")
    from_file = run_config(argparse.Namespace(config=path, max_concurrency=None, timeout=None))
    assert (from_file.executor.max_concurrency, from_file.executor.step_timeout) == (3, 9.0)
    flagged = run_config(argparse.Namespace(config=path, max_concurrency=5, timeout=None))
    assert (flagged.executor.max_concurrency, flagged.executor.step_timeout) == (5, 9.0)


@pytest.mark.timeout(60)
def test_run_gives_up_on_a_hanging_model_after_the_configured_timeout(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_model(monkeypatch, "run", ScriptedChatModel(replies=["never sent"], delay=3600))
    cfg = write(tmp_path, "agent.toml", f"[model]\ntimeout = 0.2\n{NO_RETRY}\n")
    plan = write(tmp_path, "plan.txt", REASONING_PLAN)
    code, data = run_json(
        capsys, ["run", plan, "--tools", tools, "--model", "fake", "--config", cfg]
    )
    steps = steps_of(data)
    assert code == 1
    assert steps[1]["status"] == "SUCCEEDED"
    assert (steps[2]["status"], steps[2]["error_kind"]) == ("FAILED", "MODEL_ERROR")


def test_run_retries_a_transient_model_error_and_counts_both_calls(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedChatModel(replies=[ConnectionError("connection reset"), "MAIN."])
    use_model(monkeypatch, "run", model)
    cfg = write(tmp_path, "agent.toml", f"[model]\n{QUICK_RETRY}\n")
    plan = write(tmp_path, "plan.txt", REASONING_PLAN)
    code, data = run_json(
        capsys, ["run", plan, "--tools", tools, "--model", "fake", "--config", cfg]
    )
    assert code == 0
    assert steps_of(data)[2]["output"] == "MAIN."
    assert data["usage"]["llm_calls"]["reason"] == 2


def test_run_stops_a_plan_at_the_step_limit_of_the_config(
    tmp_path: Path, tools: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(tmp_path, "agent.toml", "[limits]\nmax_steps = 1\n")
    plan = write(tmp_path, "plan.txt", TWO_TOOLS_PLAN)
    code, data = run_json(capsys, ["run", plan, "--tools", tools, "--config", cfg])
    steps = steps_of(data)
    assert code == 1
    assert steps[1]["status"] == "SUCCEEDED"
    assert steps[2]["error_kind"] == "LIMIT_EXCEEDED"


def test_run_shares_the_model_breaker_between_the_steps_of_a_plan(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedChatModel(replies=[ValueError("provider down")], repeat_last=True)
    use_model(monkeypatch, "run", model)
    cfg = write(
        tmp_path, "agent.toml", f"[model]\n{NO_RETRY}\nbreaker_failure_threshold = 1\n"
    )
    plan = write(tmp_path, "plan.txt", TWO_REASONING_STEPS_PLAN)
    argv = ["run", plan, "--tools", tools, "--model", "fake", "--config", cfg]
    code, data = run_json(capsys, [*argv, "--max-concurrency", "1"])  # step 2, then step 3
    steps = steps_of(data)
    assert code == 1
    assert steps[2]["error_kind"] == "MODEL_ERROR"
    assert steps[3]["error_kind"] == "CIRCUIT_OPEN"
    assert model.calls == 1


# ------------------------------------------------------------------ planexec ask


def ask(
    capsys: pytest.CaptureFixture[str], tools: str, cfg: str
) -> tuple[int, dict[str, Any]]:
    argv = ["ask", "Which site is the main one?", "--tools", tools, "--model", "fake"]
    return run_json(capsys, [*argv, "--config", cfg, "--quiet"])


@pytest.mark.timeout(60)
def test_ask_gives_up_on_a_hanging_model_after_the_configured_timeout(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_model(monkeypatch, "ask", HangingModel(replies=[REASONING_PLAN, HANG], repeat_last=True))
    cfg = write(
        tmp_path,
        "agent.toml",
        f"[model]\ntimeout = 0.2\n{NO_RETRY}\n"
        "[recovery]\nmax_retries_per_step = 0\nmax_replans = 0\n",
    )
    code, run = ask(capsys, tools, cfg)
    steps = latest_of(run)
    assert code == 1 and run["status"] == "FAILED"
    assert steps[1]["status"] == "SUCCEEDED"
    assert (steps[2]["status"], steps[2]["error_kind"]) == ("FAILED", "MODEL_ERROR")


def test_ask_retries_a_transient_model_error_and_counts_both_calls(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replies = [REASONING_PLAN, ConnectionError("connection reset"), "MAIN.", "It is MAIN."]
    use_model(monkeypatch, "ask", ScriptedChatModel(replies=replies))
    cfg = write(tmp_path, "agent.toml", f"[model]\n{QUICK_RETRY}\n")
    code, run = ask(capsys, tools, cfg)
    assert code == 0 and run["answer"] == "It is MAIN."
    assert run["usage"]["llm_calls"]["reason"] == 2


def test_ask_stops_at_the_step_limit_of_the_config(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replies = [TWO_TOOLS_PLAN, "Only the sites are known."]
    use_model(monkeypatch, "ask", ScriptedChatModel(replies=replies, repeat_last=True))
    cfg = write(tmp_path, "agent.toml", "[limits]\nmax_steps = 1\n")
    code, run = ask(capsys, tools, cfg)
    assert code == 1 and run["error_kind"] == "LIMIT_EXCEEDED"
    assert latest_of(run)[2]["error_kind"] == "LIMIT_EXCEEDED"


def test_ask_shares_the_model_breaker_between_the_planner_and_the_steps(
    tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedChatModel(replies=[REASONING_PLAN, ValueError("provider down")])
    use_model(monkeypatch, "ask", model)
    cfg = write(
        tmp_path, "agent.toml", f"[model]\n{NO_RETRY}\nbreaker_failure_threshold = 1\n"
    )
    code, run = ask(capsys, tools, cfg)
    kinds = {run["error_kind"]} | {r["error_kind"] for r in latest_of(run).values()}
    assert code == 1
    assert "CIRCUIT_OPEN" in kinds
    assert model.calls == 2  # the plan and the failed reasoning step; then the breaker is open
