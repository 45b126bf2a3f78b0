"""Duplicate JSON keys are an error, never "last one wins" (issue 25, defect 9).

Everywhere a plan or a reply is read: hashstep ``#Args``, the json dialect (a step's
own keys and its arguments), inline calls ``tool(k=1, k=2)`` and dicts inside them,
and the LLM fallback's replies read by the resolver.
"""

from __future__ import annotations

import pytest

from planexec.errors import ErrorKind, PlanParseError
from planexec.parsing import parse_plan, repair_json
from planexec.parsing.jsonrepair import extract_json_object
from planexec.plan import Plan, Ref, Severity, Step
from planexec.resolver import ArgResolver, ResolutionFailure
from planexec.results import StepResult, StepStatus
from planexec.testing import ScriptedChatModel, fake_tool
from planexec.tools import ToolCatalog


def _errors(plan: Plan, step: int) -> list[str]:
    return [
        d.message for d in plan.diagnostics if d.step == step and d.severity is Severity.ERROR
    ]


def _names_both(messages: list[str], first: str, second: str) -> bool:
    return any(first in m and second in m for m in messages)


@pytest.mark.parametrize(
    "text",
    ['{"priority": "low", "priority": "high"}', "{'priority': 'low', 'priority': 'high'}",
     '{"a": {"priority": "low", "priority": "high"}}'],
)
def test_repair_json_refuses_duplicate_keys_and_names_both_values(text: str) -> None:
    got = repair_json(text)
    assert got.value is None and got.error is not None
    assert got.duplicate_key == "priority"
    assert '"low"' in got.error and '"high"' in got.error


def test_hashstep_args_with_a_duplicate_key_are_invalid() -> None:
    plan = parse_plan(
        "#Task1: open a ticket\n#Tool1: ticket\n"
        '#Args1: {"priority": "low", "priority": "high"}\n#Dependency1: None\n',
        "hashstep",
    )
    (step,) = plan.steps
    assert step.args_valid is False and step.args == {}
    assert _names_both(_errors(plan, 1), '"low"', '"high"')


@pytest.mark.parametrize(
    "text",
    ['[{"id": 1, "tool": "read", "tool": "wipe", "args": {}}]',
     '{"steps": [{"id": 1, "tool": "read", "tool": "wipe", "args": {}}]}'],
)
def test_json_dialect_two_tools_under_one_key_never_call_the_last(text: str) -> None:
    plan = parse_plan(text, "json")
    (step,) = plan.steps
    assert step.tool != "wipe"
    assert step.args_valid is False
    assert _names_both(_errors(plan, 1), '"read"', '"wipe"')


def test_json_dialect_duplicate_argument_is_invalid() -> None:
    plan = parse_plan('[{"id": 1, "tool": "t", "args": {"x": 1, "x": 2}}]', "json")
    (step,) = plan.steps
    assert step.tool == "t" and step.args_valid is False and step.args == {}
    assert _names_both(_errors(plan, 1), "1", "2")


def test_json_dialect_duplicate_argument_in_a_string_encoded_args() -> None:
    plan = parse_plan(
        '{"tool_calls": [{"function": {"name": "t", "arguments": "{\\"x\\": 1, \\"x\\": 2}"}}]}',
        "json",
    )
    (step,) = plan.steps
    assert step.args_valid is False and step.args == {}
    assert _errors(plan, 1)


@pytest.mark.parametrize(
    ("text", "dialect", "first", "second"),
    [
        ("1. t(k=1, k=2)\n2. join()", "llmcompiler", "1", "2"),
        ('#Task1: x\n#Tool1: t(k="a", k="b")\n#Dependency1: None\n', "hashstep", '"a"', '"b"'),
        ('#Task1: x\n#Tool1: t(q={"a": 1, "a": 2})\n#Dependency1: None\n', "hashstep", "1", "2"),
    ],
)
def test_inline_calls_with_a_duplicate_key_are_invalid(
    text: str, dialect: str, first: str, second: str
) -> None:
    plan = parse_plan(text, dialect)
    step = plan.steps[0]
    assert step.args_valid is False
    assert "k" not in step.args and "q" not in step.args
    assert _names_both(_errors(plan, 1), first, second)


def test_extract_json_object_never_reads_a_part_of_a_duplicate_key_object() -> None:
    # the whole object is refused; its inner object is no answer either
    assert extract_json_object('{"a": {"x": 1}, "a": 2}') is None
    assert extract_json_object('Here: {"asset_id": "CH-6", "asset_id": "CH-7"}') is None


async def test_resolver_refuses_a_fallback_reply_with_a_duplicate_key() -> None:
    catalog = ToolCatalog([fake_tool("target", args={"asset_id": str})])
    model = ScriptedChatModel(
        replies=['{"asset_id": "CH-6", "asset_id": "CH-7"}',
                 '{"asset_id": "CH-7", "asset_id": "CH-6"}']
    )
    step = Step(id=9, task="t", tool="target",
                args={"asset_id": Ref(1, hint="asset_from_step_1", raw="{asset_from_step_1}")})
    results = {1: StepResult(1, "t", StepStatus.SUCCEEDED, output={"ids": ["CH-6", "CH-7"]})}
    out = await ArgResolver(model).resolve(step, catalog.get("target"), results)
    assert isinstance(out, ResolutionFailure), out
    assert out.kind is ErrorKind.RESOLUTION_FAILED
    assert model.calls == 2
    assert "asset_id" in out.message and '"CH-7"' in out.message and '"CH-6"' in out.message


def test_json_dialect_duplicate_key_in_any_field_of_a_step_is_reported() -> None:
    plan = parse_plan(
        '[{"id": 1, "tool": "t", "args": {}, "meta": {"who": "a", "who": "b"}}]', "json"
    )
    (step,) = plan.steps
    assert step.args_valid is False
    assert _names_both(_errors(plan, 1), '"a"', '"b"')


def test_json_dialect_duplicate_key_outside_any_step_means_no_plan() -> None:
    with pytest.raises(PlanParseError) as info:
        parse_plan('{"steps": [{"tool": "read"}], "steps": [{"tool": "wipe"}]}', "json")
    assert "read" in str(info.value) and "wipe" in str(info.value)
