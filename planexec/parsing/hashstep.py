r"""The hashstep dialect: ``#TaskN:`` / ``#AgentN:`` / ``#ToolN:`` / ``#ArgsN:`` blocks.

This is the primary plan dialect, read the way real models write it rather than the
way prompts ask for it. The grammar, the draft policy and every diagnostic code are in
``docs/plan-language.md``; in short:

- A *block* starts at a ``#TaskN:`` (or ``#StepN:``) line and holds the field lines
  that follow it (``#Agent``/``#Server``, ``#Tool``, ``#Args``, ``#Dependency``,
  ``#ExpectedOutput``), whatever their number says: a field whose number disagrees
  with its block is attached to the enclosing block, with a ``FIELD_NUMBER_MISMATCH``
  warning.
- Keys are case-insensitive; the number may be written ``<1>``; markdown bullets,
  headers, bold and blockquotes around field lines are ignored; code fences, special
  tokens (``<|eom_id|>``), ``$\boxed{...}$`` wrappers and leaked reasoning before
  ``assistantfinal`` / ``</think>`` are removed, each with a diagnostic.
- A field value continues on the following lines until a blank line, a separator
  (``---``), a fence or the next field line (``#Args`` only while its brackets are
  open).
- Several drafts of a plan in one reply (task numbers restart) are split, and one is
  chosen by the draft policy (default ``last_complete``), with a ``DRAFTS_FOUND``
  diagnostic.
- When a field appears twice in one block, the **first** non-empty value wins
  (models repeat or comment on a field after writing it: ``#Agent2: is the same as
  #Agent1``), with a ``DUPLICATE_FIELD`` warning.
- ``#Args`` goes through `repair_json`; each repair is an ``ARGS_REPAIRED`` warning,
  unreadable or truncated JSON is an error and ``args_valid=False`` (never a silent
  ``{}``). A JSON value that is not an object (e.g. the bare string ``"{step_1}"``)
  becomes the step's single *positional* argument, with an ``ARGS_POSITIONAL``
  warning; the resolver binds it to the tool's first parameter.
- Arguments written inside the ``#Tool`` call (``assets(site_name: "MAIN")``, ``key:
  value`` or ``key=value``) are read by the call reader the llmcompiler dialect uses
  (`read_call_args`) and merged with ``#Args``; a key with two different values is an
  ``ARGS_CONFLICT`` error, unreadable text an ``ARGS_SYNTAX``/``ARGS_TRUNCATED`` error,
  and a signature echoed instead of values (``sensors(site_name, asset_id)``) a warning.
- Free-text placeholders (``<chiller_asset_id>``, ``<output from Task5>``) become hinted
  references (`free_placeholders`): to the step they name, else over the step's declared
  dependencies, else to `NO_STEP` (a missing reference).
- Reply cleanup (reasoning, special tokens, boxed answers) is `clean_reply`, shared with
  the other dialects.

A plan of plain blocks only (``#StepN``/``#ToolN``/``#ArgsN``/``#DependencyN``, one line
each, strict JSON whose strings are plain text or whole references to declared
dependencies: nothing to report) is read at once by a fast path, `_read_plain`, into
the plan the field-by-field reading gives; any other plan takes the field-by-field
reading (`planexec._fastpaths`; `tests/parsing/test_hashstep_fast_path.py` holds the two
equal).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import planexec._fastpaths as _fastpaths
from planexec._log import level_of, step_log
from planexec._text import snippet
from planexec.errors import PlanParseError
from planexec.parsing._common import (
    NONE_WORDS,
    REASONING_MARKERS,
    Diagnostics,
    ToolCall,
    clean_reply,
    has_literal,
    keys_with_refs,
    read_call_args,
    read_tool,
    ref_malformed_message,
    ref_suffix_message,
    step_number_message,
    walk_strings,
)
from planexec.parsing.jsonrepair import RepairFailure, repair_json
from planexec.parsing.refs import (
    HINTED_BY,
    NO_STEP,
    contains_placeholder,
    find_malformed,
    find_refs,
    free_placeholders,
    free_step_mention,
    parse_ref,
    path_like_suffixes,
    step_number,
)
from planexec.plan import (
    Diagnostic,
    Plan,
    Ref,
    Severity,
    Step,
    Template,
    format_path,
    iter_refs,
)

__all__ = ["DRAFT_POLICIES", "parse_hashstep"]

DRAFT_POLICIES = ("last_complete", "first", "last")
"""Ways to choose among several drafts of a plan in one reply."""

_KEYS = {
    "task": "task",
    "step": "task",
    "agent": "server",
    "server": "server",
    "tool": "tool",
    "args": "args",
    "arguments": "args",
    "params": "args",
    "parameters": "args",
    "dependency": "deps",
    "dependencies": "deps",
    "deps": "deps",
    "expectedoutput": "expected",
    "expected_output": "expected",
    "expected output": "expected",
}
_FIELD_ORDER = ("task", "server", "tool", "args", "deps", "expected")
_FIELD_LABEL = {
    "task": "#Task",
    "server": "#Agent",
    "tool": "#Tool",
    "args": "#Args",
    "deps": "#Dependency",
    "expected": "#ExpectedOutput",
}

_FIELD_RE = re.compile(
    r"""^\s*(?:>\s*)*                       # blockquote
        (?:(?:[-*+\u2022]|\d{1,3}[.)])\s+)?  # bullet or numbered item
        (?:\#{1,6}\s+)?                      # markdown header
        (?:\*\*|__|`)?\s*                    # bold / code opening
        \#\s?(?P<key>task|step|agent|server|tool|arguments|args|parameters|params
              |dependency|dependencies|deps|expected[ _]?output)
        \s*(?:<\s*(?P<anum>[^<>:\n]{0,8}?)\s*>|(?P<num>\d+))?
        (?P<junk>(?<=[\d>])[^:\n]{0,40}?)?
        \s*(?:\*\*|__|`)?\s*:
        (?:\s*(?:\*\*|__)(?!\S*\*\*))?      # bold closing after the colon
        (?P<value>.*)$""",
    re.IGNORECASE | re.VERBOSE,
)
_INLINE_FIELD_RE = re.compile(
    r"(?<=\s)(?:\*\*|__)?\#\s?(?:task|step|agent|server|tool|arguments|args|parameters|params"
    r"|dependency|dependencies|deps|expected[ _]?output)\s*(?:<[^<>:\n]{0,8}>|\d{1,9})?"
    r"\s*(?:\*\*|__)?\s*:",
    re.IGNORECASE,
)
_FENCE_OPENER_RE = re.compile(r"^(?:```|~~~)\s*[A-Za-z]*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_SEPARATOR_RE = re.compile(r"^\s*(?:-{3,}|\*{3,}|_{3,}|={3,})\s*$")
_HEADING_RE = re.compile(r"^\s*(?:#{1,6}\s+\S|\*\*[^*].*\*\*:?\s*$|__[^_].*__:?\s*$)")
_DEP_TOKEN_RE = re.compile(r"^#?\s*(?:s|step|task|e|step_)?\s*<?(\d{1,9})>?\.?$", re.IGNORECASE)
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][\w\-]*$")
_ALWAYS_KEPT = {"REASONING_DROPPED", "DRAFTS_FOUND", "SPECIAL_TOKEN", "BOXED_ANSWER", "CODE_FENCE"}


@dataclass
class _Field:
    kind: str
    key: str
    num: int | None
    raw_num: str | None
    junk: str
    line: int
    end_line: int
    values: list[str]
    bad_num: str | None = None
    """A number written after the key that is too long to be a step number."""
    _read: tuple[list[str], int, _Brackets, bool] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def _catch_up(self) -> tuple[_Brackets, bool]:
        """Read the lines added since the last call: the state of the joined lines.

        A field growing line by line is then checked in linear time overall.
        """
        if self._read is None or self._read[0] is not self.values:
            self._read = (self.values, 0, _Brackets(), False)
        values, done, state, filled = self._read
        for i in range(done, len(values)):
            if i:
                state.feed("\n")
            state.feed(values[i])
            filled = filled or bool(values[i].strip())
        self._read = (values, len(values), state, filled)
        return state, filled

    @property
    def filled(self) -> bool:
        """Whether the value is not blank (``bool(self.value)``), reading only new lines."""
        return self._catch_up()[1]

    @property
    def brackets_open(self) -> bool:
        """``_open_brackets(self.value)``, reading only the lines added since last asked."""
        return self._catch_up()[0].open

    @property
    def label(self) -> str:
        num = self.raw_num if self.raw_num is not None else ""
        return f"#{self.key}{num}"

    @property
    def value(self) -> str:
        return "\n".join(self.values).strip()


@dataclass
class _Block:
    id: int | None
    opening: _Field
    fields: list[_Field] = field(default_factory=list)
    truncated: bool = False
    draft: list[_Block] = field(default_factory=list)

    def siblings_have(self, kinds: Iterable[str]) -> bool:
        """Whether every other block of this block's draft has all these fields."""
        others = [b for b in self.draft if b is not self]
        return bool(others) and all(
            all(any(f.kind == k for f in b.fields) for k in kinds) for b in others
        )

    @property
    def first_line(self) -> int:
        return self.opening.line

    @property
    def last_line(self) -> int:
        return max(f.end_line for f in self.fields)


class _State(Diagnostics):
    """The shared collector, logging nothing until a draft is chosen (`parse_hashstep`)."""

    def __init__(self) -> None:
        super().__init__(log=False)

    @property
    def diags(self) -> list[Diagnostic]:
        """The diagnostics so far (the collector's `items`)."""
        return self.items

    @diags.setter
    def diags(self, value: list[Diagnostic]) -> None:
        self.items = value


_BRACKET_CHARS_RE = re.compile(r'["\\{}\[\]()]')


class _Brackets:
    """The bracket and string state of a text read in pieces.

    Asking whether a growing text has brackets open then costs only the new piece
    (`feed`), not the whole text again.
    """

    __slots__ = ("depth", "escaped", "in_str")

    def __init__(self) -> None:
        self.depth = 0
        self.in_str = False
        self.escaped = False

    def feed(self, text: str) -> _Brackets:
        """Read more text (only quotes, backslashes and brackets are looked at)."""
        skip = 0 if self.escaped else -1  # the position of an escaped character
        for m in _BRACKET_CHARS_RE.finditer(text):
            pos = m.start()
            if pos == skip:
                continue
            ch = m.group()
            if self.in_str:
                if ch == "\\":
                    skip = pos + 1
                elif ch == '"':
                    self.in_str = False
            elif ch == '"':
                self.in_str = True
            elif ch in "{[(":
                self.depth += 1
            elif ch in "}])":
                self.depth -= 1
        self.escaped = skip == len(text)  # a backslash at the end escapes what follows
        return self

    @property
    def open(self) -> bool:
        """Whether the text read so far ends inside a string or with brackets open."""
        return self.in_str or self.depth > 0


def _open_brackets(text: str) -> bool:
    """Whether ``text`` ends inside a double-quoted string or with brackets open."""
    return _Brackets().feed(text).open


# ---------------------------------------------------------------------------
# Preprocessing: text -> logical lines (line number, text)
# ---------------------------------------------------------------------------


def _logical_lines(text: str, st: _State) -> list[tuple[int, str]]:
    lines, diags = clean_reply(text)
    st.diags.extend(diags)
    return lines


# ---------------------------------------------------------------------------
# Scanning: logical lines -> blocks
# ---------------------------------------------------------------------------


def _match_field(text: str) -> _Field | None:
    m = _FIELD_RE.match(text)
    if m is None:
        return None
    key = m.group("key")
    kind = _KEYS[key.lower().replace("  ", " ")]
    raw_num: str | None = None
    num: int | None = None
    bad_num: str | None = None
    if m.group("num") is not None:
        num = step_number(m.group("num"))
        if num is None:  # thousands of digits: int() would even raise ValueError
            bad_num = m.group("num")
        else:
            raw_num = m.group("num")
    elif m.group("anum") is not None:
        raw_num = f"<{m.group('anum')}>"
        anum = m.group("anum").strip()
        num = int(anum) if anum.isdigit() else None
    value = m.group("value").rstrip()
    if value.endswith("**") and text.lstrip().startswith(("**", "* **", "- **")):
        value = value[:-2].rstrip()
    junk = (m.group("junk") or "").strip()
    return _Field(kind, key, num, raw_num, junk, 0, 0, [value], bad_num)


# Arguments written below an empty ``#Args`` in a shape other than JSON (``key: value``,
# ``key=value``, ``(...)``, a quoted, bulleted or numbered object, a blockquoted fence):
# read as its value, so that they fail loudly instead of becoming no arguments.
_ARGS_BELOW_RE = re.compile(
    r"^\s*(?:>\s*)*(?:(?:[-*+\u2022]|\d{1,3}[.)])\s+)?"
    r"(?:```|~~~|[{\[(\"']|[A-Za-z_][\w\-]*\s*[:=])"
)


def _starts_args_value(text: str) -> bool:
    """Whether a line can be the value of an ``#Args`` field left empty on its own line."""
    t = text.strip().lstrip("`").strip()
    if not t:
        return False
    return (
        t[0] in "{[\"'"
        or t.lower().rstrip(".") in NONE_WORDS
        or _ARGS_BELOW_RE.match(text) is not None
    )


def _next_content(lines: list[tuple[int, str]], start: int) -> str | None:
    for i in range(start, len(lines)):  # no slice: a copy per fence would be quadratic
        text = lines[i][1]
        if text.strip():
            return text
    return None


def _split_inline(fld: _Field) -> list[_Field]:
    """Split ``#Task1: a #Tool1: sites #Args1: {}`` (several fields on one line)."""
    value = fld.values[0]
    cuts: list[int] = []
    state = _Brackets()
    read = 0
    for m in _INLINE_FIELD_RE.finditer(value):
        state.feed(value[read : m.start()])
        read = m.start()
        if state.open:
            continue  # inside quotes or brackets (e.g. JSON text): not a field
        cuts.append(m.start())
    if not cuts:
        return [fld]
    fld.values = [value[: cuts[0]].rstrip()]
    out = [fld]
    for i, at in enumerate(cuts):
        piece = value[at : cuts[i + 1] if i + 1 < len(cuts) else len(value)].strip()
        extra = _match_field(piece)
        if extra is None:  # pragma: no cover - the regexes agree
            continue
        out.append(extra)
    return out


def _scan(lines: list[tuple[int, str]], st: _State) -> tuple[list[_Block], int]:
    """Group field lines into blocks; report prose, fences and orphan fields.

    Returns the blocks and the last line that holds anything but blanks and fences.
    """
    blocks: list[_Block] = []
    current: _Block | None = None
    open_field: _Field | None = None
    args_fence = False  # inside a code fence that holds the value of an empty #Args
    prose: list[tuple[int, str]] = []
    fences: list[int] = []
    multiline: list[_Field] = []
    last_content = 0

    def flush_prose() -> None:
        if prose:
            first, text = prose[0]
            st.add(
                first,
                Severity.INFO,
                "PROSE_IGNORED",
                f"ignored {len(prose)} line(s) of text outside the plan fields "
                f"(lines {first}-{prose[-1][0]}): {snippet(text)!r}",
            )
            prose.clear()

    def take(fld: _Field, lineno: int, text: str) -> None:
        if len(fld.values) == 1:
            multiline.append(fld)
        fld.values.append(text.rstrip())
        fld.end_line = lineno

    def empty_args(fld: _Field | None) -> bool:
        return fld is not None and fld.kind == "args" and not fld.filled

    def add_field(fld: _Field, lineno: int, text: str) -> _Field | None:
        nonlocal current
        fld.line = fld.end_line = lineno
        if fld.bad_num is not None:
            st.add(
                lineno,
                Severity.WARNING,
                "STEP_NUMBER_INVALID",
                step_number_message(
                    f"#{fld.key}", fld.bad_num, f"read as {_FIELD_LABEL[fld.kind]} without a number"
                ),
            )
        if fld.junk:
            st.add(
                lineno,
                Severity.WARNING,
                "FIELD_KEY_MANGLED",
                f"the field key {text.strip().split(':', 1)[0]!r} has extra text "
                f"{fld.junk!r}; read it as {_FIELD_LABEL[fld.kind]}",
            )
        if fld.kind == "task":
            if (
                current is not None
                and fld.key.lower() != current.opening.key.lower()
                and fld.num == current.id
                and not any(f.kind == "task" for f in current.fields[1:])
            ):
                # "#Step1: title" followed by "#Task1: text": one block.
                current.fields.append(fld)
            else:
                current = _Block(fld.num, fld, [fld])
                blocks.append(current)
        elif current is None:
            st.add(
                lineno,
                Severity.WARNING,
                "FIELD_OUTSIDE_STEP",
                f"{fld.label} comes before any #Task/#Step line; ignored",
            )
            return None
        else:
            current.fields.append(fld)
        return fld

    for idx, (lineno, text) in enumerate(lines):
        if args_fence and open_field is not None:
            if _FENCE_RE.match(text):
                fences.append(lineno)
                args_fence = False
                open_field = None
                continue
            if _match_field(text) is None:
                if text.strip():
                    last_content = lineno
                take(open_field, lineno, text)
                continue
            args_fence = False  # an unclosed fence: the next field ends the value
        if _FENCE_RE.match(text):
            fences.append(lineno)
            nxt = _next_content(lines, idx + 1)
            if empty_args(open_field) and nxt is not None and _starts_args_value(nxt):
                args_fence = True  # "#Args1:" then a fenced JSON block
                continue
            open_field = None
            continue
        if not text.strip():
            if not empty_args(open_field):
                open_field = None
            continue
        last_content = lineno
        if _SEPARATOR_RE.match(text):
            open_field = None
            continue
        fld = _match_field(text)
        if fld is not None:
            flush_prose()
            parts = _split_inline(fld)
            if len(parts) > 1:
                st.add(
                    lineno,
                    Severity.WARNING,
                    "FIELDS_ON_ONE_LINE",
                    f"line {lineno} holds {len(parts)} fields "
                    f"({', '.join(f.label for f in parts)}); read them as separate lines",
                )
            for part in parts:
                open_field = add_field(part, lineno, text)
            if open_field is not None and open_field.kind == "args":
                opener = _FENCE_OPENER_RE.match(open_field.value)
                if opener is not None:  # "#Args1: ```json" with the JSON below
                    open_field.values = [""]
                    fences.append(lineno)
                    args_fence = True
            continue
        if open_field is not None and (
            (
                _starts_args_value(text)
                if not open_field.filled
                else open_field.brackets_open
            )
            if open_field.kind == "args"
            else not _HEADING_RE.match(text)
        ):
            take(open_field, lineno, text)
            continue
        open_field = None
        prose.append((lineno, text))
    flush_prose()
    if fences:
        st.add(
            fences[0],
            Severity.INFO,
            "CODE_FENCE",
            f"ignored code fence marker(s) on line(s) {', '.join(map(str, fences[:10]))}",
        )
    for fld in multiline:
        st.add(
            fld.line,
            Severity.INFO,
            "MULTILINE_VALUE",
            f"{fld.label} continues on lines {fld.line + 1}-{fld.end_line}; "
            "read them as one value",
        )
    return blocks, last_content


# ---------------------------------------------------------------------------
# Drafts
# ---------------------------------------------------------------------------


def _split_drafts(blocks: list[_Block], st: _State) -> list[list[_Block]]:
    drafts: list[list[_Block]] = []
    for block in blocks:
        draft = drafts[-1] if drafts else None
        if block.id is None:
            prev = draft[-1].id if draft else 0
            block.id = (prev or 0) + 1
            st.add(
                block.first_line,
                Severity.WARNING,
                "STEP_NUMBER_MISSING",
                f"{block.opening.label}: has no step number; numbered it {block.id}",
                block.id,
            )
            if draft is None:
                drafts.append([block])
            else:
                draft.append(block)
            continue
        first = draft[0].id if draft else None
        if draft is None or first is None or block.id <= first:
            drafts.append([block])
        else:
            draft.append(block)
    return drafts


def _mark_truncation(
    drafts: list[list[_Block]], last_content: int, st: _State
) -> None:
    """Mark the last block truncated when the reply ends inside it."""
    if not drafts:
        return
    draft = drafts[-1]
    block = draft[-1]
    if block.last_line < last_content:
        return  # the reply went on after the block: not cut off
    last = max(block.fields, key=lambda f: (f.end_line, f.line))
    if not last.value:
        block.truncated = True
        return
    if _open_brackets(last.value):
        block.truncated = True
        return
    present = {f.kind for f in block.fields}
    siblings = [b for b in draft[:-1]]
    if not siblings:
        return
    common = set.intersection(*({f.kind for f in b.fields} for b in siblings))
    after = _FIELD_ORDER[_FIELD_ORDER.index(last.kind) + 1 :]
    if any(k in common and k not in present for k in after):
        block.truncated = True


def _choose_draft(
    drafts: list[list[_Block]], policy: str, st: _State
) -> list[_Block]:
    if len(drafts) == 1:
        return drafts[0]

    def span(d: list[_Block]) -> str:
        return f"lines {d[0].first_line}-{d[-1].last_line}"

    complete = [i for i, d in enumerate(drafts) if not any(b.truncated for b in d)]
    if policy == "first":
        idx, why = 0, "the first one (policy 'first')"
    elif policy == "last":
        idx, why = len(drafts) - 1, "the last one (policy 'last')"
    elif complete:
        idx, why = complete[-1], "the last complete one (policy 'last_complete')"
    else:
        idx, why = len(drafts) - 1, "the last one, as none is complete (policy 'last_complete')"
    spans = ", ".join(f"{n + 1}: {span(d)}" for n, d in enumerate(drafts))
    st.add(
        drafts[idx][0].first_line,
        Severity.INFO,
        "DRAFTS_FOUND",
        f"found {len(drafts)} drafts of the plan ({spans}); using draft {idx + 1}, {why}",
    )
    return drafts[idx]


# ---------------------------------------------------------------------------
# Building steps
# ---------------------------------------------------------------------------


def _pick_fields(block: _Block, sid: int, st: _State, conflicts: set[str]) -> dict[str, _Field]:
    """The field of each kind: the first non-empty one.

    ``conflicts`` gets each kind of ``#Tool``/``#Args`` written again with another value.
    """
    chosen: dict[str, _Field] = {}
    mismatched: list[_Field] = []
    for fld in block.fields:
        if fld is not block.opening and fld.num is not None and fld.num != sid:
            mismatched.append(fld)
        elif fld is not block.opening and fld.num is None and fld.raw_num is not None:
            mismatched.append(fld)
        kind = fld.kind
        if kind == "task" and fld is block.opening and len(
            [f for f in block.fields if f.kind == "task"]
        ) > 1:
            continue  # a "#Step1: title" line followed by "#Task1: text"
        prev = chosen.get(kind)
        if prev is None or (not prev.value and fld.value):
            if prev is not None:
                st.add(
                    fld.line,
                    Severity.WARNING,
                    "DUPLICATE_FIELD",
                    f"{_FIELD_LABEL[kind]} appears again on line {fld.line} after an empty "
                    f"one on line {prev.line}; kept the non-empty value",
                    sid,
                )
            chosen[kind] = fld
            continue
        same = "".join(prev.value.split()) == "".join(fld.value.split())
        guess = not same and kind in ("tool", "args")  # which one is meant is not known
        if guess:
            conflicts.add(kind)
        st.add(
            fld.line,
            Severity.ERROR if guess else Severity.WARNING,
            "DUPLICATE_FIELD",
            f"{_FIELD_LABEL[kind]} of step {sid} appears again on line {fld.line}"
            + (
                " with the same value; ignored the repeat"
                if same
                else f" with another value {snippet(fld.value, 40)!r} than "
                f"{snippet(prev.value, 40)!r} (line {prev.line}); which one is meant is not "
                "known: the step must not run as written"
                if guess
                else f"; kept the first value {snippet(prev.value, 40)!r} (line {prev.line}),"
                f" ignored {snippet(fld.value, 40)!r}"
            ),
            sid,
        )
    if mismatched:
        labels = ", ".join(f"{f.label} (line {f.line})" for f in mismatched)
        st.add(
            mismatched[0].line,
            Severity.WARNING,
            "FIELD_NUMBER_MISMATCH",
            f"field number(s) disagree with their step: {labels}; attached to step {sid}, "
            f"the enclosing {block.opening.label} block",
            sid,
        )
    return chosen


_TYPE_WORD = (
    r"(?:str|string|text|int|integer|float|number|double|bool|boolean|any|list|dict|"
    r"object|array|tuple|datetime|date|time|json|mapping|sequence)"
)
_TYPE_RE = (
    r"(?:optional\s*\[[^\]]*\]|" + _TYPE_WORD + r"(?:\s*\[[^\]]*\])?\s*\??"
    r"(?:\s*\|\s*(?:" + _TYPE_WORD + r"|none|null)\s*\??)*)"
)
_ECHO_RE = re.compile(r"^\s*[A-Za-z_]\w*\s*\??\s*(?:[:=]\s*" + _TYPE_RE + r")?\s*$", re.I)


def _split_items(text: str) -> list[str] | None:
    """Split call arguments at top-level commas; None when quotes or brackets do not close."""
    items: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        i += 1
    if quote or depth:
        return None
    items.append(text[start:])
    return items


def _inline_args(
    call: ToolCall, *, truncated: bool, sid: int, st: _State, deps: tuple[int, ...]
) -> tuple[dict[str, Any], tuple[Any, ...], bool]:
    """Read the arguments written inside the ``#Tool`` call: ``(args, positional, valid)``."""
    line = call.line
    shown = snippet(call.text.strip(), 60)
    if not call.closed:
        code = "ARGS_TRUNCATED" if truncated else "ARGS_SYNTAX"
        cut = " (the reply ends there)" if truncated else ""
        st.add(line, Severity.ERROR, code,
               f"the call in #Tool of step {sid} has no closing ')'{cut}: {shown!r}; its "
               "arguments cannot be read and the step must not run as written", sid)
        return {}, (), False
    items = _split_items(call.text)
    text = call.text
    if items is not None:
        echo = [it.strip() for it in items if it.strip() and _ECHO_RE.match(it)]
        if echo:
            st.add(line, Severity.WARNING, "TOOL_NAME_NORMALIZED",
                   f"#Tool of step {sid} only names parameters inside the parentheses "
                   f"({snippet(', '.join(echo), 60)!r}): a signature, no values; no argument "
                   "read from it", sid)
            text = ",".join(it for it in items if not _ECHO_RE.match(it))
            if not text.strip().strip(","):
                return {}, (), True
    try:
        read = read_call_args(text, dialect="hashstep")
    except RepairFailure as fail:
        code = "ARGS_TRUNCATED" if fail.truncated and truncated else "ARGS_SYNTAX"
        st.add(line, Severity.ERROR, code,
               f"the arguments in #Tool of step {sid} are not readable: {fail.message} "
               f"(in {shown!r}); the step must not run as written", sid)
        return {}, (), False
    for rep in read.repairs:
        if rep in read.placeholder_repairs:
            continue  # placeholders need no quotes in a call; references report them
        st.add(line, Severity.WARNING, "ARGS_REPAIRED",
               f"arguments in #Tool of step {sid}: repaired {rep}", sid)
    for prob in read.problems:
        st.add(line, Severity.WARNING, "ARGS_POSITIONAL",
               f"#Tool of step {sid}: {prob}", sid)
    if read.positional:
        st.add(line, Severity.WARNING, "ARGS_POSITIONAL",
               f"the call in #Tool of step {sid} passes {len(read.positional)} positional "
               "argument(s); bound to the tool's first parameters in order", sid)
    found = find_refs(read.kwargs, dialect="hashstep", location="args")
    args = dict(found) if isinstance(found, dict) else {}
    positional = tuple(
        find_refs(v, dialect="hashstep", location=f"positional[{i}]")
        for i, v in enumerate(read.positional)
    )
    raw_value: Any = read.kwargs
    if read.positional:
        raw_value = [read.kwargs, *read.positional]
    return _check_args(args, positional, raw_value, line=line, sid=sid, st=st, deps=deps,
                       what="the call in #Tool")


def _same(a: Any, b: Any) -> bool:
    """Whether two argument values say the same (references compared by their text)."""
    return bool(_canon(a) == _canon(b))


def _canon(v: Any) -> Any:
    if isinstance(v, Ref):
        return ("ref", v.step, v.path, v.hint)
    if isinstance(v, Template):
        return ("tmpl", v.canonical)
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_canon(x) for x in v]
    return v


def _shown(v: Any) -> str:
    if isinstance(v, Ref | Template):
        return v.canonical
    return repr(v)


def _parse_deps(value: str, line: int, sid: int, st: _State) -> tuple[int, ...]:
    cleaned = value.replace("*", " ").replace("`", " ").strip()
    if cleaned.lower().rstrip(".") in NONE_WORDS:
        return ()
    deps: set[int] = set()
    bad: list[str] = []
    for tok in re.split(r"[,;\s]+", cleaned):
        if not tok or tok.lower() in {"and", "&", "+"}:
            continue
        m = _DEP_TOKEN_RE.match(tok)
        if m:
            deps.add(int(m.group(1)))
        else:
            bad.append(tok)
    if bad:
        st.add(
            line,
            Severity.WARNING,
            "DEPENDENCY_UNREADABLE",
            f"#Dependency of step {sid} has words that name no step: "
            f"{snippet(' '.join(bad), 50)!r}; read only {sorted(deps) or 'none'}",
            sid,
        )
    return tuple(sorted(deps))


def _parse_args(
    fld: _Field | None,
    *,
    tool: str | None,
    truncated: bool,
    sid: int,
    st: _State,
    deps: tuple[int, ...] = (),
) -> tuple[dict[str, Any], tuple[Any, ...], bool, str | None]:
    """Return (args, positional, args_valid, args_text) for one step."""
    if fld is None:
        return {}, (), True, None
    text = fld.value
    line = fld.line
    stripped = text.strip().strip("`").strip()
    if stripped.lower() in {"", "none", "null", "nil", "n/a", "no arguments"}:
        if not stripped and truncated:
            st.add(
                line,
                Severity.ERROR,
                "ARGS_TRUNCATED",
                f"#Args of step {sid} is cut off (the reply ends there); "
                "the step must not run as written",
                sid,
            )
            return {}, (), False, text
        what = repr(stripped) if stripped else "empty (no arguments given, on its line or below)"
        st.add(
            line,
            Severity.WARNING,
            "ARGS_NONE",
            f"#Args of step {sid} is {what}, not a JSON object; read as no arguments ({{}})",
            sid,
        )
        return {}, (), True, text
    result = repair_json(text)
    if result.error is not None:
        code = "ARGS_TRUNCATED" if (result.truncated or truncated) else "ARGS_SYNTAX"
        what = "is cut off" if code == "ARGS_TRUNCATED" else "is not readable JSON"
        st.add(
            line,
            Severity.ERROR,
            code,
            f"#Args of step {sid} {what}: {result.error} (in {snippet(text, 50)!r}); "
            "the step must not run as written",
            sid,
        )
        return {}, (), False, text
    for repair in result.repairs:
        st.add(
            line,
            Severity.WARNING,
            "ARGS_REPAIRED",
            f"#Args of step {sid}: repaired {repair}",
            sid,
        )
    value = result.value
    args: dict[str, Any] = {}
    positional: tuple[Any, ...] = ()
    if value is None:
        st.add(
            line,
            Severity.WARNING,
            "ARGS_NONE",
            f"#Args of step {sid} is null; read as no arguments ({{}})",
            sid,
        )
    elif isinstance(value, dict):
        found = find_refs(value, dialect="hashstep", location="args")
        args = dict(found) if isinstance(found, dict) else {}
    else:
        found = find_refs(value, dialect="hashstep", location="positional[0]")
        positional = (found,)
        kind = "a reference" if isinstance(found, Ref) else type(value).__name__
        st.add(
            line,
            Severity.WARNING,
            "ARGS_POSITIONAL",
            f"#Args of step {sid} is {kind} ({snippet(text, 40)!r}), not a JSON object; "
            "bound as the single positional argument (the tool's first parameter)",
            sid,
        )
    args, positional, valid = _check_args(
        args, positional, value, line=line, sid=sid, st=st, deps=deps, what="#Args"
    )
    return args, positional, valid, text


def _check_args(
    args: dict[str, Any],
    positional: tuple[Any, ...],
    value: Any,
    *,
    line: int,
    sid: int,
    st: _State,
    deps: tuple[int, ...],
    what: str,
) -> tuple[dict[str, Any], tuple[Any, ...], bool]:
    """Bind free-text placeholders and report what the arguments hold that is no value.

    Args:
        args: the keyword arguments, after `find_refs`.
        positional: the positional arguments, after `find_refs`.
        value: the arguments as read (before `find_refs`), for their dict keys.
        line: the line the arguments are on.
        sid: the step.
        st: where diagnostics go.
        deps: the step's declared dependencies (for free-text placeholders).
        what: where the arguments were written (``"#Args"``, ``"the #Tool call"``).

    Returns:
        ``(args, positional, args_valid)``.
    """
    bound, free = free_placeholders(args, deps, location="args")
    args = dict(bound) if isinstance(bound, dict) else args
    if positional:
        pbound, pfree = free_placeholders(list(positional), deps, location="positional")
        positional = tuple(pbound)
        free += pfree
    for ref in free:
        if ref.step == NO_STEP:
            how = (f"names no step and step {sid} declares no dependency, so it is a missing "
                   "reference: the step fails unless the plan is fixed")
        elif free_step_mention(ref.hint or "") is not None:
            how = f"names step {ref.step}: a hinted reference to it"
        else:
            how = (f"names no step: a hinted reference over the declared dependencies "
                   f"({', '.join(map(str, deps))})")
        st.add(
            line,
            Severity.WARNING,
            "REF_HINTED",
            f"{ref.location} of step {sid} holds the free-text placeholder {ref.raw!r}, which "
            f"{how}{'' if ref.step == NO_STEP else '; ' + HINTED_BY} "
            "(never passed to a tool as text)",
            sid,
        )
    for ref in iter_refs([args, list(positional)]):
        if ref.is_hinted and all(ref is not f for f in free):
            st.add(
                line,
                Severity.WARNING,
                "REF_HINTED",
                f"{ref.location} of step {sid} ({ref.raw}) names step {ref.step} with words "
                f"the grammar cannot follow; {HINTED_BY}",
                sid,
            )
    targets: list[tuple[Any, str, str]] = []  # (value, location, path shown)
    if args or not positional:
        targets.append((args, "args", "args"))
    for i, p in enumerate(positional):
        shown = "args" if len(positional) == 1 else f"positional[{i}]"
        targets.append((p, f"positional[{i}]", shown))
    for target, loc, shown in targets:
        _check_target(target, loc, shown, line=line, sid=sid, st=st)
    bad_keys = list(keys_with_refs(value, "args"))
    if bad_keys:
        where = "; ".join(f"{path} key {key!r}" for path, key, _ in bad_keys[:5])
        if any(is_ref for _, _, is_ref in bad_keys):
            st.add(
                line,
                Severity.ERROR,
                "REF_IN_KEY",
                f"{what} of step {sid} has a reference in a dict key ({where}); keys are "
                "never resolved, so the tool would get the placeholder as a key; the step "
                "must not run as written",
                sid,
            )
            return args, positional, False
        st.add(
            line,
            Severity.WARNING,
            "PLACEHOLDER_UNRECOGNIZED",
            f"{what} of step {sid} has a placeholder-looking dict key ({where}); the "
            "executor will refuse to pass it to a tool",
            sid,
        )
    return args, positional, True


def _check_target(target: Any, loc: str, shown: str, *, line: int, sid: int, st: _State) -> None:
    """Report placeholder-like text, malformed, suffixed and nested references in one value."""
    for path, s in walk_strings(target, shown):
        if contains_placeholder(s):
            st.add(
                line,
                Severity.WARNING,
                "PLACEHOLDER_UNRECOGNIZED",
                f"{path} of step {sid} holds {snippet(s, 40)!r}, which looks like a "
                "placeholder but is no reference the grammar reads; the executor will "
                "refuse to pass it to a tool",
                sid,
            )
    for where, excerpt in find_malformed(
        target,
        dialect="hashstep",
        location=loc,
    ):
        st.add(line, Severity.WARNING, "REF_MALFORMED", ref_malformed_message(where, excerpt, sid),
               sid)
    for ref, suffix in path_like_suffixes(target):
        st.add(line, Severity.WARNING, "REF_SUFFIX_TEXT", ref_suffix_message(ref, suffix, sid),
               sid)
    for path, tmpl, ref in _nested_refs(target, shown):
        st.add(
            line,
            Severity.WARNING,
            "REF_NESTED",
            f"{path} of step {sid} holds the reference {ref.raw!r} inside another "
            f"placeholder ({snippet(tmpl.canonical, 60)!r}); references are never evaluated, "
            "so the outer one cannot be read: only the LLM fallback can resolve it",
            sid,
        )


def _merge_inline(
    call: ToolCall,
    written: tuple[dict[str, Any], tuple[Any, ...], bool, str | None],
    *,
    has_args: bool,
    truncated: bool,
    sid: int,
    st: _State,
    deps: tuple[int, ...],
) -> tuple[dict[str, Any], tuple[Any, ...], bool, str | None]:
    """Merge the arguments of the ``#Tool`` call with those of ``#Args``.

    A key given in both with different values is an ``ARGS_CONFLICT`` error naming both
    (the step's arguments become invalid; neither is picked); the same value twice is
    fine. Positional arguments in both are a conflict unless they are equal.
    """
    args, positional, valid, args_text = written
    i_args, i_pos, i_valid = _inline_args(call, truncated=truncated, sid=sid, st=st, deps=deps)
    merged = dict(args)
    conflicts: list[str] = []
    for key, value in i_args.items():
        if key in merged and not _same(merged[key], value):
            conflicts.append(f"{key!r}: {_shown(value)} in #Tool, {_shown(merged[key])} in #Args")
        elif key not in merged:
            merged[key] = value
    pos = positional
    if i_pos:
        if positional and not _same(list(positional), list(i_pos)):
            conflicts.append(
                f"positional arguments: {', '.join(map(_shown, i_pos))} in #Tool, "
                f"{', '.join(map(_shown, positional))} in #Args"
            )
        pos = positional or i_pos
    if conflicts:
        st.add(call.line, Severity.ERROR, "ARGS_CONFLICT",
               f"step {sid} gives different values in its #Tool call and in #Args: "
               f"{snippet('; '.join(conflicts), 200)}; neither is picked, the step must not "
               "run as written", sid)
    text = call.text if not has_args else f"{args_text or ''}\n#Tool({call.text})"
    return merged, pos, valid and i_valid and not conflicts, text


_OPEN_PLACEHOLDER_RE = re.compile(r"(?:\{\{?|<|\[)\s*step_?\d+[^{}<>\[\]\n]*[.\[]?\s*$",
                                  re.IGNORECASE)
_CLOSE_PLACEHOLDER_RE = re.compile(r"^[^{}<>\n]*?[}>\]]")


def _nested_refs(value: Any, path: str) -> Iterable[tuple[str, Template, Ref]]:
    """References written inside another placeholder: ``{step_1[{step_1.site}]}``."""
    if isinstance(value, Template):
        parts = value.parts
        for i, part in enumerate(parts):
            if not isinstance(part, Ref) or i == 0 or i + 1 >= len(parts):
                continue
            before, after = parts[i - 1], parts[i + 1]
            if (
                isinstance(before, str)
                and isinstance(after, str)
                and _OPEN_PLACEHOLDER_RE.search(before)
                and _CLOSE_PLACEHOLDER_RE.match(after)
            ):
                yield path, value, part
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _nested_refs(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _nested_refs(v, f"{path}[{i}]")


def _build_step(block: _Block, st: _State) -> Step | None:
    assert block.id is not None
    sid = block.id
    conflicts: set[str] = set()
    fields = _pick_fields(block, sid, st, conflicts)
    task_f = fields.get("task")
    task = task_f.value if task_f else ""
    server_f = fields.get("server")
    server: str | None = None
    if server_f is not None:
        sv = server_f.value.strip().strip("`*\"' ")
        server = None if sv.lower() in NONE_WORDS else sv
    present = set(fields)
    if block.truncated and present == {"task"} and not task:
        st.add(
            block.first_line,
            Severity.WARNING,
            "TRUNCATED_STEP_DROPPED",
            f"step {sid} was cut off right after {block.opening.label}: (the reply ends "
            "there); it has no content and was dropped",
            sid,
        )
        return None
    tool: str | None = None
    call: ToolCall | None = None
    tool_f = fields.get("tool")
    if tool_f is not None:
        got = read_tool(tool_f.value, line=tool_f.line, step=sid, diags=st, server=server,
                        calls=True, empty_warning=True)
        tool, server, call = got.tool, got.server, got.call
    explicit: tuple[int, ...] = ()
    deps_f = fields.get("deps")
    if deps_f is not None:
        explicit = _parse_deps(deps_f.value, deps_f.line, sid, st)
    args, positional, valid, args_text = _parse_args(
        fields.get("args"), tool=tool, truncated=block.truncated, sid=sid, st=st,
        deps=explicit,
    )
    if call is not None:
        args, positional, valid, args_text = _merge_inline(
            call, (args, positional, valid, args_text), has_args=fields.get("args") is not None,
            truncated=block.truncated, sid=sid, st=st, deps=explicit,
        )
    if conflicts:
        valid = False  # the DUPLICATE_FIELD error says why
    expected_f = fields.get("expected")
    expected = expected_f.value if expected_f else None
    if block.truncated and valid:
        missing_core = [
            k for k in ("tool", "args") if k not in present or not fields[k].value
        ]
        if missing_core and block.siblings_have(missing_core):
            valid = False
            st.add(
                block.last_line,
                Severity.ERROR,
                "STEP_INCOMPLETE",
                f"step {sid} is cut off before "
                f"{', '.join(_FIELD_LABEL[k] for k in missing_core)} (the reply ends there); "
                "the step must not run as written",
                sid,
            )
        else:
            st.add(
                block.last_line,
                Severity.WARNING,
                "STEP_TRUNCATED",
                f"the reply ends inside step {sid} ({snippet(expected or task, 40)!r} is "
                "cut off); the step is kept, later steps may be missing",
                sid,
            )
    step = Step(
        id=sid,
        task=task,
        tool=tool,
        args=args,
        positional=positional,
        args_valid=valid,
        args_text=args_text,
        server=server,
        no_tool=tool_f is not None and tool is None,  # "#Tool: none": reasoning, not selection
        cut_off=block.truncated,  # the reply ends inside this step
        explicit_deps=explicit,
        expected_output=expected,
        lines=(block.first_line, block.last_line),
    )
    referenced = {r.step for r in iter_refs(args)} | {r.step for r in iter_refs(positional)}
    added = sorted(referenced - set(explicit))
    if added and deps_f is not None:
        st.add(
            deps_f.line,
            Severity.INFO,
            "DEPENDENCY_ADDED",
            f"step {sid} refers to step(s) {', '.join(map(str, added))} in #Args without "
            "listing them in #Dependency; added them",
            sid,
        )
    if tool is None:
        args_f = fields.get("args")
        # "#Tool2: none" with "#Args2: {"assets": "{step_1}"}" names the inputs of a
        # reasoning step: fine. Literal values, or #Args with no #Tool at all, are not.
        if args_f is not None and (
            (tool_f is None and (args or positional)) or has_literal(args, positional)
        ):
            why = "has no #Tool" if tool_f is None else "has #Tool none"
            st.add(
                args_f.line,
                Severity.WARNING,
                "ARGS_WITHOUT_TOOL",
                f"step {sid} {why} but has #Args ({snippet(args_f.value, 40)!r}): it is a "
                "reasoning step, so no tool receives them; they are kept on the step and "
                "shown to the reasoning model",
                sid,
            )
        # A reasoning step answers from the steps its task text refers to.
        in_task = {r.step for r in iter_refs(find_refs(task, location="task"))} - {sid}
        new_deps = sorted(in_task - set(explicit) - referenced)
        if new_deps:
            st.add(
                task_f.line if task_f else block.first_line,
                Severity.INFO,
                "DEPENDENCY_ADDED",
                f"step {sid} refers to step(s) {', '.join(map(str, new_deps))} in its #Task "
                "text without listing them in #Dependency; added them (their results are "
                "given to the reasoning step)",
                sid,
            )
        referenced |= in_task
    depends = tuple(sorted(set(explicit) | referenced))
    return replace(step, depends_on=depends)


# ---------------------------------------------------------------------------
# The fast path: a plan written in the plain shape, read at once
# ---------------------------------------------------------------------------

# One block of the plain shape: the four fields, in order, each on one line, with the
# block's number repeated, then the blank lines before the next block. Nothing in it can
# be a field number mismatch, an inline field, a multi-line value, a heading, prose,
# bold or a code fence: the general path reads such a block field by field and reports
# nothing about it.
_PLAIN_BLOCK_RE = re.compile(
    r"#(?:Step|Task)(\d{1,9}):[ \t]*([^\s#*_`\\$<>{}\[\]|][^\n#*`\\$<>{}\[\]|]*)\n"
    r"#Tool\1:[ \t]*([A-Za-z_][\w\-]*)[ \t]*\n"
    r"#Args\1:[ \t]*(\{[^\n]*\})[ \t]*\n"
    r"#Dependency\1:[ \t]*((?:#?[SsEe]?\d{1,9}(?:[ \t]*,[ \t]*#?[SsEe]?\d{1,9})*"
    r"|None|none|NONE))[ \t]*(?:\n|\Z)(\n*)"
)
_DIGITS_RE = re.compile(r"\d+")
# A string that holds no reference, placeholder or malformed reference of any kind: no
# character that opens one, no step word (`contains_placeholder` flags nothing without
# ``[<{#$]`` or ``step``; `malformed_refs` and `free_placeholders` need a bracket).
_PLAIN_TEXT_RE = re.compile(r"[^<>{}\[\]#$\\`|*\x00-\x1f]*\Z")
# A key `format_path` writes ``.key``, without the step word (`contains_placeholder`).
_PLAIN_KEY_RE = re.compile(r"(?![\w]*[Ss][Tt][Ee][Pp])[A-Za-z_][A-Za-z0-9_]*\Z")
# A string that is exactly one reference without spaces: its step, and its path (read
# by `parse_ref` when there is one).
_PLAIN_REF_RE = re.compile(
    r"(?:<step_(\d{1,9})((?:\.[A-Za-z_]\w*|\[\d{1,9}\])*)>"
    r"|\{step_(\d{1,9})((?:\.[A-Za-z_]\w*|\[\d{1,9}\])*)\})\Z"
)


class _NotPlain(Exception):
    """A value the fast path is not sure about: the general path reads the plan."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotPlain  # a key given twice: the general path reports it
    return out


def _reject_constant(name: str) -> Any:
    raise _NotPlain  # NaN / Infinity: the general path's tolerant reader repairs them


_PLAIN_JSON = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
"""Strict JSON (as `repair_json` reads it first), refusing what the general path reports."""
_FLAT_JSON = json.JSONDecoder(parse_constant=_reject_constant)
"""`_PLAIN_JSON` without looking at each object's keys (see `_plain_step`)."""


# The slots (the fields, in order) of `Ref` and `Step`, each set by its member
# descriptor: what their constructors do through ``object.__setattr__``, at half the
# cost. (A field added or moved shows here, when the names no longer unpack, or in the
# fast path's differential test, which compares every field with the general path's.)
_REF_STEP, _REF_PATH, _REF_HINT, _REF_RAW, _REF_WHOLE, _REF_LOCATION = (
    vars(Ref)[f.name].__set__ for f in dataclasses.fields(Ref)
)
(
    _STEP_ID, _STEP_TASK, _STEP_TOOL, _STEP_ARGS, _STEP_POSITIONAL, _STEP_ARGS_VALID,
    _STEP_ARGS_TEXT, _STEP_SERVER, _STEP_NO_TOOL, _STEP_CUT_OFF, _STEP_DEPENDS_ON,
    _STEP_EXPLICIT_DEPS, _STEP_EXPECTED_OUTPUT, _STEP_LINES,
) = (vars(Step)[f.name].__set__ for f in dataclasses.fields(Step))


def _whole_ref(step: int, raw: str, loc: str) -> Ref:
    """``Ref(step, (), None, raw, True, loc)``, filled at once (half the constructor's cost).

    `Ref` is a frozen dataclass with slots and without ``__post_init__``: the same object
    (the fast path's differential test compares every plan's references with the general
    path's).
    """
    ref = object.__new__(Ref)
    _REF_STEP(ref, step)
    _REF_PATH(ref, ())
    _REF_HINT(ref, None)
    _REF_RAW(ref, raw)
    _REF_WHOLE(ref, True)
    _REF_LOCATION(ref, loc)
    return ref


def _plain_value(value: Any, loc: str, refs: set[int]) -> Any:
    """``value`` as `find_refs` and `free_placeholders` leave it, when nothing is reported.

    Raises `_NotPlain` for anything the general path might report or read otherwise.
    """
    if type(value) is str:
        if _PLAIN_TEXT_RE.match(value) is not None:
            if "step" in value.lower():
                raise _NotPlain  # maybe an identifier naming a step ("step_2")
            return value
        m = _PLAIN_REF_RE.match(value)
        if m is None:
            raise _NotPlain
        if m.group(2) == "" or m.group(4) == "":  # "<step_3>": no path to read
            step = int(m.group(1) or m.group(3))
            refs.add(step)
            return _whole_ref(step, value, loc)
        ref = parse_ref(value)
        if ref is None:
            raise _NotPlain
        refs.add(ref.step)
        return Ref(ref.step, ref.path, None, ref.raw, True, loc)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if _PLAIN_TEXT_RE.match(k) is None or "step" in k.lower():
                raise _NotPlain  # a key that may look like a placeholder
            out[k] = _plain_value(v, loc + format_path((k,)), refs)  # as `find_refs` writes
        return out
    if isinstance(value, list):
        return [_plain_value(v, f"{loc}[{i}]", refs) for i, v in enumerate(value)]
    if value is None or type(value) in (bool, int, float):
        return value
    raise _NotPlain  # pragma: no cover - JSON holds nothing else


def _plain_step(m: re.Match[str], line: int) -> Step:
    """One block of the plain shape as `_build_step` builds it (raises `_NotPlain`)."""
    sid, task, tool, args_text, deps_text, _ = m.groups()
    if tool.lower() in NONE_WORDS:
        raise _NotPlain  # "#Tool1: none": a reasoning step
    try:
        value, stop = _FLAT_JSON.raw_decode(args_text)
        if type(value) is dict and len(value) != args_text.count(":"):
            # Each key is followed by a colon: as many keys in the dict as colons in the
            # text means no nested object and no key given twice. Else the keys are read.
            value, stop = _PLAIN_JSON.raw_decode(args_text)
    except ValueError:
        raise _NotPlain from None  # the general path repairs it or reports it
    if stop != len(args_text) or type(value) is not dict:
        raise _NotPlain  # text after the object: the general path reports it
    refs: set[int] = set()
    args: dict[str, Any] = value  # read just now: its values are replaced in place
    for key, v in value.items():  # `_plain_value` of the dict, its common case at once
        if _PLAIN_KEY_RE.match(key) is None:
            args[key] = _plain_value({key: v}, "args", refs)[key]
            continue
        loc = "args." + key  # `format_path` of an identifier
        if type(v) is str:
            ref = _PLAIN_REF_RE.match(v)
            if ref is not None and (ref.group(2) == "" or ref.group(4) == ""):
                step = int(ref.group(1) or ref.group(3))
                refs.add(step)
                args[key] = _whole_ref(step, v, loc)
                continue
        args[key] = _plain_value(v, loc, refs)
    digits = _DIGITS_RE.findall(deps_text)
    if len(digits) == 1:
        explicit: tuple[int, ...] = (int(digits[0]),)
    else:
        explicit = tuple(sorted({int(d) for d in digits}))
    if not refs.issubset(explicit):
        raise _NotPlain  # the general path adds them with DEPENDENCY_ADDED
    made = object.__new__(Step)  # `Step(...)` with these fields, as `_whole_ref` fills a Ref
    _STEP_ID(made, int(sid))
    _STEP_TASK(made, task.strip())
    _STEP_TOOL(made, tool)
    _STEP_ARGS(made, args)
    _STEP_POSITIONAL(made, ())
    _STEP_ARGS_VALID(made, True)
    _STEP_ARGS_TEXT(made, args_text)
    _STEP_SERVER(made, None)
    _STEP_NO_TOOL(made, False)
    _STEP_CUT_OFF(made, False)
    _STEP_DEPENDS_ON(made, explicit)
    _STEP_EXPLICIT_DEPS(made, explicit)
    _STEP_EXPECTED_OUTPUT(made, None)
    _STEP_LINES(made, (line, line + 3))
    return made


def _read_plain(text: str) -> Plan | None:
    """The fast path of `parse_hashstep`: a plan of plain blocks only, read at once.

    Every block is ``#StepN: task`` / ``#ToolN: name`` / ``#ArgsN: {JSON object}`` /
    ``#DependencyN: #S1, #S2`` (or ``None``), with increasing numbers, blank lines
    between blocks, and arguments whose strings are plain text or whole references the
    step depends on: a plan the general path reads without a single diagnostic, into
    the same steps. Anything else (one block in doubt is enough) gives None, and the
    general path reads the whole plan.
    """
    if "\r" in text or any(marker in text for marker in REASONING_MARKERS):
        return None
    pos = len(text) - len(text.lstrip("\n"))  # blank lines before the first block
    line = pos + 1
    steps: list[Step] = []
    last = 0
    try:
        for m in _PLAIN_BLOCK_RE.finditer(text, pos):
            if m.start() != pos:
                return None  # text between blocks
            step = _plain_step(m, line)
            if step.id <= last:
                return None  # a repeated or restarting number: drafts, duplicates
            last = step.id
            steps.append(step)
            pos = m.end()
            line += 4 + len(m.group(6)) - (text[m.start(6) - 1] != "\n")
    except _NotPlain:
        return None
    if not steps or pos != len(text):
        return None
    return Plan(steps=tuple(steps), diagnostics=(), dialect="hashstep", source=text)


def _no_plan_message(text: str, lines: list[tuple[int, str]]) -> str:
    if not text.strip():
        return "empty reply"
    body = " ".join(t.strip() for _, t in lines if t.strip()) or text.strip()
    return f"prose without any step: {snippet(body, 80)!r}"


def parse_hashstep(text: str, *, draft_policy: str = "last_complete") -> Plan:
    """Parse a plan written in the hashstep dialect.

    Args:
        text: The planner's reply, exactly as received.
        draft_policy: Which draft to use when the reply holds several:
            ``"last_complete"`` (default: the last draft whose steps are not cut
            off), ``"first"`` or ``"last"``.

    Returns:
        The plan with every deviation as a `Diagnostic` (``dialect="hashstep"``).

    Raises:
        PlanParseError: the text holds no step; the message says what it holds
            instead (``"empty reply"``, ``"prose without any step: '...'"``).
        ValueError: ``draft_policy`` is not one of `DRAFT_POLICIES`.
    """
    if draft_policy not in DRAFT_POLICIES:
        raise ValueError(
            f"unknown draft policy {draft_policy!r}; expected one of {DRAFT_POLICIES}"
        )
    if _fastpaths.ON:  # the fast path (`planexec._fastpaths`): plain plans read at once
        plain = _read_plain(text)
        if plain is not None:
            return plain
    st = _State()
    lines = _logical_lines(text, st)
    blocks, last_content = _scan(lines, st)
    if not blocks:
        raise PlanParseError(_no_plan_message(text, lines), tuple(st.diags))
    drafts = _split_drafts(blocks, st)
    _mark_truncation(drafts, last_content, st)
    for draft in drafts:
        for block in draft:
            block.draft = draft
    chosen = _choose_draft(drafts, draft_policy, st)
    # Diagnostics about lines of the drafts not chosen are dropped with them.
    spans = [(d[0].first_line, d[-1].last_line) for d in drafts if d is not chosen]
    st.diags = [
        d
        for d in st.diags
        if d.code in _ALWAYS_KEPT
        or d.line is None
        or not any(a <= d.line <= b for a, b in spans)
    ]
    steps: list[Step] = []
    seen: dict[int, int] = {}
    for block in chosen:
        assert block.id is not None
        if block.id in seen:
            st.add(
                block.first_line,
                Severity.WARNING,
                "DUPLICATE_STEP",
                f"step {block.id} appears again on line {block.first_line} (first on line "
                f"{seen[block.id]}); kept the first, ignored this one",
                block.id,
            )
            continue
        seen[block.id] = block.first_line
        step = _build_step(block, st)
        if step is not None:
            steps.append(step)
    if not steps:
        raise PlanParseError(
            "only a step cut off before any content: "
            f"{snippet(' '.join(t for _, t in lines if t.strip()), 80)!r}",
            tuple(st.diags),
        )
    diags = sorted(st.diags, key=lambda d: d.line if d.line is not None else 0)
    for d in diags:
        log = step_log(None, d.step)
        level = "INFO" if d.severity is Severity.INFO else level_of(d.code)
        log.log(level, "plan: {}", d)
    return Plan(steps=tuple(steps), diagnostics=tuple(diags), dialect="hashstep", source=text)
