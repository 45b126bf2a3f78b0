"""One way to cut a text: `planexec._text.cut` (marked) and `clip` (fits a width)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from planexec._text import clip, cut, snippet


@given(st.text(max_size=50), st.integers(min_value=1, max_value=60))
def test_clip_fits_the_width_and_keeps_a_prefix(text: str, width: int) -> None:
    out = clip(text, width)
    assert len(out) <= width
    if len(text) <= width:
        assert out == text
    else:
        assert out.endswith("…") and text.startswith(out[:-1]) and len(out) == width


@given(st.text(max_size=50), st.integers(min_value=0, max_value=60))
def test_cut_says_how_much_of_the_text_is_shown(text: str, budget: int) -> None:
    out = cut(text, budget)
    if len(text) <= budget:
        assert out == text
    else:
        assert out.startswith(text[:budget])
        assert out[budget:] == f"… [cut: {budget} of {len(text)} characters shown]"


def test_snippet_is_one_clipped_line() -> None:
    assert snippet("a\n  b\tc", 60) == "a b c"
    assert snippet("word " * 20, 10) == "word word…"
