"""`contains_placeholder` answers text with no placeholder character at once, and the same."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.parsing import refs
from planexec.parsing.refs import contains_placeholder

DIALECTS = (None, "hashstep", "rewoo", "llmcompiler")

# Text made of the pieces placeholders are made of (and the letters that fold to them
# under IGNORECASE: the long s and the Kelvin sign), so that both answers occur often.
PIECES = st.sampled_from(
    ["<", ">", "{", "}", "{{", "}}", "#E", "$", "${", "step", "STEP", "Step_", "ſtep",
     "_", ".", "[0]", "1", "12", " ", "from_", "of_", "id", "site", "K", "name", "()", "\n"]
)
TEXTS = st.lists(PIECES, max_size=12).map("".join) | st.text(max_size=40)


def _without_shortcut(text: str, dialect: str | None, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The answer of the full check: the prefilter replaced by one that never skips."""
    with monkeypatch.context() as m:
        m.setattr(refs, "_PLACEHOLDER_CHANCE_RE", re.compile(""))
        return contains_placeholder(text, dialect=dialect)


@settings(max_examples=400)
@given(text=TEXTS, dialect=st.sampled_from(DIALECTS))
def test_the_shortcut_never_changes_the_answer(text: str, dialect: str | None) -> None:
    with pytest.MonkeyPatch.context() as mp:
        expected = _without_shortcut(text, dialect, mp)
    assert contains_placeholder(text, dialect=dialect) is expected


@pytest.mark.parametrize(
    ("text", "dialect"),
    [("<step_1>", None), ("{step_2.id}", None), ("{{x}}", None), ("<site name>", None),
     ("ASSET_ID_FROM_STEP_1", None), ("step3", None), ("#E1", "rewoo"), ("$1", "llmcompiler"),
     ("${2}", "llmcompiler"), ("{current_date_time()}", None)],
)
def test_every_placeholder_form_passes_the_shortcut(text: str, dialect: str | None) -> None:
    assert refs._PLACEHOLDER_CHANCE_RE.search(text) is not None
    assert contains_placeholder(text, dialect=dialect)


def test_plain_data_is_not_a_placeholder() -> None:
    assert not contains_placeholder({"ok": 1, "site": "Main", "note": "50% done"})
