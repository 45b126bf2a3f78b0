"""How many LLM calls argument resolution costs: planexec against two naive policies.

Plans: (a) the demo plans (``planexec/examples/plans/*.txt``), run over the real demo
tools (`planexec.examples.tools.demo_tools`, a fresh work-order book per run); (b) the
real planner outputs in ``shared/corpus/real_plans/*.txt`` that parse and have
arguments, run over fake tools built from the plan itself (see `synthetic_outputs`).
Without the corpus directory, (b) is skipped and the JSON says so.

Policies, all run in the same harness (the real `Executor`, the same tools, the same
plans, the same fake model; calls counted by `Usage` under purpose ``resolve``):

- ``planexec``: the real `ArgResolver`; the LLM fallback is called only for hinted
  references, paths that do not exist in the output, values that do not fit the tool's
  schema and literal text that looks like a placeholder.
- ``per_placeholder_step`` (baseline A): one call for every tool step whose arguments
  hold a reference or placeholder-looking text — what naive systems do.
- ``per_tool_step`` (baseline B): one call for every tool step.

A baseline resolver makes its one counted call (a "fill these arguments" prompt whose
reply is discarded), then obtains the arguments from planexec's resolver on a side
client whose calls are *not* counted. So the three policies call the same tools with
the same arguments and see the same outputs; only the counted calls differ. Every
policy is charged only for tool steps that reach argument resolution (a step with
unreadable ``#Args`` or blocked by a failed upstream step costs nothing in any policy);
``statuses`` in the JSON shows what happened to every step, and ``consistent`` checks
that the three runs ended every step the same way.

The fake model (`answer_prompt`) answers with a JSON object holding every key the prompt
asks for: the value under the same key (or ``id`` for ``*_id``, ``name`` for ``*_name``)
in the referenced outputs shown, preferring the object whose text values appear in the
argument's hint (``Chiller 6`` in ``{asset_id_for_Chiller_6_from_step_1}``), else a
synthetic value of the argument's schema type. Its replies are always usable, so the
resolver's one retry never fires here.

Reasoning steps (no tool) resolve no arguments in any policy; a stub `Reasoner` returns
a short text (no model call), so steps referring to them are not blocked.

Writes ``benchmarks/results/resolution_calls.json`` and prints a table::

    python benchmarks/resolution_calls.py [--no-corpus] [--quiet]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from loguru import logger
from pydantic import BaseModel, ConfigDict, create_model

from planexec._models import ModelClient
from planexec.config import ExecutorSettings
from planexec.errors import ErrorKind, PlanParseError
from planexec.events import EventBus
from planexec.executor import Executor
from planexec.filters import Field, Key, Pick, Select, parse_hint
from planexec.parsing import contains_placeholder, parse_plan
from planexec.parsing.refs import is_free_placeholder
from planexec.plan import PathElem, Plan, Step, iter_refs, to_jsonable
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs, follow_path
from planexec.results import ResolutionMethod, StepResult, Usage, jsonable
from planexec.testing import FunctionChatModel, fake_tool, messages_text
from planexec.tools import ToolCatalog, ToolSpec

__all__ = [
    "POLICIES",
    "PlanReport",
    "PolicyRun",
    "answer_prompt",
    "corpus_tools",
    "has_placeholder",
    "measure_plan",
    "run_policy",
    "synthetic_outputs",
]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEMO_PLANS = ROOT / "planexec" / "examples" / "plans"
CORPUS_CANDIDATES = tuple(
    base / "shared" / "corpus" / "real_plans" for base in (ROOT.parent, ROOT.parent.parent)
)
"""Where the corpus is looked for: ``shared/`` beside the checkout, or beside its parent
(a git worktree under ``wt/``); ``--corpus DIR`` names it."""
CORPUS = next((c for c in CORPUS_CANDIDATES if c.is_dir()), CORPUS_CANDIDATES[0])

POLICIES = ("planexec", "per_placeholder_step", "per_tool_step")
"""planexec's own policy, then baseline A and baseline B."""

STAGES: dict[str, dict[str, Any]] = {
    "before": {"filters": False, "ungrounded": "warn"},
    "after_no_prose": {"prose_hints": False},
    "after": {},
}
"""planexec's resolver before issue 19 (no filter tier; ungrounded values only
recorded), with the filter tier but without its prose form (``prose_hints=False``: the
default until the word form and prose-by-default), and as it is now (the defaults: the
filter tier with its prose form, ``ungrounded="reresolve"``). All three in one run."""

ToolsFactory = Callable[[], list[BaseTool]]
"""Builds a fresh set of tools for one run (no state shared between runs)."""


# -- what a step holds -------------------------------------------------------------------


def has_placeholder(step: Step, dialect: str | None = None) -> bool:
    """Whether a step's arguments hold a reference or placeholder-looking text.

    This is what baseline A pays one call for: a `Ref`/`Template` anywhere in the
    keyword or positional arguments, or a literal string that `contains_placeholder`
    flags (``{current_date_time()}``, ``<asset id>``...).
    """
    return contains_placeholder(step.args, dialect=dialect) or contains_placeholder(
        list(step.positional), dialect=dialect
    )


def _has_args(step: Step) -> bool:
    return bool(step.args or step.positional or (step.args_text or "").strip() not in (
        "", "{}", "None", "none", "null"
    ))


# -- synthetic outputs for corpus plans ---------------------------------------------------


def _leaf(tool: str, path: Sequence[PathElem]) -> str:
    """A synthetic scalar standing for the value at ``path`` of ``tool``'s output."""
    text = "syn:" + tool + "".join(f"/{e}" for e in path)
    text = re.sub(r"[{}<>#$\[\]]", "_", text)
    return text if not contains_placeholder(text) else f"syn-value-{len(path)}"


def _insert(node: Any, path: Sequence[PathElem], tool: str, done: Sequence[PathElem]) -> Any:
    """Return ``node`` grown so that ``path`` can be followed in it, where it can.

    A leaf (a synthetic string, or None for "nothing yet") becomes a container: a list
    when the next element is an integer, a dict otherwise. An existing container keeps
    its shape: a name in a list, or an integer in a dict, cannot be followed there, and
    the node is left as it is (that reference will need the fallback).
    """
    if not path:
        return node if node is not None else _leaf(tool, done)
    head, rest = path[0], path[1:]
    here = (*done, head)
    if node is None or isinstance(node, str):
        node = [] if isinstance(head, int) else {}
    if isinstance(node, list):
        if not isinstance(head, int):
            return node
        while len(node) < (head + 1 if head >= 0 else -head):
            node.append(None)
        index = head if head >= 0 else len(node) + head
        node[index] = _insert(node[index], rest, tool, here)
        for i, item in enumerate(node):
            if item is None:
                node[i] = _leaf(tool, (*done, i))
        return node
    if isinstance(head, int):
        return node
    node[head] = _insert(node.get(head), rest, tool, here)
    return node


def _insert_query(node: Any, ops: Sequence[Any], tool: str, done: Sequence[PathElem]) -> Any:
    """Like `_insert`, for a hint the filter grammar reads.

    Each filter grows a list with one item that matches it and one decoy that does not
    (so the filter has to choose); a word-form field (``step_1_selected_site``) grows a
    dict with that key, spelt as the hint spells it.
    """
    if not ops:
        return node if node is not None else _leaf(tool, done)
    head, rest = ops[0], ops[1:]
    if isinstance(head, Select):
        key = head.key or "name"
        if node is None or isinstance(node, str):
            node = []
        if not isinstance(node, list):
            return node
        item: dict[str, Any] = {key: head.value}
        decoy = {key: f"syn-other-{len(node)}"}
        node.extend([decoy, item])
        index = len(node) - 1
        node[index] = _insert_query(item, rest, tool, (*done, index))
        node[index - 1] = _insert_query(decoy, rest, tool, (*done, index - 1))
        return node
    if isinstance(head, Pick):
        if node is None or isinstance(node, str):
            node = [_leaf(tool, (*done, 0)), _leaf(tool, (*done, 1))]
        if not isinstance(node, list) or head.which == "len":
            return node
        index = 0 if head.which == "first" else len(node) - 1
        node[index] = _insert_query(node[index], rest, tool, (*done, index))
        return node
    if isinstance(head, Key):
        if node is None or isinstance(node, str):
            node = {}
        if not isinstance(node, dict):
            return node
        node[head.name] = _insert_query(node.get(head.name), rest, tool, (*done, head.name))
        return node
    if isinstance(head, Field):
        if not isinstance(node, dict):
            return node
        node[head.name] = _insert_query(node.get(head.name), rest, tool, (*done, head.name))
        return node
    if node is None or isinstance(node, str):
        node = [] if isinstance(head, int) else {}
    if isinstance(node, dict) and not isinstance(head, int):
        node[head] = _insert_query(node.get(head), rest, tool, (*done, head))
    elif isinstance(node, list) and isinstance(head, int):
        while len(node) < (head + 1 if head >= 0 else -head):
            node.append(_leaf(tool, (*done, len(node))))
        node[head] = _insert_query(node[head], rest, tool, (*done, head))
    return node


def synthetic_outputs(
    plan: Plan, *, shaped: bool = True, hinted: bool = False
) -> dict[str, Any]:
    """The output each tool of a corpus plan returns, built from the plan's references.

    For every tool, every non-hinted reference (in plan order) to a step that calls it
    grows one tree (see `_insert`) so that the reference's path can be followed: names
    make dicts, integers make lists (padded with synthetic strings up to the index; a
    negative index ``-k`` makes at least ``k`` items), and each path ends on a
    synthetic string ``"syn:<tool>/<elem>/..."``. A node's shape is fixed by the first
    path that reaches it: a later path needing the other shape there (``<step_1[0]>``
    then ``<step_1.name>``) is not followable, since no real output can be both. A tool
    that no path enters returns ``{"result": "syn:<tool>"}``. Every tool step calling
    the same tool gets the same output (same tool, same shape). Hinted references are
    never followable and always need the fallback; so are paths into a reasoning step's
    text output.

    With ``shaped=False`` (the sensitivity run), every tool returns
    ``{"result": "syn:<tool>"}``: no path can be followed, so every path reference needs
    the fallback too — the opposite bound.

    With ``hinted=True`` (the main runs), a hinted reference that the filter grammar
    reads (`planexec.filters.parse_hint`, prose form included) shapes the output too:
    each filter grows a list holding one item that matches it and one decoy — the output
    the planner's hint describes. Other hinted references never shape anything.
    """
    tool_of = {s.id: s.tool for s in plan.steps}
    trees: dict[str, Any] = {}
    for step in plan.steps:
        for ref in step.refs:
            tool = tool_of.get(ref.step)
            if tool is None or not shaped:
                continue
            if ref.is_hinted:
                query = parse_hint(ref, prose=True) if hinted else None
                if query is not None:
                    trees[tool] = _insert_query(trees.get(tool), query.ops, tool, ())
                continue
            trees[tool] = _insert(trees.get(tool), ref.path, tool, ())
    out: dict[str, Any] = {}
    for step in plan.steps:
        if step.tool is None or step.tool in out:
            continue
        tree = trees.get(step.tool)
        if tree is None or isinstance(tree, str):
            tree = {"result": _leaf(step.tool, ())}
        out[step.tool] = tree
    return out


def corpus_tools(plan: Plan, *, shaped: bool = True, hinted: bool = False) -> list[BaseTool]:
    """Fake tools for a corpus plan: one per tool name, returning `synthetic_outputs`.

    A tool's parameters are ``input_1..input_P`` for the most positional arguments any
    step gives it, then every keyword name the plan uses with it, in order of first use;
    all typed ``Any`` with default None, so any value fits (coercion never needs the
    fallback on corpus plans; the demo plans, with real schemas, exercise that).
    """
    outputs = synthetic_outputs(plan, shaped=shaped, hinted=hinted)
    names: dict[str, list[str]] = {}
    for step in plan.steps:
        if step.tool is None:
            continue
        known = names.setdefault(step.tool, [])
        for i in range(len(step.positional)):
            if f"input_{i + 1}" not in known:
                known.insert(i, f"input_{i + 1}")
        for key in step.args:
            if key not in known:
                known.append(key)
    return [
        fake_tool(
            tool,
            outputs[tool],
            description=f"Synthetic stand-in for the corpus tool {tool!r}.",
            args=_args_model(tool, arg_names),
        )
        for tool, arg_names in names.items()
    ]


def _args_model(tool: str, names: Sequence[str]) -> type[BaseModel]:
    """An args schema of ``Any`` fields (default None) named as the plan names them.

    Names that are not identifiers (``"Low Refrigerant"``) cannot be pydantic fields:
    the schema then allows extra arguments, so they are accepted as they are.
    """
    fields: dict[str, Any] = {n: (Any, None) for n in names if n.isidentifier()}
    config = ConfigDict(extra="allow" if len(fields) < len(names) else "forbid")
    model: type[BaseModel] = create_model(f"{tool}_args", __config__=config, **fields)
    return model


# -- the fake model -----------------------------------------------------------------------


_KEYS_MARKERS = ("exactly these keys:", "every key asked for:")


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def _sections(text: str) -> tuple[dict[str, Any], list[Any], dict[str, str]]:
    """Parse a resolution prompt: the args schema, the outputs shown, the hints."""
    schema: dict[str, Any] = {}
    outputs: list[Any] = []
    hints: dict[str, str] = {}
    section = ""
    chunk: list[str] | None = None

    def flush() -> None:
        if chunk:
            body = "\n".join(chunk).strip()
            try:
                outputs.append(json.loads(body))
            except ValueError:
                outputs.append(body)

    for line in text.splitlines():
        if line.startswith("## "):
            flush()
            chunk = None
            section = line[3:].strip().lower()
            continue
        if line.startswith("Arguments JSON schema: "):
            try:
                schema = json.loads(line.split(": ", 1)[1])
            except ValueError:
                schema = {}
        elif section.startswith("outputs"):
            if line.startswith("### "):
                flush()
                chunk = []
            elif chunk is not None:
                chunk.append(line)
        elif section.startswith("arguments to fill") and line.startswith("- "):
            name, _, rest = line[2:].partition(": ")
            hints[name] = rest
    flush()
    return schema, outputs, hints


def _requested_keys(text: str) -> list[str]:
    for line in reversed(text.splitlines()):
        for marker in _KEYS_MARKERS:
            if marker in line:
                segment = line.split(marker, 1)[1]
                return [json.loads(f'"{m}"') for m in re.findall(r'"((?:[^"\\]|\\.)*)"', segment)]
    return []


def _dicts(value: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        yield value
        for v in value.values():
            yield from _dicts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _dicts(v)


def _synthetic(name: str, schema: Mapping[str, Any]) -> Any:
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for alt in schema.get("anyOf", []) or schema.get("oneOf", []):
        if alt.get("type") != "null":
            return _synthetic(name, alt)
    kind = schema.get("type")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return [_synthetic(name, schema.get("items", {}))]
    if kind == "object":
        return {}
    return f"value-for-{name}"


def _pick(name: str, hint: str, outputs: Sequence[Any], schema: Mapping[str, Any]) -> Any:
    keys = [name]
    if name.endswith("_id") or name.endswith("_ids"):
        keys.append("id")
    if name.endswith("_name") or name.endswith("_names"):
        keys.append("name")
    wanted = _norm(hint)
    best: tuple[int, int] | None = None
    value: Any = None
    for out in outputs:
        for d in _dicts(out):
            for rank, key in enumerate(keys):
                v = d.get(key)
                if not isinstance(v, str | int | float) or isinstance(v, bool):
                    continue
                score = sum(
                    len(_norm(x)) for x in d.values()
                    if isinstance(x, str) and _norm(x) and _norm(x) in wanted
                )
                if best is None or (score, -rank) > best:
                    best, value = (score, -rank), v
    if best is not None:
        return value
    prop = schema.get("properties", {}).get(name, {})
    return _synthetic(name, prop)


def answer_prompt(messages: Sequence[BaseMessage]) -> str:
    """The fake model: a JSON object with every key the prompt asks for.

    Works on planexec's fallback prompt and on the baselines' prompt (both end with
    ``Reply with one JSON object with exactly these keys: "a", "b". ...``).
    """
    text = messages_text(messages)
    schema, outputs, hints = _sections(text)
    keys = _requested_keys(text)
    return json.dumps({k: _pick(k, hints.get(k, ""), outputs, schema) for k in keys})


def fake_model() -> FunctionChatModel:
    """A `FunctionChatModel` answering with `answer_prompt`."""
    return FunctionChatModel(function=answer_prompt)


# -- the policies -------------------------------------------------------------------------


class StubReasoner:
    """Answers reasoning steps with a short text, without a model call."""

    async def reason(self, step: Step, inputs: Mapping[int, StepResult]) -> str:
        """Return a fixed text naming the step."""
        return f"synthetic reasoning result of step {step.id}"


class BaselineResolver(ArgResolver):
    """A naive policy: one counted call per qualifying step, then planexec's arguments.

    The counted call asks the model to fill every argument of the step; its reply is
    discarded, and the arguments come from an inner `ArgResolver` on a side client whose
    calls are counted elsewhere (so every policy calls the tools identically).
    """

    def __init__(self, policy: str, *, dialect: str | None, usage: Usage) -> None:
        """Create the baseline ``policy`` (``per_placeholder_step`` or ``per_tool_step``).

        Its counted calls go to ``usage`` (the run's).
        """
        super().__init__(ModelClient(fake_model(), usage=usage))
        self.policy = policy
        """Which baseline."""
        self.dialect = dialect
        """The plan's dialect, for placeholder detection."""
        self.side_usage = Usage()
        """Where the inner resolver's (uncounted) calls go."""
        self.inner = ArgResolver(ModelClient(fake_model(), usage=self.side_usage))
        """Produces the arguments actually passed to the tools."""

    def qualifies(self, step: Step) -> bool:
        """Whether the policy pays a call for this tool step."""
        if self.policy == "per_tool_step":
            return True
        return has_placeholder(step, self.dialect)

    def prompt(self, step: Step, spec: ToolSpec | None, results: Mapping[int, StepResult]) -> str:
        """The naive prompt: task, tool, arguments as written, referenced outputs."""
        names = list(spec.arg_names) if spec is not None else list(step.args)
        lines = [
            f"Task: {step.task}",
            f"Tool: {step.tool}",
            f"Arguments as planned: {json.dumps(to_jsonable(step.args))}",
            f"Positional arguments as planned: {json.dumps(to_jsonable(list(step.positional)))}",
            "## Outputs of the steps it refers to",
        ]
        for sid in sorted({r.step for r in step.refs} | set(step.explicit_deps)):
            if sid in results:
                lines += [f"### step_{sid}", json.dumps(jsonable(results[sid].output))[:4000]]
        lines += [
            "## End",
            "Reply with one JSON object with exactly these keys: "
            + ", ".join(json.dumps(n) for n in names)
            + ". Each value must fit the tool's schema.",
        ]
        return "\n".join(lines)

    async def resolve(
        self,
        step: Step,
        spec: ToolSpec | None,
        results: Mapping[int, StepResult],
        *,
        feedback: str | None = None,
        run_id: str = "-",
        bus: EventBus | None = None,
    ) -> ResolvedArgs | ResolutionFailure:
        """Pay the policy's call (if the step qualifies), then resolve as planexec does."""
        counted = self.client
        if counted is not None and self.qualifies(step):
            messages = [
                SystemMessage(content="Fill in the arguments of one tool call."),
                HumanMessage(content=self.prompt(step, spec, results)),
            ]
            await counted.complete(messages, purpose="resolve", step_id=step.id)
        return await self.inner.resolve(
            step, spec, results, feedback=feedback, run_id=run_id, bus=None
        )


@dataclass
class PolicyRun:
    """What one policy cost on one plan."""

    resolve_calls: int
    """Model calls counted under purpose ``resolve``."""
    statuses: dict[int, str]
    """How each step ended."""
    resolved_steps: int
    """Tool steps whose arguments reached the resolver (i.e. were not failed before)."""
    llm_args: dict[int, dict[str, str]] = field(default_factory=dict)
    """Per step, the arguments the fallback filled and why (hinted, path, type, text)."""
    grounding: dict[str, int] = field(default_factory=dict)
    """Values by how they were filled and grounded: ``llm_grounded``, ``llm_free``,
    ``llm_ungrounded`` (kept under ``warn``), ``filtered``, and ``ungrounded_failures``
    (steps failed ``RESOLUTION_UNGROUNDED``)."""
    free_text_calls: int = 0
    """LLM calls of steps whose fallback filled a free-text placeholder
    (``<chiller_asset_id>``), part of ``resolve_calls``."""
    llm_refs: dict[int, dict[str, str]] = field(default_factory=dict)
    """Per step, the arguments the fallback filled and their references as written."""


def _why_llm(value: Any, results: Mapping[int, StepResult], dialect: str | None) -> str:
    refs = list(iter_refs(value))
    if any(is_free_placeholder(r) for r in refs):
        return "free_text"  # <chiller_asset_id>, <output from Task5>: counted apart
    if any(r.is_hinted for r in refs):
        return "hinted"
    for ref in refs:
        if ref.path and ref.step in results:
            try:
                follow_path(results[ref.step].output, ref.path)
            except LookupError:
                return "path"
    if not refs and contains_placeholder(value, dialect=dialect):
        return "placeholder_text"
    return "type"


def _short_text(value: Any, limit: int = 80) -> str:
    text = json.dumps(to_jsonable(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bound_args(step: Step, spec: ToolSpec | None) -> dict[str, Any]:
    args = dict(step.args)
    names = spec.arg_names if spec is not None else []
    for i, value in enumerate(step.positional):
        if i < len(names):
            args.setdefault(names[i], value)
    return args


async def run_policy(
    plan: Plan,
    tools: list[BaseTool],
    policy: str,
    *,
    error_payload_keys: tuple[str, ...] = ("error",),
    options: Mapping[str, Any] | None = None,
) -> PolicyRun:
    """Run ``plan`` over ``tools`` with the real `Executor` under one policy.

    Args:
        plan: The parsed plan.
        tools: Fresh tools (not shared with another run).
        policy: One of `POLICIES`.
        error_payload_keys: Output keys that mark a tool error.
        options: Keyword arguments of planexec's `ArgResolver` (``STAGES``).

    Returns:
        The calls counted under purpose ``resolve`` and how each step ended.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    catalog = ToolCatalog(tools)
    usage = Usage()
    resolver: ArgResolver
    if policy == "planexec":  # the run-bound client counts the fallback's calls in `usage`
        resolver = ArgResolver(ModelClient(fake_model(), usage=usage), **(options or {}))
    else:
        resolver = BaselineResolver(policy, dialect=plan.dialect, usage=usage)
    resolved = 0
    original = resolver.resolve

    async def counting(*args: Any, **kwargs: Any) -> ResolvedArgs | ResolutionFailure:
        nonlocal resolved
        resolved += 1
        return await original(*args, **kwargs)

    resolver.resolve = counting  # type: ignore[method-assign]
    executor = Executor(
        catalog,
        resolver,
        config=ExecutorSettings(error_payload_keys=error_payload_keys),
        reasoner=StubReasoner(),
        usage=usage,
        run_id=f"bench-{policy}",
    )
    results = await executor.run(plan)
    by_id = {r.step_id: r for r in results}
    llm_args: dict[int, dict[str, str]] = {}
    llm_refs: dict[int, dict[str, str]] = {}
    grounding: Counter[str] = Counter()
    free_text_calls = 0
    for r in results:
        if r.error_kind is ErrorKind.RESOLUTION_UNGROUNDED:
            grounding["ungrounded_failures"] += 1
        for a, m in r.resolution.items():
            if m is ResolutionMethod.FILTERED:
                grounding["filtered"] += 1
            elif m is ResolutionMethod.LLM:
                g = r.grounding.get(a)
                grounding[f"llm_{g.status if g is not None else 'unknown'}"] += 1
        llm = [a for a, m in r.resolution.items() if m is ResolutionMethod.LLM]
        if not llm:
            continue
        step = plan.step(r.step_id)
        spec = catalog.lookup(step.tool) if step.tool else None
        bound = _bound_args(step, spec)
        llm_args[r.step_id] = {
            a: _why_llm(bound.get(a), by_id, plan.dialect) for a in llm
        }
        llm_refs[r.step_id] = {
            a: " ".join(ref.raw or ref.canonical for ref in iter_refs(bound.get(a)))
            or _short_text(bound.get(a)) for a in llm
        }
        if "free_text" in llm_args[r.step_id].values():
            free_text_calls += r.llm_calls
    return PolicyRun(
        resolve_calls=usage.llm_calls.get("resolve", 0),
        statuses={r.step_id: str(r.status) for r in sorted(results, key=lambda r: r.step_id)},
        resolved_steps=resolved,
        llm_args=llm_args,
        grounding=dict(grounding),
        free_text_calls=free_text_calls,
        llm_refs=llm_refs,
    )


# -- per plan and in total -----------------------------------------------------------------


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


@dataclass
class PlanReport:
    """The figures of one plan."""

    name: str
    """The plan file's stem."""
    source: str
    """``demo`` or ``corpus``."""
    dialect: str
    """The plan's dialect."""
    steps: int
    """All steps (reasoning steps included)."""
    tool_steps: int
    """Steps that call a tool."""
    placeholder_steps: int
    """Tool steps whose arguments hold a reference or placeholder-looking text."""
    placeholder_reasoning_steps: int
    """Reasoning steps whose (unused) arguments hold one; no policy resolves those."""
    calls: dict[str, int]
    """Counted ``resolve`` calls by policy."""
    resolved_steps: int
    """Tool steps whose arguments reached the resolver."""
    fallback_args: dict[str, int]
    """Arguments planexec's fallback filled, by reason."""
    fallback_steps: dict[int, dict[str, str]]
    """Per step, the arguments planexec's fallback filled and why."""
    statuses: dict[str, int]
    """How the steps ended (planexec run)."""
    consistent: bool
    """Whether every policy's run ended every step the same way."""
    planexec_calls_flat: int | None = None
    """Corpus plans: planexec's calls when no path can be followed (flat outputs)."""
    planexec_calls_unshaped_hints: int | None = None
    """Corpus plans: planexec's calls when hinted references shape no output (paths do)."""
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    """planexec's resolver per `STAGES` entry: ``calls`` and ``grounding`` counts."""
    free_text_calls: int = 0
    """planexec's calls spent on steps with free-text placeholders (``<site_name>``)."""
    fallback_refs: dict[int, dict[str, str]] = field(default_factory=dict)
    """Per step, the arguments planexec's fallback filled and their references."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON row."""
        pe, a, b = (self.calls[p] for p in POLICIES)
        return {
            "plan": self.name,
            "source": self.source,
            "dialect": self.dialect,
            "steps": self.steps,
            "tool_steps": self.tool_steps,
            "placeholder_steps": self.placeholder_steps,
            "placeholder_reasoning_steps": self.placeholder_reasoning_steps,
            "resolved_steps": self.resolved_steps,
            "planexec_calls": pe,
            "planexec_free_text_calls": self.free_text_calls,
            "baseline_a_calls": a,
            "baseline_b_calls": b,
            "ratio_planexec_to_a": _ratio(pe, a),
            "ratio_planexec_to_b": _ratio(pe, b),
            "fallback_args": self.fallback_args,
            "fallback_steps": {str(k): v for k, v in self.fallback_steps.items()},
            "fallback_refs": {str(k): v for k, v in self.fallback_refs.items()},
            "statuses": self.statuses,
            "consistent": self.consistent,
            "planexec_calls_flat_outputs": self.planexec_calls_flat,
            "planexec_calls_unshaped_hints": self.planexec_calls_unshaped_hints,
            "stages": self.stages,
        }


async def measure_plan(
    plan: Plan,
    name: str,
    source: str,
    tools_factory: ToolsFactory,
    *,
    error_payload_keys: tuple[str, ...] = ("error",),
) -> PlanReport:
    """Run one plan under every policy (fresh tools each time) and gather its figures."""
    runs = {
        p: await run_policy(plan, tools_factory(), p, error_payload_keys=error_payload_keys)
        for p in POLICIES
    }
    mine = runs["planexec"]
    stages: dict[str, dict[str, Any]] = {}
    for stage, options in STAGES.items():
        run = mine if not options else await run_policy(
            plan, tools_factory(), "planexec", error_payload_keys=error_payload_keys,
            options=options,
        )
        stages[stage] = {"calls": run.resolve_calls, "grounding": run.grounding}
    reasons: Counter[str] = Counter()
    for per_arg in mine.llm_args.values():
        reasons.update(per_arg.values())
    tool_steps = [s for s in plan.steps if s.tool is not None]
    return PlanReport(
        name=name,
        source=source,
        dialect=plan.dialect,
        steps=len(plan.steps),
        tool_steps=len(tool_steps),
        placeholder_steps=sum(has_placeholder(s, plan.dialect) for s in tool_steps),
        placeholder_reasoning_steps=sum(
            has_placeholder(s, plan.dialect) for s in plan.steps if s.tool is None
        ),
        calls={p: r.resolve_calls for p, r in runs.items()},
        resolved_steps=mine.resolved_steps,
        fallback_args=dict(sorted(reasons.items())),
        fallback_steps=mine.llm_args,
        fallback_refs=mine.llm_refs,
        statuses=dict(sorted(Counter(mine.statuses.values()).items())),
        consistent=all(r.statuses == mine.statuses for r in runs.values()),
        stages=stages,
        free_text_calls=mine.free_text_calls,
    )


def _demo_factory() -> list[BaseTool]:
    from planexec.examples.tools import demo_tools

    return demo_tools()


async def measure_all(corpus: Path | None) -> dict[str, Any]:
    """Measure the demo plans and (if ``corpus`` exists) the corpus plans."""
    rows: list[PlanReport] = []
    skipped: list[dict[str, str]] = []
    for path in sorted(DEMO_PLANS.glob("*.txt")):
        plan = parse_plan(path.read_text(encoding="utf-8"))
        rows.append(await measure_plan(plan, path.stem, "demo", _demo_factory))
    corpus_note: str | None = None
    if corpus is None or not corpus.is_dir():
        corpus_note = f"corpus not found at {corpus}: corpus plans skipped"
    else:
        for path in sorted(corpus.glob("*.txt")):
            try:
                plan = parse_plan(path.read_text(encoding="utf-8"))
            except PlanParseError as exc:
                skipped.append({"plan": path.stem, "reason": f"no plan: {exc}"[:200]})
                continue
            if not any(s.tool is not None and _has_args(s) for s in plan.steps):
                skipped.append({"plan": path.stem, "reason": "no tool step has arguments"})
                continue

            def factory(plan: Plan = plan) -> list[BaseTool]:
                return corpus_tools(plan, hinted=True)

            row = await measure_plan(plan, path.stem, "corpus", factory, error_payload_keys=())
            flat = await run_policy(
                plan, corpus_tools(plan, shaped=False), "planexec", error_payload_keys=()
            )
            row.planexec_calls_flat = flat.resolve_calls
            unshaped = await run_policy(
                plan, corpus_tools(plan, hinted=False), "planexec", error_payload_keys=()
            )
            row.planexec_calls_unshaped_hints = unshaped.resolve_calls
            rows.append(row)
    totals = {src: _totals([r for r in rows if r.source == src]) for src in ("demo", "corpus")}
    totals["all"] = _totals(rows)
    return {
        "benchmark": "resolution_calls",
        "policies": {
            "planexec": "ArgResolver: LLM fallback only where the deterministic tiers fail",
            "baseline_a": "one call per tool step whose args hold any placeholder",
            "baseline_b": "one call per tool step",
        },
        "python": sys.version.split()[0],
        "corpus_dir": str(corpus) if corpus is not None else None,
        "corpus_note": corpus_note,
        "skipped": skipped,
        "totals": totals,
        "plans": [r.to_dict() for r in rows],
    }


def _totals(rows: Sequence[PlanReport]) -> dict[str, Any]:
    keys = ("steps", "tool_steps", "placeholder_steps", "placeholder_reasoning_steps",
            "resolved_steps", "planexec_calls", "planexec_free_text_calls", "baseline_a_calls",
            "baseline_b_calls")
    dicts = [r.to_dict() for r in rows]
    out: dict[str, Any] = {"plans": len(rows)}
    for k in keys:
        out[k] = sum(int(d[k]) for d in dicts)
    out["ratio_planexec_to_a"] = _ratio(out["planexec_calls"], out["baseline_a_calls"])
    out["ratio_planexec_to_b"] = _ratio(out["planexec_calls"], out["baseline_b_calls"])
    flat = [r.planexec_calls_flat for r in rows if r.planexec_calls_flat is not None]
    if flat and len(flat) == len(rows):
        out["planexec_calls_flat_outputs"] = sum(flat)
        out["ratio_flat_to_a"] = _ratio(sum(flat), out["baseline_a_calls"])
        out["ratio_flat_to_b"] = _ratio(sum(flat), out["baseline_b_calls"])
    unshaped = [r.planexec_calls_unshaped_hints for r in rows
                if r.planexec_calls_unshaped_hints is not None]
    if unshaped and len(unshaped) == len(rows):
        out["planexec_calls_unshaped_hints"] = sum(unshaped)
        out["ratio_unshaped_hints_to_a"] = _ratio(sum(unshaped), out["baseline_a_calls"])
    reasons: Counter[str] = Counter()
    for r in rows:
        reasons.update(r.fallback_args)
    out["fallback_args"] = dict(sorted(reasons.items()))
    out["inconsistent_plans"] = [r.name for r in rows if not r.consistent]
    stages: dict[str, Any] = {}
    for stage in STAGES:
        calls = sum(int(r.stages[stage]["calls"]) for r in rows if stage in r.stages)
        counts: Counter[str] = Counter()
        for r in rows:
            counts.update(r.stages.get(stage, {}).get("grounding", {}))
        llm = sum(v for k, v in counts.items() if k.startswith("llm_"))
        stages[stage] = {
            "calls": calls,
            "calls_per_placeholder_step": _ratio(calls, out["baseline_a_calls"]),
            "grounding": dict(sorted(counts.items())),
            "llm_values": llm,
            "llm_grounded_share": _ratio(counts["llm_grounded"], llm),
            "filled_grounded_share": _ratio(
                counts["llm_grounded"] + counts["filtered"], llm + counts["filtered"]
            ),
        }
    out["stages"] = stages
    return out


def _table(report: Mapping[str, Any]) -> str:
    head = (f"{'plan':28} {'src':6} {'steps':>5} {'tool':>4} {'ph':>3} {'pe':>3} {'A':>3} "
            f"{'B':>3} {'pe/A':>5} {'pe/B':>5}  fallback reasons")
    lines = [head, "-" * len(head)]

    def fmt(x: float | None) -> str:
        return "  -  " if x is None else f"{x:5.3f}"

    for d in report["plans"]:
        lines.append(
            f"{d['plan'][:28]:28} {d['source']:6} {d['steps']:5} {d['tool_steps']:4} "
            f"{d['placeholder_steps']:3} {d['planexec_calls']:3} {d['baseline_a_calls']:3} "
            f"{d['baseline_b_calls']:3} {fmt(d['ratio_planexec_to_a'])} "
            f"{fmt(d['ratio_planexec_to_b'])}  "
            + ", ".join(f"{k}={v}" for k, v in d["fallback_args"].items())
            + ("" if d["consistent"] else "  (INCONSISTENT)")
        )
    lines.append("-" * len(head))
    for src, t in report["totals"].items():
        lines.append(
            f"{'TOTAL ' + src:28} {t['plans']:6} {t['steps']:5} {t['tool_steps']:4} "
            f"{t['placeholder_steps']:3} {t['planexec_calls']:3} {t['baseline_a_calls']:3} "
            f"{t['baseline_b_calls']:3} {fmt(t['ratio_planexec_to_a'])} "
            f"{fmt(t['ratio_planexec_to_b'])}  "
            + ", ".join(f"{k}={v}" for k, v in t["fallback_args"].items())
        )
    for src, t in report["totals"].items():
        for stage, s in t.get("stages", {}).items():
            share = s["llm_grounded_share"]
            lines.append(
                f"{src:6} {stage:12} calls {s['calls']:3}  per placeholder step "
                f"{fmt(s['calls_per_placeholder_step']).strip()}  LLM values {s['llm_values']:3}"
                f"  grounded share {'-' if share is None else share} (all filled "
                f"{s['filled_grounded_share']})  "
                + ", ".join(f"{k}={v}" for k, v in s["grounding"].items())
            )
    lines.append(
        "planexec calls on steps with free-text placeholders (<chiller_asset_id>): "
        + ", ".join(f"{src} {t['planexec_free_text_calls']}"
                    for src, t in report["totals"].items())
    )
    corpus = report["totals"]["corpus"]
    if "planexec_calls_flat_outputs" in corpus:
        lines.append(
            f"corpus, flat outputs (no path followable): planexec "
            f"{corpus['planexec_calls_flat_outputs']} calls, pe/A "
            f"{fmt(corpus['ratio_flat_to_a']).strip()}, pe/B "
            f"{fmt(corpus['ratio_flat_to_b']).strip()}"
        )
    if "planexec_calls_unshaped_hints" in corpus:
        lines.append(
            f"corpus, hinted references shape no output: planexec "
            f"{corpus['planexec_calls_unshaped_hints']} calls, pe/A "
            f"{fmt(corpus['ratio_unshaped_hints_to_a']).strip()}"
        )
    return "\n".join(lines)


def _fallback_list(report: Mapping[str, Any]) -> str:
    """Every argument planexec's default resolver still sends to the model, and why."""
    lines = ["arguments planexec's fallback filled (plan step: argument [reason] references):"]
    for d in report["plans"]:
        for sid, per_arg in d["fallback_steps"].items():
            refs = d.get("fallback_refs", {}).get(sid, {})
            for arg, why in per_arg.items():
                lines.append(f"  {d['plan']} {sid}: {arg} [{why}] {refs.get(arg, '')}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, write the JSON and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--no-corpus", action="store_true", help="measure demo plans only")
    parser.add_argument("--quick", action="store_true",
                        help="a fast smoke run: the demo plans only (like --no-corpus)")
    parser.add_argument("--corpus", type=Path, default=CORPUS,
                        help=f"the corpus directory (default: {CORPUS})")
    parser.add_argument("--list", action="store_true",
                        help="also list every argument the fallback still fills, and why")
    parser.add_argument("--out", type=Path, default=RESULTS / "resolution_calls.json")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    args = parser.parse_args(argv)
    logger.remove()
    report = asyncio.run(measure_all(None if args.no_corpus or args.quick else args.corpus))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if not args.quiet:
        print(_table(report))
        if args.list:
            print(_fallback_list(report))
        if report["corpus_note"]:
            print(report["corpus_note"])
        if report["skipped"]:
            print(f"skipped {len(report['skipped'])} corpus files (no plan, or no args)")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
