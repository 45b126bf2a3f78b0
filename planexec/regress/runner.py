"""Running scenarios: one (`run_scenario`) or a suite (`run_suite`), with workers.

`run_scenario` is the one entry point that runs a scenario: a module-level function of
picklable arguments (a path or a `Scenario`) returning a picklable `ScenarioResult`, so
a process pool (or, later, a Ray task) can call it as it is. It never raises for a
scenario's own problems: an invalid file, a cassette miss or a timeout is a result with
status ``error`` and the reason.

`run_suite` expands folders into ``*.scenario.yaml`` files, filters them, runs them in
one process or in ``workers`` processes, and returns the results in path order, so
``workers=N`` gives the same report as ``workers=1`` (timings aside).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import importlib.util
import multiprocessing
import multiprocessing.context
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from planexec._loading import load_object
from planexec.approval import ApprovalDecision, ApprovalRequest
from planexec.errors import CassetteError, ConfigError, PlanexecError
from planexec.evaluation import EvalCase, EvalStatus, Evaluator, FunctionEvaluator, Verdict
from planexec.events import Event, StepFinished, ToolCallStarted
from planexec.regress.cassette import CassetteChatModel
from planexec.regress.expectations import Observer, check_run
from planexec.regress.report import ExpectationFailure, ScenarioResult, SuiteReport
from planexec.regress.scenario import (
    SCENARIO_SUFFIX,
    FakeTool,
    MCPTools,
    ModuleTools,
    RaisedReply,
    Reply,
    Scenario,
    ScriptedApproval,
    ScriptedReplies,
    ScriptedVerdicts,
    load_scenario,
)
from planexec.results import Run
from planexec.testing import ScriptedChatModel, fake_tool

__all__ = [
    "ScriptedApprover",
    "ScriptedEvaluator",
    "ScriptedModelError",
    "arun_scenario",
    "build_evaluator",
    "build_model",
    "discover",
    "matches_filter",
    "open_tools",
    "run_scenario",
    "run_suite",
]

_TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "number": float,
    "bool": bool,
    "list": list[Any],
    "dict": dict[str, Any],
    "null": type(None),
    "any": Any,
}


# --------------------------------------------------------------------------- building


def build_fake_tool(spec: FakeTool) -> BaseTool:
    """Build an inline fake tool with `planexec.testing.fake_tool`."""
    args: dict[str, Any] = {}
    for name, tname in spec.args.items():
        optional = tname.endswith("?")
        typ = _TYPES[tname.removesuffix("?")]
        args[name] = (typ | None, None) if optional else typ
    hints: dict[str, Any] = dict(spec.hints)
    if spec.server:
        hints["server"] = spec.server
    return fake_tool(
        spec.name,
        spec.output,
        description=spec.description,
        args=args,
        error=spec.error,
        fail_times=spec.fail_times,
        latency=spec.latency,
        hints=hints,
    )


@contextlib.asynccontextmanager
async def open_tools(scenario: Scenario) -> AsyncIterator[list[BaseTool]]:
    """The scenario's tools, for the duration of the block (MCP servers are closed after).

    Raises:
        ToolLoadError: a module or MCP server could not give tools.
        ConfigError: the MCP configuration is invalid.
    """
    source = scenario.tools
    if isinstance(source, list):
        yield [build_fake_tool(t) for t in source]
        return
    fakes = [build_fake_tool(t) for t in source.fake]
    if isinstance(source, ModuleTools):
        from planexec.tools import load_tools

        yield [*load_tools(source.module), *fakes]
        return
    assert isinstance(source, MCPTools)
    from planexec.mcp.client import MCPToolset

    async with MCPToolset(
        scenario.resolve_path(source.mcp_config), servers=source.servers
    ) as toolset:
        yield [*toolset.tools, *fakes]


def _recorder(scenario: Scenario, record_model: str | None) -> BaseChatModel:
    from planexec.models import load_model

    spec = scenario.model
    assert spec is not None
    source: str | ScriptedReplies | None = record_model or spec.record_with
    if source is None:
        raise CassetteError(
            f"scenario {scenario.name!r}: --record needs a model to record against: give "
            "'model.record_with' (a model spec or scripted replies) or --record-model SPEC"
        )
    if isinstance(source, ScriptedReplies):
        return ScriptedChatModel(replies=list(source.replies), name_="record_with")
    kind, sep, rest = source.partition(":")
    if sep and kind == "replay":
        # a replay file is relative to the scenario's folder; its path is not part of
        # the model's identity (so cassettes do not depend on where they were recorded)
        from planexec.models import load_replies

        replies = load_replies(scenario.resolve_path(rest.strip()))
        return ScriptedChatModel(replies=replies, name_="replay")
    return load_model(source)


class ScriptedModelError(RuntimeError):
    """What a scripted ``{raise: MESSAGE}`` reply raises (a provider error, not retried)."""


def _reply(reply: Reply) -> str | BaseException:
    """A scripted reply as `ScriptedChatModel` takes it: text, or the error to raise."""
    if isinstance(reply, RaisedReply):
        if reply.transient:
            return ConnectionError(reply.raise_)
        return ScriptedModelError(reply.raise_)
    return reply


class ScriptedEvaluator:
    """An `Evaluator` answering from a scenario's ``{verdicts: [...]}``, in order."""

    def __init__(self, spec: ScriptedVerdicts) -> None:
        self.verdicts = [
            Verdict(EvalStatus(v))
            if isinstance(v, str)
            else Verdict(EvalStatus(v.status), v.evaluation, v.lesson, v.judge_error)
            for v in spec.verdicts
        ]
        self.calls = 0
        """How many verdicts were asked for."""

    async def evaluate(self, case: EvalCase) -> Verdict:
        """The next scripted verdict.

        Raises:
            ConfigError: the script has no verdict left.
        """
        self.calls += 1
        if self.calls > len(self.verdicts):
            raise ConfigError(
                f"the evaluator was asked for verdict {self.calls} but the scenario scripts "
                f"{len(self.verdicts)} (add verdicts for the extra evaluations)"
            )
        return self.verdicts[self.calls - 1]


def build_evaluator(scenario: Scenario) -> Evaluator | None:
    """The scenario's evaluator: scripted verdicts, or one loaded from ``MODULE:ATTR``.

    An object with an ``evaluate`` method is used as it is; a class (or another
    zero-argument callable) returning such an object is called; any other callable is a
    function of the `EvalCase` (`FunctionEvaluator`).

    Raises:
        ConfigError: ``MODULE:ATTR`` gives nothing usable as an evaluator.
    """
    spec = scenario.evaluator
    if spec is None:
        return None
    if isinstance(spec, ScriptedVerdicts):
        return ScriptedEvaluator(spec)
    obj = load_object(spec)
    if isinstance(obj, type):
        obj = obj()
    if hasattr(obj, "evaluate"):
        return cast(Evaluator, obj)
    if callable(obj):
        return FunctionEvaluator(obj)
    raise ConfigError(f"evaluator {spec!r} is neither an evaluator nor a function")


@dataclass
class _Canceller:
    """Cancels the run (as a caller would) once ``after`` tool calls were made."""

    after: int
    cancel: Callable[[], Any] | None = None
    calls: int = 0
    fired: bool = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            self.calls += 1
        elif (
            isinstance(event, StepFinished)
            and not self.fired
            and self.calls >= self.after
            and self.cancel is not None
        ):
            self.fired = True
            self.cancel()


def build_model(
    scenario: Scenario, *, record: bool = False, record_model: str | None = None
) -> BaseChatModel | None:
    """The scenario's model: scripted replies, a replayed cassette, or a recording one.

    Raises:
        CassetteError: the cassette cannot be read, or there is nothing to record with.
    """
    spec = scenario.model
    if spec is None:
        return None
    if spec.replies is not None:
        return ScriptedChatModel(
            replies=[_reply(r) for r in spec.replies], name_=f"scenario:{scenario.name}"
        )
    assert spec.cassette is not None
    path = scenario.resolve_path(spec.cassette)
    if record:
        return CassetteChatModel(path, mode="record", inner=_recorder(scenario, record_model))
    return CassetteChatModel(path, mode="replay")


def _evaluator_problems(evaluator: Evaluator | None, strict: bool) -> list[ExpectationFailure]:
    """Scripted verdicts left unused (with ``model.strict``)."""
    if not strict or not isinstance(evaluator, ScriptedEvaluator):
        return []
    given = len(evaluator.verdicts)
    if evaluator.calls >= given:
        return []
    return [
        ExpectationFailure(
            "evaluator.verdicts",
            f"{given - evaluator.calls} of {given} scripted verdicts were never used (the "
            f"run was evaluated {evaluator.calls} time(s))",
        )
    ]


class ScriptedApprover:
    """The approval callback of a scenario: its ``approvals``, served in order.

    A request for a step other than the decision's ``step`` is a problem (reported as a
    failure after the run) and is deferred; once the script runs out, requests are
    deferred (the run pauses ``WAITING_APPROVAL``).
    """

    def __init__(self, script: Sequence[ScriptedApproval]) -> None:
        self.script = list(script)
        self.used = 0
        self.problems: list[str] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Return the next scripted decision."""
        if self.used >= len(self.script):
            return ApprovalDecision.defer("the scenario's scripted approvals ran out")
        item = self.script[self.used]
        self.used += 1
        if item.step is not None and item.step != request.step_id:
            self.problems.append(
                f"approval {self.used} is scripted for step {item.step}, but step "
                f"{request.step_id} ({request.tool}) asked"
            )
            return ApprovalDecision.defer("not the scripted step")
        if item.action == "approve":
            return ApprovalDecision.approve(by=item.by, reason=item.reason)
        if item.action == "edit":
            return ApprovalDecision.edit(item.args or {}, by=item.by, reason=item.reason)
        if item.action == "reject":
            return ApprovalDecision.reject(item.reason or "", by=item.by)
        return ApprovalDecision.defer(item.reason)


def _approval_problems(approver: ScriptedApprover | None) -> list[ExpectationFailure]:
    """Scripted approvals for the wrong step, or left unused."""
    if approver is None:
        return []
    out = [ExpectationFailure("approvals", p) for p in approver.problems]
    left = len(approver.script) - approver.used
    if left > 0:
        out.append(
            ExpectationFailure(
                "approvals",
                f"{left} of {len(approver.script)} scripted approvals were never asked for",
            )
        )
    return out


def _model_problems(model: BaseChatModel | None, strict: bool) -> list[ExpectationFailure]:
    """What the model saw that the expectations cannot: misses, unused or missing replies."""
    out: list[ExpectationFailure] = []
    if isinstance(model, CassetteChatModel):
        if model.mode == "record":
            return _model_problems(model.inner, strict)
        if strict:
            unused = model.unused_entries()
            if unused:
                first = unused[0]["messages"][-1]["content"] if unused[0]["messages"] else ""
                out.append(
                    ExpectationFailure(
                        "model.cassette",
                        f"{len(unused)} recorded request(s) were never made (the run made "
                        f"fewer model calls than recorded); first unused request ends: "
                        f"{first[-200:]!r}",
                    )
                )
    elif isinstance(model, ScriptedChatModel) and strict:
        given = len(model.replies)
        if model.calls > given:
            out.append(
                ExpectationFailure(
                    "model.replies",
                    f"the model was called {model.calls} times but the scenario scripts "
                    f"{given} replies (add replies for the extra calls)",
                )
            )
        elif model.remaining:
            out.append(
                ExpectationFailure(
                    "model.replies",
                    f"{model.remaining} of {given} scripted replies were never used (the run "
                    f"made {model.calls} model calls)",
                )
            )
    return out


# --------------------------------------------------------------------------- running


def _run_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:60] or "scenario"


async def _run(
    scenario: Scenario,
    model: BaseChatModel | None,
    observer: Observer,
    evaluator: Evaluator | None = None,
    approver: ScriptedApprover | None = None,
) -> Run:
    from planexec.agent import PlanExecuteAgent

    typed: dict[str, Any] = {}
    if scenario.output_type is not None:
        output_type = load_object(scenario.output_type)
        if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
            raise ConfigError(f"output_type {scenario.output_type!r} is not a pydantic model")
        typed["output_type"] = output_type
        typed["expected"] = scenario.expect.expected_output() or None
    handlers: list[Any] = [observer]
    canceller: _Canceller | None = None
    if scenario.cancel_after_tool_calls is not None:
        canceller = _Canceller(scenario.cancel_after_tool_calls)
        handlers.append(canceller)
    async with open_tools(scenario) as tools:
        agent = PlanExecuteAgent(
            model, tools, config=scenario.config, evaluator=evaluator, approver=approver
        )
        run_id = _run_id(scenario.name)
        if scenario.plan is not None:
            coro = agent.execute_plan(
                scenario.plan,
                question=scenario.question,
                run_id=run_id,
                event_handlers=handlers,
                **typed,
            )
        else:
            coro = agent.run(scenario.question, run_id=run_id, event_handlers=handlers, **typed)
        if canceller is None:
            return await coro
        # the caller's side of a cancellation: cancel the task running the agent
        task = asyncio.ensure_future(coro)
        canceller.cancel = task.cancel
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (
                not canceller.fired
                or agent.last_run is None
                or (current is not None and current.cancelling())
            ):
                raise  # not ours: the scenario's own timeout, or the runner was cancelled
            return agent.last_run


def _stable_order(data: dict[str, Any]) -> dict[str, Any]:
    """The run's data with each plan attempt's step results in step order.

    Parallel steps finish in an order that timing decides; the report must not depend
    on it, so ``--workers N`` gives the same report as one worker. A step with several
    results in one attempt (re-runs) keeps them in the order they happened.
    """
    for attempt in data.get("attempts", []):
        results = attempt.get("results")
        if isinstance(results, list):
            attempt["results"] = sorted(results, key=lambda r: r.get("step_id", 0))
    return data


def _cassette_miss(model: BaseChatModel | None) -> str | None:
    """The first cassette miss of the run, if any: the scenario cannot be trusted then."""
    if isinstance(model, CassetteChatModel) and model.misses:
        return model.misses[0]
    return None


def run_scenario(
    scenario: str | os.PathLike[str] | Scenario,
    *,
    record: bool = False,
    record_model: str | None = None,
) -> ScenarioResult:
    """Run one scenario and check its expectations (starts its own event loop).

    A pure, picklable entry point: a module-level function of picklable arguments
    returning a picklable result, safe to call in a worker process. It never raises for
    the scenario's own problems. From async code, await `arun_scenario` instead.

    Args:
        scenario: A scenario file, or a `Scenario` (relative paths in it are read from
            its ``path``'s folder, or the current folder).
        record: Record the scenario's cassette (if it has one) against its
            ``record_with`` model (or ``record_model``) instead of replaying it.
        record_model: A model spec to record against, overriding ``record_with``.

    Returns:
        The result: ``passed``, ``failed`` (with every failing expectation), ``error``
        (the scenario could not run, with the reason) or ``skipped``.
    """
    return asyncio.run(arun_scenario(scenario, record=record, record_model=record_model))


async def arun_scenario(
    scenario: str | os.PathLike[str] | Scenario,
    *,
    record: bool = False,
    record_model: str | None = None,
) -> ScenarioResult:
    """`run_scenario` on the running event loop."""
    start = time.perf_counter()
    path = None if isinstance(scenario, Scenario) else str(scenario)
    try:
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    except PlanexecError as exc:
        name = Path(path).name if path else "scenario"
        return ScenarioResult(
            name=name,
            path=path,
            status="error",
            error=str(exc),
            wall_time=time.perf_counter() - start,
        )
    result = ScenarioResult(name=sc.name, path=sc.path or path, tags=list(sc.tags))
    if sc.skip is not None:
        result.status, result.error = "skipped", sc.skip
        return result
    if isinstance(sc.tools, MCPTools) and importlib.util.find_spec("mcp") is None:
        result.status = "skipped"
        result.error = 'its MCP tools need the MCP SDK: pip install "planexec[mcp]"'
        return result
    try:
        model = build_model(sc, record=record, record_model=record_model)
    except PlanexecError as exc:
        result.status, result.error = "error", str(exc)
        result.wall_time = time.perf_counter() - start
        return result
    result.recorded = isinstance(model, CassetteChatModel) and model.mode == "record"
    observer = Observer()
    run: Run | None = None
    evaluator: Evaluator | None = None
    approver = ScriptedApprover(sc.approvals) if sc.approvals is not None else None
    try:
        evaluator = build_evaluator(sc)
        run = await asyncio.wait_for(
            _run(sc, model, observer, evaluator, approver), sc.timeout
        )
    except TimeoutError:
        result.status = "error"
        result.error = f"the run did not finish within the scenario's timeout ({sc.timeout}s)"
    except (PlanexecError, ImportError) as exc:
        result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a scenario's crash is its result, not ours
        result.status, result.error = "error", f"the run raised {type(exc).__name__}: {exc}"
    miss = _cassette_miss(model)
    if run is not None:
        result.run = _stable_order(run.to_dict())
        result.llm_calls = run.usage.total_llm_calls
        result.llm_calls_by_purpose = dict(run.usage.llm_calls)
        result.tool_calls = run.usage.tool_calls
        if miss is None:
            strict = sc.model.strict if sc.model is not None else True
            result.failures = [
                *check_run(sc.expect, run, observer),
                *_model_problems(model, strict),
                *_evaluator_problems(evaluator, strict),
                *_approval_problems(approver),
            ]
            result.status = "failed" if result.failures else "passed"
    if miss is not None:
        # the run cannot be trusted: its model saw a request the cassette does not hold
        result.status, result.error, result.failures = "error", miss, []
    result.wall_time = time.perf_counter() - start
    return result


# --------------------------------------------------------------------------- suites


def discover(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Scenario files: each file given, and every ``*.scenario.yaml`` under each folder.

    Folders are searched recursively and their files sorted; duplicates are dropped.

    Raises:
        ConfigError: a path does not exist.
    """
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(p.rglob(f"*{SCENARIO_SUFFIX}")))
        elif p.is_file():
            found.append(p)
        else:
            raise ConfigError(f"no scenario file or folder {str(p)!r}")
    return list(dict.fromkeys(found))


def matches_filter(name: str, tags: Sequence[str], expr: str | None) -> bool:
    """Whether a scenario is selected by ``--filter``.

    ``expr`` is one or more terms separated by commas (any may match). A term with
    ``*``, ``?`` or ``[`` is a glob matched against the name and each tag; any other
    term is a case-insensitive substring of the name or of a tag. A term starting with
    ``!`` excludes what it matches (and a filter of exclusions only selects the rest).
    """
    if not expr:
        return True
    terms = [t.strip() for t in expr.split(",") if t.strip()]

    def hit(term: str) -> bool:
        subjects = [name, *tags]
        if any(ch in term for ch in "*?["):
            return any(fnmatch.fnmatchcase(s.lower(), term.lower()) for s in subjects)
        return any(term.lower() in s.lower() for s in subjects)

    include = [t for t in terms if not t.startswith("!")]
    exclude = [t[1:] for t in terms if t.startswith("!") and len(t) > 1]
    if any(hit(t) for t in exclude):
        return False
    return not include or any(hit(t) for t in include)


@dataclass
class _Selected:
    path: Path
    scenario: Scenario | None = None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def _select(paths: Iterable[str | os.PathLike[str]], expr: str | None) -> list[_Selected]:
    selected: list[_Selected] = []
    for p in discover(paths):
        try:
            sc = load_scenario(p)
        except PlanexecError as exc:
            # an invalid file is reported (as an error) unless the filter rules it out
            if matches_filter(p.name, [], expr):
                selected.append(_Selected(p, None, str(exc)))
            continue
        if matches_filter(sc.name, sc.tags, expr):
            selected.append(_Selected(p, sc))
    return selected


def _mp_context() -> multiprocessing.context.BaseContext:
    """How worker processes start.

    ``fork`` where it is safe and available (POSIX, Python < 3.12): workers inherit the
    imported modules, so they start in milliseconds. Otherwise ``forkserver`` (POSIX)
    preloading the runner, or ``spawn``.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and sys.version_info < (3, 12):
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["planexec.regress.runner"])
        return ctx
    return multiprocessing.get_context("spawn")


def _init_worker(log_level: str) -> None:
    from loguru import logger

    logger.remove()
    logger.enable("planexec")  # a worker of the CLI: planexec logs at log_level
    logger.add(sys.stderr, level=log_level)
    logger.configure(extra={"run_id": "-", "step_id": "-"})


def run_suite(
    paths: Iterable[str | os.PathLike[str]],
    *,
    filter_expr: str | None = None,
    workers: int = 1,
    record: bool = False,
    record_model: str | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    worker_log_level: str = "ERROR",
) -> SuiteReport:
    """Run every scenario under ``paths`` that ``filter_expr`` selects.

    Args:
        paths: Scenario files and folders (searched for ``*.scenario.yaml``).
        filter_expr: Select scenarios by name or tag (see `matches_filter`).
        workers: Processes to run scenarios in (1: in this process).
        record: Record cassettes instead of replaying them.
        record_model: A model spec to record against (overrides ``record_with``).
        on_result: Called with each result as it arrives (in completion order).
        on_start: Called once with the number of scenarios selected.
        worker_log_level: The loguru level of worker processes.

    Returns:
        The report, with results in path order whatever the completion order.

    Raises:
        ConfigError: a path does not exist, or ``workers`` < 1.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    start = time.perf_counter()
    selected = _select(paths, filter_expr)
    if on_start is not None:
        on_start(len(selected))
    results: list[ScenarioResult | None] = [None] * len(selected)

    def done(i: int, r: ScenarioResult) -> None:
        results[i] = r
        if on_result is not None:
            on_result(r)

    pending: list[int] = []
    for i, s in enumerate(selected):
        if s.scenario is None:
            done(
                i, ScenarioResult(name=s.path.name, path=str(s.path), status="error", error=s.error)
            )
        else:
            pending.append(i)
    if workers == 1 or len(pending) <= 1:
        for i in pending:
            done(i, run_scenario(str(selected[i].path), record=record, record_model=record_model))
    else:
        with ProcessPoolExecutor(
            max_workers=min(workers, len(pending)),
            mp_context=_mp_context(),
            initializer=_init_worker,
            initargs=(worker_log_level,),
        ) as pool:
            futures: dict[Future[ScenarioResult], int] = {
                pool.submit(
                    run_scenario,
                    str(selected[i].path),
                    record=record,
                    record_model=record_model,
                ): i
                for i in pending
            }
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    r = fut.result()
                except Exception as exc:  # noqa: BLE001 - a dead worker is a scenario error
                    sel = selected[i].scenario
                    r = ScenarioResult(
                        name=sel.name if sel is not None else selected[i].path.name,
                        path=str(selected[i].path),
                        status="error",
                        error=f"the worker running it failed: {type(exc).__name__}: {exc}",
                    )
                done(i, r)
    final = [r for r in results if r is not None]
    return SuiteReport(final, wall_time=time.perf_counter() - start, workers=workers)
