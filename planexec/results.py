"""What running a plan produces: `StepResult`, `Usage`, `PlanAttempt` and `Run`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from planexec.errors import ErrorKind
from planexec.plan import Plan

__all__ = [
    "PlanAttempt",
    "ResolutionMethod",
    "Run",
    "RunStatus",
    "StepError",
    "StepResult",
    "StepStatus",
    "Usage",
    "jsonable",
]


class StepStatus(StrEnum):
    """How a step ended."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    BLOCKED = "BLOCKED"
    """Not run because a step it depends on did not succeed."""
    SKIPPED = "SKIPPED"
    """Not run on purpose (e.g. a reasoning step without a model); the note says why."""
    CANCELLED = "CANCELLED"


class ResolutionMethod(StrEnum):
    """How one argument got its final value."""

    LITERAL = "literal"
    REFERENCE = "reference"
    PATH = "path"
    INTERPOLATED = "interpolated"
    COERCED = "coerced"
    LLM = "llm"


def jsonable(value: Any) -> Any:
    """Best-effort conversion of a value to JSON data (pydantic models, tuples, sets)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


@dataclass(frozen=True)
class StepError:
    """Why a step did not succeed, as data: every decision reads these fields.

    Recovery, early re-plans, output blame and re-resolution read ``kind``, ``args``,
    ``literal_args`` and ``upstream``; ``message`` and ``cause`` are for people and are
    never searched for names or kinds.
    """

    kind: ErrorKind
    """What kind of failure it is."""
    message: str
    """For people: names the step, the argument and the cause."""
    args: tuple[str, ...] = ()
    """The arguments concerned (plan or schema names), in the order they were found;
    empty when the failure is not about particular arguments (a tool that raised)."""
    literal_args: tuple[str, ...] = ()
    """Those of ``args`` written in the plan as literal values: re-resolution never
    changes them (a literal is never sent to the LLM), only a new plan can."""
    cause: str | None = None
    """For people: the underlying error in its own words (an exception, a validation
    error, the upstream step's message), when there is one."""
    upstream: int | None = None
    """For ``UPSTREAM_FAILED`` (and references to steps that did not succeed): the
    step whose failure this one follows."""

    def __str__(self) -> str:
        return self.message

    @property
    def resolvable_args(self) -> tuple[str, ...]:
        """The arguments concerned that re-resolution may change (not plan literals)."""
        return tuple(a for a in self.args if a not in self.literal_args)

    def to_dict(self) -> dict[str, Any]:
        """Return the error as JSON-ready data."""
        return {
            "kind": str(self.kind),
            "message": self.message,
            "args": list(self.args),
            "literal_args": list(self.literal_args),
            "cause": self.cause,
            "upstream": self.upstream,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepError:
        """Decode `to_dict`'s data."""
        upstream = data.get("upstream")
        return cls(
            kind=ErrorKind(data["kind"]),
            message=str(data.get("message") or ""),
            args=tuple(str(a) for a in data.get("args") or ()),
            literal_args=tuple(str(a) for a in data.get("literal_args") or ()),
            cause=data.get("cause"),
            upstream=int(upstream) if upstream is not None else None,
        )


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step. Every problem is in ``failure`` (a `StepError`).

    ``error`` and ``error_kind`` are the failure's message and kind, kept as fields for
    reading and for building results (``StepResult(..., error=m, error_kind=k)`` gets
    ``failure=StepError(k, m)``). Given both, they must agree with ``failure``.
    """

    step_id: int
    """The step's number."""
    tool: str | None
    """The tool called (None for a reasoning step)."""
    status: StepStatus
    """How the step ended."""
    args: dict[str, Any] | None = None
    """The resolved arguments the tool was called with (None if it was not called)."""
    output: Any = None
    """The structured output (dict, list, model, scalar) references resolve against."""
    raw_output: Any = None
    """The output as the tool returned it (e.g. the JSON text before parsing)."""
    error: str | None = None
    """A message naming the step, the argument and the cause; None on success."""
    error_kind: ErrorKind | None = None
    """The kind of failure; None on success."""
    resolution: dict[str, ResolutionMethod] = field(default_factory=dict)
    """How each argument was resolved."""
    llm_calls: int = 0
    """Model calls made for this step (resolution fallback and reasoning)."""
    attempts: int = 0
    """Tool call attempts (retries included)."""
    started_at: float | None = None
    """Wall-clock start (seconds since the epoch)."""
    duration: float | None = None
    """Seconds from start to finish."""
    server: str | None = None
    """The server or agent the step named, if any."""
    note: str | None = None
    """A remark that is not an error (why a step was skipped, a warning kept)."""
    failure: StepError | None = None
    """Why the step did not succeed, as data; None on success (and for a skipped step)."""

    def __post_init__(self) -> None:
        failure = self.failure
        if failure is None:
            if self.error_kind is not None:
                object.__setattr__(
                    self, "failure", StepError(self.error_kind, self.error or "")
                )
            return
        if self.error is not None and self.error != failure.message:
            raise ValueError(
                f"step {self.step_id}: error {self.error!r} disagrees with the failure's "
                f"message {failure.message!r}"
            )
        if self.error_kind is not None and self.error_kind is not failure.kind:
            raise ValueError(
                f"step {self.step_id}: error_kind {self.error_kind} disagrees with the "
                f"failure's kind {failure.kind}"
            )
        object.__setattr__(self, "error", failure.message)
        object.__setattr__(self, "error_kind", failure.kind)

    @property
    def ok(self) -> bool:
        """Whether the step succeeded."""
        return self.status is StepStatus.SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        """Return the result as JSON-ready data."""
        return {
            "step_id": self.step_id,
            "tool": self.tool,
            "server": self.server,
            "status": str(self.status),
            "args": jsonable(self.args),
            "output": jsonable(self.output),
            "raw_output": jsonable(self.raw_output),
            "error": self.error,
            "error_kind": str(self.error_kind) if self.error_kind else None,
            "resolution": {k: str(v) for k, v in self.resolution.items()},
            "llm_calls": self.llm_calls,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "duration": self.duration,
            "note": self.note,
            "failure": self.failure.to_dict() if self.failure else None,
        }


@dataclass
class Usage:
    """What a run spent. Mutable: it is filled in as the run goes."""

    llm_calls: dict[str, int] = field(default_factory=dict)
    """Model calls by purpose: ``plan``, ``resolve``, ``reason``, ``evaluate``, ``answer``."""
    tokens: dict[str, int] = field(default_factory=dict)
    """Tokens by kind (``input``, ``output``, ``total``) where the model reports them."""
    tokens_by_purpose: dict[str, dict[str, int]] = field(default_factory=dict)
    """Tokens by purpose, then by kind (``{"plan": {"input": 20, ...}}``); their sums
    are ``tokens``. Only purposes whose calls reported tokens appear."""
    tool_calls: int = 0
    """Tool call attempts, retries included."""
    wall_time: float = 0.0
    """Seconds from the start of the run to its end."""

    def add_llm_call(self, purpose: str, tokens: Mapping[str, int] | None = None) -> None:
        """Count one model call for ``purpose`` and its tokens (totals and by purpose)."""
        self.llm_calls[purpose] = self.llm_calls.get(purpose, 0) + 1
        for k, v in (tokens or {}).items():
            self.tokens[k] = self.tokens.get(k, 0) + int(v)
            by_kind = self.tokens_by_purpose.setdefault(purpose, {})
            by_kind[k] = by_kind.get(k, 0) + int(v)

    @property
    def total_llm_calls(self) -> int:
        """All model calls, whatever their purpose."""
        return sum(self.llm_calls.values())

    def to_dict(self) -> dict[str, Any]:
        """Return the usage as JSON-ready data."""
        return {
            "llm_calls": dict(self.llm_calls),
            "tokens": dict(self.tokens),
            "tokens_by_purpose": {p: dict(t) for p, t in self.tokens_by_purpose.items()},
            "tool_calls": self.tool_calls,
            "wall_time": self.wall_time,
        }


class RunStatus(StrEnum):
    """How a run ended (or that it has not)."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"
    """Recorded as running, but its process is gone: it can be resumed."""


@dataclass
class PlanAttempt:
    """One plan of a run (the first, or a re-plan) and what running it gave."""

    version: int
    """1 for the first plan, 2 for the first re-plan, ..."""
    plan: Plan | None
    """The parsed plan, or None when the planner's reply held none."""
    text: str = ""
    """The planner's reply."""
    results: list[StepResult] = field(default_factory=list)
    """The step results, in completion order."""
    reason: str | None = None
    """Why this plan was made (None for the first; the failure or lesson otherwise)."""
    error: str | None = None
    """Why there is no plan, or the problems it still had after the planner's re-prompts."""
    drafts: list[dict[str, Any]] = field(default_factory=list)
    """The planner's rejected replies in this attempt, in order, each
    ``{"text": reply, "problems": [message, ...]}`` (empty when the first reply was used)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the attempt as JSON-ready data."""
        return {
            "version": self.version,
            "plan": self.plan.to_dict() if self.plan else None,
            "text": self.text,
            "results": [r.to_dict() for r in self.results],
            "reason": self.reason,
            "error": self.error,
            "drafts": [dict(d) for d in self.drafts],
        }


@dataclass
class Run:
    """A whole agent run: the question, every plan attempt, the answer and the usage."""

    run_id: str
    """A unique id (also the key in the run store)."""
    question: str
    """The question asked."""
    attempts: list[PlanAttempt] = field(default_factory=list)
    """Every plan tried, in order."""
    status: RunStatus = RunStatus.RUNNING
    """How the run ended."""
    answer: str | None = None
    """The prose answer (with a model), or None."""
    output: Any = None
    """The typed output (an instance of ``output_type``), when one was asked for."""
    error: str | None = None
    """Why the run failed, if it did."""
    error_kind: ErrorKind | None = None
    """The kind of the failure that ended the run, if any."""
    usage: Usage = field(default_factory=Usage)
    """What the run spent."""
    lessons: list[str] = field(default_factory=list)
    """Lessons from the evaluator and from failures, given to re-plans."""

    @property
    def results(self) -> list[StepResult]:
        """The latest result of every step id, across attempts."""
        latest: dict[int, StepResult] = {}
        for attempt in self.attempts:
            for r in attempt.results:
                latest[r.step_id] = r
        return list(latest.values())

    @property
    def plan(self) -> Plan | None:
        """The last plan tried."""
        for attempt in reversed(self.attempts):
            if attempt.plan is not None:
                return attempt.plan
        return None

    def to_dict(self) -> dict[str, Any]:
        """Return the run as JSON-ready data."""
        return {
            "run_id": self.run_id,
            "question": self.question,
            "status": str(self.status),
            "answer": self.answer,
            "output": jsonable(self.output),
            "error": self.error,
            "error_kind": str(self.error_kind) if self.error_kind else None,
            "attempts": [a.to_dict() for a in self.attempts],
            "usage": self.usage.to_dict(),
            "lessons": list(self.lessons),
        }
