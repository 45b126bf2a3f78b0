"""Checks on a parsed plan: its step graph, and (given a tool catalog) its tools and args.

`check_plan` never changes steps; it returns the plan with extra diagnostics, in line
order, and is idempotent (a diagnostic already on the plan is not added twice), so
`parse_plan` can run the structural checks and a later ``validate`` pass can run them
again with a catalog.

Codes (all stable; ``docs/plan-language.md`` has an example of each):

- ``DEPENDENCY_MISSING`` / ``REF_MISSING`` (error): a dependency / reference names a
  step that is not in the plan.
- ``DEPENDENCY_SELF`` / ``REF_SELF`` (error): a step depends on / refers to itself.
- ``DEPENDENCY_FORWARD`` / ``REF_FORWARD`` (warning): ... on a step written later.
- ``CYCLE`` (error): the dependencies form a cycle, named in order (``1 → 3 → 1``).
- ``REF_HINTED`` (warning): a reference the resolver's filter tier or LLM fallback must
  resolve (not
  repeated when the dialect parser already reported it for that step).
- ``TOOL_UNKNOWN`` (error): the catalog has no such tool; the closest names are given.
- ``TOOL_SERVER_MISMATCH`` (warning): the tool exists, but not on the named server.
- ``ARGS_MISSING_REQUIRED`` (error): a required argument is neither given nor
  referenced (positional arguments count for the first parameters, in order).
- ``ARGS_UNEXPECTED`` (warning): an argument the tool does not take (error: more
  positional arguments than the tool has parameters).
- ``TOOL_AMBIGUOUS`` (warning): the catalog cannot say which tool is meant (the same
  name on several servers, and no server named).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from planexec.parsing.refs import HINTED_BY
from planexec.plan import Diagnostic, Plan, Severity, Step

__all__ = ["CatalogLike", "check_plan", "find_cycles"]


@runtime_checkable
class CatalogLike(Protocol):
    """What `check_plan` needs from a tool catalog (`planexec.tools.ToolCatalog` fits).

    A method raises `KeyError` when the catalog cannot say which tool is meant (the
    same name on several servers and none given): `check_plan` reports that as
    ``TOOL_AMBIGUOUS``.
    """

    def has(self, name: str, server: str | None = None) -> bool:
        """Whether a tool of this name (on this server, if given) exists."""
        ...

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """The ``n`` closest real tool names."""
        ...

    def required_args(self, name: str, server: str | None = None) -> list[str]:
        """The tool's required parameters, in schema order."""
        ...

    def arg_names(self, name: str, server: str | None = None) -> list[str]:
        """All the tool's parameters, in schema order."""
        ...


def find_cycles(edges: dict[int, tuple[int, ...]]) -> list[list[int]]:
    """Return the elementary cycles found by a depth-first search, each once.

    ``edges`` maps a step to the steps it depends on. A cycle is returned as the list
    of its steps starting at its smallest id, e.g. ``[1, 3]`` for ``1 → 3 → 1``.
    Self loops are not reported here. Iterative, so deep plans do not hit the
    recursion limit.
    """
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(edges, white)
    found: dict[tuple[int, ...], list[int]] = {}

    def successors(node: int) -> list[int]:
        return [d for d in edges.get(node, ()) if d in edges and d != node]

    for root in edges:
        if color[root] != white:
            continue
        # Each frame keeps its node's successors and how many were visited: computing
        # them again at every visit of the frame would be quadratic in a node's degree.
        stack: list[tuple[int, list[int], int]] = [(root, successors(root), 0)]
        path: list[int] = [root]
        on_path = {root: 0}
        color[root] = grey
        while stack:
            node, succ, i = stack[-1]
            if i < len(succ):
                stack[-1] = (node, succ, i + 1)
                nxt = succ[i]
                if color[nxt] == grey and nxt in on_path:
                    cyc = path[on_path[nxt] :]
                    k = cyc.index(min(cyc))
                    norm = cyc[k:] + cyc[:k]
                    found.setdefault(tuple(norm), norm)
                elif color[nxt] == white:
                    color[nxt] = grey
                    on_path[nxt] = len(path)
                    path.append(nxt)
                    stack.append((nxt, successors(nxt), 0))
            else:
                stack.pop()
                color[node] = black
                path.pop()
                on_path.pop(node, None)
    return list(found.values())


def _graph_checks(plan: Plan) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    order = {s.id: i for i, s in enumerate(plan.steps)}
    # A dialect parser may already have reported hinted references (rewoo does).
    by_id = {s.id: s for s in plan.steps}
    reported = {d.step for d in plan.diagnostics if d.code == "REF_HINTED"}
    hinted_known = {
        (sid, r.location) for sid in reported if sid in by_id for r in by_id[sid].each_ref()
    }
    for step in plan.steps:
        line = step.lines[0] or None
        pos = order[step.id]
        referenced: set[int] = set()
        for ref in step.each_ref():  # (not `refs`: a tuple kept on every step)
            referenced.add(ref.step)
            if ref.step in order and order[ref.step] < pos and ref.hint is None:
                continue  # an earlier step, read by the grammar: nothing to report
            where = f"{ref.location or 'args'} ({ref.raw or ref.canonical})"
            if ref.step == step.id:
                out.append(
                    Diagnostic(
                        line,
                        Severity.ERROR,
                        "REF_SELF",
                        f"step {step.id} refers to its own result in {where}",
                        step.id,
                    )
                )
            elif ref.step not in order:
                out.append(
                    Diagnostic(
                        line,
                        Severity.ERROR,
                        "REF_MISSING",
                        f"step {step.id} refers to step {ref.step} in {where}, which is "
                        "not in the plan",
                        step.id,
                    )
                )
            elif order[ref.step] > pos:
                out.append(
                    Diagnostic(
                        line,
                        Severity.WARNING,
                        "REF_FORWARD",
                        f"step {step.id} refers to step {ref.step} in {where}, which comes "
                        "later in the plan",
                        step.id,
                    )
                )
            if ref.is_hinted and (step.id, ref.location) not in hinted_known:
                out.append(
                    Diagnostic(
                        line,
                        Severity.WARNING,
                        "REF_HINTED",
                        f"step {step.id}: {where} names step {ref.step} with words the "
                        f"grammar cannot follow; {HINTED_BY}",
                        step.id,
                    )
                )
        # explicit dependencies, and those a parser added (e.g. from a reasoning step's
        # task text): every one must name an earlier step of the plan
        unreported = set(step.explicit_deps).union(step.depends_on) - referenced
        for dep in sorted(unreported):  # (a referenced one is reported as a reference)
            if dep == step.id:
                code, sev, why = "DEPENDENCY_SELF", Severity.ERROR, "itself"
            elif dep not in order:
                code, sev, why = (
                    "DEPENDENCY_MISSING",
                    Severity.ERROR,
                    f"step {dep}, which is not in the plan",
                )
            elif order[dep] > pos:
                code, sev, why = (
                    "DEPENDENCY_FORWARD",
                    Severity.WARNING,
                    f"step {dep}, which comes later in the plan",
                )
            else:
                continue
            out.append(Diagnostic(line, sev, code, f"step {step.id} depends on {why}", step.id))
    edges = {s.id: s.depends_on for s in plan.steps}
    first_line = {s.id: s.lines[0] or None for s in plan.steps}
    # A cycle needs an edge to a step at the same place or later (a self loop is none):
    # with every dependency on an earlier step there is nothing to search.
    forward = any(order.get(d, -1) > order[sid] for sid, deps in edges.items() for d in deps)
    for cyc in find_cycles(edges) if forward else ():
        names = " \u2192 ".join(str(n) for n in [*cyc, cyc[0]])
        out.append(
            Diagnostic(
                first_line[cyc[0]],
                Severity.ERROR,
                "CYCLE",
                f"steps depend on each other in a cycle: {names}",
                cyc[0],
            )
        )
    return out


class _CannotTell(Exception):
    """The catalog raised `KeyError`: it cannot say which tool is meant."""

    def __init__(self, cause: KeyError) -> None:
        super().__init__(cause)
        self.why = cause.args[0] if cause.args else cause


class _Asked:
    """A catalog whose `KeyError` becomes `_CannotTell`, each answer asked for once.

    Only what the catalog itself raises is the catalog's answer; a `KeyError` raised by
    the checks' own code is a bug and propagates. One `check_plan` asks about the same
    few tools for every step: the answers are kept for the check (not the errors).
    """

    def __init__(self, catalog: CatalogLike) -> None:
        self._catalog = catalog
        self._answers: dict[tuple[str, str, str | None], Any] = {}

    def _ask(self, question: str, name: str, server: str | None) -> Any:
        key = (question, name, server)
        try:
            return self._answers[key]
        except KeyError:
            pass
        try:
            answer = getattr(self._catalog, question)(name, server)
        except KeyError as exc:
            raise _CannotTell(exc) from exc
        self._answers[key] = answer
        return answer

    def has(self, name: str, server: str | None = None) -> bool:
        return bool(self._ask("has", name, server))

    def suggest(self, name: str, n: int = 3) -> list[str]:
        try:
            return self._catalog.suggest(name, n)
        except KeyError as exc:
            raise _CannotTell(exc) from exc

    def required_args(self, name: str, server: str | None = None) -> list[str]:
        return list(self._ask("required_args", name, server))

    def arg_names(self, name: str, server: str | None = None) -> list[str]:
        return list(self._ask("arg_names", name, server))


def _catalog_checks(step: Step, catalog: _Asked) -> list[Diagnostic]:
    if step.tool is None:
        return []
    try:
        return _tool_checks(step, catalog)
    except _CannotTell as exc:  # e.g. a name that exists on several servers
        why = exc.why
        return [
            Diagnostic(
                step.lines[0] or None,
                Severity.WARNING,
                "TOOL_AMBIGUOUS",
                f"step {step.id}: cannot check tool {step.tool!r}: {why}",
                step.id,
            )
        ]


def _tool_checks(step: Step, catalog: CatalogLike) -> list[Diagnostic]:
    assert step.tool is not None
    line = step.lines[0] or None
    tool, server = step.tool, step.server
    if server is not None and catalog.has(tool, server):
        lookup_server: str | None = server
    elif catalog.has(tool):
        lookup_server = None
        if server is not None:
            return [
                Diagnostic(
                    line,
                    Severity.WARNING,
                    "TOOL_SERVER_MISMATCH",
                    f"step {step.id}: tool {tool!r} exists, but not on server {server!r}; "
                    f"the tool of that name is used",
                    step.id,
                ),
                *_arg_checks(step, catalog, None),
            ]
    else:
        close = catalog.suggest(tool, 3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return [
            Diagnostic(
                line,
                Severity.ERROR,
                "TOOL_UNKNOWN",
                f"step {step.id} calls the tool {tool!r}, which does not exist{hint}",
                step.id,
            )
        ]
    return _arg_checks(step, catalog, lookup_server)


def _arg_checks(step: Step, catalog: CatalogLike, server: str | None) -> list[Diagnostic]:
    if not step.args_valid or step.tool is None:
        return []
    line = step.lines[0] or None
    names = list(catalog.arg_names(step.tool, server))
    given = set(step.args) | set(names[: len(step.positional)])
    out: list[Diagnostic] = []
    missing = [a for a in catalog.required_args(step.tool, server) if a not in given]
    if missing:
        out.append(
            Diagnostic(
                line,
                Severity.ERROR,
                "ARGS_MISSING_REQUIRED",
                f"step {step.id}: tool {step.tool!r} requires "
                f"{', '.join(repr(m) for m in missing)}, neither given nor referenced",
                step.id,
            )
        )
    unexpected = [a for a in step.args if a not in names]
    if unexpected:
        out.append(
            Diagnostic(
                line,
                Severity.WARNING,
                "ARGS_UNEXPECTED",
                f"step {step.id}: tool {step.tool!r} takes no argument "
                f"{', '.join(repr(u) for u in unexpected)} (it takes "
                f"{', '.join(names) or 'none'})",
                step.id,
            )
        )
    if len(step.positional) > len(names):
        out.append(
            Diagnostic(
                line,
                Severity.ERROR,
                "ARGS_UNEXPECTED",
                f"step {step.id}: tool {step.tool!r} takes {len(names)} argument(s), "
                f"{len(step.positional)} positional given",
                step.id,
            )
        )
    return out


def check_plan(plan: Plan, catalog: CatalogLike | None = None) -> Plan:
    """Check a plan's step graph and, given a catalog, its tools and arguments.

    Args:
        plan: A parsed plan.
        catalog: Tools to check against; without one only the graph is checked.

    Returns:
        The same plan with the new diagnostics merged in line order. Diagnostics
        already on the plan are not repeated, so checking twice changes nothing.
    """
    found = _graph_checks(plan)
    if catalog is not None:
        asked = _Asked(catalog)
        for step in plan.steps:
            found.extend(_catalog_checks(step, asked))
    existing = set(plan.diagnostics)
    new: list[Diagnostic] = []
    for d in found:
        if d not in existing:
            existing.add(d)
            new.append(d)
    return plan.with_diagnostics(new) if new else plan
