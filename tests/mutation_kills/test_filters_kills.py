"""Filter-tier and grounding behaviours that once survived mutation (issue 33).

Through the public functions of `planexec.filters` (`parse_hint`, `apply_query`,
`apply_path`, `hint_literals`) and `planexec.grounding.OutputIndex`. Oracle: outputs
built so that exactly one answer is right (or none is, and the tier must say so).
"""

from __future__ import annotations

from typing import Any

import pytest

from planexec.filters import (
    Filtered,
    FilterMiss,
    apply_path,
    apply_query,
    hint_literals,
    parse_hint,
)
from planexec.grounding import HintLiteral, OutputIndex
from planexec.plan import Ref
from planexec.resolver import follow_path

ASSETS = {"assets": [{"id": "CH-6", "name": "Chiller 6"}, {"id": "CH-7", "name": "Chiller 7"},
                     {"id": "CH-8", "name": "Chiller 8"}]}


def query(hint: str, output: Any, *, step: int = 1) -> Filtered:
    q = parse_hint(Ref(step, hint=hint, raw="{" + hint + "}"), prose=True)
    assert q is not None, hint
    return apply_query(q, output, follow_path)


def test_first_and_last_pick_the_first_and_the_last_item() -> None:
    """Kills filters-first-last-swapped."""
    assert query("step_1.assets.first.id", ASSETS).value == "CH-6"
    assert query("step_1.assets.last.id", ASSETS).value == "CH-8"
    assert query("step_1.assets.first().id", ASSETS).path == ("assets", 0, "id")
    picked = apply_path(ASSETS, ("assets", "last", "id"), follow_path)
    assert picked is not None and picked.value == "CH-8"


def test_len_counts_the_items() -> None:
    """Kills filters-len-not-counted."""
    out = query("step_1.assets.len", ASSETS)
    assert (out.value, out.counted) == (3, True)
    assert parse_hint(Ref(1, hint="step_1.assets.len.id")) is None  # len ends the path


def test_first_on_a_dict_holding_one_list_uses_it_and_on_several_lists_refuses() -> None:
    """Kills filters-pick-one-of-several-lists."""
    assert query("step_1.first.id", ASSETS).value == "CH-6"
    with pytest.raises(FilterMiss):
        query("step_1.first", {"a": [1, 2], "b": [3]})
    with pytest.raises(FilterMiss):
        query("step_1.len", {"a": [1, 2], "b": [3]})
    with pytest.raises(FilterMiss):
        query("step_1.last", {"a": [1, 2], "b": [3]})


def test_a_word_form_field_named_by_several_keys_is_not_guessed() -> None:
    """Kills filters-several-keys-first."""
    assert query("step_1_site", {"site": "MAIN", "n": 2}).value == "MAIN"
    with pytest.raises(FilterMiss, match="2 keys"):
        query("step_1_site", {"a": {"site": "MAIN"}, "b": {"site": "SOUTH"}})


def test_find_selects_the_one_matching_item_and_refuses_several() -> None:
    """Kills filters-select-several-first."""
    assert query("step_1.assets.find(name='Chiller 7').id", ASSETS).value == "CH-7"
    twins = {"assets": [{"id": "A", "kind": "pump"}, {"id": "B", "kind": "pump"}]}
    with pytest.raises(FilterMiss):
        query("step_1.assets.find(kind='pump').id", twins)
    with pytest.raises(FilterMiss):
        query("step_1.assets.find(name='Chiller 9').id", ASSETS)


def test_an_explicit_filter_looks_at_the_list_items_not_every_dict_below() -> None:
    """Kills filters-explicit-anywhere."""
    output = {"items": [{"id": "A", "owner": {"name": "X"}}, {"id": "B", "name": "Y"}]}
    assert query("step_1.items.find(name='Y').id", output).value == "B"
    with pytest.raises(FilterMiss):  # the nested owner dict is no item of the list
        query("step_1.items.find(name='X')", output)
    with pytest.raises(FilterMiss):
        query("step_1.find(name='X')", output)


def test_the_prose_form_looks_anywhere() -> None:
    """Kills filters-prose-not-anywhere (the opposite of the explicit filter)."""
    output = {"site": {"assets": [{"asset_id": "CH-6", "label": "Chiller 6"}]}}
    assert query("asset_id for Chiller 6 from step_1", output).value == "CH-6"


def test_a_hint_that_names_no_filter_is_no_query() -> None:
    """Kills filters-no-filter-still-query."""
    assert parse_hint(Ref(1, hint="step_1.assets[0].id")) is None
    assert parse_hint(Ref(1, hint="step_1 .assets")) is None
    assert parse_hint(Ref(1, hint="step_1.assets.first.id")) is not None


def test_a_hint_of_another_step_is_no_query() -> None:
    """Kills filters-step-mismatch-ignored."""
    assert parse_hint(Ref(2, hint="step_1.assets.first")) is None
    assert parse_hint(Ref(2, hint="step_1_site")) is None


def test_filter_literals_of_a_hint_are_strict_constraints() -> None:
    """Kills filters-literals-dropped and filters-loose-literals-dropped."""
    assert hint_literals(Ref(1, hint="step_1.find(name='CWC04009').id")) == (
        HintLiteral("name", "CWC04009", True),
    )
    assert hint_literals(Ref(1, hint="step_1.assets[kind=pump].id")) == (
        HintLiteral("kind", "pump", True),
    )
    # a hint the grammar cannot read as a whole still constrains with key='v'
    assert hint_literals(Ref(1, hint="step_1 asset with key='v', its id")) == (
        HintLiteral("key", "v", True),
    )


def test_a_keyed_literal_is_carried_only_by_that_key() -> None:
    """Kills grounding-keyed-literal-any-key."""
    output = [{"id": "CH-6", "name": "Chiller 6", "note": "next to Chiller 7"},
              {"id": "CH-7", "name": "Chiller 7"}]
    index = OutputIndex({1: output})
    wanted = [HintLiteral("name", "Chiller 7")]
    assert index.satisfying("CH-7", wanted)
    assert not index.satisfying("CH-6", wanted)
    output[0]["note"] = "Chiller 7"
    index = OutputIndex({1: output})
    assert not index.satisfying("CH-6", wanted)  # under "note", not "name"
    assert index.satisfying("CH-6", [HintLiteral(None, "Chiller 7")])


def test_every_literal_must_be_carried() -> None:
    """Kills grounding-any-literal-suffices."""
    index = OutputIndex({1: [{"id": "A", "kind": "pump", "site": "MAIN"},
                             {"id": "B", "kind": "pump", "site": "SOUTH"}]})
    both = [HintLiteral("kind", "pump"), HintLiteral("site", "SOUTH")]
    assert index.satisfying("B", both)
    assert not index.satisfying("A", both)
    assert [v for v, _ in index.satisfying_values(both)] == ["B", "pump", "SOUTH"]


def test_a_list_value_satisfies_a_hint_only_when_every_element_does() -> None:
    """Kills grounding-list-not-all."""
    index = OutputIndex({1: [{"id": "CH-6", "name": "Chiller 6"},
                             {"id": "CH-7", "name": "Chiller 7"},
                             {"id": "CH-8", "name": "Chiller 7"}]})
    wanted = [HintLiteral("name", "Chiller 7")]
    assert index.satisfying(["CH-7", "CH-8"], wanted)
    assert not index.satisfying(["CH-7", "CH-6"], wanted)
    assert not index.satisfying(["CH-6", "CH-7"], wanted)
    assert not index.satisfying([], wanted)


def test_free_text_found_nowhere_is_free_not_ungrounded() -> None:
    """Kills grounding-free-text-held: a note of five words or more than 60 characters
    is never held to grounding, even where the outputs hold text under the same key."""
    index = OutputIndex({1: {"note": "the pump is fine today", "id": "CH-6"}})
    assert index.ground("note", "please look at the chiller soon").status == "free"
    assert index.ground("note", "x" * 61).status == "free"
    assert index.ground("note", "pump fine").status == "ungrounded"  # short: held
    assert index.ground("id", "CH-9").status == "ungrounded"
    assert index.ground("id", "CH-6").status == "grounded"


def test_a_value_is_found_in_text_only_as_a_whole_word() -> None:
    """Kills grounding-in-text-unbounded: CH-6 is not grounded by CH-60."""
    index = OutputIndex({1: {"note": "check CH-60 today", "other": "see CH-7, then stop"}})
    assert index.find("CH-6") == []
    [(where, _)] = index.find("CH-60")
    assert (where.step, where.path, where.in_text) == (1, ("note",), True)
    assert [w.path for w, _ in index.find("ch-7")] == [("other",)]


def test_a_made_up_identifier_of_the_outputs_shape_is_held_to_grounding() -> None:
    """Kills grounding-shape-ignored: CH-7 looks like the outputs' CH-6 and CH-8 (under a
    key the argument's name does not relate to), so a CH-7 found nowhere is ungrounded."""
    index = OutputIndex({1: [{"name": "CH-6"}, {"name": "CH-8"}]})
    assert [v for v, _ in index.candidates("asset", "CH-7")] == ["CH-6", "CH-8"]
    assert index.held("asset", "CH-7")
    assert index.ground("asset", "CH-7").status == "ungrounded"
    assert not index.held("asset", "XJ9000")  # another shape, no related key: not held
