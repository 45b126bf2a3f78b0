"""Numbers of thousands of digits are diagnostics, never a crash (issue 14, item 13).

Python refuses ``int()`` on more than 4300 digits (ValueError). A step number has at
most 9 digits (`MAX_STEP_DIGITS`) and a path index at most 18: longer ones name no
step, so the parsers say so on that step instead of failing.
"""

from __future__ import annotations

import pytest

from planexec.parsing import parse_plan
from planexec.parsing.refs import find_refs, parse_path, parse_ref, step_number
from planexec.plan import Plan, Ref

BIG = "9" * 5000


def codes(plan: Plan, step: int | None = None) -> list[str]:
    return [d.code for d in plan.diagnostics if step is None or d.step == step]


def test_step_number_reads_at_most_nine_digits() -> None:
    assert step_number("12") == 12
    assert step_number("999999999") == 999999999
    assert step_number("1234567890") is None
    assert step_number(BIG) is None


@pytest.mark.parametrize(
    "text",
    [f"<step_{BIG}>", f"{{step_{BIG}}}", f"{{{{step_{BIG}}}}}", f"<step_1[{BIG}]>",
     f"<step_1.a[-{BIG}]>", "<step_1234567890>"],
)
def test_a_reference_with_a_huge_number_is_no_reference(text: str) -> None:
    assert parse_ref(text) is None
    assert find_refs(text) == text


def test_a_step_mention_or_identifier_with_a_huge_number_names_no_step() -> None:
    assert find_refs(f"step_{BIG}") == f"step_{BIG}"
    assert find_refs(f"{{site from step {'9' * 150}}}") == f"{{site from step {'9' * 150}}}"
    assert parse_ref(f"#E{BIG}", "rewoo") is None
    assert parse_ref(f"${BIG}", "llmcompiler") is None
    assert parse_path(f"[{BIG}]") is None


def hashstep_args(args_json: str) -> str:
    return (
        "#Task1: find\n#Tool1: find\n#Args1: {}\n"
        f"#Task2: use\n#Tool2: use\n#Args2: {args_json}\n#Dependency2: #S1\n"
    )


@pytest.mark.parametrize(
    "ref", [f"<step_{BIG}>", f"{{step_{BIG}}}", f"<step_1[{BIG}]>", f"<step_1.a[{BIG}].b>"]
)
def test_hashstep_reports_a_huge_reference_number_on_its_step(ref: str) -> None:
    plan = parse_plan(hashstep_args('{"a": "' + ref + '"}'))
    assert "REF_MALFORMED" in codes(plan, 2)
    assert plan.steps[1].args == {"a": ref}  # kept as text; the executor refuses it


def test_hashstep_reports_a_huge_step_number_and_numbers_the_step() -> None:
    text = f"#Task1: a\n#Tool1: x\n#Args1: {{}}\n#Task{BIG}: b\n#Tool{BIG}: y\n#Args{BIG}: {{}}\n"
    plan = parse_plan(text)
    assert [s.id for s in plan.steps] == [1, 2]
    assert plan.steps[1].tool == "y"
    invalid = [d for d in plan.diagnostics if d.code == "STEP_NUMBER_INVALID"]
    assert len(invalid) == 3 and all(d.severity == "warning" for d in invalid)
    assert invalid[0].line == 4
    assert invalid[0].message.startswith("#Task999999999999… has a step number of 5000 digits")
    assert "read as #Task without a number" in invalid[0].message
    assert len(invalid[0].message) < 200  # the number is not repeated in full


def test_a_ten_digit_step_number_is_invalid_too_not_cut_to_nine() -> None:
    plan = parse_plan("#Task1: a\n#Tool1: x\n#Args1: {}\n#Task1234567890: b\n#Tool: y\n#Args: {}\n")
    assert [s.id for s in plan.steps] == [1, 2]
    assert "STEP_NUMBER_INVALID" in codes(plan)


def test_a_huge_number_in_args_is_an_args_syntax_error_on_its_step() -> None:
    plan = parse_plan(hashstep_args('{"n": ' + BIG + "}"))
    [diag] = [d for d in plan.diagnostics if d.code == "ARGS_SYNTAX"]
    assert diag.step == 2 and "has 5000 digits" in diag.message
    assert not plan.steps[1].args_valid


def test_rewoo_ignores_a_step_with_a_huge_number_and_says_so() -> None:
    plan = parse_plan(f"Plan: a\n#E1 = A[x]\nPlan: b\n#E{BIG} = B[y]\nPlan: c\n#E3 = C[#E{BIG}]\n")
    assert [s.id for s in plan.steps] == [1, 3]
    [invalid] = [d for d in plan.diagnostics if d.code == "STEP_NUMBER_INVALID"]
    assert invalid.severity == "error" and invalid.line == 4
    assert "the step was ignored" in invalid.message
    assert "REF_MALFORMED" in codes(plan, 3)
    assert plan.steps[1].positional == (f"#E{BIG}",)


def test_llmcompiler_ignores_a_line_with_a_huge_number_and_says_so() -> None:
    plan = parse_plan(f"1. a()\n{BIG}. b()\n3. c(${BIG}, {BIG})\n4. join()\n", "llmcompiler")
    assert [s.id for s in plan.steps] == [1, 3]
    [invalid] = [d for d in plan.diagnostics if d.code == "STEP_NUMBER_INVALID"]
    assert invalid.severity == "error" and invalid.line == 2
    assert "ARGS_SYNTAX" in codes(plan, 3)  # the bare 5000-digit number cannot be read


def test_llmcompiler_reports_a_huge_reference_number() -> None:
    plan = parse_plan(f"1. a()\n2. b('${BIG}')\n3. join()\n", "llmcompiler")
    assert "REF_MALFORMED" in codes(plan, 2)
    assert not any(isinstance(v, Ref) for v in plan.steps[1].positional)
