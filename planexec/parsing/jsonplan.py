"""The json dialect: plans written as JSON, as models with structured output answer.

The documented shape is `JsonPlan` (its JSON Schema is ``docs/plan.schema.json``)::

    {"steps": [{"id": 1, "task": "List the sites", "tool": "sites", "args": {},
                "depends_on": [], "expected_output": "a list of sites"}, ...]}

The reader also takes the shapes real planners emit instead, each with an info
``JSON_SHAPE`` diagnostic naming it (``docs/plan-language.md`` lists them with examples):

- a bare list of steps, or steps under ``steps``/``plan`` (also HuggingGPT-style task
  lists ``[{"task": "image-to-text", "id": 0, "dep": [-1], "args": {...}}]`` and steps
  written ``{"operation": ..., "parameters": ...}`` or ``{"action": ..., <flattened
  arguments>}``);
- TaskBench-style graphs (``task_nodes`` with positional ``arguments``, ``task_links``);
- function calls: a list of ``{"name", "arguments"}``, OpenAI ``tool_calls``, Anthropic
  ``tool_use`` content blocks, Gemini ``functionCall`` parts, OpenAI Responses
  ``function_call`` items (``arguments`` may be a JSON string);
- task decompositions without tools: a list of sentences (reasoning steps), and
  ``[{"Task": ..., "ID": <index of a tool list outside the text>}]`` (an error: no parser
  can name that tool).

**Finding the tool.** With a catalog (`parse_json_plan(..., catalog=)`), the field whose
value names a catalog tool is the tool, whatever its key. Otherwise, and when no field
names a catalog tool, the first of `TOOL_KEYS` present is: the explicit keys whatever
their value, the word keys (``name``, ``action``, ``operation``, ``op``, ``api``,
``task``) only when the value is a short identifier (``task`` only when no explicit key
is present). A ``JSON_TOOL_KEY`` info says which key was read when it is not ``tool``.
Two candidate keys naming different tools are a ``JSON_TOOL_CONFLICT`` error; a
tool-like key whose value names no tool is a ``JSON_TOOL_UNIDENTIFIED`` error (with
close matches from the catalog): neither step ever becomes a reasoning step, nor runs.

**References** inside JSON strings: the hashstep grammar (``<step_1.items[0].id>``,
``{step_1}``) plus ``<GENERATED>-N`` (HuggingGPT), ``<node-N>`` (TaskBench, 0-based
node positions), ``#EN`` and a whole ``$N``/``${N}``; each foreign form is rewritten to
``<step_N>`` with a ``JSON_REF_FORM`` info. Ids counted from 0 are renumbered from 1
(``JSON_IDS_RENUMBERED``), and dependencies and references follow the renumbering.

Nothing is dropped silently: a field the dialect does not read is a
``JSON_FIELD_UNKNOWN`` warning naming it, a key given twice is a ``JSON_DUPLICATE_KEY``
error naming both values (the step's arguments are invalid), a step without a tool field
is a reasoning step with a ``JSON_NO_TOOL`` warning. The JSON may stand alone, sit in a
code fence or inside prose. A JSON value has no lines of its own, so the diagnostics of
this dialect carry no line number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planexec._text import snippet
from planexec.errors import PlanParseError
from planexec.parsing._common import (
    Diagnostics,
    clean_reply,
    has_literal,
    keys_with_refs,
    normalize_tool,
    walk_strings,
)
from planexec.parsing.jsonrepair import (
    DuplicateKey,
    closing_bracket,
    read_json_keeping_duplicates,
    repair_json,
)
from planexec.parsing.refs import NO_STEP, contains_placeholder, find_refs, free_placeholders
from planexec.plan import Diagnostic, Plan, Ref, Severity, Step, iter_refs

if TYPE_CHECKING:
    from planexec.parsing.checks import CatalogLike
    from planexec.parsing.jsonschema import JsonPlan, JsonStep, plan_schema

__all__ = [
    "ARGS_KEYS",
    "DEPS_KEYS",
    "TOOL_KEYS",
    "JsonPlan",
    "JsonStep",
    "find_json_plan",
    "parse_json_plan",
    "plan_schema",
]


_ID_KEYS = ("id", "step_id", "step", "number", "step_number", "task_id")
_TASK_KEYS = ("task", "description", "thought", "instruction", "step_description", "Task")
_EXPLICIT_TOOL_KEYS = ("tool", "tool_name", "toolName", "function", "function_name",
                       "api_name")
_WORD_TOOL_KEYS = ("name", "action", "operation", "op", "api", "task")
TOOL_KEYS = _EXPLICIT_TOOL_KEYS + _WORD_TOOL_KEYS
"""The keys read as a step's tool without a catalog, in order of preference.

The explicit keys (the first six) are the tool whatever their value; the word keys only
when their value is a short identifier, and ``task`` only when no explicit key is given.
"""
ARGS_KEYS = ("args", "arguments", "parameters", "params", "input", "inputs", "tool_input",
             "action_input", "kwargs")
"""The keys read as a step's arguments; without one, the fields beside the tool are."""
DEPS_KEYS = ("depends_on", "dependencies", "deps", "dep", "dependency", "requires")
"""The keys read as a step's dependencies (``-1``, ``null`` and ``"none"`` mean none)."""
_EXPECTED_KEYS = ("expected_output", "expected", "expectedOutput", "expected output")
_SERVER_KEYS = ("server", "agent")
_META_KEYS = frozenset(("confidence", "reason", "reasoning", "rationale", "note", "notes",
                        "comment", "title", "status", "output", "result", "type", "thought"))
"""Fields never read as flattened arguments without a catalog (reported as unknown)."""
_NOT_TOOL_KEYS = frozenset(
    ARGS_KEYS + DEPS_KEYS + _ID_KEYS + _EXPECTED_KEYS + _SERVER_KEYS
    + tuple(k for k in _TASK_KEYS if k not in ("task", "Task"))
)
"""Keys never read as the tool, even when their value names a catalog tool."""
_LIST_KEYS = ("steps", "plan", "tool_calls", "calls", "function_calls")
_CALL_SHAPES = frozenset(("call_list", "tool_calls", "calls", "function_calls", "call",
                          "anthropic", "gemini", "responses"))
_NONE_TOOLS = {"", "none", "null", "nil", "n/a", "reasoning", "llm"}
_IDENT_RE = re.compile(r"^[A-Za-z_][\w.\-:/]{0,79}(?:\(\))?$")
_DEP_RE = re.compile(r"^\s*(?:#?\s*(?:s|step|task|e|node)[_ \-]?)?<?(\d{1,9})>?\s*$",
                     re.IGNORECASE)
_FOREIGN_REF_RE = re.compile(
    r"<GENERATED>-(\d{1,9})|<node-(\d{1,9})>|#E(\d{1,9})(?!\w)|(?<=[<{])(step_)(\d{1,9})"
)
_DOLLAR_RE = re.compile(r"^\s*\$(?:(\d{1,9})|\{\s*(\d{1,9})\s*\})\s*$")
_NEGATIVE_RE = re.compile(r"^\s*-\d{1,9}\s*$")
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.S)
_MAX_CANDIDATES = 16
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CLEANUP_MARKERS = ("</think>", "assistantfinal", "<|", "\\boxed")
"""Text `clean_reply` removes: a reply holding one may start with JSON once cleaned."""


def _shown(value: Any, width: int = 50) -> str:
    return snippet(json.dumps(value, ensure_ascii=False, default=str), width)


# -- finding the JSON -----------------------------------------------------------------------


def _provider_call(item: Any) -> bool:
    """An Anthropic ``tool_use`` block, a Gemini ``functionCall`` part or a Responses item."""
    if not isinstance(item, dict):
        return False
    if isinstance(item.get("functionCall"), dict):
        return True
    return item.get("type") in ("tool_use", "function_call") and "name" in item


def _names_tool(item: dict[str, Any], catalog: CatalogLike | None) -> bool:
    """Whether a field of ``item`` names a tool of the catalog."""
    if catalog is None:
        return False
    for v in item.values():
        if isinstance(v, str) and 0 < len(v) <= 80:
            name = v.strip().removesuffix("()")
            try:
                if name and catalog.has(name):
                    return True
            except KeyError:
                return True
    return False


def _is_call(item: Any, catalog: CatalogLike | None = None) -> bool:
    """Whether ``item`` looks like a function call or a step object."""
    if not isinstance(item, dict):
        return False
    if _names_tool(item, catalog):
        return True
    fn = item.get("function")
    if isinstance(fn, dict) and "name" in fn:
        return True
    if _provider_call(item):
        return True
    return any(k in item for k in ("tool", "tool_name", "task", "Task", "operation", "action")) or (
        "name" in item and any(k in item for k in ARGS_KEYS)
    )


def _strings(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, str) and v.strip() for v in value))


def _filtered(items: list[Any], shape: str, where: str
              ) -> tuple[list[Any], str, dict[str, Any]] | None:
    """The provider calls of a list of content blocks/parts/items; the rest as extras."""
    calls = [v for v in items if _provider_call(v)]
    if not calls:
        return None
    extras = {f"{where}[{i}]": v for i, v in enumerate(items) if not _provider_call(v)}
    return calls, shape, extras


def _plan_items(
    value: Any, depth: int = 0, catalog: CatalogLike | None = None
) -> tuple[list[Any], str, dict[str, Any]] | None:
    """The step items of a plan-shaped value: ``(items, shape, top-level extras)``.

    ``shape`` names the shape (a key of `_SHAPES`), followed by `` in 'key'`` when the
    plan is the single value of a wrapping object. With a catalog, an object with a
    field naming one of its tools is a step whatever its keys.
    """
    if isinstance(value, list):
        if value and any(_provider_call(v) for v in value):
            first = next(v for v in value if _provider_call(v))
            kind = ("gemini" if "functionCall" in first
                    else "anthropic" if first.get("type") == "tool_use" else "responses")
            return _filtered(value, kind, "the list")
        if value and all(_is_call(v, catalog) for v in value):
            calls = all(
                isinstance(v.get("function"), dict)
                or not any(k in v for k in ("tool", "task", "Task", "operation", "action"))
                for v in value
            )
            return value, "call_list" if calls else "list", {}
        if _strings(value):
            return value, "strings", {}
        return None
    if not isinstance(value, dict):
        return None
    rest = {k: v for k, v in value.items()}
    nodes = value.get("task_nodes")
    if isinstance(nodes, list) and nodes and all(isinstance(n, dict) for n in nodes):
        rest.pop("task_nodes")
        return nodes, "taskbench", rest
    for key, shape in (("content", "anthropic"), ("output", "responses"), ("parts", "gemini")):
        items = value.get(key)
        if isinstance(items, list):
            got = _filtered(items, shape, key)
            if got is not None:
                rest.pop(key)
                return got[0], got[1], {**rest, **got[2]}
    for key in ("candidates", "choices"):
        items = value.get(key)
        if isinstance(items, list) and items and depth < 3:
            inner = items[0].get("content" if key == "candidates" else "message") \
                if isinstance(items[0], dict) else None
            got = _plan_items(inner, depth + 1, catalog)
            if got is not None:
                rest.pop(key)
                extras = {f"{key}[{i}]": v for i, v in enumerate(items[1:], start=1)}
                outer = {f"{key}[0].{k}": v for k, v in items[0].items()
                         if k != ("content" if key == "candidates" else "message")}
                return got[0], got[1], {**rest, **outer, **extras, **got[2]}
    for key in _LIST_KEYS:
        items = value.get(key)
        if not isinstance(items, list) or not items:
            continue
        if key in ("steps", "plan"):
            # the key says what the list is: one readable step is enough (the others are
            # reported as unreadable)
            shaped = any(isinstance(v, str | dict) for v in items)
        else:
            shaped = all(_is_call(v, catalog) for v in items)
        if shaped:
            return items, key, {k: v for k, v in value.items() if k != key}
    if _is_call(value) and ("name" in value or "function" in value):
        return [value], "call", {}
    if depth == 0 and len(value) == 1:  # {"plan": {"steps": [...]}}, {"response": [...]}
        (key, inner), = value.items()
        found = _plan_items(inner, 1, catalog)
        if found is not None and found[1] != "strings":
            return found[0], f"{found[1]} in {key!r}", found[2]
    return None


def _candidates(text: str) -> Iterable[tuple[str, str]]:
    """JSON texts to try, with where they were found: whole reply, fences, prose."""
    yield text, "reply"
    for i, m in enumerate(_FENCE_RE.finditer(text)):
        if i >= _MAX_CANDIDATES:
            break
        yield m.group(2), "fence"
    tries = 0
    pos = min((p for p in (text.find("{"), text.find("[")) if p >= 0), default=-1)
    while pos != -1 and tries < _MAX_CANDIDATES:
        tries += 1
        end = closing_bracket(text, pos)
        if end is not None:
            yield text[pos : end + 1], "prose"
            nxt = end + 1
        else:
            nxt = pos + 1
        found = [p for p in (text.find("{", nxt), text.find("[", nxt)) if p >= 0]
        pos = min(found) if found else -1


def find_json_plan(text: str, catalog: CatalogLike | None = None) -> tuple[Any, str] | None:
    """Find a plan-shaped JSON value in a reply (alone, in a code fence, or in prose).

    Args:
        text: The reply (already cleaned of leaked reasoning and special tokens).
        catalog: With one, an object with a field naming one of its tools is a step.

    Returns:
        ``(value, where)`` with ``where`` one of ``"reply"``, ``"fence"``, ``"prose"``,
        or None when no JSON value in the text has the shape of a plan.
    """
    if not isinstance(text, str):
        return None
    found = _find(text, catalog)
    return None if found is None else (found[0], found[1])


def _starts_with_json(text: str) -> bool:
    """Whether the reply's text (after a possible code fence opener) starts with JSON."""
    s = text.lstrip()
    if s.startswith("```"):
        s = s[3:].lstrip(_LETTERS).lstrip()
    return s[:1] in ("{", "[")


def looks_like_json_plan(text: str, catalog: CatalogLike | None = None) -> bool:
    """Whether a reply *is* a JSON plan: it starts with a plan-shaped JSON value.

    Leaked reasoning and special tokens are removed first, and a code fence opener
    skipped; the value must begin the reply (a JSON plan further on, e.g. in a hashstep
    ``#Args``, does not count). A bare list of sentences counts only when it is the
    whole reply.

    Used by `planexec.parsing.detect_dialect`, which also picks the json dialect for a
    plan-shaped JSON value inside prose when no other dialect recognizes the text.
    """
    if "{" not in text and "[" not in text:
        return False
    if not _starts_with_json(text) and not any(m in text for m in _CLEANUP_MARKERS):
        return False  # cheap: most replies are no JSON, and clean_reply reads them all
    s = _cleaned(text)[0].lstrip()
    fenced = s.startswith("```")
    if fenced:
        m = _FENCE_RE.match(s)
        s = m.group(2).lstrip() if m is not None else s[3:].lstrip(_LETTERS).lstrip()
    if s[:1] not in ("{", "["):
        return False
    end = closing_bracket(s, 0)  # the JSON value the reply starts with, not one further on
    got = repair_json(s if end is None else s[: end + 1])
    if got.error is not None and got.duplicate_key is not None:
        got = read_json_keeping_duplicates(s if end is None else s[: end + 1])[0]
    if got.error is not None:
        return False
    found = _plan_items(got.value, 0, catalog)
    if found is None:
        return False
    return found[1] != "strings" or (end is not None and not s[end + 1 :].strip(" \t\n`"))


def _cleaned(text: str) -> tuple[str, list[Diagnostic]]:
    lines, diags = clean_reply(text)
    return "\n".join(t for _, t in lines), diags


# -- reading the steps ----------------------------------------------------------------------


@dataclass
class _Reader:
    catalog: CatalogLike | None = None
    dups: tuple[DuplicateKey, ...] = ()
    offset: int = 0
    """Added to every step number written in the plan (1 when ids count from 0)."""
    node_ids: dict[int, int] = field(default_factory=dict)
    """TaskBench: a node's 0-based position → its step number."""
    call_shape: bool = False
    ids: frozenset[int] = frozenset()
    """The plan's step numbers."""
    diags: Diagnostics = field(default_factory=Diagnostics)

    def warn(self, code: str, message: str, step: int | None = None,
             severity: Severity = Severity.WARNING) -> None:
        self.diags.add(None, severity, code, message, step)

    def unknown(self, where: str, extras: dict[str, Any], step: int | None) -> None:
        for key, value in extras.items():
            self.warn(
                "JSON_FIELD_UNKNOWN",
                f"{where} has the field {key!r} ({_shown(value)}), which the json dialect "
                "does not read; it is ignored",
                step,
            )

    def has_tool(self, name: str) -> bool:
        if self.catalog is None:
            return False
        try:
            return self.catalog.has(name)
        except KeyError:  # the same name on several servers: a tool all the same
            return True

    def params(self, tool: str | None, server: str | None) -> list[str] | None:
        """The tool's parameters in schema order, when the catalog knows the tool."""
        if self.catalog is None or tool is None:
            return None
        try:
            if not self.catalog.has(tool, server):
                return None
            return list(self.catalog.arg_names(tool, server))
        except KeyError:
            return None

    def duplicates_in(self, value: Any) -> list[DuplicateKey]:
        """The duplicated keys of every object inside ``value`` (by identity)."""
        if not self.dups:
            return []
        owners: set[int] = set()
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                owners.add(id(v))
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)
        return [d for d in self.dups if id(d.owner) in owners]

    def step_number(self, n: int) -> int:
        return n + self.offset


def _int_id(value: Any) -> tuple[int | None, bool]:
    """A written step number (0 allowed) and whether it was a float such as ``2.0``."""
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int):
        return (value if 0 <= value < 10**9 else None), False
    if isinstance(value, float):
        ok = value.is_integer() and 0 <= value < 10**9
        return (int(value) if ok else None), ok
    if isinstance(value, str):
        m = _DEP_RE.match(value)
        if m is not None:
            return int(m.group(1)), False
    return None, False


def _text(value: Any, field_name: str, sid: int, rd: _Reader) -> str:
    if isinstance(value, str):
        return value
    shown = json.dumps(value, ensure_ascii=False, default=str)
    rd.warn("JSON_FIELD_TYPE", f"the {field_name} of step {sid} is not a string "
            f"({snippet(shown, 40)}); read as its JSON text", sid)
    return shown


def _is_none(item: Any) -> bool:
    if isinstance(item, str):
        return item.strip().lower() in _NONE_TOOLS or bool(_NEGATIVE_RE.match(item))
    return item is None or (
        isinstance(item, int | float) and not isinstance(item, bool) and item < 0
    )


def _deps(value: Any, sid: int, rd: _Reader) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    bad: list[str] = []
    for item in items:
        if _is_none(item):
            continue
        n, _ = _int_id(item)
        dep = None if n is None else rd.step_number(n)
        if dep is None or dep < 1:
            bad.append(_shown(item, 30))
        elif dep not in out:
            out.append(dep)
    if bad:
        rd.warn(
            "DEPENDENCY_UNREADABLE",
            f"the dependencies of step {sid} have entries that name no step: {', '.join(bad)}; "
            f"read only {sorted(out)}",
            sid,
        )
    return tuple(sorted(out))


def _rewrite_refs(value: Any, sid: int, rd: _Reader) -> Any:
    """Foreign reference forms in strings rewritten to ``<step_N>`` (numbers renumbered)."""
    if isinstance(value, dict):
        return {k: _rewrite_refs(v, sid, rd) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite_refs(v, sid, rd) for v in value]
    if not isinstance(value, str):
        return value
    m = _DOLLAR_RE.match(value)
    if m is not None:
        n = rd.step_number(int(m.group(1) or m.group(2)))
        if m.group(2) is not None or (n < sid and n in rd.ids):
            new = f"<step_{n}>"
            rd.warn("JSON_REF_FORM", f"step {sid}: read {value.strip()!r} as {new}", sid,
                    Severity.INFO)
            return new
        rd.warn("JSON_DOLLAR_TEXT", f"step {sid}: {value.strip()!r} names no earlier step; "
                "kept as text (write ${N} or <step_N> for a reference)", sid)
        return value

    def sub(m: re.Match[str]) -> str:
        gen, node, e, step_prefix, step_n = m.groups()
        if step_prefix is not None:
            return f"step_{rd.step_number(int(step_n))}"
        if node is not None:
            n = int(node)
            return f"<step_{rd.node_ids.get(n, n + 1)}>"
        return f"<step_{rd.step_number(int(gen if gen is not None else e))}>"

    if "<GENERATED>-" not in value and "<node-" not in value and "#E" not in value and (
        rd.offset == 0 or "step_" not in value
    ):
        return value
    new = _FOREIGN_REF_RE.sub(sub, value)
    if new != value:
        rd.warn("JSON_REF_FORM", f"step {sid}: read {snippet(value, 50)!r} as "
                f"{snippet(new, 50)!r}", sid, Severity.INFO)
    return new


@dataclass
class _Args:
    args: dict[str, Any] = field(default_factory=dict)
    positional: tuple[Any, ...] = ()
    valid: bool = True
    text: str | None = None


def _pairs(value: list[Any]) -> dict[str, Any] | None:
    """TaskBench's ``[{"name": ..., "value": ...}]`` argument lists, as a dict."""
    if not value or not all(
        isinstance(v, dict) and set(v) == {"name", "value"} and isinstance(v["name"], str)
        for v in value
    ):
        return None
    return {v["name"]: v["value"] for v in value}


def _args(value: Any, sid: int, rd: _Reader, deps: tuple[int, ...], tool: str | None,
          server: str | None) -> _Args:
    """The arguments of one step.

    Free-text placeholders (``"<chiller_asset_id>"``) become hinted references over
    ``deps`` (the step's declared dependencies; else the steps it refers to), as in
    hashstep plans.
    """
    if value is None:
        return _Args()
    args_text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                 default=str)
    if isinstance(value, str):
        if not value.strip():
            return _Args(text=args_text)
        got, dups = read_json_keeping_duplicates(value)
        if got.error is None and isinstance(got.value, dict | list):
            if dups:
                for d in dups:
                    rd.warn("JSON_DUPLICATE_KEY", f"the args of step {sid}: {d.message}; the "
                            "step must not run as written", sid, Severity.ERROR)
                return _Args(valid=False, text=args_text)
            for repair in got.repairs:
                if repair != "escaped JSON string":
                    rd.warn("ARGS_REPAIRED", f"the args of step {sid}: repaired {repair}", sid)
            value = got.value
        elif got.error is not None and value.strip()[:1] in ("{", "["):
            # a complete JSON string whose text is cut: the reply itself is not cut off
            what = "are cut off" if got.truncated else "are not readable JSON"
            rd.warn("ARGS_SYNTAX", f"the args of step {sid} {what}: {got.error} (in "
                    f"{snippet(value, 50)!r}); the step must not run as written", sid,
                    Severity.ERROR)
            return _Args(valid=False, text=args_text)
    if isinstance(value, list):
        pairs = _pairs(value)
        if pairs is not None:
            names = [v["name"] for v in value]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                for n in twice:
                    vals = [v["value"] for v in value if v["name"] == n]
                    rd.warn("JSON_DUPLICATE_KEY", f"the args of step {sid}: the argument {n!r} "
                            f"is given twice, with the values {_shown(vals[0], 40)} and "
                            f"{_shown(vals[1], 40)}; the step must not run as written", sid,
                            Severity.ERROR)
                return _Args(valid=False, text=args_text)
            rd.warn("ARGS_NAME_VALUE_PAIRS", f"the args of step {sid} are a list of name/value "
                    f"pairs; read as the arguments {', '.join(map(repr, pairs))}", sid,
                    Severity.INFO)
            value = pairs
    value = _rewrite_refs(value, sid, rd)
    valid = True
    if isinstance(value, list):
        params = rd.params(tool, server)
        if params is not None:
            if len(value) > len(params):
                rd.warn("ARGS_POSITIONAL_EXTRA", f"the args of step {sid} are a list of "
                        f"{len(value)} values but tool {tool!r} takes {len(params)} "
                        f"parameter(s) ({', '.join(params) or 'none'}); which value is meant "
                        "for which is not known: the step must not run as written", sid,
                        Severity.ERROR)
                valid = False
            else:
                rd.warn("ARGS_POSITIONAL_MAPPED", f"the args of step {sid} are a list; "
                        f"mapped onto the parameters of tool {tool!r} in schema order: "
                        f"{', '.join(params[: len(value)]) or 'none'}", sid, Severity.INFO)
                value = dict(zip(params, value, strict=False))
    if isinstance(value, dict):
        found = find_refs(value, dialect="hashstep", location="args")
        over = deps or tuple(sorted({r.step for r in iter_refs(found)}))
        found = free_placeholders(found, over, location="args")[0]
        out = _Args(dict(found), (), valid, args_text)
        where: Any = out.args
        location = "args"
        checks: list[tuple[Any, str]] = [(out.args, "args")]
    else:
        items = value if isinstance(value, list) else [value]
        positional: list[Any] = []
        for i, item in enumerate(items):
            found = find_refs(item, dialect="hashstep", location=f"positional[{i}]")
            over = deps or tuple(sorted({r.step for r in iter_refs(found)}))
            positional.append(free_placeholders(found, over, location=f"positional[{i}]")[0])
        out = _Args({}, tuple(positional), valid, args_text)
        where, location = out.positional, "positional"
        checks = [(p, f"positional[{i}]") for i, p in enumerate(out.positional)]
        if isinstance(value, list):
            rd.warn("ARGS_POSITIONAL", f"the args of step {sid} are a list of {len(items)} "
                    "value(s), not a JSON object; bound in order to the tool's parameters",
                    sid)
        else:
            kind = "a reference" if isinstance(positional[0], Ref) else type(value).__name__
            rd.warn("ARGS_POSITIONAL", f"the args of step {sid} are {kind} "
                    f"({snippet(args_text, 40)!r}), not a JSON object; bound as the single "
                    "positional argument (the tool's first parameter)", sid)
    for part, loc in checks:
        for path, key, is_ref in keys_with_refs(part, loc):
            if is_ref:
                rd.warn("REF_IN_KEY", f"the args of step {sid} have a reference in a dict key "
                        f"({path} key {key!r}); keys are never resolved, so the tool would "
                        "get the placeholder as a key; the step must not run as written", sid,
                        Severity.ERROR)
                out.valid = False
            else:
                rd.warn("PLACEHOLDER_UNRECOGNIZED", f"the args of step {sid} have a "
                        f"placeholder-looking dict key ({path} key {key!r}); the executor "
                        "will refuse to pass it to a tool", sid)
        for path, s in walk_strings(part, loc):
            if contains_placeholder(s):
                rd.warn("PLACEHOLDER_UNRECOGNIZED", f"{path} of step {sid} holds "
                        f"{snippet(s, 40)!r}, which looks like a placeholder but is no "
                        "reference the grammar reads; the executor will refuse to pass it to "
                        "a tool", sid)
    rd.diags.hinted_refs(where, line=None, step=sid)
    rd.diags.malformed_refs(where, dialect="hashstep", location=location, line=None, step=sid)
    rd.diags.ref_suffixes(where, line=None, step=sid)
    return out


def _pick(item: dict[str, Any], keys: Iterable[str], used: set[str]) -> tuple[bool, Any]:
    """The value of the first of ``keys`` in ``item`` (marking it read)."""
    for key in keys:
        if key in item and key not in used:
            used.add(key)
            return True, item[key]
    return False, None


_ENVELOPES: dict[str, tuple[str, ...]] = {
    "tool_use": ("type", "id"),  # Anthropic: the id is the call's, not a step number
    "function_call": ("type", "id", "call_id", "status"),  # OpenAI Responses
}


def _unwrap(item: Any) -> tuple[Any, dict[str, Any], set[str]]:
    """A call's inner object, the envelope's unread fields, and the fields read."""
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        extras = {k: v for k, v in item.items() if k not in ("function", "id", "type", "index")}
        return item["function"], extras, set()
    if isinstance(item, dict) and isinstance(item.get("functionCall"), dict):
        extras = {k: v for k, v in item.items() if k != "functionCall"}
        return item["functionCall"], extras, set()
    if isinstance(item, dict) and item.get("type") in _ENVELOPES:
        return item, {}, {k for k in _ENVELOPES[item["type"]] if k in item}
    return item, {}, set()


def _explicit_id(item: Any) -> tuple[bool, Any]:
    """Whether a step object gives an id, and the value written."""
    if not isinstance(item, dict) or isinstance(item.get("function"), dict) or _provider_call(
        item
    ):
        return False, None
    for key in _ID_KEYS:
        if key in item:
            value = item[key]
            if key == "step" and isinstance(value, str) and _int_id(value)[0] is None:
                continue  # {"step": "Search the web"}: the step's text, not its number
            return True, value
    return False, None


def _number(items: list[Any], rd: _Reader) -> list[int]:
    """Each item's step id: its own (from 1; ids from 0 are renumbered), or its position."""
    given = [_explicit_id(item) for item in items]
    read = [(has, *(_int_id(raw) if has else (None, False))) for has, raw in given]
    if any(has and n == 0 for has, n, _ in read):
        rd.offset = 1
        rd.warn("JSON_IDS_RENUMBERED", "the step ids count from 0; renumbered from 1 (id N "
                "is step N+1), and the dependencies and references with them", None,
                Severity.INFO)
    taken = {n + rd.offset for has, n, _ in read if has and n is not None}
    any_given = any(has for has, _, _ in read)
    out: list[int] = []
    seen: set[int] = set()
    for pos, ((has, raw), (_, n, was_float)) in enumerate(zip(given, read, strict=True),
                                                           start=1):
        if has and n is not None:
            sid = n + rd.offset
            out.append(sid)
            seen.add(sid)
            if was_float:
                rd.warn("STEP_NUMBER_FLOAT", f"the step at position {pos} has the id "
                        f"{_shown(raw, 30)}, a float; read as step {sid}", sid)
            continue
        number = pos if pos not in taken and pos not in seen else max(taken | seen) + 1
        seen.add(number)
        out.append(number)
        if has:
            rd.warn("STEP_NUMBER_INVALID", f"the step at position {pos} has the id "
                    f"{_shown(raw, 30)}, which is no step number (an integer from 1); numbered "
                    f"it {number}", number)
        elif any_given:
            rd.warn("STEP_NUMBER_MISSING", f"the step at position {pos} has no id; numbered "
                    f"it {number}", number)
    return out


@dataclass
class _Tool:
    present: bool = False
    """A tool-like key was found (the step is no reasoning step by default)."""
    key: str | None = None
    server: str | None = None
    tool: str | None = None
    no_tool: bool = False
    """The tool key says "none": a reasoning step by the planner's choice."""
    error: bool = False
    """The tool could not be identified: the step must not run."""


def _tool_like(key: str, value: Any, explicit_present: bool) -> bool:
    if key in _EXPLICIT_TOOL_KEYS:
        return True
    if key == "task" and explicit_present:
        return False
    return isinstance(value, str) and bool(_IDENT_RE.match(value.strip()))


def _find_tool(item: dict[str, Any], used: set[str], sid: int, rd: _Reader) -> _Tool:
    """The step's tool: by the catalog, else by `TOOL_KEYS` (see the module docstring)."""
    free = {k: v for k, v in item.items() if k not in used}
    explicit = any(k in free for k in _EXPLICIT_TOOL_KEYS)
    chosen: list[tuple[str, Any]] = []
    if rd.catalog is not None:
        for k, v in free.items():
            if k in _NOT_TOOL_KEYS or not isinstance(v, str) or (
                k in ("task", "Task") and explicit
            ):
                continue
            name = v.strip()
            name = name[:-2] if name.endswith("()") else name
            if name and rd.has_tool(name):
                chosen.append((k, v))
    by_catalog = bool(chosen)
    if not chosen:
        chosen = [(k, free[k]) for k in TOOL_KEYS if k in free
                  and _tool_like(k, free[k], explicit)]
    if not chosen:
        return _Tool()
    names = {v.strip() if isinstance(v, str) else _shown(v) for _, v in chosen
             if not _is_none(v)}
    if len(names) > 1:
        for k, _ in chosen:
            used.add(k)
        shown = " and ".join(f"{k!r} = {_shown(v, 40)}" for k, v in chosen)
        rd.warn("JSON_TOOL_CONFLICT", f"step {sid} names two tools: {shown}; which one is "
                "meant is not known: the step must not run as written", sid, Severity.ERROR)
        return _Tool(present=True, key=chosen[0][0], tool=str(chosen[0][1]).strip(),
                     error=True)
    key, value = chosen[0]
    for k, _ in chosen:
        used.add(k)
    if _is_none(value) and not isinstance(value, int | float):
        return _Tool(present=True, key=key, no_tool=True)
    if not isinstance(value, str):
        rd.warn("JSON_TOOL_UNIDENTIFIED", f"the tool of step {sid} ({key!r}) is not a name "
                f"({_shown(value, 40)}); the step must not run as written", sid,
                Severity.ERROR)
        return _Tool(present=True, key=key, tool=_shown(value, 40), error=True)
    if key != "tool" and not (rd.call_shape and key in ("name", "function")):
        how = "it names a tool of the catalog" if by_catalog else "the first tool key present"
        rd.warn("JSON_TOOL_KEY", f"step {sid}: read the tool from the field {key!r} "
                f"({_shown(value, 40)}): {how}", sid, Severity.INFO)
    scratch = Diagnostics()
    server, tool = normalize_tool(value, line=0, step=sid, diags=scratch)
    for d in scratch.items:
        rd.diags.items.append(Diagnostic(None, d.severity, d.code, d.message, d.step))
    return _Tool(present=True, key=key, server=server, tool=tool, no_tool=tool is None)


def _unidentified(item: dict[str, Any], used: set[str], sid: int, rd: _Reader) -> _Tool | None:
    """A tool-like key whose value names no tool (prose), or a tool given by index."""
    if "ID" in item and "ID" not in used and isinstance(item["ID"], int | str):
        used.add("ID")
        rd.warn("JSON_TOOL_INDEX", f"step {sid} gives its tool as the index {_shown(item['ID'])} "
                "of a tool list outside the text; no parser can name that tool: the step must "
                "not run as written (ask the planner for tool names)", sid, Severity.ERROR)
        return _Tool(present=True, key="ID", tool=f"#{item['ID']}", error=True)
    for key in TOOL_KEYS:
        if key == "task" or key not in item or key in used:
            continue
        value = item[key]
        if not isinstance(value, str):
            continue
        used.add(key)
        close = ""
        if rd.catalog is not None:
            near = list(rd.catalog.suggest(value.strip()))
            for word in re.findall(r"[A-Za-z_][\w\-]{2,}", value)[:20]:
                near.extend(rd.catalog.suggest(word, 1))
            near = list(dict.fromkeys(near))[:3]
            close = f"; close matches: {', '.join(near)}" if near else "; no close match"
        rd.warn("JSON_TOOL_UNIDENTIFIED", f"step {sid} has the tool-like field {key!r} "
                f"({_shown(value, 40)}), which names no tool{close}: the step must not run "
                "as written", sid, Severity.ERROR)
        return _Tool(present=True, key=key, tool=value.strip(), error=True)
    return None


def _build(item: Any, sid: int, pos: int, rd: _Reader, links: tuple[int, ...] | None,
           task_text: str | None) -> Step | None:
    if isinstance(item, str):
        text = _rewrite_refs(item, sid, rd)
        in_task = {r.step for r in iter_refs(find_refs(text, location="task"))} - {sid}
        rd.warn("JSON_NO_TOOL", f"step {sid} names no tool ({snippet(item, 50)!r}): it is a "
                "reasoning step, answered by the reasoning model", sid)
        return Step(id=sid, task=text, depends_on=tuple(sorted(in_task)))
    inner, extras, used = _unwrap(item)
    if not isinstance(inner, dict):
        rd.warn("JSON_STEP_UNREADABLE", f"the step at position {pos} is neither an object nor "
                f"a sentence ({_shown(item)}); it is ignored", sid)
        return None
    step_dups = rd.duplicates_in(item)
    for d in step_dups:  # in the step's own keys, its arguments or any field it holds
        rd.warn("JSON_DUPLICATE_KEY", f"step {sid}: {d.message}; the step must not run "
                "as written", sid, Severity.ERROR)
    valid = not step_dups
    if inner is item:
        has_id, _ = _explicit_id(item)
        if has_id:
            _pick(item, [k for k in _ID_KEYS if k in item][:1], used)
    else:
        used.add("id")
    tool = _find_tool(inner, used, sid, rd)
    has_task, task_v = _pick(inner, _TASK_KEYS, used)
    if not has_task and isinstance(inner.get("step"), str) and "step" not in used:
        has_task, task_v = _pick(inner, ("step",), used)
    task = _text(task_v, "task", sid, rd) if has_task and task_v is not None else ""
    if task_text is not None and not task:
        task = task_text
    if not tool.present:
        tool = _unidentified(inner, used, sid, rd) or tool
    server = tool.server
    has_server, server_v = _pick(inner, _SERVER_KEYS, used)
    if has_server and isinstance(server_v, str) and server_v.strip().lower() not in _NONE_TOOLS:
        server = server or server_v.strip()
    has_deps, deps_v = _pick(inner, DEPS_KEYS, used)
    explicit = _deps(deps_v, sid, rd) if has_deps else ()
    if links is not None:
        explicit = tuple(sorted(set(explicit) | set(links)))
        has_deps = True
    has_exp, exp_v = _pick(inner, _EXPECTED_KEYS, used)
    expected = _text(exp_v, "expected_output", sid, rd) if has_exp and exp_v is not None else None
    has_args, args_v = _pick(inner, ARGS_KEYS, used)
    if not has_args and tool.tool is not None and not tool.error:
        params = rd.params(tool.tool, server)
        flat = {k: v for k, v in inner.items() if k not in used and (
            k in params if params is not None else k not in _META_KEYS)}
        if flat:
            for k in flat:
                used.add(k)
            how = ("parameters of the tool" if params is not None
                   else "fields beside the tool key")
            rd.warn("ARGS_FLATTENED", f"step {sid} has no args field; read the {how} as its "
                    f"arguments: {', '.join(map(repr, flat))}", sid)
            has_args, args_v = True, flat
    got = _args(args_v, sid, rd, explicit, tool.tool, server) if has_args else _Args()
    if has_args and not isinstance(args_v, str) and rd.duplicates_in(args_v):
        got = _Args(valid=False, text=got.text)  # reported above: no value is chosen
    valid = valid and got.valid and not tool.error
    rd.unknown(f"step {sid}", {**extras, **{k: v for k, v in inner.items() if k not in used}}, sid)
    if not tool.present and server is None:
        rd.warn("JSON_NO_TOOL", f"step {sid} names no tool "
                f"({snippet(task, 50)!r}): it is a reasoning step, answered by the reasoning "
                "model", sid)
    referenced = (
        {r.step for r in iter_refs(got.args)} | {r.step for r in iter_refs(got.positional)}
    ) - {NO_STEP}
    if tool.tool is None and (got.args or got.positional) and (
        not tool.present or has_literal(got.args, got.positional)
    ):
        rd.warn("ARGS_WITHOUT_TOOL", f"step {sid} has no tool but has args "
                f"({snippet(got.text or '', 40)!r}): it is a reasoning step, so no tool "
                "receives them; they are kept on the step and shown to the reasoning model", sid)
    if tool.tool is None:
        task = _rewrite_refs(task, sid, rd)
        referenced |= {r.step for r in iter_refs(find_refs(task, location="task"))} - {sid}
    added = sorted(referenced - set(explicit))
    if added and has_deps:
        rd.warn("DEPENDENCY_ADDED", f"step {sid} refers to step(s) "
                f"{', '.join(map(str, added))} without listing them in its dependencies; "
                "added them", sid, Severity.INFO)
    return Step(
        id=sid,
        task=task,
        tool=tool.tool,
        args=got.args,
        positional=got.positional,
        args_valid=valid,
        args_text=got.text,
        server=server,
        no_tool=tool.no_tool,
        explicit_deps=explicit,
        depends_on=tuple(sorted(set(explicit) | referenced)),
        expected_output=expected,
    )


_SHAPES = {
    "steps": "an object with a list of steps",
    "plan": "an object whose 'plan' is a list of steps",
    "list": "a list of steps",
    "strings": "a list of sentences (a task decomposition without tools)",
    "call_list": "a list of function calls",
    "tool_calls": "tool calls ('tool_calls')",
    "calls": "a list of calls ('calls')",
    "function_calls": "a list of function calls ('function_calls')",
    "call": "a single function call",
    "taskbench": "a task graph ('task_nodes', 'task_links')",
    "anthropic": "Anthropic tool_use blocks",
    "gemini": "Gemini functionCall parts",
    "responses": "OpenAI Responses function_call items",
}
_WHERE = {"reply": "", "fence": " inside a code fence", "prose": " inside prose (the text "
          "around it is ignored)"}


def _find(
    text: str, catalog: CatalogLike | None = None
) -> tuple[Any, str, tuple[str, ...], tuple[DuplicateKey, ...]] | None:
    if "{" not in text and "[" not in text:
        return None
    for candidate, where in _candidates(text):
        got, dups = read_json_keeping_duplicates(candidate)
        if got.error is None and _plan_items(got.value, 0, catalog) is not None:
            return got.value, where, got.repairs, dups
    return None


def _no_plan(text: str) -> str:
    if not text.strip():
        return "empty reply"
    whole = repair_json(text)
    if whole.error is None and isinstance(whole.value, dict):
        keys = ", ".join(repr(k) for k in list(whole.value)[:5])
        return f"JSON that is not a plan: an object with the keys {keys}"
    if whole.error is None:
        return f"JSON that is not a plan: {snippet(text.strip(), 60)!r}"
    if whole.truncated and text.lstrip()[:1] in ("{", "["):
        return f"a JSON plan that is cut off: {whole.error}"
    return f"no JSON plan in the reply: {snippet(' '.join(text.split()), 70)!r}"


def _node_key(node: Any) -> str | None:
    if isinstance(node, dict):
        for k in ("task", "tool", "name"):
            if isinstance(node.get(k), str):
                return str(node[k]).strip()
    return None


def _links(value: Any, items: list[Any], ids: list[int], rd: _Reader) -> dict[int, set[int]]:
    """TaskBench ``task_links``: each node's position → the step numbers it depends on.

    An end is a 0-based node position (a number or digits) or the name of exactly one
    node; an edge naming no node is kept as a dependency on a missing step (the checks
    report it) when it is a number, and reported when it is a name.
    """
    out: dict[int, set[int]] = {}
    if not isinstance(value, list):
        rd.warn("JSON_FIELD_TYPE", f"task_links is not a list ({_shown(value)}); it is ignored")
        return out
    names: dict[str, list[int]] = {}
    for pos, node in enumerate(items):
        key = _node_key(node)
        if key is not None:
            names.setdefault(key, []).append(pos)

    def end(v: Any) -> tuple[int | None, int | None]:
        """``(node position, step number)``."""
        if isinstance(v, str) and v.strip() in names:
            found = names[v.strip()]
            return (found[0], ids[found[0]]) if len(found) == 1 else (None, None)
        n, _ = _int_id(v)
        if n is None:
            return None, None
        return (n, ids[n]) if n < len(ids) else (None, n + 1)

    for link in value:
        if not isinstance(link, dict) or "source" not in link or "target" not in link:
            rd.warn("DEPENDENCY_UNREADABLE", f"the task link {_shown(link, 40)} has no "
                    "source and target; it is ignored")
            continue
        (_, src), (tpos, _) = end(link["source"]), end(link["target"])
        if tpos is None or src is None:
            rd.warn("DEPENDENCY_UNREADABLE", f"the task link {_shown(link, 60)} names a node "
                    "that is not in task_nodes (or a name several nodes have); it is ignored"
                    if tpos is None else
                    f"the task link {_shown(link, 60)} comes from a node that is not in "
                    "task_nodes; it is ignored", None if tpos is None else ids[tpos])
            continue
        extra = set(link) - {"source", "target"}
        if extra:
            rd.unknown("a task link", {k: link[k] for k in sorted(extra)}, ids[tpos])
        out.setdefault(tpos, set()).add(src)
    return out


def parse_json_plan(text: str, catalog: CatalogLike | None = None) -> Plan:
    """Parse a plan written as JSON (see the module docstring for the shapes read).

    Args:
        text: The planner's reply, exactly as received (or a structured-output value
            dumped as JSON).
        catalog: The tools the plan may use. With one, the field whose value names one
            of its tools is the step's tool (whatever its key), and positional argument
            lists are mapped onto the tool's parameters.

    Returns:
        The plan (``dialect="json"``) with every deviation as a `Diagnostic`.

    Raises:
        PlanParseError: the text holds no plan-shaped JSON; the message says what it holds
            instead.
    """
    cleaned, cleanup = _cleaned(text)
    found = _find(cleaned, catalog)
    if found is None:
        raise PlanParseError(_no_plan(cleaned), tuple(cleanup))
    value, where, repairs, dups = found
    plan_items = _plan_items(value, 0, catalog)
    assert plan_items is not None
    items, shape, top = plan_items
    base, _, wrapper = shape.partition(" in ")
    rd = _Reader(catalog=catalog, dups=dups, call_shape=base in _CALL_SHAPES)
    rd.diags.items.extend(cleanup)
    inside = rd.duplicates_in(items)
    outer = [d for d in dups if d not in inside]
    if outer:
        raise PlanParseError(
            "the plan's JSON gives a key twice outside any step: "
            + "; ".join(d.message for d in outer),
            tuple(cleanup),
        )
    if repairs:
        rd.warn("JSON_REPAIRED", f"repaired the plan's JSON: {', '.join(repairs)}")
    numbered_by_position = not any(_explicit_id(i)[0] for i in items)
    if shape != "steps" or where != "reply" or numbered_by_position:
        how = "; steps numbered by position" if numbered_by_position else ""
        what = _SHAPES[base] + (f" wrapped in the field {wrapper}" if wrapper else "")
        rd.warn("JSON_SHAPE", f"read {what}{_WHERE[where]} as a plan of "
                f"{len(items)} step(s){how}", None, Severity.INFO)
    ids = _number(items, rd)
    rd.ids = frozenset(ids)
    links: dict[int, set[int]] | None = None
    texts: list[str | None] = [None] * len(items)
    if base == "taskbench":
        rd.node_ids = dict(enumerate(ids))
        if "task_links" in top:
            links = _links(top.pop("task_links"), items, ids, rd)
        prose = top.pop("task_steps", None)
        if prose is not None:
            if isinstance(prose, list) and len(prose) == len(items) and all(
                isinstance(p, str) for p in prose
            ):
                texts = list(prose)
            else:
                rd.unknown("the plan", {"task_steps": prose}, None)
                rd.warn("JSON_TASK_STEPS_UNALIGNED", "task_steps does not hold one sentence "
                        "per node of task_nodes; the nodes have no task text")
    elif base in ("anthropic", "gemini", "responses"):
        for k in [k for k, v in top.items() if isinstance(v, dict | list) and k.startswith(
                ("content[", "output[", "parts[", "the list["))]:
            v = top.pop(k)
            if isinstance(v, dict) and v.get("type") in ("text", "reasoning", "message",
                                                         "thinking") or "text" in v:
                rd.warn("JSON_TEXT_IGNORED", f"the plan's {k} is text, not a call "
                        f"({_shown(v)}); it is not part of the plan", None, Severity.INFO)
            else:
                rd.unknown("the plan", {k: v}, None)
    rd.unknown("the plan", top, None)
    steps: list[Step] = []
    first_pos: dict[int, int] = {}
    for pos, (item, sid) in enumerate(zip(items, ids, strict=True), start=1):
        if sid in first_pos:
            rd.warn("DUPLICATE_STEP", f"step {sid} appears again at position {pos} (first at "
                    f"position {first_pos[sid]}); kept the first, ignored this one", sid)
            continue
        first_pos[sid] = pos
        node_links = tuple(sorted(links.get(pos - 1, set()))) if links is not None else None
        step = _build(item, sid, pos, rd, node_links, texts[pos - 1])
        if step is not None:
            steps.append(step)
    if not steps:
        raise PlanParseError("a JSON plan without any readable step", tuple(rd.diags.items))
    return Plan(steps=tuple(steps), diagnostics=tuple(rd.diags.items), dialect="json",
                source=text)


def __getattr__(name: str) -> Any:
    """`JsonPlan`, `JsonStep` and `plan_schema` live in `planexec.parsing.jsonschema`.

    They need pydantic, which reading a plan does not: they are imported on first use.
    """
    if name in ("JsonPlan", "JsonStep", "plan_schema"):
        from planexec.parsing.jsonschema import JsonPlan, JsonStep, plan_schema

        return {"JsonPlan": JsonPlan, "JsonStep": JsonStep, "plan_schema": plan_schema}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
