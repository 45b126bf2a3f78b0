"""What every command prints through: JSON text and a rich console (internal).

Light on purpose (no events, no run machinery): ``planexec parse`` imports it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from planexec._json import json_data

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["DEFAULT_WIDTH", "console", "terminal_width", "to_json"]


def to_json(data: Any, **kwargs: Any) -> str:
    """The JSON text the commands print: always valid JSON.

    The data goes through `planexec.results.jsonable` first (by way of its fast path,
    `planexec._json.json_data`): NaN and infinities become the strings ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``; objects that are not JSON data their encodings;
    and ``allow_nan=False`` guarantees no bare ``NaN`` is ever written. ``kwargs`` go
    to `json.dumps` (``indent``, ``ensure_ascii``...).
    """
    return json.dumps(json_data(data), allow_nan=False, **kwargs)


DEFAULT_WIDTH = 160
"""Columns of the commands' tables when no terminal tells (a pipe, a CI log)."""


def terminal_width() -> int:
    """The width the commands draw at: the terminal's, whichever standard stream is one.

    ``COLUMNS`` (when set to a positive number) wins; without a terminal (output piped or
    captured) it is `DEFAULT_WIDTH`, so a log keeps whole rows rather than rich's 80.
    """
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for fd in (1, 2, 0):
        try:
            width = os.get_terminal_size(fd).columns
        except (OSError, ValueError):
            continue
        if width > 0:
            return width
    return DEFAULT_WIDTH


def console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """A rich console for a command's output, as wide as `terminal_width`.

    Args:
        stderr: Write to standard error instead of standard output.
        **kwargs: More `rich.console.Console` options (``highlight`` is off by default).
    """
    from rich.console import Console

    kwargs.setdefault("highlight", False)
    return Console(stderr=stderr, width=terminal_width(), **kwargs)
