"""Resume a run once a barrier file appears, so two processes resume it at the same moment.

Usage: python resume_driver.py STORE RUN_ID BARRIER

Prints the run's status, or ``refused: <message>`` when another driver holds the run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import crash_tools

from planexec.agent import PlanExecuteAgent
from planexec.errors import RunError
from planexec.runs import resume_run
from planexec.store import SQLiteRunStore


def main(argv: list[str]) -> int:
    store_path, run_id, barrier = argv
    store = SQLiteRunStore(store_path)
    agent = PlanExecuteAgent(None, crash_tools.TOOLS, store=store)
    with open(f"{barrier}.ready.{os.getpid()}", "w") as fh:  # imported, store open
        fh.write("ready")
    deadline = time.monotonic() + 60
    while not os.path.exists(barrier):
        if time.monotonic() > deadline:
            return 4
        time.sleep(0.001)
    try:
        run = asyncio.run(resume_run(agent, store, run_id))
    except RunError as exc:
        print(f"refused: {exc}")
        return 2
    finally:
        store.close()
    print(run.status.value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
