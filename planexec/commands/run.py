"""``planexec run PLAN --tools MODULE:ATTR``: parse a plan, execute it, show the steps.

Exit codes: 0 when no step failed (a reasoning step skipped for want of a model is
not a failure), 1 when some step failed, was blocked or was cancelled, or the plan is
incomplete (its reply was cut off inside a step: run INCOMPLETE), 2 when there is no
plan to run.

The run is recorded in the run store (``--store PATH``, default ``$PLANEXEC_STORE`` or a
file in the user data directory) unless ``--no-store`` is given: the plan, each step's
result and the events, so ``planexec runs show RUN_ID`` shows it and ``planexec runs
resume RUN_ID`` continues it if it was interrupted. The plan runs exactly as without a
store (the executor alone: no recovery, no answer); the store only observes it.

The executor is assembled by `planexec.runtime.Runtime` from ``--config FILE`` (TOML or
YAML, an `AgentConfig`), as the library's is: the model's timeout, retries and circuit
breaker (``model.*``), the run limits (``limits.*``: a step over them fails with
``LIMIT_EXCEEDED``) and the executor settings (``executor.*``). ``--max-concurrency``
and ``--timeout`` override ``executor.max_concurrency`` and ``executor.step_timeout``
when given. The whole configuration is recorded with the run.

``executor.run_timeout`` (600 s by default) bounds the whole execution: when it runs
out, the run is recorded ``CANCELLED`` with that reason. The first Ctrl-C cancels the
run (recorded ``CANCELLED``, exit 130); a second one exits at once. Bad options
(``--timeout 0``, ``nan``) and unreadable or non-UTF-8 files are one-line errors with
exit 2.

``--json`` prints valid JSON (NaN and infinities as ``"NaN"``, ``"Infinity"``) as
``{"run_id", "status", "ok", "error", "steps": [StepResult.to_dict() ...], "usage",
"diagnostics"}``: ``status`` is the run's `RunStatus` value, the one the run store
records and MCP's ``execute_plan`` reports (``ok``: it is ``SUCCEEDED``; ``error``: why
not); each step with its ``raw_output`` and its ``resolution`` (on a failed step, the
methods of the arguments that did resolve); ``usage`` is `Usage.to_dict`, as the
library's (``llm_calls`` holds only the purposes called), and ``usage.wall_time`` is
the execution's duration in seconds.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.markup import escape
from rich.table import Table

from planexec._log import quiet
from planexec.commands._args import positive_float, positive_int, read_input
from planexec.commands._display import STEP_STYLES, to_json
from planexec.commands._display import console as display_console
from planexec.commands._interrupt import run_interruptible
from planexec.commands._tools import add_tool_arguments, open_tools
from planexec.commands.runs import (
    add_store_arguments,
    interrupted_message,
    recorded_message,
    store_from_args,
    waiting_message,
)
from planexec.config import AgentConfig, load_config
from planexec.errors import PlanParseError
from planexec.events import EventBus, RunFinished
from planexec.models import load_model
from planexec.parsing import DIALECTS, check_plan, parse_plan
from planexec.plan import Plan, Severity
from planexec.planner import cut_off
from planexec.results import RunStatus, StepResult, StepStatus, Usage, new_run_id
from planexec.runs import (
    TOOL_SOURCE_KEY,
    execute_recorded,
    first_failure,
    tool_source,
)
from planexec.runtime import Runtime
from planexec.tools import ToolCatalog

__all__ = ["register", "run_command", "run_config"]


def register(subparsers: Any) -> None:
    """Add the ``run`` subcommand."""
    p = subparsers.add_parser(
        "run",
        help="execute a plan file with tools",
        description="Parse a plan, check it against the tools, execute it and show "
        "every step's status, how its arguments were resolved, and its error.",
    )
    p.add_argument("plan", help="the plan file ('-' reads standard input)")
    add_tool_arguments(p)
    p.add_argument(
        "--model",
        metavar="SPEC",
        help="model for the resolver's fallback and reasoning steps: replay:PATH or "
        "provider:model (e.g. openai:gpt-4o-mini). A replay:PATH.json list of replies is "
        "consumed in call order, not matched to requests; a cassette (replay:PATH.yaml, "
        "format planexec-cassette, see docs/regression.md) matches replies by request",
    )
    p.add_argument("--dialect", default="auto", choices=("auto", *DIALECTS), help="plan dialect")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="agent settings (.toml or .yaml): model timeout, retries and breaker, limits, "
        "executor settings",
    )
    p.add_argument(
        "--max-concurrency",
        type=positive_int,
        default=None,
        metavar="N",
        help="steps run at once (overrides executor.max_concurrency; default 1024)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=None,
        metavar="S",
        help="per-step timeout in seconds (overrides executor.step_timeout)",
    )
    add_store_arguments(p)
    p.set_defaults(func=run_command)


def _read_plan(path: str) -> str:
    return read_input(path, "plan file")


WAITING_EXIT = 3
"""The exit code of a run paused ``WAITING_APPROVAL`` (neither a success nor a failure)."""


def _exit_code(results: list[StepResult], plan: Plan | None = None) -> int:
    incomplete = plan is not None and cut_off(plan) is not None  # run INCOMPLETE
    if any(r.status is StepStatus.WAITING_APPROVAL for r in results):
        return WAITING_EXIT
    return 1 if first_failure(results) is not None or incomplete else 0


def run_config(args: argparse.Namespace) -> AgentConfig:
    """The settings of ``planexec run``.

    ``--config FILE`` (or the defaults), then ``--max-concurrency`` and ``--timeout``
    over ``executor.max_concurrency`` and ``executor.step_timeout``, when they are given.

    Raises:
        ConfigError: the file cannot be read, or a value is invalid.
    """
    config = load_config(args.config) if getattr(args, "config", None) else AgentConfig()
    overrides: dict[str, Any] = {}
    if args.max_concurrency is not None:
        overrides["max_concurrency"] = args.max_concurrency
    if args.timeout is not None:
        overrides["step_timeout"] = args.timeout
    if not overrides:
        return config
    data = config.model_dump()
    data["executor"].update(overrides)
    return AgentConfig.from_dict(data, source="command line")


def run_command(args: argparse.Namespace) -> int:
    """Handle ``planexec run``; returns the exit code."""
    text = _read_plan(args.plan)
    try:
        with quiet():  # its diagnostics are shown with the results (table or JSON), once
            parsed = parse_plan(text, args.dialect)
    except PlanParseError as exc:
        if args.json:
            print(to_json({"steps": [], "error": str(exc), "diagnostics": []}))
        else:
            print(f"planexec: no plan: {exc}", file=sys.stderr)
        return 2
    if not parsed.steps:
        print("planexec: the plan has no steps", file=sys.stderr)
        return 2
    config = run_config(args)
    model = load_model(args.model) if args.model else None
    usage = Usage()
    bus = EventBus()
    run_id = new_run_id()
    store = store_from_args(args, config)
    if store is not None:
        store.attach(bus)
    finished: list[RunFinished] = []  # the run's status, as the store and MCP report it

    def on_finished(event: object) -> None:
        if isinstance(event, RunFinished):
            finished.append(event)

    bus.subscribe(on_finished)
    # recorded so that `planexec runs resume` runs it again with the same settings and tools
    recorded = {
        **config.model_dump(mode="json"),
        TOOL_SOURCE_KEY: tool_source(args.tools, args.mcp_config),
    }

    async def execute() -> tuple[Plan, list[StepResult]]:
        async with open_tools(args) as tools:
            catalog = ToolCatalog(tools)
            # read again with the tools: a JSON plan's tool is the field naming one of them
            with quiet():  # shown with the results (table or JSON), once
                plan = check_plan(parse_plan(text, args.dialect, catalog=catalog), catalog)
            # the same client (timeout, retries, breaker), limits and runner as the library
            runtime = Runtime(model, catalog, config)
            # traced like an agent run when anybody traces (LangSmith, OpenTelemetry)
            trace = await runtime.start_trace(None, run_id=run_id, question="")
            executor = runtime.open_run(
                run_id=run_id, usage=usage, bus=bus, trace=trace, store=store
            ).executor
            results = await execute_recorded(
                executor, plan, text, bus=bus, store=store, config=recorded
            )
            return plan, results

    cancelled = None
    try:
        plan, results = run_interruptible(execute())
        if store is not None:
            cancelled = store.cancel_request(run_id)
    except KeyboardInterrupt:
        if store is None:
            raise
        print(interrupted_message(args, run_id), file=sys.stderr)
        return 130
    finally:
        if store is not None:
            store.close()
    order = {sid: i for i, sid in enumerate(plan.ids)}
    results.sort(key=lambda r: order.get(r.step_id, len(order)))
    if args.json:
        print(
            to_json(
                {
                    "run_id": run_id,
                    "status": finished[-1].status if finished else None,
                    "ok": bool(finished) and finished[-1].status == str(RunStatus.SUCCEEDED),
                    "error": finished[-1].error if finished else None,
                    "steps": [r.to_dict() for r in results],
                    "usage": usage.to_dict(),
                    "diagnostics": [d.to_dict() for d in plan.diagnostics],
                },
                indent=2,
            )
        )
    else:
        _print_table(plan, results, usage)
    if store is not None:
        print(recorded_message(args, run_id), file=sys.stderr)
        waiting = [r.step_id for r in results if r.status is StepStatus.WAITING_APPROVAL]
        if waiting:
            print(waiting_message(args, run_id, waiting), file=sys.stderr)
        if cancelled is not None:  # from outside: `planexec runs cancel`, MCP cancel_run
            print(f"planexec: run {run_id} was {cancelled.describe()}", file=sys.stderr)
            return 130
    return _exit_code(results, plan)


def _print_table(plan: Plan, results: list[StepResult], usage: Usage) -> None:
    console = display_console()
    for d in plan.diagnostics:
        if d.severity is not Severity.INFO:
            style = "red" if d.severity is Severity.ERROR else "yellow"
            console.print(f"[{style}]{escape(str(d))}[/{style}]", markup=True)
    table = Table(title=f"plan ({plan.dialect}, {len(plan.steps)} steps)")
    table.add_column("step", justify="right")
    table.add_column("tool")
    table.add_column("status")
    table.add_column("resolution")
    table.add_column("error / note", overflow="fold")
    for r in results:
        methods = ", ".join(f"{k}={v}" for k, v in r.resolution.items()) or "-"
        style = STEP_STYLES.get(r.status, "")
        status = str(r.status) + (f" ({r.error_kind})" if r.error_kind else "")
        table.add_row(
            str(r.step_id),
            escape(r.tool or "(reasoning)"),
            f"[{style}]{status}[/{style}]",
            escape(methods),
            escape(r.error or r.note or ""),
        )
    console.print(table)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value.lower()] = counts.get(r.status.value.lower(), 0) + 1
    llm = ", ".join(f"{k} {v}" for k, v in sorted(usage.llm_calls.items())) or "none"
    console.print(
        f"{len(results)} steps: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f" · tool calls {usage.tool_calls} · LLM calls: {llm}"
    )
