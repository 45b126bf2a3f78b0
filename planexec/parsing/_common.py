"""Helpers shared by the dialect parsers: diagnostics, none-words, tool names, calls, cleanup."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from planexec._log import step_log
from planexec._text import snippet
from planexec.parsing.jsonrepair import (
    JSONReader,
    RepairFailure,
    closing_bracket,
    duplicate_message,
)
from planexec.parsing.refs import (
    HINTED_BY,
    MAX_STEP_DIGITS,
    NO_STEP,
    contains_placeholder,
    find_malformed,
    iter_ref_spans,
    parse_path,
    path_like_suffixes,
    ref_at,
)
from planexec.plan import Diagnostic, Ref, Severity, Template, format_path, iter_refs

__all__ = [
    "NONE_WORDS",
    "REASONING_MARKERS",
    "CallArgs",
    "Diagnostics",
    "call_end",
    "clean_lines",
    "clean_reply",
    "read_call_args",
    "describe_text",
    "has_literal",
    "keys_with_refs",
    "walk_strings",
    "ToolCall",
    "ToolName",
    "normalize_tool",
    "read_tool",
    "ref_malformed_message",
    "step_number_message",
    "ref_suffix_message",
    "snippet",
]

_CALL_OPEN_RE = re.compile(r"^([^()\s]+?)\s*\(")
_SPECIAL_TOKEN_RE = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>")
_BOXED_OPEN_RE = re.compile(r"\$?\\boxed\{")
_BOXED_CLOSE_RE = re.compile(r"\}\s*\$\s*$")
REASONING_MARKERS = ("<|channel|>final<|message|>", "assistantfinal", "</think>")
"""What ends leaked reasoning in a reply (`clean_reply` reads only the text after the last)."""
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][\w\-]*$")
NONE_WORDS = frozenset(
    {"", "none", "null", "nil", "n/a", "na", "-", "no", "nothing", "(none)", "[]"}
)
"""Words that mean "nothing" in a tool field (``#Tool1: none``, ``Tool: n/a``)."""


def ref_suffix_message(ref: Ref, suffix: str, step: int) -> str:
    """The ``REF_SUFFIX_TEXT`` message for path-like text right after a reference.

    Args:
        ref: the reference (from `planexec.parsing.refs.path_like_suffixes`).
        suffix: the path-like text that follows it.
        step: the step whose arguments hold it.

    Returns:
        A message naming where it is, what the tool would get, and how to write the path.
    """
    path = parse_path(suffix) if ref.hint is None else None
    fix = ""
    if path:
        fix = f"; to follow the path write <step_{ref.step}{format_path(ref.path + path)}>"
    return (
        f"{ref.location or 'the input'} of step {step}: {suffix!r} right after the "
        f"reference {ref.raw!r} looks like a path but is outside it, so it is kept as "
        f"literal text after the value of step {ref.step}{fix}"
    )


def step_number_message(label: str, digits: str, what: str) -> str:
    """The ``STEP_NUMBER_INVALID`` message for a step number too long to be one.

    Args:
        label: how the step is written before its number, e.g. ``"#E"`` or ``"#Task"``.
        digits: the number as written.
        what: what the parser did instead, e.g. ``"the step was ignored"``.

    Returns:
        A message quoting the start of the number and saying how long it is.
    """
    shown = digits if len(digits) <= 12 else digits[:12] + "…"
    return (
        f"{label}{shown} has a step number of {len(digits)} digits; a step number has at "
        f"most {MAX_STEP_DIGITS}, so this is none: {what}"
    )


def ref_malformed_message(location: str, excerpt: str, step: int) -> str:
    """The ``REF_MALFORMED`` message for text that begins like a reference but is not one.

    Args:
        location: where the text is, e.g. ``"args.asset_id"``.
        excerpt: the text from its opening bracket (see `refs.malformed_refs`).
        step: the step whose arguments hold it.

    Returns:
        A message naming where it is, what was written and what the executor will do.
    """
    return (
        f"{location} of step {step} holds {excerpt!r}, which begins like a reference but "
        "is not one (a missing or stray bracket, a step number of more than 9 digits, or "
        "text the grammar cannot read); write "
        "<step_N.path>. The executor refuses to pass it to a tool unless the tool's schema "
        "marks the argument as free text (x-planexec-free-text)"
    )


class Diagnostics:
    """Collects diagnostics; logs every warning and error through loguru (info is not logged)."""

    def __init__(self, *, log: bool = True) -> None:
        self.items: list[Diagnostic] = []
        """The diagnostics in the order they were added."""
        self.log = log
        """Whether warnings and errors are logged as they are added (the hashstep parser
        logs once a draft is chosen instead)."""

    def add(
        self,
        line: int | None,
        severity: Severity,
        code: str,
        message: str,
        step: int | None = None,
    ) -> Diagnostic:
        """Record one diagnostic (and log it when it is a warning or an error)."""
        d = Diagnostic(line=line, severity=severity, code=code, message=message, step=step)
        self.items.append(d)
        if self.log and severity is not Severity.INFO:
            step_log(None, step).warning(str(d))
        return d

    def hinted_refs(self, value: Any, *, line: int | None, step: int) -> None:
        """Add a ``REF_HINTED`` warning for each hinted reference in ``value``."""
        for ref in iter_refs(value):
            if isinstance(ref, Ref) and ref.is_hinted:
                target = (
                    "names no step while the step refers to no other step: a missing "
                    "reference, so the step fails unless the plan is fixed"
                    if ref.step == NO_STEP
                    else f"refers to step {ref.step} in words the reference grammar cannot "
                    f"follow; {HINTED_BY}"
                )
                self.add(
                    line,
                    Severity.WARNING,
                    "REF_HINTED",
                    f"{ref.location or 'the input'} of step {step} holds {ref.raw!r}, which "
                    f"{target}",
                    step,
                )

    def ref_suffixes(self, value: Any, *, line: int | None, step: int) -> None:
        """Add a ``REF_SUFFIX_TEXT`` warning for path-like text right after a reference."""
        for ref, suffix in path_like_suffixes(value):
            self.add(line, Severity.WARNING, "REF_SUFFIX_TEXT",
                     ref_suffix_message(ref, suffix, step), step)

    def malformed_refs(
        self, value: Any, *, dialect: str, location: str, line: int | None, step: int
    ) -> None:
        """Add a ``REF_MALFORMED`` warning for text that begins like a reference but is not one."""
        for where, excerpt in find_malformed(value, dialect=dialect, location=location):
            self.add(line, Severity.WARNING, "REF_MALFORMED",
                     ref_malformed_message(where, excerpt, step), step)

    def placeholders(
        self, value: Any, *, dialect: str, location: str, line: int | None, step: int
    ) -> bool:
        """Report text no reference reads that the executor's check would refuse.

        A string that looks like a placeholder is a ``PLACEHOLDER_UNRECOGNIZED`` warning,
        a dict key holding a reference a ``REF_IN_KEY`` error (keys are never resolved)
        and another placeholder-looking key a ``PLACEHOLDER_UNRECOGNIZED`` warning.

        Returns:
            False when the arguments must not be used (a reference in a key).
        """
        ok = True
        for path, key, is_ref in keys_with_refs(value, location, dialect):
            if is_ref:
                ok = False
                self.add(line, Severity.ERROR, "REF_IN_KEY",
                         f"the arguments of step {step} have a reference in a dict key "
                         f"({path} key {key!r}); keys are never resolved, so the tool would "
                         "get the placeholder as a key; the step must not run as written",
                         step)
            else:
                self.add(line, Severity.WARNING, "PLACEHOLDER_UNRECOGNIZED",
                         f"the arguments of step {step} have a placeholder-looking dict key "
                         f"({path} key {key!r}); the executor will refuse to pass it to a "
                         "tool", step)
        for path, text in walk_strings(value, location):
            if contains_placeholder(text, dialect=dialect):
                self.add(line, Severity.WARNING, "PLACEHOLDER_UNRECOGNIZED",
                         f"{path} of step {step} holds {snippet(text, 40)!r}, which looks "
                         "like a placeholder but is no reference the grammar reads; the "
                         "executor will refuse to pass it to a tool", step)
        return ok

    def sorted(self) -> tuple[Diagnostic, ...]:
        """The diagnostics in line order (stable)."""
        return tuple(sorted(self.items, key=lambda d: d.line if d.line is not None else 0))


@dataclass(frozen=True)
class ToolCall:
    """Arguments written inside a tool name: ``assets(site_name: "MAIN")``."""

    text: str
    """The text between the parentheses (to the end when ``closed`` is False)."""
    closed: bool
    """Whether the closing ``)`` was found."""
    line: int
    """The line the tool name is on."""


@dataclass(frozen=True)
class ToolName:
    """A tool name as `read_tool` read it."""

    server: str | None
    """The server: the one given, or the prefix of ``iot.sites``."""
    tool: str | None
    """The tool; None for ``none``/``null``/empty (a reasoning step)."""
    call: ToolCall | None = None
    """Arguments written inside the name, when the caller reads them (``calls=True``)."""


def read_tool(
    raw: str,
    *,
    line: int,
    step: int,
    diags: Diagnostics,
    server: str | None = None,
    calls: bool = False,
    empty_warning: bool = False,
) -> ToolName:
    """Normalize a tool name as written; the one tool-name normaliser of every dialect.

    ``sites()`` → ``sites``; ``iot.sites`` → tool ``sites`` and server ``iot`` (unless a
    server was given); backticks, quotes and bold around it are stripped; ``none``,
    ``null``, ``n/a`` … (`NONE_WORDS`) → no tool. Text inside the parentheses is returned
    as a `ToolCall` when ``calls`` is True (the hashstep parser reads it as arguments);
    otherwise it is reported as ignored with a warning, never dropped silently.

    Args:
        raw: the tool name as written.
        line: the line it is on.
        step: the step it belongs to.
        diags: where to record what was changed (``TOOL_NAME_NORMALIZED``,
            ``TOOL_NAME_UNUSUAL``, ``TOOL_EMPTY``).
        server: the server the step names elsewhere (``#Agent``), kept over a prefix.
        calls: whether the caller reads arguments written inside the parentheses.
        empty_warning: whether an empty name is reported (``TOOL_EMPTY``).

    Returns:
        The server, the tool and the call's arguments.
    """
    name = raw.strip().strip("`*\"' ").strip()
    if name.lower() in NONE_WORDS:
        if not name and empty_warning:
            diags.add(line, Severity.WARNING, "TOOL_EMPTY",
                      f"#Tool of step {step} is empty; read as a reasoning step (no tool)", step)
        return ToolName(server, None)
    written = name
    call: ToolCall | None = None
    m = _CALL_OPEN_RE.match(name)
    if m is not None:
        name = m.group(1)
        end = call_end(written, m.end())
        inside = written[m.end() : end] if end is not None else written[m.end() :]
        after = written[end + 1 :].strip() if end is not None else ""
        if inside.strip() and calls:
            call = ToolCall(inside, end is not None, line)
            how = "; its arguments are read from the parentheses"
        elif inside.strip():
            how = f"; ignored {inside.strip()!r} written inside the parentheses"
        else:
            how = ""
        diags.add(line, Severity.WARNING if inside.strip() and not calls else Severity.INFO,
                  "TOOL_NAME_NORMALIZED", f"read the tool {written!r} as {name!r}{how}", step)
        if after:
            diags.add(line, Severity.WARNING, "TOOL_NAME_NORMALIZED",
                      f"ignored the text {snippet(after, 40)!r} after the call in the tool of "
                      f"step {step} (no argument is read from it)", step)
    if "." in name and not name.startswith(".") and not name.endswith("."):
        prefix, tool = name.rsplit(".", 1)
        if server is None:
            note = f"server {prefix!r}, tool {tool!r}"
            server = prefix
        else:
            note = f"tool {tool!r} (kept the server {server!r} from #Agent/#Server)"
        diags.add(line, Severity.INFO, "TOOL_NAME_NORMALIZED",
                  f"read the tool {name!r} as {note}", step)
        name = tool
    if not _TOOL_NAME_RE.match(name):
        diags.add(line, Severity.WARNING, "TOOL_NAME_UNUSUAL",
                  f"the tool name {name!r} of step {step} does not look like an identifier",
                  step)
    return ToolName(server, name, call)


def normalize_tool(
    raw: str, *, line: int, step: int, diags: Diagnostics
) -> tuple[str | None, str | None]:
    """Normalize a tool name as written (`read_tool` without a server or call arguments).

    Args:
        raw: the tool name as written.
        line: the line it is on.
        step: the step it belongs to.
        diags: where to record what was changed.

    Returns:
        ``(server, tool)``; ``tool`` is None for ``none``/``null``/empty.
    """
    got = read_tool(raw, line=line, step=step, diags=diags)
    return got.server, got.tool


_KW_EQ_RE = re.compile(r"([A-Za-z_]\w*)\s*=(?!=)")
_KW_EQ_COLON_RE = re.compile(r"([A-Za-z_]\w*)\s*(?:=(?!=)|:(?![:/]))")


def call_end(text: str, start: int) -> int | None:
    """Index of the ``)`` closing a call whose ``(`` is just before ``start``.

    Args:
        text: the text holding the call.
        start: the position just after the call's ``(``.

    Returns:
        The index of the closing ``)``, or None when the call never closes (quotes and
        brackets inside it are respected).
    """
    return closing_bracket(text, start, depth=1, quotes="\"'", opens="([{", closes=")]}")


class _CallReader(JSONReader):
    """`JSONReader` that also takes an unquoted llmcompiler reference (``$1.asset_id``)."""

    def __init__(self, text: str, *, dialect: str) -> None:
        super().__init__(text, python=True)
        self.dialect = dialect

    def value(self) -> Any:
        self.skip_ws()
        if self.dialect == "llmcompiler" and not self.at_end() and self.text[self.pos] == "$":
            got = ref_at(self.text, self.pos, "llmcompiler")
            if got is not None:
                start, self.pos = self.pos, got[1]
                return self.text[start : self.pos]
        return super().value()


class CallArgs:
    """The arguments of a call as written: ``tool(arg, key=value, key2: value)``."""

    def __init__(self) -> None:
        self.positional: list[Any] = []
        """Positional arguments, in order."""
        self.kwargs: dict[str, Any] = {}
        """Keyword arguments, in order."""
        self.repairs: list[str] = []
        """Repairs made while reading (``bare word 'MAIN' read as a string``, ...)."""
        self.placeholder_repairs: set[str] = set()
        """Those of ``repairs`` that are placeholders written without quotes."""
        self.problems: list[str] = []
        """Readable oddities (a positional argument after a keyword argument)."""


def read_call_args(text: str, *, dialect: str = "llmcompiler") -> CallArgs:
    """Read the text between a call's parentheses; the one call reader of every dialect.

    Values are Python-like literals read by `JSONReader` (never evaluated): numbers,
    quoted strings, ``True``/``False``/``None``, JSON literals, lists, tuples (as lists),
    dicts, unquoted placeholders (``<step_1>``, ``{step_2}``, ``<chiller_asset_id>``, kept
    as strings for the reference grammar) and, in llmcompiler, ``$N`` references. A
    keyword argument is ``key=value``; in hashstep also ``key: value``.

    Args:
        text: the arguments, without the parentheses.
        dialect: ``"llmcompiler"`` (``key=value``, ``$N``) or ``"hashstep"``
            (``key=value`` and ``key: value``).

    Returns:
        The arguments read.

    Raises:
        RepairFailure: the arguments cannot be read (``truncated`` when the text ends
            inside a value); a keyword given twice is one too.
    """
    r = _CallReader(text, dialect=dialect)
    kw_re = _KW_EQ_COLON_RE if dialect == "hashstep" else _KW_EQ_RE
    out = CallArgs()
    while True:
        r.skip_ws()
        if r.at_end():
            break
        m = kw_re.match(text, r.pos)
        if m is not None:
            r.pos = m.end()
            key = m.group(1)
            value = r.value()
            if key in out.kwargs:
                raise RepairFailure(
                    "keyword argument: " + duplicate_message(key, out.kwargs[key], value),
                    duplicate_key=key,
                )
            out.kwargs[key] = value
        else:
            if out.kwargs:
                out.problems.append("a positional argument follows a keyword argument")
            out.positional.append(r.value())
        r.skip_ws()
        if r.at_end():
            break
        if text[r.pos] != ",":
            raise RepairFailure(f"expected ',' {r.where()}, found {text[r.pos]!r}")
        r.pos += 1
    out.repairs = r.repairs
    out.placeholder_repairs = r.placeholder_repairs
    return out


def clean_reply(text: str) -> tuple[list[tuple[int, str]], list[Diagnostic]]:
    r"""The one reply-cleanup pass of every dialect: drop what is no part of a plan.

    Removes, each with an info diagnostic: leaked reasoning before the last
    ``assistantfinal``, ``<|channel|>final<|message|>`` or ``</think>``
    (``REASONING_DROPPED``; a ``<think>`` draft is never read as the plan), special
    tokens such as ``<|eom_id|>`` (``SPECIAL_TOKEN``) and a ``$\boxed{...}$`` wrapper
    (``BOXED_ANSWER``). Code fences are left to each parser (they mark plan lines).

    Args:
        text: the planner's reply as received.

    Returns:
        ``(lines, diagnostics)``: the lines to read as ``(line number, text)`` (1-based,
        in the original reply; a line split by a ``$\boxed{`` opener appears twice), and
        what was removed.
    """
    diags: list[Diagnostic] = []
    # A byte order mark is the encoding's, not the reply's: it would hide line 1's field.
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    raw = text.split("\n")
    start_line = 0
    start_col = 0
    for marker in REASONING_MARKERS:
        idx = text.rfind(marker)
        if idx < 0:
            continue
        line_idx = text.count("\n", 0, idx)
        col = idx - (text.rfind("\n", 0, idx) + 1) + len(marker)
        if (line_idx, col) > (start_line, start_col):
            start_line, start_col = line_idx, col
            diags.append(Diagnostic(
                1,
                Severity.INFO,
                "REASONING_DROPPED",
                f"dropped {line_idx + 1} line(s) of leaked reasoning before {marker!r} "
                f"(line {line_idx + 1}); only the text after it is read",
            ))
    out: list[tuple[int, str]] = []
    boxed = False
    tokens_seen: dict[str, int] = {}
    for i in range(start_line, len(raw)):
        line = raw[i][start_col:] if i == start_line else raw[i]
        lineno = i + 1
        if "<|" in line:
            for tok in _SPECIAL_TOKEN_RE.findall(line):
                tokens_seen.setdefault(tok, lineno)
            line = _SPECIAL_TOKEN_RE.sub("", line)
        m = _BOXED_OPEN_RE.search(line)
        if m:
            boxed = True
            diags.append(Diagnostic(
                lineno,
                Severity.INFO,
                "BOXED_ANSWER",
                "read the plan inside a $\\boxed{...}$ wrapper",
            ))
            before, line = line[: m.start()], line[m.end() :]
            if before.strip():
                out.append((lineno, before))
        if boxed and _BOXED_CLOSE_RE.search(line):
            line = _BOXED_CLOSE_RE.sub("", line)
            boxed = False
        out.append((lineno, line))
    for tok, lineno in tokens_seen.items():
        diags.append(Diagnostic(lineno, Severity.INFO, "SPECIAL_TOKEN",
                                f"removed the special token {tok}"))
    return out, diags



def clean_lines(text: str, diags: Diagnostics) -> list[str]:
    """`clean_reply` for a parser that reads ``text.splitlines()`` by index.

    Args:
        text: the planner's reply.
        diags: where to record what was removed.

    Returns:
        One string per line of ``text`` (same numbering); removed lines are empty, and a
        line split by a boxed-answer opener keeps only the text after the opener.
    """
    lines, found = clean_reply(text)
    diags.items.extend(found)
    out = [""] * (max((n for n, _ in lines), default=0))
    for lineno, line in lines:
        out[lineno - 1] = line
    while out and not out[-1] and len(out) > len(text.splitlines()):
        out.pop()  # the empty "line" after a final newline
    return out


def describe_text(text: str) -> str:
    """Say in a few words what a text holds instead of a plan (for `PlanParseError`)."""
    stripped = text.strip()
    if not stripped:
        return "an empty reply"
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    first = snippet(lines[0], 70)
    return f"{len(lines)} line(s) of text starting with {first!r}"


def has_literal(*values: Any) -> bool:
    """Whether a value holds a scalar that is not a reference (a `Template` counts as one)."""
    for value in values:
        if isinstance(value, Ref | Template):
            continue
        if isinstance(value, dict):
            if has_literal(*value.values()):
                return True
        elif isinstance(value, list | tuple):
            if has_literal(*value):
                return True
        else:
            return True
    return False


def keys_with_refs(
    value: Any, path: str, dialect: str = "hashstep"
) -> Iterable[tuple[str, str, bool]]:
    """``(path, key, is_reference)`` for each dict key that looks like a placeholder.

    Keys are never resolved: a reference there (``is_reference``) would reach the tool
    as text, and a key the executor's check flags would stop the call.
    """
    if isinstance(value, dict):
        for k, v in value.items():
            key = str(k)
            if iter_ref_spans(key, dialect):
                yield path, key, True
            elif contains_placeholder(key, dialect=dialect):
                yield path, key, False
            yield from keys_with_refs(v, f"{path}.{key}", dialect)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from keys_with_refs(v, f"{path}[{i}]", dialect)


def walk_strings(value: Any, path: str) -> Iterable[tuple[str, str]]:
    """Every literal string in a parsed value, with its path.

    References are skipped; a `Template`'s text parts are included.
    """
    if isinstance(value, Ref):
        return
    if isinstance(value, Template):
        for part in value.parts:
            if isinstance(part, str):
                yield path, part
    elif isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from walk_strings(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from walk_strings(v, f"{path}[{i}]")
