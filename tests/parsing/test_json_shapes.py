"""The JSON shapes real planners write, read with and without a tool catalog (issue 26).

Every reply here was written for this test from the public descriptions of the shapes
(HuggingGPT task lists, TaskBench graphs, provider-native tool calls, ...). Each case
pins the steps, tools, arguments (references in canonical form), dependencies and the
diagnostic codes that must be present (and those that must not be).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from planexec.errors import PlanParseError
from planexec.parsing import detect_dialect, parse_plan
from planexec.plan import Plan, Ref, Severity, Template
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

CATALOG = ToolCatalog([
    fake_tool("sites"),
    fake_tool("assets", args={"site_name": str}),
    fake_tool("history", args={"asset_id": str, "start": str, "end": (str, "")}),
    fake_tool("image-to-text", args={"image": str}),
    fake_tool("text-to-image", args={"text": str}),
    fake_tool("search", args={"query": str, "limit": (int, 10)}),
    fake_tool("read", args={"path": str}),
    fake_tool("wipe", args={"target": str}),
])


def canon(value: Any) -> Any:
    """Arguments with references written canonically (a Template as ``T(...)``)."""
    if isinstance(value, Ref):
        return value.canonical
    if isinstance(value, Template):
        return "T(" + "".join(p.canonical if isinstance(p, Ref) else p for p in value.parts) + ")"
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canon(v) for v in value]
    return value


@dataclass(frozen=True)
class S:
    """An expected step: id, tool, named args, positional args, dependencies, args valid."""

    id: int
    tool: str | None
    args: dict[str, Any] = field(default_factory=dict)
    positional: tuple[Any, ...] = ()
    deps: tuple[int, ...] = ()
    valid: bool = True
    task: str | None = None


@dataclass(frozen=True)
class Case:
    reply: Any
    steps: tuple[S, ...] | None  # None: no plan (PlanParseError)
    codes: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()
    catalog: bool = False
    errors: frozenset[str] = frozenset()
    """Codes that must be present with severity error."""


def C(reply: Any, steps: tuple[S, ...] | None, codes: str = "", absent: str = "",
      catalog: bool = False, errors: str = "") -> Case:
    return Case(reply, steps, frozenset(codes.split()), frozenset(absent.split()), catalog,
                frozenset(errors.split()))


HUGGINGGPT = [
    {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "cat.jpg"}},
    {"task": "text-to-image", "id": 1, "dep": [0], "args": {"text": "<GENERATED>-0"}},
]
HUGGINGGPT_STEPS = (
    S(1, "image-to-text", {"image": "cat.jpg"}),
    S(2, "text-to-image", {"text": "<step_1>"}, deps=(1,)),
)
TASKBENCH = {
    "task_steps": ["Step 1: describe the picture", "Step 2: draw what it says"],
    "task_nodes": [
        {"task": "image-to-text", "arguments": ["cat.jpg"]},
        {"task": "text-to-image", "arguments": ["<node-0>"]},
    ],
    "task_links": [{"source": "image-to-text", "target": "text-to-image"}],
}

CASES: dict[str, Case] = {
    "documented shape": C(
        {"steps": [{"id": 1, "task": "List the sites", "tool": "sites", "args": {}},
                   {"id": 2, "task": "Assets", "tool": "assets", "depends_on": [1],
                    "args": {"site_name": "<step_1[0]>"}}]},
        (S(1, "sites", task="List the sites"),
         S(2, "assets", {"site_name": "<step_1[0]>"}, deps=(1,))),
        absent="JSON_TOOL_KEY JSON_FIELD_UNKNOWN JSON_SHAPE",
    ),
    "hugginggpt, no catalog": C(
        HUGGINGGPT, HUGGINGGPT_STEPS,
        "JSON_IDS_RENUMBERED JSON_TOOL_KEY JSON_REF_FORM JSON_SHAPE",
        absent="JSON_NO_TOOL DEPENDENCY_UNREADABLE",
    ),
    "hugginggpt, catalog": C(
        HUGGINGGPT, HUGGINGGPT_STEPS, "JSON_IDS_RENUMBERED JSON_TOOL_KEY JSON_REF_FORM",
        absent="TOOL_UNKNOWN JSON_NO_TOOL", catalog=True,
    ),
    "hugginggpt, dependency on a missing task": C(
        [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "a.png"}},
         {"task": "text-to-image", "id": 1, "dep": [4], "args": {"text": "<GENERATED>-4"}}],
        (S(1, "image-to-text", {"image": "a.png"}),
         S(2, "text-to-image", {"text": "<step_5>"}, deps=(5,))),
        errors="REF_MISSING",
    ),
    "taskbench, no catalog: positional": C(
        TASKBENCH,
        (S(1, "image-to-text", positional=("cat.jpg",), task="Step 1: describe the picture"),
         S(2, "text-to-image", positional=("<step_1>",), deps=(1,))),
        "JSON_SHAPE ARGS_POSITIONAL JSON_REF_FORM JSON_TOOL_KEY",
        absent="JSON_FIELD_UNKNOWN ARGS_POSITIONAL_MAPPED",
    ),
    "taskbench, catalog: mapped onto parameters": C(
        TASKBENCH,
        (S(1, "image-to-text", {"image": "cat.jpg"}),
         S(2, "text-to-image", {"text": "<step_1>"}, deps=(1,))),
        "ARGS_POSITIONAL_MAPPED JSON_REF_FORM", absent="ARGS_POSITIONAL JSON_FIELD_UNKNOWN",
        catalog=True,
    ),
    "taskbench, name/value pairs and index links, one to a missing node": C(
        {"task_nodes": [
            {"task": "search", "arguments": [{"name": "query", "value": "chillers"}]},
            {"task": "read", "arguments": [{"name": "path", "value": "<node-0>"}]}],
         "task_links": [{"source": 0, "target": 1}, {"source": 7, "target": 1}]},
        (S(1, "search", {"query": "chillers"}),
         S(2, "read", {"path": "<step_1>"}, deps=(1, 8))),
        "ARGS_NAME_VALUE_PAIRS", errors="DEPENDENCY_MISSING",
    ),
    "taskbench, link to a node name that is not there": C(
        {"task_nodes": [{"task": "sites", "arguments": []}, {"task": "read", "arguments": []}],
         "task_links": [{"source": "sites", "target": "write"}]},
        (S(1, "sites", positional=()), S(2, "read", positional=())),
        "DEPENDENCY_UNREADABLE",
    ),
    "operation/parameters under plan, extra fields": C(
        {"plan": [{"operation": "search", "parameters": {"query": "chillers"},
                   "confidence": 0.8, "description": "find the chillers"}]},
        (S(1, "search", {"query": "chillers"}, task="find the chillers"),),
        "JSON_TOOL_KEY JSON_FIELD_UNKNOWN",
    ),
    "action with flattened args, no catalog": C(
        {"steps": [{"action": "search", "query": "chillers", "limit": 3, "confidence": 0.5}]},
        (S(1, "search", {"query": "chillers", "limit": 3}),),
        "JSON_TOOL_KEY ARGS_FLATTENED JSON_FIELD_UNKNOWN",
    ),
    "action with flattened args, catalog keeps only the parameters": C(
        {"steps": [{"action": "search", "query": "chillers", "site": "MAIN"}]},
        (S(1, "search", {"query": "chillers"}),),
        "ARGS_FLATTENED JSON_FIELD_UNKNOWN", catalog=True,
    ),
    "bare list of sentences": C(
        ["Find the winner.", "Find where the winner was born."],
        (S(1, None), S(2, None)), "JSON_NO_TOOL JSON_SHAPE",
    ),
    "Task/ID list: a tool index no parser can name": C(
        [{"Task": "describe the picture", "ID": 3}, {"Task": "draw it", "ID": "5"}],
        (S(1, "#3", valid=False, task="describe the picture"), S(2, "#5", valid=False)),
        errors="JSON_TOOL_INDEX", absent="JSON_NO_TOOL",
    ),
    "anthropic message with tool_use blocks": C(
        {"id": "msg_1", "role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_a", "name": "sites", "input": {}},
            {"type": "tool_use", "id": "toolu_b", "name": "assets",
             "input": {"site_name": "<step_1[0]>"}}]},
        (S(1, "sites"), S(2, "assets", {"site_name": "<step_1[0]>"}, deps=(1,))),
        "JSON_TEXT_IGNORED JSON_FIELD_UNKNOWN JSON_SHAPE",
        absent="JSON_TOOL_KEY STEP_NUMBER_INVALID",
    ),
    "gemini candidates with functionCall parts": C(
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "search", "args": {"query": "pumps", "limit": 2}}},
            {"functionCall": {"name": "read", "args": {"path": "{step_1.items[0].path}"}}}]},
            "finishReason": "STOP"}]},
        (S(1, "search", {"query": "pumps", "limit": 2}),
         S(2, "read", {"path": "<step_1.items[0].path>"}, deps=(1,))),
        "JSON_FIELD_UNKNOWN JSON_SHAPE", absent="JSON_TOOL_KEY",
    ),
    "openai responses function_call items, arguments as a string": C(
        {"output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search",
             "arguments": "{\"query\": \"valves\"}", "status": "completed"}]},
        (S(1, "search", {"query": "valves"}),),
        "JSON_TEXT_IGNORED JSON_SHAPE", absent="STEP_NUMBER_INVALID JSON_TOOL_KEY",
    ),
    "openai chat tool_calls": C(
        {"tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sites", "arguments": "{}"}},
            {"id": "c2", "type": "function",
             "function": {"name": "wipe", "arguments": "{\"target\": \"${1}\"}"}}]},
        (S(1, "sites"), S(2, "wipe", {"target": "<step_1>"}, deps=(1,))),
        "JSON_REF_FORM", absent="JSON_FIELD_UNKNOWN JSON_TOOL_KEY",
    ),
    "two tool-like keys that disagree": C(
        [{"tool": "read", "action": "wipe", "args": {"path": "/tmp/x"}}],
        (S(1, "read", {"path": "/tmp/x"}, valid=False),),
        errors="JSON_TOOL_CONFLICT",
    ),
    "two fields naming two catalog tools": C(
        [{"tool": "read", "then": "wipe", "args": {"path": "/tmp/x"}}],
        (S(1, "read", {"path": "/tmp/x"}, valid=False),),
        errors="JSON_TOOL_CONFLICT", catalog=True,
    ),
    "a key the catalog finds, no catalog: reasoning with the field reported": C(
        {"steps": [{"use": "sites", "why": "to begin"}]},
        (S(1, None),), "JSON_NO_TOOL JSON_FIELD_UNKNOWN",
    ),
    "a key the catalog finds, with the catalog": C(
        [{"use": "sites", "why": "to begin"}],
        (S(1, "sites"),), "JSON_TOOL_KEY JSON_FIELD_UNKNOWN", absent="JSON_NO_TOOL",
        catalog=True,
    ),
    "ids as strings": C(
        [{"id": "1", "tool": "sites"},
         {"id": "step2", "tool": "assets", "depends_on": ["1"],
          "args": {"site_name": "{step_1[0]}"}}],
        (S(1, "sites"), S(2, "assets", {"site_name": "<step_1[0]>"}, deps=(1,))),
        absent="STEP_NUMBER_INVALID DEPENDENCY_UNREADABLE",
    ),
    "ids as floats": C(
        [{"id": 1.0, "tool": "sites"}, {"id": 2.5, "tool": "sites"},
         {"id": 3.0, "tool": "assets", "depends_on": [1.0], "args": {"site_name": "x"}}],
        (S(1, "sites"), S(2, "sites"), S(3, "assets", {"site_name": "x"}, deps=(1,))),
        "STEP_NUMBER_FLOAT STEP_NUMBER_INVALID",
    ),
    "a positional list longer than the tool's parameters": C(
        [{"tool": "assets", "args": ["MAIN", "SOUTH"]}],
        (S(1, "assets", positional=("MAIN", "SOUTH"), valid=False),),
        errors="ARGS_POSITIONAL_EXTRA", catalog=True,
    ),
    "a positional list, no catalog": C(
        [{"tool": "history", "args": ["CH-6", "2024-01-01"]}],
        (S(1, "history", positional=("CH-6", "2024-01-01")),), "ARGS_POSITIONAL",
    ),
    "a cut reply": C('[{"tool": "sites", "args": {}}, {"tool": "assets", "args": {"si', None),
    "a key given twice in a step": C(
        '[{"id": 1, "tool": "read", "tool": "wipe", "args": {"path": "/"}}]',
        (S(1, "read", {"path": "/"}, valid=False),), errors="JSON_DUPLICATE_KEY",
    ),
    "an argument given twice": C(
        '{"steps": [{"id": 1, "tool": "search", "args": {"query": "a", "query": "b"}}]}',
        (S(1, "search", valid=False),), errors="JSON_DUPLICATE_KEY",
    ),
    "the plan's key given twice": C(
        '{"steps": [{"tool": "read"}], "steps": [{"tool": "wipe"}]}', None,
    ),
    "a tool-like key holding prose": C(
        [{"action": "Search the web for chillers"}],
        (S(1, "Search the web for chillers", valid=False),),
        errors="JSON_TOOL_UNIDENTIFIED", absent="JSON_NO_TOOL", catalog=True,
    ),
    "$N and #EN references": C(
        [{"tool": "sites"}, {"tool": "assets", "args": {"site_name": "$1", "note": "from #E1"}}],
        (S(1, "sites"), S(2, "assets", {"site_name": "<step_1>", "note": "T(from <step_1>)"},
                           deps=(1,))),
        "JSON_REF_FORM",
    ),
    "a price $5 is no reference, ${1} and $1 to an earlier step are": C(
        [{"tool": "sites"},
         {"tool": "search", "args": {"query": "$5", "limit": "$1", "x": "${1}"}}],
        (S(1, "sites"), S(2, "search", {"query": "$5", "limit": "<step_1>", "x": "<step_1>"},
                          deps=(1,))),
        "JSON_DOLLAR_TEXT JSON_REF_FORM",
    ),
    "a task naming another tool beside an explicit tool is the task": C(
        {"steps": [{"id": 1, "task": "read", "tool": "search", "args": {"query": "x"}}]},
        (S(1, "search", {"query": "x"}, task="read"),), absent="JSON_TOOL_CONFLICT JSON_TOOL_KEY",
        catalog=True,
    ),
    "0-based ids with step_N references": C(
        [{"id": 0, "tool": "sites"},
         {"id": 1, "tool": "assets", "depends_on": [0], "args": {"site_name": "<step_0[0]>"}}],
        (S(1, "sites"), S(2, "assets", {"site_name": "<step_1[0]>"}, deps=(1,))),
        "JSON_IDS_RENUMBERED JSON_REF_FORM", absent="DEPENDENCY_UNREADABLE",
    ),
    "no dependency written as -1, null and none": C(
        [{"id": 1, "tool": "sites", "depends_on": ["-1"]},
         {"id": 2, "tool": "sites", "depends_on": None},
         {"id": 3, "tool": "sites", "depends_on": ["none"]}],
        (S(1, "sites"), S(2, "sites"), S(3, "sites")), absent="DEPENDENCY_UNREADABLE",
    ),
    "task as a short identifier is the tool; as prose it is the task": C(
        {"steps": [{"id": 1, "task": "sites"}, {"id": 2, "task": "Summarize the sites"}]},
        (S(1, "sites"), S(2, None, task="Summarize the sites")),
        "JSON_TOOL_KEY JSON_NO_TOOL",
    ),
}


def _reply(case: Case) -> str:
    return case.reply if isinstance(case.reply, str) else json.dumps(case.reply)


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 25
    assert sum(c.catalog for c in CASES.values()) >= 6


def _check(plan: Plan, case: Case) -> None:
    assert case.steps is not None
    got = [(s.id, s.tool, canon(s.args), tuple(canon(list(s.positional))), s.depends_on,
            s.args_valid) for s in plan.steps]
    want = [(s.id, s.tool, canon(s.args), tuple(canon(list(s.positional))), s.deps, s.valid)
            for s in case.steps]
    assert got == want
    for s in case.steps:
        if s.task is not None:
            assert plan.step(s.id).task == s.task
    codes = {d.code for d in plan.diagnostics}
    assert case.codes <= codes, sorted(codes)
    assert not (case.absent & codes), sorted(codes)
    errors = {d.code for d in plan.diagnostics if d.severity is Severity.ERROR}
    assert case.errors <= errors, sorted(errors)
    if not case.errors:
        assert not errors, sorted(errors)
    for s in plan.steps:  # an invalid step is always explained by an error on it
        if not s.args_valid:
            assert any(d.step == s.id and d.severity is Severity.ERROR for d in plan.diagnostics)


@pytest.mark.parametrize("name", list(CASES))
def test_json_reply(name: str) -> None:
    case = CASES[name]
    text = _reply(case)
    catalog = CATALOG if case.catalog else None
    if case.steps is None:
        with pytest.raises(PlanParseError):
            parse_plan(text, "json", catalog=catalog)
        return
    if catalog is None:
        assert detect_dialect(text) == "json"
    plan = parse_plan(text, catalog=catalog)  # detected: with the catalog when given
    assert plan.dialect == "json"
    _check(plan, case)


def test_two_tool_keys_in_one_step_never_call_either() -> None:
    plan = parse_plan('[{"tool": "read", "action": "wipe"}]')
    conflict = next(d for d in plan.diagnostics if d.code == "JSON_TOOL_CONFLICT")
    assert "read" in conflict.message and "wipe" in conflict.message
    assert not plan.steps[0].args_valid


def test_an_unidentified_tool_gives_close_matches_from_the_catalog() -> None:
    plan = parse_plan('[{"action": "Serch the web for chillers"}]', catalog=CATALOG)
    d = next(d for d in plan.diagnostics if d.code == "JSON_TOOL_UNIDENTIFIED")
    assert d.severity is Severity.ERROR and "search" in d.message


def test_the_catalog_decides_which_key_is_the_tool_whatever_its_name() -> None:
    text = json.dumps([{"name": "fetch the history", "call": "history", "asset_id": "CH-6"}])
    plan = parse_plan(text, catalog=CATALOG)
    assert [(s.tool, canon(s.args)) for s in plan.steps] == [("history", {"asset_id": "CH-6"})]
    key = next(d for d in plan.diagnostics if d.code == "JSON_TOOL_KEY")
    assert "'call'" in key.message


@pytest.mark.parametrize(
    ("args", "code", "valid"),
    [
        ({"{step_1}": 1}, "REF_IN_KEY", False),
        ({"filters": [{"<step_1.id>": "x"}]}, "REF_IN_KEY", False),
        ({"{name}": 1}, "PLACEHOLDER_UNRECOGNIZED", True),
    ],
)
def test_a_placeholder_in_a_json_plans_argument_key_is_reported_as_in_hashstep(
    args: dict[str, Any], code: str, valid: bool
) -> None:
    plan = parse_plan(json.dumps([{"tool": "sites", "args": {}},
                                  {"tool": "assets", "args": args}]))
    assert code in {d.code for d in plan.diagnostics if d.step == 2}
    assert plan.step(2).args_valid is valid
