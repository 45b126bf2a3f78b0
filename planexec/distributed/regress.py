"""``planexec regress --ray [auto|ADDRESS]``: regression scenarios as Ray tasks.

Each selected scenario runs in a Ray worker through the regress runner's own picklable
entry point (`planexec.regress.runner.run_scenario`), so a scenario gives the same
`ScenarioResult` on Ray as in a local worker process. Results come back to the driver as
they finish (``on_result`` is called in completion order; the report keeps path order).

Scenario files, and the cassettes and tool modules they name, must be readable on the
workers at the same absolute paths (one machine, a shared filesystem, or a Ray
``runtime_env`` with a ``working_dir``).

A worker that dies while running a scenario: the scenario is run again on another
worker when every tool it uses is safe (read-only or idempotent, not destructive);
tools of MCP servers count as unsafe, since their hints are known only once connected.
Otherwise the scenario is reported as an ``error`` with the reason.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from planexec.distributed.runs import UNKNOWN_SAFETY, JobContext, run_jobs
from planexec.errors import ConfigError, PlanexecError

__all__ = ["run_suite_on_ray", "scenario_job", "unsafe_tools_of"]


def unsafe_tools_of(scenario: Any) -> list[str]:
    """The names of a scenario's tools that are not safe to run twice (``*``: unknown)."""
    from planexec.regress.scenario import MCPTools, ModuleTools
    from planexec.tools import ToolCatalog, ToolHints, load_tools

    source = scenario.tools
    fakes = source if isinstance(source, list) else list(source.fake)
    unsafe = [t.name for t in fakes if not ToolHints.from_mapping(t.hints).safe]
    if isinstance(source, ModuleTools):
        unsafe += [s.name for s in ToolCatalog(load_tools(source.module)) if not s.hints.safe]
    elif isinstance(source, MCPTools):
        unsafe.append(UNKNOWN_SAFETY)
    return unsafe


async def scenario_job(payload: Any, ctx: JobContext) -> Any:
    """Run one scenario file in a worker (the job of `run_suite_on_ray`).

    ``payload`` is ``(path, record, record_model, log_level)``.
    """
    from loguru import logger

    from planexec.regress.runner import run_scenario
    from planexec.regress.scenario import load_scenario

    path, record, record_model, log_level = payload
    logger.remove()
    logger.enable("planexec")  # a worker of the CLI: planexec logs at log_level
    logger.add(lambda msg: print(msg, end=""), level=log_level)
    logger.configure(extra={"run_id": "-", "step_id": "-"})
    try:
        unsafe = unsafe_tools_of(load_scenario(path))
    except PlanexecError:
        unsafe = []  # run_scenario reports the invalid file itself
    await ctx.declare(unsafe_tools=unsafe, tracks_calls=False)
    return await asyncio.to_thread(run_scenario, path, record=record, record_model=record_model)


def run_suite_on_ray(
    paths: Iterable[str | os.PathLike[str]],
    *,
    address: str | None = None,
    filter_expr: str | None = None,
    record: bool = False,
    record_model: str | None = None,
    on_result: Callable[[Any], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    worker_log_level: str = "ERROR",
    options: Mapping[str, Any] | None = None,
    max_retries: int = 1,
) -> Any:
    """Run the selected scenarios on Ray; return a `planexec.regress.report.SuiteReport`.

    Args:
        paths: Scenario files and folders (see `planexec.regress.runner.discover`).
        address: The Ray cluster: ``auto`` (this machine's ``ray start`` cluster), an
            address, or ``local``; None: ``$RAY_ADDRESS`` if set, else a private local
            Ray (``local``).
        filter_expr: Select scenarios by name or tag (``--filter``).
        record: Record cassettes instead of replaying them.
        record_model: A model spec to record against.
        on_result: Called with each result as it arrives.
        on_start: Called once with the number of scenarios selected.
        worker_log_level: The loguru level inside the workers.
        options: Resources each scenario task asks for (`planexec.distributed.RayOptions`).
        max_retries: Re-runs of a scenario whose worker died (only when its tools are safe).

    Raises:
        ConfigError: a path does not exist.
        MissingExtraError: Ray is not installed.
    """
    from planexec.regress.report import ScenarioResult, SuiteReport
    from planexec.regress.runner import discover, matches_filter
    from planexec.regress.scenario import load_scenario

    start = time.perf_counter()
    selected: list[tuple[Path, str, str | None]] = []  # path, name, error
    for p in discover(paths):
        try:
            sc = load_scenario(p)
        except PlanexecError as exc:
            if matches_filter(p.name, [], filter_expr):
                selected.append((p, p.name, str(exc)))
            continue
        if matches_filter(sc.name, sc.tags, filter_expr):
            selected.append((p, sc.name, None))
    if on_start is not None:
        on_start(len(selected))
    results: list[Any] = [None] * len(selected)
    todo: list[int] = []
    for i, (p, name, error) in enumerate(selected):
        if error is not None:
            results[i] = ScenarioResult(name=name, path=str(p), status="error", error=error)
            if on_result is not None:
                on_result(results[i])
        else:
            todo.append(i)

    outcomes = asyncio.run(
        run_jobs(
            scenario_job,
            [
                (str(selected[i][0].resolve()), record, record_model, worker_log_level)
                for i in todo
            ],
            names=[selected[i][1] for i in todo],
            address=address,
            options=options,
            max_retries=max_retries,
            on_outcome=_forward(on_result),
        )
    ) if todo else []
    for i, outcome in zip(todo, outcomes, strict=True):
        result = outcome.result
        if result is None:
            path, name, _ = selected[i]
            result = ScenarioResult(
                name=name, path=str(path), status="error",
                error=f"the Ray worker running it failed: {outcome.error}",
            )
            if on_result is not None:
                on_result(result)
        results[i] = result
    if any(r is None for r in results):  # pragma: no cover - every index is filled above
        raise ConfigError("a scenario got no result")
    workers = 1
    if todo:
        from planexec.distributed._ray import import_ray

        workers = max(1, int(import_ray().cluster_resources().get("CPU", 1)))
    return SuiteReport(results, wall_time=time.perf_counter() - start, workers=workers)


def _forward(on_result: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """Pass finished scenario results (not failed runs) to ``on_result`` as they come."""
    if on_result is None:
        return None
    callback = on_result

    def forward(outcome: Any) -> None:
        if outcome.result is not None:
            callback(outcome.result)

    return forward
