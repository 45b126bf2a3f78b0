"""The step pipeline (`execute`), and how a step's end becomes its result (`ended_by`).

A step's own checks, its upstream, then resolution, selection or reasoning, then the
call (`planexec.executor._call.call_tool`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import NoReturn

from planexec._json import non_finite
from planexec._log import step_log
from planexec._text import cut
from planexec.errors import CircuitOpenError, ErrorKind, ModelError
from planexec.events import ArgResolved, StepStarted
from planexec.executor._call import call_tool, check_finite
from planexec.executor._protocols import SelectionFailure
from planexec.executor._state import RunState, StepContext, StepFailed, is_empty, named, short
from planexec.plan import Ref, Step, Template
from planexec.resolver import ResolutionFailure, ResolvedArgs
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus
from planexec.tools import ToolSpec

_BLOCKING = (StepStatus.FAILED, StepStatus.BLOCKED, StepStatus.CANCELLED)

_REFS = frozenset({Ref, Template})
"""A plan's references: no literal number in them."""


async def execute(
    run: RunState,
    ctx: StepContext,
    results: Mapping[int, StepResult],
    feedback: StepError | None,
    plan_ids: set[int],
) -> StepResult:
    """Run one step to its result (raising `StepFailed` for most failures)."""
    step = ctx.step
    ctx.phase = "checking"
    spec: ToolSpec | None = None
    if step.tool is not None:
        if not step.args_valid:
            text = f" ({cut(step.args_text, 120)})" if step.args_text else ""
            raise StepFailed(
                StepStatus.FAILED,
                ErrorKind.ARGS_SYNTAX,
                f"step {step.id}: the arguments of tool {step.tool!r} could not be "
                f"read as written{text} (see the plan's error diagnostics); "
                "the tool was not called",
            )
        spec = (run.fast and _quick_lookup(run, step)) or await _lookup(run, step)
        ctx.tool, ctx.server = spec.name, spec.server or step.server
    _check_references(step, results, plan_ids)
    _check_upstream(step, results)
    defect = run.defects.get(step.id)
    if defect is not None:  # named by an error diagnostic: never runs (plan_errors)
        raise StepFailed(StepStatus.FAILED, defect.kind, defect.message, failure=defect)

    bus = run.bus
    if bus.listening:  # no subscriber: no event to build
        await bus.emit(
            StepStarted.of(
                run_id=run.run_id,
                step_id=step.id,
                tool=step.tool,
                plan_version=run.plan_version,
            )
        )
    if spec is None:
        if step.selects_tool:  # an agent or server but no tool: select, never reason
            return await _select(run, ctx, results, feedback)
        return await _reason(run, ctx, results)

    if non_finite(step.args, _REFS) is not None or (
        step.positional and non_finite(step.positional, _REFS) is not None
    ):
        # the plan's literals: found, then worded with the argument's name
        check_finite(
            ctx, {**dict(enumerate(step.positional)), **step.args}, plan_literals=True
        )
    ctx.phase = "resolving"
    resolved: ResolvedArgs | ResolutionFailure = await run.resolver.resolve(
        step, spec, results, feedback=feedback, run_id=run.run_id, bus=bus
    )
    ctx.llm_calls += resolved.llm_calls
    # the resolution's own (fresh) dicts: the result copies them
    ctx.resolution = resolved.methods  # partial on a failure
    ctx.grounding = resolved.grounding
    if isinstance(resolved, ResolutionFailure):
        text = named(step.id, resolved.message)
        raise StepFailed(
            StepStatus.FAILED, resolved.kind, text, failure=resolved.to_error(text)
        )
    args = resolved.args  # a fresh dict of this resolution's
    if resolved.plain:
        ctx.finite = args  # plain data: the call need not look again
    if resolved.validated is not None:
        ctx.validated = (args, resolved.validated)
    del resolved  # not kept alive while the tool runs
    return await call_tool(run, ctx, step, spec, args)


def _quick_lookup(run: RunState, step: Step) -> ToolSpec | None:
    """The step's tool when the catalog has it as written and all is well, else None.

    None sends the step to `_lookup`, which decides the rest and words failures.
    """
    if getattr(run.catalog, "unavailable", None):  # some server could not start
        return None
    try:
        return run.catalog.lookup(step.tool or "", step.server)
    except KeyError:  # ambiguous name
        return None


async def _lookup(run: RunState, step: Step) -> ToolSpec:
    assert step.tool is not None
    catalog = run.catalog
    down = getattr(catalog, "unavailable", None) or {}
    if step.server is not None and step.server in down:  # its server could not start
        _unavailable(step, catalog.unavailable_reason(step.tool, step.server))
    try:
        spec = catalog.lookup(step.tool, step.server)
        if spec is None and step.server:
            spec = catalog.lookup(step.tool)
            if spec is not None:
                await run.bus.emit(
                    run.warn(
                        step.id,
                        "SERVER_IGNORED",
                        f"step {step.id}: no tool {step.tool!r} on server "
                        f"{step.server!r}; using {spec.qualified_name!r}",
                    )
                )
    except KeyError as exc:  # ambiguous name
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.UNKNOWN_TOOL,
            f"step {step.id}: {exc}; the tool was not called",
        ) from exc
    if spec is None:
        if down:
            reason = catalog.unavailable_reason(step.tool, step.server)
            if reason is not None:
                _unavailable(step, reason)
        close = catalog.suggest(step.tool)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        where = f" (server {step.server!r})" if step.server else ""
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.UNKNOWN_TOOL,
            f"step {step.id}: unknown tool {step.tool!r}{where}{hint} The tool was not called.",
        )
    return spec


def _unavailable(step: Step, reason: str | None) -> NoReturn:
    """Fail a step whose tool's MCP server could not start (``TOOL_ERROR``)."""
    raise StepFailed(
        StepStatus.FAILED,
        ErrorKind.TOOL_ERROR,
        f"step {step.id}: tool {step.tool!r} cannot be called: "
        f"{reason or 'its server could not start'}",
    )


def _check_references(step: Step, results: Mapping[int, StepResult], plan_ids: set[int]) -> None:
    for ref in step.refs:
        if ref.step not in plan_ids and ref.step not in results:
            arg = step.ref_args.get(ref.step)
            message = (
                f"step {step.id}: argument {arg or '?'!r} refers to step {ref.step} "
                f"({ref.raw or ref.canonical}), which is not in the plan; "
                f"the tool was not called"
            )
            raise StepFailed(
                StepStatus.FAILED,
                ErrorKind.MISSING_REFERENCE,
                message,
                failure=StepError(
                    ErrorKind.MISSING_REFERENCE, message, args=(arg,) if arg else ()
                ),
            )
    for dep in step.depends_on:
        if dep not in plan_ids and dep not in results:
            raise StepFailed(
                StepStatus.FAILED,
                ErrorKind.MISSING_REFERENCE,
                f"step {step.id}: depends on step {dep}, which is not in the plan",
            )


def _check_upstream(step: Step, results: Mapping[int, StepResult]) -> None:
    deps = step.deps
    for dep in sorted(deps) if len(deps) > 1 else deps:
        r = results.get(dep)
        if r is None or r.status is StepStatus.SUCCEEDED:
            continue
        where = step.ref_args
        referenced = dep in where
        if r.status in _BLOCKING or (referenced and r.status is StepStatus.SKIPPED):
            how = f"argument {where[dep]!r} refers to" if referenced else "depends on"
            cause = r.error or r.note or "no output"
            kind = f"{r.error_kind}: " if r.error_kind else ""
            if r.failure is not None and r.failure.kind is ErrorKind.UPSTREAM_FAILED:
                # blocked in turn: name the failure at the root of the chain, whose words
                # its own message carries as its cause, not the whole chain's messages
                # (each one quoting the last made a chain of n steps write n² characters)
                cause = r.failure.cause or cause
                kind = "caused by "
            message = (
                f"step {step.id}: blocked: {how} step {dep}, which is "
                f"{r.status.value.lower()} ({kind}{cause}); the tool was not called"
            )
            raise StepFailed(
                StepStatus.BLOCKED,
                ErrorKind.UPSTREAM_FAILED,
                message,
                failure=StepError(
                    ErrorKind.UPSTREAM_FAILED,
                    message,
                    args=(where[dep],) if referenced else (),
                    cause=cause,
                    upstream=dep,
                ),
            )


async def _select(
    run: RunState, ctx: StepContext, results: Mapping[int, StepResult], feedback: StepError | None
) -> StepResult:
    """Select the tool of a step that names an agent or server but no tool; call it."""
    step = ctx.step
    who = f"the agent/server {step.server!r}"
    if not step.args_valid:
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.ARGS_SYNTAX,
            f"step {step.id} ({who}, no tool) could not be read as written (see the "
            "plan's error diagnostics); no tool was selected or called",
        )
    if run.selector is None:
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.TOOL_SELECTION_FAILED,
            f"step {step.id}: names {who} but no tool, and there is no model to "
            "select one with; not run (it is not a reasoning step: those say "
            "#Tool: none)",
        )
    inputs = {
        d: results[d]
        for d in step.deps
        if d in results and results[d].status is StepStatus.SUCCEEDED
    }
    ctx.phase = "selecting"
    try:
        choice = await run.selector.select(step, run.catalog, inputs, feedback=feedback)
    except CircuitOpenError as exc:
        ctx.llm_calls += 1
        raise StepFailed(
            StepStatus.FAILED, ErrorKind.CIRCUIT_OPEN, f"step {step.id}: tool selection: {exc}"
        ) from exc
    except ModelError as exc:
        ctx.llm_calls += 1
        raise StepFailed(
            StepStatus.FAILED, ErrorKind.MODEL_ERROR, f"step {step.id}: tool selection: {exc}"
        ) from exc
    ctx.llm_calls += choice.llm_calls
    if isinstance(choice, SelectionFailure):
        raise StepFailed(
            StepStatus.FAILED, choice.kind, choice.message, failure=choice.to_error()
        )
    spec, args = choice.spec, dict(choice.args)
    ctx.tool, ctx.server = spec.name, spec.server or step.server
    ctx.note = choice.note
    ctx.resolution = dict.fromkeys(args, ResolutionMethod.SELECTED)
    await run.bus.emit(
        run.warn(
            step.id,
            "TOOL_SELECTED",
            f"step {step.id} names {who} but no tool: {choice.note}; "
            f"arguments {short(args)}",
        )
    )
    for name in args:
        await run.bus.emit(
            ArgResolved(
                run_id=run.run_id, step_id=step.id, arg=name, method=ResolutionMethod.SELECTED
            )
        )
    # the arguments were chosen, not written: nothing in the plan is checked against them
    chosen = replace(step, tool=spec.name, server=spec.server, args={}, positional=())
    return await call_tool(run, ctx, chosen, spec, args)


async def _reason(run: RunState, ctx: StepContext, results: Mapping[int, StepResult]) -> StepResult:
    step = ctx.step
    if run.reasoner is None:
        message = (
            f"step {step.id}: reasoning step skipped: no model to reason with "
            f"(its expected output is a description, not a result)"
        )
        await run.bus.emit(run.warn(step.id, "REASONING_SKIPPED", message))
        return run.result(ctx, StepStatus.SKIPPED, None, None, note=message)
    inputs = {
        d: results[d]
        for d in step.deps
        if d in results and results[d].status is StepStatus.SUCCEEDED
    }
    ctx.phase = "reasoning"
    ctx.llm_calls += 1
    try:
        answer = await run.reasoner.reason(step, inputs)
    except CircuitOpenError as exc:
        raise StepFailed(
            StepStatus.FAILED, ErrorKind.CIRCUIT_OPEN, f"step {step.id}: reasoning: {exc}"
        ) from exc
    except ModelError as exc:
        raise StepFailed(
            StepStatus.FAILED, ErrorKind.MODEL_ERROR, f"step {step.id}: reasoning: {exc}"
        ) from exc
    if is_empty(answer):
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.EMPTY_OUTPUT,
            f"step {step.id}: the reasoning model gave an empty answer",
        )
    return run.result(ctx, StepStatus.SUCCEEDED, None, None, output=answer, raw_output=answer)


def ended_by(
    run: RunState,
    ctx: StepContext,
    exc: StepFailed | TimeoutError | CircuitOpenError | asyncio.CancelledError,
) -> StepResult:
    """The result of a step that ended with ``exc`` (its failure, timeout, cancel)."""
    step = ctx.step
    if isinstance(exc, StepFailed):
        return run.result(ctx, exc.status, exc.kind, exc.message, **exc.fields)
    if isinstance(exc, TimeoutError):
        kind, what = {
            "resolving": (ErrorKind.RESOLUTION_FAILED, "while resolving its arguments"),
            "reasoning": (ErrorKind.MODEL_ERROR, "while its model was reasoning"),
            "selecting": (ErrorKind.MODEL_ERROR, "while its model was selecting a tool"),
            "approval": (
                ErrorKind.LIMIT_EXCEEDED,
                "while waiting for its approval; the tool was not called",
            ),
        }.get(ctx.phase, (ErrorKind.TOOL_TIMEOUT, f"while calling tool {step.tool!r}"))
        limit = run.config.step_timeout
        why = f"step timeout of {limit}s exceeded" if limit is not None else "timed out"
        return run.result(ctx, StepStatus.FAILED, kind, f"step {step.id}: {why} {what}")
    if isinstance(exc, CircuitOpenError):  # e.g. the resolver's model breaker
        return run.result(
            ctx, StepStatus.FAILED, ErrorKind.CIRCUIT_OPEN, f"step {step.id}: {exc}"
        )
    # Only the scheduler cancels step tasks (on `cancel` or when `run` itself is
    # cancelled); it records the result and the scheduler decides what to raise.
    why = f" ({run.cancel_reason})" if run.cancel_reason else ""
    result = run.result(
        ctx,
        StepStatus.CANCELLED,
        ErrorKind.CANCELLED,
        f"step {step.id}: cancelled while {ctx.phase}{why}",
    )
    step_log(run.run_id, step.id).warning(result.error)
    return result
