"""The llmcompiler dialect: numbered ``N. tool(arg, key=value)`` lines.

Grammar (one step per line; a call may continue on following lines until its
parentheses close)::

    N. tool(ARG, ..., key=ARG, ...)
    Thought: free text
    N. join()
    <END_OF_PLAN>

``ARG`` is a Python-like literal read by a small tokenizer, never evaluated: numbers,
single- or double-quoted strings, ``True``/``False``/``None``, lists ``[...]``, tuples
``(...)`` (read as lists), dicts ``{...}``, and the references ``$N`` / ``${N}`` with an
optional path (``$1.asset_id``, ``${1}.items[0]``, ``$1["asset id"]``), quoted or not, also
nested (``[$1, $2]``) or inside strings (``'hometown of $1.name'``, a `Template`).
Path-like text after a reference that is not part of it (``$1[name]``) is kept as text and
reported with ``REF_SUFFIX_TEXT``.

Decisions:

- ``Thought:`` lines become the task of the next tool step (several are joined). A
  thought with no tool step after it (before ``join()`` or at the end) is kept as an
  ``LLMC_THOUGHT`` info diagnostic. A step without a thought gets its call text as task.
- ``join()`` is not a tool step: it is recorded as ``LLMC_JOIN`` (info). Steps after it
  are kept with ``LLMC_STEP_AFTER_JOIN``.
- ``<END_OF_PLAN>`` (alone or glued to ``join()``) ends the plan; text after it is
  ``PROSE_IGNORED``. A plan with neither ``join()`` nor ``<END_OF_PLAN>`` gets
  ``LLMC_NO_END`` (it may be cut off).
- Positional arguments go to ``Step.positional``; keyword arguments to ``Step.args``.
"""

from __future__ import annotations

import re
from typing import Any

from planexec.errors import PlanParseError
from planexec.parsing._common import (
    Diagnostics,
    call_end,
    clean_lines,
    describe_text,
    normalize_tool,
    read_call_args,
    snippet,
    step_number_message,
)
from planexec.parsing.jsonrepair import RepairFailure
from planexec.parsing.refs import NO_STEP, find_refs, free_placeholders, step_number
from planexec.plan import Plan, Severity, Step, iter_refs

__all__ = ["parse_llmcompiler"]

_NUMBERED_RE = re.compile(r"^\s*(?:[-*]\s+)?(?:\*\*)?(\d+)\s*[.):]\s*(?:\*\*)?\s*(.*)$")
_CALL_RE = re.compile(r"([A-Za-z_][\w.\-]*)\s*\(")
_THOUGHT_RE = re.compile(r"^\s*(?:\*\*)?thought\s*(?:\*\*)?\s*:\s*(.*)$", re.I)
_END = "<END_OF_PLAN>"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.diags = Diagnostics()
        self.lines = clean_lines(text, self.diags)  # reasoning, special tokens, boxed
        self.steps: list[Step] = []
        self.seen: set[int] = set()
        self.thoughts: list[str] = []
        self.thought_line = 0
        self.joined = False
        self.ended = False

    def run(self) -> Plan:
        i = 0
        while i < len(self.lines):
            lineno = i + 1
            raw = self.lines[i]
            if self.ended:
                if raw.strip():
                    self.diags.add(lineno, Severity.INFO, "PROSE_IGNORED",
                                   f"ignored text after {_END}: {snippet(raw, 50)!r}")
                i += 1
                continue
            if raw.strip().startswith("```"):
                self.diags.add(lineno, Severity.INFO, "CODE_FENCE",
                               f"ignored the code fence line {snippet(raw, 30)!r}")
                i += 1
                continue
            i += self._line(raw, lineno)
        if self.thoughts:
            self._thought_unused("at the end of the plan")
        if not self.steps:
            raise PlanParseError(self._nothing_found(), self.diags.sorted())
        if not self.joined and not self.ended:
            self.diags.add(len(self.lines), Severity.WARNING, "LLMC_NO_END",
                           f"the plan has neither join() nor {_END}; it may be cut off")
        return Plan(tuple(self.steps), self.diags.sorted(), "llmcompiler", self.text)

    def _nothing_found(self) -> str:
        msg = f"no llmcompiler step ('1. tool(args)') found in {describe_text(self.text)}"
        if self.joined:
            msg += "; it has only join()"
        return msg

    def _thought_unused(self, where: str) -> None:
        self.diags.add(self.thought_line, Severity.INFO, "LLMC_THOUGHT",
                       f"Thought {where}: {snippet(' '.join(self.thoughts), 60)!r}")
        self.thoughts = []

    def _line(self, raw: str, lineno: int) -> int:
        """Handle one line; return how many lines were consumed."""
        line = raw
        if _END in line:
            before, _, after = line.partition(_END)
            self.ended = True
            if after.strip():
                self.diags.add(lineno, Severity.INFO, "PROSE_IGNORED",
                               f"ignored text after {_END}: {snippet(after, 50)!r}")
            line = before
        if not line.strip():
            return 1
        t = _THOUGHT_RE.match(line)
        if t is not None:
            if not self.thoughts:
                self.thought_line = lineno
            self.thoughts.append(t.group(1).strip())
            return 1
        n = _NUMBERED_RE.match(line)
        if n is None:
            self.diags.add(lineno, Severity.INFO, "PROSE_IGNORED",
                           f"ignored text outside the plan: {snippet(line, 50)!r}")
            return 1
        number = step_number(n.group(1))
        if number is None:
            self.diags.add(lineno, Severity.ERROR, "STEP_NUMBER_INVALID",
                           step_number_message("", n.group(1), "the line was ignored"))
            return 1
        sid = number
        body = n.group(2)
        c = _CALL_RE.match(body)
        if c is None:
            self.diags.add(lineno, Severity.WARNING, "LLMC_NOT_A_CALL",
                           f"the numbered line {snippet(line, 50)!r} is not a tool call "
                           "'name(args)'; ignored", sid)
            return 1
        # gather continuation lines until the call's parentheses close
        chunk = body
        used = 1
        end = call_end(chunk, c.end())
        while end is None and not self.ended and lineno - 1 + used < len(self.lines):
            nxt = self.lines[lineno - 1 + used]
            if _NUMBERED_RE.match(nxt) or _THOUGHT_RE.match(nxt):
                break
            if _END in nxt:
                nxt, _, after = nxt.partition(_END)
                self.ended = True
                if after.strip():
                    self.diags.add(lineno + used, Severity.INFO, "PROSE_IGNORED",
                                   f"ignored text after {_END}: {snippet(after, 50)!r}")
            chunk += "\n" + nxt
            used += 1
            end = call_end(chunk, c.end())
        at_end = lineno - 1 + used >= len(self.lines)
        self._call(sid, c, chunk, end, lineno, lineno + used - 1, at_end)
        return used

    def _call(
        self, sid: int, c: re.Match[str], chunk: str, end: int | None, first: int,
        last: int, at_end: bool,
    ) -> None:
        name = c.group(1)
        if name.lower() == "join":
            self.joined = True
            glued = " followed by " + _END if self.ended else ""
            self.diags.add(first, Severity.INFO, "LLMC_JOIN",
                           f"step {sid} is join(){glued}: not a tool step; the answer is "
                           "composed from the results", sid)
            if self.thoughts:
                self._thought_unused("before join()")
            if end is not None and chunk[end + 1 :].strip():
                self.diags.add(first, Severity.INFO, "PROSE_IGNORED",
                               f"ignored text after join(): {snippet(chunk[end + 1:], 40)!r}")
            return
        if sid in self.seen:
            self.diags.add(first, Severity.ERROR, "DUPLICATE_STEP",
                           f"step {sid} appears again; kept the first and ignored "
                           f"{snippet(chunk, 50)!r}", sid)
            return
        self.seen.add(sid)
        if self.joined:
            self.diags.add(first, Severity.WARNING, "LLMC_STEP_AFTER_JOIN",
                           f"step {sid} comes after join(); kept", sid)
        server, tool = normalize_tool(name, line=first, step=sid, diags=self.diags)
        call_text = chunk[: end + 1] if end is not None else chunk
        task = " ".join(self.thoughts) if self.thoughts else call_text.strip()
        self.thoughts = []
        valid = True
        positional: list[Any] = []
        kwargs: dict[str, Any] = {}
        if end is None:
            valid = False
            code = "ARGS_TRUNCATED" if at_end else "ARGS_SYNTAX"
            cut = " (the reply ends there)" if at_end else ""
            self.diags.add(first, Severity.ERROR, code,
                           f"the call of step {sid} has no closing ')'{cut}: "
                           f"{snippet(chunk, 50)!r}; the step must not run as written", sid)
        else:
            if chunk[end + 1 :].strip():
                self.diags.add(first, Severity.INFO, "PROSE_IGNORED",
                               f"ignored text after the call of step {sid}: "
                               f"{snippet(chunk[end + 1:], 40)!r}", sid)
            try:
                read = read_call_args(chunk[c.end() : end], dialect="llmcompiler")
            except RepairFailure as fail:
                valid = False
                self.diags.add(first, Severity.ERROR, "ARGS_SYNTAX",
                               f"the arguments of step {sid} are not readable: {fail.message} "
                               f"(in {snippet(chunk[c.end():end], 50)!r}); the step must not "
                               "run as written", sid)
            else:
                positional, kwargs = read.positional, read.kwargs
                for rep in read.repairs:
                    self.diags.add(first, Severity.WARNING, "ARGS_REPAIRED",
                                   f"arguments of step {sid}: repaired {rep}", sid)
                for prob in read.problems:
                    self.diags.add(first, Severity.WARNING, "LLMC_POSITIONAL_AFTER_KEYWORD",
                                   f"step {sid}: {prob}", sid)
        pos_values = tuple(
            find_refs(v, dialect="llmcompiler", location=f"positional[{i}]")
            for i, v in enumerate(positional)
        )
        args = {
            k: find_refs(v, dialect="llmcompiler", location=f"args.{k}")
            for k, v in kwargs.items()
        }
        # free-text placeholders (<asset id>, <output of step 1>): hinted references, never
        # text; over the step's own references, the only dependencies this dialect declares
        ref_deps = tuple(sorted(
            {r.step for r in iter_refs(args)} | {r.step for r in iter_refs(list(pos_values))}
        ))
        args = {
            k: free_placeholders(v, ref_deps, location=f"args.{k}")[0] for k, v in args.items()
        }
        pos_values = tuple(
            free_placeholders(v, ref_deps, location=f"positional[{i}]")[0]
            for i, v in enumerate(pos_values)
        )
        self.diags.hinted_refs(list(pos_values), line=first, step=sid)
        self.diags.hinted_refs(args, line=first, step=sid)
        self.diags.ref_suffixes(list(pos_values), line=first, step=sid)
        self.diags.ref_suffixes(args, line=first, step=sid)
        self.diags.malformed_refs(list(pos_values), dialect="llmcompiler",
                                  location="positional", line=first, step=sid)
        self.diags.malformed_refs(args, dialect="llmcompiler", location="args",
                                  line=first, step=sid)
        for i, v in enumerate(pos_values):
            valid &= self.diags.placeholders(v, dialect="llmcompiler",
                                             location=f"positional[{i}]", line=first, step=sid)
        valid &= self.diags.placeholders(args, dialect="llmcompiler", location="args",
                                         line=first, step=sid)
        deps = (
            {r.step for r in iter_refs(args)} | {r.step for r in iter_refs(list(pos_values))}
        ) - {NO_STEP}
        self.steps.append(
            Step(
                id=sid,
                task=task,
                tool=tool,
                args=args,
                positional=pos_values,
                args_valid=valid,
                args_text=chunk[c.end() : end] if end is not None else chunk[c.end() :],
                server=server,
                depends_on=tuple(sorted(deps)),
                lines=(first, last),
            )
        )


def parse_llmcompiler(text: str) -> Plan:
    """Parse an llmcompiler plan (``1. tool(arg, key=value)`` lines).

    Args:
        text: the planner's reply.

    Returns:
        The plan, with a Diagnostic for every deviation and for ``join()``.

    Raises:
        PlanParseError: no numbered tool call at all; the message says what was found.
    """
    if not isinstance(text, str):
        raise PlanParseError(f"expected plan text, got {type(text).__name__}")
    return _Parser(text).run()
