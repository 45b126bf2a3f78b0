"""Approval through the MCP server, with the official client: execute_plan and ask
return a paused run with its pending steps instead of blocking; approve_step,
reject_step and resume_run continue it, seeing only the runs get_run may see.

Oracle: the fake tools' own call logs (what really ran, with which arguments).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from langchain_core.messages import BaseMessage  # noqa: E402
from mcp import Client  # noqa: E402

from planexec.config import AgentConfig  # noqa: E402
from planexec.mcp.server import build_server  # noqa: E402
from planexec.store import open_store  # noqa: E402
from planexec.testing import FunctionModel, ModelCall, fake_tool, messages_text  # noqa: E402

pytestmark = pytest.mark.mcp

PLAN = """#Task1: find the asset
#Tool1: assets
#Args1: {}
#Dependency1: None
#Task2: open a work order for it
#Tool2: open_order
#Args2: {"asset": "<step_1[0]>", "priority": "high"}
#Dependency2: #S1
"""
CONFIG = AgentConfig.model_validate({"approval": {"enabled": True},
                                     "planner": {"max_reprompts": 0}})


def tools() -> list[Any]:
    return [
        fake_tool("assets", ["CH-6"], hints={"read_only": True}),
        fake_tool(
            "open_order",
            function=lambda asset, priority: {"id": f"WO-{asset}-{priority}"},
            args={"asset": str, "priority": str},
            hints={"destructive": True},
        ),
        fake_tool("notify", {"sent": True}, args={"text": str}, hints={"read_only": True}),
    ]


def calls(tool: Any) -> list[dict[str, Any]]:
    return [dict(c) for c in tool.metadata["calls"].calls]


async def test_execute_plan_pauses_and_approve_step_then_resume_run_finish_it(
    tmp_path: Path,
) -> None:
    ts = tools()
    store = open_store(tmp_path / "runs.sqlite3")
    async with Client(build_server(ts, store=store, config=CONFIG)) as client:
        ran = await client.call_tool("execute_plan", {"text": PLAN})
        assert not ran.is_error
        out = ran.structured_content
        assert out is not None
        assert (out["status"], out["ok"]) == ("WAITING_APPROVAL", False)
        [pending] = out["pending_approval"]
        assert (pending["step_id"], pending["tool"], pending["args"]) == (
            2, "open_order", {"asset": "CH-6", "priority": "high"}
        )
        assert pending["resolution"]["priority"] == "literal"
        assert calls(ts[1]) == []
        run_id = out["run_id"]

        bad = await client.call_tool(
            "approve_step", {"run_id": run_id, "step": 2, "args": {"priority": 5}}
        )
        assert bad.is_error and "priority" in bad.content[0].text
        other = await client.call_tool("approve_step", {"run_id": "not-mine", "step": 2})
        assert other.is_error and "made by this server" in other.content[0].text

        ok = await client.call_tool(
            "approve_step",
            {"run_id": run_id, "step": 2, "args": {"priority": "low"}, "by": "erin"},
        )
        assert not ok.is_error and ok.structured_content is not None
        assert ok.structured_content["args"] == {"asset": "CH-6", "priority": "low"}
        assert ok.structured_content["pending_approval"] == []
        assert calls(ts[1]) == []  # a decision runs nothing

        resumed = await client.call_tool("resume_run", {"run_id": run_id})
        assert not resumed.is_error and resumed.structured_content is not None
        assert resumed.structured_content["status"] == "SUCCEEDED"
    assert calls(ts[1]) == [{"asset": "CH-6", "priority": "low"}]
    assert len(calls(ts[0])) == 1  # the finished step was not run again


async def test_ask_pauses_and_a_rejection_re_plans_on_resume(tmp_path: Path) -> None:
    prompts: list[str] = []
    second = """#Task1: tell someone
#Tool1: notify
#Args1: {"text": "look at CH-6"}
#Dependency1: None
"""

    def reply(call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "plan":
            prompts.append(messages_text(messages))
            return PLAN if len(prompts) == 1 else second
        return "done"

    ts = tools()
    server = build_server(
        ts, model=FunctionModel(function=reply), store=open_store(tmp_path / "r.sqlite3"),
        config=CONFIG,
    )
    async with Client(server) as client:
        asked = await client.call_tool("ask", {"question": "open a work order"})
        assert not asked.is_error and asked.structured_content is not None
        assert asked.structured_content["status"] == "WAITING_APPROVAL"
        assert asked.structured_content["answer"] is None
        run_id = asked.structured_content["run_id"]
        [pending] = asked.structured_content["pending_approval"]
        rejected = await client.call_tool(
            "reject_step", {"run_id": run_id, "step": pending["step_id"],
                            "reason": "use a notification"},
        )
        assert not rejected.is_error
        again = await client.call_tool(
            "reject_step", {"run_id": run_id, "step": pending["step_id"], "reason": "x"}
        )
        assert again.is_error and "already decided" in again.content[0].text  # and by whom
        assert "mcp client" in again.content[0].text
        resumed = await client.call_tool("resume_run", {"run_id": run_id})
        assert resumed.structured_content is not None
        assert resumed.structured_content["status"] == "SUCCEEDED"
    assert calls(ts[1]) == []
    assert calls(ts[2]) == [{"text": "look at CH-6"}]
    assert "use a notification" in prompts[-1]


async def test_a_paused_run_survives_a_server_restart_over_stdio(
    tmp_path: Path, serve_command: Any
) -> None:
    import sys

    from mcp import StdioServerParameters

    from planexec.examples import example_path

    store = tmp_path / "runs.sqlite3"
    config = tmp_path / "approval.toml"
    config.write_text("[approval]\nenabled = true\n")
    plan = example_path("plans/work_order.txt").read_text()

    def server(*extra: str) -> StdioServerParameters:
        args, env = serve_command(store, "--config", str(config), *extra)
        return StdioServerParameters(command=sys.executable, args=args, env=env)

    async with Client(server(), read_timeout_seconds=60) as client:
        ran = await client.call_tool("execute_plan", {"text": plan})
        assert ran.structured_content is not None
        assert ran.structured_content["status"] == "WAITING_APPROVAL"
        run_id = ran.structured_content["run_id"]
    # a new server process: the run is not its own unless it may see every run
    async with Client(server(), read_timeout_seconds=60) as client:
        refused = await client.call_tool("approve_step", {"run_id": run_id, "step": 3})
        assert refused.is_error and "made by this server" in refused.content[0].text
    async with Client(server("--all-runs"), read_timeout_seconds=60) as client:
        ok = await client.call_tool(
            "approve_step", {"run_id": run_id, "step": 3, "args": {"priority": "medium"}}
        )
        assert not ok.is_error, ok.content
        resumed = await client.call_tool("resume_run", {"run_id": run_id})
        assert resumed.structured_content is not None, resumed.content
        assert resumed.structured_content["status"] == "SUCCEEDED"
    with open_store(store) as recorded:
        starts = [e for e in recorded.events(run_id)
                  if e["type"] == "ToolCallStarted" and e["tool"] == "create_work_order"]
    assert [e["args"]["priority"] for e in starts] == ["medium"]  # called once, as approved


async def test_a_decision_with_the_key_of_a_request_the_step_replaced_is_refused(
    tmp_path: Path,
) -> None:
    """The client read step 2's request (priority high) with its request_key; the step
    then asked again (priority low: another process resuming, a replan). A decision sent
    with the key read records nothing; with the new request's key it is recorded."""
    from planexec.runs import request_key, waiting_steps
    from planexec.store.base import ApprovalRecord
    from planexec.store.codec import args_digest

    ts = tools()
    store = open_store(tmp_path / "runs.sqlite3")
    async with Client(build_server(ts, store=store, config=CONFIG)) as client:
        ran = await client.call_tool("execute_plan", {"text": PLAN})
        assert ran.structured_content is not None
        run_id = ran.structured_content["run_id"]
        [pending] = ran.structured_content["pending_approval"]
        [asked] = waiting_steps(store, run_id)
        assert pending["request_key"] == request_key(asked)
        again = {"asset": "CH-6", "priority": "low"}
        store.open_request(ApprovalRecord(
            run_id=run_id, plan_version=asked.plan_version, step_id=2, tool=asked.tool,
            server=asked.server, args=again, digest=args_digest(again), reason=asked.reason,
        ))
        [now] = waiting_steps(store, run_id)
        for tool, extra in (("approve_step", {}), ("reject_step", {"reason": "no"}),
                            ("approve_step", {"args": {"priority": "high"}})):
            stale = await client.call_tool(tool, {"run_id": run_id, "step": 2, **extra,
                                                  "request_key": pending["request_key"]})
            assert stale.is_error and request_key(now) in stale.content[0].text
        assert waiting_steps(store, run_id) == [now]  # nothing recorded
        assert not [e for e in store.events(run_id) if e["type"] == "ApprovalDecided"]
        read = await client.call_tool("get_run", {"run_id": run_id})  # what waits now
        assert read.structured_content is not None
        [fresh] = read.structured_content["pending_approval"]
        assert (fresh["args"], fresh["request_key"]) == (again, request_key(now))
        ok = await client.call_tool(
            "approve_step", {"run_id": run_id, "step": 2, "request_key": fresh["request_key"]}
        )
        assert not ok.is_error and ok.structured_content is not None
        assert ok.structured_content["args"] == again
    assert calls(ts[1]) == []
