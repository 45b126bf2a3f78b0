"""Logging through loguru, with the run and the step bound to every record.

planexec never configures sinks itself (a library must not); the CLI does. Every
fallback, repair and skip logs a warning through `step_log` so the run and step
are in context.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

__all__ = ["logger", "run_log", "step_log"]


def run_log(run_id: str | None, **extra: Any) -> Any:
    """Return a logger with ``run_id`` bound."""
    return logger.bind(run_id=run_id or "-", **extra)


def step_log(run_id: str | None, step_id: int | None, **extra: Any) -> Any:
    """Return a logger with ``run_id`` and ``step_id`` bound."""
    return logger.bind(run_id=run_id or "-", step_id=step_id, **extra)
