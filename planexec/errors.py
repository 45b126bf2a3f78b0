"""Error kinds, the recovery actions they lead to, and the exception tree.

Every failure of a step or a run has an `ErrorKind` and a message naming the step, the
argument and the cause; it travels in `StepResult.error`, not as an exception. The
exceptions below are for the API boundary: things the caller asked for that could not
be done at all.

Exception tree (every exception planexec exports is drawn here; ``tests/test_errors_tree.py``
holds the drawing to the classes). In parentheses: the attributes a caller decides on
(read them, never the message); where there are none, the class is the whole decision.
``also X``: a built-in (or langchain) base kept, so ``except X`` still catches it::

    PlanexecError
    ├── PlanParseError          no usable plan in a text (diagnostics)
    ├── ConfigError             invalid configuration (unknown keys, bad values, bad spec)
    │   └── MissingExtraError   an optional extra is not installed (module, install);
    │                           also ImportError
    ├── ToolLoadError           a MODULE:ATTR or MCP config could not give tools (source)
    ├── AmbiguousToolError      a tool name is on several servers (name, candidates);
    │                           also KeyError
    ├── InvalidSchemaError      a tool's input schema is no valid JSON Schema (where);
    │                           also ValueError; in `planexec.schemas`
    ├── ToolCallFailure         how a tool call failed, by its class (for retries): raised
    │   │                       by a tool, by planexec's MCP client, or for a tool
    │   ├── ToolArgumentsError  the tool or its server refused the arguments: ARGS_INVALID,
    │   │   │                   never retried (an MCP server's -32602); also ValueError
    │   │   └── MCPArgumentsError   ... said by an MCP server (`planexec.mcp`);
    │   │                           also langchain's ToolException
    │   ├── RetryableToolError  a transient failure: another attempt may succeed;
    │   │   │                   also RuntimeError
    │   │   └── WorkerLostError     the Ray worker running the call died
    │   │                           (`planexec.distributed`)
    │   └── ToolCallError       the tool's ToolMessage has status error (tool, content);
    │                           also RuntimeError
    ├── ToolOutputError         a tool's output cannot be kept (size, limit); also ValueError
    ├── ModelError              a chat model call failed after its retries
    │   │                       (provider, purpose, attempts)
    │   └── ModelTimeoutError   ... by exceeding its timeout
    ├── CircuitOpenError        a circuit breaker is open: the call failed fast (name, retry_in)
    ├── RunError                a run could not be started, resumed or found
    │   ├── RunNotFoundError    (run_id)
    │   ├── RunCancelledError   the run was cancelled: it does not resume (run_id)
    │   ├── ApprovalError       a decision cannot be recorded (no such waiting step, a bad
    │   │   │                   edit) (problems)
    │   │   └── AlreadyDecidedError   another decider was first (action, by, at, state)
    │   ├── LeaseHeldError      another live driver holds the run's lease (run_id, holder)
    │   └── DecisionClaimError  no decision allows this call (refusal)
    ├── StoreError              the run store failed
    ├── CassetteError           regression cassettes
    │   └── CassetteMissError   a request is not in the cassette, or asked for more often
    │                           than recorded (key, recorded); the message has a diff
    ├── ScenarioFailed          a regression scenario failed (result);
    │                           in `planexec.regress.plugin`
    ├── RepairFailure           a text cannot be read as JSON (truncated, elided,
    │                           duplicate_key); in `planexec.parsing.jsonrepair`
    └── FilterMiss              a filter query did not pick exactly one value (the
                                resolver asks the model instead); in `planexec.filters`

Outside the tree, on purpose (they stand for someone else's failure)::

    ScriptExhaustedError        `planexec.testing`: a fake model ran out of replies (a
                                failing test: an AssertionError)
    ScriptedModelError          `planexec.regress.runner`: a scenario's scripted provider
                                error (a RuntimeError, as a provider's own would be)
    DemoLookupError             `planexec.examples.data`: the demo tools' own error (a
                                LookupError, as a user's tool would raise)
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "Action",
    "AlreadyDecidedError",
    "AmbiguousToolError",
    "ApprovalError",
    "CassetteError",
    "CassetteMissError",
    "CircuitOpenError",
    "ClaimRefusal",
    "ConfigError",
    "DecisionClaimError",
    "ErrorKind",
    "LeaseHeldError",
    "LeaseHolder",
    "MissingExtraError",
    "ModelError",
    "ModelTimeoutError",
    "PlanParseError",
    "PlanexecError",
    "RunError",
    "RetryableToolError",
    "RunCancelledError",
    "RunNotFoundError",
    "StoreError",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolCallFailure",
    "ToolLoadError",
    "ToolOutputError",
    "require_extra",
]


class ErrorKind(StrEnum):
    """What kind of failure a step or a run met. Recovery is chosen by kind."""

    PLAN_PARSE = "PLAN_PARSE"
    """No usable plan."""
    PLAN_INCOMPLETE = "PLAN_INCOMPLETE"
    """The planner's reply was cut off inside a step: the plan's end is missing."""
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    """The plan names a tool that does not exist."""
    TOOL_SELECTION_FAILED = "TOOL_SELECTION_FAILED"
    """A step naming an agent or server but no tool got no usable tool by selection
    (no model to select with, no candidate, or an unusable choice after one retry)."""
    ARGS_SYNTAX = "ARGS_SYNTAX"
    """``#Args`` could not be read."""
    MISSING_REFERENCE = "MISSING_REFERENCE"
    """A reference to a step that does not exist."""
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    """A referenced step failed or was blocked."""
    RESOLUTION_FAILED = "RESOLUTION_FAILED"
    """The LLM fallback gave nothing usable after its retry, or none was available."""
    RESOLUTION_UNGROUNDED = "RESOLUTION_UNGROUNDED"
    """The LLM fallback's value occurs nowhere in the referenced outputs, though values
    like it do (``resolver.ungrounded``; docs/resolution.md, "Grounding")."""
    ARGS_INVALID = "ARGS_INVALID"
    """Resolved arguments fail the tool's schema."""
    TOOL_ERROR = "TOOL_ERROR"
    """The tool raised, returned ``is_error``, or returned an error payload."""
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    """The tool did not finish within its timeout."""
    EMPTY_OUTPUT = "EMPTY_OUTPUT"
    """The tool returned nothing."""
    MODEL_ERROR = "MODEL_ERROR"
    """A model call (reasoning, planning) failed after its retries."""
    CIRCUIT_OPEN = "CIRCUIT_OPEN"
    """A circuit breaker was open, so the call failed fast."""
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    """A step, repeat or sequence limit was hit."""
    CANCELLED = "CANCELLED"
    """Cancelled by the caller."""
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
    """A tool call started, its result was never recorded, and the tool is unsafe."""
    REJECTED = "REJECTED"
    """A person rejected a step that needed approval (`planexec.approval`): the tool was
    not called; the planner must route around it, never retry the same call."""
    EVALUATION_FAILED = "EVALUATION_FAILED"
    """The evaluator judged the run unsuccessful."""
    OUTPUT_MISSING_STEP = "OUTPUT_MISSING_STEP"
    """A typed output was asked for, and the plan has no final mapping step."""
    OUTPUT_ARGS_MISSING = "OUTPUT_ARGS_MISSING"
    """The final mapping step leaves fields of the output type unfilled."""
    OUTPUT_INVALID = "OUTPUT_INVALID"
    """The final mapping's values do not validate into the output type."""
    OUTPUT_UNEXPECTED = "OUTPUT_UNEXPECTED"
    """The typed output differs from the expected field values."""


class Action(StrEnum):
    """What the agent does about a failure."""

    RERESOLVE = "RERESOLVE"
    """Resolve the step's arguments again, with the failure as feedback."""
    RETRY_STEP = "RETRY_STEP"
    """Run the step again as it is (safe tools only)."""
    REPLAN = "REPLAN"
    """Ask the planner for a new plan; succeeded steps are kept."""
    STOP = "STOP"
    """End the run."""


class PlanexecError(Exception):
    """Base class of every exception planexec raises on purpose."""


class PlanParseError(PlanexecError):
    """No usable plan could be read from a text.

    The message says what was found instead (nothing, a refusal, prose, ...).
    """

    def __init__(self, message: str, diagnostics: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics
        """The diagnostics gathered before giving up (`planexec.plan.Diagnostic`)."""


class ConfigError(PlanexecError):
    """Invalid configuration: unknown keys, bad values, an unusable model spec."""


class MissingExtraError(ConfigError, ImportError):
    """An optional extra is needed and not installed; the message has the command.

    ``module``: the module that cannot be imported (also ImportError's ``name``);
    ``install``: what to install (``planexec[otel]``, a provider's package); each None
    when not known where the error was raised.
    """

    def __init__(
        self, message: str, *, module: str | None = None, install: str | None = None
    ) -> None:
        super().__init__(message, name=module)
        self.module = module
        self.install = install


class ToolLoadError(PlanexecError):
    """Tools could not be loaded from a ``MODULE:ATTR`` or an MCP configuration.

    ``source``: what was being loaded (the ``MODULE:ATTR`` spec, the MCP server's
    name), when known.
    """

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class AmbiguousToolError(PlanexecError, KeyError):
    """A tool name matches tools on several servers; qualify it as ``server.tool``."""

    def __init__(self, name: str, candidates: Sequence[str] = ()) -> None:
        super().__init__(name)
        self.name = name
        """The name looked up."""
        self.candidates = list(candidates)
        """The qualified names it could mean."""

    def __str__(self) -> str:
        return (
            f"tool name {self.name!r} is ambiguous: it exists on several servers "
            f"({', '.join(self.candidates)}); write it as server.tool"
        )


class ToolCallFailure(PlanexecError):
    """Raised by a tool (or planexec's MCP client) to say, by its class, how a call failed.

    The executor reads the class (`planexec.resilience.classify_tool_failure`), never
    the message: see the subclasses.
    """


class ToolArgumentsError(ToolCallFailure, ValueError):
    """The tool, or its server, refused the arguments (an MCP server's ``-32602``).

    The step fails with ``ARGS_INVALID`` and the call is not retried: the same
    arguments would be refused again.
    """


class RetryableToolError(ToolCallFailure, RuntimeError):
    """A transient failure of the tool's own (busy, rate limited, try again later).

    Retried, like timeouts and connection errors, when the tool is safe to repeat.
    """


class ToolCallError(ToolCallFailure, RuntimeError):
    """A tool reported an error in its `ToolMessage` (status ``error``): ``TOOL_ERROR``.

    Retried only as the tool's ``retry_on`` says (by default: not).
    """

    def __init__(self, message: str, *, tool: str | None = None, content: Any = None) -> None:
        super().__init__(message)
        self.tool = tool
        """The tool's name, when known."""
        self.content = content
        """The error message's content, as the tool gave it."""


class ToolOutputError(PlanexecError, ValueError):
    """A tool's output cannot be kept: too large, a cycle, or nested too deeply.

    ``limit``: the largest output kept, in characters; ``size``: the output's length
    (for a structured output, of its compact JSON, counted up to just over the limit).
    Both None when the output is refused for its shape (a cycle, too deep).
    """

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class ModelError(PlanexecError):
    """A chat model call failed after its retries.

    ``provider``: the model's provider (its circuit breaker's name), ``purpose``: what
    the call was for (`planexec.events.ModelCall.purpose`), ``attempts``: the attempts
    made; each None when not known where the error was raised.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        purpose: str | None = None,
        attempts: int | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.purpose = purpose
        self.attempts = attempts


class ModelTimeoutError(ModelError):
    """A chat model call exceeded its timeout."""


class CircuitOpenError(PlanexecError):
    """A circuit breaker is open; the call was not attempted."""

    def __init__(self, name: str, retry_in: float) -> None:
        super().__init__(f"circuit breaker {name!r} is open; next try in {retry_in:.2f}s")
        self.name = name
        self.retry_in = retry_in


class RunError(PlanexecError):
    """A run could not be started, resumed or completed as asked."""


class RunNotFoundError(RunError):
    """No run with that id is in the store (``run_id``: the id asked for, when known)."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunCancelledError(RunError):
    """The run was cancelled (`planexec.cancelling.cancel_run`): it does not resume."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        """The run."""


class ApprovalError(RunError):
    """An approval decision cannot be recorded.

    The step is not waiting, or the edited arguments do not fit the tool's schema
    (``problems`` lists the validation errors).
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


class AlreadyDecidedError(ApprovalError):
    """The request was decided already (compare-and-set on decisions): who won, and when.

    Raised to the second of two deciders; nothing of the second decision is recorded.
    """

    def __init__(
        self,
        message: str,
        *,
        action: str | None,
        by: str | None,
        at: float | None,
        state: str,
    ) -> None:
        super().__init__(message)
        self.action = action
        """What the first decider decided (``approve``, ``edit``, ``reject``)."""
        self.by = by
        """Who decided first (None when they gave no name)."""
        self.at = at
        """When (seconds since the epoch)."""
        self.state = state
        """The request's state now (``decided`` or ``claimed``)."""


class LeaseHolder(Protocol):
    """Who holds a run's lease, as `LeaseHeldError` tells it.

    `planexec.store.Lease` is one; the store's type is not imported here (errors sit
    below the store).
    """

    @property
    def run_id(self) -> str:
        """The run."""
        ...

    @property
    def owner(self) -> str:
        """The driver holding it."""
        ...

    @property
    def pid(self) -> int | None:
        """Its process, when known."""
        ...

    @property
    def host(self) -> str | None:
        """Its host, when known."""
        ...


class LeaseHeldError(RunError):
    """Another driver holds the run's lease (one driver per run): the holder is named.

    Raised by `planexec.store.RunStore.acquire_lease` / ``renew_lease`` and every run
    driver that takes the lease (execute, resume, continue).
    """

    def __init__(self, message: str, *, run_id: str, holder: LeaseHolder | None) -> None:
        super().__init__(message)
        self.run_id = run_id
        """The run."""
        self.holder = holder
        """The holder's `planexec.store.Lease` (None: the lease was lost, nobody holds it)."""


class ClaimRefusal(StrEnum):
    """Why a recorded decision does not allow a call (`DecisionClaimError.refusal`)."""

    NO_REQUEST = "no_request"
    """No approval request is on record for the step."""
    UNDECIDED = "undecided"
    """The request is open: nobody decided yet."""
    REJECTED = "rejected"
    """The decision is a rejection."""
    WITHDRAWN = "withdrawn"
    """The request was withdrawn (its step was discarded or asked again)."""
    TOOL_MISMATCH = "tool_mismatch"
    """The decision was made for another tool."""
    ARGS_MISMATCH = "args_mismatch"
    """The decision was made for other arguments (their digest differs)."""
    ALREADY_CLAIMED = "already_claimed"
    """The decision was claimed by a call already: it allows one call only."""
    LEASE_LOST = "lease_lost"
    """Another live driver holds the run's lease."""


class DecisionClaimError(RunError):
    """A call's decision could not be claimed: the call must not happen (``refusal``)."""

    def __init__(self, message: str, *, refusal: ClaimRefusal) -> None:
        super().__init__(message)
        self.refusal = refusal
        """Why (read this, never the message)."""


class StoreError(PlanexecError):
    """The run store failed."""


class CassetteError(PlanexecError):
    """A regression cassette could not be read, written or used."""


class CassetteMissError(CassetteError):
    """A model request is not in the cassette, or is asked for more often than recorded.

    ``key``: the request's key (`planexec.regress.cassette.request_key`); ``recorded``:
    how many times it was recorded (0: never, the message holds a diff against the
    closest recorded request).
    """

    def __init__(self, message: str, *, key: str | None = None, recorded: int = 0) -> None:
        super().__init__(message)
        self.key = key
        self.recorded = recorded


def require_extra(module: str, extra: str) -> None:
    """Import-check an optional dependency, failing with the install command.

    Raises:
        MissingExtraError: the module cannot be imported.
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(
            f"this feature needs the {module!r} package: pip install \"planexec[{extra}]\"",
            module=module,
            install=f"planexec[{extra}]",
        )
