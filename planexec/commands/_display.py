"""What the commands that show step results share on screen (internal)."""

from __future__ import annotations

import json
from typing import Any

from planexec.results import StepStatus, jsonable

__all__ = ["STEP_STYLES", "to_json"]


def to_json(data: Any, **kwargs: Any) -> str:
    """The JSON text the commands print: always valid JSON.

    The data goes through `planexec.results.jsonable` first (NaN and infinities become
    the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; objects that are not JSON
    data their encodings), and ``allow_nan=False`` guarantees no bare ``NaN`` is ever
    written. ``kwargs`` go to `json.dumps` (``indent``, ``ensure_ascii``...).
    """
    return json.dumps(jsonable(data), allow_nan=False, **kwargs)

STEP_STYLES: dict[StepStatus, str] = {
    StepStatus.SUCCEEDED: "green",
    StepStatus.FAILED: "red",
    StepStatus.BLOCKED: "yellow",
    StepStatus.SKIPPED: "cyan",
    StepStatus.CANCELLED: "magenta",
}
"""The rich style of each step status (statuses not listed have none)."""
