"""The call: the one boundary every tool call passes (`call_tool`).

Every tool call of the executor goes through `call_tool`: a tool written in the plan, a
tool a `planexec.executor.ToolSelector` chose, every retry of either, a step of a resumed
or continued run (the drivers run the executor), whatever the runner (in process, Ray,
an MCP server's tool through its `planexec.tools.ToolSpec`). Nothing else calls
``runner.call``. Its invariants live here, once:

1. no argument holds a reference or a placeholder-looking string, nor a malformed
   reference the plan wrote (`check_invariant`);
2. the approval gate (`approve`), when the step needs a person's decision;
3. the ``guard`` hook (``LIMIT_EXCEEDED``);
4. no NaN or infinity in an argument (`check_finite`, ``ARGS_INVALID``);
5. then the attempts (`attempts`): per attempt the tool's circuit breaker, **the gate**
   (an approved call claims its decision — run, plan version, step, tool, argument
   digest, once, under the run's lease — in the store transaction that records the call
   start, `planexec.events.ToolCallStarted`, which a run store commits for a call that
   is not safe; see `attempt`), the runner's call bounded by its timeout, the output
   checked; retried with backoff only when the tool is safe.

The approval decision (2) is checked again after approval: edited arguments pass the
invariant (1), in the plan's dialect, and the tool's whole schema before the call.
"""

from __future__ import annotations

import asyncio
import functools
from asyncio import current_task
from collections.abc import Awaitable, Coroutine, Generator, Mapping
from contextvars import Context, copy_context
from types import CoroutineType, MappingProxyType
from typing import Any

from pydantic import ValidationError

from planexec._json import non_finite
from planexec._log import step_log
from planexec._retry import RetryPolicy, classify_tool_failure, retry_async
from planexec._text import cut
from planexec.approval import ApprovalAction
from planexec.errors import CircuitOpenError, DecisionClaimError, ErrorKind
from planexec.events import ToolCallStarted, ToolProgress
from planexec.executor._protocols import call_options
from planexec.executor._state import (
    AttemptFailed,
    RunState,
    StepContext,
    StepFailed,
    ToolSettings,
    is_empty,
    join_note,
    named,
    short,
)
from planexec.parsing.refs import contains_placeholder, find_malformed, is_free_text
from planexec.plan import Ref, Step, Template
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus
from planexec.tools import (
    ToolOutputError,
    ToolSpec,
    check_output,
    error_payload,
    reporting_progress,
    sync_only,
)

_NO_RETRY = RetryPolicy.none()
"""The policy of a tool that is not retried (one attempt)."""


async def call_tool(
    run: RunState, ctx: StepContext, step: Step, spec: ToolSpec, args: dict[str, Any]
) -> StepResult:
    """THE CALL BOUNDARY: check, decide and make a step's tool call; its result.

    Every tool call passes here (see the module's docstring): ``step`` is the step as
    called (for a step that selected its tool, the step with that tool and no written
    arguments), ``spec`` the tool, ``args`` the resolved (or chosen) arguments.

    Raises:
        StepFailed: the call was refused (invariant, approval, guard, NaN) or failed.
    """
    ctx.phase = "calling"
    check_invariant(run, step, args, spec)
    # ---------------------------------------------------------------- the decision
    # Approval: the person's decision (approve, maybe with edited arguments, reject,
    # defer). What is decided here applies to exactly these arguments.
    if run.approvals is not None:
        args = await approve(run, ctx, step, spec, args)
    if run.guard is not None:
        ctx.phase = "guard"
        message = run.guard(step, spec.name)
        if message:
            raise StepFailed(
                StepStatus.FAILED, ErrorKind.LIMIT_EXCEEDED, named(ctx.step.id, message), args=None
            )
        ctx.phase = "calling"
    # ---------------------------------------------------------------- the call
    return await _make_call(run, ctx, spec, args)


async def _make_call(
    run: RunState, ctx: StepContext, spec: ToolSpec, args: dict[str, Any]
) -> StepResult:
    step = ctx.step
    if ctx.finite is not args:  # (approval may have changed them)
        check_finite(ctx, args)
    ctx.args = args
    settings = tool_settings(run, spec)
    policy, slots = settings[3], settings[4]
    try:
        if run.fast and policy.attempts <= 1 and slots is None:  # one attempt: retry_async's
            output, raw_out = await attempt(run, ctx, spec, args, settings)
        else:
            output, raw_out = await attempts(run, ctx, spec, args, settings)
    except AttemptFailed as failed:
        if failed.kind is ErrorKind.EMPTY_OUTPUT and run.config.empty_output == "warn":
            note = f"{failed.message}; accepted (empty_output='warn')"
            await run.bus.emit(run.warn(step.id, "EMPTY_OUTPUT_ACCEPTED", note))
            return run.result(
                ctx,
                StepStatus.SUCCEEDED,
                None,
                None,
                output=failed.output,
                raw_output=failed.raw,
                note=note,
            )
        tries = f" after {ctx.attempts} attempts" if ctx.attempts > 1 else ""
        not_retried = ""
        if ctx.attempts == 1 and not retryable(run, spec, approved=ctx.approved):
            not_retried = " (not retried: the tool is not marked read-only or idempotent)"
            if spec.hints.destructive:
                not_retried = " (not retried: the tool is destructive)"
            elif run.config.retry_unsafe:  # `retryable`: only its approval stopped it
                not_retried = (" (not retried: its approval allowed one call, and the tool "
                               "is not marked read-only or idempotent)")
        message = f"{failed.message}{tries}{not_retried}"
        raise StepFailed(
            StepStatus.FAILED,
            failed.kind,
            message,
            output=failed.output,
            raw_output=failed.raw,
            failure=StepError(failed.kind, message, cause=failed.cause, retryable=failed.retry),
        ) from failed
    kept: str | None = None
    warnings = ctx.warnings
    if warnings:
        kept = f"the output differs from what the tool returned: {'; '.join(warnings)}"
        for warning in warnings:
            message = f"step {step.id}: tool {spec.name!r}: {warning}"
            await run.bus.emit(run.warn(step.id, "OUTPUT_NOT_JSON", message))
    return run.result(
        ctx, StepStatus.SUCCEEDED, None, None, output=output, raw_output=raw_out, note=kept
    )


# ------------------------------------------------------------------ checks before the call


def check_invariant(
    run: RunState, step: Step, args: Mapping[str, Any], spec: ToolSpec | None = None
) -> None:
    """No reference, placeholder or malformed reference left in the arguments."""
    malformed = _malformed(run, step, spec)
    props = spec.json_schema.get("properties", {}) if spec and malformed else {}
    for name, value in args.items():
        odd = malformed.get(name)
        if odd and not is_free_text(props.get(name)):  # REF_MALFORMED: never half-resolved
            message = (
                f"step {step.id}: argument {name!r} holds {odd[0][1]!r}, which begins like "
                "a reference but is not one (see the REF_MALFORMED diagnostic); the tool "
                "was not called"
            )
            raise StepFailed(
                StepStatus.FAILED,
                ErrorKind.ARGS_SYNTAX,
                message,
                failure=StepError(
                    ErrorKind.ARGS_SYNTAX, message, args=(name,), literal_args=(name,)
                ),
            )
        bad = _unresolved(value, run.dialect)
        if bad is not None:
            text = bad.canonical if isinstance(bad, Ref | Template) else cut(bad, 120)
            message = (
                f"step {step.id}: argument {name!r} still holds an unresolved reference "
                f"or placeholder ({text!r}) after resolution; the tool was not called"
            )
            raise StepFailed(
                StepStatus.FAILED,
                ErrorKind.RESOLUTION_FAILED,
                message,
                failure=StepError(ErrorKind.RESOLUTION_FAILED, message, args=(name,)),
            )


def _malformed(
    run: RunState, step: Step, spec: ToolSpec | None
) -> Mapping[str, list[tuple[str, str]]]:
    """The arguments the plan wrote with a malformed reference (`find_malformed`).

    Nothing is built for a step without any (the common case).
    """
    dialect = run.dialect or "hashstep"
    written: Mapping[str, Any] = step.args  # each argument as the plan wrote it
    if spec is not None and step.positional:
        written = {**dict(zip(spec.arg_names, step.positional, strict=False)), **written}
    found: dict[str, list[tuple[str, str]]] | None = None
    for name, value in written.items():
        odd = find_malformed(value, dialect=dialect)
        if odd:
            if found is None:
                found = {}
            found[name] = odd
    return found if found is not None else _NONE_MALFORMED


def _unresolved(value: Any, dialect: str | None) -> Ref | Template | str | None:
    """The first reference or placeholder-looking string left in a value, if any."""
    kind = type(value)  # exact types first: plain data is most of what is checked
    if kind is int or kind is float or kind is bool or value is None:
        return None
    if kind is str:
        return value if contains_placeholder(value, dialect=dialect) else None
    if kind is dict:  # before the slower abstract checks below
        for k, v in value.items():
            if type(k) is str and contains_placeholder(k, dialect=dialect):
                return k  # a key is checked like a value
            if type(v) is not int and v is not None:
                found = _unresolved(v, dialect)
                if found is not None:
                    return found
        return None
    if isinstance(value, Ref | Template):
        return value
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and contains_placeholder(k, dialect=dialect):
                return k  # a key is checked like a value
            found = _unresolved(v, dialect)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for v in value:
            found = _unresolved(v, dialect)
            if found is not None:
                return found
        return None
    if isinstance(value, str) and contains_placeholder(value, dialect=dialect):
        return value
    return None


async def approve(
    run: RunState, ctx: StepContext, step: Step, spec: ToolSpec, args: dict[str, Any]
) -> dict[str, Any]:
    """Ask the approval gate; return the arguments to call with.

    Raises:
        StepFailed: rejected (``REJECTED``) or deferred (``WAITING_APPROVAL``).
    """
    assert run.approvals is not None
    ctx.phase = "approval"
    decision = await run.approvals.review(
        step, spec, args, ctx.resolution, plan_version=run.plan_version, dialect=run.dialect
    )
    ctx.phase = "calling"
    if decision is None:
        return args
    who = f" by {decision.by}" if decision.by else ""
    if decision.action is ApprovalAction.REJECT:
        message = (
            f"step {ctx.step.id}: tool {spec.name!r} not called: rejected{who}: "
            f"{decision.reason}"
        )
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.REJECTED,
            message,
            failure=StepError(ErrorKind.REJECTED, message, cause=decision.reason),
        )
    if decision.action is ApprovalAction.DEFER or decision.args is None:
        note = f"waiting for approval: {decision.reason or 'no decision yet'}"
        raise StepFailed(
            StepStatus.WAITING_APPROVAL, None, note, error=None, note=note, args=args
        )
    final = dict(decision.args)
    if final != args:  # edits merged: checked here, after approval, as the plan's own
        check_invariant(run, step, final, spec)
        try:
            spec.validate(final)
        except ValidationError as exc:
            message = (f"step {ctx.step.id}: the approved arguments of tool {spec.name!r} "
                       f"do not fit its schema: {exc}; the tool was not called")
            raise StepFailed(StepStatus.FAILED, ErrorKind.ARGS_INVALID, message,
                             args=final) from exc
    for name in decision.edited or {}:
        ctx.resolution[name] = ResolutionMethod.EDITED
    ctx.note = join_note(ctx.note, f"approved{who}")
    ctx.approved = True
    return final


def check_finite(
    ctx: StepContext, args: Mapping[Any, Any], *, plan_literals: bool = False
) -> None:
    """Refuse NaN and infinite numbers in arguments (``ARGS_INVALID``).

    Checked on the plan's literals before resolution (so that no coercion turns them
    into something else; ``plan_literals``: the failure names them in ``literal_args``,
    so that recovery re-plans instead of re-resolving a value no re-resolution changes)
    and on the resolved arguments before the call.
    """
    if non_finite(args) is None:  # the common case: one walk, nothing to word
        return
    for key, value in args.items():
        bad = non_finite(value)
        if bad is None:
            continue
        name = key if isinstance(key, str) else f"positional argument {key + 1}"
        message = (
            f"step {ctx.step.id}: argument {name!r} holds {bad}, which is not a finite "
            f"number (JSON has no such value; a plan literal like 1e999 overflows to it); "
            f"the tool was not called"
        )
        literal = plan_literals or ctx.resolution.get(name) is ResolutionMethod.LITERAL
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.ARGS_INVALID,
            message,
            failure=StepError(
                ErrorKind.ARGS_INVALID,
                message,
                args=(name,),
                literal_args=(name,) if literal else (),
            ),
        )


# ------------------------------------------------------------------ the tool's settings


def tool_settings(run: RunState, spec: ToolSpec) -> ToolSettings:
    """A tool's breaker, call timeout, output limit, retry policy and call slots.

    Looked up once per tool and run (the configuration does not change in a run).
    """
    key = (spec.server, spec.name)
    found = run.settings.get(key)
    if found is None:
        config = run.config
        found = run.settings[key] = (
            run.breakers.tool(spec.server, spec.name),
            config.timeout_for(spec),
            config.output_limit_for(spec),
            config.tool_retry.policy() if retryable(run, spec) else _NO_RETRY,
            _tool_slots(run, spec),
        )
    return found


def _tool_slots(run: RunState, spec: ToolSpec) -> asyncio.Semaphore | None:
    """The semaphore bounding a tool's concurrent calls in this run, if it has a limit."""
    limit = run.config.concurrency_for(spec)
    if limit is None:
        return None
    slots = run.slots.get(spec.qualified_name)
    if slots is None:
        slots = run.slots[spec.qualified_name] = asyncio.Semaphore(limit)
    return slots


def retryable(run: RunState, spec: ToolSpec, *, approved: bool = False) -> bool:
    """Whether a tool's failed call may be made again.

    ``approved``: the call was made on a person's decision, which allows one call of a
    tool that is not safe (a safe tool's retries repeat the one claimed call).
    """
    if spec.hints.destructive:
        return False
    return spec.hints.safe or (run.config.retry_unsafe and not approved)


# ------------------------------------------------------------------ attempts


async def attempt(
    run: RunState, ctx: StepContext, spec: ToolSpec, args: dict[str, Any], settings: ToolSettings
) -> tuple[Any, Any]:
    """One call of the tool: its checked output and raw output.

    Raises:
        AttemptFailed: the call failed (the kind says how; `retry` whether another
            attempt may succeed).
        StepFailed: the tool's circuit is open (not called).
    """
    step = ctx.step
    breaker, timeout, output_limit = settings[0], settings[1], settings[2]
    try:
        breaker.before_call()
    except CircuitOpenError as exc:
        raise StepFailed(
            StepStatus.FAILED,
            ErrorKind.CIRCUIT_OPEN,
            f"step {step.id}: tool {spec.name!r} not called: {exc}",
            args=None,
        ) from exc
    ctx.attempts += 1
    run.usage.tool_calls += 1
    safe = spec.hints.safe
    if not safe:
        ctx.unsafe_call = True
    bus = run.bus
    # ================================================================ THE GATE
    # An approved call happens only by claiming its decision — for this run, plan
    # version, step, tool and argument digest, once, under the run's lease — in the
    # same store transaction that records the call's start (`Approvals.claim`). A
    # refused claim: the tool is not called, the step waits for a decision. (Later
    # attempts of a safe tool are retries of the one claimed call; an approved call of
    # a tool that is not safe is never retried, `attempts`, even with retry_unsafe.)
    claim = ctx.approved and ctx.attempts == 1 and run.approvals is not None
    if bus.listening or claim:
        start = ToolCallStarted.of(
            run_id=run.run_id,
            step_id=step.id,
            tool=spec.name,
            args=args,
            attempt=ctx.attempts,
            plan_version=run.plan_version,
            safe=safe,
        )
        if claim:
            assert run.approvals is not None
            try:
                run.approvals.claim(step.id, run.plan_version, spec.name, args, start,
                                    server=spec.server)
            except DecisionClaimError as exc:
                breaker.release()
                ctx.attempts -= 1
                run.usage.tool_calls -= 1
                raise StepFailed(StepStatus.WAITING_APPROVAL, None, str(exc), error=None,
                                 note=f"waiting for approval: {exc}", args=args) from exc
        if bus.listening:  # e.g. the run store commits an unsafe call's start
            await bus.emit(start)
    # ================================================================
    # the call's progress, when someone listens: `ToolProgress` events of this step
    progress = None
    if bus.listening or run.trace is not None:
        progress = _Progress(run, step.id, spec, ctx.attempts)
    try:
        if progress is None:
            call = _tool_call(run, ctx, spec, args, timeout)
            raw = await call
        else:
            with reporting_progress(progress):
                call = _tool_call(run, ctx, spec, args, timeout)
                raw = await call
        # a call in a task of its own is waited for; an inline one says
        ctx.waited = call.waited if type(call) is _InlineCall else True
    except asyncio.CancelledError:
        breaker.release()
        raise
    except TimeoutError as exc:
        breaker.record_failure()
        raise AttemptFailed(
            ErrorKind.TOOL_TIMEOUT,
            f"step {step.id}: tool {spec.name!r} timed out after {timeout}s "
            f"(args {short(args)}); {exc}",
            retry=classify_tool_failure(exc, spec.tool).retry,
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any tool failure is a typed result
        breaker.record_failure()
        failure = classify_tool_failure(exc, spec.tool)  # kind and retry, by class
        raise AttemptFailed(
            failure.kind,
            f"step {step.id}: tool {spec.name!r} raised {type(exc).__name__}: "
            f"{cut(str(exc), 500)} (args {short(args)})",
            retry=failure.retry,
            cause=f"{type(exc).__name__}: {cut(str(exc), 500)}",
        ) from exc
    finally:
        if progress is not None:
            progress.open = False  # a late notification (an abandoned call) is dropped
    breaker.record_success()
    try:
        output, raw_out, found = check_output(raw, limit=output_limit)
    except ToolOutputError as exc:
        raise AttemptFailed(
            ErrorKind.TOOL_ERROR,
            f"step {step.id}: tool {spec.name!r} returned an output that cannot be "
            f"kept: {exc} (args {short(args)})",
            retry=False,
            cause=str(exc),
        ) from exc
    ctx.warnings = found
    payload = error_payload(output, run.config.error_payload_keys, raw=raw)
    if payload is not None:
        raise AttemptFailed(
            ErrorKind.TOOL_ERROR,
            f"step {step.id}: tool {spec.name!r} returned an error: "
            f"{cut(payload, 500)} (args {short(args)})",
            output,
            raw_out,
            retry=run.config.retry_error_payloads,
            cause=cut(payload, 500),
        )
    if is_empty(output):
        ctx.empties += 1
        raise AttemptFailed(
            ErrorKind.EMPTY_OUTPUT,
            f"step {step.id}: tool {spec.name!r} returned an empty output "
            f"({output!r}) (args {short(args)})",
            output,
            raw_out,
        )
    return output, raw_out


async def attempts(
    run: RunState, ctx: StepContext, spec: ToolSpec, args: dict[str, Any], settings: ToolSettings
) -> tuple[Any, Any]:
    """`attempt` under the tool's retry policy and call slots."""
    step = ctx.step
    policy, slots = settings[3], settings[4]

    async def one() -> tuple[Any, Any]:
        if slots is None:
            return await attempt(run, ctx, spec, args, settings)
        async with slots:  # the tool is at its limit: wait for a call to end
            return await attempt(run, ctx, spec, args, settings)

    def retry_if(exc: BaseException) -> bool:
        if not isinstance(exc, AttemptFailed) or not exc.retry:
            return False
        if ctx.approved and not retryable(run, spec, approved=True):  # one call (`attempt`)
            return False
        if exc.kind is ErrorKind.EMPTY_OUTPUT:
            if run.config.empty_output == "warn":
                return False
            return ctx.empties < run.config.empty_output_attempts
        return True

    async def on_retry(n: int, exc: BaseException, delay: float) -> None:
        message = (
            f"step {step.id}: retrying safe tool {spec.name!r} after attempt {n} of "
            f"{policy.attempts} failed ({exc}); next attempt in {delay:.2f}s"
        )
        await run.bus.emit(run.warn(step.id, "TOOL_RETRY", message))

    return await retry_async(one, policy, retry_if, on_retry=on_retry)


class _Progress:
    """The progress sink of one call (`planexec.tools.ProgressSink`).

    What the tool reports becomes a `ToolProgress` of its step, and an event on the
    step's trace span.
    """

    __slots__ = ("attempt", "open", "run", "spec", "step_id")

    def __init__(self, run: RunState, step_id: int, spec: ToolSpec, attempt: int) -> None:
        self.run = run
        self.step_id = step_id
        self.spec = spec
        self.attempt = attempt
        self.open = True
        """False once the attempt ended: what comes later is not this call's any more."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if not self.open:
            return
        run, spec = self.run, self.spec
        if run.bus.listening:
            await run.bus.emit(
                ToolProgress(
                    run_id=run.run_id,
                    step_id=self.step_id,
                    tool=spec.name,
                    server=spec.server,
                    progress=progress,
                    total=total,
                    message=message,
                    attempt=self.attempt,
                    plan_version=run.plan_version,
                )
            )
        if run.trace is not None:
            await run.trace.tool_progress(self.step_id, spec.name, progress, total, message)


# ------------------------------------------------------------------ the runner's call


def _tool_call(
    run: RunState, ctx: StepContext, spec: ToolSpec, args: dict[str, Any], timeout: float | None
) -> Awaitable[Any]:
    """One tool call, to await: driven in the step's task, or in a task of its own.

    Without a call timeout, a call that is a coroutine is driven in the step's own
    task (`_InlineCall`, no task per call); otherwise it runs in a task of its own
    (`_await_task`). Either way the wait never depends on the tool: on a timeout, or
    when this step is cancelled, the call is cancelled and not waited for.

    Raises:
        pydantic.ValidationError: the arguments do not fit the tool's schema
            (found before the call, on the direct path).
    """
    step, validated = ctx.step, ctx.validated
    ctx.validated = None  # used once: not kept alive while the tool runs (a retry validates)
    trace = run.trace
    # what the runner may use of this call (`call_options`): the trace's config, the
    # resolver's validation when it is of these very arguments, the callbacks around
    token = call_options.set(
        (
            trace.tool_config(step.id, spec.name) if trace is not None else None,
            validated[1] if validated is not None and validated[0] is args else None,
            run.callbacks,
        )
    )
    try:
        coro = run.runner.call(spec, args)
    finally:
        call_options.reset(token)
    if timeout is None and run.fast and type(coro) is CoroutineType:
        # no task of its own: driven here, abandoned (`_InlineCall`) if the step stops
        return _InlineCall(coro, copy_context(), run, ctx, spec)
    return _await_task(run, ctx, spec, coro, timeout)


async def _await_task(
    run: RunState, ctx: StepContext, spec: ToolSpec, coro: Awaitable[Any], timeout: float | None
) -> Any:
    """Run a tool call in a task of its own; wait for it at most ``timeout`` seconds.

    Raises:
        TimeoutError: the call took longer than ``timeout``; the message says
            whether the tool was left running.
        asyncio.CancelledError: the step was cancelled.
    """
    step = ctx.step
    call = asyncio.ensure_future(coro)
    if timeout is None:  # the cheapest wait that can stop waiting: a future of our own
        waiter = asyncio.get_running_loop().create_future()
        call.add_done_callback(functools.partial(_wake, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            _abandon(run, call, step, spec)  # nothing to do if the call itself ended so
            raise
        return call.result()
    try:
        done, _ = await asyncio.wait({call}, timeout=timeout)
    except asyncio.CancelledError:
        _abandon(run, call, step, spec)
        raise
    if call in done:
        return call.result()
    _abandon(run, call, step, spec)
    for _ in range(3):  # a tool that honours cancellation ends within a few loop turns
        if call.done():
            break
        await asyncio.sleep(0)
    if sync_only(spec.tool):
        how = "its thread cannot be stopped: the call was abandoned"
    elif call.done():
        how = "the call was cancelled"
    else:
        how = "the tool ignored the cancellation: it was left running, detached"
        step_log(run.run_id, step.id).warning(
            "step {}: tool {!r} ignored the cancellation after its timeout; "
            "left running, detached (its result will be dropped)",
            step.id,
            spec.name,
        )
    raise TimeoutError(how)


def _stop_call(
    run: RunState,
    ctx: StepContext,
    spec: ToolSpec,
    context: Context,
    coro: Coroutine[Any, Any, Any],
    cancel: asyncio.CancelledError,
) -> bool:
    """Whether a cancellation met by an `_InlineCall` stops its step.

    It does when the scheduler cancelled the step or its step timeout ran out: the
    call then goes on in a task of its own, which gets the cancellation first, and
    is abandoned (`_detach`). Any other cancellation (e.g. the tool's own timeout)
    is the tool's.
    """
    deadline = ctx.deadline
    if current_task() not in run.stopping and (deadline is None or not deadline.expired()):
        return False
    loop = asyncio.get_running_loop()
    _detach(run, loop.create_task(_resumed(coro, cancel), context=context), ctx.step, spec)
    return True


def _abandon(run: RunState, call: asyncio.Future[Any], step: Step, spec: ToolSpec) -> None:
    """Cancel a tool call and stop waiting for it; keep it referenced until it ends."""
    if call.done():
        return
    call.cancel()
    _detach(run, call, step, spec)


def _detach(run: RunState, call: asyncio.Future[Any], step: Step, spec: ToolSpec) -> None:
    """Stop waiting for a tool call; keep it referenced (and logged) until it ends."""
    run.detached.add(call)
    call.add_done_callback(
        functools.partial(_detached_done, run.detached, run.run_id, step.id, spec.name)
    )


def _detached_done(
    detached: set[asyncio.Future[Any]],
    run_id: str,
    step_id: int,
    tool: str,
    call: asyncio.Future[Any],
) -> None:
    detached.discard(call)
    if call.cancelled():
        return
    exc = call.exception()  # retrieved, so that asyncio does not report it
    how = f"raised {type(exc).__name__}" if exc is not None else "returned"
    step_log(run_id, step_id).warning(
        "step {}: the abandoned call of tool {!r} {} after all; its result was dropped",
        step_id,
        tool,
        how,
    )


class _InlineCall:
    """A tool call awaited in its step's own task, as if it ran in a task of its own.

    No task per call: the call's coroutine is driven here, in a copy of the step's
    context (as a task would run it), and everything is passed through to it (results,
    exceptions, a cancellation that is not the step's, e.g. the tool's own timeout). A
    cancellation that stops the step (its run says so, and hands the call to a task
    of its own that throws it in: `_stop_call`) is not waited for: a tool that
    ignores it is left running, detached, as with a task per call. Without a run
    (the rest of such a call, `_resumed`) every cancellation is the call's.
    """

    __slots__ = ("_context", "_coro", "_ctx", "_error", "_run", "_spec", "waited")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        context: Context | None,
        run: RunState | None = None,
        ctx: StepContext | None = None,
        spec: ToolSpec | None = None,
        *,
        error: BaseException | None = None,
    ) -> None:
        self._coro = coro
        self._context = context
        self._run = run
        self._ctx = ctx
        self._spec = spec
        self._error = error
        self.waited = False
        """Whether the call yielded to the event loop (waited for something)."""

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, context = self._coro, self._context
        value: Any = None
        error = self._error
        while True:
            try:
                if context is None:
                    yielded = coro.send(value) if error is None else coro.throw(error)
                elif error is None:
                    yielded = context.run(coro.send, value)
                else:
                    yielded = context.run(coro.throw, error)
            except StopIteration as end:
                return end.value
            value = error = None
            self.waited = True
            try:
                value = yield yielded
            except asyncio.CancelledError as cancel:
                if self._stops(coro, cancel):
                    raise  # the step stops; the call went on in a task of its own
                error = cancel
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - passed on to the call, as a task would
                error = exc

    def _stops(self, coro: Coroutine[Any, Any, Any], cancel: asyncio.CancelledError) -> bool:
        """Whether ``cancel`` stops the step (`_stop_call`), not only the call."""
        run, ctx, spec, context = self._run, self._ctx, self._spec, self._context
        if run is None or ctx is None or spec is None or context is None:
            return False
        return _stop_call(run, ctx, spec, context, coro, cancel)


async def _resumed(coro: Coroutine[Any, Any, Any], cancel: asyncio.CancelledError) -> Any:
    """The rest of an abandoned `_InlineCall`, in a task of its own: it gets ``cancel``."""
    return await _InlineCall(coro, None, error=cancel)


def _wake(waiter: asyncio.Future[None], _call: asyncio.Future[Any]) -> None:
    if not waiter.done():  # not cancelled meanwhile
        waiter.set_result(None)


_NONE_MALFORMED: Mapping[str, list[tuple[str, str]]] = MappingProxyType({})
"""`_malformed` of a step without a malformed reference."""
