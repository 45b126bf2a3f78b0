"""Arguments written inside the ``#Tool`` call, and free-text placeholders (issue 13).

The AssetOpsBench plan-and-execute prompt has no ``#Args`` field, so models write
``#Tool2: assets(site_name: "MAIN")``. These lines are written in the spirit of the real
plans (mixed ``:`` and ``=``, quotes, Python literals, placeholders in words, signatures
echoed instead of values); none is copied from the corpus.
"""

from __future__ import annotations

import json
import keyword
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planexec.errors import PlanParseError
from planexec.parsing import parse_plan
from planexec.parsing.hashstep import parse_hashstep
from planexec.parsing.refs import NO_STEP
from planexec.plan import Plan, Ref, Severity, Template


def _plan(tool_line: str, *, deps: str = "#S1", args: str | None = None) -> Plan:
    text = (
        "#Task1: List the sites.\n#Server1: iot\n#Tool1: sites\n#Dependency1: None\n\n"
        "#Task2: Do it.\n#Server2: iot\n"
        f"#Tool2: {tool_line}\n"
        + (f"#Args2: {args}\n" if args is not None else "")
        + (f"#Dependency2: {deps}\n" if deps else "")
        + "#ExpectedOutput2: something\n"
    )
    return parse_hashstep(text)


def _view(value: Any) -> Any:
    """Arguments with references written as ``("ref", step, path, hint)``."""
    if isinstance(value, Ref):
        return ("ref", value.step, value.path, value.hint)
    if isinstance(value, Template):
        return ("tmpl", tuple(_view(p) for p in value.parts))
    if isinstance(value, dict):
        return {k: _view(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_view(v) for v in value]
    return value


def _codes(plan: Plan, step: int = 2) -> dict[str, str]:
    return {d.code: d.severity.value for d in plan.diagnostics if d.step == step}


def R(step: int, *path: Any, hint: str | None = None) -> tuple[Any, ...]:  # noqa: N802
    return ("ref", step, tuple(path), hint)


OK = True
BAD = False

# (tool line, expected args, valid, codes that must be there (code -> severity))
TABLE: list[tuple[str, dict[str, Any], bool, dict[str, str]]] = [
    ('assets(site_name: "MAIN")', {"site_name": "MAIN"}, OK, {"TOOL_NAME_NORMALIZED": "info"}),
    ("assets(site_name='MAIN')", {"site_name": "MAIN"}, OK, {}),
    (
        'history_csv(site_name: "MAIN", asset_id: <chiller_asset_id>, start="2020-06-01", '
        'final="2020-07-01")',
        {"site_name": "MAIN", "asset_id": R(1, hint="chiller_asset_id"),
         "start": "2020-06-01", "final": "2020-07-01"},
        OK,
        {"REF_HINTED": "warning"},
    ),
    (
        'csv_stats(csv_path=<output from Task1>, columns=["temperature"], threshold=0.05, '
        "strict=False)",
        {"csv_path": R(1, hint="output from Task1"), "columns": ["temperature"],
         "threshold": 0.05, "strict": False},
        OK,
        {"REF_HINTED": "warning"},
    ),
    ("sensors(site_name: None, flag: True, n: 3, xs: [1, 2.5, -4])",
     {"site_name": None, "flag": True, "n": 3, "xs": [1, 2.5, -4]}, OK, {}),
    ('q(a: null, b: true, c: {"k": [1, {"m": "x"}]})',
     {"a": None, "b": True, "c": {"k": [1, {"m": "x"}]}}, OK, {}),
    ('f(text="a, b (c) [d] {e}", other=\'it\\\'s\')',
     {"text": "a, b (c) [d] {e}", "other": "it's"}, OK, {}),
    ("f(nested=[[1, [2, [3]]], {'a': ('x', 'y')}])",
     {"nested": [[1, [2, [3]]], {"a": ["x", "y"]}]}, OK, {}),
    ("assets(site_name: MAIN)", {"site_name": "MAIN"}, OK, {"ARGS_REPAIRED": "warning"}),
    ("assets(site_name=<step_1[0].name>)", {"site_name": R(1, 0, "name")}, OK, {}),
    ('assets(site_name="{step_1[0]}")', {"site_name": R(1, 0)}, OK, {}),
    ("assets(site_name={the site from step 1})",
     {"site_name": R(1, hint="the site from step 1")}, OK, {"REF_HINTED": "warning"}),
    ('f(query="hometown of <step_1.name>")',
     {"query": ("tmpl", ("hometown of ", R(1, "name")))}, OK, {}),
    ('f(query: "id of <the chiller asset id>")',
     {"query": ("tmpl", ("id of ", R(1, hint="the chiller asset id")))}, OK,
     {"REF_HINTED": "warning"}),
    ('f(html="a <b>bold</b> tag", cmp="a < b and c > d")',
     {"html": "a <b>bold</b> tag", "cmp": "a < b and c > d"}, OK, {}),
    # signatures echoed instead of values: no values, a warning, nothing invalid
    ("sensors(site_name, asset_id)", {}, OK, {"TOOL_NAME_NORMALIZED": "warning"}),
    ("history(site_name: string, final: any?)", {}, OK, {"TOOL_NAME_NORMALIZED": "warning"}),
    ("history(site_name: str, start: Optional[str], ids: list[int] | None)", {}, OK,
     {"TOOL_NAME_NORMALIZED": "warning"}),
    ('history(site_name: str, start="2020-06-01")', {"start": "2020-06-01"}, OK,
     {"TOOL_NAME_NORMALIZED": "warning"}),
    # unreadable: an error, and the arguments are invalid (never {} and valid)
    ('history(site_name: "MAIN", start=', {}, BAD, {"ARGS_SYNTAX": "error"}),
    ('history(site_name: "MAIN" "x")', {}, BAD, {"ARGS_SYNTAX": "error"}),
    ('f(a="x", a="y")', {}, BAD, {"ARGS_SYNTAX": "error"}),
    ("f(a=[1, 2)", {}, BAD, {"ARGS_SYNTAX": "error"}),
    ("f(a=[1, ...])", {}, BAD, {"ARGS_SYNTAX": "error"}),
    ('f(a="unterminated)', {}, BAD, {"ARGS_SYNTAX": "error"}),
]


@pytest.mark.parametrize(("line", "args", "valid", "codes"), TABLE, ids=[t[0] for t in TABLE])
def test_inline_call_arguments(
    line: str, args: dict[str, Any], valid: bool, codes: dict[str, str]
) -> None:
    plan = _plan(line)
    step = plan.step(2)
    assert step.tool == line.split("(")[0]
    assert _view(step.args) == args
    assert step.args_valid is valid
    found = _codes(plan)
    for code, sev in codes.items():
        assert found.get(code) == sev, (code, found)
    if not valid:
        assert any(d.step == 2 and d.severity is Severity.ERROR for d in plan.diagnostics)
    for ref in step.refs:
        assert ref.step in step.depends_on


def test_positional_inline_arguments_are_bound_in_order() -> None:
    plan = _plan('assets("MAIN", 3)')
    step = plan.step(2)
    assert step.positional == ("MAIN", 3) and step.args == {} and step.args_valid
    assert _codes(plan)["ARGS_POSITIONAL"] == "warning"


def test_a_call_cut_off_at_the_end_of_the_reply_is_truncated() -> None:
    text = (
        "#Task1: a\n#Tool1: sites()\n#Dependency1: None\n"
        '#Task2: b\n#Tool2: history(site_name: "MAIN", asset_id: <step_1.id>, start="2020-'
    )
    step = parse_hashstep(text).step(2)
    assert step.tool == "history" and not step.args_valid
    plan = parse_hashstep(text)
    assert _codes(plan).get("ARGS_TRUNCATED") == "error"


def test_inline_and_args_are_merged() -> None:
    plan = _plan('assets(site_name: "MAIN")', args='{"limit": 5, "site_name": "MAIN"}')
    step = plan.step(2)
    assert step.args == {"limit": 5, "site_name": "MAIN"} and step.args_valid
    assert "ARGS_CONFLICT" not in _codes(plan)


def test_a_key_given_twice_with_different_values_is_an_error_naming_both() -> None:
    plan = _plan('assets(site_name: "MAIN")', args='{"site_name": "OTHER"}')
    step = plan.step(2)
    assert not step.args_valid
    conflict = next(d for d in plan.diagnostics if d.code == "ARGS_CONFLICT")
    assert conflict.severity is Severity.ERROR
    assert "'MAIN'" in conflict.message and "'OTHER'" in conflict.message


def test_positional_arguments_in_both_places_conflict() -> None:
    plan = _plan('json_reader("a.json")', args='"{step_1}"')
    assert not plan.step(2).args_valid
    assert _codes(plan)["ARGS_CONFLICT"] == "error"


def test_text_after_the_call_is_reported() -> None:
    plan = _plan('assets(site_name="MAIN") to list the assets')
    assert plan.step(2).args == {"site_name": "MAIN"}
    msgs = [d.message for d in plan.diagnostics if d.code == "TOOL_NAME_NORMALIZED"]
    assert any("to list the assets" in m for m in msgs)


def test_llmcompiler_and_hashstep_share_one_call_reader() -> None:
    from planexec.parsing import _common, llmcompiler

    assert llmcompiler.read_call_args is _common.read_call_args


# --- free-text placeholders -----------------------------------------------------------


def test_a_placeholder_naming_no_step_refers_over_the_declared_dependencies() -> None:
    text = (
        "#Task1: a\n#Tool1: sites()\n#Dependency1: None\n"
        "#Task2: b\n#Tool2: assets(site_name: <site_name>)\n#Dependency2: #S1\n"
        "#Task3: c\n#Tool3: history(asset_id=<chiller_asset_id>)\n#Dependency3: #S2, #S1\n"
    )
    plan = parse_plan(text)
    ref = plan.step(3).args["asset_id"]
    assert isinstance(ref, Ref) and ref.is_hinted and ref.hint == "chiller_asset_id"
    assert ref.step == 1 and plan.step(3).depends_on == (1, 2)
    msg = next(d.message for d in plan.diagnostics if d.step == 3 and d.code == "REF_HINTED")
    assert "declared dependencies (1, 2)" in msg


@pytest.mark.parametrize(
    ("written", "step"),
    [
        ("<output from Task1>", 1),
        ("<result of step 1>", 1),
        ("{the asset id from step 1}", 1),
        ("<the #S1 list>", 1),
    ],
)
def test_a_placeholder_naming_a_step_refers_to_it_and_adds_the_dependency(
    written: str, step: int
) -> None:
    text = (
        "#Task1: a\n#Tool1: sites()\n#Dependency1: None\n"
        f"#Task2: b\n#Tool2: assets(site_name={written})\n#Dependency2: None\n"
    )
    plan = parse_plan(text)
    ref = plan.step(2).args["site_name"]
    assert isinstance(ref, Ref) and ref.is_hinted and ref.step == step
    assert plan.step(2).depends_on == (step,)
    assert {"REF_HINTED", "DEPENDENCY_ADDED"} <= set(_codes(plan))


def test_a_placeholder_without_dependencies_is_a_missing_reference() -> None:
    plan = parse_plan("#Task1: a\n#Tool1: assets(site_name: <site_name>)\n")
    ref = plan.step(1).args["site_name"]
    assert isinstance(ref, Ref) and ref.step == NO_STEP and ref.is_hinted
    assert any(d.code == "REF_MISSING" and d.severity is Severity.ERROR for d in plan.diagnostics)


@pytest.mark.parametrize(
    "text", ["a <b> tag", "a < b", "x<y and z>w", "</b>", "<br>", "1 <2 and 3> 4x", "Hello {name}"]
)
def test_tags_and_comparisons_in_text_are_not_placeholders(text: str) -> None:
    plan = _plan(f"f(a={json.dumps(text)})")
    assert plan.step(2).args == {"a": text}


def test_a_free_text_placeholder_in_args_json_is_a_hinted_reference_too() -> None:
    plan = _plan("history", args='{"asset_id": "<chiller_asset_id>"}')
    ref = plan.step(2).args["asset_id"]
    assert isinstance(ref, Ref) and ref.step == 1 and ref.hint == "chiller_asset_id"


# --- reply cleanup for every dialect --------------------------------------------------


def test_rewoo_reads_the_plan_after_the_reasoning_block() -> None:
    text = (
        "<think>\nPlan: draft\n#E1 = Draft[x]\n</think>\n"
        "Plan: search.\n#E1 = Google[winner]<|eot_id|>\n"
    )
    plan = parse_plan(text, dialect="rewoo")
    assert [s.tool for s in plan.steps] == ["Google"]
    codes = {d.code for d in plan.diagnostics}
    assert {"REASONING_DROPPED", "SPECIAL_TOKEN"} <= codes and "DUPLICATE_STEP" not in codes


def test_llmcompiler_reads_the_plan_after_the_reasoning_block() -> None:
    text = "<think>\n1. draft(1)\n</think>\n1. search('winner')\n2. join()<END_OF_PLAN>\n"
    plan = parse_plan(text, dialect="llmcompiler")
    assert [s.tool for s in plan.steps] == ["search"] and plan.steps[0].lines == (4, 4)
    codes = {d.code for d in plan.diagnostics}
    assert "REASONING_DROPPED" in codes and "DUPLICATE_STEP" not in codes


def test_llmcompiler_reads_a_plan_after_assistantfinal() -> None:
    text = "analysis: 1. wrong(0)\nassistantfinal1. search('x')\n2. join()"
    plan = parse_plan(text, dialect="llmcompiler")
    assert [s.tool for s in plan.steps] == ["search"]


# --- round trip -----------------------------------------------------------------------


@dataclass(frozen=True)
class _RefSpec:
    step: int
    path: tuple[str | int, ...]
    form: str  # "angle", "brace", "quoted"


_TEXT = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc"), blacklist_characters="<>{}$#\\\u2028\u2029\x85"
    ),
    max_size=20,
).filter(lambda t: "assistantfinal" not in t)  # a reply-level marker (see clean_reply)
_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda k: not keyword.iskeyword(k)
)
_REF = st.builds(
    _RefSpec,
    st.integers(1, 9),
    st.lists(st.one_of(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
                       st.integers(0, 5)), max_size=2).map(tuple),
    st.sampled_from(["angle", "brace", "quoted"]),
)



@dataclass(frozen=True)
class _Embedded:
    before: str
    ref: _RefSpec
    after: str


_WORDS = st.from_regex(r"[A-Za-z ,():;!?]{0,12}", fullmatch=True)
_EMBED = st.builds(_Embedded, _WORDS, _REF, _WORDS)
_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32), _TEXT, _REF, _EMBED,
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)
    ),
    max_leaves=8,
)


def _path_text(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _render(value: Any, style: str) -> str:
    if isinstance(value, _Embedded):
        body = f"step_{value.ref.step}{_path_text(value.ref.path)}"
        return json.dumps(f"{value.before}<{body}>{value.after}")
    if isinstance(value, _RefSpec):
        body = f"step_{value.step}{_path_text(value.path)}"
        if value.form == "angle":
            return f"<{body}>"
        if value.form == "brace":
            return "{" + body + "}"
        return json.dumps(f"<{body}>")
    if value is None:
        return "None" if style == "=" else "null"
    if isinstance(value, bool):
        return ("True" if value else "False") if style == "=" else ("true" if value else "false")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=style == "=")
    if isinstance(value, list):
        return "[" + ", ".join(_render(v, style) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)}: {_render(v, style)}" for k, v in value.items()) + "}"


def _expected(value: Any) -> Any:
    if isinstance(value, _Embedded):
        ref = ("ref", value.ref.step, value.ref.path, None)
        if not value.before.strip() and not value.after.strip():
            return ref
        parts = [p for p in (value.before, ref, value.after) if p != ""]
        return ("tmpl", tuple(parts))
    if isinstance(value, _RefSpec):
        return ("ref", value.step, value.path, None)
    if isinstance(value, list):
        return [_expected(v) for v in value]
    if isinstance(value, dict):
        return {k: _expected(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    args=st.dictionaries(_KEY, _VALUE, min_size=1, max_size=4),
    style=st.sampled_from([":", "="]),
)
def test_any_arguments_rendered_as_an_inline_call_read_back_the_same(
    args: dict[str, Any], style: str
) -> None:
    sep = ": " if style == ":" else "="
    call = "tool(" + ", ".join(f"{k}{sep}{_render(v, style)}" for k, v in args.items()) + ")"
    plan = parse_hashstep(f"#Task1: a\n#Tool1: {call}\n#Dependency1: None\n")
    step = plan.steps[0]
    assert step.args_valid, [str(d) for d in plan.diagnostics]
    assert _view(step.args) == _expected(args)


@settings(max_examples=300, deadline=None)
@given(inside=st.text(max_size=40))
def test_no_call_loses_a_value_without_an_error(inside: str) -> None:
    text = f"#Task1: a\n#Tool1: tool({inside})\n#Dependency1: None\n"
    try:
        plan = parse_hashstep(text)
    except PlanParseError:
        # refused loudly, e.g. a lone "</think>" inside the call: what comes before it is
        # read as leaked reasoning (REASONING_DROPPED), and what is left holds no step
        return
    step = plan.steps[0]
    if step.args_valid and not step.args and not step.positional:
        # only allowed when nothing was inside, or it only named parameters
        assert not inside.strip() or any(
            d.code == "TOOL_NAME_NORMALIZED" and d.severity is Severity.WARNING
            for d in plan.diagnostics
        ) or not step.tool == "tool", (inside, [str(d) for d in plan.diagnostics])
