"""``planexec parse``, ``planexec validate`` and ``planexec show``: plan text → Plan.

- ``parse FILE|- [--dialect D] [--draft-policy P] [--tools MODULE:ATTR] [--json]`` prints
  the steps and the diagnostics; exit 0 when a plan was produced, 2 (with the reason on
  stderr, and ``{"error": ...}`` on stdout with ``--json``) when none was. With
  ``--tools`` the plan is read with the catalog (`parse_plan(..., catalog=)`: a JSON
  plan's tool is the field naming a catalog tool) and checked against it.
- ``validate FILE --tools MODULE:ATTR [--json]`` also checks the plan against the
  tools (unknown tools, missing required arguments); exit 1 when an error diagnostic
  was found, 0 otherwise, 2 when there is no plan or the tools cannot be loaded.
- ``show FILE --format mermaid|dot|text`` draws the step graph.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from planexec._log import quiet
from planexec.commands._args import read_input
from planexec.commands._output import to_json
from planexec.errors import ConfigError, PlanexecError, PlanParseError
from planexec.parsing import DIALECTS, DRAFT_POLICIES, check_plan, parse_plan
from planexec.plan import Plan, Severity, Step, to_jsonable

if TYPE_CHECKING:
    from planexec.parsing import CatalogLike

__all__ = ["register", "render_dot", "render_mermaid", "render_text"]

_SEVERITY_STYLE = {"info": "dim", "warning": "yellow", "error": "bold red"}


def register(subparsers: Any) -> None:
    """Add the ``parse``, ``validate`` and ``show`` subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("file", metavar="FILE", help="the plan text, or - for stdin")
    common.add_argument(
        "--dialect",
        choices=("auto", *DIALECTS),
        default="auto",
        help="plan dialect (default: detect it)",
    )
    common.add_argument(
        "--draft-policy",
        choices=DRAFT_POLICIES,
        default="last_complete",
        help="which draft to use when the reply holds several (default: last_complete)",
    )

    p = subparsers.add_parser(
        "parse", parents=[common], help="parse a plan and print its steps and diagnostics"
    )
    p.add_argument(
        "--tools",
        metavar="MODULE:ATTR",
        help="read the plan with these langchain-core tools (or a function returning them)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_parse)

    v = subparsers.add_parser(
        "validate", parents=[common], help="parse a plan and check it against tools"
    )
    v.add_argument(
        "--tools",
        required=True,
        metavar="MODULE:ATTR",
        help="a list of langchain-core tools (or a function returning one)",
    )
    v.add_argument("--json", action="store_true", help="print one JSON object")
    v.set_defaults(func=_cmd_validate)

    s = subparsers.add_parser("show", parents=[common], help="draw a plan's step graph")
    s.add_argument(
        "--format", choices=("mermaid", "dot", "text"), default="text", help="output format"
    )
    s.set_defaults(func=_cmd_show)


class _InputError(PlanexecError):
    """The plan file could not be read."""


def _read(path: str) -> str:
    try:
        return read_input(path, "plan file")
    except ConfigError as exc:
        raise _InputError(str(exc)) from exc


def _fail(args: argparse.Namespace, message: str) -> int:
    print(f"planexec: error: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(to_json({"error": message}, ensure_ascii=False))
    return 2


def _fail_load(args: argparse.Namespace, exc: PlanexecError) -> int:
    """`_fail` for an error raised while loading the plan (or the tools)."""
    if isinstance(exc, PlanParseError):
        return _fail(args, f"no plan in {args.file}: {exc}")
    return _fail(args, str(exc))


def _load(
    args: argparse.Namespace, catalog: CatalogLike | None = None, *, shown: bool = False
) -> Plan:
    """Parse the plan file; ``shown``: the command prints the diagnostics (not logged too)."""
    text = _read(args.file)
    with quiet() if shown else contextlib.nullcontext():
        return parse_plan(text, args.dialect, draft_policy=args.draft_policy, catalog=catalog)


def _cmd_parse(args: argparse.Namespace) -> int:
    try:
        catalog: CatalogLike | None = None
        if args.tools:  # only then: parsing alone loads neither langchain nor langsmith
            from planexec.tools import ToolCatalog, load_tools

            catalog = ToolCatalog(load_tools(args.tools))
        plan = _load(args, catalog, shown=True)
    except PlanexecError as exc:
        return _fail_load(args, exc)
    _print_plan(plan, as_json=args.json)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from planexec.tools import ToolCatalog, load_tools

    try:
        catalog = ToolCatalog(load_tools(args.tools))
        plan = _load(args, catalog, shown=True)
    except PlanexecError as exc:
        return _fail_load(args, exc)
    plan = check_plan(plan, catalog)
    _print_plan(plan, as_json=args.json)
    return 1 if plan.has_errors else 0


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        plan = _load(args)
    except PlanexecError as exc:
        return _fail_load(args, exc)
    render = {"mermaid": render_mermaid, "dot": render_dot, "text": render_text}[args.format]
    print(render(plan))
    return 0


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def _compact(value: Any, limit: int = 70) -> str:
    text = to_json(to_jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _arg_list(step: Step) -> str:
    if not step.args_valid:
        return f"INVALID: {step.args_text or ''}"
    parts = [_compact(p, 40) for p in step.positional]
    parts += [f"{k}={_compact(v, 40)}" for k, v in step.args.items()]
    return ", ".join(parts)


def _call(step: Step) -> str:
    if step.tool is None:
        return f"(reasoning) {step.task}" if step.task else "(reasoning)"
    return f"{step.tool}({_arg_list(step)})"


def _print_plan(plan: Plan, *, as_json: bool) -> None:
    if as_json:
        print(to_json(plan.to_dict(), ensure_ascii=False, indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    from planexec.commands._output import console as display_console

    console = display_console()
    steps = Table(title=f"{len(plan.steps)} step(s), dialect {plan.dialect}", expand=False)
    for col in ("#", "server", "tool", "args", "depends on", "args ok"):
        steps.add_column(col, overflow="fold")
    for s in plan.steps:
        steps.add_row(
            str(s.id),
            escape(s.server or ""),
            escape(s.tool or "(reasoning)"),
            escape(_arg_list(s)),
            ", ".join(map(str, s.depends_on)) or "-",
            "yes" if s.args_valid else "[bold red]NO[/]",
        )
    console.print(steps)
    if not plan.diagnostics:
        console.print("no diagnostics")
        return
    diags = Table(title=f"{len(plan.diagnostics)} diagnostic(s)", expand=False)
    for col in ("line", "step", "severity", "code", "message"):
        diags.add_column(col, overflow="fold")
    for d in plan.diagnostics:
        sev = str(d.severity)
        diags.add_row(
            "" if d.line is None else str(d.line),
            "" if d.step is None else str(d.step),
            f"[{_SEVERITY_STYLE[sev]}]{sev}[/]",
            escape(d.code),
            escape(d.message),
        )
    console.print(diags)


def _label(step: Step) -> str:
    tool = step.tool if step.tool is not None else "reasoning"
    flag = " \u26a0" if not step.args_valid else ""
    return f"{step.id}. {tool}{flag}"


def render_mermaid(plan: Plan) -> str:
    """Draw the step graph as a Mermaid flowchart (edges go from a step to its users)."""
    out = ["flowchart TD"]
    ids = set(plan.ids)
    for s in plan.steps:
        label = _label(s).replace('"', "#quot;")
        shape = f'(["{label}"])' if s.tool is None else f'["{label}"]'
        out.append(f"    s{s.id}{shape}")
    for s in plan.steps:
        for d in s.depends_on:
            if d in ids:
                out.append(f"    s{d} --> s{s.id}")
            else:
                out.append(f'    missing{d}["{d}. missing"]:::missing --> s{s.id}')
    if any(d not in ids for s in plan.steps for d in s.depends_on):
        out.append("    classDef missing stroke:#c00,stroke-dasharray:4")
    return "\n".join(out)


def render_dot(plan: Plan) -> str:
    """Draw the step graph in Graphviz DOT (edges go from a step to its users)."""
    out = ["digraph plan {", "    rankdir=TB;", "    node [shape=box];"]
    ids = set(plan.ids)
    for s in plan.steps:
        attrs = [f"label={to_json(_label(s), ensure_ascii=False)}"]
        if s.tool is None:
            attrs.append("shape=ellipse")
        if not s.args_valid:
            attrs.append("color=red")
        out.append(f"    s{s.id} [{', '.join(attrs)}];")
    for s in plan.steps:
        for d in s.depends_on:
            if d not in ids:
                out.append(f'    s{d} [label="{d}. missing", style=dashed, color=red];')
            out.append(f"    s{d} -> s{s.id};")
    out.append("}")
    return "\n".join(out)


def render_text(plan: Plan) -> str:
    """Draw the step graph as text: one line per step with what it waits for."""
    out = []
    width = max(len(_label(s)) for s in plan.steps) if plan.steps else 0
    for s in plan.steps:
        needs = ", ".join(f"#{d}" for d in s.depends_on) or "-"
        out.append(f"{_label(s):<{width}}  \u2190 {needs:<10} {_call(s)}")
    errors = [d for d in plan.diagnostics if d.severity is Severity.ERROR]
    if errors:
        out.append("")
        out.extend(f"error: {d}" for d in errors)
    return "\n".join(out)
