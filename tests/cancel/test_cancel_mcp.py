"""Cancel through MCP: the cancel_run tool, and a client cancelling its own execute_plan."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from cancel_tools import PAY_PLAN, SLOW_PLAN, TOOLS  # noqa: E402
from mcp import Client  # noqa: E402

from planexec.config import AgentConfig  # noqa: E402
from planexec.errors import RunCancelledError  # noqa: E402
from planexec.mcp.server import build_server  # noqa: E402
from planexec.results import RunStatus  # noqa: E402
from planexec.runs import plan_resume  # noqa: E402
from planexec.store import SQLiteRunStore  # noqa: E402

pytestmark = pytest.mark.mcp

APPROVAL = AgentConfig.model_validate({"approval": {"enabled": True}})


async def running_run(store: SQLiteRunStore) -> str:
    """The id of the run whose slow call has started (bounded wait)."""
    for _ in range(600):
        await asyncio.sleep(0.1)
        for record in store.list_runs():
            if store.started_calls_without_result(record.run_id):
                return record.run_id
    raise AssertionError("no call started within 60 s")


async def test_cancel_run_stops_a_paused_run_and_resume_run_is_refused(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite3")
    try:
        async with Client(build_server(TOOLS, store=store, config=APPROVAL)) as client:
            ran = await client.call_tool("execute_plan", {"text": PAY_PLAN})
            assert ran.structured_content is not None
            run_id = ran.structured_content["run_id"]
            assert ran.structured_content["status"] == "WAITING_APPROVAL"
            done = await client.call_tool(
                "cancel_run", {"run_id": run_id, "reason": "wrong payee", "by": "ana"})
            assert not done.is_error and done.structured_content is not None
            assert done.structured_content["stopped"] is True
            resumed = await client.call_tool("resume_run", {"run_id": run_id})
            assert resumed.is_error
            foreign = await client.call_tool("cancel_run", {"run_id": "not-mine"})
            assert foreign.is_error
        assert store.get_run(run_id).status is RunStatus.CANCELLED
    finally:
        store.close()


async def test_cancel_run_stops_an_execute_plan_under_way(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite3")
    try:
        async with Client(build_server(TOOLS, store=store)) as client:
            running = asyncio.create_task(client.call_tool("execute_plan", {"text": SLOW_PLAN}))
            run_id = await running_run(store)
            asked = await client.call_tool("cancel_run", {"run_id": run_id, "reason": "enough"})
            assert asked.structured_content is not None
            assert asked.structured_content["stopped"] is False
            ran = await asyncio.wait_for(running, timeout=20)
            assert ran.structured_content is not None
            assert ran.structured_content["status"] == "CANCELLED"
        record = store.get_run(run_id)
        assert record.status is RunStatus.CANCELLED and "enough" in (record.error or "")
    finally:
        store.close()


async def test_a_client_cancelling_its_execute_plan_cancels_the_run(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite3")
    try:
        async with Client(build_server(TOOLS, store=store)) as client:
            running = asyncio.create_task(client.call_tool("execute_plan", {"text": SLOW_PLAN}))
            run_id = await running_run(store)
            running.cancel()  # the client sends notifications/cancelled for its request
            with pytest.raises(asyncio.CancelledError):
                await running
            for _ in range(200):  # bounded: 20 s
                if store.get_run(run_id).status is RunStatus.CANCELLED:
                    break
                await asyncio.sleep(0.1)
        assert store.get_run(run_id).status is RunStatus.CANCELLED
        request = store.cancel_request(run_id)  # a durable request, like any other
        assert request is not None and request.by == "mcp client"
        with pytest.raises(RunCancelledError):
            plan_resume(store, run_id, is_safe=lambda tool: True)
    finally:
        store.close()
