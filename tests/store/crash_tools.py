"""Tools for the crash tests: each call is appended to a log file, and a call (or the
store's commit, or the moment after a step is recorded) can be made to block so the
test can SIGKILL the process at a known point.

Environment:
    PLANEXEC_CRASH_LOG: the file each tool call is appended to (``label pid``).
    PLANEXEC_CRASH_BLOCK: where to block: ``tool:LABEL``, ``after:LABEL`` or
        ``commit:LABEL`` (empty: never).
    PLANEXEC_CRASH_MARKER: the file written when the block point is reached.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool

BLOCK_LIMIT = 180.0  # a process nobody kills gives up after this long (exit code 3)


def block_point() -> str:
    return os.environ.get("PLANEXEC_CRASH_BLOCK", "")


def reached(point: str) -> None:
    """Tell the test the block point is reached (atomically: write, then rename)."""
    marker = Path(os.environ["PLANEXEC_CRASH_MARKER"])
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(f"{point} {os.getpid()}\n")
    tmp.replace(marker)


def block_sync(point: str) -> None:
    reached(point)
    deadline = time.monotonic() + BLOCK_LIMIT
    while time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(3)


async def block_async(point: str) -> None:
    reached(point)
    deadline = time.monotonic() + BLOCK_LIMIT
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    os._exit(3)


def _log(label: str) -> None:
    fd = os.open(os.environ["PLANEXEC_CRASH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{label} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


async def _call(label: str) -> dict[str, Any]:
    _log(label)
    if block_point() == f"tool:{label}":
        await block_async(f"tool:{label}")
    return {"label": label, "value": f"{label}-out"}


async def read(label: str, prev: str | None = None) -> dict[str, Any]:
    """Read something (safe to repeat)."""
    return await _call(label)


async def write(label: str, prev: str | None = None) -> dict[str, Any]:
    """Write something (not safe to repeat)."""
    return await _call(label)


def _tools() -> list[StructuredTool]:
    r = StructuredTool.from_function(coroutine=read, name="read")
    r.metadata = {"planexec": {"read_only": True}}
    w = StructuredTool.from_function(coroutine=write, name="write")
    return [r, w]


TOOLS = _tools()


def plan_text(tool2: str = "read") -> str:
    """Four steps: 1 → 2 → 3, and 1 → 4."""
    return f"""#Task1: first
#Tool1: read
#Args1: {{"label": "s1"}}
#Dependency1: None
#Task2: second
#Tool2: {tool2}
#Args2: {{"label": "s2", "prev": "<step_1.value>"}}
#Dependency2: #S1
#Task3: third
#Tool3: read
#Args3: {{"label": "s3", "prev": "<step_2.value>"}}
#Dependency3: #S2
#Task4: side branch
#Tool4: read
#Args4: {{"label": "s4", "prev": "<step_1.value>"}}
#Dependency4: #S1
"""
