"""Run the crash-test plan with step 2's ``write`` needing approval, recording to SQLite.

Usage: python approval_driver.py STORE RUN_ID

The in-process approval callback blocks at ``approval:s2`` (see crash_tools), so the
test can SIGKILL the process while it waits for a person's decision.
"""

from __future__ import annotations

import asyncio
import sys

import crash_tools

from planexec.agent import PlanExecuteAgent
from planexec.approval import ApprovalDecision, ApprovalRequest
from planexec.config import AgentConfig
from planexec.store import SQLiteRunStore


async def blocking_approver(request: ApprovalRequest) -> ApprovalDecision:
    """A person who never answers: blocks until killed."""
    await crash_tools.block_async(f"approval:{request.args.get('label')}")
    return ApprovalDecision.approve(by="nobody")  # pragma: no cover - killed first


def main(argv: list[str]) -> int:
    store_path, run_id = argv
    store = SQLiteRunStore(store_path)
    config = AgentConfig.model_validate({"approval": {"tools": ["write"]}})
    agent = PlanExecuteAgent(
        None, crash_tools.TOOLS, config=config, store=store, approver=blocking_approver
    )
    run = asyncio.run(
        agent.execute_plan(crash_tools.plan_text("write"), question="approval", run_id=run_id)
    )
    store.close()
    print(run.status.value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
