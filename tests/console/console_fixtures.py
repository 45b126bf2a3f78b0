"""Helpers of the console tests: a run store holding a failed run and two waiting ones."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
"""This folder (on the subprocesses' path, for `console_tools`)."""


@dataclass(frozen=True)
class Recorded:
    store: Path
    failed: str
    pay: str
    close: str


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the planexec CLI in a fresh interpreter, with these tests' tools importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from planexec.cli import main; sys.exit(main())",
            *argv,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def newest_run(path: Path) -> str:
    from planexec.store import SQLiteRunStore

    store = SQLiteRunStore(path)
    try:
        return store.list_runs(limit=1)[0].run_id
    finally:
        store.close()


def record_runs(tmp: Path) -> Recorded:
    """Three runs recorded by ``planexec run``: failed, and two paused for approval."""
    import console_tools

    store = tmp / "runs.sqlite3"
    config = tmp / "approval.toml"
    config.write_text("[approval]\nenabled = true\n", encoding="utf-8")
    ids = {}
    for name, text in console_tools.PLANS.items():
        plan = tmp / f"{name}.txt"
        plan.write_text(text, encoding="utf-8")
        done = cli(
            "run",
            str(plan),
            "--tools",
            "console_tools:TOOLS",
            "--store",
            str(store),
            "--config",
            str(config),
            cwd=tmp,
        )
        assert done.returncode in (1, 3), done.stderr
        ids[name] = newest_run(store)
    return Recorded(store=store, failed=ids["failed"], pay=ids["pay"], close=ids["close"])
