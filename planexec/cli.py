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
from typing import Any, NoReturn

from planexec.errors import PlanexecError

__all__ = ["main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "parse": ("planexec.commands.plan", "parse a plan and print its steps and diagnostics"),
    "validate": ("planexec.commands.plan", "parse a plan and check it against tools"),
    "show": ("planexec.commands.plan", "draw a plan's step graph"),
    "run": ("planexec.commands.run", "execute a plan file with tools"),
    "demo": ("planexec.commands.demo", "run the built-in demo end to end (plan, execute, answer)"),
    "ask": ("planexec.commands.ask", "answer a question with the whole plan-execute-recover loop"),
    "runs": (
        "planexec.commands.runs",
        "the run history: list, show, resume, cancel, export, timeline",
    ),
    "serve": ("planexec.commands.serve", "run planexec as an MCP server"),
    "console": (
        "planexec.commands.console",
        "the runs console in the browser: runs, plans, timelines, approvals",
    ),
    "regress": ("planexec.commands.regress", "run regression scenarios (*.scenario.yaml)"),
}
"""Every subcommand: the module whose ``register(subparsers)`` adds it, and its one-line help.

The help is what ``planexec --help`` lists without importing the module (a test checks
that it matches what the module registers). Only the module of the command being run is
imported, so ``planexec --help`` and ``planexec parse`` load no model or tool library.
"""

COMMAND_MODULES = tuple(dict.fromkeys(module for module, _ in COMMANDS.values()))
"""The command modules, in the order their commands are listed."""


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


class _VersionAction(argparse.Action):
    """``--version``: print the installed version and exit (read only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        """Print ``planexec VERSION`` and exit 0."""
        sys.stdout.write(f"planexec {_version()}\n")
        parser.exit()


def build_parser(command: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """Build the argument parser.

    Args:
        command: with ``lazy``, the subcommand about to run: only its module is imported
            and registers its parsers.
        lazy: register the other subcommands from `COMMANDS` (name and help) without
            importing their modules; without it, every command module registers itself.

    Returns:
        The parser.
    """
    parser = _Parser(
        prog="planexec",
        description="Plan-and-execute tool calling that never drops an argument silently.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)"
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="show program's version number and exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = COMMANDS[command][0] if command in COMMANDS else None
    for cmd, (name, help_text) in COMMANDS.items():
        if cmd in sub.choices:
            continue  # registered with its module's other commands
        if lazy and name != wanted:
            # listed by name and help only: its module is imported when it runs
            sub.add_parser(cmd, help=help_text, add_help=False)
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command group that is not part of this build
        module.register(sub)
    return parser


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


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
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_word(words), lazy=True)
    args = parser.parse_args(words)
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
