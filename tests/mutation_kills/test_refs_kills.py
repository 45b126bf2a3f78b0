"""Reference-grammar behaviours that once survived mutation (issue 33; mutation/mutants.toml).

Oracles: the `Ref` values the public functions of `planexec.parsing.refs` give, and the
plan's diagnostics from `parse_plan`.
"""

from __future__ import annotations

from planexec import parse_plan
from planexec.parsing.refs import (
    MAX_INDEX_DIGITS,
    MAX_STEP_DIGITS,
    find_refs,
    free_placeholders,
    malformed_refs,
    parse_path,
    parse_ref,
)
from planexec.plan import Ref


def test_an_index_of_max_index_digits_is_read_and_one_more_is_not() -> None:
    """Kills refs-index-digits-off-by-one (``>`` → ``>=``) and its opposite."""
    assert MAX_INDEX_DIGITS == 18
    big = "9" * MAX_INDEX_DIGITS
    ref = parse_ref(f"<step_1[{big}]>")
    assert ref is not None and (ref.step, ref.path, ref.hint) == (1, (int(big),), None)
    assert parse_path(f"[-{big}]") == (-int(big),)
    too_long = parse_ref(f"<step_1[{big}9]>")
    assert too_long is None or too_long.path != (int(big + "9"),)
    assert parse_path(f"[{big}9]") is None


def test_a_step_number_of_max_step_digits_is_read_and_one_more_is_not() -> None:
    """Kills refs-step-digits-off-by-one."""
    ok = parse_ref("<step_" + "1" * MAX_STEP_DIGITS + ">")
    assert ok is not None and ok.step == int("1" * MAX_STEP_DIGITS) and ok.hint is None
    long = "<step_" + "1" * (MAX_STEP_DIGITS + 1) + ">"
    assert parse_ref(long) is None
    assert [ex for _, ex in malformed_refs(long)] == [long]


def test_single_quoted_keys_decode_their_escapes() -> None:
    """Kills refs-sq-escapes-kept."""
    ref = parse_ref("<step_1['it\\'s']>")
    assert ref is not None and ref.path == ("it's",)
    assert parse_path("['a\\\\b']") == ("a\\b",)


def test_double_quoted_keys_decode_json_escapes() -> None:
    """Kills refs-dq-escapes-kept."""
    ref = parse_ref('<step_1["say \\"hi\\""]>')
    assert ref is not None and ref.path == ('say "hi"',)


def test_the_first_step_a_hint_mentions_is_its_step() -> None:
    """Kills refs-mention-last-wins (hint forms of all dialects)."""
    rewoo = parse_ref("{#E3 value from step_2}", "rewoo")
    assert rewoo is not None and rewoo.is_hinted and rewoo.step == 3
    rewoo = parse_ref("{step_2 value, not #E3}", "rewoo")
    assert rewoo is not None and rewoo.step == 2
    llmc = parse_ref("{$4 then step_2}", "llmcompiler")
    assert llmc is not None and llmc.step == 4
    hashstep = parse_ref("{id_from_step_2_or_step_5}")
    assert hashstep is not None and hashstep.step == 2


def test_a_free_placeholder_refers_to_the_first_step_its_words_name() -> None:
    """Kills refs-free-mention-last-wins."""
    value, refs = free_placeholders("<output from Task2 then Task5>")
    assert isinstance(value, Ref) and [r.step for r in refs] == [2]
    value, refs = free_placeholders("<the chiller id>", deps=(4, 1))
    assert isinstance(value, Ref) and value.step == 4  # no mention: the first dependency


def test_a_whole_string_overlong_step_reference_is_malformed_not_a_free_placeholder() -> None:
    """Kills refs-long-step-free-placeholder."""
    text = "<step_1234567890>"
    value, refs = free_placeholders(find_refs(text))
    assert (value, refs) == (text, [])
    assert [ex for _, ex in malformed_refs(text)] == [text]
    for text in ("{step_1234567890}", "{{ step_1234567890 }}"):
        assert free_placeholders(find_refs(text))[1] == []
    parsed = parse_plan('#Task1: a\n#Tool1: t\n#Args1: {"x": "<step_1234567890>"}\n'
                        "#Dependency1: None\n")
    assert "REF_MALFORMED" in {d.code for d in parsed.diagnostics}
    assert parsed.steps[0].refs == ()


def test_an_html_tag_is_text_not_a_free_placeholder() -> None:
    """Kills refs-html-tag-placeholder."""
    for tag in ("<b>", "<br>", "{b}"):
        assert free_placeholders(tag) == (tag, []), tag
    value, refs = free_placeholders("<chiller>")
    assert isinstance(value, Ref) and len(refs) == 1
