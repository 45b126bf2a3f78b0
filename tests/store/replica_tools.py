"""Tools for the two-replica test: a read-only lookup and a destructive call that appends
each call to ``$PLANEXEC_REPLICA_LOG`` (``asset pid``), so the test counts real calls
across processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from langchain_core.tools import StructuredTool


def assets() -> list[str]:
    """The assets of the site."""
    return ["CH-6"]


def open_order(asset: str, priority: str) -> dict[str, str]:
    """Open a work order for an asset (destructive: it is a real change)."""
    with Path(os.environ["PLANEXEC_REPLICA_LOG"]).open("a", encoding="utf-8") as fh:
        fh.write(f"{asset} {os.getpid()}\n")
    time.sleep(0.3)  # a call that takes a while: the other replica's resume overlaps it
    return {"id": f"WO-{asset}-{priority}"}


TOOLS = [
    StructuredTool.from_function(assets, metadata={"read_only": True}),
    StructuredTool.from_function(open_order, metadata={"destructive": True}),
]
