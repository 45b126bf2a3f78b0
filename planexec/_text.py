"""Small text helpers shared by several modules (internal)."""

from __future__ import annotations

__all__ = ["snippet"]


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
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"
