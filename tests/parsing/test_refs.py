from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.parsing.refs import (
    contains_placeholder,
    find_refs,
    iter_ref_spans,
    parse_path,
    parse_ref,
    path_like_suffixes,
    ref_at,
)
from planexec.plan import Ref, Template, format_path, iter_refs, to_jsonable

# --- parse_ref: the grammar -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "step", "path"),
    [
        ("<step_1>", 1, ()),
        ("{step_2}", 2, ()),
        ("{{step_3}}", 3, ()),
        ("{{ step_3 }}", 3, ()),
        ("  <step_4>  ", 4, ()),
        ("<step_2.items[0].id>", 2, ("items", 0, "id")),
        ('{step_5.fm_to_sensors["excess purge"]}', 5, ("fm_to_sensors", "excess purge")),
        ("{step_5.fm_to_sensors['excess purge']}", 5, ("fm_to_sensors", "excess purge")),
        ("{step_1[0]}", 1, (0,)),
        ("{step_1[-1].name}", 1, (-1, "name")),
        ('<step_7["a \\"quoted\\" key"]>', 7, ('a "quoted" key',)),
        ("{Step_12}", 12, ()),
    ],
)
def test_plain_references_give_the_step_and_the_path(
    text: str, step: int, path: tuple[Any, ...]
) -> None:
    ref = parse_ref(text)
    assert ref is not None
    assert (ref.step, ref.path, ref.hint) == (step, path, None)
    assert ref.raw == text.strip()


def test_the_canonical_form_writes_the_path_back() -> None:
    ref = parse_ref('{step_5.fm_to_sensors["excess purge"]}')
    assert ref is not None
    assert ref.canonical == '<step_5.fm_to_sensors["excess purge"]>'


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ("{step_1_selected_site}", 1),
        ("{asset_id_for_Chiller_6_from_step_2}", 2),
        ("{step_1.find(name='X').id}", 1),
        ("{step_1.find(name='CWC04009').id}", 1),
        ("{step_2_site}", 2),
        ("{{the site chosen in step 3}}", 3),
        ("<site from step_4>", 4),
    ],
)
def test_hinted_references_keep_the_step_number_and_the_raw_text(text: str, step: int) -> None:
    ref = parse_ref(text)
    assert ref is not None
    assert ref.step == step
    assert ref.is_hinted
    assert ref.raw == text
    assert ref.hint == text.strip("{}<>").strip()
    assert ref.canonical == text


@pytest.mark.parametrize(
    "text",
    ["{current_date_time()}", "{site_name}", '{"step_1": 1}', "{stepfather}", "step_1", "<b>"],
)
def test_texts_without_a_step_or_that_look_like_json_are_not_references(text: str) -> None:
    assert parse_ref(text) is None


def test_a_dollar_reference_exists_only_in_the_llmcompiler_dialect() -> None:
    assert parse_ref("$5") is None
    assert parse_ref("$5", "rewoo") is None
    ref = parse_ref("$5", "llmcompiler")
    assert ref is not None and ref.step == 5
    braced = parse_ref("${12}", "llmcompiler")
    assert braced is not None and braced.step == 12


def test_a_price_in_a_hashstep_string_is_left_alone() -> None:
    assert find_refs({"note": "costs $5 per unit"}) == {"note": "costs $5 per unit"}


def test_a_hash_e_reference_exists_only_in_the_rewoo_dialect() -> None:
    assert parse_ref("#E1") is None
    assert parse_ref("#E1", "llmcompiler") is None
    ref = parse_ref("#E1", "rewoo")
    assert ref is not None and ref.step == 1
    assert parse_ref("#E1x", "rewoo") is None


# --- dialect references with paths -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dialect", "step", "path"),
    [
        ("#E1.assets[0].type", "rewoo", 1, ("assets", 0, "type")),
        ('#E2["asset id"]', "rewoo", 2, ("asset id",)),
        ("#E3[-1]", "rewoo", 3, (-1,)),
        ("#E1.The", "rewoo", 1, ("The",)),
        ("$1.asset_id", "llmcompiler", 1, ("asset_id",)),
        ("${1}.asset_id", "llmcompiler", 1, ("asset_id",)),
        ('$1["k"]', "llmcompiler", 1, ("k",)),
        ("$1['k']", "llmcompiler", 1, ("k",)),
        ("$1[0]", "llmcompiler", 1, (0,)),
        ('${12}[ 0 ]["a b"].c', "llmcompiler", 12, (0, "a b", "c")),
    ],
)
def test_dialect_references_take_the_same_path_grammar_as_step_references(
    text: str, dialect: str, step: int, path: tuple[Any, ...]
) -> None:
    ref = parse_ref(text, dialect)
    assert ref is not None
    assert (ref.step, ref.path, ref.hint, ref.raw) == (step, path, None, text)
    found = find_refs(text, dialect=dialect, location="positional[0]")
    assert isinstance(found, Ref) and found.whole_value and found.path == path


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("given #E1.", "."),
        ("given #E1. The end", ". The end"),
        ("#E1 .name", " .name"),
        ("#E1, then #E1's name", "'s name"),
        ("#E1.\nname", ".\nname"),
        ("#E1.5 points", ".5 points"),
    ],
)
def test_a_sentence_ending_after_a_hash_e_reference_is_no_path(text: str, rest: str) -> None:
    found = find_refs(text, dialect="rewoo")
    assert isinstance(found, Template)
    assert all(r.step == 1 and r.path == () for r in found.refs)
    assert found.parts[-1] == rest
    assert path_like_suffixes(found) == []


def test_a_price_is_no_dollar_reference_and_dollar_is_no_reference_outside_llmcompiler() -> None:
    assert find_refs("costs $5.00", dialect="llmcompiler") == "costs $5.00"
    assert find_refs("$5.name") == "$5.name"
    assert find_refs("$1.asset_id", dialect="rewoo") == "$1.asset_id"
    assert find_refs("#E1.name", dialect="llmcompiler") == "#E1.name"


def test_an_embedded_dialect_reference_keeps_its_path_and_the_text_after_it() -> None:
    found = find_refs("hometown of $1.player.name.", dialect="llmcompiler")
    assert isinstance(found, Template)
    assert found.canonical == "hometown of <step_1.player.name>."


def test_ref_at_reads_one_reference_with_its_path_at_a_position() -> None:
    got = ref_at("f($1.a[0], 2)", 2, "llmcompiler")
    assert got is not None and got[0].path == ("a", 0) and got[1] == 9
    assert ref_at("$1", 5, "llmcompiler") is None
    assert ref_at("x$1", 0, "llmcompiler") is None


@pytest.mark.parametrize(
    ("text", "dialect", "suffix"),
    [
        ("{step_1}.name", "hashstep", ".name"),
        ("<step_2>[0]", "hashstep", "[0]"),
        ("{{step_3}}.items", "hashstep", ".items"),
        ("{step_1_site}.name", "hashstep", ".name"),
        ("#E1[name] and more", "rewoo", "[name]"),
        ("$1[name]", "llmcompiler", "[name]"),
    ],
)
def test_path_like_text_right_after_a_reference_is_kept_as_text_and_found(
    text: str, dialect: str, suffix: str
) -> None:
    found = find_refs({"a": [text]}, dialect=dialect)
    tpl = found["a"][0]
    assert isinstance(tpl, Template)
    assert "".join(p if isinstance(p, str) else p.raw for p in tpl.parts) == text
    [(ref, got)] = path_like_suffixes(found)
    assert got == suffix and ref is tpl.parts[0]


@pytest.mark.parametrize("text", ["{step_1}. Done", "<step_1> [x]", "{step_1}", "a {step_1}"])
def test_text_after_a_reference_that_is_no_path_is_not_reported(text: str) -> None:
    assert path_like_suffixes(find_refs(text)) == []


def test_a_hinted_rewoo_reference_names_its_step_with_hash_e() -> None:
    ref = parse_ref("<Name from #E1>", "rewoo")
    assert ref is not None and ref.step == 1 and ref.hint == "Name from #E1"
    assert parse_ref("<Name from #E1>") is None


def test_a_string_with_more_than_one_reference_is_no_single_reference() -> None:
    assert parse_ref("<step_1> and <step_2>") is None


# --- find_refs: whole, embedded, location -----------------------------------------------


def test_a_whole_value_reference_becomes_a_ref_with_its_location() -> None:
    found = find_refs({"filters": [{"a": 1}, {"asset_id": "{step_2}"}]})
    ref = found["filters"][1]["asset_id"]
    assert isinstance(ref, Ref)
    assert ref.whole_value
    assert ref.location == "args.filters[1].asset_id"
    assert found["filters"][0] == {"a": 1}


def test_references_inside_longer_text_become_a_template() -> None:
    found = find_refs({"q": "between <step_1> and {step_3.x}"})
    tpl = found["q"]
    assert isinstance(tpl, Template)
    assert [r.step for r in tpl.refs] == [1, 3]
    assert all(not r.whole_value and r.location == "args.q" for r in tpl.refs)
    assert tpl.canonical == "between <step_1> and <step_3.x>"


def test_keys_that_are_not_identifiers_are_quoted_in_the_location() -> None:
    found = find_refs({"excess purge": ["x", "<step_1>"]})
    assert found["excess purge"][1].location == 'args["excess purge"][1]'


def test_references_inside_escaped_json_in_a_string_are_found() -> None:
    text = '[{"timestamp": 1623456000, "tonnage": {step_4}}, {"tonnage": {step_5}}, ...]'
    found = find_refs({"json_string": text})
    tpl = found["json_string"]
    assert isinstance(tpl, Template)
    assert [r.step for r in tpl.refs] == [4, 5]
    assert tpl.canonical == text.replace("{step_4}", "<step_4>").replace("{step_5}", "<step_5>")


def test_find_refs_leaves_the_input_unchanged_and_keeps_tuples() -> None:
    value = {"a": ["{step_1}"], "b": ("<step_2>", 3)}
    before = json.dumps(value, default=list)
    found = find_refs(value, location="positional")
    assert json.dumps(value, default=list) == before
    assert isinstance(found["b"], tuple)
    assert found["b"][0].location == "positional.b[0]"


def test_rewoo_inputs_embed_hash_e_references() -> None:
    found = find_refs("#E2 player hometown", dialect="rewoo", location="positional[0]")
    assert isinstance(found, Template)
    assert found.canonical == "<step_2> player hometown"


def test_llmcompiler_dollar_references_are_found_nested() -> None:
    found = find_refs(["$1", ["${2}"], "total of $3 items"], dialect="llmcompiler")
    assert [r.step for r in iter_refs(found)] == [1, 2, 3]
    assert isinstance(found[0], Ref) and found[0].whole_value
    assert isinstance(found[2], Template)


def test_existing_refs_and_scalars_pass_through() -> None:
    ref = Ref(step=1)
    assert find_refs(ref) is ref
    assert find_refs([1, 2.5, None, True]) == [1, 2.5, None, True]


def test_iter_ref_spans_gives_offsets() -> None:
    spans = iter_ref_spans("a <step_1> b")
    assert [(s, e) for s, e, _ in spans] == [(2, 10)]


# --- contains_placeholder ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "<step_1>",
        "{step_2}",
        "{{step_3}}",
        "{step_1_selected_site}",
        "{anything_step_2_here}",
        "{current_date_time()}",
        "{site_name}",
        "{{ anything }}",
        "prefix {step_2.items[0]} suffix",
        "prefix {step-2} suffix",
        "prefix {step_ 2} suffix",
        "prefix {step_-1} suffix",
        "see {#S1} here",
        "see {{ #S1 }} here",
        "see <#S1> here",
        "see {Task-3 output} here",
        {"a": ["x", {"b": "<step_9>"}]},
        Ref(step=1),
        Template(("x", Ref(step=1))),
    ],
)
def test_contains_placeholder_flags_anything_that_looks_like_a_reference(value: Any) -> None:
    assert contains_placeholder(value)


@pytest.mark.parametrize(
    "value",
    ["MAIN", '{"a": 1}', "$5", "#E1", "x < 5 and y > 3", 42, None, {"a": [1, "b"]}, "{1, 2}",
     "task 1 is done", "step-by-step", '{"note": "see step-2"}'],
)
def test_contains_placeholder_ignores_plain_values(value: Any) -> None:
    assert not contains_placeholder(value)


def test_dialect_specific_placeholders_are_flagged_only_for_their_dialect() -> None:
    assert contains_placeholder("#E1", dialect="rewoo")
    assert contains_placeholder("price $5", dialect="llmcompiler")
    assert not contains_placeholder("price $5", dialect="rewoo")


def test_parse_path_rejects_what_is_not_a_path() -> None:
    assert parse_path('.items[0]["k"]') == ("items", 0, "k")
    assert parse_path(".find(x)") is None


# --- property: references inserted anywhere round-trip ----------------------------------

_KEY_ALPHA = "abcXYZ_09 -\"'}>].{"
_LIT = st.text(
    alphabet=st.characters(blacklist_characters="<>{}$#", blacklist_categories=("Cs",)),
    max_size=8,
)
_PATH = st.lists(
    st.one_of(st.integers(-3, 40), st.text(alphabet=_KEY_ALPHA, min_size=1, max_size=8)),
    max_size=4,
)


@st.composite
def _ref_text(draw: st.DrawFn) -> tuple[str, str, int]:
    step = draw(st.integers(0, 9999))
    path = tuple(draw(_PATH))
    form = draw(st.sampled_from(["<{}>", "{{{}}}", "{{{{{}}}}}"]))
    body = f"step_{step}{format_path(path)}"
    text = form.format(body)
    return text, f"<{body}>", step


_PLAIN = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    _LIT,
)


@st.composite
def _leaf(draw: st.DrawFn) -> tuple[Any, Any]:
    kind = draw(st.sampled_from(["plain", "whole", "embedded"]))
    if kind == "plain":
        v = draw(_PLAIN)
        return v, v
    text, canon, _ = draw(_ref_text())
    if kind == "whole":
        return text, canon
    pre, post = draw(_LIT), draw(_LIT)
    if not (pre + post).strip():
        return pre + text + post, canon
    return pre + text + post, pre + canon + post


def _pairs_list(xs: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    return [a for a, _ in xs], [b for _, b in xs]


def _pairs_dict(d: dict[str, tuple[Any, Any]]) -> tuple[Any, Any]:
    return {k: a for k, (a, _) in d.items()}, {k: b for k, (_, b) in d.items()}


_KEYS = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=6)
def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4).map(_pairs_list),
        st.dictionaries(_KEYS, children, max_size=4).map(_pairs_dict),
    )


_VALUES = st.recursive(_leaf(), _containers, max_leaves=20)


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for elem in path:
        value = value[elem]
    return value


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_any_json_value_with_references_inserted_round_trips(pair: tuple[Any, Any]) -> None:
    value, expected = pair
    found = find_refs(value)
    assert to_jsonable(found) == expected
    for ref in iter_refs(found):
        path = parse_path(ref.location[len("args") :])
        assert path is not None
        holder = _at(value, path)
        assert isinstance(holder, str)
        assert ref.raw in holder
        assert ref.whole_value == (holder.strip() == ref.raw)
        assert parse_ref(ref.raw) is not None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.sampled_from(["hashstep", "rewoo", "llmcompiler", "bogus"]))
def test_find_refs_and_contains_placeholder_never_raise_on_any_string(
    text: str, dialect: str
) -> None:
    found = find_refs({"a": text}, dialect=dialect)
    contains_placeholder(found)
    contains_placeholder(text, dialect=dialect)
    parse_ref(text, dialect)


# --- property: dialect references with paths round-trip ---------------------------------

_DIALECT_FORMS = [("rewoo", "#E{}"), ("llmcompiler", "${}"), ("llmcompiler", "${{{}}}")]
_PROSE = st.text(
    alphabet=st.characters(blacklist_characters="<>{}$#", blacklist_categories=("Cs",)),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 9999),
    _PATH,
    st.sampled_from(_DIALECT_FORMS),
    st.sampled_from(["whole", "embedded"]),
    _PROSE,
    _PROSE,
)
def test_dialect_references_with_any_path_round_trip(
    step: int,
    path_list: list[Any],
    form: tuple[str, str],
    kind: str,
    pre: str,
    post: str,
) -> None:
    dialect, pattern = form
    path = tuple(path_list)
    raw = pattern.format(step) + format_path(path)
    canon = f"<step_{step}{format_path(path)}>"
    ref = parse_ref(raw, dialect)
    assert ref is not None
    assert (ref.step, ref.path, ref.raw, ref.canonical) == (step, path, raw, canon)
    if kind == "whole":
        found = find_refs({"x": raw}, dialect=dialect)
        assert isinstance(found["x"], Ref) and found["x"].whole_value
        assert to_jsonable(found) == {"x": canon}
        return
    # prose around the reference, separated by a space so it cannot extend the path
    text = f"{pre} {raw} {post}"
    found = find_refs({"x": text}, dialect=dialect)
    assert [(r.step, r.path, r.raw) for r in iter_refs(found)] == [(step, path, raw)]
    whole = not (pre + post).strip()
    assert to_jsonable(found) == {"x": canon if whole else f"{pre} {canon} {post}"}
    assert next(iter_refs(found)).whole_value == whole
    assert path_like_suffixes(found) == []


# --- placeholder text that names a step, angle placeholders, keys --------------------


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ("[site from step 1]", 1),
        ("ASSET_ID_FROM_STEP_1", 1),
        ("asset_id_from_step_12", 12),
        ("site_of_step2", 2),
        ("step_3", 3),
        ("STEP_4_site", 4),
    ],
)
def test_text_naming_a_step_is_a_whole_value_hinted_reference(text: str, step: int) -> None:
    ref = find_refs({"a": text})["a"]
    assert isinstance(ref, Ref) and ref.step == step and ref.is_hinted and ref.whole_value
    assert contains_placeholder(text)


def test_a_bracketed_step_mention_inside_text_is_embedded() -> None:
    value = find_refs("use [the site from step 2] here")
    assert isinstance(value, Template) and value.refs[0].step == 2 and value.refs[0].is_hinted


@pytest.mark.parametrize(
    "text",
    [
        "Chiller 6",
        "a <b> tag",
        "SOP_STEP_3",
        "step 1 of the procedure",
        "FOOTSTEP_1",
        "[1, 2, 3]",
        '["step 1", "x"]',
        "see [note 3]",
        "x_step_2",
    ],
)
def test_ordinary_text_is_no_reference_and_no_placeholder(text: str) -> None:
    assert find_refs(text) == text
    assert not contains_placeholder(text)


@pytest.mark.parametrize("text", ["<site_name>", " <asset id> ", "<YOUR_API_KEY>"])
def test_a_whole_angle_placeholder_is_a_placeholder(text: str) -> None:
    assert find_refs(text) == text  # names no step: not a reference
    assert contains_placeholder(text)


def test_placeholders_in_dict_keys_are_found() -> None:
    assert contains_placeholder({"tags": {"{step_1}": 1}})
    assert contains_placeholder([{"<site_name>": 1}])
    assert not contains_placeholder({"tags": {"temp": 1}})
