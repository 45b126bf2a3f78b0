from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.errors import PlanParseError
from planexec.parsing.llmcompiler import parse_llmcompiler
from planexec.plan import Plan, Ref, Template, to_jsonable

CORPUS = Path(__file__).parents[2] / ".." / "shared" / "corpus" / "real_plans"


def _codes(plan: Plan) -> set[str]:
    return {d.code for d in plan.diagnostics}


def test_numbered_calls_with_positional_and_keyword_arguments() -> None:
    plan = parse_llmcompiler(
        "1. search('Paris weather', limit=3, tags=[\"a\", 'b'], opts={'x': None})\n"
        '2. summarize($1, style="short", extra=(1, 2.5, -3), flag=True)\n'
        "3. join()<END_OF_PLAN>"
    )
    assert plan.dialect == "llmcompiler"
    assert plan.ids == (1, 2)
    s1, s2 = plan.steps
    assert s1.tool == "search"
    assert s1.positional == ("Paris weather",)
    assert s1.args == {"limit": 3, "tags": ["a", "b"], "opts": {"x": None}}
    ref = s2.positional[0]
    assert isinstance(ref, Ref) and ref.step == 1 and ref.location == "positional[0]"
    assert s2.args == {"style": "short", "extra": [1, 2.5, -3], "flag": True}
    assert s2.depends_on == (1,)
    assert "LLMC_JOIN" in _codes(plan)
    assert not plan.has_errors


def test_braced_nested_and_embedded_dollar_references() -> None:
    plan = parse_llmcompiler("1. a()\n2. b()\n3. c([$1, ${2}], q='total of $1 items')\n4. join()")
    step = plan.step(3)
    assert sorted(r.step for r in step.refs) == [1, 1, 2]
    assert step.depends_on == (1, 2)
    assert step.positional[0][1].location == "positional[0][1]"
    assert isinstance(step.args["q"], Template)
    assert step.args["q"].refs[0].location == "args.q"


def test_dollar_references_take_paths_quoted_or_not() -> None:
    plan = parse_llmcompiler(
        "1. sites()\n"
        '2. assets("$1.asset_id", $1.asset_id, ${1}.asset_id, $1["k"], $1[0], '
        "ids=[$1.items[-1].id, 2], q='hometown of $1.name.', price='costs $5.00')\n"
        "3. join()"
    )
    step = plan.step(2)
    paths = [(r.step, r.path) for r in step.positional]
    assert paths == [(1, ("asset_id",))] * 3 + [(1, ("k",)), (1, (0,))]
    assert all(isinstance(r, Ref) and r.whole_value for r in step.positional)
    assert step.positional[2].raw == "${1}.asset_id"
    assert step.args["ids"][0].path == ("items", -1, "id")
    assert step.args["q"].canonical == "hometown of <step_1.name>."
    assert step.args["price"] == "costs $5.00"
    assert not plan.has_errors
    assert not {"REF_SUFFIX_TEXT", "ARGS_REPAIRED"} & _codes(plan)


def test_bracketed_text_after_a_dollar_reference_is_kept_with_a_warning() -> None:
    plan = parse_llmcompiler("1. a()\n2. b(key='$1[name]')\n3. join()")
    tpl = plan.step(2).args["key"]
    assert isinstance(tpl, Template) and tpl.canonical == "<step_1>[name]"
    [diag] = [d for d in plan.diagnostics if d.code == "REF_SUFFIX_TEXT"]
    assert diag.step == 2 and "args.key" in diag.message


def test_an_unquoted_reference_followed_by_a_bare_bracket_is_a_syntax_error() -> None:
    plan = parse_llmcompiler("1. a()\n2. b($1[name])\n3. join()")
    assert not plan.step(2).args_valid
    assert "ARGS_SYNTAX" in _codes(plan)


def test_thoughts_become_the_task_of_the_next_step() -> None:
    plan = parse_llmcompiler("Thought: first find it.\n1. search('x')\n2. add($1, 2)\n3. join()")
    assert plan.step(1).task == "first find it."
    assert plan.step(2).task == "add($1, 2)"


def test_a_thought_before_join_is_kept_as_an_info_diagnostic() -> None:
    plan = parse_llmcompiler("1. a()\nThought: I can answer now.\n2. join()<END_OF_PLAN>")
    thought = [d for d in plan.diagnostics if d.code == "LLMC_THOUGHT"]
    assert len(thought) == 1 and "I can answer now." in thought[0].message
    assert thought[0].line == 2


def test_text_after_end_of_plan_is_ignored_with_a_diagnostic() -> None:
    plan = parse_llmcompiler("1. a()\n2. join()\n<END_OF_PLAN>\nHope this helps!\n3. b()")
    assert plan.ids == (1,)
    assert "PROSE_IGNORED" in _codes(plan)


def test_a_plan_without_join_or_end_may_be_cut_off() -> None:
    plan = parse_llmcompiler("1. a(1)\n2. b($1)")
    assert "LLMC_NO_END" in _codes(plan)


def test_a_call_may_continue_on_following_lines() -> None:
    plan = parse_llmcompiler("1. search(\n  'x',\n  limit=2)\n2. join()")
    assert plan.step(1).positional == ("x",)
    assert plan.step(1).args == {"limit": 2}
    assert plan.step(1).lines == (1, 3)


def test_an_unclosed_call_at_the_end_is_truncated_and_invalid() -> None:
    plan = parse_llmcompiler("1. a(1)\n2. search('hometown of")
    assert not plan.step(2).args_valid
    assert "ARGS_TRUNCATED" in _codes(plan)


@pytest.mark.parametrize("args", ["1 2", "x=1, x=2", "[1, ...]", "'a' 'b'"])
def test_unreadable_arguments_make_the_step_invalid(args: str) -> None:
    plan = parse_llmcompiler(f"1. f({args})\n2. join()")
    assert not plan.step(1).args_valid
    assert "ARGS_SYNTAX" in _codes(plan)


def test_bare_words_are_read_as_strings_with_a_warning() -> None:
    plan = parse_llmcompiler("1. search(query=Paris)\n2. join()")
    assert plan.step(1).args == {"query": "Paris"}
    assert "ARGS_REPAIRED" in _codes(plan)


def test_a_positional_after_a_keyword_is_reported() -> None:
    plan = parse_llmcompiler("1. f(a=1, 2)\n2. join()")
    assert plan.step(1).positional == (2,)
    assert "LLMC_POSITIONAL_AFTER_KEYWORD" in _codes(plan)


def test_duplicate_steps_and_steps_after_join_are_reported() -> None:
    plan = parse_llmcompiler("1. a()\n1. b()\n2. join()\n3. c()\n<END_OF_PLAN>")
    assert plan.ids == (1, 3)
    assert {"DUPLICATE_STEP", "LLMC_STEP_AFTER_JOIN"} <= _codes(plan)


def test_numbered_lines_that_are_not_calls_are_reported() -> None:
    plan = parse_llmcompiler("1. search the web\n2. search('x')\n3. join()")
    assert plan.ids == (2,)
    assert "LLMC_NOT_A_CALL" in _codes(plan)


def test_a_hinted_reference_is_reported() -> None:
    plan = parse_llmcompiler("1. a()\n2. b('{the city from step_1}')\n3. join()")
    assert plan.step(2).positional[0].is_hinted
    assert "REF_HINTED" in _codes(plan)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("", "empty reply"), ("Sorry, I cannot.", "Sorry"), ("1. join()<END_OF_PLAN>", "only join")],
)
def test_a_text_without_tool_calls_is_a_plan_parse_error(text: str, fragment: str) -> None:
    with pytest.raises(PlanParseError) as err:
        parse_llmcompiler(text)
    assert fragment in str(err.value)


# --- the corpus -------------------------------------------------------------------------

EXPECTED: dict[str, list[tuple[str, list[Any]]]] = {
    "llmcompiler_llamahub_1.txt": [("multiply", [121, 3]), ("add", ["<step_1>", 42])],
    "llmcompiler_llamaindex_1.txt": [("multiply", [121, 3]), ("add", ["<step_1>", 42])],
    "llmcompiler_llamahub_2.txt": [
        ("vector_tool_Houston", ["demographics"]),
        ("vector_tool_Chicago", ["demographics"]),
    ],
    "llmcompiler_llamaindex_2.txt": [
        ("vector_tool_Miami", ["demographics"]),
        ("vector_tool_Chicago", ["demographics"]),
    ],
    "llmcompiler_llamahub_3.txt": [
        ("vector_tool_Chicago", ["climate during wintertime"]),
        ("vector_tool_Seattle", ["climate during wintertime"]),
    ],
    "llmcompiler_llamaindex_3.txt": [
        ("vector_tool_Chicago", ["climate during wintertime"]),
        ("vector_tool_Seattle", ["climate during wintertime"]),
    ],
}
WITH_THOUGHT = {"llmcompiler_llamahub_1.txt", "llmcompiler_llamaindex_2.txt"}


def _corpus(name: str) -> str:
    path = CORPUS / name
    if not path.exists():
        pytest.skip("the shared corpus is not available")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_llmcompiler_plans_parse_into_their_steps(name: str) -> None:
    plan = parse_llmcompiler(_corpus(name))
    got = [(s.tool, to_jsonable(list(s.positional))) for s in plan.steps]
    assert got == EXPECTED[name]
    assert all(s.args_valid and s.args == {} for s in plan.steps)
    expected_codes = {"LLMC_JOIN"} | ({"LLMC_THOUGHT"} if name in WITH_THOUGHT else set())
    assert _codes(plan) == expected_codes
    if EXPECTED[name][1][0] == "add":
        assert plan.step(2).depends_on == (1,)


def test_every_corpus_llmcompiler_file_is_covered() -> None:
    if not CORPUS.exists():
        pytest.skip("the shared corpus is not available")
    assert {p.name for p in CORPUS.glob("llmcompiler_*.txt")} == set(EXPECTED)


# --- property ---------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    ["1. ", "2. ", "3.", "tool(", "join()", ")", "(", "'", '"', "$1", "${2}", "$", "x=", ",",
     "[", "]", "{", "}", ":", "\n", "Thought:", "<END_OF_PLAN>", "None", "1.5", "-", " ", "\\"]
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=100), st.lists(_FRAGMENTS, max_size=30).map("".join)))
def test_parse_llmcompiler_raises_nothing_but_plan_parse_error(text: str) -> None:
    try:
        plan = parse_llmcompiler(text)
    except PlanParseError:
        return
    assert plan.steps
    for step in plan.steps:
        assert set(step.depends_on) == {r.step for r in step.refs}
