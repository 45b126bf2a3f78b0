"""The filter tier: a small grammar of hinted references, matched, never evaluated.

A *hinted* reference is one the reference grammar cannot follow (`planexec.parsing.refs`):
``{step_1.find(name='CWC04009').id}``, ``{asset_id_for_Chiller_6_from_step_2}``. Before
any model is asked, the resolver tries to read its hint with the shapes below. Nothing
is executed: the hint text is matched against fixed patterns, and the only operations
are "follow a key or an index", "keep the items whose field equals a literal", "the
first/last item" and "the number of items".

Path form — the hint starts with the step (``step_N``, ``#EN`` in rewoo, ``$N`` in
llmcompiler) and continues with any sequence of:

============================  ===============================================
``.name``, ``[0]``, ``["k"]``   a plain path element, as in references
``.find(key='v')``              the one item whose ``key`` equals ``v``
``[key=v]``, ``[key='v']``      the same
``[?key=='v']``                 the same (JMESPath)
`` where key = v``              the same (``v`` quoted, or the rest of the hint)
``.first``, ``.last``           the first / last item (``first()`` too)
``.len``, ``.length``           the number of items (``len()`` too); ends the path
============================  ===============================================

Word form — ``step_N_FIELD`` (``{step_1_selected_site}``, ``{step_2_selected_asset_id}``):
the one value anywhere in the output under a key that ``FIELD`` names (see `Key`: the
whole of ``FIELD``, or a trailing run of its words whose dropped words are fillers such
as ``selected`` or start a key on the way: ``asset`` for ``.assets[0].id``). Several
such keys, or none → the LLM fallback.

Prose form (read by default; ``ArgResolver(prose_hints=False)`` or the setting
``resolver.prose_hints = false`` leave it to the fallback, and its literal is a
constraint either way, see `hint_literals`) — ``FIELD for VALUE from step_N``
(underscores read as spaces: ``asset_id_for_Chiller_6_from_step_2``; ``of`` for ``for``,
``in`` for ``from`` work too): the one dict anywhere in the output with a field equal
to ``VALUE`` (underscores and spaces alike), then its field ``FIELD`` (or, when it has
none, the field named by ``FIELD``'s last word: ``asset_id`` → ``id``).
``FIELD from step_N`` (``<Name from #E1>``) is the word form written as prose.

Items: a filter applies to a list of dicts (or pydantic models); applied to a dict, it
looks through the lists directly under it (``{"assets": [...]}``). Field names compare
loosely (case, ``_``, ``-`` and spaces ignored) when there is no exact one; values
compare after `planexec.grounding.normalize` (case, whitespace, number formatting).
If exactly one item matches, it is used; none or several → the LLM fallback, with the
reason. ``first``/``last``/``len`` also apply when a plain path names them on a list
(``<step_1.assets.first.id>``: a list has no key ``first``).

The literals of a hint (`hint_literals`) are constraints on whatever fills it,
the LLM fallback included: see `planexec.grounding.OutputIndex.satisfying`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from planexec.errors import PlanexecError
from planexec.grounding import HintLiteral, key_form
from planexec.plan import PathElem, Ref, format_path

__all__ = [
    "FILLER_WORDS",
    "FilterMiss",
    "Filtered",
    "HintQuery",
    "Key",
    "Pick",
    "Select",
    "apply_path",
    "apply_query",
    "hint_literals",
    "parse_hint",
]

Follow = Callable[[Any, Sequence[PathElem]], Any]
"""Follows a path into a value (the resolver's `follow_path`)."""


@dataclass(frozen=True)
class Select:
    """Keep the one item whose field ``key`` equals ``value``; ``key=None``: any field."""

    key: str | None
    value: str
    text: str
    """As written, e.g. ``find(name='CWC04009')``."""
    loose_underscores: bool = False


@dataclass(frozen=True)
class Pick:
    """``first``, ``last`` or ``len``."""

    which: str


@dataclass(frozen=True)
class Field:
    """Take the field ``name`` of the item (prose form), or the field its last word names."""

    name: str


@dataclass(frozen=True)
class Key:
    """The one value anywhere in the output under a key that ``name`` names (word form).

    A key names it when it equals ``name`` loosely, or equals a trailing run of its words
    (``selected_asset_id`` → ``asset_id``, ``id``) whose dropped leading words are each
    a filler word (`FILLER_WORDS`) or start a key on the way to it (``asset`` for
    ``.assets[0].id``).
    """

    name: str


Op = PathElem | Select | Pick | Field | Key

FILLER_WORDS = frozenset({"selected", "chosen", "the", "a", "an", "given", "target"})
"""Leading words of a word-form field that name no key (``step_1_selected_site``)."""


@dataclass(frozen=True)
class HintQuery:
    """A hint read by the filter grammar: where to start and what to do."""

    step: int
    ops: tuple[Op, ...]
    text: str
    """The hint as written."""

    @property
    def filters(self) -> str:
        """The filters of the query, for messages (``find(name='X')``)."""
        parts = [o.text if isinstance(o, Select) else o.which if isinstance(o, Pick)
                 else f"field {o.name!r}" if isinstance(o, Key) else "" for o in self.ops]
        return " ".join(p for p in parts if p) or self.text


@dataclass(frozen=True)
class Filtered:
    """A value the filter tier chose, and where it is."""

    value: Any
    path: tuple[PathElem, ...]
    """The concrete path in the step's output (indexes of the items chosen)."""
    counted: bool = False
    """True for ``len``: the value is the number of items at ``path``."""


class FilterMiss(PlanexecError):
    """The query did not pick exactly one value; the message says why."""


_Q = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`)"""
_KEY = r"""(?:[A-Za-z_][\w\-]*|'[^']*'|"[^"]*")"""
_STEP_PREFIX = re.compile(r"\s*(?:[Ss][Tt][Ee][Pp][_ ]?(\d+)|#E(\d+)|\$\{?(\d+)\}?)(?![\w])")
_SEGMENTS: list[tuple[str, re.Pattern[str]]] = [
    ("find", re.compile(
        r"\s*\.?\s*find\s*\(\s*(?P<k>" + _KEY + r")\s*==?\s*(?P<v>" + _Q
        + r"""|[^)\s'"`,][^)'"`,]*?)\s*\)"""
    )),
    ("jmes", re.compile(
        r"\s*\[\s*\?\s*(?P<k>" + _KEY + r")\s*==\s*(?P<v>" + _Q
        + r"""|[^\]\s'"`,][^\]'"`,]*?)\s*\]"""
    )),
    ("eq", re.compile(
        r"\s*\[\s*(?P<k>" + _KEY + r")\s*==?\s*(?P<v>" + _Q
        + r"""|[^\]\s'"`,][^\]'"`,]*?)\s*\]"""
    )),
    ("where", re.compile(
        r"\s+where\s+(?P<k>" + _KEY + r")\s*==?\s*(?P<v>" + _Q + r"|[^'\"`].*$)", re.I
    )),
    ("pick", re.compile(r"\s*\.?\s*(?P<p>first|last|len|length)\s*(?:\(\s*\))?(?![\w])")),
    ("name", re.compile(r"\s*\.\s*(?P<n>[^\W\d]\w*)")),
    ("index", re.compile(r"\s*\[\s*(?P<i>-?\d+)\s*\]")),
    ("key", re.compile(r"""\s*\[\s*(?P<q>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*\]""")),
]
_PROSE = re.compile(
    r"^\s*(?P<field>[A-Za-z][A-Za-z0-9 ]*?)\s+(?:for|of)\s+(?P<value>\S.*?)\s+(?:from|in|of)\s+"
    r"(?:step\s?(?P<s>\d+)|#E(?P<e>\d+)|\$\{?(?P<d>\d+)\}?)\s*$",
    re.IGNORECASE,
)
_WORD_FIELD = re.compile(
    r"^\s*[Ss][Tt][Ee][Pp]_?(?P<s>\d+)_(?P<field>[A-Za-z][A-Za-z0-9_]*?)_*\s*$"
)
_FIELD_FROM = re.compile(
    r"^\s*(?:the\s+)?(?P<field>[A-Za-z][A-Za-z0-9 ]*?)\s+(?:from|of|in)\s+"
    r"(?:step\s?(?P<s>\d+)|#E(?P<e>\d+)|\$\{?(?P<d>\d+)\}?)\s*$",
    re.IGNORECASE,
)
_LOOSE_FILTER = re.compile(r"(?P<k>[A-Za-z_][\w\-]*)\s*==?\s*(?P<v>" + _Q + r")")
_NAMED = re.compile(
    r"\b(?:named|called)\s+(?P<v>" + _Q + r"|.+?)(?=\s+(?:from|in|of|at|on|and|with)\s|\s*$)",
    re.IGNORECASE,
)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return text


def _step_of(m: re.Match[str]) -> int:
    return int(next(g for g in m.groups() if g is not None))


def parse_hint(ref: Ref, *, prose: bool = False) -> HintQuery | None:
    """Read a hinted reference with the filter grammar.

    Args:
        ref: A reference; only hinted ones (``ref.is_hinted``) are read.
        prose: Also read the prose form (``FIELD for VALUE from step_N``, ``FIELD
            from step_N``); the resolver passes its ``prose_hints`` (on by default).

    Returns:
        The query, or None when the hint is not one of the grammar's shapes (or names
        no filter at all: a hint that is a plain path is not a filter).
    """
    if ref.hint is None:
        return None
    hint = ref.hint.strip()
    word = _WORD_FIELD.match(hint)
    if word is not None:
        field = word.group("field")
        if int(word.group("s")) != ref.step or not _content_words(field):
            return None
        return HintQuery(ref.step, (Key(field),), hint)
    prose_match = _PROSE.match(hint.replace("_", " ")) if prose else None
    if prose_match is not None:
        sid = int(prose_match.group("s") or prose_match.group("e") or prose_match.group("d"))
        value = prose_match.group("value").strip()
        if sid != ref.step or not value:
            return None
        field = prose_match.group("field").strip().replace(" ", "_")
        text = f"{field} for {value!r}"
        return HintQuery(ref.step, (Select(None, value, text, True), Field(field)), hint)
    from_match = _FIELD_FROM.match(hint.replace("_", " ")) if prose else None
    if from_match is not None:
        sid = int(from_match.group("s") or from_match.group("e") or from_match.group("d"))
        field = from_match.group("field").strip().replace(" ", "_")
        if sid != ref.step or not _content_words(field):
            return None
        return HintQuery(ref.step, (Key(field),), hint)
    m = _STEP_PREFIX.match(hint)
    if m is None or _step_of(m) != ref.step:
        return None
    ops: list[Op] = []
    pos = m.end()
    while pos < len(hint):
        if not hint[pos:].strip():
            break
        for kind, rx in _SEGMENTS:
            seg = rx.match(hint, pos)
            if seg is None:
                continue
            if kind in ("find", "jmes", "eq", "where"):
                ops.append(Select(_unquote(seg.group("k")), _unquote(seg.group("v")),
                                  seg.group(0).strip().lstrip(".").strip()))
            elif kind == "pick":
                which = seg.group("p").lower()
                ops.append(Pick("len" if which == "length" else which))
            elif kind == "name":
                ops.append(seg.group("n"))
            elif kind == "index":
                ops.append(int(seg.group("i")))
            else:
                ops.append(_unquote(seg.group("q")))
            pos = seg.end()
            break
        else:
            return None
    if not any(isinstance(o, Select | Pick) for o in ops):
        return None
    if any(isinstance(o, Pick) and o.which == "len" for o in ops[:-1]):
        return None  # len ends the path
    return HintQuery(ref.step, tuple(ops), hint)


def _content_words(field: str) -> list[str]:
    words = [w for w in re.split(r"[\s_\-]+", field) if w]
    return words if any(w.casefold() not in FILLER_WORDS for w in words) else []


def hint_literals(ref: Ref) -> tuple[HintLiteral, ...]:
    """The literals a hinted reference names (constraints on the value chosen for it).

    Filter literals (``find(name='X')``, ``[key=v]``, ``[?key=='v']``, ``where key = v``)
    are strict; prose literals (``FIELD for VALUE from step_N``, ``named X``,
    ``called X``) are enforced only when the output holds them.
    """
    if ref.hint is None:
        return ()
    out: list[HintLiteral] = []
    query = parse_hint(ref, prose=True)
    named_found = list(_NAMED.finditer(ref.hint.replace("_", " ")))
    if query is not None:
        for op in query.ops:
            if isinstance(op, Select) and not (op.key is None and named_found):
                strict = op.key is not None
                out.append(HintLiteral(op.key, op.value, strict, op.loose_underscores))
    else:
        # ``key='v'`` inside a hint the grammar cannot read as a whole still constrains.
        for seg in _LOOSE_FILTER.finditer(ref.hint):
            out.append(HintLiteral(_unquote(seg.group("k")), _unquote(seg.group("v"))))
    for named in named_found:
        value = _unquote(named.group("v"))
        if value:
            out.append(HintLiteral(None, value, False, True))
    return tuple(dict.fromkeys(out))


# -- applying a query -----------------------------------------------------------------


def _fields(node: Any) -> Mapping[str, Any] | None:
    if isinstance(node, BaseModel):
        declared = {k: node.__dict__[k] for k in type(node).model_fields}
        return {**declared, **(node.model_extra or {})}
    if isinstance(node, Mapping):
        return node
    return None


def _items(node: Any, path: tuple[PathElem, ...]) -> Iterator[tuple[Any, tuple[PathElem, ...]]]:
    if isinstance(node, list | tuple):
        for i, item in enumerate(node):
            yield item, (*path, i)
        return
    fields = _fields(node)
    if fields is None:
        return
    for k, v in fields.items():
        if isinstance(v, list | tuple):
            for i, item in enumerate(v):
                yield item, (*path, k, i)


def _field_value(item: Any, key: str) -> tuple[bool, Any, str | None]:
    fields = _fields(item)
    if fields is None:
        return False, None, None
    if key in fields:
        return True, fields[key], key
    loose = [k for k in fields if key_form(str(k)) == key_form(key)]
    if len(loose) == 1:
        return True, fields[loose[0]], loose[0]
    return False, None, None


def _equals(value: Any, literal: str, loose: bool) -> bool:
    return HintLiteral(None, literal, True, loose).matches(value)


def _all_dicts(node: Any, path: tuple[PathElem, ...]) -> Iterator[tuple[Any, tuple[PathElem, ...]]]:
    fields = _fields(node)
    if fields is not None:
        yield node, path
        for k, v in fields.items():
            yield from _all_dicts(v, (*path, k))
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from _all_dicts(v, (*path, i))


def _select(node: Any, path: tuple[PathElem, ...], op: Select, anywhere: bool
            ) -> tuple[Any, tuple[PathElem, ...]]:
    pool = list(_all_dicts(node, path)) if anywhere else list(_items(node, path))
    found = []
    for item, where in pool:
        fields = _fields(item)
        if fields is None:
            continue
        if op.key is None:
            hit = any(
                not isinstance(v, Mapping | list | tuple | BaseModel)
                and _equals(v, op.value, op.loose_underscores)
                for v in fields.values()
            )
        else:
            has, v, _ = _field_value(item, op.key)
            hit = has and _equals(v, op.value, op.loose_underscores)
        if hit:
            found.append((item, where))
    if len(found) == 1:
        return found[0]
    what = "dicts" if anywhere else "items"
    at = format_path(path) or "the output"
    if not pool:
        raise FilterMiss(f"{op.text}: {at} holds no list of {what} to filter")
    if not found:
        raise FilterMiss(f"{op.text}: no item of {at} matches ({len(pool)} {what} looked at)")
    paths = ", ".join(format_path(w) or "(root)" for _, w in found[:5])
    raise FilterMiss(f"{op.text}: {len(found)} items of {at} match ({paths}); which one is "
                     "not clear")


def _field(node: Any, path: tuple[PathElem, ...], op: Field) -> tuple[Any, tuple[PathElem, ...]]:
    has, value, key = _field_value(node, op.name)
    if not has:
        last = re.split(r"[\s_\-]+", op.name)[-1]
        if last and last != op.name:
            has, value, key = _field_value(node, last)
    if not has or key is None:
        names = ", ".join(map(str, (_fields(node) or {}).keys())) or "none"
        raise FilterMiss(f"the item at {format_path(path) or '(root)'} has no field "
                         f"{op.name!r} (fields: {names})")
    return value, (*path, key)


def _key_matches(name: str, key: str, ancestors: Sequence[str]) -> bool:
    words = [w.casefold() for w in _content_words(name)] or [name.casefold()]
    if key_form(key) == key_form(name):
        return True
    above = [key_form(a) for a in ancestors]
    for cut in range(1, len(words)):
        if key_form(key) != "".join(words[cut:]):
            continue
        if all(w in FILLER_WORDS or any(a.startswith(w) for a in above) for w in words[:cut]):
            return True
    return False


def _named(node: Any, path: tuple[PathElem, ...], op: Key) -> tuple[Any, tuple[PathElem, ...]]:
    found: list[tuple[Any, tuple[PathElem, ...]]] = []

    def walk(here: Any, where: tuple[PathElem, ...]) -> None:
        fields = _fields(here)
        if fields is not None:
            for k, v in fields.items():
                ancestors = [str(e) for e in where if isinstance(e, str)]
                if _key_matches(op.name, str(k), ancestors):
                    found.append((v, (*where, k)))
                walk(v, (*where, k))
        elif isinstance(here, list | tuple):
            for i, v in enumerate(here):
                walk(v, (*where, i))

    walk(node, path)
    if len(found) == 1:
        return found[0]
    at = format_path(path) or "the output"
    if not found:
        raise FilterMiss(f"field {op.name!r}: no key of {at} names it")
    paths = ", ".join(format_path(w) for _, w in found[:5])
    raise FilterMiss(f"field {op.name!r}: {len(found)} keys of {at} name it ({paths}); which "
                     "one is not clear")


def _pick(node: Any, path: tuple[PathElem, ...], op: Pick) -> tuple[Any, tuple[PathElem, ...]]:
    if not isinstance(node, list | tuple):
        items = list(_items(node, path))
        lists = {w[:-1] for _, w in items}
        if len(lists) != 1:
            raise FilterMiss(f"{op.which}: {format_path(path) or 'the output'} is not a list "
                             f"(and holds {len(lists)} lists)")
        (inner,) = lists
        return _pick(_follow_one(node, inner[len(path):]), inner, op)
    if op.which == "len":
        return len(node), path
    if not node:
        raise FilterMiss(f"{op.which}: {format_path(path) or 'the output'} is an empty list")
    index = 0 if op.which == "first" else len(node) - 1
    return node[index], (*path, index)


def _follow_one(node: Any, rel: Sequence[PathElem]) -> Any:
    for elem in rel:
        fields = _fields(node)
        node = fields[str(elem)] if fields is not None else node[int(elem)]
    return node


def apply_query(query: HintQuery, output: Any, follow: Follow) -> Filtered:
    """Apply a query to a step's output.

    Args:
        query: From `parse_hint`.
        output: The referenced step's structured output.
        follow: Follows a plain path (dicts, lists, pydantic models only).

    Returns:
        The value chosen and its concrete path.

    Raises:
        FilterMiss: no value, or several, or a path that does not exist.
    """
    node: Any = output
    path: tuple[PathElem, ...] = ()
    counted = False
    prose = any(isinstance(o, Field) for o in query.ops)
    for op in query.ops:
        if isinstance(op, Select):
            node, path = _select(node, path, op, anywhere=prose)
        elif isinstance(op, Field):
            node, path = _field(node, path, op)
        elif isinstance(op, Key):
            node, path = _named(node, path, op)
        elif isinstance(op, Pick):
            node, path = _pick(node, path, op)
            counted = op.which == "len"
        else:
            try:
                node = follow(node, (op,))
            except LookupError as exc:
                raise FilterMiss(f"{format_path((*path, op))}: {exc}") from exc
            path = (*path, op)
    return Filtered(node, path, counted)


def apply_path(output: Any, path: Sequence[PathElem], follow: Follow) -> Filtered | None:
    """Follow a plain path in which ``first``/``last``/``len`` name list operations.

    Returns:
        The value, or None when the path names none of them on a list (the caller
        reports the path's own error).

    Raises:
        FilterMiss: the operations apply but give no single value.
    """
    node: Any = output
    done: tuple[PathElem, ...] = ()
    used = False
    for i, elem in enumerate(path):
        if isinstance(node, list | tuple) and elem in ("first", "last", "len", "length"):
            which = "len" if elem == "length" else str(elem)
            if which == "len" and i != len(path) - 1:
                return None
            node, done = _pick(node, done, Pick(which))
            used = True
            continue
        try:
            node = follow(node, (elem,))
        except LookupError:
            return None
        done = (*done, elem)
    if not used:
        return None
    return Filtered(node, done, counted=path[-1] in ("len", "length"))

