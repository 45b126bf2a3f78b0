"""The ``planexec`` command.

Each group of subcommands lives in its own module under `planexec.commands` and
registers itself through a ``register(subparsers)`` function; ``main`` only wires them.

Every error is one line on standard error, ``planexec: error: ...``, with exit status 2:
bad arguments (checked by argparse types, e.g. ``--timeout 0``), files that cannot be
read or are not UTF-8 text, invalid settings, and operating-system errors (a port in
use). Ctrl-C exits 130 (see `planexec.commands._interrupt`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from planexec.errors import PlanexecError

__all__ = ["main"]

COMMAND_MODULES = (
    "planexec.commands.plan",
    "planexec.commands.run",
    "planexec.commands.demo",
    "planexec.commands.ask",
    "planexec.commands.runs",
    "planexec.commands.serve",
    "planexec.commands.regress",
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``planexec run: error: ...``)."""

    def error(self, message: str) -> NoReturn:
        """Print the error on one line, with where to find the usage; exit 2."""
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(message: str) -> str:
    """A message on one line: its lines joined, after a colon with a space, else with "; "."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    out = lines[0]
    for line in lines[1:]:
        out += (" " if out.endswith(":") else "; ") + line
    return out


def _version() -> str:
    """The installed distribution's version (``unknown`` when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planexec")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every subcommand registered."""
    parser = _Parser(
        prog="planexec",
        description="Plan-and-execute tool calling that never drops an argument silently.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)"
    )
    parser.add_argument("--version", action="version", version=f"planexec {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command group that is not part of this build
        module.register(sub)
    return parser


def _configure_logging(verbosity: int) -> int:
    """Send planexec's log to standard error; returns the sink id to remove later.

    The log is the CLI's one channel for warnings (fallbacks, retries, repairs): the
    progress display does not repeat them. planexec's records are off in a library
    (`planexec.enable_logging`); the CLI turns them on for the command.
    """
    from loguru import logger

    logger.remove()
    logger.enable("planexec")
    level = {0: "WARNING", 1: "INFO"}.get(verbosity, "DEBUG")
    logger.configure(extra={"run_id": "-", "step_id": "-"})
    def to_stderr(message: object) -> None:
        # Whatever sys.stderr is at the time: it may be replaced (capsys, redirection).
        sys.stderr.write(str(message))

    return logger.add(
        to_stderr,
        level=level,
        colorize=False,
        format="{level: <7} run={extra[run_id]} step={extra[step_id]} | {message}",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``planexec`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from loguru import logger

    sink = _configure_logging(args.verbose)
    try:
        code = args.func(args)
    except PlanexecError as exc:
        print(f"planexec: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:  # a file read by code that does not say which
        print(f"planexec: error: a file is not UTF-8 text: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the port is in use
        print(f"planexec: error: {one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("planexec: interrupted", file=sys.stderr)
        return 130
    finally:
        with contextlib.suppress(ValueError):  # a command may have reset the sinks itself
            logger.remove(sink)
        logger.disable("planexec")  # a library again (main may run inside a program)
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
