r"""Incremental plan parsing: steps as soon as their block is complete.

`StreamingPlanParser` consumes a planner's reply in chunks, as a model streams it, and
reports each step once its block is complete: the next block has started (a text
dialect: the next ``#TaskN:`` / ``#EN =`` / ``N.`` line is complete; json: the step's
object in the ``steps`` list has closed). It re-uses the whole-text parser
(`planexec.parsing.parse_plan`) on the *completed prefix* of the reply, so every step it
reports is one `parse_plan` produced; what it reports never depends on how the reply was
cut into chunks, only on the text received so far.

A step reported early is *tentative*: a later draft in the same reply (numbering
restarts, "revised plan"), or the plan-level checks that need the whole plan, may drop
or change it. Each update therefore says which earlier reported steps no longer hold
(``withdrawn``). At the end, `StreamingPlanParser.finish` parses the whole reply: its
plan is exactly ``parse_plan(text)`` (steps and diagnostics), and its update withdraws
every reported step that plan does not contain as reported. Applying the updates in order
(withdraw, then add) always leaves exactly the steps of the plan parsed so far.

Example:
    >>> p = StreamingPlanParser()
    >>> p.feed("#Task1: list sites\n#Tool1: sites\n#Args1: {}\n").arrived
    ()
    >>> [s.tool for s in p.feed("#Task2: assets\n").arrived]
    ['sites']
    >>> end = p.finish("#Tool2: assets\n#Args2: {}\n")
    >>> [s.id for s in end.update.arrived], end.plan is not None
    ([2], True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planexec._log import quiet
from planexec.errors import PlanParseError
from planexec.plan import Plan, Step

__all__ = ["StreamUpdate", "StreamEnd", "StreamingPlanParser"]

# A line that opens a block, in any text dialect (tested on complete lines only).
_BLOCK_START_RE = re.compile(
    r"^(?:[^\S\n]|[>*+\-\u2022#])*(?:\*\*|__)?[^\S\n]*#[^\S\n]?(?:task|step)"
    r"[^\S\n]*(?:<[^<>:\n]{0,8}>|\d{1,9})?[^\S\n]*(?:\*\*|__)?[^\S\n]*:"  # hashstep
    r"|^[^\w\n]*Plan[^\S\n]*\d*[^\S\n]*:"  # rewoo's Plan: line
    r"|^[^\S\n]*#E\d{1,9}[^\S\n]*="  # rewoo's #E1 = line
    r"|^[^\S\n]*\d{1,6}[^\S\n]*\.[^\S\n]*[A-Za-z_][\w.]*[^\S\n]*\("  # llmcompiler call
    r"|^[^\S\n]*Thought[^\S\n]*:",  # llmcompiler thought
    re.IGNORECASE,
)
_CLOSERS = {"{": "}", "[": "]"}


@dataclass(frozen=True)
class StreamUpdate:
    """What changed in the steps known so far."""

    arrived: tuple[Step, ...] = ()
    """Steps whose block is complete, new or changed since they were last reported."""
    withdrawn: tuple[int, ...] = ()
    """Ids of steps reported earlier that no longer hold as reported (dropped by a later
    draft, or changed: a changed step is also in ``arrived``)."""

    def __bool__(self) -> bool:
        return bool(self.arrived or self.withdrawn)


@dataclass(frozen=True)
class StreamEnd:
    """The end of a reply: the whole-text plan and the last update."""

    plan: Plan | None
    """``parse_plan(text)``; None when the text holds no plan (see ``error``)."""
    error: PlanParseError | None
    """Why there is no plan, exactly as `parse_plan` raised it."""
    update: StreamUpdate
    """The steps of ``plan`` not yet reported as they are, and the reported steps it
    does not contain (all of them when there is no plan)."""
    text: str
    """The whole reply."""


class _JsonCuts:
    """Where the elements of a streamed JSON plan's step list end (an incremental scan)."""

    def __init__(self) -> None:
        self.pos = 0
        self.stack: list[str] = []
        self.in_string = False
        self.escape = False
        self.cut: tuple[int, str] | None = None
        """The end of the last complete step object, and the brackets that close the rest."""

    def scan(self, text: str) -> None:
        for i in range(self.pos, len(text)):
            c = text[i]
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif c == "\\":
                    self.escape = True
                elif c == '"':
                    self.in_string = False
                continue
            if c == '"' and self.stack:
                self.in_string = True
            elif c in "{[":
                self.stack.append(c)
            elif c in "}]" and self.stack:
                self.stack.pop()
                # a step object closed inside the plan's list: `[{…}` or `{"steps": [{…}`
                if c == "}" and self.stack and self.stack[-1] == "[" and len(self.stack) <= 2:
                    closers = "".join(_CLOSERS[b] for b in reversed(self.stack))
                    self.cut = (i + 1, closers)
        self.pos = len(text)


def _json_start(text: str) -> bool:
    """Whether a reply begins like a JSON plan (after an optional code fence opener)."""
    s = text.lstrip()
    if s.startswith("```"):
        s = s[3:].lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ").lstrip()
    return s[:1] in ("{", "[")


class StreamingPlanParser:
    """Parses a streamed reply; reports each step once its block is complete.

    Args:
        dialect: ``"auto"`` or a dialect of `planexec.parsing.DIALECTS`, as for
            `planexec.parsing.parse_plan`.
        draft_policy: As for `planexec.parsing.parse_plan`.
    """

    def __init__(self, dialect: str = "auto", *, draft_policy: str = "last_complete") -> None:
        from planexec.parsing import DIALECTS, DRAFT_POLICIES

        if dialect != "auto" and dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; expected 'auto' or one of {DIALECTS}")
        if draft_policy not in DRAFT_POLICIES:
            raise ValueError(
                f"unknown draft policy {draft_policy!r}; expected one of {DRAFT_POLICIES}"
            )
        self.dialect = dialect
        self.draft_policy = draft_policy
        self._text = ""
        self._scanned = 0  # text before this offset was scanned for block starts
        self._block_start = 0  # offset of the newest complete block-start line
        self._parsed_at = -1  # the prefix length last parsed
        self._json = _JsonCuts()
        self._reported: dict[int, Step] = {}
        self._done = False
        self.dialect_seen: str | None = None
        """The dialect of the latest parse (of the completed prefix, or the whole reply)."""

    @property
    def text(self) -> str:
        """The reply received so far."""
        return self._text

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps reported and not withdrawn, in id order."""
        return tuple(self._reported[k] for k in sorted(self._reported))

    def feed(self, chunk: str) -> StreamUpdate:
        """Take the next chunk of the reply.

        Returns:
            The steps that became complete (or changed) and those withdrawn.

        Raises:
            RuntimeError: `finish` was called already.
        """
        if self._done:
            raise RuntimeError("the reply is finished; start a new StreamingPlanParser")
        self._text += chunk
        if self._is_json():
            self._json.scan(self._text)
            if self._json.cut is None or self._json.cut[0] == self._parsed_at:
                return StreamUpdate()
            end, closers = self._json.cut
            self._parsed_at = end
            return self._apply(self._parse(self._text[:end] + closers, "json"))
        self._scan_lines()
        if self._block_start == self._parsed_at:
            return StreamUpdate()
        self._parsed_at = self._block_start
        return self._apply(self._parse(self._text[: self._block_start], None))

    def finish(self, chunk: str = "") -> StreamEnd:
        """End the reply (after an optional last chunk): parse the whole text.

        Returns:
            ``parse_plan`` of the whole reply and the update that makes the reported
            steps exactly its steps.
        """
        from planexec.parsing import parse_plan

        if self._done:
            raise RuntimeError("the reply is finished already")
        self._text += chunk
        self._done = True
        plan: Plan | None = None
        error: PlanParseError | None = None
        try:
            plan = parse_plan(self._text, self.dialect, draft_policy=self.draft_policy)
        except PlanParseError as exc:
            error = exc
        if plan is not None:
            self.dialect_seen = plan.dialect
        update = self._apply(plan.steps if plan is not None else ())
        return StreamEnd(plan, error, update, self._text)

    # -- internals ----------------------------------------------------------------------

    def _is_json(self) -> bool:
        return self.dialect == "json" or (self.dialect == "auto" and _json_start(self._text))

    def _scan_lines(self) -> None:
        """Find block-start lines among the lines completed since the last scan."""
        end = self._text.rfind("\n") + 1
        if end <= self._scanned:
            return
        for m in re.finditer(r"[^\n]*\n", self._text[self._scanned : end]):
            if _BLOCK_START_RE.match(m.group()):
                self._block_start = self._scanned + m.start()
        self._scanned = end

    def _parse(self, prefix: str, dialect: str | None) -> tuple[Step, ...]:
        from planexec.parsing import parse_plan

        try:
            with quiet():  # the whole reply's parse logs every finding once, at the end
                plan = parse_plan(prefix, dialect or self.dialect, draft_policy=self.draft_policy)
        except PlanParseError:
            return ()
        self.dialect_seen = plan.dialect
        return plan.steps

    def _apply(self, steps: tuple[Step, ...]) -> StreamUpdate:
        now = {s.id: s for s in steps}
        withdrawn = tuple(
            sid for sid, s in self._reported.items() if now.get(sid) != s
        )
        arrived = tuple(s for s in now.values() if self._reported.get(s.id) != s)
        for sid in withdrawn:
            del self._reported[sid]
        for s in arrived:
            self._reported[s.id] = s
        return StreamUpdate(arrived, withdrawn)
