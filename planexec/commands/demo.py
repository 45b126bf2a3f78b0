"""``planexec demo``: the whole loop (plan → execute → answer) on the demo domain.

With a real model (``--model provider:model`` or ``PLANEXEC_MODEL``) the planner, the
resolver's fallback and the answer come from it; otherwise recorded replies shipped with
the demo are replayed. The command says on screen which one it is using.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from rich.markup import escape
from rich.table import Table

from planexec._loading import load_object
from planexec.agent import PlanExecuteAgent
from planexec.commands._display import PlannerStatus, to_json
from planexec.commands._display import console as display_console
from planexec.commands._interrupt import run_interruptible
from planexec.commands.ask import Progress
from planexec.commands.runs import add_store_arguments, store_from_args
from planexec.config import load_config
from planexec.events import EventHandler
from planexec.examples import example_path
from planexec.examples.questions import (
    DEMO_QUESTIONS,
    TYPED_DEMO_QUESTIONS,
    DemoQuestion,
    TypedDemoQuestion,
)
from planexec.examples.tools import demo_tools
from planexec.models import load_model, load_replies
from planexec.results import Run, RunStatus
from planexec.testing import ScriptedChatModel

__all__ = ["MODEL_ENV_VAR", "demo_command", "register"]

MODEL_ENV_VAR = "PLANEXEC_MODEL"
"""The environment variable naming a real model for the demo (``provider:model``)."""


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand."""
    p = subparsers.add_parser(
        "demo",
        help="run the built-in demo end to end (plan, execute, answer)",
        description="Answer demo questions about a small industrial-assets domain with the "
        "whole loop. Uses a real model when --model or $PLANEXEC_MODEL is set, recorded "
        "replies otherwise.",
    )
    p.add_argument(
        "--question",
        type=int,
        default=None,
        metavar="N",
        help=f"which demo question to ask (1-{len(ALL_QUESTIONS)}; default: all)",
    )
    p.add_argument(
        "--model",
        metavar="SPEC",
        default=None,
        help=f"a real model, provider:model (default: ${MODEL_ENV_VAR}, else recorded replies)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="agent settings (.toml or .yaml), e.g. model.timeout for a real model",
    )
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_store_arguments(p)
    p.set_defaults(func=demo_command)


ALL_QUESTIONS: list[DemoQuestion | TypedDemoQuestion] = [*DEMO_QUESTIONS, *TYPED_DEMO_QUESTIONS]
"""Every demo question: the prose ones, then the ones answered as typed models."""


def _model_for(
    question: DemoQuestion | TypedDemoQuestion, spec: str | None
) -> tuple[BaseChatModel, str]:
    if spec:
        return load_model(spec), f"real model {spec}"
    replies = example_path(question["replies"])
    model = ScriptedChatModel(replies=load_replies(replies))
    return model, (
        f"recorded replies from {replies.name} "
        f"(set ${MODEL_ENV_VAR}=provider:model or --model to use a real model)"
    )


def _table(run: Run) -> Table:
    table = Table(title="steps", show_lines=False)
    for col in ("step", "tool", "status", "arguments resolved by", "error"):
        table.add_column(col)
    for r in sorted(run.results, key=lambda r: r.step_id):
        literal = sum(1 for v in r.resolution.values() if v.value == "literal")
        named = [f"{k}={v.value}" for k, v in r.resolution.items() if v.value != "literal"]
        methods = ", ".join(([f"{literal} literal"] if literal else []) + named) or "-"
        table.add_row(
            str(r.step_id),
            escape(r.tool or "(reasoning)"),
            r.status.value,
            escape(methods),
            escape((r.error or "")[:120]),
        )
    return table


def demo_command(args: argparse.Namespace) -> int:
    """Run the ``demo`` subcommand."""
    spec = args.model or os.environ.get(MODEL_ENV_VAR) or None
    if args.question is not None and not 1 <= args.question <= len(ALL_QUESTIONS):
        print(
            f"planexec demo: error: --question must be between 1 and {len(ALL_QUESTIONS)}",
            file=sys.stderr,
        )
        return 2
    chosen = [ALL_QUESTIONS[args.question - 1]] if args.question is not None else ALL_QUESTIONS
    config = load_config(args.config) if args.config else None
    console = display_console(stderr=args.json)
    store = store_from_args(args)
    runs: list[Run] = []
    for question in chosen:
        model, source = _model_for(question, spec)
        console.rule(f"[bold]{escape(question['question'])}")
        console.print(f"model: {source}", markup=False)
        status = PlannerStatus()  # on standard error, only on a terminal
        handlers: list[EventHandler] = [] if args.quiet else [Progress(console), status]
        agent = PlanExecuteAgent(
            model, demo_tools(), config=config, store=store, event_handlers=handlers
        )
        output_spec = question.get("output_type")
        output_type = load_object(str(output_spec)) if output_spec else None
        if output_type is not None:
            console.print(f"typed answer: {output_spec}", markup=False)
        try:
            run = run_interruptible(agent.run(question["question"], output_type=output_type))
        finally:
            status.stop()
        runs.append(run)
        if not args.json:
            console.print(_table(run))
            console.print(f"[bold]answer:[/bold] {escape(str(run.answer))}")
            if run.output is not None:
                console.print(f"[bold]typed output:[/bold] {escape(repr(run.output))}")
            calls = ", ".join(f"{k} {v}" for k, v in sorted(run.usage.llm_calls.items()))
            console.print(
                f"usage: LLM calls {run.usage.total_llm_calls} ({calls}); "
                f"tool calls {run.usage.tool_calls}; {run.usage.wall_time:.2f}s; "
                f"run id {run.run_id}"
            )
    if args.json:
        print(to_json([r.to_dict() for r in runs], indent=2))
    return 0 if all(r.status is RunStatus.SUCCEEDED for r in runs) else 1
