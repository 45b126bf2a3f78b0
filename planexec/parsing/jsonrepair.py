r"""Tolerant JSON for ``#Args`` and LLM replies.

`repair_json` tries strict JSON first, then reads the text with a small hand-written
tokenizer that accepts what planners actually write, naming every repair it made. It
never evaluates anything (no ``eval``, no ``ast.literal_eval``), and no text makes it
raise: what it cannot read is a result with an ``error`` (an exception is a bug).

Repairs (the names used in `RepairResult.repairs`):

- ``backticks``: the text is wrapped in backticks or a code fence.
- ``single quotes``: single-quoted strings or keys, or ``'{...}'`` around the text.
- ``python literals``: ``None``/``True``/``False`` → ``null``/``true``/``false``.
- ``trailing comma``: ``[1, 2,]``, ``{"a": 1,}``.
- ``unquoted keys``: ``{site_name: "MAIN"}``.
- ``unquoted placeholder {step_4}``: a placeholder written without quotes where a value
  goes (``{"tonnage": {step_4}}`` or ``<step_4>``) becomes the string ``"{step_4}"``.
- ``escaped JSON string``: the whole value is a JSON string whose content is a JSON
  object or array (``"{\"a\": 1}"``); the value becomes that object or array.
- ``bare placeholder string``: the whole value is one placeholder string such as
  ``"{step_1}"``; the value is that string (the caller decides what it means).
- ``None means no arguments``: the whole text is ``None`` (any case): the value is ``{}``.
- ``control character in string`` and ``invalid escape``: kept as written.

Not repaired (value None, ``error`` set): truncated text (``truncated=True``: an
unterminated string, unclosed brackets, a missing value at the end), text after the
value, unknown bare words, and the ellipsis ``...`` (``elided=True``): a planner that
writes ``...`` has elided data, and a tool must not receive an invented or incomplete value.

The same holds for a whole value that is an escaped JSON string with an ellipsis inside
(``"[{\"t\": 1}, ...]"``): an error (``elided=True``), not a string. A string *inside*
an object is data and is left alone.

JSON ``null`` alone is strict JSON: the value is None with no error.

A key given twice in one object (``{"priority": "low", "priority": "high"}``) is never
"last one wins": it is an error naming the key and both values (``duplicate_key`` set),
also inside nested objects and escaped JSON strings. `read_json_keeping_duplicates` is
the variant for the json plan dialect, which reports each duplicate on its step.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from planexec._text import clip
from planexec.errors import PlanexecError

__all__ = [
    "DuplicateKey",
    "JSONReader",
    "RepairFailure",
    "RepairResult",
    "closing_bracket",
    "extract_json",
    "extract_json_object",
    "read_json_keeping_duplicates",
    "repair_json",
]

_MAX_DEPTH = 200
_WS = " \t\r\n\ufeff\u00a0"
_NUMBER_RE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_PY_NUMBER_RE = re.compile(r"[-+]?(?:\d[\d_]*)?(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ANGLE_RE = re.compile(r"<[^<>\n\"{}]{1,200}>")
_LLMC_REF_RE = re.compile(r"\$\{\s*\d+\s*\}|\$\d+")
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.S)
_PLACEHOLDER_RE = re.compile(r"^(\{\{[^{}\n]{1,200}\}\}|\{[^{}\n\"]{1,200}\}|<[^<>\n]{1,200}>)$")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t", "'": "'"}


@dataclass(frozen=True)
class RepairResult:
    """The outcome of `repair_json`."""

    value: Any
    """The parsed value, or None when the text could not be read (see ``error``)."""
    repairs: tuple[str, ...] = ()
    """What was repaired, in words, in the order applied; empty for strict JSON."""
    error: str | None = None
    """Why the text could not be read; None on success."""
    truncated: bool = False
    """True when the text looks cut off (unterminated string, unclosed brackets)."""
    elided: bool = False
    """True when the text elides data with ``...`` (also inside a whole escaped JSON
    string): a planner wrote an example, not a complete value."""
    duplicate_key: str | None = None
    """The key an object gives twice, when that is why the text was refused."""

    @property
    def ok(self) -> bool:
        """Whether the text was read (strictly or with repairs)."""
        return self.error is None


@dataclass(frozen=True, eq=False)
class DuplicateKey:
    """A key given twice in one JSON object (see `read_json_keeping_duplicates`)."""

    owner: dict[str, Any]
    """The object as read (holding the first value), compared by identity."""
    key: str
    """The key given twice."""
    first: Any
    """The value given first."""
    second: Any
    """The value given next."""

    @property
    def message(self) -> str:
        """The key and both values, in words."""
        return duplicate_message(self.key, self.first, self.second)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return clip(text, 60)


def duplicate_message(key: str, first: Any, second: Any) -> str:
    """The words for a key given twice: the key and both values.

    Args:
        key: The key (or keyword argument) given twice.
        first: Its first value.
        second: Its next value.

    Returns:
        A sentence naming the key and both values.
    """
    return (
        f"the key {key!r} is given twice, with the values {_shown(first)} and "
        f"{_shown(second)}; which one is meant is not known"
    )


class RepairFailure(PlanexecError):
    """Raised by `JSONReader` when the text cannot be read as a value.

    Decisions read the typed fields; ``message`` is for people.

    Attributes:
        message: Why the text cannot be read, in words.
        truncated: The text looks cut off (it ends inside a value).
        elided: The text elides data with ``...``.
        duplicate_key: The key an object gives twice, when that is the reason.
    """

    def __init__(
        self,
        message: str,
        *,
        truncated: bool = False,
        elided: bool = False,
        duplicate_key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.truncated = truncated
        self.elided = elided
        self.duplicate_key = duplicate_key


class _Duplicate(Exception):
    """A key given twice, raised out of `json.loads` (not a ValueError: no fallback)."""

    def __init__(self, key: str, first: Any, second: Any) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


def _pairs_hook(dups: list[DuplicateKey] | None) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                if dups is None:
                    raise _Duplicate(key, out[key], value)
                dups.append(DuplicateKey(out, key, out[key], value))
                continue
            out[key] = value
        return out

    return hook


class JSONReader:
    """A tolerant recursive-descent reader for JSON-like values.

    In ``python`` mode (llmcompiler call arguments) Python literals and single quotes are
    normal syntax (not repairs), ``(a, b)`` is read as a list and ``$1``/``${1}`` are
    read as the strings ``"$1"``/``"${1}"`` for the reference grammar to pick up.
    """

    def __init__(
        self, text: str, *, python: bool = False, duplicates: list[DuplicateKey] | None = None
    ) -> None:
        self.text = text
        self.pos = 0
        self.python = python
        self.duplicates = duplicates
        """Where a key given twice is recorded (the first value kept); None: refuse it."""
        self.repairs: list[str] = []
        self.placeholder_repairs: set[str] = set()
        """The entries of ``repairs`` that are unquoted placeholders (as data, so a
        reader that accepts bare placeholders can leave them out by identity)."""
        self.depth = 0

    def _repair(self, name: str) -> None:
        if name not in self.repairs:
            self.repairs.append(name)

    def _placeholder(self, raw: str) -> None:
        name = f"unquoted placeholder {raw}"
        self._repair(name)
        self.placeholder_repairs.add(name)

    def skip_ws(self) -> None:
        """Move past whitespace (also a BOM and no-break spaces)."""
        t, n = self.text, len(self.text)
        while self.pos < n and t[self.pos] in _WS:
            self.pos += 1

    def at_end(self) -> bool:
        """Whether the whole text has been read."""
        return self.pos >= len(self.text)

    def where(self) -> str:
        """The current position, in words, for messages."""
        return f"at character {self.pos + 1}"

    def value(self) -> Any:
        """Read one value at the current position and move past it.

        Returns:
            The value read.

        Raises:
            RepairFailure: the text at the current position is not a value.
        """
        self.skip_ws()
        if self.at_end():
            raise RepairFailure("the text ends where a value was expected", truncated=True)
        c = self.text[self.pos]
        if c == "{":
            ph = self._brace_placeholder()
            if ph is not None:
                return ph
            return self._container(self._object)
        if c == "[":
            return self._container(self._array)
        if c == "(" and self.python:
            return self._container(self._tuple)
        if c == '"':
            return self._string('"')
        if c == "'":
            if not self.python:
                self._repair("single quotes")
            return self._string("'")
        if c == "`":
            self._repair("backticks")
            return self._string("`")
        if c == "<":
            m = _ANGLE_RE.match(self.text, self.pos)
            if m is None:
                raise RepairFailure(f"unexpected '<' {self.where()}")
            self.pos = m.end()
            self._placeholder(m.group(0))
            return m.group(0)
        if c == "$" and self.python:
            m = _LLMC_REF_RE.match(self.text, self.pos)
            if m is None:
                raise RepairFailure(f"unexpected '$' {self.where()}")
            self.pos = m.end()
            return m.group(0)
        if self.text.startswith("...", self.pos) or c == "\u2026":
            raise RepairFailure(
                f"the JSON elides data with '...' {self.where()}; arguments must be "
                "complete values, not examples",
                elided=True,
            )
        if c == "-" or c.isdigit() or (self.python and c in "+."):
            return self._number()
        m = _WORD_RE.match(self.text, self.pos)
        if m is not None:
            return self._word(m.group(0))
        raise RepairFailure(f"unexpected character {c!r} {self.where()}")

    def _container(self, fn: Any) -> Any:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise RepairFailure(f"nested deeper than {_MAX_DEPTH} levels")
        try:
            return fn()
        finally:
            self.depth -= 1

    def _word(self, word: str) -> Any:
        if word in ("true", "false", "null"):
            self.pos += len(word)
            return {"true": True, "false": False, "null": None}[word]
        if word in ("True", "False", "None"):
            self.pos += len(word)
            if not self.python:
                self._repair("python literals")
            return {"True": True, "False": False, "None": None}[word]
        if self.pos + len(word) >= len(self.text) and any(
            lit.startswith(word) for lit in ("true", "false", "null", "True", "False", "None")
        ):
            raise RepairFailure(f"the text ends inside the word {word!r}", truncated=True)
        if self.python:
            self.pos += len(word)
            self._repair(f"bare word {word!r} read as a string")
            return word
        raise RepairFailure(f"unexpected bare word {word!r} {self.where()}")

    def _number(self) -> Any:
        rx = _PY_NUMBER_RE if self.python else _NUMBER_RE
        m = rx.match(self.text, self.pos)
        if m is None or not m.group(0) or not any(ch.isdigit() for ch in m.group(0)):
            if self.pos + 1 >= len(self.text):
                raise RepairFailure("the text ends inside a number", truncated=True)
            raise RepairFailure(f"malformed number {self.where()}")
        raw = m.group(0)
        self.pos = m.end()
        clean = raw.replace("_", "")
        if re.fullmatch(r"[-+]?\d+", clean):
            limit = sys.get_int_max_str_digits()
            digits = len(clean.lstrip("+-"))
            if limit and digits > limit:  # int() would raise ValueError
                raise RepairFailure(
                    f"the number {raw[:20]!r}… has {digits} digits, more than an integer "
                    f"may have ({limit}) {self.where()}"
                )
            return int(clean)
        try:
            return float(clean)
        except ValueError as exc:
            raise RepairFailure(f"malformed number {raw!r}") from exc

    def _string(self, quote: str) -> str:
        start = self.pos
        self.pos += 1
        t, n = self.text, len(self.text)
        out: list[str] = []
        while True:
            if self.pos >= n:
                raise RepairFailure(
                    f"unterminated string starting at character {start + 1}", truncated=True
                )
            c = t[self.pos]
            if c == quote:
                self.pos += 1
                return "".join(out)
            if c == "\\":
                if self.pos + 1 >= n:
                    raise RepairFailure("the text ends inside an escape", truncated=True)
                e = t[self.pos + 1]
                if e == "u":
                    hexa = t[self.pos + 2 : self.pos + 6]
                    if len(hexa) < 4 and self.pos + 2 + len(hexa) >= n:
                        raise RepairFailure("the text ends inside an escape", truncated=True)
                    if re.fullmatch(r"[0-9a-fA-F]{4}", hexa):
                        code = int(hexa, 16)
                        low = t[self.pos + 6 : self.pos + 12]
                        if (
                            0xD800 <= code < 0xDC00
                            and re.fullmatch(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}", low)
                        ):  # a surrogate pair, as JSON writes a character beyond U+FFFF
                            code = 0x10000 + ((code - 0xD800) << 10) + (int(low[2:], 16) - 0xDC00)
                            self.pos += 6
                        out.append(chr(code))
                        self.pos += 6
                        continue
                    self._repair("invalid escape")
                    out.append("\\u")
                    self.pos += 2
                    continue
                if e in _ESCAPES and (e != "'" or quote == "'" or self.python):
                    out.append(_ESCAPES[e])
                elif e == "`" and quote == "`":
                    out.append("`")
                else:
                    self._repair("invalid escape")
                    out.append("\\" + e)
                self.pos += 2
                continue
            if c < " " and not self.python:
                self._repair("control character in string")
            out.append(c)
            self.pos += 1

    def _brace_placeholder(self) -> str | None:
        """Read ``{step_4}`` / ``{{x}}`` written where a value goes, or return None."""
        t, n = self.text, len(self.text)
        i = self.pos + 1
        double = i < n and t[i] == "{"
        if double:
            i += 1
        j = i
        while j < n and t[j] in " \t":
            j += 1
        if j >= n or not (t[j].isalpha() or t[j] in "_$#"):
            return None
        depth = 0
        quote = ""
        k = j
        while k < n and k - self.pos < 300:
            ch = t[k]
            if quote:
                if ch == "\\":
                    k += 2
                    continue
                if ch == quote:
                    quote = ""
            elif ch in "\"'":
                if depth == 0:
                    return None
                quote = ch
            elif ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == "\n" or ch == "{":
                return None
            elif depth == 0 and ch in ":,":
                return None
            elif ch == "}":
                if depth != 0:
                    return None
                end = k + 1
                if double:
                    if end < n and t[end] == "}":
                        end += 1
                    else:
                        return None
                raw = t[self.pos : end]
                self.pos = end
                self._placeholder(raw)
                return raw
            k += 1
        return None

    def _key(self) -> str:
        c = self.text[self.pos]
        if c == '"':
            return self._string('"')
        if c == "'":
            if not self.python:
                self._repair("single quotes")
            return self._string("'")
        if self.text.startswith("...", self.pos) or c == "\u2026":
            raise RepairFailure(
                f"the JSON elides data with '...' {self.where()}; arguments must be "
                "complete values, not examples",
                elided=True,
            )
        m = _WORD_RE.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()
            self._repair("unquoted keys")
            return m.group(0)
        raise RepairFailure(f"expected a key {self.where()}, found {c!r}")

    def _object(self) -> dict[str, Any]:
        self.pos += 1
        out: dict[str, Any] = {}
        self.skip_ws()
        if self.at_end():
            raise RepairFailure("unclosed '{' at the end of the text", truncated=True)
        if self.text[self.pos] == "}":
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            if self.at_end():
                raise RepairFailure("unclosed '{' at the end of the text", truncated=True)
            if self.text[self.pos] == "}":
                self._repair("trailing comma")
                self.pos += 1
                return out
            key = self._key()
            self.skip_ws()
            if self.at_end():
                raise RepairFailure("the text ends after a key", truncated=True)
            if self.text[self.pos] != ":":
                raise RepairFailure(f"expected ':' after key {key!r} {self.where()}")
            self.pos += 1
            value = self.value()
            if key in out:
                if self.duplicates is None:
                    raise RepairFailure(duplicate_message(key, out[key], value),
                                        duplicate_key=key)
                self.duplicates.append(DuplicateKey(out, key, out[key], value))
            else:
                out[key] = value
            self.skip_ws()
            if self.at_end():
                raise RepairFailure("unclosed '{' at the end of the text", truncated=True)
            c = self.text[self.pos]
            if c == ",":
                self.pos += 1
                continue
            if c == "}":
                self.pos += 1
                return out
            raise RepairFailure(f"expected ',' or '}}' {self.where()}, found {c!r}")

    def _seq(self, close: str) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.skip_ws()
        if self.at_end():
            raise RepairFailure(f"unclosed bracket before '{close}' at the end", truncated=True)
        if self.text[self.pos] == close:
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            if self.at_end():
                raise RepairFailure(f"unclosed bracket before '{close}' at the end", truncated=True)
            if self.text[self.pos] == close:
                self._repair("trailing comma")
                self.pos += 1
                return out
            out.append(self.value())
            self.skip_ws()
            if self.at_end():
                raise RepairFailure(f"unclosed bracket before '{close}' at the end", truncated=True)
            c = self.text[self.pos]
            if c == ",":
                self.pos += 1
                continue
            if c == close:
                self.pos += 1
                return out
            raise RepairFailure(f"expected ',' or '{close}' {self.where()}, found {c!r}")

    def _array(self) -> list[Any]:
        return self._seq("]")

    def _tuple(self) -> list[Any]:
        return self._seq(")")


def _strip_wrapping(text: str, repairs: list[str]) -> str:
    s = text.strip(_WS)
    if s.startswith("```"):
        m = _FENCE_RE.match(s)
        if m is not None and not s[m.end() :].strip(_WS):
            repairs.append("backticks")
            return m.group(2).strip(_WS)
        if "```" not in s[3:]:
            repairs.append("backticks")
            body = s[3:]
            nl = body.find("\n")
            first = body if nl == -1 else body[:nl]
            if re.fullmatch(r"[A-Za-z0-9_+-]*", first.strip()):
                body = "" if nl == -1 else body[nl + 1 :]
            return body.strip(_WS)
    if s.startswith("`"):
        inner = s.lstrip("`")
        if inner.rstrip(_WS).endswith("`"):
            inner = inner.rstrip(_WS).rstrip("`")
        repairs.append("backticks")
        return inner.strip(_WS)
    return s


def _looks_like_placeholder(text: str) -> bool:
    return bool(_PLACEHOLDER_RE.match(text.strip()))


def _post(
    value: Any, repairs: list[str], depth: int, dups: list[DuplicateKey] | None
) -> RepairResult:
    if isinstance(value, str):
        inner = value.strip(_WS)
        if _looks_like_placeholder(inner):
            return RepairResult(value, tuple([*repairs, "bare placeholder string"]))
        if depth == 0 and inner[:1] in ("{", "["):
            sub = _repair(inner, depth + 1, dups)
            if sub.duplicate_key is not None:
                return RepairResult(None, tuple(repairs), sub.error,
                                    duplicate_key=sub.duplicate_key)
            if sub.error is None and isinstance(sub.value, dict | list):
                return RepairResult(sub.value, tuple([*repairs, "escaped JSON string",
                                                      *sub.repairs]))
            if sub.elided:
                return RepairResult(
                    None, tuple(repairs),
                    f"the value is an escaped JSON string that is not complete: {sub.error}",
                    elided=True,
                )
    return RepairResult(value, tuple(repairs))


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _repair(text: str, depth: int, dups: list[DuplicateKey] | None = None) -> RepairResult:
    repairs: list[str] = []
    s = _strip_wrapping(text, repairs)
    if not s:
        return RepairResult(None, tuple(repairs), "the text is empty", False)
    if len(s) >= 2 and s[0] == "'" and s[-1] == "'" and s[1:-1].strip(_WS)[:1] in ("{", "["):
        repairs.append("single quotes")
        s = s[1:-1].strip(_WS)
    if s.lower() == "none":
        return RepairResult({}, tuple([*repairs, "None means no arguments"]))
    try:
        strict = json.loads(s, parse_constant=_reject_constant, object_pairs_hook=_pairs_hook(dups))
        return _post(strict, repairs, depth, dups)
    except _Duplicate as dup:
        return RepairResult(None, tuple(repairs), duplicate_message(dup.key, dup.first,
                                                                    dup.second),
                            duplicate_key=dup.key)
    except (ValueError, RecursionError):
        if dups:
            del dups[:]  # the tolerant reader reads the text again
    reader = JSONReader(s, duplicates=dups)
    try:
        value = reader.value()
        reader.skip_ws()
        if not reader.at_end():
            rest = s[reader.pos : reader.pos + 40]
            raise RepairFailure(f"unexpected text after the value {reader.where()}: {rest!r}")
    except RepairFailure as fail:
        return RepairResult(None, tuple(repairs + reader.repairs), fail.message, fail.truncated,
                            fail.elided, fail.duplicate_key)
    return _post(value, repairs + reader.repairs, depth, dups)


def repair_json(text: str) -> RepairResult:
    """Read JSON as planners write it, naming every repair.

    Any text is an answer, never an exception: what cannot be read is a `RepairResult`
    with ``error`` set. An exception out of this function is a bug in planexec and
    propagates as it is.

    Args:
        text: the text of an ``#Args`` field or any JSON-ish snippet.

    Returns:
        A `RepairResult`. On success ``value`` is the data and ``repairs`` lists what was
        repaired (empty for strict JSON); on failure ``value`` is None, ``error`` says why,
        ``truncated`` tells whether the text looks cut off and ``elided`` whether it
        elides data with ``...``.
    """
    if not isinstance(text, str):
        text = str(text)
    return _repair(text, 0)


def read_json_keeping_duplicates(text: str) -> tuple[RepairResult, tuple[DuplicateKey, ...]]:
    """`repair_json`, but a key given twice keeps its first value and is recorded.

    For readers that report each duplicate where it occurs (the json plan dialect marks
    the step holding it invalid) instead of refusing the whole text.

    Args:
        text: The JSON-ish text.

    Returns:
        ``(result, duplicates)``: the result as `repair_json` gives it (with the first
        value of each duplicated key) and every key given twice, with the object holding
        it (compare by identity: ``d.owner is obj``).
    """
    dups: list[DuplicateKey] = []
    got = _repair(text if isinstance(text, str) else str(text), 0, dups)
    return got, tuple(dups)


def closing_bracket(
    text: str,
    start: int,
    *,
    depth: int = 0,
    quotes: str = '"',
    opens: str = "{[",
    closes: str = "}]",
) -> int | None:
    """Find the bracket that brings ``depth`` back to 0, scanning from ``start``.

    Quote-aware: brackets inside a string opened by one of ``quotes`` do not count
    (a backslash escapes the next character).

    Args:
        text: The text to scan.
        start: Where to start scanning.
        depth: The bracket depth already open at ``start``.
        quotes: The characters that open (and close) a string.
        opens: The opening brackets.
        closes: The closing brackets.

    Returns:
        The index of the closing bracket, or None when the text ends first.
    """
    quote = ""
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in quotes:
            quote = ch
        elif ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _balanced_end(text: str, start: int) -> int | None:
    """Index just past the bracket matching ``text[start]`` (quote-aware), or None."""
    end = closing_bracket(text, start)
    return None if end is None else end + 1


def extract_json(text: str) -> RepairResult:
    """Find the JSON object (or array) in an LLM reply, or say why there is none.

    Tried in order: the whole reply (tolerantly, see `repair_json`); each code fence
    (also one-line fences such as ```` ```json{"a": 1}``` ````); then each balanced
    ``{...}``/``[...]`` in the prose, objects first. A candidate that gives a key twice
    ends the search with that error (``duplicate_key`` set): no part of it, and no later
    value, is read in its place.

    Args:
        text: the model's reply.

    Returns:
        The first dict or list found (``value``), or a result with ``error`` set: no
        reply raises.
    """
    none = RepairResult(None, (), "no JSON object or array was found")
    if not isinstance(text, str) or not text.strip():
        return none
    whole = repair_json(text)
    if whole.duplicate_key is not None or (
        whole.error is None and isinstance(whole.value, dict | list)
    ):
        return whole
    for m in _FENCE_RE.finditer(text):
        body = m.group(2)
        for candidate in (body, m.group(1) + body):
            got = repair_json(candidate)
            if got.duplicate_key is not None or (
                got.error is None and isinstance(got.value, dict | list)
            ):
                return got
    found_list: RepairResult | None = None
    tries = 0
    for opener in ("{", "["):
        pos = text.find(opener)
        while pos != -1 and tries < 64:
            tries += 1
            end = _balanced_end(text, pos)
            if end is not None:
                got = repair_json(text[pos:end])
                if got.duplicate_key is not None:
                    return got
                if got.error is None and isinstance(got.value, dict):
                    return got
                if got.error is None and isinstance(got.value, list) and found_list is None:
                    found_list = got
            pos = text.find(opener, pos + 1)
    return found_list if found_list is not None else none


def extract_json_object(text: str) -> Any | None:
    """The value `extract_json` finds in an LLM reply, or None.

    Args:
        text: the model's reply.

    Returns:
        The first dict or list found, or None (also for a reply that is not a string,
        and for one whose JSON gives a key twice); no reply raises.
    """
    got = extract_json(text)
    return got.value if got.error is None else None
