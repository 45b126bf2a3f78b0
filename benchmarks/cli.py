"""Start-up cost of the command line and of the library, as whole processes.

Each command runs in a fresh interpreter (``sys.executable``), its wall time measured
from outside (start to exit, interpreter start-up included), ``--repeat`` times in
interleaved rounds (one run of every command per round, so drift hits them alike);
medians with min and max are reported, and each median's ratio to the bare interpreter
(``python -c pass``) measured in the same run. The load-proof figure is whether
``langchain_core`` / ``langsmith`` were imported (``sys.modules`` after the command).

Commands:

- ``python``: ``python -c pass`` (the floor);
- ``help``: ``planexec --help``;
- ``parse``: ``planexec parse PLAN`` (a demo plan shipped with planexec);
- ``import_executor``: ``python -c "from planexec import Executor"`` (tools are
  langchain-core tools, so this one loads langchain-core);
- ``langgraph``: ``python -c "import langgraph.graph"`` for comparison, when installed.

Writes ``benchmarks/results/cli.json``. The machine may be busy (other jobs): quote the
medians and the spread.

    python benchmarks/cli.py [--repeat 15] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PLAN = ROOT / "planexec" / "examples" / "plans" / "ask_work_order.txt"
HEAVY = ("langchain_core", "langsmith")

_PROBE = (
    "import json, sys, runpy\n"
    "sys.argv = {argv!r}\n"
    "try:\n"
    "    {body}\n"
    "except SystemExit:\n"
    "    pass\n"
    "heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r})\n"
    "sys.__stderr__.write('\\nHEAVY ' + json.dumps(heavy) + '\\n')\n"
)


def commands() -> dict[str, list[str]]:
    """The commands timed, by name (each a whole process)."""
    py = sys.executable
    script = Path(py).with_name("planexec")  # the installed console script
    cli = [str(script)] if script.exists() else [py, "-m", "planexec.cli"]
    out = {
        "python": [py, "-c", "pass"],
        "help": [*cli, "--help"],
        "parse": [*cli, "parse", str(PLAN)],
        "import_executor": [py, "-c", "from planexec import Executor"],
    }
    if importlib.util.find_spec("langgraph") is not None:
        out["langgraph"] = [py, "-c", "import langgraph.graph"]
    return out


def env() -> dict[str, str]:
    """This checkout first on the path, as the tests run it."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}


def wall(cmd: list[str]) -> float:
    """Seconds from start to exit of one run of ``cmd`` (output thrown away)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=env(), cwd=ROOT)
    return time.perf_counter() - t0


def heavy_loaded(name: str, cmd: list[str]) -> list[str] | None:
    """The heavy libraries ``cmd`` imports (None for commands that are not planexec's)."""
    if name in ("python", "langgraph"):
        return None
    if name in ("help", "parse"):
        body = "runpy.run_module('planexec.cli', run_name='__main__')"
        argv = ["planexec", *cmd[-2 if name == "parse" else -1:]]
    else:
        body = cmd[2]
        argv = ["-c"]
    code = _PROBE.format(argv=argv, body=body, heavy=set(HEAVY))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env(), cwd=ROOT, check=False)
    line = next(x for x in out.stderr.splitlines() if x.startswith("HEAVY "))
    return list(json.loads(line.removeprefix("HEAVY ")))


def stats(times: list[float]) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "runs_s": [round(t, 4) for t in times],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS / "cli.json")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else args.repeat
    cmds = commands()
    for cmd in cmds.values():  # warm the file cache and the bytecode
        wall(cmd)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            times[name].append(wall(cmd))
    floor = statistics.median(times["python"])
    out: dict[str, Any] = {
        "benchmark": "cli",
        "repeat": repeat,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "commands": {},
    }
    for name, cmd in cmds.items():
        entry = stats(times[name])
        entry["command"] = " ".join(
            ["python" if c == sys.executable else Path(c).name if c.startswith(os.sep) and
             not c.startswith(str(ROOT)) else c for c in cmd]
        ).replace(str(ROOT) + os.sep, "")
        entry["ratio_to_python"] = round(entry["median_s"] / floor, 2)
        entry["heavy_loaded"] = heavy_loaded(name, cmd)
        out["commands"][name] = entry
        print(f"{name:>16}: median {entry['median_s']:.3f}s (min {entry['min_s']:.3f}, "
              f"max {entry['max_s']:.3f}; x{entry['ratio_to_python']} python -c pass)"
              + (f", loads {entry['heavy_loaded']}" if entry["heavy_loaded"] else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
