from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.errors import PlanParseError
from planexec.parsing.rewoo import parse_rewoo
from planexec.plan import Plan, Ref, Template, to_jsonable

CORPUS = Path(__file__).parents[2] / ".." / "shared" / "corpus" / "real_plans"


def _codes(plan: Plan) -> set[str]:
    return {d.code for d in plan.diagnostics}


def test_canonical_plan_lines_then_steps() -> None:
    plan = parse_rewoo(
        "Plan: Search the winner.\n#E1 = Google[2024 Australian Open winner]\n\n"
        "Plan: Ask about the winner.\n#E2 = LLM[Who won, given #E1]\n"
    )
    assert plan.dialect == "rewoo"
    assert plan.ids == (1, 2)
    first, second = plan.steps
    assert first.tool == "Google"
    assert first.task == "Search the winner."
    assert first.positional == ("2024 Australian Open winner",)
    assert first.args == {}
    assert first.lines == (1, 2)
    tpl = second.positional[0]
    assert isinstance(tpl, Template)
    assert tpl.canonical == "Who won, given <step_1>"
    assert second.depends_on == (1,)
    assert plan.diagnostics == ()


def test_an_input_that_is_exactly_one_reference_is_whole_value() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = Search[x]\nPlan: b\n#E2 = Summarize[#E1]")
    ref = plan.step(2).positional[0]
    assert isinstance(ref, Ref) and ref.whole_value and ref.location == "positional[0]"


def test_a_reference_with_a_path_is_followed_into_the_result() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = Search[x]\nPlan: b\n#E2 = Lookup[#E1.assets[0].type]")
    ref = plan.step(2).positional[0]
    assert isinstance(ref, Ref) and ref.whole_value
    assert (ref.step, ref.path, ref.raw) == (1, ("assets", 0, "type"), "#E1.assets[0].type")
    assert plan.step(2).depends_on == (1,)
    assert plan.diagnostics == ()


def test_quoted_and_embedded_references_with_paths() -> None:
    plan = parse_rewoo(
        'Plan: a. #E1 = Search[x]\nPlan: b. #E2 = Lookup["#E1[\\"asset id\\"]"]\n'
        "Plan: c. #E3 = LLM[Compare #E2.name with #E1[\"k\"][1].]"
    )
    whole = plan.step(2).positional[0]
    assert isinstance(whole, Ref) and whole.path == ("asset id",)
    tpl = plan.step(3).positional[0]
    assert isinstance(tpl, Template)
    assert tpl.canonical == "Compare <step_2.name> with <step_1.k[1]>."


def test_a_reference_at_the_end_of_a_sentence_takes_no_period() -> None:
    plan = parse_rewoo(
        "Plan: a. #E1 = Search[x]\nPlan: b. #E2 = LLM[Who won, given #E1. The rest is prose.]"
    )
    tpl = plan.step(2).positional[0]
    assert isinstance(tpl, Template)
    assert tpl.canonical == "Who won, given <step_1>. The rest is prose."
    assert "REF_SUFFIX_TEXT" not in _codes(plan)


def test_bracketed_text_after_a_reference_that_is_no_path_is_kept_with_a_warning() -> None:
    plan = parse_rewoo("Plan: a. #E1 = Search[x]\nPlan: b. #E2 = Lookup[#E1[name]]")
    tpl = plan.step(2).positional[0]
    assert isinstance(tpl, Template) and tpl.canonical == "<step_1>[name]"
    [diag] = [d for d in plan.diagnostics if d.code == "REF_SUFFIX_TEXT"]
    assert diag.step == 2 and "'[name]'" in diag.message


def test_plan_and_step_on_one_line_with_numbered_labels() -> None:
    plan = parse_rewoo('Plan 1: find it. #E1 = Google["x y"]\nPlan 2: then. #E2 = Google[#E1 z]')
    assert [s.task for s in plan.steps] == ["find it.", "then."]
    assert plan.step(1).positional == ("x y",)
    assert {"REWOO_SAME_LINE", "REWOO_PLAN_LABEL", "REWOO_QUOTED_INPUT"} <= _codes(plan)


def test_markdown_headers_bullets_and_bold_are_stripped_with_a_diagnostic() -> None:
    plan = parse_rewoo("### **Plan:** look up\n- #E1 = Google[x]\n")
    assert plan.step(1).task == "look up"
    assert "MARKDOWN_STRIPPED" in _codes(plan)


def test_a_hinted_reference_in_an_input_is_reported() -> None:
    text = 'Plan: a. #E1 = Google[x]\nPlan: b. #E2 = Google["<Name from #E1> hometown"]'
    plan = parse_rewoo(text)
    ref = plan.step(2).positional[0].parts[0]
    assert ref.is_hinted and ref.step == 1
    assert "REF_HINTED" in _codes(plan)


def test_prose_and_plans_without_steps_are_reported() -> None:
    plan = parse_rewoo("Here is my plan.\nPlan: a\n#E1 = T[x]\nPlan: dangling")
    codes = _codes(plan)
    assert "PROSE_IGNORED" in codes
    assert "REWOO_PLAN_WITHOUT_STEP" in codes


def test_a_step_without_plan_text_gets_an_empty_task_and_a_warning() -> None:
    plan = parse_rewoo("#E1 = Google[x]")
    assert plan.step(1).task == ""
    assert "REWOO_MISSING_PLAN" in _codes(plan)


def test_an_unclosed_input_at_the_end_is_truncated_and_invalid() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = Google[x]\nPlan: b\n#E2 = Google[hometown of")
    step = plan.step(2)
    assert not step.args_valid
    assert "ARGS_TRUNCATED" in _codes(plan)
    assert plan.step(1).args_valid


def test_an_input_may_continue_on_the_next_line() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = LLM[first line\nsecond line]\n")
    assert plan.step(1).positional == ("first line\nsecond line",)
    assert plan.step(1).lines == (1, 3)


def test_nested_brackets_and_apostrophes_stay_in_the_input() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = Google[Men's [2024] winner]")
    assert plan.step(1).positional == ("Men's [2024] winner",)


def test_a_duplicated_step_keeps_the_first() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = T[x]\nPlan: b\n#E1 = T[y]")
    assert plan.ids == (1,)
    assert plan.step(1).positional == ("x",)
    assert "DUPLICATE_STEP" in _codes(plan)


def test_qualified_tool_names_give_a_server() -> None:
    plan = parse_rewoo("Plan: a\n#E1 = iot.sites[MAIN]")
    assert (plan.step(1).server, plan.step(1).tool) == ("iot", "sites")
    assert "TOOL_NAME_NORMALIZED" in _codes(plan)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty reply"),
        ("I cannot help with that.", "I cannot help"),
        ("Plan: use Google.\nThe result goes in #E1.", "mentions #E1"),
    ],
)
def test_a_text_without_steps_is_a_plan_parse_error_saying_what_was_found(
    text: str, fragment: str
) -> None:
    with pytest.raises(PlanParseError) as err:
        parse_rewoo(text)
    assert fragment in str(err.value)


# --- the corpus -------------------------------------------------------------------------

# file -> [(tool, canonical input), ...]
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "rewoo_lgjs_1.txt": [
        ("Google", "winner of the 2023 Australian Open"),
        ("Google", "hometown of <step_1>"),
    ],
    "rewoo_lgjs_2.txt": [
        ("Google", "2024 Australian Open winner prediction"),
        ("Google", "<Name from #E1> hometown"),
    ],
    "rewoo_lgpy_1.txt": [
        ("Google", "2024 Australian Open winner"),
        ("LLM", "What is the name of the 2024 Australian Open winner, given <step_1>"),
        ("Google", "hometown of 2024 Australian Open winner, given <step_2>"),
        ("LLM", "What is the hometown of the 2024 Australian Open winner, given <step_3>"),
    ],
    "rewoo_lgpy_2.txt": [
        ("Google", "2024 Men's Australian Open winner"),
        ("Google", "Hometown of 2024 Men's Australian Open winner"),
    ],
    "rewoo_lgpy_3.txt": [
        ("Google", "2024 Australian Open winner"),
        ("Google", "hometown of 2024 Australian Open winner"),
    ],
    "rewoo_lgpy_4.txt": [
        ("Google", "2024 Australian Open winner hometown"),
        ("LLM", "Who won the 2024 Australian Open"),
        ("Google", "<step_2> player hometown"),
    ],
    "rewoo_lgpy_5.txt": [
        ("Google", "2024 Australian Open winner hometown"),
        ("LLM", "Who won the 2024 Australian Open"),
        ("Google", "2024 Australian Open winner information"),
    ],
}
DEPS = {
    "rewoo_lgjs_1.txt": [(), (1,)],
    "rewoo_lgjs_2.txt": [(), (1,)],
    "rewoo_lgpy_1.txt": [(), (1,), (2,), (3,)],
    "rewoo_lgpy_4.txt": [(), (), (2,)],
}


def _corpus(name: str) -> str:
    path = CORPUS / name
    if not path.exists():
        pytest.skip("the shared corpus is not available")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_rewoo_plans_parse_into_their_steps(name: str) -> None:
    plan = parse_rewoo(_corpus(name))
    got = [(s.tool, to_jsonable(s.positional[0])) for s in plan.steps]
    assert got == EXPECTED[name]
    assert plan.ids == tuple(range(1, len(EXPECTED[name]) + 1))
    assert all(s.args_valid and s.task for s in plan.steps)
    assert not plan.has_errors
    if name in DEPS:
        assert [s.depends_on for s in plan.steps] == DEPS[name]


def test_corpus_rewoo_lgjs_3_has_no_step_line_and_says_so() -> None:
    with pytest.raises(PlanParseError) as err:
        parse_rewoo(_corpus("rewoo_lgjs_3.txt"))
    message = str(err.value)
    assert "#E1 = Tool[input]" in message
    assert "2 'Plan' line(s)" in message
    assert "#E1, #E2" in message


def test_every_corpus_rewoo_file_is_covered() -> None:
    if not CORPUS.exists():
        pytest.skip("the shared corpus is not available")
    names = {p.name for p in CORPUS.glob("rewoo_*.txt")}
    assert names == set(EXPECTED) | {"rewoo_lgjs_3.txt"}


# --- property ---------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    ["Plan:", "Plan 2:", "#E1", "#E2 = ", " = ", "Google[", "LLM[", "[", "]", "\n", '"', "'",
     "given ", "#E", "### ", "- ", "**", "```", "<Name from #E1>", "{step_1}", " ", "x", "=", "1"]
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=100), st.lists(_FRAGMENTS, max_size=30).map("".join)))
def test_parse_rewoo_raises_nothing_but_plan_parse_error(text: str) -> None:
    try:
        plan = parse_rewoo(text)
    except PlanParseError:
        return
    assert plan.steps
    for step in plan.steps:
        assert set(step.depends_on) == {r.step for r in step.refs}
