"""The json dialect: plans written as JSON, as models with structured output answer.

The documented shape is `JsonPlan` (its JSON Schema is ``docs/plan.schema.json``)::

    {"steps": [{"id": 1, "task": "List the sites", "tool": "sites", "args": {},
                "depends_on": [], "expected_output": "a list of sites"}, ...]}

The reader also takes the shapes real models emit instead, each with an info
``JSON_SHAPE`` diagnostic naming it:

- a bare list of steps (``[{"id": 1, "tool": ...}, ...]``);
- a list of function calls (``[{"name": "sites", "arguments": {...}}]``; ``arguments``
  may be a JSON string);
- OpenAI-style tool calls (``{"tool_calls": [{"function": {"name": ..., "arguments":
  "..."}}]}``);
- ``{"steps": ["...", ...]}`` whose steps are sentences: tool-less (reasoning) steps.

Inside ``args`` the reference grammar is the hashstep one (``"<step_1.items[0].id>"``).
Nothing is dropped silently: a step without a tool is a reasoning step with a
``JSON_NO_TOOL`` warning, a step without an id is numbered by position, a field the
dialect does not read is a ``JSON_FIELD_UNKNOWN`` warning. The JSON may stand alone, sit
in a code fence or inside prose. A JSON value has no lines of its own, so the
diagnostics of this dialect carry no line number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from planexec._text import snippet
from planexec.errors import PlanParseError
from planexec.parsing._common import (
    Diagnostics,
    clean_reply,
    has_literal,
    normalize_tool,
    walk_strings,
)
from planexec.parsing.jsonrepair import closing_bracket, repair_json
from planexec.parsing.refs import NO_STEP, contains_placeholder, find_refs, free_placeholders
from planexec.plan import Diagnostic, Plan, Ref, Severity, Step, iter_refs

if TYPE_CHECKING:
    from planexec.parsing.jsonschema import JsonPlan, JsonStep, plan_schema

__all__ = [
    "JsonPlan",
    "JsonStep",
    "find_json_plan",
    "parse_json_plan",
    "plan_schema",
]


_ID_KEYS = ("id", "step_id", "step", "number", "step_number")
_TASK_KEYS = ("task", "description", "thought", "instruction", "step_description")
_TOOL_KEYS = ("tool", "tool_name", "name", "action", "function")
_ARGS_KEYS = ("args", "arguments", "parameters", "params", "input", "tool_input",
              "action_input", "kwargs")
_DEPS_KEYS = ("depends_on", "dependencies", "deps", "dependency", "requires")
_EXPECTED_KEYS = ("expected_output", "expected", "expectedOutput", "expected output")
_SERVER_KEYS = ("server", "agent")
_IGNORED_CALL_KEYS = ("type", "index")  # the envelope of an OpenAI tool call
_STEP_KEYS = frozenset(
    _ID_KEYS + _TASK_KEYS + _TOOL_KEYS + _ARGS_KEYS + _DEPS_KEYS + _EXPECTED_KEYS + _SERVER_KEYS
)
_LIST_KEYS = ("steps", "plan", "tool_calls", "calls", "function_calls")
_NONE_TOOLS = {"", "none", "null", "nil", "n/a", "reasoning", "llm"}
_DEP_RE = re.compile(r"^\s*(?:#?\s*(?:s|step|task|e)[_ ]?)?<?(\d{1,9})>?\s*$", re.IGNORECASE)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.S)
_MAX_CANDIDATES = 16
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CLEANUP_MARKERS = ("</think>", "assistantfinal", "<|", "\\boxed")
"""Text `clean_reply` removes: a reply holding one may start with JSON once cleaned."""


# -- finding the JSON -----------------------------------------------------------------------


def _is_call(item: Any) -> bool:
    """Whether ``item`` looks like a function call or a step object."""
    if not isinstance(item, dict):
        return False
    fn = item.get("function")
    if isinstance(fn, dict) and "name" in fn:
        return True
    return any(k in item for k in ("tool", "tool_name", "task")) or (
        "name" in item and any(k in item for k in _ARGS_KEYS)
    )


def _plan_items(value: Any, depth: int = 0) -> tuple[list[Any], str, dict[str, Any]] | None:
    """The step items of a plan-shaped value: ``(items, shape, top-level extras)``.

    ``shape`` names the shape (a key of `_SHAPES`), followed by `` in 'key'`` when the
    plan is the single value of a wrapping object.
    """
    if isinstance(value, list):
        if value and all(_is_call(v) for v in value):
            calls = all(
                isinstance(v.get("function"), dict) or not any(k in v for k in ("tool", "task"))
                for v in value
            )
            return value, "call_list" if calls else "list", {}
        return None
    if not isinstance(value, dict):
        return None
    for key in _LIST_KEYS:
        items = value.get(key)
        if not isinstance(items, list) or not items:
            continue
        if key in ("steps", "plan"):
            # the key says what the list is: one readable step is enough (the others are
            # reported as unreadable)
            shaped = any(
                isinstance(v, str) or _is_call(v)
                or (isinstance(v, dict) and not _STEP_KEYS.isdisjoint(v))
                for v in items
            )
        else:
            shaped = all(_is_call(v) for v in items)
        if shaped:
            return items, key, {k: v for k, v in value.items() if k != key}
    if _is_call(value) and ("name" in value or "function" in value):
        return [value], "call", {}
    if depth == 0 and len(value) == 1:  # {"plan": {"steps": [...]}}, {"response": [...]}
        (key, inner), = value.items()
        found = _plan_items(inner, 1)
        if found is not None:
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


def find_json_plan(text: str) -> tuple[Any, str] | None:
    """Find a plan-shaped JSON value in a reply (alone, in a code fence, or in prose).

    Args:
        text: The reply (already cleaned of leaked reasoning and special tokens).

    Returns:
        ``(value, where)`` with ``where`` one of ``"reply"``, ``"fence"``, ``"prose"``,
        or None when no JSON value in the text has the shape of a plan.
    """
    if not isinstance(text, str):
        return None
    found = _find(text)
    return None if found is None else (found[0], found[1])


def _starts_with_json(text: str) -> bool:
    """Whether the reply's text (after a possible code fence opener) starts with JSON."""
    s = text.lstrip()
    if s.startswith("```"):
        s = s[3:].lstrip(_LETTERS).lstrip()
    return s[:1] in ("{", "[")


def looks_like_json_plan(text: str) -> bool:
    """Whether a reply *is* a JSON plan: it starts with a plan-shaped JSON value.

    Leaked reasoning and special tokens are removed first, and a code fence opener
    skipped; the value must begin the reply (a JSON plan further on, e.g. in a hashstep
    ``#Args``, does not count).

    Used by `planexec.parsing.detect_dialect`, which also picks the json dialect for a
    plan-shaped JSON value inside prose when no other dialect recognizes the text.
    """
    if "{" not in text and "[" not in text:
        return False
    if not _starts_with_json(text) and not any(m in text for m in _CLEANUP_MARKERS):
        return False  # cheap: most replies are no JSON, and clean_reply reads them all
    s = _cleaned(text)[0].lstrip()
    if s.startswith("```"):
        m = _FENCE_RE.match(s)
        s = m.group(2).lstrip() if m is not None else s[3:].lstrip(_LETTERS).lstrip()
    if s[:1] not in ("{", "["):
        return False
    end = closing_bracket(s, 0)  # the JSON value the reply starts with, not one further on
    got = repair_json(s if end is None else s[: end + 1])
    return got.error is None and _plan_items(got.value) is not None


def _cleaned(text: str) -> tuple[str, list[Diagnostic]]:
    lines, diags = clean_reply(text)
    return "\n".join(t for _, t in lines), diags


# -- reading the steps ----------------------------------------------------------------------


class _Reader:
    def __init__(self) -> None:
        self.diags = Diagnostics()

    def warn(self, code: str, message: str, step: int | None = None,
             severity: Severity = Severity.WARNING) -> None:
        self.diags.add(None, severity, code, message, step)

    def unknown(self, where: str, extras: dict[str, Any], step: int | None) -> None:
        for key, value in extras.items():
            shown = snippet(json.dumps(value, ensure_ascii=False, default=str), 50)
            self.warn(
                "JSON_FIELD_UNKNOWN",
                f"{where} has the field {key!r} ({shown}), which the json dialect does "
                "not read; it is ignored",
                step,
            )


def _step_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value < 10**9 else None
    if isinstance(value, str):
        m = _DEP_RE.match(value)
        if m is not None and int(m.group(1)) >= 1:
            return int(m.group(1))
    return None


def _text(value: Any, field: str, sid: int, rd: _Reader) -> str:
    if isinstance(value, str):
        return value
    shown = json.dumps(value, ensure_ascii=False, default=str)
    rd.warn("JSON_FIELD_TYPE", f"the {field} of step {sid} is not a string ({snippet(shown, 40)}); "
            "read as its JSON text", sid)
    return shown


def _deps(value: Any, sid: int, rd: _Reader) -> tuple[int, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    bad: list[str] = []
    for item in items:
        if isinstance(item, str) and item.strip().lower() in _NONE_TOOLS:
            continue
        dep = _step_id(item)
        if dep is None:
            bad.append(snippet(json.dumps(item, ensure_ascii=False, default=str), 30))
        elif dep not in out:
            out.append(dep)
    if bad:
        rd.warn(
            "DEPENDENCY_UNREADABLE",
            f"depends_on of step {sid} has entries that name no step: {', '.join(bad)}; "
            f"read only {sorted(out)}",
            sid,
        )
    return tuple(sorted(out))


def _args(
    value: Any, present: bool, sid: int, rd: _Reader, deps: tuple[int, ...] = ()
) -> tuple[dict[str, Any], tuple[Any, ...], bool, str | None]:
    """``(args, positional, args_valid, args_text)`` of one step.

    Free-text placeholders (``"<chiller_asset_id>"``) become hinted references over
    ``deps`` (the step's declared dependencies; else the steps it refers to), as in
    hashstep plans.
    """
    if not present or value is None:
        return {}, (), True, None
    args_text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                 default=str)
    if isinstance(value, str):
        if not value.strip():
            return {}, (), True, args_text
        got = repair_json(value)
        if got.error is None and isinstance(got.value, dict | list):
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
            return {}, (), False, args_text
    if isinstance(value, dict):
        found = find_refs(value, dialect="hashstep", location="args")
        over = deps or tuple(sorted({r.step for r in iter_refs(found)}))
        found = free_placeholders(found, over, location="args")[0]
        args: dict[str, Any] = dict(found)
        positional: tuple[Any, ...] = ()
        where: Any = args
        location = "args"
    else:
        found = find_refs(value, dialect="hashstep", location="positional[0]")
        over = deps or tuple(sorted({r.step for r in iter_refs(found)}))
        found = free_placeholders(found, over, location="positional[0]")[0]
        args, positional, where, location = {}, (found,), found, "positional[0]"
        kind = "a reference" if isinstance(found, Ref) else type(value).__name__
        rd.warn("ARGS_POSITIONAL", f"the args of step {sid} are {kind} "
                f"({snippet(args_text, 40)!r}), not a JSON object; bound as the single "
                "positional argument (the tool's first parameter)", sid)
    for path, s in walk_strings(where, location):
        if contains_placeholder(s):
            rd.warn("PLACEHOLDER_UNRECOGNIZED", f"{path} of step {sid} holds "
                    f"{snippet(s, 40)!r}, which looks like a placeholder but is no reference "
                    "the grammar reads; the executor will refuse to pass it to a tool", sid)
    rd.diags.hinted_refs(where, line=None, step=sid)
    rd.diags.malformed_refs(where, dialect="hashstep", location=location, line=None, step=sid)
    rd.diags.ref_suffixes(where, line=None, step=sid)
    return args, positional, True, args_text


def _pick(item: dict[str, Any], keys: Iterable[str], used: set[str]) -> tuple[bool, Any]:
    """The value of the first of ``keys`` in ``item`` (marking it read)."""
    for key in keys:
        if key in item and key not in used:
            used.add(key)
            return True, item[key]
    return False, None


def _unwrap(item: Any) -> tuple[Any, dict[str, Any]]:
    """An OpenAI tool call's ``function`` object, and the envelope's other fields."""
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        extras = {k: v for k, v in item.items() if k not in ("function", "id", *_IGNORED_CALL_KEYS)}
        return item["function"], extras
    return item, {}


def _explicit_id(item: Any) -> tuple[bool, int | None]:
    """Whether a step object gives an id, and the id it gives (None when unreadable)."""
    if not isinstance(item, dict) or isinstance(item.get("function"), dict):
        return False, None
    for key in _ID_KEYS:
        if key in item:
            value = item[key]
            if key == "step" and isinstance(value, str) and _step_id(value) is None:
                continue  # {"step": "Search the web"}: the step's text, not its number
            return True, _step_id(value)
    return False, None


def _number(items: list[Any], rd: _Reader) -> list[int]:
    """Each item's step id: its own, or its position (the next free number)."""
    given = [_explicit_id(item) for item in items]
    taken = {sid for has, sid in given if has and sid is not None}
    any_given = any(has for has, _ in given)
    out: list[int] = []
    seen: set[int] = set()
    for pos, (item, (has, sid)) in enumerate(zip(items, given, strict=True), start=1):
        if has and sid is not None:
            out.append(sid)
            seen.add(sid)
            continue
        number = pos if pos not in taken and pos not in seen else max(taken | seen) + 1
        seen.add(number)
        out.append(number)
        if has:
            raw = next(item[k] for k in _ID_KEYS if k in item)
            rd.warn("STEP_NUMBER_INVALID", f"the step at position {pos} has the id "
                    f"{snippet(json.dumps(raw, ensure_ascii=False, default=str), 30)}, which "
                    f"is no step number (an integer from 1); numbered it {number}", number)
        elif any_given:
            rd.warn("STEP_NUMBER_MISSING", f"the step at position {pos} has no id; numbered "
                    f"it {number}", number)
    return out


def _tool(
    item: dict[str, Any], used: set[str], sid: int, rd: _Reader
) -> tuple[bool, str | None, str | None, bool]:
    """``(present, server, tool, no_tool)`` of a step object."""
    present, value = _pick(item, _TOOL_KEYS, used)
    if not present:
        return False, None, None, False
    if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_TOOLS):
        return True, None, None, True
    if not isinstance(value, str):
        rd.warn("JSON_FIELD_TYPE", f"the tool of step {sid} is not a name "
                f"({snippet(json.dumps(value, ensure_ascii=False, default=str), 40)}); read as "
                "a reasoning step (no tool)", sid)
        return True, None, None, True
    scratch = Diagnostics()
    server, tool = normalize_tool(value, line=0, step=sid, diags=scratch)
    for d in scratch.items:
        rd.diags.items.append(Diagnostic(None, d.severity, d.code, d.message, d.step))
    return True, server, tool, tool is None


def _build(item: Any, sid: int, pos: int, rd: _Reader) -> Step | None:
    if isinstance(item, str):
        in_task = {r.step for r in iter_refs(find_refs(item, location="task"))} - {sid}
        rd.warn("JSON_NO_TOOL", f"step {sid} names no tool ({snippet(item, 50)!r}): it is a "
                "reasoning step, answered by the reasoning model", sid)
        return Step(id=sid, task=item, depends_on=tuple(sorted(in_task)))
    inner, extras = _unwrap(item)
    if not isinstance(inner, dict):
        shown = snippet(json.dumps(item, ensure_ascii=False, default=str), 50)
        rd.warn("JSON_STEP_UNREADABLE", f"the step at position {pos} is neither an object nor "
                f"a sentence ({shown}); it is ignored", sid)
        return None
    used: set[str] = set()
    if inner is item:
        has_id, _ = _explicit_id(item)
        if has_id:
            _pick(item, [k for k in _ID_KEYS if k in item][:1], used)
    else:
        used.add("id")
    has_task, task_v = _pick(inner, _TASK_KEYS, used)
    if not has_task and isinstance(inner.get("step"), str) and "step" not in used:
        has_task, task_v = _pick(inner, ("step",), used)
    task = _text(task_v, "task", sid, rd) if has_task and task_v is not None else ""
    tool_present, server, tool, no_tool = _tool(inner, used, sid, rd)
    has_server, server_v = _pick(inner, _SERVER_KEYS, used)
    if has_server and isinstance(server_v, str) and server_v.strip().lower() not in _NONE_TOOLS:
        server = server or server_v.strip()
    has_deps, deps_v = _pick(inner, _DEPS_KEYS, used)
    explicit = _deps(deps_v, sid, rd) if has_deps else ()
    has_args, args_v = _pick(inner, _ARGS_KEYS, used)
    args, positional, valid, args_text = _args(args_v, has_args, sid, rd, explicit)
    has_exp, exp_v = _pick(inner, _EXPECTED_KEYS, used)
    expected = _text(exp_v, "expected_output", sid, rd) if has_exp and exp_v is not None else None
    rd.unknown(f"step {sid}", {**extras, **{k: v for k, v in inner.items() if k not in used}}, sid)
    if not tool_present and server is None:
        rd.warn("JSON_NO_TOOL", f"step {sid} names no tool "
                f"({snippet(task, 50)!r}): it is a reasoning step, answered by the reasoning "
                "model", sid)
    referenced = (
        {r.step for r in iter_refs(args)} | {r.step for r in iter_refs(positional)}
    ) - {NO_STEP}
    if tool is None and (args or positional) and (not tool_present or has_literal(args,
                                                                                   positional)):
        rd.warn("ARGS_WITHOUT_TOOL", f"step {sid} has no tool but has args "
                f"({snippet(args_text or '', 40)!r}): it is a reasoning step, so no tool "
                "receives them; they are kept on the step and shown to the reasoning model", sid)
    if tool is None:
        referenced |= {r.step for r in iter_refs(find_refs(task, location="task"))} - {sid}
    added = sorted(referenced - set(explicit))
    if added and has_deps:
        rd.warn("DEPENDENCY_ADDED", f"step {sid} refers to step(s) "
                f"{', '.join(map(str, added))} without listing them in depends_on; added them",
                sid, Severity.INFO)
    return Step(
        id=sid,
        task=task,
        tool=tool,
        args=args,
        positional=positional,
        args_valid=valid,
        args_text=args_text,
        server=server,
        no_tool=no_tool,
        explicit_deps=explicit,
        depends_on=tuple(sorted(set(explicit) | referenced)),
        expected_output=expected,
    )


_SHAPES = {
    "steps": "an object with a list of steps",
    "plan": "an object whose 'plan' is a list of steps",
    "list": "a list of steps",
    "call_list": "a list of function calls",
    "tool_calls": "tool calls ('tool_calls')",
    "calls": "a list of calls ('calls')",
    "function_calls": "a list of function calls ('function_calls')",
    "call": "a single function call",
}
_WHERE = {"reply": "", "fence": " inside a code fence", "prose": " inside prose (the text "
          "around it is ignored)"}


def _find(text: str) -> tuple[Any, str, tuple[str, ...]] | None:
    if "{" not in text and "[" not in text:
        return None
    for candidate, where in _candidates(text):
        got = repair_json(candidate)
        if got.error is None and _plan_items(got.value) is not None:
            return got.value, where, got.repairs
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


def parse_json_plan(text: str) -> Plan:
    """Parse a plan written as JSON (see the module docstring for the shapes read).

    Args:
        text: The planner's reply, exactly as received (or a structured-output value
            dumped as JSON).

    Returns:
        The plan (``dialect="json"``) with every deviation as a `Diagnostic`.

    Raises:
        PlanParseError: the text holds no plan-shaped JSON; the message says what it holds
            instead.
    """
    cleaned, cleanup = _cleaned(text)
    found = _find(cleaned)
    if found is None:
        raise PlanParseError(_no_plan(cleaned), tuple(cleanup))
    value, where, repairs = found
    plan_items = _plan_items(value)
    assert plan_items is not None
    items, shape, top = plan_items
    rd = _Reader()
    rd.diags.items.extend(cleanup)
    if repairs:
        rd.warn("JSON_REPAIRED", f"repaired the plan's JSON: {', '.join(repairs)}")
    numbered_by_position = not any(_explicit_id(i)[0] for i in items)
    if shape != "steps" or where != "reply" or numbered_by_position:
        how = "; steps numbered by position" if numbered_by_position else ""
        base, _, wrapper = shape.partition(" in ")
        what = _SHAPES[base] + (f" wrapped in the field {wrapper}" if wrapper else "")
        rd.warn("JSON_SHAPE", f"read {what}{_WHERE[where]} as a plan of "
                f"{len(items)} step(s){how}", None, Severity.INFO)
    rd.unknown("the plan", top, None)
    steps: list[Step] = []
    first_pos: dict[int, int] = {}
    for pos, (item, sid) in enumerate(zip(items, _number(items, rd), strict=True), start=1):
        if sid in first_pos:
            rd.warn("DUPLICATE_STEP", f"step {sid} appears again at position {pos} (first at "
                    f"position {first_pos[sid]}); kept the first, ignored this one", sid)
            continue
        first_pos[sid] = pos
        step = _build(item, sid, pos, rd)
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
