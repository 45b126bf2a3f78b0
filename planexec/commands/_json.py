"""The JSON text the commands print (internal; light: no rich, no events)."""

from __future__ import annotations

import json
from typing import Any

from planexec.results import jsonable

__all__ = ["to_json"]


def to_json(data: Any, **kwargs: Any) -> str:
    """The JSON text the commands print: always valid JSON.

    The data goes through `planexec.results.jsonable` first (NaN and infinities become
    the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; objects that are not JSON
    data their encodings), and ``allow_nan=False`` guarantees no bare ``NaN`` is ever
    written. ``kwargs`` go to `json.dumps` (``indent``, ``ensure_ascii``...).
    """
    return json.dumps(jsonable(data), allow_nan=False, **kwargs)
