"""A temporary PostgreSQL cluster from the machine's own server binaries (tests and CI).

The store tests' session fixture (``conftest.py``) and ``.ci/run`` both start one here:
``initdb`` and ``pg_ctl`` in a temporary directory, listening on 127.0.0.1 only (and a
socket in that directory), trust authentication for the local superuser, stopped and
removed at the end. Run as root, the server runs as the ``postgres`` user (``runuser``).

As a script (``.ci/run``)::

    python tests/store/pg_cluster.py start DIR   # prints the URL
    python tests/store/pg_cluster.py stop DIR
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["find_bindir", "start", "stop"]

_PORT_FILE = "port"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (``$PG_BINDIR``, PATH, Debian's), or None."""
    env = os.environ.get("PG_BINDIR")
    candidates = [Path(env)] if env else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    return None


def _as_server_user(cmd: list[str]) -> list[str]:
    """``cmd`` run as ``postgres`` when we are root (the server refuses to run as root)."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(base: Path, bindir: Path | None = None, timeout: float = 60.0) -> str:
    """Create and start a cluster under ``base`` (created); return its URL.

    Raises:
        RuntimeError: no server binaries, or ``initdb``/``pg_ctl`` failed (with its output).
    """
    bindir = bindir or find_bindir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    base.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(base, pw.pw_uid, pw.pw_gid)
    data = base / "data"
    port = _free_port()
    steps = [
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "-E", "UTF8", "--no-instructions"],
        [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w",
         "-t", str(int(timeout)), "-o",
         f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c max_connections=200",
         "start"],
    ]
    for cmd in steps:
        proc = subprocess.run(  # noqa: S603 - our own command line
            _as_server_user(cmd), capture_output=True, text=True, timeout=timeout + 30,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            log = base / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{Path(cmd[0]).name} failed ({proc.returncode}): {proc.stdout}{proc.stderr}{tail}"
            )
    (base / _PORT_FILE).write_text(str(port))
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def stop(base: Path, bindir: Path | None = None) -> None:
    """Stop the cluster under ``base`` (if it runs) and remove ``base``."""
    bindir = bindir or find_bindir()
    data = base / "data"
    if bindir is not None and (data / "postmaster.pid").exists():
        subprocess.run(  # noqa: S603 - our own command line
            _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                             "-t", "60", "stop"]),
            capture_output=True, timeout=90, stdin=subprocess.DEVNULL, check=False,
        )
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: pg_cluster.py start|stop DIR")
    if sys.argv[1] == "start":
        print(start(Path(sys.argv[2])))
    else:
        stop(Path(sys.argv[2]))
