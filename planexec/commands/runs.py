"""``planexec runs``: the run history — list, show, resume, export, timeline.

- ``planexec runs list [--status S] [--limit N]``: newest first; ``--status failed`` is
  the dead-letter view, with each run's reason: the kind and message of one failure, its
  first failed step (`first_failed_step`; ``--json``: ``first_failure``).
- ``planexec runs show RUN_ID [--json]``: plans (with diagnostics), steps (status,
  resolution methods, the values the LLM fallback chose, attempts, errors, timings) and
  calls left without a result.
- ``planexec runs resume RUN_ID [--rerun-unsafe] [--force] [--tools MODULE:ATTR]
  [--mcp-config FILE] [--model SPEC]``: continue an interrupted run (see
  `planexec.runs`) with the tools it recorded, unless told otherwise.
- ``planexec runs approve RUN_ID STEP [--args JSON] [--by NAME]`` and ``planexec runs
  reject RUN_ID STEP --reason TEXT [--by NAME]``: record a decision about a step of a
  run paused ``WAITING_APPROVAL`` (docs/approval.md); ``runs resume`` then continues it.
- ``planexec runs export RUN_ID``: everything recorded, as one JSON document.
- ``planexec runs timeline RUN_ID --out FILE.html|FILE.svg|FILE.png``: one bar per
  result a step recorded (every attempt and every pause, before and after a resume) on a
  time axis, coloured by status, a failed bar with its error beside it; a reused step is
  a thin ``REUSED`` marker where it was reused (not a second full bar), and each planner
  call is a ``PLANNER`` bar.

Every subcommand takes ``--store PATH`` (default ``$PLANEXEC_STORE``, else a file in
the user data directory). `add_store_arguments` and `store_from_args` give ``run`` and
``ask`` the same ``--store`` option and ``--no-store``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import html
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from planexec._log import run_log
from planexec._text import snippet
from planexec.commands._display import to_json
from planexec.commands._interrupt import run_interruptible
from planexec.commands._tools import add_tool_arguments, open_tools
from planexec.errors import ConfigError, MissingExtraError, RunError, require_extra
from planexec.results import RunStatus, StepResult, StepStatus
from planexec.runs import (
    TOOL_SOURCE_KEY,
    StampedStore,
    recorded_tool_source,
    tool_source,
)
from planexec.store import ENV_VAR, RunStore, default_store_path, open_store
from planexec.store.base import RunRecord

if TYPE_CHECKING:
    from planexec.config import AgentConfig

__all__ = [
    "TimelineBar",
    "add_store_arguments",
    "failure_reason",
    "first_failed_step",
    "interrupted_message",
    "recorded_message",
    "register",
    "resume_command",
    "render_timeline_html",
    "decide_recorded",
    "recorded_schema",
    "render_timeline_png",
    "render_timeline_svg",
    "resume_recorded",
    "show_data",
    "store_from_args",
    "store_location",
    "timeline_bars",
    "waiting_message",
]

STATUS_COLORS = {
    "SUCCEEDED": "#2e7d32",
    "FAILED": "#c62828",
    "BLOCKED": "#f9a825",
    "SKIPPED": "#0097a7",
    "CANCELLED": "#8e24aa",
    "IN_FLIGHT": "#757575",
    "REUSED": "#bdbdbd",
    "PLANNER": "#1565c0",
    "WAITING_APPROVAL": "#ef6c00",
    "APPROVED": "#66bb6a",
    "EDITED": "#26a69a",
    "REJECTED": "#d84315",
}
"""Bar colour by step status (``IN_FLIGHT``: a call started with no recorded result;
``REUSED``: a step whose earlier result was reused, not run again; ``PLANNER``: a call of
the planner's model; ``APPROVED``, ``EDITED``, ``REJECTED``: a person's decision about a
step that needed approval)."""


# ---------------------------------------------------------------------- store options


def add_store_arguments(parser: argparse.ArgumentParser, *, allow_disable: bool = True) -> None:
    """Add ``--store PATH|URL`` (and, unless told not to, ``--no-store``) to a parser."""
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        default=None,
        help=f"the run store file (default: ${ENV_VAR}, else {default_store_path()}; "
        "':memory:' keeps runs in memory only; a postgresql:// URL records in a "
        "PostgreSQL database shared by several hosts)",
    )
    if allow_disable:
        parser.add_argument(
            "--no-store", action="store_true", help="do not record this run in the run store"
        )


def store_from_args(
    args: argparse.Namespace, config: AgentConfig | None = None
) -> RunStore | None:
    """Open the store chosen by `add_store_arguments` options (None with ``--no-store``).

    ``--store``, else the config's ``store.url``, else ``$PLANEXEC_STORE``, else the
    default file.

    Raises:
        StoreError: the store cannot be opened.
    """
    if getattr(args, "no_store", False):
        return None
    return open_store(store_location(args, config))


def store_location(args: argparse.Namespace, config: AgentConfig | None = None) -> str | None:
    """``--store``, else the config's ``store.url`` (None: `open_store`'s default)."""
    given: str | None = getattr(args, "store", None)
    if given is None and config is not None:
        given = config.store.url
    return given


def recorded_message(args: argparse.Namespace, run_id: str) -> str:
    """The line that tells where a run was recorded and how to show it.

    Args:
        args: the parsed options of `add_store_arguments` (``--store`` is repeated in
            the command shown when it was given).
        run_id: the run.

    Returns:
        e.g. ``recorded as run run-1a2b: planexec runs show run-1a2b --store runs.db``.
    """
    where = f" --store {shlex.quote(args.store)}" if args.store else ""
    return f"recorded as run {run_id}: planexec runs show {run_id}{where}"


# ---------------------------------------------------------------------- registration


def register(subparsers: Any) -> None:
    """Add the ``runs`` command group."""
    p = subparsers.add_parser(
        "runs",
        help="the run history: list, show, resume, cancel, export, timeline",
        description="Recorded runs: list them (--status failed is the dead-letter view), "
        "show one, resume an interrupted one, export it, or draw its timeline.",
    )
    sub = p.add_subparsers(dest="runs_command", metavar="SUBCOMMAND", required=True)

    ls = sub.add_parser("list", help="list runs, newest first")
    ls.add_argument(
        "--status",
        type=str.upper,
        choices=[s.value for s in RunStatus],
        help="only runs with this status (FAILED: the dead-letter view)",
    )
    ls.add_argument(
        "--limit", type=_positive_int, default=50, metavar="N", help="at most N runs (N >= 1)"
    )
    ls.add_argument("--json", action="store_true", help="print JSON")
    add_store_arguments(ls, allow_disable=False)
    ls.set_defaults(func=cmd_list)

    show = sub.add_parser("show", help="show a run: plans, steps, errors, timings")
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_store_arguments(show, allow_disable=False)
    show.set_defaults(func=cmd_show)

    _register_decisions(sub)

    res = sub.add_parser(
        "resume",
        help="continue an interrupted run without re-running finished steps",
        description="Continue an interrupted run. Finished steps are not run again; a "
        "step whose tool call started without a recorded result runs again only if its "
        "tool is safe (read-only or idempotent), or with --rerun-unsafe.",
    )
    res.add_argument("run_id", metavar="RUN_ID")
    res.add_argument(
        "--rerun-unsafe",
        action="store_true",
        help="also re-run calls of unsafe tools whose outcome is unknown",
    )
    add_tool_arguments(res)
    res.add_argument(
        "--force",
        action="store_true",
        help="resume even if the run's recorded process still seems to be running (e.g. "
        "its pid was reused); if it really is running, both will run its steps",
    )
    res.add_argument(
        "--model", metavar="SPEC", help="model (replay:PATH or provider:model) for "
        "re-planning, the resolver's fallback, reasoning steps and the answer",
    )
    res.add_argument(
        "--dry-run", action="store_true", help="print what resuming would do, and stop"
    )
    add_store_arguments(res, allow_disable=False)
    res.set_defaults(func=cmd_resume)

    exp = sub.add_parser("export", help="print everything recorded about a run as JSON")
    exp.add_argument("run_id", metavar="RUN_ID")
    exp.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    add_store_arguments(exp, allow_disable=False)
    exp.set_defaults(func=cmd_export)

    tl = sub.add_parser("timeline", help="draw a run's steps on a time axis")
    tl.add_argument("run_id", metavar="RUN_ID")
    tl.add_argument(
        "--out", required=True, metavar="FILE",
        help="FILE.html (a page with the SVG inline), FILE.svg or FILE.png"
    )
    add_store_arguments(tl, allow_disable=False)
    tl.set_defaults(func=cmd_timeline)


def _register_decisions(sub: Any) -> None:
    """Add ``runs approve`` and ``runs reject``."""
    ap = sub.add_parser(
        "approve",
        help="approve a step waiting for approval (optionally with edited arguments)",
        description="Record an approval of a step of a run paused WAITING_APPROVAL; "
        "`planexec runs resume RUN_ID` then calls its tool with the approved arguments. "
        "--args replaces the named arguments (checked against the tool's schema).",
    )
    ap.add_argument("run_id", metavar="RUN_ID")
    ap.add_argument("step", type=int, metavar="STEP", help="the step number")
    ap.add_argument("--args", metavar="JSON", help="edited arguments, a JSON object")
    ap.add_argument("--by", metavar="NAME", help="who decides (default: the user name)")
    ap.add_argument(
        "--seen", metavar="KEY",
        help="the key of the request you decided about (`planexec runs show RUN_ID` prints "
        "it): when the step has asked again since, nothing is recorded",
    )
    add_tool_arguments(ap)
    add_store_arguments(ap, allow_disable=False)
    ap.set_defaults(func=cmd_approve)

    rj = sub.add_parser(
        "reject",
        help="reject a step waiting for approval, with a reason",
        description="Record a rejection of a step of a run paused WAITING_APPROVAL: its "
        "tool is never called; on resume the step fails REJECTED and the planner is told "
        "the reason.",
    )
    rj.add_argument("run_id", metavar="RUN_ID")
    rj.add_argument("step", type=int, metavar="STEP", help="the step number")
    rj.add_argument("--reason", required=True, metavar="TEXT", help="why (the planner sees it)")
    rj.add_argument("--by", metavar="NAME", help="who decides (default: the user name)")
    rj.add_argument(
        "--seen", metavar="KEY",
        help="the key of the request you decided about (`planexec runs show RUN_ID` prints "
        "it): when the step has asked again since, nothing is recorded",
    )
    add_store_arguments(rj, allow_disable=False)
    rj.set_defaults(func=cmd_reject)

    cn = sub.add_parser(
        "cancel",
        help="stop a run, from any process or host that reaches its store",
        description="Record a cancel request (who, when, why). A run driven by a live "
        "process stops within a second or so (its running steps are cancelled, nothing "
        "new starts); a run nobody drives (waiting for approval, interrupted) is "
        "CANCELLED at once and its open approval requests are withdrawn. A cancelled run "
        "does not resume.",
    )
    cn.add_argument("run_id", metavar="RUN_ID")
    cn.add_argument("--reason", default="cancelled from the command line", metavar="TEXT",
                    help="why (shown with the run)")
    cn.add_argument("--by", metavar="NAME", help="who cancels (default: the user name)")
    add_store_arguments(cn, allow_disable=False)
    cn.set_defaults(func=cmd_cancel)


# ---------------------------------------------------------------------- helpers


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _duration(record: RunRecord) -> float | None:
    if record.created_at is None:
        return None
    end = record.finished_at or record.updated_at
    return None if end is None else end - record.created_at


def _steps_cell(record: RunRecord) -> str:
    """Succeeded steps of the latest plan, out of its step count (or of the recorded results)."""
    recorded = sum(record.step_counts.values())
    total = max(record.plan_steps or 0, recorded)
    ok = record.step_counts.get(str(StepStatus.SUCCEEDED), 0)
    return f"{ok}/{total}"


# ---------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace) -> int:
    """Handle ``planexec runs list``."""
    store = open_store(args.store)
    try:
        records = store.list_runs(status=args.status, limit=args.limit)
        reasons = {r.run_id: failure_reason(store, r) for r in records if r.error}
        first = {r.run_id: first_failed_step(store, r) for r in records if r.error}
    finally:
        store.close()
    if args.json:
        out = []
        for r in records:
            failed = first.get(r.run_id)
            out.append({**r.to_dict(), "first_failure": None if failed is None else {
                "step_id": failed.step_id, "error_kind": failed.error_kind,
                "error": failed.error}})
        print(to_json(out, indent=2))
        return 0
    if not records:
        what = f" with status {args.status}" if args.status else ""
        print(f"no runs{what}")
        return 0
    dead_letter = any(r.error for r in records)
    header = f"{'RUN_ID':<14} {'STATUS':<16} {'STARTED (UTC)':<19} {'TIME':>8} {'OK':>6}  "
    header += "QUESTION" if not dead_letter else f"{'QUESTION':<32} REASON"
    print(header)
    for r in records:
        line = (
            f"{r.run_id:<14} {r.status.value:<16} {_when(r.created_at):<19} "
            f"{_seconds(_duration(r)):>8} {_steps_cell(r):>6}  "
        )
        if dead_letter:
            reason = reasons.get(r.run_id)
            line += f"{snippet(r.question, 32):<32} {snippet(reason or '', 100)}"
        else:
            line += snippet(r.question, 60)
        print(line.rstrip())
    _print_waiting(args, records)
    return 0


def first_failed_step(store: RunStore, record: RunRecord) -> StepResult | None:
    """The run's first failure, or None.

    The latest plan's first step recorded FAILED, BLOCKED or CANCELLED (by when it was
    recorded).
    """
    bad = (StepStatus.FAILED, StepStatus.BLOCKED, StepStatus.CANCELLED)
    steps = store.step_results(record.run_id, record.plan_version)
    failed = sorted(
        (s for s in steps if s.result.status in bad),
        key=lambda s: (s.recorded_at is None, s.recorded_at or 0.0, s.result.step_id),
    )
    return failed[0].result if failed else None


def failure_reason(store: RunStore, record: RunRecord) -> str | None:
    """Why a run did not succeed: the kind and the message of one failure.

    Those of `first_failed_step` (its message names the step), as ``[KIND] message``;
    a run with no failed step (no plan, a limit) gives its own ``[KIND] error``.
    """
    if record.error is None:
        return None
    r = first_failed_step(store, record)
    if r is not None:
        kind = f"[{r.error_kind}] " if r.error_kind else ""
        return f"{kind}{r.error or f'step {r.step_id} {r.status.value}'}"
    return f"[{record.error_kind}] {record.error}" if record.error_kind else record.error


def _print_waiting(args: argparse.Namespace, records: list[RunRecord]) -> None:
    """Under the list: each paused run's steps waiting for a decision."""
    paused = [r for r in records if r.status is RunStatus.WAITING_APPROVAL]
    if not paused:
        return
    from planexec.runs import waiting_steps

    store = open_store(args.store)
    try:
        for r in paused:
            waiting = waiting_steps(store, r.run_id)
            print(waiting_message(args, r.run_id, [w.step_id for w in waiting], r))
    finally:
        store.close()


def resume_command(
    args: argparse.Namespace, run_id: str, record: RunRecord | None = None
) -> str:
    """The exact ``planexec runs resume`` command that continues a run, every flag it needs.

    ``--store`` and ``--model`` as the command was given them (a model is not recorded:
    re-planning, the fallback and the answer need it again). The tools come from the
    run's record when it names them (what ``run``, ``ask`` and ``serve`` record, with the
    folder the module was imported from); a run that does not (a library run: pass its
    ``record``) needs ``--tools MODULE:ATTR`` (its own, written as a placeholder here).
    """
    parts = ["planexec", "runs", "resume", run_id]
    if record is not None and not recorded_tool_source(record.config):
        parts.append("--tools MODULE:ATTR")
    if getattr(args, "model", None):
        parts += ["--model", shlex.quote(str(args.model))]
    if getattr(args, "store", None):
        parts += ["--store", shlex.quote(str(args.store))]
    return " ".join(parts)


def interrupted_message(args: argparse.Namespace, run_id: str) -> str:
    """What Ctrl-C leaves: the run recorded (``CANCELLED``) and how to continue it."""
    return (
        f"planexec: interrupted: run {run_id} is recorded (CANCELLED); continue it with: "
        + resume_command(args, run_id)
    )


def waiting_message(
    args: argparse.Namespace, run_id: str, steps: list[int], record: RunRecord | None = None
) -> str:
    """The lines that tell which steps of a run wait for approval and how to decide.

    Args:
        args: the parsed options of `add_store_arguments` (``--store`` is repeated).
        run_id: the run.
        steps: the waiting steps.
        record: the run's record, when the command did not start the run itself (see
            `resume_command`).
    """
    where = f" --store {shlex.quote(args.store)}" if getattr(args, "store", None) else ""
    which = ", ".join(str(s) for s in steps) or "-"
    first = steps[0] if steps else "STEP"
    return (
        f"run {run_id} waits for approval of step(s) {which}: "
        f"planexec runs approve {run_id} {first}{where} [--args JSON] | "
        f"planexec runs reject {run_id} {first} --reason TEXT{where}; "
        f"then {resume_command(args, run_id, record)}"
    )


# ---------------------------------------------------------------------- show


def _approvals(store: RunStore, run_id: str) -> dict[str, Any]:
    """A run's approval requests still waiting, and every decision recorded."""
    from planexec.runs import request_key, waiting_steps

    decisions = [
        {k: e.get(k) for k in ("plan_version", "step_id", "action", "args", "edited",
                               "reason", "by", "decided_at")}
        for e in store.events(run_id)
        if e.get("type") == "ApprovalDecided"
    ]
    return {
        "waiting": [
            {**r.to_dict(), "request_key": request_key(r)} for r in waiting_steps(store, run_id)
        ],
        "decisions": decisions,
    }


def _print_approvals(data: dict[str, Any]) -> None:
    approvals = data.get("approvals") or {}
    if approvals.get("waiting"):
        print("\nwaiting for approval:")
        for w in approvals["waiting"]:
            how = ", ".join(f"{k}={v}" for k, v in w["resolution"].items()) or "-"
            print(f"  v{w['plan_version']} #{w['step_id']} {w['tool']}: {w['reason']}")
            print(f"      args: {snippet(to_json(w['args'], ensure_ascii=False), 200)}")
            print(f"      resolved: {how}")
            print(f"      key: {w['request_key']} (decide with --seen {w['request_key']})")
    if approvals.get("decisions"):
        print("\napproval decisions:")
        for d in approvals["decisions"]:
            edited = (
                f" edited {to_json(d['edited'], ensure_ascii=False)}" if d.get("edited") else ""
            )
            why = f": {d['reason']}" if d.get("reason") else ""
            print(
                f"  v{d['plan_version']} #{d['step_id']} {d['action']} by {d.get('by') or '?'} "
                f"at {_when(d.get('decided_at'))} UTC{edited}{why}"
            )


def show_data(store: RunStore, run_id: str) -> dict[str, Any]:
    """Everything ``runs show`` prints (and the console draws) of one run, as JSON-ready data.

    Raises:
        RunNotFoundError: no such run.
    """
    record = store.get_run(run_id)
    return {
        "approvals": _approvals(store, run_id),
        "run": record.to_dict(),
        "plans": [p.to_dict() for p in store.plans(run_id)],
        "steps": [s.to_dict() for s in store.step_results(run_id)],
        "calls_without_result": [
            {"plan_version": c.plan_version, "step_id": c.step_id, "tool": c.tool,
             "args": c.args, "attempt": c.attempt, "ts": c.ts}
            for c in store.started_calls_without_result(run_id)
        ],
    }


def cmd_show(args: argparse.Namespace) -> int:
    """Handle ``planexec runs show``."""
    store = open_store(args.store)
    try:
        data = show_data(store, args.run_id)
        reason = failure_reason(store, store.get_run(args.run_id))
    finally:
        store.close()
    if args.json:
        print(to_json(data, indent=2))
        return 0
    run = data["run"]
    print(f"run {run['run_id']}  {run['status']}")
    print(f"question: {run['question'] or '-'}")
    print(
        f"started {_when(run['created_at'])} UTC, "
        + (f"finished {_when(run['finished_at'])} UTC" if run["finished_at"] else "not finished")
    )
    if reason:
        print(f"reason: {reason}")
    if run.get("answer"):
        print(f"answer: {run['answer']}")
    for p in data["plans"]:
        plan = p["plan"]
        n = len(plan["steps"]) if plan else 0
        why = f" — {p['reason']}" if p.get("reason") else ""
        print(f"\nplan v{p['version']}: {n} step(s){why}")
        drafts = p.get("drafts") or []
        if drafts:
            print(f"  {len(drafts)} rejected draft(s) before this reply:")
            for i, draft in enumerate(drafts, 1):
                problems = "; ".join(draft.get("problems") or []) or "-"
                print(f"    draft {i}: {snippet(problems, 160)}")
        if plan is None:
            print(f"  (no usable plan: {p.get('error') or 'no reason recorded'})")
            continue
        if p.get("error"):
            print(f"  problems left: {snippet(p['error'], 200)}")
        for d in plan["diagnostics"]:
            where = f"line {d['line']}" if d["line"] is not None else "plan"
            print(f"  {where}: {d['severity']} {d['code']}: {d['message']}")
    print("\nsteps:")
    if not data["steps"]:
        print("  (no step finished)")
    for s in data["steps"]:
        res = ", ".join(f"{k}={v}" for k, v in s["resolution"].items()) or "-"
        print(
            f"  v{s['plan_version']} #{s['step_id']:<3} {str(s['tool'] or '(reasoning)'):<22} "
            f"{s['status']:<16} {_seconds(s['duration']):>8}  attempts={s['attempts']} "
            f"llm={s['llm_calls']}  args: {res}"
        )
        args_now = s.get("args") if isinstance(s.get("args"), dict) else {}
        for arg, method in s["resolution"].items():  # what the LLM fallback chose
            if method == "llm" and arg in args_now:
                value = to_json(args_now[arg], ensure_ascii=False)
                print(f"      {arg} = {snippet(value, 160)}  (chosen by the LLM fallback)")
        for arg, g in (s.get("grounding") or {}).items():  # where filled-in values come from
            where = ", ".join(g.get("paths") or []) or "-"
            missing = f"; found nowhere: {', '.join(g['missing'])}" if g.get("missing") else ""
            print(f"      {arg}: {g.get('status')} at {where}{missing}")
        if s.get("error"):
            print(f"      {s['error_kind']}: {s['error']}")
        if s.get("note"):
            print(f"      note: {s['note']}")
    if data["calls_without_result"]:
        print("\ncalls started without a recorded result:")
        for c in data["calls_without_result"]:
            print(f"  v{c['plan_version']} #{c['step_id']} {c['tool']} (attempt {c['attempt']}) "
                  f"at {_when(c['ts'])} UTC")
    _print_approvals(data)
    return 0


# ---------------------------------------------------------------------- export


def cmd_export(args: argparse.Namespace) -> int:
    """Handle ``planexec runs export``."""
    store = open_store(args.store)
    try:
        doc = store.export(args.run_id)
    finally:
        store.close()
    text = to_json(doc, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0


# ---------------------------------------------------------------------- resume


def _agent_config(record: RunRecord) -> Any:
    from pydantic import ValidationError

    from planexec.config import AgentConfig

    config = {k: v for k, v in record.config.items() if k != TOOL_SOURCE_KEY}
    if not config:
        return AgentConfig()
    try:
        return AgentConfig.model_validate(config)
    except ValidationError as exc:
        run_log(record.run_id).warning(
            "the recorded configuration of run {} is not valid here ({} error(s)); "
            "resuming with the default configuration", record.run_id, exc.error_count()
        )
        return AgentConfig()


def _resume_tool_options(args: argparse.Namespace, record: RunRecord) -> dict[str, str]:
    """Fill ``args.tools``/``args.mcp_config`` from the run's record unless given.

    Returns:
        The tool source the run will use (recorded again with the resumed run).

    Raises:
        ConfigError: neither option was given and the run recorded no tool source.
    """
    if not args.tools and not args.mcp_config:
        recorded = recorded_tool_source(record.config)
        if not recorded:
            raise ConfigError(
                f"run {record.run_id} did not record where its tools came from: give them "
                "with --tools MODULE:ATTR and/or --mcp-config FILE"
            )
        args.tools, args.mcp_config = recorded.get("tools"), recorded.get("mcp_config")
        shown = " ".join(
            f"--{k.replace('_', '-')} {shlex.quote(v)}"
            for k, v in recorded.items()
            if k != "tools_path"
        )
        root = recorded.get("tools_path")
        if args.tools and root:
            # import the module from where the run found it, before the current folder
            cwd = os.getcwd()
            if cwd not in sys.path:
                sys.path.insert(0, cwd)
            if root in sys.path:
                sys.path.remove(root)
            sys.path.insert(0, root)
            shown += f" (imported from {root})"
        print(f"using the run's recorded tools: {shown}", file=sys.stderr)
    return tool_source(args.tools, args.mcp_config)


def cmd_resume(args: argparse.Namespace) -> int:
    """Handle ``planexec runs resume``: 0 when the run succeeds, 1 when it does not."""
    store = open_store(args.store)
    try:
        source = _resume_tool_options(args, store.get_run(args.run_id))
        if args.force:
            print(
                f"planexec: warning: --force: resuming run {args.run_id} even if its "
                "recorded process still seems to be running; if it is, both will run its "
                "steps", file=sys.stderr,
            )
        try:
            code, run = run_interruptible(_resume(args, store, source))
        except KeyboardInterrupt:
            print(interrupted_message(args, args.run_id), file=sys.stderr)
            return 130
    finally:
        store.close()
    if run is None:
        return code
    print(f"run {run.run_id}: {run.status.value}")
    if run.answer:
        print(run.answer)
    if run.status is RunStatus.WAITING_APPROVAL:
        waiting = [r.step_id for r in run.results if r.status is StepStatus.WAITING_APPROVAL]
        print(waiting_message(args, run.run_id, waiting), file=sys.stderr)
        return 3
    if run.status is not RunStatus.SUCCEEDED:
        print(f"planexec: {run.error or 'the run did not succeed'}", file=sys.stderr)
        return 1
    return 0


async def _resume(
    args: argparse.Namespace, store: RunStore, source: dict[str, str]
) -> tuple[int, Any]:
    """Decide, print, and (unless ``--dry-run``) resume; returns (exit code, run or None)."""
    from planexec.runs import catalog_is_safe, plan_resume, resume_run
    from planexec.tools import ToolCatalog

    async with open_tools(args) as tools:
        decision = plan_resume(
            store, args.run_id, is_safe=catalog_is_safe(ToolCatalog(tools)),
            rerun_unsafe=args.rerun_unsafe, allow_running=args.force,
        )
        if decision.complete:
            print(f"run {args.run_id} already SUCCEEDED: nothing to resume")
            return 0, None
        print(
            f"run {args.run_id} ({decision.record.status.value}): plan v{decision.plan_version}; "
            f"reuse {list(decision.finished)}, re-run interrupted {list(decision.rerun)}, "
            f"run {list(decision.pending)}, unknown outcome {list(decision.unknown)}"
        )
        if args.dry_run:
            if decision.message:
                print(decision.message, file=sys.stderr)
            return (0 if decision.can_continue else 1), None
        from planexec.agent import PlanExecuteAgent
        from planexec.models import load_model

        model = load_model(args.model) if args.model else None
        recording = StampedStore(store, {TOOL_SOURCE_KEY: source})
        agent = PlanExecuteAgent(
            model, tools, config=_agent_config(decision.record), store=recording
        )
        run = await resume_run(
            agent, cast(RunStore, recording), args.run_id, rerun_unsafe=args.rerun_unsafe,
            allow_running=args.force,
        )
        return 0, run


# ---------------------------------------------------------------------- approvals


def _who(args: argparse.Namespace) -> str:
    if args.by:
        return str(args.by)
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in this environment
        return "cli"


def cmd_approve(args: argparse.Namespace) -> int:
    """Handle ``planexec runs approve``."""
    import json

    from planexec.approval import ApprovalDecision

    edits: dict[str, Any] | None = None
    if args.args is not None:
        try:
            edits = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--args is not JSON: {exc}") from exc
        if not isinstance(edits, dict):
            raise ConfigError("--args must be a JSON object of argument names to values")
    who = _who(args)
    decision = (
        ApprovalDecision.edit(edits, by=who) if edits else ApprovalDecision.approve(by=who)
    )
    store = open_store(args.store)
    try:
        if edits:  # the edit is checked against the tool's schema: the run's tools
            _resume_tool_options(args, store.get_run(args.run_id))
        recorded = run_interruptible(_decide(args, store, decision, with_tools=bool(edits)))[1]
        record = store.get_run(args.run_id)
    finally:
        store.close()
    if recorded is None:
        return 1
    print(
        f"run {args.run_id} step {args.step}: {recorded.action} by {who}, args "
        f"{to_json(recorded.args, ensure_ascii=False)}; continue with: "
        + resume_command(args, args.run_id, record)
    )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Handle ``planexec runs cancel``."""
    from planexec.cancelling import CANCEL_POLL

    who = _who(args)
    store = open_store(args.store)
    try:
        outcome = run_interruptible(_cancel(store, args.run_id, args.reason, who))[1]
    finally:
        store.close()
    if outcome is None:
        return 1
    if outcome.stopped:
        withdrawn = (
            f"; approval requests withdrawn: steps {list(outcome.withdrawn)}"
            if outcome.withdrawn else ""
        )
        print(f"run {args.run_id}: CANCELLED ({outcome.request.describe()}){withdrawn}")
    else:
        print(
            f"run {args.run_id}: cancel requested ({outcome.request.describe()}); the process "
            f"running it stops it within {CANCEL_POLL:g} s and the time its tools take to stop"
        )
    return 0


async def _cancel(store: RunStore, run_id: str, reason: str, by: str) -> tuple[int, Any]:
    from planexec.cancelling import cancel_run

    return 0, await cancel_run(store, run_id, reason=reason, by=by)


def cmd_reject(args: argparse.Namespace) -> int:
    """Handle ``planexec runs reject``."""
    from planexec.approval import ApprovalDecision

    who = _who(args)
    store = open_store(args.store)
    try:
        decision = ApprovalDecision.reject(args.reason, by=who) if args.reason.strip() else None
        if decision is None:
            raise ConfigError("--reason must say why (the planner is told it)")
        recorded = run_interruptible(_decide(args, store, decision, with_tools=False))[1]
        record = store.get_run(args.run_id)
    finally:
        store.close()
    if recorded is None:
        return 1
    print(
        f"run {args.run_id} step {args.step}: rejected by {who}: {args.reason}; continue "
        f"with: {resume_command(args, args.run_id, record)}"
    )
    return 0


async def _decide(
    args: argparse.Namespace, store: RunStore, decision: Any, *, with_tools: bool
) -> tuple[int, Any]:
    from planexec.runs import decide_step
    from planexec.tools import ToolCatalog

    seen = args.seen
    if not with_tools:
        return 0, await decide_step(store, args.run_id, args.step, decision, seen=seen)
    async with open_tools(args) as tools:
        return 0, await decide_step(
            store, args.run_id, args.step, decision, catalog=ToolCatalog(tools), seen=seen
        )


async def decide_recorded(
    store: RunStore, run_id: str, step: int, decision: Any, *, seen: str | None = None
) -> Any:
    """Record a decision as ``planexec runs approve|reject`` does (the console's path).

    An edit is checked against the schema of the tool the run recorded (its tool
    source, as ``runs resume`` finds it). ``seen``: the `planexec.runs.request_key` of
    the request the person decided about (see `planexec.runs.decide_step`).

    Raises:
        RunNotFoundError: no such run.
        ApprovalError: the step does not wait, waits on another request than ``seen``,
            or the edit does not fit the schema.
        ConfigError: an edit for a run that recorded no tool source.
    """
    from planexec.approval import ApprovalAction

    args = argparse.Namespace(run_id=run_id, step=step, tools=None, mcp_config=None, seen=seen)
    with_tools = decision.action is ApprovalAction.EDIT
    if with_tools:
        _resume_tool_options(args, store.get_run(run_id))
    return (await _decide(args, store, decision, with_tools=with_tools))[1]


async def recorded_schema(store: RunStore, run_id: str, tool: str, server: str | None) -> Any:
    """The JSON schema of a run's tool, from the tools the run recorded (for an approval page).

    Raises:
        RunNotFoundError: no such run.
        ConfigError: the run recorded no tool source, or the tool is not among its tools.
        ToolLoadError: the tools could not be loaded.
    """
    from planexec.tools import ToolCatalog

    args = argparse.Namespace(run_id=run_id, tools=None, mcp_config=None)
    _resume_tool_options(args, store.get_run(run_id))
    async with open_tools(args) as tools:
        spec = ToolCatalog(tools).lookup(tool, server)
        if spec is None:
            raise ConfigError(f"tool {tool!r} is not among the tools run {run_id} recorded")
        return spec.json_schema


async def resume_recorded(store: RunStore, run_id: str) -> Any:
    """Resume a run as ``planexec runs resume RUN_ID`` does, with its recorded tools.

    Returns:
        The run, or None when there was nothing to resume.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: the run recorded no tool source.
        RunError: the run cannot be resumed (it runs in a live process ...).
    """
    args = argparse.Namespace(
        run_id=run_id, store=None, tools=None, mcp_config=None, model=None,
        rerun_unsafe=False, force=False, dry_run=False,
    )
    source = _resume_tool_options(args, store.get_run(run_id))
    return (await _resume(args, store, source))[1]


# ---------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class TimelineBar:
    """One step of a run on the time axis."""

    label: str
    """E.g. ``v1 #2 assets``."""
    start: float
    """Seconds from the start of the run."""
    duration: float
    """Seconds the step took (how long an in-flight call ran until the last record)."""
    status: str
    """A `StepStatus` value, or ``IN_FLIGHT``."""
    detail: str = ""
    """Error or note, for the tooltip."""
    provenance: tuple[str, ...] = ()
    """Per argument, how it got its value and, for a filled one, where it comes from
    (``asset_id ← filtered, grounded at step_1.assets[0].id``), for the tooltip;
    ungrounded values are flagged ``UNGROUNDED``."""
    filled: tuple[str, ...] = ()
    """In short, the arguments with a recorded grounding (filled by the filter tier, the
    LLM fallback or tool selection): ``asset_id ← filtered at step_1.assets[0].id``,
    ``asset_id ← llm, UNGROUNDED``; drawn beside the PNG's bar."""


def _provenance(result: StepResult) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Per argument of a step, its method and grounding: all lines, and the filled ones."""
    lines: list[str] = []
    filled: list[str] = []
    for arg, method in result.resolution.items():
        g = result.grounding.get(arg)
        lines.append(f"{arg} ← {method}" + (f", {g.describe()}" if g is not None else ""))
        if g is None:
            continue
        if not g.grounded:
            filled.append(f"{arg} ← {method}, UNGROUNDED")
        elif g.paths:
            more = f" (+{len(g.paths) - 1})" if len(g.paths) > 1 else ""
            filled.append(f"{arg} ← {method} at {g.paths[0]}{more}")
        else:
            filled.append(f"{arg} ← {method}, {g.status}")
    return tuple(lines), tuple(filled)


def _every_result(store: RunStore, run_id: str) -> list[tuple[int, StepResult, float | None]]:
    """Every step result the run recorded, in order: ``(plan version, result, when)``.

    Each ``StepFinished`` event is one: a step re-resolved, retried by the agent, paused
    for approval and run again after a resume has a result for each time. A store whose
    events hold no results gives the latest result of each step instead.
    """
    from planexec.store.codec import result_from_json

    found = [
        (int(e.get("plan_version") or 1), result_from_json(e["result"]), e.get("ts"))
        for e in store.events(run_id)
        if e.get("type") == "StepFinished" and isinstance(e.get("result"), dict)
    ]
    if found:
        return found
    return [(s.plan_version, s.result, s.recorded_at) for s in store.step_results(run_id)]


def timeline_bars(store: RunStore, run_id: str) -> tuple[RunRecord, list[TimelineBar]]:
    """Return a run's record and its bars, in start order.

    One bar per result a step recorded (`_every_result`: every attempt and every pause,
    before and after a resume; a step with several is labelled ``(1)``, ``(2)``...); a
    pause for approval lasts until the decision was recorded; a failed bar carries its
    error. A step whose earlier result was reused (`StepResult.reused`) is a ``REUSED``
    bar of no length at the time it was reused, since it did not run again; one
    ``PLANNER`` bar per call of the planner's model (`planexec.events.LLMCalled` with
    purpose ``plan``), labelled ``planner stream`` when its reply streamed into the
    executor, with the steps that started under it labelled ``(streamed)``.

    Raises:
        RunNotFoundError: no such run.
    """
    record = store.get_run(run_id)
    results = _every_result(store, run_id)
    calls = store.started_calls_without_result(run_id)
    starts = [r.started_at for _, r, _ in results if r.started_at is not None]
    starts += [c.ts for c in calls]
    t0 = record.created_at if record.created_at is not None else min(starts, default=0.0)
    end = record.finished_at or record.updated_at or t0
    decided = {
        (int(e.get("plan_version") or 1), e.get("step_id")): float(e.get("decided_at")
                                                                    or e.get("ts") or end)
        for e in store.events(run_id)
        if e.get("type") == "ApprovalDecided"
    }
    runs_of: dict[tuple[int, int], int] = {}
    for version, r, _ in results:
        if not r.reused:
            runs_of[(version, r.step_id)] = runs_of.get((version, r.step_id), 0) + 1
    seen: dict[tuple[int, int], int] = {}
    bars: list[TimelineBar] = []
    for version, r, when in results:
        name = f"v{version} #{r.step_id} {r.tool or '(reasoning)'}"
        if r.reused:
            bars.append(
                TimelineBar(
                    label=f"{name} (reused)",
                    start=max(0.0, (when or t0) - t0),
                    duration=0.0,
                    status="REUSED",
                    detail=f"{r.status}, reused: not run again in this plan version",
                )
            )
            continue
        key = (version, r.step_id)
        seen[key] = seen.get(key, 0) + 1
        nth = f" ({seen[key]})" if runs_of[key] > 1 else ""
        start = (r.started_at if r.started_at is not None else when or t0) - t0
        duration = max(0.0, r.duration or 0.0)
        detail = r.error or r.note or ""
        if r.status is StepStatus.WAITING_APPROVAL:  # the pause lasts until the decision
            until = decided.get(key, end)
            duration = max(duration, until - t0 - start)
            detail = detail or "waiting for approval"
        provenance, filled = _provenance(r)
        streamed = " (streamed)" if r.streamed else ""  # started under the planner's stream
        bars.append(
            TimelineBar(
                label=f"{name}{nth}{streamed}",
                start=max(0.0, start),
                duration=duration,
                status=str(r.status),
                detail=detail,
                provenance=provenance,
                filled=filled,
            )
        )
    for c in calls:
        bars.append(
            TimelineBar(
                label=f"v{c.plan_version} #{c.step_id} {c.tool}",
                start=max(0.0, c.ts - t0),
                duration=max(0.0, end - c.ts),
                status="IN_FLIGHT",
                detail="the call started and no result was recorded",
            )
        )
    planner_calls = [
        e
        for e in store.events(run_id)
        if e.get("type") == "LLMCalled" and e.get("purpose") == "plan"
    ]
    for i, e in enumerate(planner_calls, 1):
        duration = max(0.0, float(e.get("duration") or 0.0))
        ok = e.get("ok", True)
        bars.append(
            TimelineBar(
                label=f"planner {'stream' if e.get('streamed') else 'call'} {i}",
                start=max(0.0, float(e.get("ts") or t0) - duration - t0),
                duration=duration,
                status="PLANNER",
                detail="" if ok else "the call failed",
            )
        )
    bars += _decision_bars(store, run_id, t0)
    bars.sort(key=lambda b: (b.start, b.label))
    return record, bars


def _decision_bars(store: RunStore, run_id: str, t0: float) -> list[TimelineBar]:
    """One marker per recorded approval decision, at the time it was made."""
    names = {"approve": "APPROVED", "edit": "EDITED", "reject": "REJECTED"}
    bars = []
    for e in store.events(run_id):
        if e.get("type") != "ApprovalDecided":
            continue
        action = str(e.get("action"))
        edited = f", edited {to_json(e.get('edited'))}" if e.get("edited") else ""
        why = f": {e['reason']}" if e.get("reason") else ""
        bars.append(
            TimelineBar(
                label=f"v{e.get('plan_version', 1)} #{e.get('step_id')} decision",
                start=max(0.0, float(e.get("decided_at") or e.get("ts") or t0) - t0),
                duration=0.0,
                status=names.get(action, action.upper()),
                detail=f"{action} by {e.get('by') or '?'}{edited}{why}",
            )
        )
    return bars


def _tick_step(span: float) -> float:
    raw = span / 8 if span > 0 else 1.0
    for base in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30,
                 60, 120, 300, 600):
        if base >= raw:
            return float(base)
    return 3600.0


_FAILED_BARS = frozenset({"FAILED", "BLOCKED", "CANCELLED", "REJECTED"})
"""Bars drawn with their error text beside them."""


def _bar_note(bar: TimelineBar) -> str:
    """The text written beside a bar: a failure's error, else the arguments filled."""
    if bar.status in _FAILED_BARS and bar.detail:
        return snippet(bar.detail, 90)
    return "; ".join(bar.filled)


def render_timeline_html(record: RunRecord, bars: list[TimelineBar]) -> str:
    """Render the timeline as one self-contained HTML page with inline SVG (no scripts)."""
    title = f"planexec run {html.escape(record.run_id)}"
    question = html.escape(record.question or "")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{title}</title></head>\n<body style=\"font-family: sans-serif\">\n"
        f"<h1>{title}</h1>\n<p>{question}</p>\n" + render_timeline_svg(record, bars)
        + "\n</body></html>\n"
    )


def render_timeline_svg(record: RunRecord, bars: list[TimelineBar]) -> str:
    """Render the timeline as one standalone SVG document (what the HTML page holds)."""
    row, left, right, top = 26, 230, 30, 50
    width = 1000
    span = max([b.start + b.duration for b in bars] + [1e-3])
    plot_w = width - left - right
    height = top + row * max(1, len(bars)) + 50

    def x(t: float) -> float:
        return left + plot_w * t / span

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<text x="{left}" y="20" font-size="14" font-weight="bold">'
        f"run {html.escape(record.run_id)} — {record.status.value}</text>",
    ]
    step = _tick_step(span)
    tick = 0.0
    axis_y = top + row * max(1, len(bars)) + 5
    while tick <= span + 1e-9:
        xt = x(tick)
        parts.append(f'<line x1="{xt:.1f}" y1="{top - 5}" x2="{xt:.1f}" y2="{axis_y}" '
                     'stroke="#e0e0e0"/>')
        parts.append(f'<text x="{xt:.1f}" y="{axis_y + 15}" text-anchor="middle">'
                     f"{tick:g}s</text>")
        tick += step
    for i, b in enumerate(bars):
        y = top + i * row
        color = STATUS_COLORS.get(b.status, "#424242")
        w = max(3.0, plot_w * b.duration / span)
        tip = f"{b.label}: {b.status}, start {b.start:.3f}s, {b.duration:.3f}s"
        if b.detail:
            tip += f" — {b.detail}"
        tip += "".join(f"\n  {line}" for line in b.provenance)
        parts.append(
            f'<text x="{left - 8}" y="{y + row / 2 + 4:.1f}" text-anchor="end">'
            f"{html.escape(b.label)}</text>"
        )
        dash = ' stroke-dasharray="4 2" stroke="#212121"' if b.status == "IN_FLIGHT" else ""
        parts.append(
            f'<rect class="bar status-{b.status.lower()}" x="{x(b.start):.1f}" y="{y + 4}" '
            f'width="{w:.1f}" height="{row - 8}" fill="{color}"{dash}>'
            f"<title>{html.escape(tip)}</title></rect>"
        )
        note = _bar_note(b)
        if note:  # an error (or the filled arguments) readable without hovering
            parts.append(
                f'<text class="note" x="{min(x(b.start) + w + 4, width - 200):.1f}" '
                f'y="{y + row / 2 + 4:.1f}" font-size="10">{html.escape(note)}</text>'
            )
    legend_x = left
    for status in sorted({b.status for b in bars}):
        parts.append(f'<rect x="{legend_x}" y="{height - 18}" width="12" height="12" '
                     f'fill="{STATUS_COLORS.get(status, "#424242")}"/>')
        parts.append(f'<text x="{legend_x + 16}" y="{height - 8}">{status}</text>')
        legend_x += 110
    parts.append("</svg>")
    return "\n".join(parts)


def render_timeline_png(record: RunRecord, bars: list[TimelineBar], out: Path) -> None:
    """Draw the timeline to a PNG file with matplotlib.

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install "planexec[plot]"``).
    """
    require_extra("matplotlib", "plot")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as exc:  # pragma: no cover - found but broken
        raise MissingExtraError(
            f'drawing a PNG needs matplotlib ({exc}): pip install "planexec[plot]"',
            module="matplotlib",
            install="planexec[plot]",
        ) from exc
    fig = Figure(figsize=(10, 1.2 + 0.35 * max(1, len(bars))))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    span = max([b.start + b.duration for b in bars] + [1e-3])
    for i, b in enumerate(bars):
        ax.barh(
            i, max(b.duration, span * 0.006), left=b.start,
            color=STATUS_COLORS.get(b.status, "#424242"),
            hatch="//" if b.status == "IN_FLIGHT" else None,
        )
        note = _bar_note(b)  # a failure's error, else the arguments filled and their grounding
        if note:
            ax.text(b.start + max(b.duration, span * 0.006), i, "  " + note,
                    va="center", fontsize="x-small", clip_on=True)
    ax.set_xlim(0, span * (1.6 if any(_bar_note(b) for b in bars) else 1.02))
    ax.set_yticks(range(len(bars)), [b.label for b in bars])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the start of the run")
    ax.set_title(f"run {record.run_id} — {record.status.value}")
    statuses = sorted({b.status for b in bars})
    ax.legend(handles=[Patch(color=STATUS_COLORS.get(s, "#424242"), label=s) for s in statuses],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(str(out), format="png", dpi=100)


def cmd_timeline(args: argparse.Namespace) -> int:
    """Handle ``planexec runs timeline``."""
    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in (".html", ".htm", ".svg", ".png"):
        raise ConfigError(f"--out must end in .html, .svg or .png, not {out.name!r}")
    store = open_store(args.store)
    try:
        record, bars = timeline_bars(store, args.run_id)
    finally:
        store.close()
    if not bars:
        raise RunError(f"run {args.run_id} has no step to draw")
    if suffix == ".png":
        render_timeline_png(record, bars, out)
    elif suffix == ".svg":
        out.write_text(render_timeline_svg(record, bars) + "\n", encoding="utf-8")
    else:
        out.write_text(render_timeline_html(record, bars), encoding="utf-8")
    print(f"wrote {out} ({len(bars)} step(s))")
    return 0
