from __future__ import annotations

from types import ModuleType
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planexec._fastpaths as _fastpaths
import planexec.parsing as parsing
from planexec.errors import PlanParseError
from planexec.parsing import detect_dialect, hashstep, llmcompiler, parse_plan, rewoo
from planexec.parsing.hashstep import parse_hashstep
from planexec.plan import Plan

HASHSTEP = "#Task1: a\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
REWOO = "Plan: search.\n#E1 = Google[winner]\nPlan: hometown.\n#E2 = Google[hometown of #E1]\n"
LLMC = "1. multiply(121, 3)\n2. add($1, 42)\n3. join()<END_OF_PLAN>"


def test_every_name_in_all_is_exported() -> None:
    for name in parsing.__all__:
        assert hasattr(parsing, name), name
    for name in ("check_plan", "repair_json", "find_refs", "parse_ref", "contains_placeholder",
                 "parse_hashstep", "parse_rewoo", "parse_llmcompiler", "parse_plan",
                 "detect_dialect"):
        assert name in parsing.__all__


@pytest.mark.parametrize(
    ("text", "dialect"),
    [
        (HASHSTEP, "hashstep"),
        ("Here is my plan:\n**#Task1:** a\n", "hashstep"),
        (REWOO, "rewoo"),
        ("Plan: x #E1 = Google[y]", "rewoo"),
        (LLMC, "llmcompiler"),
        ("", "hashstep"),
        ("I cannot help with that.", "hashstep"),
    ],
)
def test_the_dialect_is_detected(text: str, dialect: str) -> None:
    assert detect_dialect(text) == dialect


@pytest.mark.parametrize(("text", "dialect"), [(HASHSTEP, "hashstep"), (REWOO, "rewoo"),
                                               (LLMC, "llmcompiler")])
def test_parse_plan_reads_every_dialect(text: str, dialect: str) -> None:
    plan = parse_plan(text)
    assert plan.dialect == dialect
    assert plan.steps


@pytest.mark.parametrize(
    "text",
    [HASHSTEP, REWOO, LLMC, "1. search(q='x')", '{"steps": [{"tool": "sites", "args": {}}]}'],
)
def test_a_reply_starting_with_a_byte_order_mark_is_the_same_plan(text: str) -> None:
    plain, marked = parse_plan(text), parse_plan("\ufeff" + text)
    assert (marked.dialect, marked.steps) == (plain.dialect, plain.steps)
    assert [(d.code, d.step, d.line) for d in marked.diagnostics] == [
        (d.code, d.step, d.line) for d in plain.diagnostics
    ]


@pytest.mark.parametrize("key", ["1. {}", "1) {}", "12. {}", "> 3. {}", "`{}`", "- `{}`"])
def test_a_hashstep_plan_with_numbered_or_code_keys_is_not_read_as_the_json_in_it(
    key: str,
) -> None:
    fields = [("#Task1", "List the sites."), ("#Tool1", "sites"), ("#Args1", "{}"),
              ("#Dependency1", "None"),
              ("#ExpectedOutput1", 'the site names (e.g., ["SiteA", "SiteB"])')]
    text = "".join(f"{key.format(k)}: {v}\n" for k, v in fields)
    assert detect_dialect(text) == "hashstep"
    plan = parse_plan(text)
    assert [(s.id, s.tool) for s in plan.steps] == [(1, "sites")]


@pytest.mark.parametrize("newline", ["\r", "\r\n"])
@pytest.mark.parametrize("text", [HASHSTEP, REWOO, LLMC])
def test_the_dialect_after_prose_does_not_depend_on_the_line_endings(
    text: str, newline: str
) -> None:
    text = 'Here is the plan (sites: ["MAIN", "EAST"]):\n' + text
    assert detect_dialect(text.replace("\n", newline)) == detect_dialect(text) != "json"


def test_an_explicit_dialect_is_obeyed() -> None:
    with pytest.raises(PlanParseError):
        parse_plan(LLMC, dialect="hashstep")


def test_parse_plan_runs_the_structural_checks() -> None:
    plan = parse_plan('#Task1: a\n#Tool1: t\n#Args1: {"x": "{step_4}"}\n')
    assert "REF_MISSING" in {d.code for d in plan.diagnostics}


def test_parse_plan_passes_the_draft_policy_on() -> None:
    text = "#Task1: a\n#Tool1: x\n\n#Task1: b\n#Tool1: y\n"
    assert parse_plan(text, draft_policy="first").steps[0].tool == "x"
    assert parse_plan(text).steps[0].tool == "y"


def test_unknown_dialect_or_policy_names_are_value_errors() -> None:
    with pytest.raises(ValueError, match="dialect"):
        parse_plan(HASHSTEP, dialect="yaml")
    with pytest.raises(ValueError, match="draft policy"):
        parse_plan(HASHSTEP, draft_policy="best")


def test_an_empty_reply_says_so() -> None:
    with pytest.raises(PlanParseError, match="empty reply"):
        parse_plan("")


def parse_or_reject(text: str) -> Plan | None:
    """Parse ``text``; None when it is rejected with `PlanParseError`.

    The property tests go through here: any other exception escapes and fails them.
    """
    try:
        return parse_plan(text)
    except PlanParseError:
        return None


def _raise_key_error(*args: object, **kwargs: object) -> NoReturn:
    raise KeyError("a bug")


def test_a_bug_in_a_dialect_parser_propagates_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parsing, "parse_hashstep", _raise_key_error)
    with pytest.raises(KeyError):
        parse_plan(HASHSTEP)


def test_a_bug_on_every_tool_line_escapes_the_property_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_fastpaths, "ON", False)  # the general path reads every tool line
    monkeypatch.setattr(hashstep, "read_tool", _raise_key_error)
    with pytest.raises(KeyError):
        parse_or_reject(HASHSTEP)


@pytest.mark.parametrize(("module", "name", "text"), [
    (rewoo, "normalize_tool", REWOO),
    (llmcompiler, "normalize_tool", LLMC),
    (hashstep, "contains_placeholder", '#Task1: a\n#Tool1: t\n#Args1: {"x": "y"}\n'),
])
def test_a_bug_in_any_dialect_propagates_unchanged(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, text: str
) -> None:
    monkeypatch.setattr(module, name, _raise_key_error)
    with pytest.raises(KeyError):
        parse_plan(text)


_FIELDS = st.sampled_from(
    ["#Task1: ", "#Task2: ", "#Tool1: ", "#Args1: ", "#Args2: ", "#Dependency2: ",
     "#ExpectedOutput1: ", "#Agent<N>: ", "**#Task3:** ", "* #Tool3: ", "#Step: ", "```",
     "assistantfinal", "$\\boxed{", "}$", "<|eom_id|>", "{step_1}", "<step_2.a[0]>",
     "{\"x\": ", "'", "\"", "}", "[", "#S1, #S2", "None", "\n", "\n\n", "---", "sites()",
     "iot.sites", "#E1 = Google[", "1. add($1, 2)", "join()", "Plan: ", "</think>",
     # hostile input (issue 14): malformed references, numbers Python's int() refuses
     "<step_1.id", "{{step_1.id}", "{step_1!r:>{10**10}}", "${1", "9" * 5000,
     "<step_" + "9" * 5000 + ">", "#E" + "9" * 5000, "$" + "9" * 5000, "[" + "9" * 5000]
)
_TEXTS = st.lists(st.one_of(_FIELDS, st.text(max_size=12)), max_size=40).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXTS)
def test_parse_plan_raises_nothing_but_plan_parse_error(text: str) -> None:
    plan = parse_or_reject(text)
    if plan is None:
        return
    assert plan.steps
    lines = [d.line or 0 for d in plan.diagnostics]
    assert lines == sorted(lines)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXTS, st.sampled_from(["last_complete", "first", "last"]))
def test_the_hashstep_parser_alone_raises_nothing_but_plan_parse_error(
    text: str, policy: str
) -> None:
    try:
        plan = parse_hashstep(text, draft_policy=policy)
    except PlanParseError:
        return
    for step in plan.steps:
        assert step.args_valid or any(
            d.severity == "error" and d.step == step.id for d in plan.diagnostics
        )


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_unicode_text_raises_nothing_but_plan_parse_error(text: str) -> None:
    plan = parse_or_reject(text)
    assert plan is None or plan.steps
