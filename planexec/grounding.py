"""Grounding: where a value the resolver filled in occurs in the referenced outputs.

The LLM fallback (and the filter tier, `planexec.filters`) fill arguments from the
outputs of the steps a step refers to. *Grounding* records, per argument, the path(s)
in those outputs where the value occurs (``step_2.assets[0].id``), or, for a list or a
dict that does not occur as a whole, where each element (each value) occurs. A value
found nowhere is *ungrounded*.

Values are compared after this normalisation (`normalize`):

- strings: surrounding whitespace dropped, runs of whitespace made one space, case
  folded (``"  Chiller  6 "`` = ``"chiller 6"``);
- numbers, and strings that are a plain decimal number: the number's value, whatever
  its formatting (``7`` = ``7.0`` = ``"7"`` = ``"7.00"``; ``"1e3"`` = ``1000``);
- booleans and null only equal themselves;
- lists and dicts element by element.

A scalar string that is not a whole node may still occur *in text*: a string of at least
3 characters found, word-bounded, inside a longer string of the outputs (a reasoning
step's prose) is grounded there, recorded as ``step_3 (in text)``.

**Which ungrounded values count** (`Grounding.status`): a value found nowhere is
``ungrounded`` when it has *candidates* in the referenced outputs, i.e. when it looks
like an identifier the outputs could have given:

- a string that is not free text (free text: 5 words or more, or more than 60
  characters) is held to grounding when the outputs hold a string of the same *shape*
  (`shape`: letters → ``a``, digits → ``9``, runs collapsed, case ignored: ``CH-6`` and
  ``CH-9`` are ``a-9``; ``CWC04009`` is ``a9``), or strings under a key *related* to the
  argument's name (the name itself, its last word, that word without a final ``s``:
  ``asset_id`` → ``asset_id``, ``id``);
- a number is held to grounding when the outputs hold numbers under a related key;
- booleans, null, free text and values without any candidate are ``free``: recorded
  as found nowhere, never an error.

Two other sources ground a value, recorded by name instead of a path: ``schema`` (the
argument's schema names it: an ``enum`` or ``const`` value, or its default) and ``plan``
(a literal the plan wrote in the step's arguments names it, word-bounded). A message
planexec wrote itself (a re-resolution's feedback, which quotes the rejected value) is
never a source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel

from planexec.plan import PathElem, format_path

__all__ = [
    "FREE_TEXT_CHARS",
    "FREE_TEXT_WORDS",
    "Grounding",
    "HintLiteral",
    "Occurrence",
    "OutputIndex",
    "key_form",
    "normalize",
    "plain",
    "shape",
]

FREE_TEXT_WORDS = 5
"""A string of this many words or more is free text (never held to grounding)."""
FREE_TEXT_CHARS = 60
"""A string longer than this is free text (never held to grounding)."""
_IN_TEXT_MIN = 3
"""Shortest string looked for inside longer text."""
_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def plain(value: Any) -> Any:
    """JSON-like data of a value: pydantic models dumped, tuples as lists."""
    if isinstance(value, BaseModel):
        return plain(value.model_dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _number(text: str) -> str | None:
    if not _NUMBER_RE.fullmatch(text):
        return None
    try:
        d = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the regex only lets numbers through
        return None
    return _decimal_text(d)


def _decimal_text(d: Decimal) -> str:
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def normalize(value: Any) -> Any:
    """The comparison form of a value (see the module docstring).

    Args:
        value: JSON-like data (models are dumped first).

    Returns:
        A hashable key: equal keys mean equal values after normalisation.
    """
    value = plain(value)
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        try:
            return ("num", _decimal_text(Decimal(str(value))))
        except InvalidOperation:
            return ("num", str(value))
    if isinstance(value, str):
        text = " ".join(value.split()).casefold()
        num = _number(text)
        return ("num", num) if num is not None else ("str", text)
    if isinstance(value, Mapping):
        return ("dict", tuple(sorted((k, normalize(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(normalize(v) for v in value))
    return ("other", repr(value))


def shape(text: str) -> str:
    """The shape of a string: letters ``a``, digits ``9``, spaces, punctuation kept.

    Runs of one class collapse, case is ignored: ``shape("CH-6") == "a-9"``,
    ``shape("CWC04009") == "a9"``, ``shape("Chiller 6") == "a 9"``.
    """
    out: list[str] = []
    for ch in " ".join(text.split()):
        c = "a" if ch.isalpha() else "9" if ch.isdigit() else ch
        if not out or out[-1] != c or c not in "a9":
            out.append(c)
    return "".join(out)


def key_form(key: str) -> str:
    """A key compared loosely: case folded, without ``_``, ``-`` and spaces."""
    return re.sub(r"[\s_\-]+", "", key).casefold()


def _words(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return [w for w in re.split(r"[\s_\-]+", spaced) if w]


def related_keys(name: str) -> frozenset[str]:
    """Keys (in `key_form`) whose values are candidates for argument ``name``."""
    keys = {key_form(name)}
    words = _words(name)
    if words:
        last = words[-1].casefold()
        keys.add(last)
        if len(last) > 2 and last.endswith("s"):
            keys.add(last[:-1])
    return frozenset(k for k in keys if k)


def is_free_text(text: str) -> bool:
    """Whether a string is free text (a summary, a note): never held to grounding."""
    return len(text.split()) >= FREE_TEXT_WORDS or len(text) > FREE_TEXT_CHARS


@dataclass(frozen=True)
class HintLiteral:
    """A literal a hinted reference names: the chosen value must come from a node carrying it.

    ``find(name='CWC04009')`` gives ``key="name", value="CWC04009", strict=True``;
    ``asset_id_for_Chiller_6_from_step_1`` gives ``key=None, value="Chiller 6",
    strict=False``.
    """

    key: str | None
    """The field that must hold it; None for any field (or the value itself)."""
    value: str
    """The literal, as written."""
    strict: bool = True
    """True for a filter's literal (always enforced); False for one read from prose
    (``for X``, ``named X``), enforced only when the output holds it somewhere."""
    loose_underscores: bool = False
    """Compare with ``_`` read as a space (literals taken from identifiers)."""

    def matches(self, value: Any) -> bool:
        """Whether a scalar equals this literal after normalisation."""
        if isinstance(value, Mapping | list | tuple | BaseModel):
            return False
        if bool(normalize(value) == normalize(self.value)):
            return True
        if self.loose_underscores and isinstance(value, str):
            return bool(
                normalize(value.replace("_", " ")) == normalize(self.value.replace("_", " "))
            )
        return False

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}" if self.key else repr(self.value)


@dataclass(frozen=True)
class Occurrence:
    """One place a value occurs: a step, a path in its output, whole or inside text."""

    step: int
    """The step whose output holds it."""
    path: tuple[PathElem, ...]
    """Where in that output."""
    in_text: bool = False
    """True when the value is part of a longer string there."""

    def __str__(self) -> str:
        text = f"step_{self.step}{format_path(self.path)}"
        return f"{text} (in text)" if self.in_text else text


@dataclass(frozen=True)
class Grounding:
    """Where the value of one argument comes from (its provenance).

    Recorded for every argument the LLM fallback or the filter tier filled
    (`StepResult.grounding`, the ``ArgResolved`` event, ``planexec runs show``).
    """

    status: str
    """``grounded`` (every value found), ``ungrounded`` (a value that has candidates in
    the outputs was found nowhere), or ``free`` (some value was found nowhere, but it is
    free text, a boolean or null, or nothing like it is in the outputs)."""
    paths: tuple[str, ...] = ()
    """Where the value, or each of its elements, occurs (``step_2.assets[0].id``)."""
    missing: tuple[str, ...] = ()
    """Values (or elements) held to grounding and found nowhere, as compact text."""
    free: tuple[str, ...] = ()
    """Values found nowhere but not held to grounding, as compact text."""
    via: str | None = None
    """For the filter tier: the filter that chose the value (``find(name='X')``)."""

    @property
    def grounded(self) -> bool:
        """Whether nothing held to grounding is missing."""
        return self.status != "ungrounded"

    def describe(self) -> str:
        """One line for people: ``grounded at step_2[0].id`` / ``UNGROUNDED: 'X'``."""
        parts: list[str] = []
        if self.status == "ungrounded":
            parts.append("UNGROUNDED: " + ", ".join(self.missing) + " found nowhere")
        elif self.paths:
            parts.append("grounded at " + ", ".join(self.paths[:4]))
            if len(self.paths) > 4:
                parts[-1] += f" (+{len(self.paths) - 4} more)"
        if self.free:
            parts.append("free: " + ", ".join(self.free))
        if self.via:
            parts.append(f"via {self.via}")
        return "; ".join(parts) or self.status

    def to_dict(self) -> dict[str, Any]:
        """Return the grounding as JSON-ready data."""
        return {
            "status": self.status,
            "paths": list(self.paths),
            "missing": list(self.missing),
            "free": list(self.free),
            "via": self.via,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grounding:
        """Decode `to_dict`'s data (missing keys get their defaults)."""
        return cls(
            status=str(data.get("status") or "grounded"),
            paths=tuple(str(p) for p in data.get("paths") or ()),
            missing=tuple(str(p) for p in data.get("missing") or ()),
            free=tuple(str(p) for p in data.get("free") or ()),
            via=data.get("via"),
        )


def _compact(value: Any) -> str:
    text = json.dumps(plain(value), ensure_ascii=False, separators=(",", ":"), default=str)
    # (not `planexec._text.clip`: _text imports results, which imports this module)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class _Node:
    step: int
    path: tuple[PathElem, ...]
    value: Any
    chain: tuple[Any, ...]
    """The containers from the output's root down to the node's parent."""


@dataclass
class OutputIndex:
    """Every node of some steps' outputs, looked up by normalised value."""

    outputs: Mapping[int, Any]
    """The outputs, by step id."""
    nodes: list[_Node] = field(default_factory=list)
    by_value: dict[Any, list[_Node]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for sid, output in self.outputs.items():
            self._walk(sid, plain(output), (), ())

    def _walk(self, sid: int, value: Any, path: tuple[PathElem, ...], chain: tuple[Any, ...]
              ) -> None:
        node = _Node(sid, path, value, chain)
        self.nodes.append(node)
        self.by_value.setdefault(normalize(value), []).append(node)
        if isinstance(value, Mapping):
            for k, v in value.items():
                self._walk(sid, v, (*path, k), (*chain, value))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._walk(sid, v, (*path, i), (*chain, value))

    def scalars(self) -> Iterator[_Node]:
        """Every scalar node."""
        for n in self.nodes:
            if not isinstance(n.value, Mapping | list):
                yield n

    def find(self, value: Any) -> list[tuple[Occurrence, _Node]]:
        """Where ``value`` occurs as a whole node, else inside longer text."""
        hits = [(Occurrence(n.step, n.path), n) for n in self.by_value.get(normalize(value), [])]
        if hits or not isinstance(value, str) or len(value.strip()) < _IN_TEXT_MIN:
            return hits
        needle = " ".join(value.split()).casefold()
        rx = re.compile(r"(?<!\w)" + re.escape(needle) + r"(?!\w)")
        for n in self.scalars():
            if isinstance(n.value, str) and rx.search(" ".join(n.value.split()).casefold()):
                hits.append((Occurrence(n.step, n.path, in_text=True), n))
        return hits

    def holds_literal(self, literal: HintLiteral) -> bool:
        """Whether any node of the outputs carries ``literal``."""
        return any(_carries(n, literal) for n in self.nodes)

    def candidates(self, name: str, value: Any) -> list[tuple[Any, Occurrence]]:
        """Values of the outputs that could stand where ``value`` stands (see the module)."""
        related = related_keys(name)
        out: list[tuple[Any, Occurrence]] = []
        seen: set[Any] = set()
        want_shape = shape(value) if isinstance(value, str) else None
        for n in self.scalars():
            v = n.value
            if v is None or isinstance(v, bool):
                continue
            key = n.path[-1] if n.path else None
            by_key = isinstance(key, str) and key_form(key) in related
            if isinstance(value, str):
                ok = isinstance(v, str) and (by_key or shape(v) == want_shape)
            elif isinstance(value, int | float):
                ok = by_key and isinstance(v, int | float)
            else:
                ok = False
            norm = normalize(v)
            if ok and norm not in seen:
                seen.add(norm)
                out.append((v, Occurrence(n.step, n.path)))
        return out

    def held(self, name: str, value: Any) -> bool:
        """Whether a value found nowhere counts as ungrounded (it has candidates)."""
        if value is None or isinstance(value, bool):
            return False
        if isinstance(value, str) and is_free_text(value):
            return False
        if not isinstance(value, str | int | float):
            return False
        return bool(self.candidates(name, value))

    def ground(
        self,
        name: str,
        value: Any,
        *,
        via: str | None = None,
        extra: Mapping[str, Sequence[Any]] | None = None,
    ) -> Grounding:
        """Where ``value`` (argument ``name``) occurs: its `Grounding`.

        Args:
            name: The argument (its name chooses the related keys).
            value: Its value.
            via: The filter that chose it, if any.
            extra: Other sources, by label: ``schema`` (the values the argument's
                schema names) and ``plan`` (the step's literals); a value found there
                is grounded at that label.
        """
        paths: list[str] = []
        missing: list[str] = []
        free: list[str] = []
        self._ground(name, plain(value), paths, missing, free, extra or {})
        status = "ungrounded" if missing else "free" if free else "grounded"
        return Grounding(status, tuple(dict.fromkeys(paths)), tuple(missing), tuple(free), via)

    @staticmethod
    def _extra(value: Any, extra: Mapping[str, Sequence[Any]]) -> str | None:
        key = normalize(value)
        for label, sources in extra.items():
            for source in sources:
                if normalize(source) == key:
                    return label
                if (isinstance(source, str) and isinstance(value, str | int | float)
                        and not isinstance(value, bool)):
                    needle = " ".join(str(value).split()).casefold()
                    text = " ".join(source.split()).casefold()
                    if needle and re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", text):
                        return label
        return None

    def _ground(self, name: str, value: Any, paths: list[str], missing: list[str],
                free: list[str], extra: Mapping[str, Sequence[Any]]) -> None:
        hits = self.find(value)
        if hits:
            exact = [o for o, _ in hits if not o.in_text] or [o for o, _ in hits]
            paths.extend(str(o) for o in exact[:3])
            return
        label = self._extra(value, extra)
        if label is not None:
            paths.append(label)
            return
        if isinstance(value, Mapping):
            for v in value.values():
                self._ground(name, v, paths, missing, free, extra)
            return
        if isinstance(value, list):
            for v in value:
                self._ground(name, v, paths, missing, free, extra)
            return
        (missing if self.held(name, value) else free).append(_compact(value))

    def satisfying(self, value: Any, literals: Sequence[HintLiteral]) -> bool:
        """Whether ``value`` (or every element of it) comes from a node carrying ``literals``.

        A node carries a literal when the node itself equals it (or, for a value found
        in text, the text holds it), or a dict on its way from the output's root (its
        item, any ancestor item) has a field equal to it (the literal's key, or any
        field for a literal without a key).
        """
        value = plain(value)
        hits = self.find(value)
        if hits:
            return any(all(_carries(n, lit, occ) for lit in literals) for occ, n in hits)
        if isinstance(value, list) and value:
            return all(self.satisfying(v, literals) for v in value)
        return False

    def satisfying_values(self, literals: Sequence[HintLiteral]) -> list[tuple[Any, Occurrence]]:
        """Scalar values of the outputs that come from nodes carrying ``literals``."""
        out: list[tuple[Any, Occurrence]] = []
        for n in self.scalars():
            if all(_carries(n, lit) for lit in literals):
                out.append((n.value, Occurrence(n.step, n.path)))
        return out


def _carries(node: _Node, literal: HintLiteral, occ: Occurrence | None = None) -> bool:
    if literal.key is None and literal.matches(node.value):
        return True
    if occ is not None and occ.in_text and isinstance(node.value, str):
        needle = " ".join(literal.value.split()).casefold()
        if needle and needle in " ".join(node.value.split()).casefold():
            return True
    containers: Iterable[Any] = (*node.chain, node.value)
    for c in containers:
        if not isinstance(c, Mapping):
            continue
        for k, v in c.items():
            if literal.key is not None and key_form(str(k)) != key_form(literal.key):
                continue
            if literal.matches(v):
                return True
    return False
