"""The plan model: `Plan`, `Step`, `Ref`, `Template` and `Diagnostic`.

Everything here is a frozen dataclass. A parsed plan is a value: the parser builds it,
validation adds diagnostics by building a new one, and nothing downstream mutates it.

Arguments are nested values (``dict``/``list``/scalars) in which a reference to an
earlier step's result appears either as a `Ref` (the whole value *is* the reference, so
it receives the referenced value with its type) or inside a `Template` (a string with
one or more embedded references, interpolated as text).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeAlias

from planexec._frozen import cached, frozen_slots

__all__ = [
    "ArgValue",
    "Diagnostic",
    "Plan",
    "PathElem",
    "Ref",
    "Severity",
    "Step",
    "Template",
    "format_path",
    "iter_refs",
    "to_jsonable",
]

PathElem: TypeAlias = str | int
"""One element of a reference path: a key (``.name`` or ``["key"]``) or an index."""


class Severity(StrEnum):
    """How serious a `Diagnostic` is."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def format_path(path: tuple[PathElem, ...]) -> str:
    """Render a path the way the reference grammar writes it.

    Identifiers use ``.name``; other keys use ``["key"]``; integers use ``[i]``.

    >>> format_path(("items", 0, "id", "excess purge"))
    '.items[0].id["excess purge"]'
    """
    out: list[str] = []
    for elem in path:
        if isinstance(elem, int):
            out.append(f"[{elem}]")
        elif elem.isidentifier():
            out.append(f".{elem}")
        else:
            out.append(f"[{json.dumps(elem)}]")
    return "".join(out)


@frozen_slots
@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to an earlier step's result, found in a step's arguments.

    A reference is never evaluated: it is data that names a step and, optionally, a
    path into that step's structured output.
    """

    # Slots (no instance ``__dict__``): a plan keeps one per reference alive, and the
    # garbage collector walks every one of them at each full collection (issue 29).

    step: int
    """The number of the referenced step (``3`` for ``<step_3>``)."""
    path: tuple[PathElem, ...] = ()
    """Keys and indexes to follow into the step's output, in order."""
    hint: str | None = None
    """For a *hinted* reference, the words the grammar could not follow.

    E.g. ``"step_1_selected_site"``. Only the LLM fallback can resolve such a reference.
    """
    raw: str = ""
    """The reference exactly as written in the plan (``"{step_2.items[0]}"``)."""
    whole_value: bool = True
    """True when the reference is the entire value of an argument (type preserved)."""
    location: str = ""
    """Where the reference sits, e.g. ``"args.filters[1].asset_id"``."""

    @property
    def is_hinted(self) -> bool:
        """Whether only the LLM fallback can resolve this reference."""
        return self.hint is not None

    @property
    def canonical(self) -> str:
        """The canonical text of the reference, e.g. ``<step_2.items[0].id>``.

        A hinted reference keeps its raw text, since it has no canonical path.
        """
        if self.hint is not None:
            return self.raw or f"{{{self.hint}}}"
        return f"<step_{self.step}{format_path(self.path)}>"

    def __str__(self) -> str:
        return self.canonical


@dataclass(frozen=True)
class Template:
    """A string with one or more embedded references, interpolated as text."""

    parts: tuple[str | Ref, ...]
    """Literal text and references, in order."""

    @property
    def refs(self) -> tuple[Ref, ...]:
        """The references embedded in this template."""
        return tuple(p for p in self.parts if isinstance(p, Ref))

    @property
    def canonical(self) -> str:
        """The template's text with each reference in its canonical form."""
        return "".join(p if isinstance(p, str) else p.canonical for p in self.parts)

    def __str__(self) -> str:
        return self.canonical


ArgValue: TypeAlias = Any
"""A nested argument value: JSON scalars, lists, dicts, `Ref` and `Template`."""


_LEAVES = frozenset({str, int, float, bool, type(None)})
"""Types whose values hold no reference (exactly these types; subclasses are looked into)."""


def iter_refs(value: ArgValue) -> Iterator[Ref]:
    """Yield every `Ref` in a nested argument value, depth first, in order."""
    cls = type(value)
    if cls is dict or cls is list or cls is tuple:  # the common containers, at once
        for v in value.values() if cls is dict else value:
            inner = type(v)
            if inner is Ref:
                yield v
            elif inner not in _LEAVES:
                yield from iter_refs(v)
        return
    if cls in _LEAVES:
        return
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, Template):
        yield from value.refs
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from iter_refs(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from iter_refs(v)


def to_jsonable(value: ArgValue) -> Any:
    """Turn an argument value into plain JSON data, writing references canonically."""
    if isinstance(value, Ref | Template):
        return value.canonical
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Diagnostic:
    """Something the parser or a check noticed about a plan.

    Nothing is dropped or repaired without one.
    """

    line: int | None
    """1-based line in the plan text, or None when it concerns the whole plan."""
    severity: Severity
    """``info``, ``warning`` or ``error``."""
    code: str
    """A stable code, e.g. ``ARGS_REPAIRED``; `docs/plan-language.md` lists them all."""
    message: str
    """What was found, in words a person can act on."""
    step: int | None = None
    """The step concerned, if any."""

    def to_dict(self) -> dict[str, Any]:
        """Return the diagnostic as a JSON-ready dict."""
        return {
            "line": self.line,
            "severity": str(self.severity),
            "code": self.code,
            "message": self.message,
            "step": self.step,
        }

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "plan"
        step = f" step {self.step}" if self.step is not None else ""
        return f"{where}{step}: {self.severity} {self.code}: {self.message}"


class _Derived:
    """A base without slots: the ``__dict__`` of a slotted `Step`, for its `cached` values.

    Made at the first `cached` value a step stores (the executor reads them), not before:
    a parsed step keeps no dict.
    """


@frozen_slots
@dataclass(frozen=True, slots=True)
class Step(_Derived):
    """One step of a plan: a tool call (or a reasoning step when ``tool`` is None)."""

    # The fields are slots (issue 29): a plan keeps every step alive, and an instance
    # ``__dict__`` holding fourteen fields is a second object, near three times the memory,
    # that each full collection of the garbage collector walks. What a step computes
    # from its fields (`refs`, `deps`, `ref_args`) goes to the ``__dict__`` of `_Derived`.

    id: int
    """The step's number (``3`` for ``#Task3`` / ``#E3`` / ``3. tool(...)``)."""
    task: str = ""
    """What the step is meant to do, in the planner's words."""
    tool: str | None = None
    """The tool to call, normalized (``sites()`` → ``sites``); None for reasoning steps."""
    args: dict[str, ArgValue] = field(default_factory=dict)
    """Keyword arguments; values may hold `Ref` and `Template`."""
    positional: tuple[ArgValue, ...] = ()
    """Positional arguments (llmcompiler ``tool(a, b)``, rewoo ``Tool[input]``).

    They are bound to the tool's parameters, in schema order, at resolution time.
    """
    args_valid: bool = True
    """False when ``#Args`` could not be read: the step must not run as written."""
    args_text: str | None = None
    """The arguments exactly as written in the plan, if any."""
    server: str | None = None
    """The server or agent named by ``#ServerN`` / ``#AgentN``, if any."""
    no_tool: bool = False
    """True when the plan says in so many words that the step calls no tool
    (``#Tool: none``): it is a reasoning step even when it names an agent or server."""
    cut_off: bool = False
    """True when the planner's reply ends inside this step (hashstep): the plan's end is
    missing (`planexec.planner.cut_off`). An ``#Args`` that merely looks unterminated in
    the middle of a reply does not set it."""
    depends_on: tuple[int, ...] = ()
    """Steps this one depends on: explicit dependencies ∪ referenced steps, sorted."""
    explicit_deps: tuple[int, ...] = ()
    """Dependencies written by the planner (``#DependencyN``), sorted."""
    expected_output: str | None = None
    """The planner's description of the expected result. Never used as a result."""
    lines: tuple[int, int] = (0, 0)
    """First and last 1-based line of the step in the plan text."""

    @property
    def key(self) -> str:
        """The step's canonical name, ``step_N``."""
        return f"step_{self.id}"

    @property
    def is_reasoning(self) -> bool:
        """Whether the step calls no tool."""
        return self.tool is None

    @property
    def selects_tool(self) -> bool:
        """Whether the step names an agent or server but no tool (and not ``#Tool: none``).

        Such a step gets its tool by *selection* among that server's tools (see
        `planexec.selection`), never by reasoning.
        """
        return self.tool is None and self.server is not None and not self.no_tool

    # A step is a value: what it knows of its own arguments is computed once, on first
    # use (`planexec._frozen.cached` stores it in the instance's ``__dict__``, beside
    # the fields' slots; ``replace`` makes a new step, which computes its own).

    def each_ref(self) -> Iterator[Ref]:
        """Every reference in the step's arguments, in the order of `refs`, kept nowhere.

        `refs` keeps them on the step, a tuple alive as long as the plan: one pass over
        a plan (its checks, when it is parsed) reads them here instead.
        """
        yield from iter_refs(self.args)
        if self.positional:
            yield from iter_refs(self.positional)

    @cached
    def refs(self) -> tuple[Ref, ...]:
        """Every reference in the step's arguments (keyword and positional)."""
        found = tuple(iter_refs(self.args))  # (`each_ref`, without its generator)
        return found + tuple(iter_refs(self.positional)) if self.positional else found

    @cached
    def deps(self) -> frozenset[int]:
        """Every step this one waits for: ``depends_on`` ∪ ``explicit_deps`` ∪ referenced."""
        return frozenset(self.depends_on).union(self.explicit_deps, (r.step for r in self.refs))

    @cached
    def ref_args(self) -> Mapping[int, str]:
        """For each referenced step id, the first argument that refers to it.

        Keyword arguments by name, positional ones as ``positional argument N``.
        """
        where: dict[int, str] = {}
        for name, value in self.args.items():
            for ref in iter_refs(value):
                where.setdefault(ref.step, name)
        for i, value in enumerate(self.positional):
            for ref in iter_refs(value):
                where.setdefault(ref.step, f"positional argument {i + 1}")
        return where

    def to_dict(self) -> dict[str, Any]:
        """Return the step as JSON-ready data (the ``parse --json`` shape)."""
        return {
            "id": self.id,
            "task": self.task,
            "server": self.server,
            "tool": self.tool,
            "args": to_jsonable(self.args),
            "positional": to_jsonable(list(self.positional)),
            "args_valid": self.args_valid,
            "depends_on": list(self.depends_on),
            "expected_output": self.expected_output,
            "lines": list(self.lines),
            "references": [
                {
                    "step": r.step,
                    "path": list(r.path),
                    "hint": r.hint,
                    "raw": r.raw,
                    "whole_value": r.whole_value,
                    "location": r.location,
                }
                for r in self.refs
            ],
        }


@dataclass(frozen=True)
class Plan:
    """A parsed plan: its steps in order, and every diagnostic found on the way."""

    steps: tuple[Step, ...]
    """The steps, in plan order."""
    diagnostics: tuple[Diagnostic, ...] = ()
    """Everything noticed while parsing and checking, in line order."""
    dialect: str = "hashstep"
    """``hashstep``, ``rewoo`` or ``llmcompiler``."""
    source: str = ""
    """The plan text the steps were parsed from."""

    def step(self, step_id: int) -> Step:
        """Return the step with this id.

        Raises:
            KeyError: there is no such step.
        """
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def ids(self) -> tuple[int, ...]:
        """The step ids, in plan order."""
        return tuple(s.id for s in self.steps)

    @property
    def has_errors(self) -> bool:
        """Whether any diagnostic is an error."""
        return any(d.severity is Severity.ERROR for d in self.diagnostics)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The error diagnostics."""
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)

    def with_diagnostics(self, extra: tuple[Diagnostic, ...] | list[Diagnostic]) -> Plan:
        """Return a copy with more diagnostics, kept in line order."""
        merged = sorted(
            (*self.diagnostics, *extra),
            key=lambda d: (d.line if d.line is not None else 0),
        )
        return replace(self, diagnostics=tuple(merged))

    def to_dict(self) -> dict[str, Any]:
        """Return the plan as JSON-ready data (the ``planexec parse --json`` shape)."""
        return {
            "dialect": self.dialect,
            "steps": [s.to_dict() for s in self.steps],
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }
