"""Small text helpers shared by several modules (internal)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["as_text", "clip", "cut", "snippet"]


def cut(text: str, budget: int) -> str:
    """``text``, or its first ``budget`` characters with a marker saying how much was cut.

    For texts a reader (or a model) must know are incomplete: prompts, step errors. A
    short display that only has to fit takes `clip`.
    """
    if len(text) <= budget:
        return text
    return f"{text[: max(0, budget)]}… [cut: {budget} of {len(text)} characters shown]"


def clip(text: str, width: int) -> str:
    """``text``, or its first ``width - 1`` characters and ``…``: at most ``width`` in all."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def as_text(value: Any) -> str:
    """A value as text for messages and prompts: strings as they are, others as JSON."""
    if isinstance(value, str):
        return value
    from planexec.results import jsonable  # not at import: reading plans does without

    try:
        return json.dumps(jsonable(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def snippet(text: str, width: int = 60) -> str:
    """Shorten ``text`` to one line of at most ``width`` characters.

    Every run of white space (newlines included) becomes one space; a longer text is
    cut and ends with ``…``.

    Args:
        text: the text.
        width: the most characters returned.

    Returns:
        The one-line text.
    """
    return clip(" ".join(text.split()), width)
