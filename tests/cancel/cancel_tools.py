"""Tools for the cancel tests: a call that waits a minute (unsafe), a read, a payment."""

from __future__ import annotations

import asyncio
import sys

from langchain_core.tools import StructuredTool

from planexec.testing import fake_tool


async def _wait_a_minute(label: str) -> str:
    print(f"TOOL STARTED {label}", file=sys.stderr, flush=True)
    await asyncio.sleep(60)
    return "done"


TOOLS = [
    StructuredTool.from_function(coroutine=_wait_a_minute, name="slow_write",
                                 description="writes, slowly (no safety hints: unsafe)"),
    fake_tool("read", {"ok": True}, hints={"read_only": True}),
    fake_tool("pay", {"paid": True}, args={"amount": int}, hints={"destructive": True}),
]

SLOW_PLAN = (
    "#Step1: read\n#Tool1: read\n#Args1: {}\n#Dependency1: None\n\n"
    '#Step2: write slowly\n#Tool2: slow_write\n#Args2: {"label": "s2"}\n#Dependency2: #S1\n\n'
    "#Step3: read again\n#Tool3: read\n#Args3: {}\n#Dependency3: #S2\n"
)
PAY_PLAN = '#Step1: pay\n#Tool1: pay\n#Args1: {"amount": 5}\n'
