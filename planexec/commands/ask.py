"""``planexec ask "QUESTION" --tools MODULE:ATTR --model SPEC``: the whole agent loop.

Plans, executes, recovers and answers, showing progress on standard error as it goes
(plans, steps as they start and finish, recovery decisions). Standard output gets the
answer, or the whole `Run` as JSON with ``--json``.

The run is recorded in the run store (``--store PATH``, default ``$PLANEXEC_STORE`` or a
file in the user data directory) unless ``--no-store`` is given; ``planexec runs`` reads
it back (``planexec runs resume RUN_ID`` continues it if it was interrupted).

Exit codes: 0 when the run succeeded, 1 when it failed, 130 when it was interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from planexec._loading import load_object
from planexec.agent import PlanExecuteAgent
from planexec.commands._display import STEP_STYLES, PlannerStatus, to_json
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
from planexec.events import (
    Event,
    EventHandler,
    PlanCreated,
    RecoveryDecided,
    RunFinished,
    StepFinished,
    StepStarted,
)
from planexec.models import load_model
from planexec.results import Run, RunStatus, StepStatus
from planexec.runs import TOOL_SOURCE_KEY, StampedStore, tool_source

__all__ = ["Progress", "ask_command", "register"]


def register(subparsers: Any) -> None:
    """Add the ``ask`` subcommand."""
    p = subparsers.add_parser(
        "ask",
        help="answer a question with the whole plan-execute-recover loop",
        description="Plan with a model, execute the plan with the tools, recover from "
        "failures (re-resolve, retry, re-plan) and answer. Progress goes to standard "
        "error; the answer (or the run as JSON) to standard output.",
    )
    p.add_argument("question", help="the question to answer")
    add_tool_arguments(p)
    p.add_argument(
        "--model",
        required=True,
        metavar="SPEC",
        help="the model: replay:PATH (recorded replies) or provider:model "
        "(e.g. openai:gpt-4o-mini). A replay:PATH.json list of replies is consumed in call "
        "order, not matched to requests (a run that takes another path gets replies meant "
        "for other calls); a cassette (replay:PATH.yaml, format planexec-cassette, see "
        "docs/regression.md) matches replies by request",
    )
    p.add_argument("--config", metavar="FILE", help="agent settings (.toml or .yaml)")
    p.add_argument(
        "--output-type",
        metavar="MODULE:ATTR",
        help="a pydantic model the answer must fill (the run's output is an instance)",
    )
    p.add_argument("--json", action="store_true", help="print the whole run as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_store_arguments(p)
    p.set_defaults(func=ask_command)


class Progress:
    """Prints a run's progress, one line per event that matters, as it happens.

    Warnings (`planexec.events.FallbackUsed`: fallbacks, retries, re-prompts) are not
    shown here: each is logged once, on the CLI's log (`planexec.cli`), with its run
    and step.
    """

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, event: Event) -> None:
        """Show ``event``."""
        c = self.console
        if isinstance(event, PlanCreated):
            n = len(event.plan.steps) if event.plan else 0
            why = f" — {escape(event.reason)}" if event.reason else ""
            c.print(f"[bold]plan {event.version}[/bold]: {n} step(s){why}")
        elif isinstance(event, StepStarted):
            c.print(f"  [dim]▶ step {event.step_id}[/dim] {escape(event.tool or 'reasoning')}")
        elif isinstance(event, StepFinished):
            r = event.result
            style = STEP_STYLES.get(r.status, "white")
            detail = r.error or r.note or ""
            extra = f": {escape(detail[:160])}" if detail else ""
            c.print(
                f"  [{style}]■ step {r.step_id} {r.status.value}[/{style}] "
                f"{escape(r.tool or 'reasoning')}{extra}"
            )
        elif isinstance(event, RecoveryDecided):
            c.print(f"  [bold yellow]↻ {event.action}[/bold yellow] {escape(event.reason)}")
        elif isinstance(event, RunFinished):
            style = "green" if event.status == RunStatus.SUCCEEDED else "red"
            c.print(f"[{style}]run {event.status}[/{style}]")


def ask_command(args: argparse.Namespace) -> int:
    """Run the ``ask`` subcommand."""
    config = load_config(args.config) if args.config else AgentConfig()
    model = load_model(args.model)
    output_type = load_object(args.output_type) if args.output_type else None
    console = display_console(stderr=True)
    status = PlannerStatus(console)  # only on a terminal
    handlers: list[EventHandler] = [] if args.quiet else [Progress(console), status]
    store = store_from_args(args, config)
    # the tool source is recorded so that `planexec runs resume` can load the same tools
    recording = (
        StampedStore(store, {TOOL_SOURCE_KEY: tool_source(args.tools, args.mcp_config)})
        if store is not None
        else None
    )
    agents: list[PlanExecuteAgent] = []

    async def ask() -> Run:
        async with open_tools(args) as tools:
            agent = PlanExecuteAgent(
                model, tools, config=config, event_handlers=handlers, store=recording
            )
            agents.append(agent)
            return await agent.run(args.question, output_type=output_type)

    try:
        run = run_interruptible(ask())
    except KeyboardInterrupt:
        last = agents[0].last_run if agents else None
        if last is not None and args.json:
            print(to_json(last.to_dict(), indent=2))
        if last is not None and store is not None:
            print(interrupted_message(args, last.run_id), file=sys.stderr)
        else:
            print("planexec: interrupted", file=sys.stderr)
        return 130
    finally:
        status.stop()
        if store is not None:
            store.close()
    _print_run(run, as_json=args.json)
    if store is not None and not args.quiet:
        console.print(
            recorded_message(args, run.run_id),
            style="dim",
            markup=False,
        )
    if run.status is RunStatus.SUCCEEDED:
        return 0
    if run.status is RunStatus.WAITING_APPROVAL:  # paused: docs/approval.md
        waiting = [r.step_id for r in run.results if r.status is StepStatus.WAITING_APPROVAL]
        print(waiting_message(args, run.run_id, waiting), file=sys.stderr)
        return 3
    return 130 if run.status is RunStatus.CANCELLED else 1


def _print_run(run: Run, *, as_json: bool) -> None:
    if as_json:
        print(to_json(run.to_dict(), indent=2))
        return
    if run.answer is not None:
        print(run.answer)
    if run.output is not None:
        print(to_json(run.output.model_dump(mode="json"), indent=2))
    if run.answer is None and run.output is None:
        for r in sorted(run.results, key=lambda r: r.step_id):
            print(to_json(r.to_dict()))
    if run.status not in (RunStatus.SUCCEEDED, RunStatus.WAITING_APPROVAL):
        print(f"planexec: the run {run.status.value}: {run.error}", file=sys.stderr)
