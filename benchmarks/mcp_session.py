"""Cost per MCP tool call over stdio: one persistent session vs a process per call.

The system planexec replaces started the tool server and opened a new MCP session for
every tool call. planexec keeps ONE session per server open for the whole run
(`planexec.mcp.MCPToolset`). This script measures both on the demo ``iot`` server
(``python -m planexec.examples.mcp_server iot``), calling the ``asset`` tool:

- ``persistent``: open the toolset once, then ``--calls`` calls through it; per-call
  cost excludes the one-time start (reported separately, and amortized over the run);
- ``per_call``: for each of ``--fresh`` calls, start the server, open a session, list
  tools, call, close — what a process-per-call client pays.

Writes ``benchmarks/results/mcp_session.json``; the figure of merit is the ratio
``per_call_ms / persistent_ms`` measured in the same run.

    python benchmarks/mcp_session.py [--calls 200] [--fresh 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from loguru import logger

from planexec.mcp import MCPToolset

RESULTS = Path(__file__).resolve().parent / "results"
ARGS = {"site_name": "MAIN", "asset_id": "CWC04006"}


def config() -> dict[str, Any]:
    server = {"command": sys.executable, "args": ["-m", "planexec.examples.mcp_server", "iot"]}
    return {"mcpServers": {"iot": server}}


async def persistent(calls: int) -> dict[str, float]:
    started = time.perf_counter()
    async with MCPToolset(config()) as toolset:
        opened = time.perf_counter()
        session = toolset.session("iot")
        await session.call("asset", ARGS)  # warm-up
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            out = await session.call("asset", ARGS)
            times.append(time.perf_counter() - t0)
            assert out["id"] == "CWC04006"
    total = time.perf_counter() - started
    return {
        "startup_ms": (opened - started) * 1000,
        "ms_per_call": statistics.mean(times) * 1000,
        "median_ms_per_call": statistics.median(times) * 1000,
        "amortized_ms_per_call": total * 1000 / (calls + 1),
    }


async def per_call(calls: int) -> dict[str, float]:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        async with MCPToolset(config()) as toolset:
            out = await toolset.session("iot").call("asset", ARGS)
        times.append(time.perf_counter() - t0)
        assert out["id"] == "CWC04006"
    return {
        "ms_per_call": statistics.mean(times) * 1000,
        "median_ms_per_call": statistics.median(times) * 1000,
    }


async def main_async(calls: int, fresh: int) -> dict[str, Any]:
    kept = await persistent(calls)
    fresh_stats = await per_call(fresh)
    return {
        "benchmark": "mcp_session",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "server": "planexec.examples.mcp_server iot (stdio)",
        "tool": "asset",
        "persistent": {"calls": calls, **{k: round(v, 3) for k, v in kept.items()}},
        "per_call": {"calls": fresh, **{k: round(v, 3) for k, v in fresh_stats.items()}},
        "ratio_per_call_over_persistent": round(
            fresh_stats["ms_per_call"] / kept["ms_per_call"], 1
        ),
        "ratio_per_call_over_persistent_amortized": round(
            fresh_stats["ms_per_call"] / kept["amortized_ms_per_call"], 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls over the persistent session")
    parser.add_argument("--fresh", type=int, default=10, help="calls with a process each")
    args = parser.parse_args()
    logger.remove()
    result = asyncio.run(main_async(args.calls, args.fresh))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "mcp_session.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
