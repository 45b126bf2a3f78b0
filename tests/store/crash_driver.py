"""Run the crash-test plan in this process, recording to a SQLite or PostgreSQL store.

Usage: python crash_driver.py STORE RUN_ID TOOL2   (STORE: a file, or a postgresql:// URL)

Blocks where ``PLANEXEC_CRASH_BLOCK`` says (see crash_tools), so the test can kill it.
``PLANEXEC_CRASH_RESULT_DELAY`` sets the store's ``result_delay`` (default: the store's).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import crash_tools

from planexec.agent import PlanExecuteAgent
from planexec.events import Event, StepFinished
from planexec.store import PostgresRunStore, SQLiteRunStore
from planexec.store.postgres import is_postgres_url


def _label(data: dict[str, Any]) -> str | None:
    args = data.get("args") or (data.get("result") or {}).get("args") or {}
    return args.get("label") if isinstance(args, dict) else None


def block_in_commit(batch: list[dict[str, Any]]) -> None:
    """Block inside the write transaction that records ``commit:LABEL``'s result."""
    point = crash_tools.block_point()
    for data in batch:
        if data["type"] == "StepFinished" and point == f"commit:{_label(data)}":
            crash_tools.block_sync(point)


class CrashStore(SQLiteRunStore):
    """Blocks inside the write transaction that records ``commit:LABEL``'s result."""

    def _before_commit(self, batch: list[dict[str, Any]]) -> None:
        block_in_commit(batch)


class CrashPostgresStore(PostgresRunStore):
    """The same, on PostgreSQL (the statements are on the server, not committed)."""

    def _before_commit(self, batch: list[dict[str, Any]]) -> None:
        block_in_commit(batch)


async def after_recorded(event: Event) -> None:
    """Subscribed after the store: blocks once ``after:LABEL``'s result is durable."""
    if isinstance(event, StepFinished):
        label = (event.result.args or {}).get("label")
        if crash_tools.block_point() == f"after:{label}":
            await crash_tools.block_async(f"after:{label}")


def main(argv: list[str]) -> int:
    store_path, run_id, tool2 = argv
    delay = os.environ.get("PLANEXEC_CRASH_RESULT_DELAY")
    kind = CrashPostgresStore if is_postgres_url(store_path) else CrashStore
    store = kind(store_path, **({"result_delay": float(delay)} if delay else {}))
    agent = PlanExecuteAgent(None, crash_tools.TOOLS, store=store, event_handlers=[after_recorded])
    run = asyncio.run(
        agent.execute_plan(crash_tools.plan_text(tool2), question="crash test", run_id=run_id)
    )
    store.close()
    print(run.status.value)
    return 0 if run.status.value == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
