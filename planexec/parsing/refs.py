"""The reference grammar: how a plan points at an earlier step's result.

Forms (``N`` is a step number, ``PATH`` an optional path)::

    <step_N PATH>          canonical, every dialect
    {step_N PATH}          every dialect
    {{step_N PATH}}        every dialect (spaces inside the braces are allowed)
    #EN PATH               rewoo only
    $N PATH   ${N} PATH    llmcompiler only

``PATH`` is a sequence of ``.name`` (an identifier), ``[0]`` (an integer, may be
negative), ``["key"]`` (a JSON string) or ``['key']``. Example: ``<step_2.items[0].id>``,
``{step_5.fm_to_sensors["excess purge"]}``, ``{step_1[0]}``, ``#E1.assets[0].type``,
``$1["asset id"]``. Inside ``<>``/``{}`` spaces may separate the elements; after the
bare dialect forms the path must follow with no space, and a ``.`` starts an element only
when an identifier follows it at once: ``given #E1.`` ends a sentence, ``#E1. The`` is
prose, ``#E1.The`` is the path ``("The",)`` (keys may be capitalised; a wrong key fails
loudly at run time, it is never guessed). ``$5.00`` is no reference.

Text right after a reference that looks like a path but is not part of it
(``{step_1}.name``, ``<step_2>[0]``, ``#E1[name]``) stays literal text; the parsers
report it with ``REF_SUFFIX_TEXT`` (see `path_like_suffixes`).

*Hinted* references are brace- or angle-wrapped texts the grammar cannot follow but that
name a step: ``{step_1_selected_site}``, ``{asset_id_for_Chiller_6_from_step_2}``,
``{step_1.find(name='X').id}``, ``<Name from #E1>`` (rewoo). The rule: the text between
``{`` ``}``, ``{{`` ``}}`` or ``<`` ``>`` is at most 200 characters on one line, holds no
braces (and no ``<``/``>`` for the angle form), does not look like a JSON object (does
not start with a quote, has no ``"key":``), and mentions a step: ``step`` followed by an
optional ``_``/space and a number (not preceded by a letter), or ``#EN`` in rewoo, or
``$N``/``${N}`` in llmcompiler. The first mention gives the step; the inner text is the
hint. ``{current_date_time()}`` mentions no step, so it is not a reference, but
`contains_placeholder` flags it.

Text that *begins* like a reference but is not one (``"<step_1.id"``, ``"{{step_1.id}"``,
``"{step_1!r:>{10**10}}"``, ``"{step_1.id}}"``) is *malformed*: `malformed_refs` finds it,
the parsers report it with ``REF_MALFORMED`` and the executor refuses to pass it to a tool
unless the argument's schema marks it as free text (`is_free_text`).

*Free-text placeholders* (``<chiller_asset_id>``, ``<output from Task5>``,
``{the asset id}``) are no reference of this grammar; `free_placeholders` turns them into
hinted references for the hashstep parser (see its docstring for the grammar).

A string that is exactly one reference (surrounding whitespace ignored) becomes a
whole-value `Ref`; a string with references inside longer text becomes a `Template`.
Nothing in a reference is ever evaluated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from planexec._text import clip
from planexec.plan import PathElem, Ref, Template, format_path

__all__ = [
    "DIALECTS",
    "FREE_TEXT_KEY",
    "HINTED_BY",
    "NO_STEP",
    "contains_placeholder",
    "find_malformed",
    "find_refs",
    "free_placeholders",
    "free_step_mention",
    "is_free_placeholder",
    "ident_ref",
    "is_free_text",
    "iter_ref_spans",
    "malformed_refs",
    "parse_path",
    "parse_ref",
    "path_like_suffixes",
    "ref_at",
    "step_number",
]

DIALECTS = ("hashstep", "rewoo", "llmcompiler")
"""The dialects whose reference forms this module knows."""

MAX_STEP_DIGITS = 9
"""The most digits a step number may have (longer ones are no step numbers)."""
MAX_INDEX_DIGITS = 18
"""The most digits a path index may have (``[123]``; longer ones make no path)."""


def step_number(digits: str) -> int | None:
    """Read a step number written in decimal digits.

    Args:
        digits: the digits as written (``"12"``).

    Returns:
        The number, or None when it has more than `MAX_STEP_DIGITS` digits: such a
        number names no step (and Python would refuse to read one of thousands of
        digits, so it is never converted).
    """
    return int(digits) if len(digits) <= MAX_STEP_DIGITS else None

_PATH = (
    r"(?:\s*\.\s*[^\W\d]\w*"
    r"|\s*\[\s*-?\d+\s*\]"
    r"|\s*\[\s*\"(?:[^\"\\\n]|\\.)*\"\s*\]"
    r"|\s*\[\s*'(?:[^'\\\n]|\\.)*'\s*\])*"
)
_STEP = r"[Ss][Tt][Ee][Pp]_(\d+)"
_CANON_RE = re.compile(r"<\s*" + _STEP + r"(" + _PATH + r")\s*>")
_DOUBLE_RE = re.compile(r"\{\{\s*" + _STEP + r"(" + _PATH + r")\s*\}\}")
_SINGLE_RE = re.compile(r"\{\s*" + _STEP + r"(" + _PATH + r")\s*\}")
# After the bare dialect forms (#EN, $N, ${N}) the path follows with no space, so that
# prose such as "given #E1. The" or "#E1 [note]" is not read as a path.
_DIALECT_PATH = (
    r"(?:\.[^\W\d]\w*"
    r"|\[\s*-?\d+\s*\]"
    r"|\[\s*\"(?:[^\"\\\n]|\\.)*\"\s*\]"
    r"|\[\s*'(?:[^'\\\n]|\\.)*'\s*\])*"
)
_REWOO_RE = re.compile(r"#E(\d+)(?!\w)(" + _DIALECT_PATH + r")")
_LLMC_BRACE_RE = re.compile(r"\$\{\s*(\d+)\s*\}(" + _DIALECT_PATH + r")")
_LLMC_RE = re.compile(r"\$(\d+)(?![\w]|\.\d)(" + _DIALECT_PATH + r")")
_SUFFIX_RE = re.compile(r"\.[^\W\d]\w*|\[[^\[\]\n]{0,100}\]")

_HINT_DOUBLE_RE = re.compile(r"\{\{([^{}\n]{1,200})\}\}")
_HINT_SINGLE_RE = re.compile(r"\{([^{}\n]{1,200})\}")
_HINT_ANGLE_RE = re.compile(r"<([^<>{}\n]{1,200})>")
_HINT_SQUARE_RE = re.compile(r"\[([^\[\]{}<>\"'\n]{1,200})\]")
# A whole string that is an identifier naming a step: ASSET_ID_FROM_STEP_1, step_2,
# site_of_step3, step1_site. "SOP_STEP_3" (no linking word) is ordinary data.
_IDENT_STEP_RE = re.compile(
    r"^(?:[A-Za-z][A-Za-z0-9]*_)*?(?:from|of|in|for|at|by)_step_?(\d+)(?:_[A-Za-z0-9]+)*$"
    r"|^step_?(\d+)(?:_[A-Za-z0-9]+)*$",
    re.IGNORECASE,
)
# A whole string that is one angle-bracket placeholder naming no step: "<site_name>",
# "<asset id>". Longer text with a tag in it ("a <b> tag") is ordinary text.
_ANGLE_PLACEHOLDER_RE = re.compile(r"^\s*<\s*[A-Za-z_][\w .\-]{0,80}>\s*$")
_JSONISH_RE = re.compile(r"^\s*[\"']|[\"']\s*:")

_MENTION_STEP_RE = re.compile(r"(?<![A-Za-z])[Ss][Tt][Ee][Pp][_ ]?(\d+)(?!\d)")
_MENTION_REWOO_RE = re.compile(r"#E(\d+)(?!\w)")
_MENTION_LLMC_RE = re.compile(r"\$\{?(\d+)\}?(?!\d)")

_BLANK_TO_END_RE = re.compile(r"\s*\Z")
_PATH_ELEM_RE = re.compile(
    r"\s*\.\s*(?P<name>[^\W\d]\w*)"
    r"|\s*\[\s*(?P<index>-?\d+)\s*\]"
    r"|\s*\[\s*\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"\s*\]"
    r"|\s*\[\s*'(?P<sq>(?:[^'\\\n]|\\.)*)'\s*\]"
)

_LOOSE_DOUBLE_RE = re.compile(r"\{\{\s*[^\W\d][^{}\n]{0,200}\}\}")
# Braces or angle brackets around words that name a step in a looser way than the
# grammar reads (``{step-1}``, ``{step_ 2}``, ``{#S1}``, ``<Task-3 output>``); no quotes
# inside, so JSON text is not one.
_LOOSE_STEP = (
    r"[^{}<>\"'\n]{0,200}?(?<![A-Za-z])(?:step|task|#s)[\s_#\-]{0,2}\d[^{}<>\"'\n]{0,200}?"
)
_LOOSE_STEP_RE = re.compile(r"\{" + _LOOSE_STEP + r"\}|<" + _LOOSE_STEP + ">", re.IGNORECASE)
_LOOSE_SINGLE_RE = re.compile(
    r"\{\s*[^\W\d][\w.]*(?:\([^{}\n]{0,200}\)[\w.]*)?(?:\[[^{}\n\]]{0,100}\][\w.]*)*\s*\}"
)
# Text that begins like a reference: an opening ``<``, ``{`` or ``{{`` and a step number
# (``<step_1``, ``{ step_2``, ``{{step3``); in rewoo also ``#E`` with a number too long
# to be a step number; in llmcompiler ``${1`` and ``$`` with such a number.
_MALFORMED_START = r"\{\{?\s*step[_ ]?\d|<step[_ ]?\d"
_TOO_LONG = r"\d{" + str(MAX_STEP_DIGITS + 1) + "}"
_MALFORMED_STARTS = {
    "hashstep": re.compile(_MALFORMED_START, re.IGNORECASE),
    "rewoo": re.compile(_MALFORMED_START + r"|#E" + _TOO_LONG, re.IGNORECASE),
    "llmcompiler": re.compile(
        _MALFORMED_START + r"|\$\{\s*\d|\$" + _TOO_LONG, re.IGNORECASE
    ),
}
_STARTS = {"hashstep": "<{[", "rewoo": "<{[#", "llmcompiler": "<{[$"}
_START_RES = {k: re.compile("[" + re.escape(v) + "]") for k, v in _STARTS.items()}


def _check_dialect(dialect: str) -> str:
    return dialect if dialect in _STARTS else "hashstep"


def parse_path(text: str) -> tuple[PathElem, ...] | None:
    """Parse a reference path such as ``.items[0]["key with spaces"]``.

    Args:
        text: the path text, possibly empty.

    Returns:
        The path elements, or None when the text is not a valid path.
    """
    out: list[PathElem] = []
    pos = 0
    while pos < len(text):
        if _BLANK_TO_END_RE.match(text, pos):  # not text[pos:]: no copy per element
            break
        m = _PATH_ELEM_RE.match(text, pos)
        if m is None:
            return None
        if m.group("name") is not None:
            out.append(m.group("name"))
        elif m.group("index") is not None:
            if len(m.group("index").lstrip("-")) > MAX_INDEX_DIGITS:
                return None
            out.append(int(m.group("index")))
        elif m.group("dq") is not None:
            try:
                out.append(str(json.loads('"' + m.group("dq") + '"')))
            except ValueError:
                out.append(m.group("dq"))
        else:
            out.append(re.sub(r"\\(.)", r"\1", m.group("sq")))
        pos = m.end()
    return tuple(out)


def _mention(inner: str, dialect: str) -> int | None:
    found: list[tuple[int, int]] = []
    regexes = [_MENTION_STEP_RE]
    if dialect == "rewoo":
        regexes.append(_MENTION_REWOO_RE)
    elif dialect == "llmcompiler":
        regexes.append(_MENTION_LLMC_RE)
    for rx in regexes:
        m = rx.search(inner)
        if m is not None:
            step = step_number(m.group(1))
            if step is not None:
                found.append((m.start(), step))
    if not found:
        return None
    return min(found)[1]


def _match_at(text: str, pos: int, dialect: str) -> tuple[Ref, int] | None:
    """Try to read one reference starting exactly at ``pos``."""
    c = text[pos]
    if c == "<":
        m = _CANON_RE.match(text, pos)
        plain = _plain(m, text) if m is not None else None
        if plain is not None:
            return plain
        h = _HINT_ANGLE_RE.match(text, pos)
        if h is not None and not _JSONISH_RE.search(h.group(1)):
            step = _mention(h.group(1), dialect)
            if step is not None:
                return Ref(step=step, hint=h.group(1).strip(), raw=h.group(0)), h.end()
        return None
    if c == "{":
        for rx in (_DOUBLE_RE, _SINGLE_RE):
            m = rx.match(text, pos)
            plain = _plain(m, text) if m is not None else None
            if plain is not None:
                return plain
        for hrx in (_HINT_DOUBLE_RE, _HINT_SINGLE_RE):
            h = hrx.match(text, pos)
            if h is not None and not _JSONISH_RE.search(h.group(1)):
                step = _mention(h.group(1), dialect)
                if step is not None:
                    return Ref(step=step, hint=h.group(1).strip(), raw=h.group(0)), h.end()
        return None
    if c == "[":
        h = _HINT_SQUARE_RE.match(text, pos)
        if h is not None:
            step = _mention(h.group(1), dialect)
            if step is not None:
                return Ref(step=step, hint=h.group(1).strip(), raw=h.group(0)), h.end()
        return None
    if c == "#" and dialect == "rewoo":
        m = _REWOO_RE.match(text, pos)
        if m is not None:
            return _plain(m, text)
        return None
    if c == "$" and dialect == "llmcompiler":
        m = _LLMC_BRACE_RE.match(text, pos) or _LLMC_RE.match(text, pos)
        if m is not None:
            return _plain(m, text)
    return None


def ref_at(text: str, pos: int, dialect: str = "hashstep") -> tuple[Ref, int] | None:
    """Read one reference starting exactly at ``text[pos]``, with its path.

    Args:
        text: any string.
        pos: where the reference must start (``<``, ``{``, ``#`` or ``$``).
        dialect: ``hashstep``, ``rewoo`` or ``llmcompiler``.

    Returns:
        ``(ref, end)`` with ``end`` just after the reference, or None.
    """
    if not 0 <= pos < len(text):
        return None
    return _match_at(text, pos, _check_dialect(dialect))


def _plain(m: re.Match[str], text: str) -> tuple[Ref, int] | None:
    """The plain reference matched by ``m`` and its end.

    None when its step number or a path index is too long to be one
    (`MAX_STEP_DIGITS`, `MAX_INDEX_DIGITS`).
    """
    step = step_number(m.group(1))
    path = parse_path(m.group(2))
    if step is None or path is None:
        return None
    return Ref(step=step, path=path, raw=m.group(0)), m.end()


def iter_ref_spans(text: str, dialect: str = "hashstep") -> list[tuple[int, int, Ref]]:
    """Find every reference in a string.

    Args:
        text: any string.
        dialect: ``hashstep``, ``rewoo`` or ``llmcompiler`` (unknown names act as
            ``hashstep``).

    Returns:
        ``(start, end, ref)`` for each reference, left to right, not overlapping. The
        refs have ``whole_value=True`` and an empty location; `find_refs` sets both.
    """
    dialect = _check_dialect(dialect)
    starts = _START_RES[dialect]
    out: list[tuple[int, int, Ref]] = []
    pos = 0
    n = len(text)
    while pos < n:
        hit = starts.search(text, pos)
        if hit is None:
            break
        nxt = hit.start()
        got = _match_at(text, nxt, dialect)
        if got is None:
            pos = nxt + 1
            continue
        ref, end = got
        out.append((nxt, end, ref))
        pos = end
    return out


def parse_ref(text: str, dialect: str = "hashstep") -> Ref | None:
    """Read a string that is exactly one reference (surrounding whitespace ignored).

    Args:
        text: the candidate text, e.g. ``"{step_2.items[0]}"``.
        dialect: the plan dialect; ``#EN`` needs ``rewoo``, ``$N`` needs ``llmcompiler``.

    Returns:
        The whole-value `Ref`, or None if the text is not exactly one reference.
    """
    if not isinstance(text, str):
        return None
    stripped = text.strip()
    if not stripped:
        return None
    got = _match_at(stripped, 0, _check_dialect(dialect))
    if got is None or got[1] != len(stripped):
        return None
    return got[0]


def _child(location: str, key: Any) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{location}[{key}]"
    return location + format_path((str(key),))


def ident_ref(text: str) -> Ref | None:
    """Read a whole string that is an identifier naming a step as a hinted reference.

    ``"ASSET_ID_FROM_STEP_1"``, ``"site_from_step_2"``, ``"step_3"``, ``"step1_site"``:
    placeholders planners write in capitals or snake case. The identifier must be the
    whole string (surrounding whitespace ignored), and the step must be its first word
    or follow a linking word (``from``, ``of``, ``in``, ``for``, ``at``, ``by``), so
    ordinary codes such as ``"SOP_STEP_3"`` or ``"Chiller 6"`` are not references.

    Args:
        text: any string.

    Returns:
        A hinted `Ref` (``hint`` = the identifier), or None.
    """
    stripped = text.strip()
    m = _IDENT_STEP_RE.match(stripped)
    if m is None:
        return None
    step = step_number(m.group(1) or m.group(2))
    if step is None:
        return None
    return Ref(step=step, hint=stripped, raw=stripped)


def _refs_in_string(text: str, dialect: str, location: str) -> Any:
    ident = ident_ref(text)
    if ident is not None:
        return Ref(ident.step, (), ident.hint, ident.raw, True, location)
    spans = iter_ref_spans(text, dialect)
    if not spans:
        return text
    if len(spans) == 1:
        start, end, ref = spans[0]
        if not text[:start].strip() and not text[end:].strip():
            return Ref(ref.step, ref.path, ref.hint, ref.raw, True, location)
    parts: list[str | Ref] = []
    pos = 0
    for start, end, ref in spans:
        if start > pos:
            parts.append(text[pos:start])
        parts.append(Ref(ref.step, ref.path, ref.hint, ref.raw, False, location))
        pos = end
    if pos < len(text):
        parts.append(text[pos:])
    return Template(tuple(parts))


def find_refs(value: Any, *, dialect: str = "hashstep", location: str = "args") -> Any:
    r"""Return ``value`` with every reference in its strings turned into `Ref`/`Template`.

    Dicts and lists (and tuples) are rebuilt recursively; dict keys are left alone. A
    string that is exactly one reference becomes a whole-value `Ref` (it will receive the
    referenced value with its type); a string with references inside longer text becomes
    a `Template` (interpolated as text). That covers escaped JSON inside a string, e.g.
    ``"[{\"tonnage\": {step_4}}]"``: the argument is a string, so its references
    are embedded. Values that are already `Ref`/`Template` are returned as they are.

    Args:
        value: a nested value (JSON data).
        dialect: ``hashstep``, ``rewoo`` or ``llmcompiler``.
        location: where ``value`` sits, e.g. ``"args"`` or ``"positional[0]"``; each
            `Ref` gets the location of the string it was found in, e.g.
            ``"args.filters[1].asset_id"``.

    Returns:
        The value with references; the input is not modified.
    """
    if isinstance(value, Ref | Template):
        return value
    if isinstance(value, str):
        return _refs_in_string(value, dialect, location)
    if isinstance(value, Mapping):
        return {
            k: find_refs(v, dialect=dialect, location=_child(location, k))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            find_refs(v, dialect=dialect, location=f"{location}[{i}]")
            for i, v in enumerate(value)
        ]
    if isinstance(value, tuple):
        return tuple(
            find_refs(v, dialect=dialect, location=f"{location}[{i}]")
            for i, v in enumerate(value)
        )
    return value


HINTED_BY = "the resolver's filter tier reads it when one value fits, else the LLM fallback"
"""How a hinted reference gets its value, for parse diagnostics (``REF_HINTED``)."""

NO_STEP = -1
"""The step of a free-text placeholder that names no step in a step with no dependency.

No plan step has it (step numbers are written with digits only), so the reference is a
missing one:
`check_plan` reports ``REF_MISSING`` and the executor fails the step with
``MISSING_REFERENCE``; the tool is never called with the placeholder.
"""

_FREE_INNER = r"[A-Za-z][\w .,'#\-]{0,198}"
_FREE_ANGLE_RE = re.compile(r"<(" + _FREE_INNER + r")>")
_FREE_WHOLE_RE = re.compile(
    r"^\s*(?:<(" + _FREE_INNER + r")>|\{\{?\s*(" + _FREE_INNER + r")\s*\}\}?)\s*$"
)
_FREE_MENTION_RE = re.compile(r"(?<![A-Za-z])(?:task|step|#s)[ _#]?(\d{1,9})(?!\d)", re.I)
_FREE_NOT_RE = re.compile(r"^step[_ ]?\d", re.I)
_HTML_TAGS = frozenset(
    "a abbr b blockquote body br caption code dd div dl dt em font h1 h2 h3 h4 h5 h6 head "
    "hr html i img kbd li ol p pre q s small span strong sub sup table tbody td th thead "
    "title tr tt u ul".split()
)


def free_step_mention(text: str) -> int | None:
    """The step a free-text placeholder's words name (``Task5``, ``step 2``, ``#S3``), if any.

    Args:
        text: the words of the placeholder.

    Returns:
        The first step named, or None.
    """
    m = _FREE_MENTION_RE.search(text)
    return int(m.group(1)) if m is not None else None


def _free_ref(raw: str, inner: str, deps: tuple[int, ...], whole: bool, location: str) -> Ref:
    hint = inner.strip()
    named = free_step_mention(hint)
    step = named if named is not None else (deps[0] if deps else NO_STEP)
    return Ref(step=step, hint=hint, raw=raw, whole_value=whole, location=location)


def _free_in_text(text: str, deps: tuple[int, ...], location: str) -> list[str | Ref]:
    """Split ``text`` around embedded free-text placeholders (``<chiller asset id>``)."""
    parts: list[str | Ref] = []
    pos = 0
    for m in _FREE_ANGLE_RE.finditer(text):
        inner = m.group(1)
        before = text[m.start() - 1] if m.start() else " "
        after = text[m.end()] if m.end() < len(text) else " "
        if (
            inner != inner.strip()
            or not ("_" in inner or " " in inner)
            or before.isalnum()
            or after.isalnum()
            or _FREE_NOT_RE.match(inner)
        ):
            continue
        if m.start() > pos:
            parts.append(text[pos : m.start()])
        parts.append(_free_ref(m.group(0), inner, deps, False, location))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def free_placeholders(
    value: Any, deps: tuple[int, ...] = (), *, location: str = "args"
) -> tuple[Any, list[Ref]]:
    """Turn free-text placeholders in a `find_refs` result into hinted references.

    Planners write placeholders in words: ``<chiller_asset_id>``, ``<output from Task5>``,
    ``{the asset id}``. Such text is never a value for a tool. The grammar (applied to
    strings the reference grammar left as text):

    - a **whole** string ``<words>``, ``{words}`` or ``{{words}}``: ``words`` starts with
      a letter and holds only letters, digits, ``_``, spaces, ``.``, ``,``, ``'``, ``#``,
      ``-`` (at most 199 characters; no quotes, brackets, ``=`` or ``/``, so no HTML),
      and is not an HTML tag name (``"<br>"``, ``"<b>"`` stay text);
    - **inside longer text** only the angle form, and only when the words contain ``_``
      or a space, start and end right inside the brackets, and the brackets are not
      glued to a letter or digit outside: ``"id of <chiller asset id>"`` is one;
      ``"a <b> tag"``, ``"a < b"``, ``"x<y and z>w"`` and ``"</b>"`` are ordinary text.
      Braces inside longer text (``"Hello {name}"``) are left alone (still caught by
      `contains_placeholder`).

    Text that begins like a plain reference (``<step_1234567890>``) is left to
    `malformed_refs`. The resulting `Ref` is hinted (``hint`` = the words, ``raw`` = the
    text): when the words name a step (``Task5``, ``step 2``, ``#S3``) it refers to that
    step; otherwise to the first of ``deps`` (the step's declared dependencies, all of
    which the resolver shows the LLM fallback), or to `NO_STEP` when there is none.

    Args:
        value: a `find_refs` result.
        deps: the step's declared dependencies, in order.
        location: where ``value`` sits (``"args"``, ``"positional[0]"``).

    Returns:
        ``(value, refs)``: the value with the placeholders replaced, and the new refs.
    """
    found: list[Ref] = []

    def walk(v: Any, loc: str) -> Any:
        if isinstance(v, Ref):
            return v
        if isinstance(v, str):
            w = _FREE_WHOLE_RE.match(v)
            inner = (w.group(1) or w.group(2)) if w is not None else None
            if (
                inner is not None
                and not _FREE_NOT_RE.match(inner)
                and inner.strip().lower() not in _HTML_TAGS
            ):
                ref = _free_ref(v.strip(), inner, deps, True, loc)
                found.append(ref)
                return ref
            parts = _free_in_text(v, deps, loc)
            if any(isinstance(p, Ref) for p in parts):
                found.extend(p for p in parts if isinstance(p, Ref))
                return Template(tuple(parts))
            return v
        if isinstance(v, Template):
            new: list[str | Ref] = []
            for part in v.parts:
                if isinstance(part, str):
                    split = _free_in_text(part, deps, loc)
                    found.extend(p for p in split if isinstance(p, Ref))
                    new.extend(split)
                else:
                    new.append(part)
            return Template(tuple(new))
        if isinstance(v, Mapping):
            return {k: walk(x, _child(loc, k)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{loc}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return tuple(walk(x, f"{loc}[{i}]") for i, x in enumerate(v))
        return v

    return walk(value, location), found


def is_free_placeholder(ref: Ref) -> bool:
    """Whether a hinted `Ref` came from a free-text placeholder (see `free_placeholders`).

    True for ``<chiller_asset_id>`` or ``<output from Task5>``: text the reference grammar
    (plain, hinted, identifier forms) does not read by itself.

    Args:
        ref: any reference.

    Returns:
        True when ``ref`` is hinted and its raw text is no reference of the grammar.
    """
    if not ref.is_hinted or not ref.raw:
        return False
    return not any(parse_ref(ref.raw, d) for d in DIALECTS) and ident_ref(ref.raw) is None


def path_like_suffixes(value: Any) -> list[tuple[Ref, str]]:
    """Find text right after a reference that looks like a path but is not part of it.

    ``"{step_1}.name"`` is the reference ``{step_1}`` followed by the literal text
    ``.name``: the brace closed the reference, so the tool would get the whole result of
    step 1 as text followed by ``.name``. Such text is kept as written (it may be real
    text, e.g. ``report_{step_1}.csv``), never guessed into a path; the parsers report
    each occurrence with ``REF_SUFFIX_TEXT``. Looks like a path: ``.`` followed at once by
    an identifier, or a bracketed ``[...]`` (``<step_2>[0]``, ``#E1[name]``).

    Args:
        value: a value returned by `find_refs` (nested; `Template` parts are searched).

    Returns:
        ``(ref, suffix)`` for each reference followed by path-like text, in order.
    """
    out: list[tuple[Ref, str]] = []
    if isinstance(value, Template):
        parts = value.parts
        for i, part in enumerate(parts[:-1]):
            nxt = parts[i + 1]
            if isinstance(part, Ref) and isinstance(nxt, str):
                m = _SUFFIX_RE.match(nxt)
                if m is not None:
                    out.append((part, m.group(0)))
    elif isinstance(value, Mapping):
        for v in value.values():
            out.extend(path_like_suffixes(v))
    elif isinstance(value, list | tuple):
        for v in value:
            out.extend(path_like_suffixes(v))
    return out


FREE_TEXT_KEY = "x-planexec-free-text"
"""The JSON-schema keyword that marks a tool argument as free text (see `is_free_text`)."""


def _excerpt(text: str, start: int, end: int | None = None) -> str:
    """The text from ``start`` (to ``end``, else to the end of its line), cut at 40."""
    stop = text.find("\n", start)
    stop = len(text) if stop < 0 else stop
    if end is not None:
        stop = min(stop, end) if end > start else stop
    piece = text[start:stop]
    return clip(piece, 40)


def malformed_refs(text: str, dialect: str = "hashstep") -> list[tuple[int, str]]:
    r"""Find text that begins like a reference but is not one.

    Two shapes are malformed:

    - an opening ``<``, ``{`` or ``{{`` directly followed by a step (``step_1``,
      ``step 1``, ``step1``; inside braces spaces may come first; in llmcompiler also
      ``${1``) where no reference starts: ``"<step_1.id"`` (no ``>``), ``"{step_1.id"``,
      ``"{{step_1.id}"`` (one closing brace: the inner ``{step_1.id}`` would resolve and
      the stray ``{`` be kept), ``"{step_1!r:>{10**10}}"`` (a format spec, braces inside),
      ``"<step_99999999999>"`` (a step number has at most `MAX_STEP_DIGITS` digits); in
      rewoo also ``#E`` and in llmcompiler ``$`` followed by such a long number;
    - a ``}`` right after a brace reference that closes no ``{`` of the surrounding text:
      ``"{step_1.id}}"``. In JSON text the brace may close an object
      (``"[{\"n\": {step_4}}]"``): that is not malformed.

    Text that does not name a step right after the bracket (``{name}``, ``a < step 2``,
    ``[step 1``) is not reported here (`contains_placeholder` covers brace
    placeholders). The scan is linear in the length of the text.

    Args:
        text: any string.
        dialect: ``hashstep``, ``rewoo`` or ``llmcompiler``.

    Returns:
        ``(position, excerpt)`` for each malformed spot, left to right; the excerpt is
        the text from the opening bracket (at most 40 characters, one line).
    """
    dialect = _check_dialect(dialect)
    if "<" not in text and "{" not in text and "#" not in text and "$" not in text:
        return []
    starts = _MALFORMED_STARTS[dialect]
    spans = iter_ref_spans(text, dialect)
    out: list[tuple[int, str]] = []
    i = 0  # the first span that does not end before the candidate
    for m in starts.finditer(text):
        pos = m.start()
        while i < len(spans) and spans[i][1] <= pos:
            i += 1
        if i < len(spans) and spans[i][0] <= pos:
            continue  # inside (or at the start of) a reference
        out.append((pos, _excerpt(text, pos)))
    depth = 0  # unmatched "{" in the text outside references
    prev = 0
    for start, end, ref in spans:
        for ch in text[prev:start]:
            if ch == "{":
                depth += 1
            elif ch == "}" and depth:
                depth -= 1
        prev = end
        if text.startswith("}", end) and (ref.raw or "").startswith("{") and depth == 0:
            out.append((start, _excerpt(text, start, end + 1)))
    out.sort(key=lambda item: item[0])
    return out


def _malformed_text(value: str | Template) -> str:
    if isinstance(value, str):
        return value
    return "".join(p if isinstance(p, str) else (p.raw or p.canonical) for p in value.parts)


_NOT_TEXT = frozenset({Ref, int, bool, float, type(None)})
"""Values `find_malformed` finds nothing in: no text was written there."""


def find_malformed(
    value: Any, *, dialect: str = "hashstep", location: str = "args"
) -> list[tuple[str, str]]:
    """Find malformed references (`malformed_refs`) in a `find_refs` result.

    Strings are searched as they are; a `Template` is searched as the text it was read
    from (so ``"{{step_1.id}"``, read as ``"{"`` plus a reference, is found). A
    whole-value `Ref` is a reference, never malformed. Dict keys are not searched.

    Args:
        value: a nested value, as returned by `find_refs` (plain data works too).
        dialect: the plan's dialect.
        location: where ``value`` sits, e.g. ``"args"``.

    Returns:
        ``(location, excerpt)`` for each malformed spot, e.g.
        ``("args.asset_id", "{{step_1.id}")``.
    """
    out: list[tuple[str, str]] = []
    if type(value) in _NOT_TEXT:
        return out  # nothing written as text
    if isinstance(value, str | Template):
        out.extend((location, ex) for _, ex in malformed_refs(_malformed_text(value), dialect))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if type(v) not in _NOT_TEXT:  # (no location built for what holds no text)
                out.extend(find_malformed(v, dialect=dialect, location=_child(location, k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if type(v) not in _NOT_TEXT:
                out.extend(find_malformed(v, dialect=dialect, location=f"{location}[{i}]"))
    return out


def is_free_text(prop: Any) -> bool:
    """Tell whether a tool argument's JSON schema marks it as free text.

    A free-text argument (a message body, a note, code) may legitimately hold text that
    begins like a reference (``"<step_1"``): the executor passes its malformed references
    as written instead of refusing the call (the parser still warns ``REF_MALFORMED``).
    Mark one with the keyword ``"x-planexec-free-text": true`` on the property; with
    pydantic, ``Field(json_schema_extra={"x-planexec-free-text": True})``. Nothing else
    marks free text (not ``format``, not the type): references that do resolve are still
    resolved in a free-text argument, and unresolved ones are still refused.

    Args:
        prop: the argument's property in the tool's JSON schema
            (``spec.json_schema["properties"][name]``), or None.

    Returns:
        True only when the property holds ``"x-planexec-free-text": true``.
    """
    return isinstance(prop, Mapping) and prop.get(FREE_TEXT_KEY) is True


# Every form `_string_has_placeholder` flags holds one of these (a reference or
# placeholder opens with ``<``, ``{``, ``#`` or ``$``; an identifier names a step): text
# without any is ordinary data, known with one search (a test holds the two to agree).
_PLACEHOLDER_CHANCE_RE = re.compile(r"[<{#$]|step", re.IGNORECASE)


def _string_has_placeholder(text: str, dialect: str | None) -> bool:
    if _PLACEHOLDER_CHANCE_RE.search(text) is None:
        return False
    if iter_ref_spans(text, dialect or "hashstep"):
        return True
    if ident_ref(text) is not None or _ANGLE_PLACEHOLDER_RE.match(text):
        return True
    if "{" in text and (_LOOSE_DOUBLE_RE.search(text) or _LOOSE_SINGLE_RE.search(text)):
        return True
    return _LOOSE_STEP_RE.search(text) is not None


def contains_placeholder(value: Any, *, dialect: str | None = None) -> bool:
    """Tell whether a (resolved) value still holds something that looks like a reference.

    The executor calls this on resolved arguments so that a tool is never called with
    an unresolved reference. It is deliberately eager. It flags:

    - any `Ref` or `Template` object;
    - every reference form valid in every dialect (``<step_1>``, ``{step_2}``,
      ``{{step_3}}``, with paths) and hinted references (``{step_1_selected_site}``);
    - brace placeholders without a step number: ``{{anything}}`` and ``{name}``,
      ``{a.b}``, ``{current_date_time()}`` (an identifier, dotted name or call inside
      single braces);
    - braces or angle brackets around words naming a step loosely, also inside longer
      text: ``{step-1}``, ``{step_ 2}``, ``{#S1}``, ``<Task-3 output>``;
    - ``#EN`` only when ``dialect="rewoo"`` and ``$N``/``${N}`` only when
      ``dialect="llmcompiler"``: elsewhere they are ordinary text (``$5`` is a price,
      ``#E1`` may be an issue number).

    JSON text (``{"a": 1}``) is not flagged. A real value that contains a template such as
    ``"Hello {name}"`` is flagged: false positives are preferred to a tool called with an
    unresolved placeholder.

    Args:
        value: a nested value.
        dialect: the plan's dialect, or None for the forms common to every dialect.

    Returns:
        True if any string in the value looks like a placeholder.
    """
    if type(value) is str:  # the common case first
        return _string_has_placeholder(value, dialect)
    if isinstance(value, Ref | Template):
        return True
    if isinstance(value, str):
        return _string_has_placeholder(value, dialect)
    if isinstance(value, Mapping):
        return any(
            contains_placeholder(k, dialect=dialect) or contains_placeholder(v, dialect=dialect)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset):
        return any(contains_placeholder(v, dialect=dialect) for v in value)
    return False
