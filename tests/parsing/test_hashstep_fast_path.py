"""The hashstep parser's fast path gives what its general path gives (issue 29, goal 4).

`parse_hashstep` reads a plan of plain blocks (``#StepN`` / ``#ToolN`` / ``#ArgsN`` /
``#DependencyN``, plain strings and whole references) at once when
`planexec._fastpaths.ON`; anything it is not sure about goes to the general path. Random
plans, plain ones and plain ones with a few changes of the kinds models make (references
of every form, free-text placeholders, malformed JSON, duplicate keys, missing fields,
odd spacing, repeated numbers, unknown or empty tools, reasoning markers), and every file
of the real corpus are parsed both ways: the plans (steps, arguments, references,
diagnostics, source) or the errors must be equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planexec._fastpaths as _fastpaths
from planexec.errors import PlanParseError
from planexec.parsing import hashstep, parse_plan
from planexec.plan import Plan, Ref

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real_plans"
FILES = sorted(CORPUS.glob("*.txt")) if CORPUS.is_dir() else []


def _both_ways(text: str) -> tuple[Plan | str, Plan | str]:
    """``parse_plan(text)`` with the fast paths on and off (a rejection as its message
    and diagnostics)."""
    got: list[Plan | str] = []
    saved = _fastpaths.ON
    try:
        for on in (True, False):
            _fastpaths.ON = on
            try:
                got.append(parse_plan(text))
            except PlanParseError as exc:
                got.append(f"PlanParseError: {exc} {exc.args!r}")
    finally:
        _fastpaths.ON = saved
    return got[0], got[1]


# -- random plans: plain ones, and plain ones changed the way models write ----------------

_WORDS = st.sampled_from(["list", "the", "sites", "asset", "Chiller 6", "read", "a-b", "ok.",
                          "x,y", "it's", "(main)", "50%", "é", "done:"])
_PLAIN_TEXT = st.lists(_WORDS, min_size=1, max_size=4).map(" ".join)
_KEYS = st.sampled_from(["v", "site", "asset_id", "name", "limit", "q", "x1"])


def _plain_value(n: int, deps: list[int]) -> st.SearchStrategy[Any]:
    """A JSON value the fast path reads: plain text, scalars, references to ``deps``."""
    leaves: list[st.SearchStrategy[Any]] = [
        _PLAIN_TEXT, st.integers(-5, 10**6), st.booleans(), st.none(),
        st.floats(allow_nan=False, allow_infinity=False),
    ]
    if deps:
        dep = st.sampled_from(deps)
        leaves += [
            dep.map(lambda d: f"<step_{d}>"),
            dep.map(lambda d: f"{{step_{d}}}"),
            dep.map(lambda d: f"<step_{d}.items[0].id>"),
            dep.map(lambda d: f"{{step_{d}.name}}"),
        ]
    return st.recursive(
        st.one_of(leaves),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
        max_leaves=5,
    )


@st.composite
def plain_plans(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str]:
    """A plan of plain blocks: ``(blocks, separator before each)``."""
    n = draw(st.integers(1, 6))
    ids: list[int] = []
    nxt = draw(st.integers(1, 3))
    for _ in range(n):
        ids.append(nxt)
        nxt += draw(st.integers(1, 2))
    blocks = []
    for i, sid in enumerate(ids):
        earlier = ids[:i]
        deps = sorted(set(draw(st.lists(st.sampled_from(earlier), max_size=2)))) if earlier else []
        args = draw(st.dictionaries(_KEYS, _plain_value(sid, deps), max_size=3))
        refs_to = [d for d in deps]  # references only to declared dependencies
        blocks.append({
            "key": draw(st.sampled_from(["Step", "Task"])),
            "id": sid,
            "task": draw(_PLAIN_TEXT),
            "tool": draw(st.sampled_from(["work", "sites", "get_asset", "t-1", "_x"])),
            "args": args,
            "deps": refs_to,
            "dep_form": draw(st.sampled_from(["#S", "#E", "S", ""])),
            "sep": draw(st.sampled_from(["\n", "\n\n", "\n\n\n"])),
            "pad": draw(st.sampled_from(["", " ", "  ", "\t"])),
        })
    return blocks, draw(st.sampled_from(["", "\n", "\n\n"]))


def _render(block: dict[str, Any]) -> list[str]:
    n, pad = block["id"], block["pad"]
    deps = ", ".join(f"{block['dep_form']}{d}" for d in block["deps"]) or "None"
    return [
        f"#{block['key']}{n}:{pad or ' '}{block['task']}{pad}",
        f"#Tool{n}: {block['tool']}{pad}",
        f"#Args{n}: {json.dumps(block['args'])}{pad}",
        f"#Dependency{n}: {deps}{pad}",
    ]


def _text(blocks: list[dict[str, Any]], lead: str) -> str:
    out = lead
    for i, block in enumerate(blocks):
        out += "\n".join(_render(block))
        if i + 1 < len(blocks):
            out += block["sep"]
    return out


# Changes of the kinds models make, to one field's value of one block ({n}: the block's
# number, {p}: an earlier block's, {m}: another number) or to the lines around blocks.
_VALUE_CHANGES = {
    "args": [
        '{{"v": "#E1"}}', '{{"v": "step_{p}"}}', '{{"v": "from_step_{p}"}}', '{{"v": "Step 2"}}',
        '{{"v": "<asset id>"}}', '{{"v": "<chiller_asset_id>"}}', '{{"v": "<br>"}}',
        '{{"v": "after {{step_{p}}} ended"}}', '{{"v": "{{step_{p}}}.name"}}',
        '{{"v": "<step_{p}"}}', '{{"v": "{{{{step_{p}.id}}"}}', '{{"v": "{{{{step_{p}}}}}"}}',
        '{{"v": "<step_{p}>"}}', '{{"v": ["<step_{p}>", 1]}}', '{{"v": {{"w": "{{step_{p}}}"}}}}',
        '{{"v": "<step_{m}>"}}', '{{"v": "<step_{n}>"}}', '{{"v": "<step_1234567890>"}}',
        '{{"v": "<step_{p}.items[99999999999999999999]>"}}', '{{"v": "<step_{p}.é>"}}',
        '{{"v": "<step_{p}>x"}}', '{{"v": " <step_{p}>"}}', '{{"v": "<STEP_{p}>"}}',
        '{{"v": "{{name}}"}}', '{{"v": "$5"}}', '{{"v": "a|b"}}', '{{"v": "a*b"}}',
        '{{"v": "tab\\tin"}}', '{{"v": "line\\nbreak"}}', '{{"v": "[1, 2]"}}',
        '{{"v": "{{\\"a\\": 1}}"}}', '{{"step_{p}": 1}}', '{{"<x>": 1}}', '{{"a b": 1}}',
        '{{"é": 1}}', '{{"a": 1, "a": 2}}', '{{"a": NaN}}', '{{"a": Infinity}}', "{{'a': 1}}",
        '{{"a": 1,}}', '{{"a": 1}} trailing', '{{"a": [1, 2}}', '{{}} {{}}', '{{"a": 1}}}}',
        '{{"v": "$\\\\boxed{{x}}$"}}', '{{"v": "<|eom_id|>"}}', '{{"v": "assistantfinal"}}',
        "None", "", '"<step_{p}>"', "[1]", "`{{}}`", '{{"a": 1e999}}', '{{"a": 1.0}}',
    ],
    "tool": ["none", "None", "null", "nil", "no", "na", "", "iot.sites", "sites()",
             'sites(site_name="MAIN")', "Sites Tool", "`sites`", "**sites**", "sites-2",
             "ñame", "9sites"],
    "deps": ["#S1 and step 2", "#S{n}", "#S{m}", "#S{p}", "none.", "NONE", "nil", "-",
             "**#S{p}**", "{p} {p}", "#S{p}; #S{p}", "#S{p},#S{p}", "#Task{p}", "step_{p}",
             "#S{p}.", "<{p}>", "#s{p}", "#S 1", "", "#S1234567890"],
    "task": ["look at step {p} and <step_{p}>", "**bold**", "a #Tool{n}: inline",
             "assistantfinal then", "plan </think>", "", "  spaced  ", "_under", "x\u2028y",
             "a `code` b", "#E1 result"],
}
_FIELD_LINE = {"task": 0, "tool": 1, "args": 2, "deps": 3}
_LABEL = {"task": "Step", "tool": "Tool", "args": "Args", "deps": "Dependency"}
_LINE_CHANGES = [
    "#Tool{m}: work", "#Args{m}: {{}}", "#Step{m}: again", "#Step{n}: again", "#Agent{n}: iot",
    "#ExpectedOutput{n}: things", "- #Tool{n}: work", "**#Tool{n}:** work", "#tool{n}: work",
    "# Plan", "Some prose.", "```", "```json", "---", "", "   ", "\t", "assistantfinal",
    "</think>", "<|eom_id|>", "$\\boxed{{", "}}$",
]


@st.composite
def changed_plans(draw: st.DrawFn) -> str:
    """A plain plan with one to three changes: field values, numbers, lines."""
    blocks, lead = draw(plain_plans())
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(blocks) - 1))
        block = blocks[i]
        n = block["id"]
        fmt = {"n": n, "p": blocks[i - 1]["id"] if i else n, "m": n + draw(st.sampled_from(
            [-1, 1, 5]))}
        how = draw(st.sampled_from(["value", "value", "value", "renumber", "line"]))
        if how == "value":
            kind = draw(st.sampled_from(sorted(_VALUE_CHANGES)))
            block.setdefault("lines", _render(block))
            value = draw(st.sampled_from(_VALUE_CHANGES[kind])).format(**fmt)
            if _FIELD_LINE[kind] < len(block["lines"]):  # (not a line deleted before)
                block["lines"][_FIELD_LINE[kind]] = f"#{_LABEL[kind]}{n}: {value}"
        elif how == "renumber":  # a repeated, restarting or lower number
            block["id"] = draw(st.sampled_from([b["id"] for b in blocks] + [0, 1]))
            block.pop("lines", None)
        else:
            block.setdefault("lines", _render(block))
            at = draw(st.integers(0, len(block["lines"])))
            change = draw(st.sampled_from(["insert", "delete", "join", "cut", "cr"]))
            if change == "insert":
                block["lines"].insert(at, draw(st.sampled_from(_LINE_CHANGES)).format(**fmt))
            elif change == "delete" and at < len(block["lines"]):
                del block["lines"][at]
            elif change == "join" and at + 1 < len(block["lines"]):
                block["lines"][at : at + 2] = [" ".join(block["lines"][at : at + 2])]
            elif change == "cut" and at < len(block["lines"]):
                line = block["lines"][at]
                block["lines"][at] = line[: draw(st.integers(0, len(line)))]
            elif change == "cr" and at < len(block["lines"]):
                block["lines"][at] += "\r"
    out = lead
    for i, block in enumerate(blocks):
        out += "\n".join(block.get("lines") or _render(block))
        if i + 1 < len(blocks):
            out += block["sep"]
    return out


_SETTINGS = settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_SETTINGS
@given(plain_plans())
def test_a_plain_plan_takes_the_fast_path_and_reads_as_the_general_path_reads_it(
    drawn: tuple[list[dict[str, Any]], str],
) -> None:
    blocks, lead = drawn
    text = _text(blocks, lead)
    assert hashstep._read_plain(text) is not None, text  # the fast path is taken
    fast, general = _both_ways(text)
    assert fast == general, text
    # and an oracle of its own for what the plan says: the ids, tools and references
    assert isinstance(fast, Plan)
    assert [s.id for s in fast.steps] == [b["id"] for b in blocks]
    assert [s.tool for s in fast.steps] == [b["tool"] for b in blocks]
    assert fast.diagnostics == ()
    for step, block in zip(fast.steps, blocks, strict=True):
        assert {r.step for r in step.refs} <= set(block["deps"])
        assert step.depends_on == tuple(block["deps"])


@_SETTINGS
@given(changed_plans())
def test_a_changed_plan_reads_the_same_with_the_fast_path_on_and_off(text: str) -> None:
    fast, general = _both_ways(text)
    assert fast == general, text


_BASE = [
    {"key": "Task", "id": 1, "task": "list sites", "tool": "sites", "args": {}, "deps": [],
     "dep_form": "#S", "sep": "\n\n", "pad": ""},
    {"key": "Task", "id": 2, "task": "read one", "tool": "assets",
     "args": {"site": "MAIN", "v": "<step_1>"}, "deps": [1], "dep_form": "#S", "sep": "\n",
     "pad": ""},
    {"key": "Step", "id": 3, "task": "the end", "tool": "work", "args": {"n": 3},
     "deps": [2], "dep_form": "#S", "sep": "\n", "pad": " "},
]
_SWEEP = [(kind, value) for kind in sorted(_VALUE_CHANGES) for value in _VALUE_CHANGES[kind]]


@pytest.mark.parametrize(("kind", "value"), _SWEEP)
def test_each_change_to_a_plain_block_reads_the_same_with_the_fast_path_on_and_off(
    kind: str, value: str
) -> None:
    # every change of the list, to the middle block of a plain plan that takes the fast path
    assert hashstep._read_plain(_text(_BASE, "")) is not None
    lines = [_render(block) for block in _BASE]
    lines[1][_FIELD_LINE[kind]] = f"#{_LABEL[kind]}2: " + value.format(n=2, p=1, m=3)
    text = "\n\n".join("\n".join(block) for block in lines)
    fast, general = _both_ways(text)
    assert fast == general, text


@pytest.mark.parametrize("text", [
    # the benchmark's chain (benchmarks/userpath.py plan_text), and plain shapes
    "\n".join(
        f"#Step{i}: step {i}\n#Tool{i}: work\n#Args{i}: "
        + ("{}" if i == 1 else f'{{"v": "<step_{i - 1}>"}}')
        + f"\n#Dependency{i}: " + ("None" if i == 1 else f"#S{i - 1}") + "\n"
        for i in range(1, 30)
    ),
    '#Task1: a\n#Tool1: sites\n#Args1: {}\n#Dependency1: None',
    '\n\n#Task1: a\n#Tool1: sites\n#Args1: {"q": [1, {"k": "x y"}]}\n#Dependency1: None\n\n',
    '#Task1: a\n#Tool1: s\n#Args1: {}\n#Dependency1: None\n\n'
    '#Task3: b\n#Tool3: t\n#Args3: {"v": "{step_1.items[0].id}"}\n#Dependency3: 1',
])
def test_plain_plans_take_the_fast_path(text: str) -> None:
    assert hashstep._read_plain(text) is not None
    fast, general = _both_ways(text)
    assert fast == general


def test_a_reference_read_by_the_fast_path_is_the_general_paths_reference() -> None:
    text = ('#Task1: a\n#Tool1: s\n#Args1: {}\n#Dependency1: None\n\n'
            '#Task2: b\n#Tool2: t\n#Args2: {"v": "<step_1.items[0].id>", "w": "{step_1}"}\n'
            '#Dependency2: #S1\n')
    fast, _ = _both_ways(text)
    assert isinstance(fast, Plan)
    assert fast.steps[1].args == {
        "v": Ref(1, ("items", 0, "id"), None, "<step_1.items[0].id>", True, "args.v"),
        "w": Ref(1, (), None, "{step_1}", True, "args.w"),
    }
    assert fast.steps[1].lines == (6, 9) and fast.steps[0].lines == (1, 4)


@pytest.mark.skipif(not FILES, reason=f"no plan corpus at {CORPUS}")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_corpus_file_reads_the_same_with_the_fast_path_on_and_off(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    fast, general = _both_ways(text)
    assert fast == general
