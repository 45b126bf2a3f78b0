"""``planexec regress PATH...``: run regression scenarios and report.

Exit codes: 0 when every selected scenario passed (or was skipped), 1 when one failed or
could not run, 2 on a usage error (no scenario selected, a path that does not exist).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from planexec.commands._args import positive_int, read_text_file
from planexec.commands._display import console as display_console
from planexec.errors import ConfigError

__all__ = ["register", "regress_command"]

_STYLE = {"passed": "green", "failed": "red", "error": "magenta", "skipped": "cyan"}


def register(subparsers: Any) -> None:
    """Add the ``regress`` subcommand."""
    p = subparsers.add_parser(
        "regress",
        help="run regression scenarios (*.scenario.yaml)",
        description="Run regression scenarios against their cassettes or scripted "
        "replies, check their expectations and report. See docs/regression.md.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="scenario files or folders")
    p.add_argument(
        "--record",
        action="store_true",
        help="record the cassettes of the selected scenarios (against model.record_with or "
        "--record-model) instead of replaying them",
    )
    p.add_argument(
        "--record-model",
        metavar="SPEC",
        help="the model to record against, e.g. openai:gpt-4o-mini (overrides record_with)",
    )
    p.add_argument(
        "--filter",
        metavar="EXPR",
        help="select scenarios: comma-separated terms, each a substring or a glob "
        "(*, ?, [..]) of a scenario's name or tags; !TERM excludes",
    )
    p.add_argument("--workers", type=positive_int, default=1, metavar="N", help="worker processes")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the scenarios as Ray tasks (needs planexec[ray]): bare --ray starts a "
        "private local Ray ($RAY_ADDRESS if set), --ray auto joins the cluster started with "
        "'ray start' on this machine, --ray ADDRESS joins that cluster (see docs/scaling.md); "
        "--workers does not apply (Ray spreads the scenarios over the cluster's CPUs)",
    )
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--json", metavar="FILE", help="write a JSON report")
    p.add_argument(
        "--baseline",
        metavar="FILE",
        help="compare with an earlier JSON report: status changes, model and tool calls, time",
    )
    p.set_defaults(func=regress_command)


def _worker_log_level(verbosity: int) -> str:
    """Scenario runs log every recovery on purpose: show them only with -v."""
    return {0: "ERROR", 1: "WARNING", 2: "INFO"}.get(verbosity, "DEBUG")


def regress_command(args: argparse.Namespace) -> int:
    """Run the selected scenarios, print the summary, write the reports."""
    from planexec.regress.report import (
        compare_reports,
        describe_comparison,
        load_report,
        write_json,
        write_junit,
    )
    from planexec.regress.runner import run_suite

    for path in args.paths:  # a named file that cannot be read fails on one line, up front
        if Path(path).is_file():
            read_text_file(path, "scenario file")
    err = display_console(stderr=True)
    out = display_console()  # no terminal (a CI log): DEFAULT_WIDTH columns
    if args.workers < 1:
        err.print("[red]--workers must be at least 1[/red]")
        return 2
    verbosity = getattr(args, "verbose", 0)
    level = _worker_log_level(verbosity)
    baseline = load_report(args.baseline) if args.baseline else None
    progress = Progress(
        TextColumn("[bold]regress"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    )
    task: list[Any] = []

    def on_start(total: int) -> None:
        task.append(progress.add_task("", total=total))

    def on_result(result: Any) -> None:
        progress.update(task[0], advance=1, description=f"{escape(result.name)}: {result.status}")

    suite: Any = run_suite
    if getattr(args, "ray", None) is not None:  # the same call, scenarios on Ray
        from planexec.distributed.regress import run_suite_on_ray

        if args.workers != 1:
            from planexec._log import logger as log

            message = (
                f"--workers {args.workers} is ignored with --ray: Ray spreads the scenarios "
                "over the cluster's CPUs (ask for resources per scenario in the API instead)"
            )
            log.warning(message)
            err.print(f"warning: {message}", markup=False, highlight=False)

        def suite(paths: Any, workers: int, **kw: Any) -> Any:
            return run_suite_on_ray(paths, address=args.ray or None, **kw)

    from loguru import logger

    if verbosity == 0:
        logger.disable("planexec")  # the runs' recovery warnings are expected here
    try:
        with progress:
            report = suite(
                args.paths,
                filter_expr=args.filter,
                workers=args.workers,
                record=args.record,
                record_model=args.record_model,
                on_start=on_start,
                on_result=on_result,
                worker_log_level=level,
            )
    except ConfigError as exc:
        err.print(f"[red]planexec regress: {escape(str(exc))}[/red]")
        return 2
    finally:
        logger.enable("planexec")
    if not report.results:
        err.print(
            "[red]no scenarios selected[/red] "
            + escape(f"(paths {args.paths}, filter {args.filter!r})")
        )
        return 2

    table = Table(title="planexec regress", show_lines=False)
    table.add_column("scenario")
    table.add_column("status")
    table.add_column("LLM", justify="right")
    table.add_column("tools", justify="right")
    table.add_column("time", justify="right")
    table.add_column("first failing expectation", overflow="fold")
    for r in report.results:
        style = _STYLE[r.status]
        table.add_row(
            escape(r.name),
            f"[{style}]{r.status}[/{style}]" + (" (recorded)" if r.recorded else ""),
            str(r.llm_calls),
            str(r.tool_calls),
            f"{r.wall_time:.2f}s",
            escape((r.first_problem.splitlines() or [""])[0][:300]) if r.status != "passed" else "",
        )
    out.print(table)
    s = report.summary
    out.print(
        f"{s['passed']} passed, {s['failed']} failed, {s['error']} errors, "
        f"{s['skipped']} skipped in {report.wall_time:.2f}s ({report.workers} worker(s))"
    )
    for r in report.results:
        if r.status in ("failed", "error"):
            out.print(f"\n[bold]{escape(r.name)}[/bold]", highlight=False)
            out.print(r.describe(), highlight=False, markup=False)
    comparison = compare_reports(report, baseline) if baseline is not None else None
    if comparison is not None:
        out.print("\n[bold]compared with the baseline[/bold]")
        for line in describe_comparison(comparison):
            out.print(line, highlight=False, markup=False)
    if args.json:
        write_json(report, args.json, comparison=comparison)
    if args.junit:
        write_junit(report, args.junit)
    return 0 if report.passed else 1
