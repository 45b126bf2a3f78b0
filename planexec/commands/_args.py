"""Argument types shared by the commands (internal): checked at the edge, by argparse.

Each function is an argparse ``type``: it returns the value, or raises
`argparse.ArgumentTypeError` with a message that argparse prints on one line (exit 2).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

from planexec.errors import ConfigError

__all__ = [
    "int_in_range",
    "port_number",
    "positive_float",
    "positive_int",
    "read_input",
    "read_text_file",
]


def positive_float(text: str) -> float:
    """A finite number above zero (``--timeout 2.5``): ``0``, ``-1``, ``nan`` are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text!r}")
    return value


def int_in_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type for a whole number from ``low`` to ``high`` (inclusive; no top)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {span}, not {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in some messages
    return parse


positive_int = int_in_range(1)
"""A whole number of at least 1 (``--max-concurrency 4``)."""

port_number = int_in_range(0, 65535)
"""A TCP port: 0 (any free port) to 65535."""


def read_text_file(path: str, what: str) -> str:
    """Read a UTF-8 text file named on the command line.

    Args:
        path: The file.
        what: What it is, for the message (``"plan file"``).

    Raises:
        ConfigError: it cannot be read, or is not UTF-8 text (one line naming it).
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"cannot read {what} {path!r}: it is not UTF-8 text "
            f"(byte {exc.start}: {exc.reason})"
        ) from exc


def read_input(path: str, what: str) -> str:
    """Read a UTF-8 text file, or standard input for ``-``.

    Raises:
        ConfigError: it cannot be read, or is not UTF-8 text (one line naming it).
    """
    if path != "-":
        return read_text_file(path, what)
    text = sys.stdin.read()
    try:
        text.encode("utf-8")  # undecodable bytes come in as lone surrogates
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"cannot read {what} from standard input: it is not UTF-8 text "
            f"(character {exc.start})"
        ) from exc
    return text
