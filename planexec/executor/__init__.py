"""The executor: runs a checked `Plan` as a DAG of steps on asyncio.

Every step whose dependencies are done starts at once, up to ``max_concurrency``
(1,024 by default), and a tool named in ``tool_concurrency`` has at most that many
calls running (its other steps wait for a slot).
For each step, in order:

1. its own defects: unreadable ``#Args`` (``ARGS_SYNTAX``), an unknown tool
   (``UNKNOWN_TOOL``, with close names), a reference or dependency to a step that does
   not exist (``MISSING_REFERENCE``), a dependency cycle (``MISSING_REFERENCE``);
2. its dependencies: one that failed, was blocked or cancelled (or a referenced one
   that was skipped) makes it ``BLOCKED`` (``UPSTREAM_FAILED``, naming the upstream
   step, the argument and the upstream error);
3. argument resolution through the `ArgResolver` (the only way the executor meets a
   model, with the reasoning hook);
4. the invariant — no argument holds a reference or a placeholder-looking string —
   checked right before the call (``RESOLUTION_FAILED`` otherwise);
5. the approval gate (`Approvals`, `planexec.approval`), when the step needs a
   person's decision: approved (maybe with edited arguments), ``REJECTED``, or
   ``WAITING_APPROVAL`` (the step waits with its resolved arguments, and so do the
   steps that depend on it; everything else runs on);
6. the ``guard`` hook (``LIMIT_EXCEEDED``), the tool's circuit breaker (its server's;
   a local tool's own) (``CIRCUIT_OPEN``);
7. the tool call through the `ToolRunner`, bounded by its timeout, retried with
   backoff and jitter only when the tool is safe (read-only or idempotent, not
   destructive). Exceptions, ``is_error`` results and error payloads are
   ``TOOL_ERROR``; a timeout is ``TOOL_TIMEOUT``; an empty output is ``EMPTY_OUTPUT``.
   An argument that is NaN or infinite is ``ARGS_INVALID`` (the tool is not called).
   The call runs as in a task of its own (one with a call timeout in a task; one
   without in the step's task, in a context of its own, handed to a task when the step
   stops: `_InlineCall`): a timeout (or a cancellation of the step or the run) never
   waits for the tool, so a tool that ignores cancellation is left running, detached
   and logged (a sync tool's thread cannot be stopped at all: it is abandoned). An
   output over ``max_output_chars`` (or the tool's ``tool_output_limits``), one that
   contains itself or is nested deeper than `planexec.results.MAX_JSON_DEPTH` is
   ``TOOL_ERROR`` and is not kept; what JSON cannot keep of an output (colliding keys,
   objects that are not JSON data) is a ``OUTPUT_NOT_JSON`` warning event and a note on
   the step.

``run_timeout`` bounds one `Executor.run`: when it runs out the run is cancelled as by
`ExecutorRun.cancel`, with the reason in its ``cancel_reason`` and on the steps.

A step without a tool is a reasoning step: a `Reasoner` answers its task from its
dependencies' outputs; without one it is ``SKIPPED`` with a note. Its own
``expected_output`` is never used as a result. A step that names an agent or server but
no tool (`planexec.plan.Step.selects_tool`; not ``#Tool: none``) is no reasoning step: a
`ToolSelector` chooses one of that server's tools and fills its arguments (method
``selected``, a ``TOOL_SELECTED`` event and a note naming the tool), then the call goes
on as in 4-6; without a selector it fails with ``TOOL_SELECTION_FAILED``.

Each step's `StepFinished` event is awaited through the `EventBus` before any step
that depends on it starts, so a store subscribed to the bus has recorded it.

Each run's state is its own (`ExecutorRun`): one executor runs any number of plans at
once. `Executor.cancel` stops every run under way; `Executor.start` returns a run's
handle, whose `ExecutorRun.cancel` stops that run only.

The package, along its seams: ``_protocols`` (what the executor needs of its
collaborators), ``_schedule`` and ``_run`` (the schedule, the streamed feed, one run),
``_step`` (the step pipeline), ``_call`` (the call: `planexec.executor._call.call_tool`,
the one boundary every tool call passes) and ``_executor`` (`Executor`).

`Executor.run_feed` runs a plan whose steps arrive over time (a planner's reply as it
streams, `planexec.streaming`): steps start as they arrive, but before the whole plan is
there only those safe to start early (`Executor.may_start_early`); a step the final plan
does not hold as it arrived is cancelled or its result discarded (`Executor.discarded`,
`planexec.events.StepDiscarded`). `Executor.run` is the same scheduler fed the whole
plan at once.
"""

from planexec.executor._executor import Executor
from planexec.executor._protocols import (
    Approvals,
    Guard,
    LocalToolRunner,
    Reasoner,
    ToolRunner,
    ToolSelector,
)
from planexec.executor._run import ExecutorRun
from planexec.executor._state import REUSED_NOTE

__all__ = [
    "REUSED_NOTE",
    "Approvals",
    "Executor",
    "ExecutorRun",
    "Guard",
    "LocalToolRunner",
    "Reasoner",
    "ToolRunner",
    "ToolSelector",
]
