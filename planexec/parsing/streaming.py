r"""Incremental plan parsing: steps as soon as their block is complete.

`StreamingPlanParser` consumes a planner's reply in chunks, as a model streams it, and
reports each step once its block is complete: the next block has started (a text
dialect: the next ``#TaskN:`` / ``#EN =`` / ``N.`` line is complete; json: the step's
object in the ``steps`` list has closed). It re-uses the whole-text parser
(`planexec.parsing.parse_plan`), and does work linear in the reply's length whatever the
chunks:

- the *completed prefix* is parsed whole only at block starts at least twice as far
  into the reply as the last such parse (so these parses cost at most twice the reply);
- the blocks completed in between are parsed alone (each once, in the dialect of the
  last whole parse, their line numbers shifted), and taken when they continue the plan:
  the next step numbers in order, nothing else. Anything else (a restarting draft, a
  duplicated number, a block without a step after a few tries) waits for the next whole
  parse.

The block starts are taken one by one in text order whatever the chunks, so what it
reports never depends on how the reply was cut into chunks, only on the text received
so far.

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
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planexec._log import quiet
from planexec.errors import PlanParseError
from planexec.plan import Plan, Step

if TYPE_CHECKING:
    from planexec.parsing.checks import CatalogLike

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
_EMPTY_TRIES = 4
"""Block starts a region may gather without a step before it waits for a whole parse."""
_WHOLE_MIN = 512
"""The reply's completed prefix is parsed whole again once it is twice as long as at the
last whole parse, and at least this long."""


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
        self.cuts: list[tuple[int, str]] = []
        """Every such end found by the last `scan`, in order."""

    def scan(self, chunk: str) -> None:
        """Scan the next chunk of the reply (the text after everything scanned)."""
        self.cuts = []
        base = self.pos
        for i, c in enumerate(chunk, base):
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
                    self.cuts.append(self.cut)
        self.pos = base + len(chunk)


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
        catalog: As for `planexec.parsing.parse_plan`: the tools the plan may use (a
            JSON plan's steps are read with it, so a step naming its tool in a field the
            json dialect reads only with a catalog arrives as a tool step, as the whole
            reply's parse reads it).
    """

    def __init__(
        self,
        dialect: str = "auto",
        *,
        draft_policy: str = "last_complete",
        catalog: CatalogLike | None = None,
    ) -> None:
        from planexec.parsing import DIALECTS, DRAFT_POLICIES

        if dialect != "auto" and dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; expected 'auto' or one of {DIALECTS}")
        if draft_policy not in DRAFT_POLICIES:
            raise ValueError(
                f"unknown draft policy {draft_policy!r}; expected one of {DRAFT_POLICIES}"
            )
        self.dialect = dialect
        self.draft_policy = draft_policy
        self.catalog = catalog
        """The tools the plan may use (None: read without a catalog)."""
        self._chunks: list[str] = []  # the reply, as received
        self._ends: list[int] = []  # the end offset of each chunk
        self._size = 0
        self._line: list[str] = []  # the pieces of the line being received
        self._line_at = 0  # its offset
        self._line_no = 1  # its number (1-based)
        self._json: _JsonCuts | None = None  # the reply is a JSON plan (decided once)
        self._decided = False
        self._head_at: int | None = None  # where the reply's first non-blank text is
        self._local_dialect: str | None = None
        # the schedule (see the module): the last whole parse and what followed it
        self._whole_at: int | None = None
        self._whole_parses = 0  # how many whole parses were made
        self._whole: tuple[Step, ...] = ()
        self._whole_dialect: str | None = None
        self._start_at: list[int] = []  # the block starts taken, and their line numbers
        self._start_line: list[int] = []
        self._region_at = 0  # where the text not yet in a step begins
        self._region_line = 1
        self._region_tries = 0
        self._local: list[Step] = []
        self._last_id = 0
        self._waiting = False  # a block did not continue the plan: wait for a whole parse
        self._reported: dict[int, Step] = {}
        self._done = False
        self.dialect_seen: str | None = None
        """The dialect of the latest parse (of the completed prefix, or the whole reply)."""

    @property
    def text(self) -> str:
        """The reply received so far."""
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
            self._ends = [self._size]
        return self._chunks[0] if self._chunks else ""

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
        if not chunk:
            return StreamUpdate()
        start = self._size
        parses, kept = self._whole_parses, len(self._local)
        self._chunks.append(chunk)
        self._size += len(chunk)
        self._ends.append(self._size)
        changed = False
        if not self._decided:
            changed |= self._decide(chunk, start)
        if self._json is not None:
            self._json.scan(chunk)
            for end, closers in self._json.cuts:
                changed |= self._advance(end, 0, closers)
        else:
            for at, line_no in self._block_starts(chunk, start):
                changed |= self._advance(at, line_no, "")
        if not changed:
            return StreamUpdate()
        if parses == self._whole_parses:
            # no whole parse: only blocks read one by one were added, each with a number
            # above every reported step's, and nothing reported changed (comparing every
            # step again at each block would be quadratic in the plan)
            return self._apply(tuple(self._local[kept:]), added=True)
        return self._apply((*self._whole, *self._local))

    def finish(self, chunk: str = "") -> StreamEnd:
        """End the reply (after an optional last chunk): parse the whole text.

        Returns:
            ``parse_plan`` of the whole reply and the update that makes the reported
            steps exactly its steps.
        """
        from planexec.parsing import parse_plan

        if self._done:
            raise RuntimeError("the reply is finished already")
        if chunk:
            self._chunks.append(chunk)
            self._size += len(chunk)
            self._ends.append(self._size)
        self._done = True
        text = self.text
        plan: Plan | None = None
        error: PlanParseError | None = None
        try:
            plan = parse_plan(
                text, self.dialect, draft_policy=self.draft_policy, catalog=self.catalog
            )
        except PlanParseError as exc:
            error = exc
        if plan is not None:
            self.dialect_seen = plan.dialect
        update = self._apply(plan.steps if plan is not None else ())
        return StreamEnd(plan, error, update, text)

    # -- internals ----------------------------------------------------------------------

    def _decide(self, chunk: str, start: int) -> bool:
        """Whether the reply is a JSON plan, once its first characters tell.

        Returns:
            Whether steps changed (the text before ``chunk`` held complete ones).
        """
        if self.dialect == "json":
            self._json, self._decided = _JsonCuts(), True
        elif self.dialect != "auto":
            self._decided = True
        else:
            if self._head_at is None:
                blank = len(chunk) - len(chunk.lstrip())
                if blank == len(chunk):
                    return False  # blank so far
                self._head_at = start + blank
            head = self._slice(self._head_at, min(self._size, self._head_at + 64))
            if head.startswith("```") and len(head) < 16:
                return False  # a fence opener still arriving
            self._decided = True
            if _json_start(head):
                self._json = _JsonCuts()
        changed = False
        if self._json is not None and start:
            self._json.scan(self._slice(0, start))
            for end, closers in self._json.cuts:
                changed |= self._advance(end, 0, closers)
        return changed

    def _slice(self, a: int, b: int) -> str:
        """The reply's text from offset ``a`` to ``b`` (work: its length, and a bisect)."""
        if a >= b:
            return ""
        i = bisect_right(self._ends, a)
        j = bisect_right(self._ends, b - 1)
        first = self._ends[i - 1] if i else 0
        return "".join(self._chunks[i : j + 1])[a - first : b - first]

    def _block_starts(self, chunk: str, start: int) -> list[tuple[int, int]]:
        """The block-start lines the chunk completes: (offset, line number), in order."""
        found: list[tuple[int, int]] = []
        pos = 0
        while True:
            nl = chunk.find("\n", pos)
            if nl < 0:
                if pos < len(chunk):
                    self._line.append(chunk[pos:])
                return found
            self._line.append(chunk[pos : nl + 1])
            line = "".join(self._line)
            if _BLOCK_START_RE.match(line):
                found.append((self._line_at, self._line_no))
            self._line = []
            self._line_at = start + nl + 1
            # a lone "\r" ends a line too, as for `parse_plan` (`clean_reply`)
            self._line_no += 1 + line.count("\r") - line.endswith("\r\n")
            pos = nl + 1

    def _advance(self, at: int, line_no: int, closers: str) -> bool:
        """A block is complete up to offset ``at``: a whole parse, or one of the block."""
        if self._json is None:
            self._start_at.append(at)
            self._start_line.append(line_no)
        if self._whole_at is None or at >= max(2 * self._whole_at, _WHOLE_MIN):
            prefix = self._slice(0, at) + closers
            self._whole = self._parse(prefix, "json" if self._json is not None else None)
            self._whole_parses += 1
            self._whole_at, self._whole_dialect = at, self.dialect_seen if self._whole else None
            self._local, self._waiting, self._region_tries = [], False, 0
            self._region_at, self._region_line = at, line_no
            if self._json is None:
                # the text after the last step's lines (a rewoo ``Plan:`` line may be there)
                last = max((st.lines[1] for st in self._whole), default=0)
                k = bisect_right(self._start_line, last)
                self._region_at, self._region_line = self._start_at[k], self._start_line[k]
            self._last_id = max((st.id for st in self._whole), default=0)
            return True
        if self._waiting:
            return False
        self._region_tries += 1
        region = self._slice(self._region_at, at)
        if self._json is not None:
            region = '{"steps": [' + region.lstrip().lstrip(",") + "]}"
        dialect = self._whole_dialect or ("json" if self._json is not None else None)
        steps = self._parse(region, dialect, keep_dialect=True)
        if not steps:
            self._waiting = self._region_tries >= _EMPTY_TRIES
            return False
        ids = [st.id for st in steps]
        if ids != list(range(self._last_id + 1, self._last_id + 1 + len(ids))) or (
            self._whole_dialect is not None and self._local_dialect != self._whole_dialect
        ):
            self._waiting = True  # not the plan continuing: the next whole parse says
            return False
        shift = self._region_line - 1  # the region starts a line: shift its numbers
        if shift and self._json is None:
            steps = tuple(
                replace(st, lines=(st.lines[0] + shift, st.lines[1] + shift))
                if st.lines != (0, 0) else st
                for st in steps
            )
        self._local.extend(steps)
        self._last_id = ids[-1]
        if self._whole_dialect is None:
            self._whole_dialect = self._local_dialect
        self._region_at, self._region_line, self._region_tries = at, line_no, 0
        return True

    def _parse(
        self, text: str, dialect: str | None, *, keep_dialect: bool = False
    ) -> tuple[Step, ...]:
        from planexec.parsing import parse_plan

        try:
            with quiet():  # the whole reply's parse logs every finding once, at the end
                plan = parse_plan(
                    text,
                    dialect or self.dialect,
                    draft_policy=self.draft_policy,
                    catalog=self.catalog,
                )
        except PlanParseError:
            return ()
        if keep_dialect:
            self._local_dialect = plan.dialect
        else:
            self.dialect_seen = plan.dialect
        return plan.steps

    def _apply(self, steps: tuple[Step, ...], *, added: bool = False) -> StreamUpdate:
        """Report ``steps`` as the plan so far (``added``: the steps added to it only)."""
        now = {s.id: s for s in steps}
        withdrawn = () if added else tuple(
            sid for sid, s in self._reported.items() if now.get(sid) != s
        )
        arrived = tuple(s for s in now.values() if self._reported.get(s.id) != s)
        for sid in withdrawn:
            del self._reported[sid]
        for s in arrived:
            self._reported[s.id] = s
        return StreamUpdate(arrived, withdrawn)
