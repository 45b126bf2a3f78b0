"""The MCP ``execute_plan`` tool gets the library's runtime from the server's config: the
model timeout, retries, circuit breaker (shared by the server's calls) and limits."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from loguru import logger  # noqa: E402
from mcp import Client  # noqa: E402

from planexec.cli import main  # noqa: E402
from planexec.config import AgentConfig  # noqa: E402
from planexec.mcp.server import build_server  # noqa: E402
from planexec.testing import ScriptedChatModel, fake_tool  # noqa: E402

pytestmark = pytest.mark.mcp

SAFE = {"read_only": True}

REASONING_PLAN = """#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: Say which site is the main one.
#Tool2: none
#Dependency2: #S1
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

NO_RETRY = {"attempts": 1}
QUICK_RETRY = {"attempts": 2, "base_delay": 0, "max_delay": 0, "jitter": 0}


def tools() -> list[Any]:
    return [
        fake_tool("sites", {"sites": ["MAIN"]}, hints=SAFE),
        fake_tool("assets", {"assets": ["CH-6"]}, args={"site_name": str}, hints=SAFE),
    ]


def server(chat_model: Any, **sections: dict[str, Any]) -> Any:
    """A server over the fake tools with ``chat_model`` and a config of ``sections``."""
    return build_server(tools(), model=chat_model, config=AgentConfig.from_dict(sections))


async def execute(client: Client, plan: str) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """The step results (by id) and the whole output of one ``execute_plan`` call."""
    result = await client.call_tool("execute_plan", {"text": plan})
    assert not result.is_error and result.structured_content is not None
    out = result.structured_content
    return {r["step_id"]: r for r in out["results"]}, out


@pytest.mark.timeout(60)
async def test_execute_plan_gives_up_on_a_hanging_model_after_the_configured_timeout() -> None:
    model = ScriptedChatModel(replies=["never sent"], delay=3600)  # hangs on every call
    async with asyncio.timeout(30):
        async with Client(server(model, model={"timeout": 0.2, "retry": NO_RETRY})) as client:
            steps, out = await execute(client, REASONING_PLAN)
    assert out["ok"] is False
    assert steps[1]["status"] == "SUCCEEDED"
    assert (steps[2]["status"], steps[2]["error_kind"]) == ("FAILED", "MODEL_ERROR")


async def test_execute_plan_retries_a_transient_model_error_and_counts_both_calls() -> None:
    model = ScriptedChatModel(replies=[ConnectionError("connection reset"), "MAIN."])
    async with Client(server(model, model={"retry": QUICK_RETRY})) as client:
        steps, out = await execute(client, REASONING_PLAN)
    assert out["ok"] is True and steps[2]["output"] == "MAIN."
    assert out["usage"]["llm_calls"]["reason"] == 2


async def test_execute_plan_stops_a_plan_at_the_step_limit_of_the_config() -> None:
    async with Client(server(None, limits={"max_steps": 1})) as client:
        steps, out = await execute(client, TWO_TOOLS_PLAN)
    assert out["ok"] is False
    assert steps[1]["status"] == "SUCCEEDED"
    assert steps[2]["error_kind"] == "LIMIT_EXCEEDED"


async def test_execute_plan_calls_share_the_servers_model_breaker() -> None:
    model = ScriptedChatModel(replies=[ValueError("provider down")], repeat_last=True)
    mcp = server(model, model={"retry": NO_RETRY, "breaker_failure_threshold": 1})
    async with Client(mcp) as client:
        first, _ = await execute(client, REASONING_PLAN)
        second, _ = await execute(client, REASONING_PLAN)
    assert first[2]["error_kind"] == "MODEL_ERROR"
    assert second[2]["error_kind"] == "CIRCUIT_OPEN"
    assert model.calls == 1  # the second call met the open breaker


def test_a_config_naming_a_tool_the_server_lacks_is_rejected_when_it_is_built() -> None:
    from planexec.errors import ConfigError

    with pytest.raises(ConfigError, match=r"limits\.per_tool_limits\['site'\]"):
        server(None, limits={"per_tool_limits": {"site": 1}})


@pytest.fixture
def _restore_logging() -> Iterator[None]:
    """`main` points loguru at the captured stderr; point it back at whatever is current."""
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


@pytest.mark.usefixtures("_restore_logging")
def test_serve_reads_its_config_and_refuses_one_naming_an_unknown_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[limits]\nper_tool_limits = { asets = 1 }\n", encoding="utf-8")
    argv = ["serve", "--tools", "planexec.examples.tools:TOOLS", "--config", str(config)]
    code = main([*argv, "--store", str(tmp_path / "runs.sqlite3")])
    err = capsys.readouterr().err
    assert code == 2
    assert "limits.per_tool_limits['asets']" in err
