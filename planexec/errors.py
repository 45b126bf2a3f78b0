"""Error kinds and the exception tree.

Every failure of a step or a run has an `ErrorKind` and a message naming the step, the
argument and the cause; it travels in `StepResult.error`, not as an exception. The
exceptions below are for the API boundary: things the caller asked for that could not
be done at all.

Exception tree::

    PlanexecError
    ├── PlanParseError          no usable plan in a text
    ├── ConfigError             invalid configuration (unknown keys, bad values, bad spec)
    │   └── MissingExtraError   an optional extra is not installed (also an ImportError)
    ├── ToolLoadError           a MODULE:ATTR or MCP config could not give tools
    ├── ToolCallFailure         raised BY a tool to say how its call failed (typed, for retries)
    │   ├── ToolArgumentsError  the tool or its server refused the arguments: ARGS_INVALID,
    │   │                       never retried (an MCP server's -32602 invalid params)
    │   └── RetryableToolError  a transient failure: another attempt may succeed
    ├── ModelError              a chat model call failed after its retries
    │   └── ModelTimeoutError   ... by exceeding its timeout
    ├── CircuitOpenError        a circuit breaker is open: the call failed fast
    ├── RunError                a run could not be started, resumed or found
    │   ├── RunNotFoundError
    │   ├── RunCancelledError   the run was cancelled: it does not resume
    │   ├── ApprovalError       a decision cannot be recorded (no such waiting step, a bad edit)
    │   │   └── AlreadyDecidedError   another decider was first (who, when, what)
    │   ├── LeaseHeldError      another live driver holds the run's lease (which one)
    │   └── DecisionClaimError  no decision allows this call (``refusal`` says why)
    ├── StoreError              the run store failed
    └── CassetteError           regression cassettes
        └── CassetteMissError   a request is not in the cassette (with a diff)
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planexec.store.base import Lease

__all__ = [
    "AlreadyDecidedError",
    "ApprovalError",
    "CassetteError",
    "CassetteMissError",
    "CircuitOpenError",
    "ClaimRefusal",
    "ConfigError",
    "DecisionClaimError",
    "ErrorKind",
    "LeaseHeldError",
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
    "ToolCallFailure",
    "ToolLoadError",
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
    """An optional extra is needed and not installed; the message has the command."""


class ToolLoadError(PlanexecError):
    """Tools could not be loaded from a ``MODULE:ATTR`` or an MCP configuration."""


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


class ModelError(PlanexecError):
    """A chat model call failed after its retries."""


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
    """No run with that id is in the store."""


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


class LeaseHeldError(RunError):
    """Another driver holds the run's lease (one driver per run): the holder is named.

    Raised by `planexec.store.RunStore.acquire_lease` / ``renew_lease`` and every run
    driver that takes the lease (execute, resume, continue).
    """

    def __init__(self, message: str, *, run_id: str, holder: Lease | None) -> None:
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
    """A model request is not in the cassette.

    The message holds a diff against the closest recorded request.
    """


def require_extra(module: str, extra: str) -> None:
    """Import-check an optional dependency, failing with the install command.

    Raises:
        MissingExtraError: the module cannot be imported.
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(
            f"this feature needs the {module!r} package: pip install \"planexec[{extra}]\""
        )
