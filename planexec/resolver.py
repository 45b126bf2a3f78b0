"""The argument resolver: a step's plan arguments → the values its tool is called with.

Per argument, in this order (`docs/resolution.md` has examples):

1. **literal** — no reference: the value as written.
2. **reference** — the value *is* a reference (``<step_2>``): the referenced output,
   type preserved (a dict stays a dict, a pydantic model stays a model).
3. **path** — ``<step_2.items[0].id>``: ``.name``, ``[i]`` and ``["k"]`` are followed
   into dicts, lists and pydantic models (declared fields only). Nothing else is ever
   looked into: no ``getattr`` on arbitrary objects, and nothing is evaluated.
3b. **filtered** — a hinted reference the filter grammar reads (`planexec.filters`:
   ``find(key='v')``, ``[key=v]``, ``[?key=='v']``, ``where key = v``, ``first``,
   ``last``, ``len``; the word form ``step_N_FIELD``; the prose forms
   ``FIELD_for_VALUE_from_step_N`` and ``FIELD from step_N``), matched, never evaluated;
   exactly one value or the fallback.
4. **interpolated** — references embedded in text are written into it (strings as they
   are, everything else as compact JSON).
5. **coerced** — the value is validated against the argument's schema type in pydantic's
   lax mode (``"42"`` → ``42``). A one-element list where a scalar is required is *not*
   unwrapped: like every value that does not fit, it goes to the fallback.
6. **llm** — the LLM fallback, only for hinted references, paths that do not exist in
   the output, values taken from references that do not fit the schema, and the
   arguments a re-resolution's `StepError` names. One call per step covers every such
   argument; an unusable reply is retried exactly once, with the problem as feedback.
7. validation of all the arguments against the tool's schema.

**A literal written in the plan is never sent to the LLM**: a literal that does not fit
its schema type fails the step with ``ARGS_INVALID`` (the arguments in
``StepError.literal_args``), which only a new plan can fix; re-resolution re-asks only
for the arguments its feedback names, and never for a literal.

The method recorded for an argument with references nested inside it is the strongest
one used anywhere in it, in the order literal < reference < path < filtered <
interpolated < coerced < llm (the further the value is from the plan's text, the
stronger).

Every value the filter tier or the fallback fills is *grounded* (`planexec.grounding`):
where it occurs in the referenced outputs is recorded, a fallback value contradicting
its hint's literals is an unusable reply, and one found nowhere though values like it
exist is handled by the ``ungrounded`` policy (``warn``, ``reresolve``, ``fail``).

Failures are returned, never raised: a `ResolutionFailure` with an `ErrorKind`, the
arguments concerned (which of them are plan literals), the upstream step where relevant,
and a message for people naming the step, the argument and the cause.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError
from pydantic.fields import FieldInfo
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

import planexec._fastpaths as _fastpaths
from planexec._json import non_finite
from planexec._log import level_of, step_log
from planexec._text import clip, cut
from planexec.errors import ErrorKind, ModelError
from planexec.events import ArgResolved, EventBus, FallbackUsed
from planexec.filters import FilterMiss, apply_path, apply_query, hint_literals, parse_hint
from planexec.grounding import Grounding, HintLiteral, OutputIndex
from planexec.parsing._common import read_call_args
from planexec.parsing.jsonrepair import RepairFailure, extract_json
from planexec.parsing.refs import contains_placeholder
from planexec.plan import Ref, Step, Template, format_path, iter_refs, to_jsonable
from planexec.results import (
    ResolutionMethod,
    StepError,
    StepResult,
    StepStatus,
    jsonable,
    plain_json_size,
)
from planexec.tools import ToolSpec

if TYPE_CHECKING:
    from planexec._models import ModelClient

__all__ = [
    "METHOD_STRENGTH",
    "ArgResolver",
    "ResolutionFailure",
    "ResolvedArgs",
    "follow_path",
]

METHOD_STRENGTH: dict[ResolutionMethod, int] = {
    ResolutionMethod.LITERAL: 0,
    ResolutionMethod.REFERENCE: 1,
    ResolutionMethod.PATH: 2,
    ResolutionMethod.FILTERED: 3,
    ResolutionMethod.INTERPOLATED: 4,
    ResolutionMethod.COERCED: 5,
    ResolutionMethod.LLM: 6,
}
"""The order of methods: a nested argument records the strongest one used inside it."""

REPLY_CUT = 500
"""Characters of an unusable fallback reply kept in the failure message."""

_POLICIES = ("warn", "reresolve", "fail")
CANDIDATES_SHOWN = 12
"""Values that do occur, shown to the fallback when its value was ungrounded."""

_MISSING: Any = object()


@dataclass(frozen=True)
class ResolvedArgs:
    """A step's arguments, ready for its tool."""

    args: dict[str, Any]
    """The resolved arguments (no `Ref`, no `Template`, no plan placeholder)."""
    methods: dict[str, ResolutionMethod]
    """How each argument got its value."""
    llm_calls: int = 0
    """Model calls made by the fallback for this step (0, 1 or 2)."""
    grounding: dict[str, Grounding] = field(default_factory=dict)
    """Where each argument filled by the filter tier or the fallback comes from."""
    validated: BaseModel | None = field(default=None, compare=False, repr=False)
    """``args`` validated by the tool's schema (`planexec.tools.ToolSpec.parse`), for
    the call (not validated again); None for a reasoning step."""
    plain: bool = field(default=False, compare=False, repr=False)
    """Whether ``args`` are plain JSON data (the quick resolution's): no NaN or
    infinity in them, nothing for the caller to look for again."""


@dataclass(frozen=True)
class ResolutionFailure:
    """Why a step's arguments could not be resolved. The tool must not be called."""

    kind: ErrorKind
    """``MISSING_REFERENCE``, ``UPSTREAM_FAILED``, ``RESOLUTION_FAILED``,
    ``ARGS_INVALID`` or ``ARGS_SYNTAX``."""
    message: str
    """For people: names the step, the argument and the cause."""
    args: tuple[str, ...] = ()
    """The arguments concerned, in the order found (schema names once bound)."""
    literal_args: tuple[str, ...] = ()
    """Those of ``args`` written as literals in the plan (never re-resolved)."""
    cause: str | None = None
    """The underlying problem in its own words (a path error, validation errors)."""
    upstream: int | None = None
    """For a reference to a step that did not succeed: that step."""
    llm_calls: int = 0
    """Model calls made before failing."""
    reply: str | None = None
    """The last fallback reply (cut to `REPLY_CUT` characters), if one was unusable."""
    methods: dict[str, ResolutionMethod] = field(default_factory=dict)
    """How the arguments that did resolve got their values (the others are absent)."""
    grounding: dict[str, Grounding] = field(default_factory=dict)
    """Where the values of the arguments that did resolve (filtered) come from."""

    @property
    def arg(self) -> str | None:
        """The first argument concerned, if any."""
        return self.args[0] if self.args else None

    def to_error(self, message: str | None = None) -> StepError:
        """The `StepError` of this failure (``message`` replaces the text for people)."""
        return StepError(
            self.kind,
            self.message if message is None else message,
            args=self.args,
            literal_args=self.literal_args,
            cause=self.cause,
            upstream=self.upstream,
        )


class _NeedsFallback(Exception):
    """A value cannot be resolved without the LLM fallback."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _BadReply(Exception):
    """The fallback's reply cannot be used."""


class _Ungrounded(_BadReply):
    """A value of the fallback's reply occurs nowhere in the referenced outputs."""

    def __init__(self, message: str, args: Sequence[str], fatal: bool) -> None:
        super().__init__(message)
        self.args_concerned = tuple(args)
        self.fatal = fatal
        """True under the ``fail`` policy: no second attempt."""


@dataclass
class _Need:
    """An argument the fallback must fill."""

    written: Any
    """The value as written in the plan (jsonable), or `_MISSING`."""
    refs: tuple[str, ...]
    """The references in it, as written."""
    reasons: list[str] = field(default_factory=list)
    """Why it needs the fallback."""
    literals: tuple[HintLiteral, ...] = ()
    """For an argument that is one hinted reference: the literals its hint names,
    which the value chosen must satisfy (`planexec.filters.hint_literals`)."""
    hint: str | None = None
    """That hinted reference, as written."""


@dataclass(frozen=True)
class _Found:
    """A value the filter tier chose for a hinted reference (or a path naming first/last/len)."""

    ref: str
    """The reference, as written."""
    via: str
    """The filters applied (``find(name='X')``)."""
    where: str
    """Its concrete place (``step_1[1].id``; ``len(step_1.assets)`` for a count)."""


def _plan_literals(values: Iterable[Any]) -> list[Any]:
    """The literal scalars the plan wrote in some argument values (references left out).

    A template's literal text counts (its references do not); dict keys do not.
    """
    out: list[Any] = []
    for value in values:
        if isinstance(value, Ref):
            continue
        if isinstance(value, Template):
            out += [p for p in value.parts if isinstance(p, str) and p.strip()]
        elif isinstance(value, Mapping):
            out += _plan_literals(value.values())
        elif isinstance(value, list | tuple):
            out += _plan_literals(value)
        elif value is not None and not isinstance(value, bool):
            out.append(value)
    return out


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else _compact(value)
    text = repr(text) if isinstance(value, str) else text
    return clip(text, limit)


def _compact(value: Any) -> str:
    """Compact JSON text of a value (pydantic models dumped first)."""
    return json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False, default=str)


def _kind_of(value: Any) -> str:
    if isinstance(value, BaseModel):
        return type(value).__name__
    if isinstance(value, list | tuple):
        return f"list of {len(value)} items"
    if isinstance(value, Mapping):
        return "dict"
    return type(value).__name__


def follow_path(value: Any, path: Sequence[str | int]) -> Any:
    """Follow ``path`` into ``value`` through dicts, lists and pydantic models only.

    Pydantic models are entered through their declared fields (and extra fields, if the
    model keeps them); nothing else is looked into.

    Raises:
        LookupError: the path does not exist; the message says where it stops and why.
    """
    current = value
    for depth, elem in enumerate(path):
        here = format_path(tuple(path[: depth + 1]))
        if isinstance(current, BaseModel):
            fields = type(current).model_fields
            extra = current.model_extra or {}
            if isinstance(elem, str) and elem in fields:
                current = current.__dict__[elem]
                continue
            if isinstance(elem, str) and elem in extra:
                current = extra[elem]
                continue
            names = ", ".join(list(fields) + list(extra)) or "none"
            raise LookupError(f"{here}: {type(current).__name__} has no field {elem!r} "
                              f"(fields: {names})")
        if isinstance(current, Mapping):
            if elem in current:
                current = current[elem]
                continue
            if isinstance(elem, int) and str(elem) in current:
                current = current[str(elem)]
                continue
            keys = ", ".join(repr(k) for k in list(current)[:12]) or "none"
            raise LookupError(f"{here}: no key {elem!r} (keys: {keys})")
        if isinstance(current, list | tuple):
            index: int | None = None
            if isinstance(elem, int) and not isinstance(elem, bool):
                index = elem
            elif isinstance(elem, str) and re.fullmatch(r"-?\d+", elem):
                index = int(elem)
            if index is None:
                raise LookupError(f"{here}: cannot take key {elem!r} of a list "
                                  f"of {len(current)} items")
            if not -len(current) <= index < len(current):
                raise LookupError(f"{here}: index {index} is out of range for a list "
                                  f"of {len(current)} items")
            current = current[index]
            continue
        raise LookupError(f"{here}: cannot look into a {type(current).__name__} (paths "
                          "follow dicts, lists and pydantic models only)")
    return current


def _retryable(exc: BaseException) -> bool:
    """Whether an unusable reply gets the fallback's one retry (not under ``fail``)."""
    return isinstance(exc, _BadReply) and not (isinstance(exc, _Ungrounded) and exc.fatal)


def _missing_values(value: Any, index: OutputIndex) -> list[Any]:
    """The scalars of ``value`` found nowhere in ``index`` (``value`` itself if scalar)."""
    if index.find(value):
        return []
    if isinstance(value, Mapping):
        return [m for v in value.values() for m in _missing_values(v, index)]
    if isinstance(value, list | tuple):
        return [m for v in value for m in _missing_values(v, index)]
    return [value]


def _strongest(methods: Sequence[ResolutionMethod]) -> ResolutionMethod:
    return max(methods, key=METHOD_STRENGTH.__getitem__, default=ResolutionMethod.LITERAL)


def _as_text(value: Any) -> str:
    """How a referenced value is written into text: strings as is, others as JSON."""
    return value if isinstance(value, str) else _compact(value)


def _where(step: int, path: tuple[Any, ...], counted: bool) -> str:
    text = f"step_{step}{format_path(path)}"
    return f"len({text})" if counted else text


def _resolve_ref(
    ref: Ref,
    results: Mapping[int, StepResult],
    found: list[_Found] | None = None,
    tier: str = "explicit",
) -> tuple[Any, ResolutionMethod]:
    """Resolve one reference; ``found`` collects what the filter tier chose."""
    text = ref.raw or ref.canonical
    if ref.is_hinted:
        query = parse_hint(ref, prose=tier == "prose") if tier != "off" else None
        if query is None:
            raise _NeedsFallback(f"hinted reference {text}")
        try:
            got = apply_query(query, results[ref.step].output, follow_path)
        except FilterMiss as exc:
            raise _NeedsFallback(
                f"hinted reference {text}: the filter grammar read it, but {exc}"
            ) from exc
        if found is not None:
            found.append(_Found(text, query.filters, _where(ref.step, got.path, got.counted)))
        return got.value, ResolutionMethod.FILTERED
    output = results[ref.step].output
    if not ref.path:
        return output, ResolutionMethod.REFERENCE
    try:
        return follow_path(output, ref.path), ResolutionMethod.PATH
    except LookupError as exc:
        miss = f"path {format_path(ref.path)} of {text} does not exist in the output of " \
            f"step {ref.step} ({exc})"
        if tier != "off":
            try:
                got2 = apply_path(output, ref.path, follow_path)
            except FilterMiss as why:
                raise _NeedsFallback(f"{miss}; read with first/last/len: {why}") from exc
            if got2 is not None:
                if found is not None:
                    ops = [str(e) for e in ref.path if e in ("first", "last", "len", "length")]
                    found.append(
                        _Found(text, " ".join(ops), _where(ref.step, got2.path, got2.counted))
                    )
                return got2.value, ResolutionMethod.FILTERED
        raise _NeedsFallback(miss) from exc


def _check_literal(text: str) -> None:
    if contains_placeholder(text):
        raise _NeedsFallback(
            f"the text {_short(text)} looks like a reference the plan grammar could not read"
        )


def _json_state(text: str, in_str: bool) -> bool:
    """Whether JSON text ends inside a double-quoted string, starting in ``in_str``."""
    escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
    return in_str


def _looks_like_json(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) >= 2 and stripped[0] + stripped[-1] in ("{}", "[]")


def _parses_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _interpolate(
    template: Template,
    results: Mapping[int, StepResult],
    notes: list[str] | None,
    found: list[_Found] | None = None,
    tier: str = "explicit",
) -> str:
    """Write a template's references into its text.

    Plain text gets strings as they are and other values as compact JSON. When the
    template is JSON text (escaped JSON in a string, ``[{"site": {step_1.site}}]``),
    each value is written as JSON instead: a JSON value where the reference stands for
    one (strings quoted), JSON-escaped text inside a quoted string. That form is used
    when it parses as JSON, with a note; JSON-looking text that parses in neither form
    gets a note too, and is written plainly.
    """
    plain: list[str] = []
    as_json: list[str] = []
    in_str = False
    for part in template.parts:
        if isinstance(part, Ref):
            resolved, _ = _resolve_ref(part, results, found, tier)
            text = _as_text(resolved)
            plain.append(text)
            if in_str:
                as_json.append(json.dumps(text, ensure_ascii=False)[1:-1])
            else:
                as_json.append(_compact(resolved))
        else:
            _check_literal(part)
            plain.append(part)
            as_json.append(part)
            in_str = _json_state(part, in_str)
    out = "".join(plain)
    if not _looks_like_json(out) and not _looks_like_json("".join(as_json)):
        return out
    json_text = "".join(as_json)
    if json_text != out and _parses_as_json(json_text):
        if notes is not None:
            notes.append(
                f"the text around {', '.join(r.raw or r.canonical for r in template.refs)} is "
                f"JSON, so the values were written as JSON: {_short(json_text)} (plain "
                f"interpolation would give {_short(out)})"
            )
        out = json_text
    elif not _parses_as_json(out) and notes is not None:
        notes.append(
            f"the text around {', '.join(r.raw or r.canonical for r in template.refs)} looks "
            f"like JSON, but the interpolated text {_short(out)} is not valid JSON"
        )
    return out


def _resolve_value(
    value: Any,
    results: Mapping[int, StepResult],
    notes: list[str] | None = None,
    found: list[_Found] | None = None,
    tier: str = "explicit",
) -> tuple[Any, ResolutionMethod]:
    """Resolve every reference in a nested value; raise `_NeedsFallback` if one can't.

    ``notes`` collects warnings about JSON-aware interpolation (see `_interpolate`);
    ``found`` what the filter tier chose; ``tier`` is ``off``, ``explicit`` (the filter
    grammar) or ``prose`` (its prose form too).
    """
    if isinstance(value, Ref):
        return _resolve_ref(value, results, found, tier)
    if isinstance(value, Template):
        text = _interpolate(value, results, notes, found, tier)
        if contains_placeholder(text):
            raise _NeedsFallback(
                f"interpolating {value.canonical!r} gave {_short(text)}, which still looks "
                "like a reference (a reference written inside another placeholder?)"
            )
        return text, ResolutionMethod.INTERPOLATED
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        methods: list[ResolutionMethod] = []
        for k, v in value.items():
            if isinstance(k, str) and contains_placeholder(k):
                raise _NeedsFallback(
                    f"the dict key {k!r} looks like a reference or placeholder; keys are "
                    "never resolved"
                )
            out[k], m = _resolve_value(v, results, notes, found, tier)
            methods.append(m)
        return out, _strongest(methods)
    if isinstance(value, list | tuple):
        items: list[Any] = []
        methods = []
        for v in value:
            item, m = _resolve_value(v, results, notes, found, tier)
            items.append(item)
            methods.append(m)
        return items, _strongest(methods)
    if isinstance(value, str):
        _check_literal(value)
    return value, ResolutionMethod.LITERAL


def _keyword_text(
    positional: Sequence[Any], args: Mapping[str, Any], names: Sequence[str]
) -> list[str]:
    """The tool's parameters named in a step's one input text, read as arguments.

    A step whose only argument is one plain text (a rewoo input, ``Tool[text]``) binds it
    whole to the tool's first parameter. Text that reads entirely as keyword arguments
    of that tool (``site_name="MAIN", limit=3``) or as a JSON object of them would put
    the text into that parameter and drop the others the planner wrote: their names,
    else none.
    """
    if len(positional) != 1 or args or type(positional[0]) is not str or not names:
        return []
    text = positional[0].strip()
    if "=" not in text and not text.startswith("{"):
        return []  # the common case: plain text
    keys: list[str] = []
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:  # not JSON: perhaps keyword arguments
        try:
            called = read_call_args(text)
        except RepairFailure:
            return []
        if not called.positional:
            keys = list(called.kwargs)
    else:
        if isinstance(parsed, dict):
            keys = [str(k) for k in parsed]
    return keys if keys and all(k in names for k in keys) else []


def _ref_texts(value: Any) -> tuple[str, ...]:
    """The references in a value, as written."""
    return tuple(r.raw or r.canonical for r in iter_refs(value))


def _is_literal(value: Any) -> bool:
    """Whether a plan value is a literal: no reference and no placeholder-looking text."""
    if isinstance(value, Ref | Template):
        return False
    if isinstance(value, Mapping):
        return all(
            not (isinstance(k, str) and contains_placeholder(k)) and _is_literal(v)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return all(_is_literal(v) for v in value)
    return not (isinstance(value, str) and contains_placeholder(value))


def _holds(value: Any, kinds: type | tuple[type, ...]) -> bool:
    """Whether ``value`` is, or holds (in mappings, lists, tuples), an instance of ``kinds``."""
    if isinstance(value, kinds):
        return True
    if isinstance(value, Mapping):
        return any(_holds(v, kinds) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds(v, kinds) for v in value)
    return False


def _field(schema: type[BaseModel], name: str) -> FieldInfo | None:
    """The field of an args schema an argument name stands for.

    Arguments are named as the schema shows them (`planexec.tools.ToolSpec.arg_names`):
    a field with an alias by its alias (an MCP server's ``a-b`` is the model's ``f_a_b``).
    """
    for field_name, info in schema.model_fields.items():
        if (info.alias or field_name) == name:
            return info
    return None


@lru_cache(maxsize=1024)
def _adapter(schema: type[BaseModel], name: str) -> TypeAdapter[Any] | None:
    """A lax validator for one field of an args schema (numbers may become strings)."""
    info = _field(schema, name)
    if info is None:
        return None
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    try:
        return TypeAdapter(annotation, config=ConfigDict(coerce_numbers_to_str=True))
    except PydanticUserError:
        return TypeAdapter(annotation)


_ANY: Any = object()
"""`_plain_field`'s answer for a field typed ``Any``."""



_AS_IS: dict[Any, type] = {
    str: str,
    int: int,
    float: float,
    bool: bool,
    list: list,
    list[Any]: list,
    dict: dict,
    dict[str, Any]: dict,
}
"""Field types (annotations) a value of the exact type fits as it is: plain JSON data
(`planexec.results.plain_json_size`) for the containers."""


@lru_cache(maxsize=1024)
def _plain_field(schema: type[BaseModel], name: str) -> Any:
    """The exact types one field of an args schema takes *as they are*, if plain.

    `_ANY` for ``Any``; ``(T,)`` for a type of `_AS_IS` and ``(T, NoneType)`` for its
    optional form; None for every other field (constraints, models, unions...):
    `_coerce` decides for those.
    """
    info = schema.model_fields.get(name)
    if info is None or info.metadata:
        return None
    annotation: Any = info.annotation
    if annotation is Any:
        return _ANY
    if annotation in _AS_IS:
        return (_AS_IS[annotation],)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = typing.get_args(annotation)
        if len(members) == 2 and type(None) in members:
            other = members[0] if members[1] is type(None) else members[1]
            if other in _AS_IS:
                return (_AS_IS[other], type(None))
    return None


def _fits_as_is(schema: type[BaseModel], name: str, value: Any) -> bool:
    """Whether `_coerce` would leave ``value`` unchanged, known without pydantic.

    False means "not known": the caller takes the general path.
    """
    kinds = _plain_field(schema, name)
    if kinds is None:
        return False
    if kinds is _ANY:  # plain JSON data is its own jsonable form and JSON dump
        return plain_json_size(value) is not None
    kind = type(value)
    if kind not in kinds:
        return False
    if kind is float:
        return math.isfinite(value)
    if kind is list or kind is dict:
        return plain_json_size(value) is not None
    return True


def _fast_value(value: Any, results: Mapping[int, StepResult]) -> tuple[Any, ResolutionMethod]:
    """Resolve a literal scalar or a whole-value reference, the common cases, cheaply.

    Gives what `_resolve_value` gives for them, or `_MISSING` (as the value) when the
    value needs the general path: a container, a template, a hinted reference, a path
    that does not exist (the filter tier and the fallback are there), placeholder-
    looking text.
    """
    kind = type(value)
    if kind is Ref:
        if value.hint is not None:
            return _MISSING, ResolutionMethod.LITERAL
        output = results[value.step].output
        if not value.path:
            return output, ResolutionMethod.REFERENCE
        try:
            return follow_path(output, value.path), ResolutionMethod.PATH
        except LookupError:
            return _MISSING, ResolutionMethod.LITERAL
    if kind is str:
        if contains_placeholder(value):
            return _MISSING, ResolutionMethod.LITERAL
        return value, ResolutionMethod.LITERAL
    if kind is int or kind is float or kind is bool or value is None:
        return value, ResolutionMethod.LITERAL
    return _MISSING, ResolutionMethod.LITERAL


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON data, types included (``1`` is not ``True``, nor ``"1"``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _coerce(adapter: TypeAdapter[Any], value: Any) -> tuple[bool, Any]:
    """Fit ``value`` to a field type: ``(changed, value)``.

    Raises:
        ValidationError: it does not fit, even in lax mode.
    """
    try:
        validated = adapter.validate_python(value)
    except ValidationError:
        if not _holds(value, BaseModel):
            raise
        # A pydantic model where plain data is wanted: its data, reported as coerced.
        validated = adapter.validate_python(jsonable(value))
        return True, adapter.dump_python(validated, mode="json")
    dumped = adapter.dump_python(validated, mode="json")
    if _same(dumped, jsonable(value)):
        return False, value
    return True, dumped


def _errors_text(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"{loc + ': ' if loc else ''}{err['msg']}")
    return "; ".join(parts)


def _schema_type(spec: ToolSpec, name: str) -> str:
    prop = spec.json_schema.get("properties", {}).get(name, {})
    return _compact(prop) if prop else "unknown"


class ArgResolver:
    """Resolves a step's arguments against earlier results; see the module docstring.

    Example:
        >>> resolver = ArgResolver()  # no model: values needing the fallback fail
    """

    def __init__(
        self,
        model: BaseChatModel | ModelClient | None = None,
        *,
        output_budget: int = 4000,
        ungrounded: Literal["warn", "reresolve", "fail"] = "reresolve",
        filters: bool = True,
        prose_hints: bool = True,
    ) -> None:
        """Create a resolver.

        Args:
            model: The chat model (or client) of the LLM fallback; None for none.
            output_budget: Characters of each referenced step's output shown to the
                fallback; longer outputs are cut, with a note saying so.
            ungrounded: What a fallback value found nowhere in the referenced outputs
                (though values like it are there) does: ``warn`` (an ``ARG_UNGROUNDED``
                event, the step flagged in `StepResult.ungrounded`), ``reresolve`` (the
                fallback is asked once more, shown the values that do occur; a second
                ungrounded answer fails) or ``fail`` (``RESOLUTION_UNGROUNDED`` at once).
            filters: Read hinted references with the filter grammar
                (`planexec.filters`) before asking the model; False only to measure
                the resolver without that tier.
            prose_hints: Let the filter tier also read the prose form
                (``FIELD_for_VALUE_from_step_N``, ``FIELD from step_N``); False leaves
                those hints to the fallback (their literals constrain its answer either
                way).
        """
        if ungrounded not in _POLICIES:
            raise ValueError(f"ungrounded must be one of {_POLICIES}, not {ungrounded!r}")
        self.client: ModelClient | None = None
        """The fallback's model client (None when there is no model)."""
        if model is not None:  # the model client loads only for a resolver with a model
            from planexec._models import as_client

            self.client = as_client(model)
        self.output_budget = output_budget
        """Characters of each referenced output shown to the fallback."""
        self.ungrounded = ungrounded
        """The policy for ungrounded fallback values: ``warn``, ``reresolve`` or ``fail``."""
        self.tier = "off" if not filters else "prose" if prose_hints else "explicit"
        """The filter tier: ``off``, ``explicit`` (the grammar) or ``prose`` (and its
        prose form)."""

    async def resolve(
        self,
        step: Step,
        spec: ToolSpec | None,
        results: Mapping[int, StepResult],
        *,
        feedback: StepError | None = None,
        run_id: str = "-",
        bus: EventBus | None = None,
    ) -> ResolvedArgs | ResolutionFailure:
        """Resolve ``step``'s arguments for the tool ``spec`` (None: a reasoning step).

        Args:
            step: The step.
            spec: Its tool; None for a reasoning step (references are resolved, nothing
                is validated).
            results: Every finished step (any status), by id.
            feedback: Why the previous resolution of this step was unusable (e.g. the
                tool's validation errors). The arguments it names that are not plan
                literals (``StepError.resolvable_args``; when it names none, every
                argument taken from a reference) are sent to the fallback, with its
                message in the prompt. Literals are never sent.
            run_id: The run, for logs and events.
            bus: Where `ArgResolved` and `FallbackUsed` events go.

        Returns:
            The resolved arguments, or why they could not be resolved.
        """
        if feedback is None and spec is not None and _fastpaths.ON:
            quick = _quick_resolution(step, spec, results)
            if quick is not None:
                if bus is not None and bus.listening:
                    for name, method in quick.methods.items():
                        await bus.emit(
                            ArgResolved.of(run_id=run_id, step_id=step.id, arg=name, method=method)
                        )
                return quick
        run = _Resolution(self, step, spec, results, feedback, run_id, bus)
        return await run.resolve()


def _quick_resolution(
    step: Step, spec: ToolSpec, results: Mapping[int, StepResult]
) -> ResolvedArgs | None:
    """The resolution of a step whose arguments are all on the fast path, else None.

    Every argument a literal scalar or a whole-value reference (with or without a path)
    to a step that succeeded, fitting its field as it is, and all of them valid for the
    tool: what `_Resolution.resolve` gives for such a step, without its machinery
    (nothing to warn about, no filter, no fallback, no grounding). Anything else (None)
    takes the full resolution, which also words every failure.
    """
    if not step.args_valid or step.positional:
        return None
    values: dict[str, Any] = {}
    methods: dict[str, ResolutionMethod] = {}
    schema = spec.args_schema
    for name, value in step.args.items():
        if type(value) is list:
            resolved, method = _quick_list(value, results)
        else:
            if type(value) is Ref and not _succeeded(value, results):
                return None
            resolved, method = _fast_value(value, results)
        if resolved is _MISSING or not _fits_as_is(schema, name, resolved):
            return None
        values[name] = resolved
        methods[name] = method
    try:
        validated = spec.parse(values)
    except ValidationError:
        return None  # the full resolution says which arguments and why
    return ResolvedArgs(args=values, methods=methods, validated=validated, plain=True)


def _succeeded(ref: Ref, results: Mapping[int, StepResult]) -> bool:
    upstream = results.get(ref.step)
    return upstream is not None and upstream.status is StepStatus.SUCCEEDED


def _quick_list(
    items: list[Any], results: Mapping[int, StepResult]
) -> tuple[Any, ResolutionMethod]:
    """What `_resolve_value` gives for a list whose items are all on the fast path.

    Every item a literal scalar or a whole-value reference to a step that succeeded
    (`_fast_value`); else `_MISSING` (as the value): the general path.
    """
    out: list[Any] = []
    methods: list[ResolutionMethod] = []
    for item in items:
        if type(item) is Ref and not _succeeded(item, results):
            return _MISSING, ResolutionMethod.LITERAL
        value, method = _fast_value(item, results)
        if value is _MISSING:
            return _MISSING, ResolutionMethod.LITERAL
        out.append(value)
        methods.append(method)
    return out, _strongest(methods)


class _Resolution:
    """One resolution of one step (keeps the per-call state out of `ArgResolver`)."""

    def __init__(
        self,
        resolver: ArgResolver,
        step: Step,
        spec: ToolSpec | None,
        results: Mapping[int, StepResult],
        feedback: StepError | None,
        run_id: str,
        bus: EventBus | None,
    ) -> None:
        self.resolver = resolver
        self.step = step
        self.spec = spec
        self.results = results
        self.feedback = feedback
        self.run_id = run_id
        self.bus = bus
        self.client: ModelClient | None = None
        if resolver.client is not None:
            base = resolver.client
            self.client = base.bind(usage=base.usage, bus=bus or base.bus, run_id=run_id)
        self.llm_calls = 0
        self.methods: dict[str, ResolutionMethod] = {}
        self.grounding: dict[str, Grounding] = {}
        self._index: OutputIndex | None = None

    # -- helpers -------------------------------------------------------------------

    @property
    def where(self) -> str:
        tool = f" ({self.step.tool})" if self.step.tool else ""
        return f"step {self.step.id}{tool}"

    def fail(
        self,
        kind: ErrorKind,
        message: str,
        args: Sequence[str] = (),
        *,
        literal: Sequence[str] = (),
        cause: str | None = None,
        upstream: int | None = None,
        reply: str | None = None,
    ) -> ResolutionFailure:
        return ResolutionFailure(
            kind=kind,
            message=message,
            args=tuple(dict.fromkeys(args)),
            literal_args=tuple(a for a in dict.fromkeys(literal) if a in args),
            cause=cause,
            upstream=upstream,
            llm_calls=self.llm_calls,
            reply=reply,
            methods=dict(self.methods),
            grounding={n: g for n, g in self.grounding.items() if n in self.methods},
        )

    async def warn(self, code: str, message: str) -> None:
        step_log(self.run_id, self.step.id).log(level_of(code), message)
        if self.bus is not None:
            await self.bus.emit(
                FallbackUsed(run_id=self.run_id, step_id=self.step.id, code=code, message=message)
            )

    # -- stages --------------------------------------------------------------------

    def bind(self) -> dict[str, Any] | ResolutionFailure:
        """Keyword arguments plus positional ones bound to the schema's names."""
        args = dict(self.step.args)
        positional = self.step.positional
        if not positional:
            return args
        if self.spec is None:
            names = ["input"] if len(positional) == 1 else [
                f"input_{i + 1}" for i in range(len(positional))
            ]
        else:
            names = self.spec.arg_names
            folded = _keyword_text(positional, args, names)
            if folded:
                return self.fail(
                    ErrorKind.ARGS_INVALID,
                    f"{self.where}: the input {_short(positional[0])} reads as the tool's "
                    f"keyword arguments ({', '.join(folded)}), but an input is bound whole, "
                    f"as text, to the first parameter ('{names[0]}'): the arguments it "
                    "names would be dropped, and they are not guessed from it",
                    ("#1",),
                    literal=("#1",),  # the plan's shape is wrong: only a re-plan fixes it
                )
        for i, value in enumerate(positional):
            if i >= len(names):
                params = ", ".join(names) or "none"
                return self.fail(
                    ErrorKind.ARGS_INVALID,
                    f"{self.where}: positional argument #{i + 1} "
                    f"({_short(to_jsonable(value))}) has no parameter to bind to: the tool "
                    f"takes {len(names)} argument(s) ({params}) but {len(positional)} "
                    "positional values were given",
                    (f"#{i + 1}",),
                    literal=(f"#{i + 1}",),  # the plan's shape is wrong: only a re-plan fixes it
                )
            name = names[i]
            if name in args:
                return self.fail(
                    ErrorKind.ARGS_INVALID,
                    f"{self.where}: argument '{name}' is given both by position (#{i + 1}) "
                    "and by name",
                    (name,),
                    literal=(name,),
                )
            args[name] = value
        return args

    def check_refs(self, args: Mapping[str, Any]) -> ResolutionFailure | None:
        for name, value in args.items():
            for ref in iter_refs(value):
                text = ref.raw or ref.canonical
                upstream = self.results.get(ref.step)
                if upstream is None:
                    return self.fail(
                        ErrorKind.MISSING_REFERENCE,
                        f"{self.where}: argument '{name}' refers to step {ref.step} "
                        f"({text}), but there is no step {ref.step} in the results: it does "
                        "not exist or has not run",
                        (name,),
                    )
                if upstream.status is not StepStatus.SUCCEEDED:
                    cause = upstream.error or upstream.note or "no error recorded"
                    kind = f"{upstream.error_kind}: " if upstream.error_kind else ""
                    return self.fail(
                        ErrorKind.UPSTREAM_FAILED,
                        f"{self.where}: argument '{name}' refers to step {ref.step} ({text}), "
                        f"whose status is {upstream.status}: {kind}{cause}",
                        (name,),
                        cause=cause,
                        upstream=ref.step,
                    )
        return None

    def forced(self, args: Mapping[str, Any]) -> list[str]:
        """The arguments a re-resolution re-asks the fallback for.

        Those the feedback names that are not plan literals (an argument the plan does
        not give may be asked for); when it names none, every argument that holds a
        reference. Never a literal: ``ArgResolver`` does not send plan literals to the
        LLM, whatever the feedback's message says.
        """
        assert self.feedback is not None
        if self.feedback.args:
            wanted = self.feedback.resolvable_args
        else:
            wanted = tuple(args)
        return [n for n in dict.fromkeys(wanted) if n not in args or not _is_literal(args[n])]

    async def resolve(self) -> ResolvedArgs | ResolutionFailure:
        step, spec = self.step, self.spec
        if not step.args_valid:
            return self.fail(
                ErrorKind.ARGS_SYNTAX,
                f"{self.where}: the arguments could not be read from the plan "
                f"({_short(step.args_text or '')})",
            )
        bound = self.bind()
        if isinstance(bound, ResolutionFailure):
            return bound
        failure = self.check_refs(bound)
        if failure is not None:
            return failure

        values: dict[str, Any] = {}
        methods = self.methods  # kept on failures too (`ResolutionFailure.methods`)
        needs: dict[str, _Need] = {}
        unfit: dict[str, str] = {}  # literals that do not fit their type: name → why
        non_numbers: dict[str, str] = {}  # values holding NaN or infinity: name → which
        for name, value in bound.items():
            resolved, method = _fast_value(value, self.results)
            if resolved is _MISSING:  # the general path: containers, templates, hints...
                notes: list[str] = []
                found: list[_Found] = []
                try:
                    resolved, method = _resolve_value(
                        value, self.results, notes, found, self.resolver.tier
                    )
                except _NeedsFallback as exc:
                    needs[name] = self.need(value, _ref_texts(value), exc.reason)
                    continue
                for note in notes:
                    await self.warn(
                        "ARG_INTERPOLATED_JSON", f"{self.where}: argument '{name}': {note}"
                    )
                if found:
                    await self.filtered(name, value, found)
            bad = non_finite(resolved)
            if bad is not None:  # JSON has no such number: never coerced into something else
                non_numbers[name] = bad
                continue
            if spec is None or _fits_as_is(spec.args_schema, name, resolved):
                values[name] = resolved  # nothing to coerce (what `_coerce` would find)
                methods[name] = method
                continue
            adapter = _adapter(spec.args_schema, name)
            if adapter is not None:
                try:
                    changed, fitted = _coerce(adapter, resolved)
                except ValidationError as exc:
                    why = (
                        f"its value {_short(resolved)} does not fit the argument's type "
                        f"{_schema_type(spec, name) if spec else ''}: {_errors_text(exc)}"
                    )
                    if method is ResolutionMethod.LITERAL:
                        unfit[name] = why
                    else:
                        needs[name] = self.need(value, _ref_texts(value), why)
                        self.grounding.pop(name, None)
                    continue
                if changed:
                    await self.warn(
                        "ARG_COERCED",
                        f"{self.where}: argument '{name}' coerced from {_short(resolved)} "
                        f"to {_short(fitted)} to fit its schema type",
                    )
                    resolved, method = fitted, ResolutionMethod.COERCED
            values[name] = resolved
            methods[name] = method

        if non_numbers:
            return self.fail(
                ErrorKind.ARGS_INVALID,
                f"{self.where}: "
                + "; ".join(
                    f"argument '{n}' would hold {bad}, which is not a finite number"
                    for n, bad in non_numbers.items()
                )
                + " (JSON has no such value; it is not replaced by a guess)",
                tuple(non_numbers),
                cause="; ".join(non_numbers.values()),
            )

        if unfit:
            # A literal is the plan's own value: the LLM is never asked to replace it.
            return self.fail(
                ErrorKind.ARGS_INVALID,
                f"{self.where}: literal value(s) written in the plan do not fit the tool's "
                "schema: " + "; ".join(f"argument '{n}': {why}" for n, why in unfit.items()),
                tuple(unfit),
                literal=tuple(unfit),
                cause="; ".join(unfit.values()),
            )

        if self.feedback is not None:
            for name in self.forced(bound):
                value = bound.get(name, _MISSING)
                if value is _MISSING:
                    need = needs.setdefault(name, _Need(_MISSING, ()))
                else:
                    need = needs.setdefault(name, self.need(value, _ref_texts(value)))
                need.reasons.append("the previous value was rejected (see the feedback)")
                values.pop(name, None)
                methods.pop(name, None)
                self.grounding.pop(name, None)

        if needs:
            filled = await self.fallback(needs, values)
            if isinstance(filled, ResolutionFailure):
                return filled
            for name in needs:
                values[name] = filled[name]
                methods[name] = ResolutionMethod.LLM
            ordered = [n for n in bound if n in values] + [n for n in values if n not in bound]
            values = {n: values[n] for n in ordered}
            self.methods = methods = {n: methods[n] for n in ordered}

        for name, value in values.items():
            if _holds(value, (Ref, Template)):  # pragma: no cover - guarded by the stages above
                return self.fail(
                    ErrorKind.RESOLUTION_FAILED,
                    f"{self.where}: argument '{name}' still holds an unresolved reference",
                    (name,),
                )
        for name in methods:
            g = self.grounding.get(name)
            if g is not None and not g.grounded:
                await self.warn(
                    "ARG_UNGROUNDED",
                    f"{self.where}: argument '{name}' = {_short(values[name])} was filled by "
                    f"the LLM fallback and {g.describe()} in the referenced outputs (policy "
                    "'warn': kept, the step is flagged)",
                )
        if self.bus is not None and self.bus.listening:
            for name, method in methods.items():
                await self.bus.emit(
                    ArgResolved(
                        run_id=self.run_id,
                        step_id=step.id,
                        arg=name,
                        method=method,
                        grounding=self.grounding.get(name),
                    )
                )
        validated: BaseModel | None = None
        if spec is not None:
            try:
                validated = spec.parse(values)
            except ValidationError as exc:
                return self.invalid(exc, bound)
        grounding = {n: self.grounding[n] for n in methods if n in self.grounding}
        return ResolvedArgs(
            args=values,
            methods=methods,
            llm_calls=self.llm_calls,
            grounding=grounding,
            validated=validated,
        )

    def invalid(self, exc: ValidationError, bound: Mapping[str, Any]) -> ResolutionFailure:
        assert self.spec is not None
        problems = []
        names: list[str] = []
        for err in exc.errors():
            loc = err["loc"]
            name = str(loc[0]) if loc else None
            if name is not None:
                names.append(name)
            sub = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc[1:])
            if err["type"] == "extra_forbidden":
                why = (
                    "is not a parameter of the tool (parameters: "
                    f"{', '.join(self.spec.arg_names) or 'none'})"
                )
            elif err["type"] == "missing":
                why = "is required but was not given"
            else:
                why = f"{err['msg']} (got {_short(err.get('input'))})"
            label = f"argument '{name}{sub}'" if name else "the arguments"
            problems.append(f"{label} {why}")
        literal = [
            n
            for n in names
            if n in bound
            and _is_literal(bound[n])
            and self.methods.get(n) is not ResolutionMethod.LLM
        ]
        return self.fail(
            ErrorKind.ARGS_INVALID,
            f"{self.where}: the arguments do not fit the tool's schema: " + "; ".join(problems),
            names,
            literal=literal,
            cause=_errors_text(exc, limit=10),
        )

    # -- the filter tier and grounding ---------------------------------------------

    def need(self, value: Any, refs: tuple[str, ...], reason: str | None = None) -> _Need:
        """An argument for the fallback; one hinted reference brings its hint's literals."""
        need = _Need(to_jsonable(value), refs, [reason] if reason else [])
        if isinstance(value, Ref) and value.is_hinted:
            need.literals = hint_literals(value)
            need.hint = value.raw or value.canonical
        return need

    async def filtered(self, name: str, value: Any, found: Sequence[_Found]) -> None:
        """Record (and announce) what the filter tier chose for argument ``name``."""
        via = "; ".join(f"{f.ref} by {f.via}" for f in found)
        self.grounding[name] = Grounding(
            "grounded", tuple(dict.fromkeys(f.where for f in found)), via=via
        )
        await self.warn(
            "ARG_FILTERED",
            f"{self.where}: argument '{name}': "
            + "; ".join(f"{f.ref} read by the filter grammar ({f.via}): {f.where}"
                        for f in found),
        )

    @property
    def index(self) -> OutputIndex:
        """The referenced steps' outputs, indexed for grounding (built once)."""
        if self._index is None:
            self._index = OutputIndex(
                {sid: self.results[sid].output for sid in self.referenced_steps()}
            )
        return self._index

    def check_hint(self, name: str, value: Any, need: _Need) -> None:
        """Reject a value that contradicts the literals of the argument's hinted reference.

        Raises:
            _BadReply: the value does not come from a node carrying every literal that
                applies (strict ones always; prose ones when the outputs hold them).
        """
        index = self.index
        applying = [lit for lit in need.literals if lit.strict or index.holds_literal(lit)]
        if not applying or index.satisfying(value, applying):
            return
        wanted = ", ".join(str(lit) for lit in applying)
        fits = [v for v, _ in index.satisfying_values(applying)]
        near = [v for v in fits if not isinstance(v, bool) and v is not None]
        shown = ", ".join(_short(v, 40) for v in dict.fromkeys(near[:CANDIDATES_SHOWN]))
        raise _BadReply(
            f"'{name}' = {_short(value)} contradicts the hint {need.hint}: it does not come "
            f"from an item of the outputs with {wanted}"
            + (f" (values of such items: {shown})" if shown else
               " (no item of the outputs shown has it)")
        )

    def sources(self, name: str) -> dict[str, list[Any]]:
        """Sources other than the outputs that ground a value of argument ``name``.

        ``schema``: the enum/const/default values its schema names; ``plan``: the
        literal values the plan wrote in this step's arguments. Never a message planexec
        wrote itself (a re-resolution's feedback quotes the rejected value: counting it
        would ground the very value it rejected).
        """
        out: dict[str, list[Any]] = {}
        if self.spec is not None:
            prop = self.spec.json_schema.get("properties", {}).get(name, {})
            named: list[Any] = []
            for node in (prop, *prop.get("anyOf", ()), *prop.get("oneOf", ())):
                if isinstance(node, Mapping):
                    named += list(node.get("enum") or ())
                    if "const" in node:
                        named.append(node["const"])
            if "default" in prop:
                named.append(prop["default"])
            if named:
                out["schema"] = named
        literals = _plan_literals((*self.step.positional, *self.step.args.values()))
        if literals:
            out["plan"] = literals
        return out

    def check_grounding(self, filled: Mapping[str, Any]) -> dict[str, Grounding]:
        """Ground every filled value; apply the ``ungrounded`` policy.

        Raises:
            _Ungrounded: under ``reresolve`` or ``fail``, a value held to grounding was
                found nowhere; the message shows the values that do occur.
        """
        index = self.index
        out = {
            name: index.ground(name, value, extra=self.sources(name))
            for name, value in filled.items()
        }
        bad = [n for n, g in out.items() if not g.grounded]
        if not bad or self.resolver.ungrounded == "warn":
            return out
        parts = []
        for name in bad:
            g = out[name]
            cands: list[str] = []
            for missing_value in _missing_values(filled[name], index):
                for v, occ in index.candidates(name, missing_value):
                    cands.append(f"{_short(v, 40)} at {occ}")
            shown = list(dict.fromkeys(cands))[:CANDIDATES_SHOWN]
            parts.append(
                f"'{name}' = {', '.join(g.missing)} occurs nowhere in the outputs of the steps "
                "it refers to"
                + (f"; values of that kind that do occur: {'; '.join(shown)}" if shown else "")
            )
        raise _Ungrounded(
            "; ".join(parts) + ". Use a value from the outputs shown.",
            bad,
            fatal=self.resolver.ungrounded == "fail",
        )

    # -- the LLM fallback ----------------------------------------------------------

    async def fallback(
        self, needs: Mapping[str, _Need], values: Mapping[str, Any]
    ) -> dict[str, Any] | ResolutionFailure:
        names = ", ".join(f"'{n}'" for n in needs)
        first = next(iter(needs))
        if len(needs) == 1:
            why = "; ".join(needs[first].reasons)
            label = f"argument {names}"
        else:
            why = "; ".join(f"'{n}': {'; '.join(need.reasons)}" for n, need in needs.items())
            label = f"arguments {names}"
        if self.client is None:
            # The real cause first (the path, reference or value that failed), then why
            # nothing else could be tried.
            return self.fail(
                ErrorKind.RESOLUTION_FAILED,
                f"{self.where}: {label}: {why}; the LLM fallback that would be asked "
                "next is unavailable: no model is configured",
                tuple(needs),
            )
        await self.warn(
            "ARG_LLM_FALLBACK",
            f"{self.where}: asking the LLM fallback for {label} ({why})",
        )
        base = self.prompt(needs, values)
        client = self.client
        reply = ""
        problem: str | None = None
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(2),
                retry=retry_if_exception(_retryable),
                reraise=True,
            ):
                with attempt:
                    messages = list(base)
                    if problem is not None:
                        messages += [
                            AIMessage(content=reply),
                            HumanMessage(
                                content=f"Your reply could not be used: {problem}\n"
                                "Reply again with only the JSON object, with every key "
                                f"asked for: {', '.join(json.dumps(n) for n in needs)}."
                            ),
                        ]
                    self.llm_calls += 1
                    reply = await client.complete(
                        messages, purpose="resolve", step_id=self.step.id, keys=tuple(needs)
                    )
                    try:
                        return self.check_reply(reply, needs, values)
                    except _BadReply as exc:
                        problem = str(exc)
                        if self.llm_calls < 2 and _retryable(exc):
                            await self.warn(
                                "RESOLVE_RETRY",
                                f"{self.where}: the LLM fallback's reply for {label} "
                                f"was unusable ({problem}); asking once more",
                            )
                        raise
        except _Ungrounded as exc:
            shown = clip(reply, REPLY_CUT)
            tries = "" if exc.fatal else f" after {self.llm_calls} attempts"
            return self.fail(
                ErrorKind.RESOLUTION_UNGROUNDED,
                f"{self.where}: the LLM fallback's value for {label} is not grounded in "
                f"the referenced outputs{tries} (policy '{self.resolver.ungrounded}'): {exc}",
                exc.args_concerned,
                cause=str(exc),
                reply=shown,
            )
        except _BadReply as exc:
            shown = clip(reply, REPLY_CUT)
            return self.fail(
                ErrorKind.RESOLUTION_FAILED,
                f"{self.where}: the LLM fallback gave no usable value for {label} "
                f"after {self.llm_calls} attempts: {exc}; last reply: {shown!r}",
                tuple(needs),
                cause=str(exc),
                reply=shown,
            )
        except ModelError as exc:
            return self.fail(
                ErrorKind.RESOLUTION_FAILED,
                f"{self.where}: the LLM fallback for {label} failed: {exc}",
                tuple(needs),
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def check_reply(
        self, reply: str, needs: Mapping[str, _Need], values: Mapping[str, Any]
    ) -> dict[str, Any]:
        if not reply.strip():
            raise _BadReply("the reply was empty")
        found = extract_json(reply)
        if found.duplicate_key is not None:
            raise _BadReply(f"the reply's JSON is refused: {found.error}")
        obj = found.value
        if not isinstance(obj, dict):
            raise _BadReply("no JSON object was found in the reply")
        missing = [n for n in needs if n not in obj]
        if missing:
            raise _BadReply(
                "the object lacks " + ", ".join(f"'{n}'" for n in missing)
            )
        filled: dict[str, Any] = {}
        for name in needs:
            value = obj[name]
            if contains_placeholder(value):
                raise _BadReply(
                    f"'{name}' still holds a placeholder ({_short(value)}); give the actual "
                    "value"
                )
            adapter = _adapter(self.spec.args_schema, name) if self.spec is not None else None
            if adapter is not None:
                try:
                    _, value = _coerce(adapter, value)
                except ValidationError as exc:
                    raise _BadReply(
                        f"'{name}' = {_short(value)} does not fit its schema: "
                        f"{_errors_text(exc)}"
                    ) from exc
            filled[name] = value
        if self.spec is not None:
            try:
                self.spec.validate({**values, **filled})
            except ValidationError as exc:
                ours = [e for e in exc.errors() if e["loc"] and e["loc"][0] in needs]
                if ours:
                    text = "; ".join(
                        f"'{'.'.join(str(x) for x in e['loc'])}': {e['msg']}" for e in ours[:3]
                    )
                    raise _BadReply(f"the values do not fit the schema: {text}") from exc
        for name, need in needs.items():
            if need.literals:
                self.check_hint(name, filled[name], need)
        self.grounding.update(self.check_grounding(filled))
        return filled

    def referenced_steps(self) -> list[int]:
        ids = {r.step for r in self.step.refs if r.step in self.results}
        if not ids or any(r.is_hinted for r in self.step.refs):
            # a hinted reference (e.g. a free-text placeholder such as <chiller_asset_id>)
            # may mean any declared dependency: show them all
            ids |= {d for d in self.step.explicit_deps if d in self.results}
        return sorted(ids)

    def prompt(self, needs: Mapping[str, _Need], values: Mapping[str, Any]) -> list[BaseMessage]:
        step, spec = self.step, self.spec
        budget = self.resolver.output_budget
        lines: list[str] = [f"## Step {step.id}", f"Task: {step.task or '(none given)'}", ""]
        if spec is not None:
            lines += [
                "## Tool",
                f"Name: {spec.qualified_name}",
                f"Description: {spec.description or '(none)'}",
                f"Arguments JSON schema: {json.dumps(spec.json_schema, ensure_ascii=False)}",
                "",
            ]
        else:
            lines += ["## Tool", "None: this is a reasoning step.", ""]
        lines.append("## Outputs of the steps it refers to")
        referenced = self.referenced_steps()
        if not referenced:
            lines.append("(none)")
        for sid in referenced:
            result = self.results[sid]
            output = result.output
            text = output if isinstance(output, str) else json.dumps(
                jsonable(output), ensure_ascii=False
            )
            lines += [f"### step_{sid} (tool: {result.tool or 'none'})", cut(text, budget), ""]
        if lines[-1]:
            lines.append("")
        if values:
            lines += ["## Arguments already resolved"]
            for name, value in values.items():
                lines.append(f"- {name} = {cut(_compact(value), budget)}")
            lines.append("")
        lines += ["## Arguments to fill"]
        for name, need in needs.items():
            written = (
                "not given in the plan"
                if need.written is _MISSING
                else f"written in the plan as {json.dumps(need.written, ensure_ascii=False)}"
            )
            refs = f"; references: {', '.join(need.refs)}" if need.refs else ""
            lines.append(f"- {name}: {written}{refs}; why: {'; '.join(need.reasons)}")
        if self.feedback:
            lines += ["", "## Feedback on the previous attempt", self.feedback.message]
        keys = ", ".join(json.dumps(n) for n in needs)
        lines += [
            "",
            f"Reply with one JSON object with exactly these keys: {keys}. Each value must "
            "fit the argument's schema and come from the outputs above; do not write "
            "references or placeholders.",
        ]
        system = (
            "You fill in arguments of one tool call in a plan that is being executed. "
            "Use only the step's task, the tool's schema and the outputs shown; never "
            "invent values. Reply with a single JSON object and nothing else."
        )
        return [SystemMessage(content=system), HumanMessage(content="\n".join(lines))]

