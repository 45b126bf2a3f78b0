"""Text that begins like a reference but is not one (issue 14, item 3).

The parser warns ``REF_MALFORMED``; the executor refuses to pass such text to a tool
(never a half-resolved value such as ``"{A1"``) unless the tool's schema marks the
argument as free text (``"x-planexec-free-text": true``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, Field

from planexec.config import ExecutorSettings, RetrySettings
from planexec.errors import ErrorKind
from planexec.executor import Executor
from planexec.parsing import parse_plan
from planexec.parsing.refs import (
    FREE_TEXT_KEY,
    contains_placeholder,
    find_malformed,
    find_refs,
    is_free_text,
    malformed_refs,
)
from planexec.results import StepResult, StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

MALFORMED = ["<step_1.id", "{step_1.id", "{{step_1.id}", "{step_1!r:>{10**10}}", "{step_1.id}}"]
WELL_FORMED = [
    "<step_1.id>",
    "{step_1.id}",
    "{{step_1.id}}",
    "{{ step_1.id }}",
    "id {step_1.id} here",
    "{step_1_selected_site}",
    '[{"tonnage": {step_1.id}}]',  # the brace after the reference closes a JSON object
    "{ {step_1.id} }",
    "report_{step_1}.csv",
    "a < step 2",  # prose: no bracket right before "step"
    "{name}",
    "plain text",
    "",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_text_that_begins_like_a_reference_is_malformed(text: str) -> None:
    assert malformed_refs(text) == [(0, text)]
    assert find_malformed(find_refs({"x": text})) == [("args.x", text)]


@pytest.mark.parametrize("text", WELL_FORMED)
def test_references_and_ordinary_text_are_not_malformed(text: str) -> None:
    assert malformed_refs(text) == []
    assert find_malformed(find_refs({"x": text})) == []


def test_malformed_spots_are_found_inside_longer_text_and_nested_values() -> None:
    assert malformed_refs("use {step_1.id and <step_2>") == [(4, "{step_1.id and <step_2>")]
    found = find_malformed(find_refs({"a": [{"b": "x <step_3"}], "c": "<step_1>"}))
    assert found == [("args.a[0].b", "<step_3")]


def test_dialect_forms_are_malformed_only_in_their_dialect() -> None:
    assert malformed_refs("${1", "llmcompiler") == [(0, "${1")]
    assert malformed_refs("${1", "hashstep") == []
    assert malformed_refs("${1}", "llmcompiler") == []


def test_a_long_malformed_text_is_cut_in_the_excerpt() -> None:
    [(pos, excerpt)] = malformed_refs("<step_1." + "a" * 100)
    assert pos == 0 and len(excerpt) == 40 and excerpt.endswith("…")


# -- the parsers warn -------------------------------------------------------------------


def hashstep(args: dict[str, Any]) -> str:
    return (
        "#Task1: find\n#Tool1: find\n#Args1: {}\n#Dependency1: None\n"
        f"#Task2: use\n#Tool2: use\n#Args2: {json.dumps(args)}\n#Dependency2: #S1\n"
    )


@pytest.mark.parametrize("text", MALFORMED)
def test_the_hashstep_parser_warns_ref_malformed(text: str) -> None:
    plan = parse_plan(hashstep({"asset_id": text}))
    [diag] = [d for d in plan.diagnostics if d.code == "REF_MALFORMED"]
    assert diag.severity == "warning" and diag.step == 2 and diag.line == 7
    assert f"args.asset_id of step 2 holds {text!r}" in diag.message
    assert "begins like a reference but is not one" in diag.message
    assert FREE_TEXT_KEY in diag.message


def test_a_well_formed_plan_gets_no_ref_malformed() -> None:
    plan = parse_plan(hashstep({"asset_id": "{step_1.id}", "q": "name of <step_1.name>"}))
    assert not [d for d in plan.diagnostics if d.code == "REF_MALFORMED"]


def test_the_rewoo_and_llmcompiler_parsers_warn_ref_malformed() -> None:
    rewoo = parse_plan("Plan: a\n#E1 = A[x]\nPlan: b\n#E2 = B[<step_1 name]\n", "rewoo")
    assert [(d.code, d.step) for d in rewoo.diagnostics if d.code == "REF_MALFORMED"] == [
        ("REF_MALFORMED", 2)
    ]
    llmc = parse_plan("1. a()\n2. b('${1', x='{{step_1}')\n3. join()\n", "llmcompiler")
    found = [d.message for d in llmc.diagnostics if d.code == "REF_MALFORMED"]
    assert len(found) == 2
    assert "positional[0] of step 2 holds '${1'" in found[0]
    assert "args.x of step 2 holds '{{step_1}'" in found[1]


# -- the executor refuses, unless the argument is free text -------------------------------


class UseArgs(BaseModel):
    asset_id: str


class NoteArgs(BaseModel):
    asset_id: str = Field(json_schema_extra={FREE_TEXT_KEY: True})


async def run(args: dict[str, Any], schema: type[BaseModel]) -> tuple[dict[int, StepResult], Any]:
    find = fake_tool("find", {"id": "A1"})
    use = fake_tool("use", "done", args=schema)
    executor = Executor(
        ToolCatalog([find, use]),
        config=ExecutorSettings(tool_retry=RetrySettings(attempts=1, base_delay=0.0)),
    )
    results = await executor.run(parse_plan(hashstep(args)))
    return {r.step_id: r for r in results}, use.metadata["calls"].calls  # type: ignore[index]


@pytest.mark.parametrize("text", MALFORMED)
async def test_the_executor_refuses_a_malformed_reference(text: str) -> None:
    results, calls = await run({"asset_id": text}, UseArgs)
    assert results[1].status is StepStatus.SUCCEEDED
    failed = results[2]
    assert failed.status is StepStatus.FAILED and failed.error_kind is ErrorKind.ARGS_SYNTAX
    assert failed.error is not None and "'asset_id'" in failed.error and text in failed.error
    assert failed.failure is not None
    assert failed.failure.args == ("asset_id",) and failed.failure.literal_args == ("asset_id",)
    assert calls == []  # never "{A1", never the raw text


@pytest.mark.parametrize(
    ("text", "received"),
    [
        ("<step_1.id", "<step_1.id"),
        ("{step_1.id", "{step_1.id"),
        ("{{step_1.id}", "{A1"),  # free text: the reference resolves, the brace is kept
        ("{step_1!r:>{10**10}}", "{step_1!r:>{10**10}}"),
    ],
)
async def test_a_free_text_argument_gets_the_text_as_written(text: str, received: str) -> None:
    results, calls = await run({"asset_id": text}, NoteArgs)
    assert results[2].status is StepStatus.SUCCEEDED, results[2].error
    assert calls == [{"asset_id": received}]


async def test_a_well_formed_reference_still_resolves_in_both_kinds_of_argument() -> None:
    for schema in (UseArgs, NoteArgs):
        results, calls = await run({"asset_id": "{step_1.id}"}, schema)
        assert results[2].status is StepStatus.SUCCEEDED
        assert calls == [{"asset_id": "A1"}]


def test_only_the_documented_keyword_marks_free_text() -> None:
    spec = ToolCatalog([fake_tool("use", args=NoteArgs)]).get("use")
    assert is_free_text(spec.json_schema["properties"]["asset_id"])
    assert not is_free_text({"type": "string", "format": "free-text"})
    assert not is_free_text({FREE_TEXT_KEY: "yes"})
    assert not is_free_text(None)


def test_malformed_text_is_not_flagged_as_a_placeholder() -> None:
    # the resolver treats it as a literal (so a free-text argument can keep it); the
    # refusal comes from the executor, which knows the tool's schema
    assert not contains_placeholder("<step_1.id")
