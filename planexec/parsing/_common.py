"""Helpers shared by the rewoo and llmcompiler parsers: diagnostics and tool names."""

from __future__ import annotations

import re
from typing import Any

from planexec._log import step_log
from planexec._text import snippet
from planexec.parsing.refs import (
    MAX_STEP_DIGITS,
    find_malformed,
    parse_path,
    path_like_suffixes,
)
from planexec.plan import Diagnostic, Ref, Severity, format_path, iter_refs

__all__ = [
    "Diagnostics",
    "describe_text",
    "normalize_tool",
    "ref_malformed_message",
    "step_number_message",
    "ref_suffix_message",
    "snippet",
]

_TOOL_CALL_RE = re.compile(r"^([^()\s]+)\s*\((.*)\)$", re.S)
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][\w\-]*$")
_NONE_WORDS = {"", "none", "null", "nil", "n/a"}


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

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        """The diagnostics in the order they were added."""

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
        if severity is not Severity.INFO:
            step_log(None, step).warning(str(d))
        return d

    def hinted_refs(self, value: Any, *, line: int | None, step: int) -> None:
        """Add a ``REF_HINTED`` warning for each hinted reference in ``value``."""
        for ref in iter_refs(value):
            if isinstance(ref, Ref) and ref.is_hinted:
                self.add(
                    line,
                    Severity.WARNING,
                    "REF_HINTED",
                    f"{ref.location or 'the input'} of step {step} refers to step {ref.step} "
                    f"as {ref.raw!r}, which the reference grammar cannot follow; only the "
                    "LLM fallback can resolve it",
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

    def sorted(self) -> tuple[Diagnostic, ...]:
        """The diagnostics in line order (stable)."""
        return tuple(sorted(self.items, key=lambda d: d.line if d.line is not None else 0))


def normalize_tool(
    raw: str, *, line: int, step: int, diags: Diagnostics
) -> tuple[str | None, str | None]:
    """Normalize a tool name as written: ``sites()`` → ``sites``; ``iot.sites`` → server.

    Args:
        raw: the tool name as written.
        line: the line it is on.
        step: the step it belongs to.
        diags: where to record what was changed (``TOOL_NAME_NORMALIZED``,
            ``TOOL_NAME_UNUSUAL``).

    Returns:
        ``(server, tool)``; ``tool`` is None for ``none``/``null``/empty.
    """
    name = raw.strip().strip("`*\"' ").strip()
    if name.lower() in _NONE_WORDS:
        return None, None
    m = _TOOL_CALL_RE.match(name)
    if m is not None:
        diags.add(line, Severity.INFO, "TOOL_NAME_NORMALIZED",
                  f"read the tool {name!r} as {m.group(1)!r}", step)
        name = m.group(1)
    server: str | None = None
    if "." in name and not name.startswith(".") and not name.endswith("."):
        server, tool = name.rsplit(".", 1)
        diags.add(line, Severity.INFO, "TOOL_NAME_NORMALIZED",
                  f"read the tool {name!r} as server {server!r}, tool {tool!r}", step)
        name = tool
    if not _TOOL_NAME_RE.match(name):
        diags.add(line, Severity.WARNING, "TOOL_NAME_UNUSUAL",
                  f"the tool name {name!r} of step {step} does not look like an identifier",
                  step)
    return server, name


def describe_text(text: str) -> str:
    """Say in a few words what a text holds instead of a plan (for `PlanParseError`)."""
    stripped = text.strip()
    if not stripped:
        return "an empty reply"
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    first = snippet(lines[0], 70)
    return f"{len(lines)} line(s) of text starting with {first!r}"
