"""Any plan, rendered into each JSON shape the json dialect reads, parses back the same.

The oracle is the generated plan (tools, arguments, references, dependencies), never the
parser: each shape writes references in its own syntax (``<GENERATED>-N`` from 0,
``<node-N>``, ``$N``, ``#EN``, ``{step_N}``, ``<step_N>``) and ids the way that shape
counts them. A second property: no field of a step or of the plan disappears without a
diagnostic naming it.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.parsing import parse_plan
from planexec.parsing.jsonplan import ARGS_KEYS, DEPS_KEYS, TOOL_KEYS
from planexec.parsing.streaming import StreamingPlanParser
from planexec.plan import Plan, Ref, Template
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

PARAMS = {
    "list_sites": ["region"],
    "get_assets": ["site", "kind", "limit"],
    "read_history": ["asset", "start", "end"],
    "send_note": ["text"],
}
CATALOG = ToolCatalog([
    fake_tool(name, args={p: (str | int | None, None) for p in params})
    for name, params in PARAMS.items()
])


@dataclass(frozen=True)
class GenStep:
    tool: str
    args: dict[str, Any]
    """Values: literals, or ``("ref", N)`` (whole value), or ``("see", N)`` (embedded)."""
    extra_deps: tuple[int, ...]


VALUE = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + " .", min_size=1, max_size=8)
    .filter(lambda s: s.strip().lower() not in {"none", "null", "nil", "n/a"}),
    st.integers(-1000, 1000),
)


@st.composite
def plans(draw: st.DrawFn, embedded: bool = True) -> list[GenStep]:
    n = draw(st.integers(1, 5))
    steps: list[GenStep] = []
    for i in range(1, n + 1):
        tool = draw(st.sampled_from(sorted(PARAMS)))
        params = PARAMS[tool]
        k = draw(st.integers(1 if i > 1 else 0, len(params)))
        args: dict[str, Any] = {}
        for p in params[:k]:
            if i > 1 and draw(st.booleans()):
                kind = draw(st.sampled_from(["ref", "see"] if embedded else ["ref"]))
                args[p] = (kind, draw(st.integers(1, i - 1)))
            else:
                args[p] = draw(VALUE)
        extra = tuple(sorted(set(draw(st.lists(st.integers(1, i - 1), max_size=2))))) \
            if i > 1 else ()
        steps.append(GenStep(tool, args, extra))
    return steps


def refs_of(step: GenStep) -> set[int]:
    return {v[1] for v in step.args.values() if isinstance(v, tuple)}


def expected(plan: list[GenStep], with_deps: bool) -> list[tuple[Any, ...]]:
    out = []
    for i, s in enumerate(plan, start=1):
        args = {}
        for k, v in s.args.items():
            if isinstance(v, tuple):
                args[k] = f"<step_{v[1]}>" if v[0] == "ref" else f"T(see <step_{v[1]}>)"
            else:
                args[k] = v
        deps = refs_of(s) | (set(s.extra_deps) if with_deps else set())
        out.append((i, s.tool, args, tuple(sorted(deps))))
    return out


def canon(value: Any) -> Any:
    if isinstance(value, Ref):
        return value.canonical
    if isinstance(value, Template):
        return "T(" + "".join(p.canonical if isinstance(p, Ref) else p for p in value.parts) + ")"
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items()}
    return value


def got(plan: Plan) -> list[tuple[Any, ...]]:
    return [(s.id, s.tool, canon(s.args), s.depends_on) for s in plan.steps]


RefForm = Callable[[int], str]


def values(step: GenStep, ref: RefForm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in step.args.items():
        if isinstance(v, tuple):
            out[k] = ref(v[1]) if v[0] == "ref" else f"see {ref(v[1])}"
        else:
            out[k] = v
    return out


def documented(plan: list[GenStep]) -> Any:
    return {"steps": [
        {"id": i, "task": f"do {i}", "tool": s.tool, "args": values(s, lambda n: f"<step_{n}>"),
         "depends_on": sorted(refs_of(s) | set(s.extra_deps))}
        for i, s in enumerate(plan, start=1)]}


def hugginggpt(plan: list[GenStep]) -> Any:
    return [
        {"task": s.tool, "id": i - 1,
         "dep": sorted(d - 1 for d in refs_of(s) | set(s.extra_deps)) or [-1],
         "args": values(s, lambda n: f"<GENERATED>-{n - 1}")}
        for i, s in enumerate(plan, start=1)]


def taskbench(plan: list[GenStep]) -> Any:
    links = [{"source": d - 1, "target": i - 1}
             for i, s in enumerate(plan, start=1) for d in sorted(refs_of(s) | set(s.extra_deps))]
    nodes = []
    for s in plan:
        vals = values(s, lambda n: f"<node-{n - 1}>")
        nodes.append({"task": s.tool, "arguments": [vals[p] for p in PARAMS[s.tool] if p in vals]})
    return {"task_steps": [f"Step {i}" for i in range(1, len(plan) + 1)], "task_nodes": nodes,
            "task_links": links}


def operation(plan: list[GenStep]) -> Any:
    return {"plan": [
        {"id": i, "operation": s.tool, "parameters": values(s, lambda n: f"{{step_{n}}}"),
         "dependencies": sorted(refs_of(s) | set(s.extra_deps)), "description": f"step {i}"}
        for i, s in enumerate(plan, start=1)]}


def action_flat(plan: list[GenStep]) -> Any:
    return {"steps": [
        {"step": i, "action": s.tool, **values(s, lambda n: f"#E{n}"),
         "deps": sorted(refs_of(s) | set(s.extra_deps))}
        for i, s in enumerate(plan, start=1)]}


def openai(plan: list[GenStep]) -> Any:
    return {"tool_calls": [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": s.tool, "arguments": json.dumps(values(s, lambda n: f"<step_{n}>"))}}
        for i, s in enumerate(plan, start=1)]}


def anthropic(plan: list[GenStep]) -> Any:
    return {"role": "assistant", "content": [{"type": "text", "text": "Plan:"}] + [
        {"type": "tool_use", "id": f"toolu_{i}", "name": s.tool,
         "input": values(s, lambda n: f"{{step_{n}}}")}
        for i, s in enumerate(plan, start=1)]}


def gemini(plan: list[GenStep]) -> Any:
    return {"candidates": [{"content": {"parts": [
        {"functionCall": {"name": s.tool, "args": values(s, lambda n: f"${n}")}}
        for s in plan]}}]}


def responses(plan: list[GenStep]) -> Any:
    return {"output": [
        {"type": "function_call", "call_id": f"c{i}", "name": s.tool,
         "arguments": json.dumps(values(s, lambda n: f"#E{n}"))}
        for i, s in enumerate(plan, start=1)]}


# shape: (render, reads dependencies, needs the catalog, references may be embedded)
SHAPES: dict[str, tuple[Callable[[list[GenStep]], Any], bool, bool, bool]] = {
    "documented": (documented, True, False, True),
    "hugginggpt": (hugginggpt, True, False, True),
    "taskbench": (taskbench, True, True, True),
    "operation": (operation, True, False, True),
    "action_flat": (action_flat, True, True, True),
    "openai": (openai, False, False, True),
    "anthropic": (anthropic, False, False, True),
    "gemini": (gemini, False, False, False),  # $N is a reference only as a whole value
    "responses": (responses, False, False, True),
}


@settings(max_examples=60, deadline=None)
@given(plans(embedded=True), plans(embedded=False))
def test_any_plan_in_any_shape_parses_back_to_the_same_plan(
    plan: list[GenStep], whole_refs_only: list[GenStep]
) -> None:
    for render, with_deps, needs_catalog, embedded in SHAPES.values():
        one = plan if embedded else whole_refs_only
        text = json.dumps(render(one))
        for catalog in (CATALOG,) if needs_catalog else (None, CATALOG):
            parsed = parse_plan(text, catalog=catalog)
            assert parsed.dialect == "json"
            assert got(parsed) == expected(one, with_deps), text
            assert all(s.args_valid for s in parsed.steps)
            assert not parsed.has_errors, [str(d) for d in parsed.errors]


RESERVED = set(TOOL_KEYS) | set(ARGS_KEYS) | set(DEPS_KEYS) | {
    "id", "step_id", "step", "number", "step_number", "task_id", "description", "thought",
    "instruction", "step_description", "expected_output", "expected", "expectedOutput",
    "server", "agent", "ID", "Task", "type", "index",
}
EXTRA_KEY = st.from_regex(r"\A[a-z][a-z_]{1,10}\Z").filter(lambda k: k not in RESERVED)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.dictionaries(EXTRA_KEY, VALUE, max_size=3), min_size=1, max_size=4),
    st.dictionaries(EXTRA_KEY.filter(lambda k: k not in ("steps", "plan")), VALUE, max_size=2),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_no_field_disappears_without_a_diagnostic(
    extras: list[dict[str, Any]], top: dict[str, Any], with_args: bool, catalog: bool,
    tool_key: bool,
) -> None:
    steps = []
    for i, extra in enumerate(extras, start=1):
        step: dict[str, Any] = {"id": i, **extra}
        if tool_key:
            step["tool"] = "get_assets"
        if with_args:
            step["args"] = {"site": "MAIN"}
        steps.append(step)
    text = json.dumps({"steps": steps, **top})
    parsed = parse_plan(text, catalog=CATALOG if catalog else None)
    by_step = {s.id: s for s in parsed.steps}
    for i, extra in enumerate(extras, start=1):
        step_read = by_step[i]
        for key in extra:
            if key in step_read.args:
                continue
            assert any(f"'{key}'" in d.message and d.step == i for d in parsed.diagnostics), (
                key, text, [str(d) for d in parsed.diagnostics])
    for key in top:
        assert any(f"'{key}'" in d.message and d.step is None for d in parsed.diagnostics), key


@settings(max_examples=40, deadline=None)
@given(plans(embedded=True), st.lists(st.integers(0, 10**6), max_size=12), st.data())
def test_a_streamed_plan_read_with_the_catalog_ends_as_the_whole_parse_reads_it(
    plan: list[GenStep], cuts: list[int], data: st.DataObject
) -> None:
    """The shapes only a catalog reads (a tool named under ``task`` or ``action``) stream
    as tool steps: the stream's end is ``parse_plan(text, catalog=...)`` and the steps
    reported live are its steps (without the catalog the stream read them otherwise)."""
    name = data.draw(st.sampled_from([k for k, v in SHAPES.items() if v[2]]))
    render, with_deps = SHAPES[name][0], SHAPES[name][1]
    text = json.dumps(render(plan), indent=1)
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    parser = StreamingPlanParser(catalog=CATALOG)
    live: dict[int, Any] = {}
    for a, b in zip(points, points[1:], strict=False):
        update = parser.feed(text[a:b])
        for sid in update.withdrawn:
            del live[sid]
        live.update({s.id: s for s in update.arrived})
    end = parser.finish()
    for sid in end.update.withdrawn:
        del live[sid]
    live.update({s.id: s for s in end.update.arrived})
    assert end.plan == parse_plan(text, catalog=CATALOG)
    assert got(end.plan) == expected(plan, with_deps)  # the generated plan: the oracle
    assert live == {s.id: s for s in end.plan.steps}
