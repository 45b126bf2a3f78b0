"""Logging through loguru, with the run and the step bound to every record.

planexec is quiet as a library: it adds no sink, and its records are disabled at import
(``logger.disable("planexec")`` in ``planexec/__init__.py``), so a program that uses
loguru itself sees nothing from planexec until it asks. `enable_logging` turns the
records on, optionally with a sink of its own or routed into the standard library's
`logging`; `disable_logging` turns them off again. The CLI enables them and adds its
stderr sink. Every fallback, repair and skip logs a warning through `step_log`, so the
run and step are in context (``extra["run_id"]``, ``extra["step_id"]``).

Example:
    >>> import logging
    >>> from planexec import enable_logging, disable_logging
    >>> sink = enable_logging(stdlib=True)   # into logging.getLogger("planexec.<module>")
    >>> disable_logging(sink)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from loguru import logger

__all__ = [
    "LOG_FORMAT",
    "NOTICE_CODES",
    "disable_logging",
    "enable_logging",
    "level_of",
    "logger",
    "quiet",
    "run_log",
    "step_log",
]

NOTICE_CODES = frozenset({"REF_HINTED", "ARG_FILTERED"})
"""Codes of findings that need nobody's action, logged at INFO (shown with ``-v``).

A hinted reference (``REF_HINTED``) is what planners write; the filter tier reading one
(``ARG_FILTERED``) is a deterministic resolution, recorded with the argument. Every other
repair, fallback or skip is a warning.
"""


def level_of(code: str) -> str:
    """The log level of a finding with this code: ``INFO`` for `NOTICE_CODES`, else ``WARNING``."""
    return "INFO" if code in NOTICE_CODES else "WARNING"


LOG_FORMAT = "{level: <7} run={extra[run_id]} step={extra[step_id]} | {message}"
"""The format of the CLI's log lines (and of `enable_logging` with a sink)."""

_PACKAGE = "planexec"


def run_log(run_id: str | None, **extra: Any) -> Any:
    """Return a logger with ``run_id`` bound."""
    return logger.bind(run_id=run_id or "-", **extra)


_QUIET: ContextVar[bool] = ContextVar("planexec_quiet", default=False)


class _Silent:
    """A logger that drops every record (see `quiet`)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@contextmanager
def quiet() -> Iterator[None]:
    """Drop `step_log` records in this context.

    For work whose findings are reported again later, e.g. the streaming parser's
    parses of a partial reply (`planexec.parsing.streaming`): the whole reply's parse
    logs every diagnostic once.
    """
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def step_log(run_id: str | None, step_id: int | None, **extra: Any) -> Any:
    """Return a logger with ``run_id`` and ``step_id`` bound (a silent one under `quiet`)."""
    if _QUIET.get():
        return _Silent()
    return logger.bind(run_id=run_id or "-", step_id=step_id, **extra)


def _to_stdlib(message: Any) -> None:
    """A loguru sink that hands each record to the `logging` logger of its module."""
    record = message.record
    std = logging.getLogger(record["name"] or _PACKAGE)
    level = record["level"].no
    if not std.isEnabledFor(level):
        return
    exc = record["exception"]
    std.handle(
        std.makeRecord(
            std.name,
            level,
            record["file"].path,
            record["line"],
            record["message"],
            (),
            (exc.type, exc.value, exc.traceback) if exc is not None else None,
            func=record["function"],
            extra={
                "run_id": record["extra"].get("run_id", "-"),
                "step_id": record["extra"].get("step_id"),
            },
        )
    )


def enable_logging(
    sink: Any = None, *, level: str | int = "WARNING", stdlib: bool = False
) -> int | None:
    """Turn planexec's log records on (they are off in a library by default).

    Args:
        sink: A loguru sink (a file-like object, a path, a function...) to add for
            planexec's records only, with `LOG_FORMAT`. None: add none (the records go
            to the sinks loguru already has, e.g. its default stderr one).
        level: The lowest level the added sink takes.
        stdlib: Route the records into the standard library's `logging` instead: each
            goes to ``logging.getLogger(<its planexec module>)`` (under ``planexec``),
            with ``run_id`` and ``step_id`` attributes on the `logging.LogRecord`.

    Returns:
        The id of the sink added (give it to `disable_logging`), or None.
    """
    logger.enable(_PACKAGE)
    if stdlib:
        return logger.add(_to_stdlib, level=level, filter=_PACKAGE, format="{message}")
    if sink is not None:
        return logger.add(
            sink,
            level=level,
            filter=_PACKAGE,
            format=LOG_FORMAT,
        )
    return None


def disable_logging(sink: int | None = None) -> None:
    """Turn planexec's log records off again (and remove ``sink``, if given)."""
    logger.disable(_PACKAGE)
    if sink is not None:
        logger.remove(sink)
