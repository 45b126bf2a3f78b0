"""The rewoo dialect: ``Plan: ...`` lines, each followed by ``#EN = Tool[input]``.

Accepted variants, each reported by a Diagnostic (see ``docs/plan-language.md``):

- the plan text and the step on one line: ``Plan: search. #E1 = Google[query]``
  (``REWOO_SAME_LINE``, info);
- numbered labels ``Plan 1:`` and markdown headers, bullets or bold around them
  (``REWOO_PLAN_LABEL``, ``MARKDOWN_STRIPPED``, info);
- quoted inputs ``Google["..."]`` / ``Google['...']`` (``REWOO_QUOTED_INPUT``, info): the
  quotes are removed;
- ``#EN`` references anywhere in the input (``given #E1``, ``#E2 player hometown``),
  with an optional path (``#E1.assets[0].type``, ``#E1["asset id"]``; ``given #E1.`` at
  the end of a sentence has no path): an input that is exactly one reference is a
  whole-value `Ref`, otherwise a `Template`; hinted references such as
  ``<Name from #E1>`` get ``REF_HINTED``; path-like text after a reference that is not
  part of it (``#E1[name]``) gets ``REF_SUFFIX_TEXT``;
- prose before, between or after steps (``PROSE_IGNORED``, info), code fences
  (``CODE_FENCE``, info).

The tool input becomes the step's single positional argument, bound at resolution time
to the tool's first parameter. ``LLM[...]`` is kept as a tool named ``LLM``.
"""

from __future__ import annotations

import json
import re

from planexec.errors import PlanParseError
from planexec.parsing._common import (
    Diagnostics,
    clean_lines,
    describe_text,
    normalize_tool,
    snippet,
    step_number_message,
)
from planexec.parsing.refs import NO_STEP, find_refs, free_placeholders, step_number
from planexec.plan import Plan, Severity, Step, iter_refs

__all__ = ["parse_rewoo"]

_ASSIGN_RE = re.compile(r"#E\s*(\d+)\s*=\s*([A-Za-z_][\w.\-]*(?:\(\s*\))?)\s*\[")
_LABEL_RE = re.compile(r"^plan\s*(\d+)?\s*[:.)\-]\s*(.*)$", re.I | re.S)
_HEADER_RE = re.compile(r"^#{1,6}\s+")
_BULLET_RE = re.compile(r"^(?:[-*+>]|\d+[.)])\s+")
_MENTION_RE = re.compile(r"#E(\d+)(?!\w)")


def _clean(line: str) -> tuple[str, bool]:
    s = line.strip()
    md = False
    for rx in (_HEADER_RE, _BULLET_RE):
        m = rx.match(s)
        if m is not None:
            s = s[m.end() :]
            md = True
    if "**" in s or "__" in s:
        s = s.replace("**", "").replace("__", "")
        md = True
    return s.strip(), md


def _starts_new(line: str) -> bool:
    s, _ = _clean(line)
    return bool(_ASSIGN_RE.search(s) or _LABEL_RE.match(s))


def _input_end(chunk: str) -> int | None:
    """Index of the ``]`` closing a tool input that starts at ``chunk[0]``, or None."""
    j = 0
    while j < len(chunk) and chunk[j] in " \t":
        j += 1
    if j < len(chunk) and chunk[j] in "\"'":
        q = chunk[j]
        k = j + 1
        while k < len(chunk):
            if chunk[k] == "\\":
                k += 2
                continue
            if chunk[k] == q:
                break
            k += 1
        if k < len(chunk):
            rest = k + 1
            while rest < len(chunk) and chunk[rest] in " \t":
                rest += 1
            if rest < len(chunk) and chunk[rest] == "]":
                return rest
    depth = 1
    for k, ch in enumerate(chunk):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return k
    return None


def _unquote(text: str) -> str | None:
    s = text.strip()
    if len(s) < 2 or s[0] not in "\"'" or s[-1] != s[0]:
        return None
    body = s[1:-1]
    if s[0] in body.replace("\\" + s[0], ""):
        return None
    if s[0] == '"':
        try:
            return str(json.loads(s))
        except ValueError:
            return body
    return body.replace("\\'", "'")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.diags = Diagnostics()
        self.lines = clean_lines(text, self.diags)  # reasoning, special tokens, boxed
        self.steps: list[Step] = []
        self.seen: set[int] = set()
        self.pending: list[str] | None = None
        self.pending_line = 0
        self.labels = 0
        self.md_lines: list[int] = []

    def run(self) -> Plan:
        i = 0
        in_fence = False
        while i < len(self.lines):
            lineno = i + 1
            raw = self.lines[i]
            if raw.strip().startswith("```"):
                in_fence = not in_fence
                self.diags.add(lineno, Severity.INFO, "CODE_FENCE",
                               f"ignored the code fence line {snippet(raw, 30)!r}")
                i += 1
                continue
            line, md = _clean(raw)
            if md:
                self.md_lines.append(lineno)
            rest = line
            cur = lineno
            while rest:
                m = _ASSIGN_RE.search(rest)
                before = rest if m is None else rest[: m.start()]
                self._text(before, cur, same_line_step=m is not None)
                if m is None:
                    break
                chunk = rest[m.end() :]
                end = _input_end(chunk)
                extra = 0
                while end is None and i + 1 + extra < len(self.lines):
                    nxt = self.lines[i + 1 + extra]
                    if _starts_new(nxt):
                        break
                    chunk += "\n" + nxt
                    extra += 1
                    end = _input_end(chunk)
                last = cur + extra
                if end is None:
                    self._step(m, chunk, cur, last, closed=False,
                               at_end=i + 1 + extra >= len(self.lines))
                    rest = ""
                else:
                    self._step(m, chunk[:end], cur, last, closed=True, at_end=False)
                    tail = chunk[end + 1 :]
                    rest = tail.rsplit("\n", 1)[-1] if extra else tail
                i += extra
                cur = last
            i += 1
        if self.pending is not None:
            self.diags.add(
                self.pending_line, Severity.WARNING, "REWOO_PLAN_WITHOUT_STEP",
                f"the plan text {snippet(' '.join(self.pending), 50)!r} has no "
                "'#E<n> = Tool[input]' after it (the reply may be cut off)",
            )
        if self.md_lines:
            shown = ", ".join(map(str, self.md_lines[:10]))
            self.diags.add(self.md_lines[0], Severity.INFO, "MARKDOWN_STRIPPED",
                           f"removed markdown (headers, bullets, bold) on line(s) {shown}")
        if not self.steps:
            raise PlanParseError(self._nothing_found(), self.diags.sorted())
        return Plan(tuple(self.steps), self.diags.sorted(), "rewoo", self.text)

    def _nothing_found(self) -> str:
        numbers = (step_number(x) for x in _MENTION_RE.findall(self.text))
        mentions = sorted({n for n in numbers if n is not None})
        parts = [f"no rewoo step ('#E1 = Tool[input]') found in {describe_text(self.text)}"]
        if self.labels:
            parts.append(f"{self.labels} 'Plan' line(s) without a step")
        if mentions:
            names = ", ".join(f"#E{n}" for n in mentions)
            parts.append(f"it mentions {names} but never assigns them")
        return "; ".join(parts)

    def _text(self, before: str, lineno: int, *, same_line_step: bool) -> None:
        s = before.strip()
        if not s:
            return
        lm = _LABEL_RE.match(s)
        if lm is not None:
            self.labels += 1
            if self.pending is not None:
                self.diags.add(
                    self.pending_line, Severity.WARNING, "REWOO_PLAN_WITHOUT_STEP",
                    f"the plan text {snippet(' '.join(self.pending), 50)!r} has no "
                    "'#E<n> = Tool[input]' before the next 'Plan'",
                )
            if lm.group(1) is not None:
                self.diags.add(lineno, Severity.INFO, "REWOO_PLAN_LABEL",
                               f"read the numbered label {s[: lm.start(2)].strip()!r} as 'Plan:'")
            self.pending = [lm.group(2).strip()]
            self.pending_line = lineno
            if same_line_step:
                self.diags.add(lineno, Severity.INFO, "REWOO_SAME_LINE",
                               "the plan text and its '#E' step are on one line")
        elif self.pending is not None:
            self.pending.append(s)
        elif same_line_step:
            self.diags.add(lineno, Severity.INFO, "REWOO_UNLABELLED_PLAN",
                           f"read {snippet(s, 40)!r} before the '#E' step as its plan text")
            self.pending = [s]
            self.pending_line = lineno
        else:
            self.diags.add(lineno, Severity.INFO, "PROSE_IGNORED",
                           f"ignored text outside the plan: {snippet(s, 50)!r}")

    def _step(
        self, m: re.Match[str], inner: str, first: int, last: int, *, closed: bool,
        at_end: bool,
    ) -> None:
        number = step_number(m.group(1))
        task_line = self.pending_line if self.pending is not None else first
        task = " ".join(p for p in (self.pending or []) if p).strip()
        self.pending = None
        if number is None:
            self.diags.add(first, Severity.ERROR, "STEP_NUMBER_INVALID",
                           step_number_message("#E", m.group(1), "the step was ignored"))
            return
        sid = number
        if sid in self.seen:
            self.diags.add(first, Severity.ERROR, "DUPLICATE_STEP",
                           f"#E{sid} is assigned again; kept the first and ignored "
                           f"{snippet(m.group(0) + inner, 50)!r}", sid)
            return
        self.seen.add(sid)
        if not task:
            self.diags.add(first, Severity.WARNING, "REWOO_MISSING_PLAN",
                           f"#E{sid} has no 'Plan:' text before it; its task is empty", sid)
        server, tool = normalize_tool(m.group(2), line=first, step=sid, diags=self.diags)
        valid = True
        text = inner.strip()
        if not closed:
            valid = False
            cut = " (the reply ends there)" if at_end else ""
            self.diags.add(
                first, Severity.ERROR, "ARGS_TRUNCATED" if at_end else "ARGS_SYNTAX",
                f"the input of #E{sid} has no closing ']'{cut}: {snippet(text, 50)!r}; "
                "the step must not run as written", sid,
            )
        unq = _unquote(text) if closed else None
        if unq is not None:
            self.diags.add(first, Severity.INFO, "REWOO_QUOTED_INPUT",
                           f"removed the quotes around the input of #E{sid}", sid)
            text_value = unq
        else:
            text_value = text
        if closed and not text_value.strip():
            self.diags.add(first, Severity.WARNING, "REWOO_EMPTY_INPUT",
                           f"#E{sid} = {m.group(2)}[] has an empty input", sid)
        value = find_refs(text_value, dialect="rewoo", location="positional[0]")
        # free-text placeholders (<asset id>, <output of #E1>): hinted references, never text
        value = free_placeholders(
            value, tuple(sorted({r.step for r in iter_refs(value)})), location="positional[0]"
        )[0]
        self.diags.hinted_refs(value, line=first, step=sid)
        self.diags.ref_suffixes(value, line=first, step=sid)
        self.diags.malformed_refs(value, dialect="rewoo", location="positional[0]",
                                  line=first, step=sid)
        valid &= self.diags.placeholders(value, dialect="rewoo", location="positional[0]",
                                         line=first, step=sid)
        deps = tuple(sorted({r.step for r in iter_refs(value)} - {NO_STEP}))
        self.steps.append(
            Step(
                id=sid,
                task=task,
                tool=tool,
                positional=(value,),
                args_valid=valid,
                args_text=inner,
                server=server,
                depends_on=deps,
                lines=(min(task_line, first), last),
            )
        )


def parse_rewoo(text: str) -> Plan:
    """Parse a rewoo plan (``Plan: ...`` / ``#E1 = Tool[input]``).

    Args:
        text: the planner's reply.

    Returns:
        The plan, with a Diagnostic for every deviation from the canonical form.

    Raises:
        PlanParseError: no ``#EN = Tool[input]`` line at all; the message says what was
            found instead.
    """
    if not isinstance(text, str):
        raise PlanParseError(f"expected plan text, got {type(text).__name__}")
    return _Parser(text).run()
