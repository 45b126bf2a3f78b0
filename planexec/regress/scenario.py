"""Scenario files: what to run and what to expect, validated by pydantic.

A scenario is a YAML file (``*.scenario.yaml``) holding a question, the tools, the model
(a cassette or scripted replies), optional config overrides and a plan to execute
directly, and the expectations the run must meet. Every model here forbids unknown keys,
so a misspelt expectation is an error, never an expectation silently not checked.

Example::

    name: chiller sensors
    tags: [demo, hashstep]
    question: Which sensors does Chiller 6 at MAIN have?
    tools: {module: "planexec.examples.tools:demo_tools"}
    model:
      replies:
        - |
          #Task1: List the sensors of Chiller 6.
          #Tool1: sensors
          #Args1: {"site_name": "MAIN", "asset_id": "CWC04006"}
          #Dependency1: None
          #ExpectedOutput1: The sensors.
        - Chiller 6 has 8 sensors.
    expect:
      status: SUCCEEDED
      plan: {steps: 1, tools: [sensors]}
      tool_calls:
        - tool: sensors
          args: {asset_id: CWC04006, site_name: {regex: "^MAIN$"}}
      answer: {contains: "8 sensors"}
      max_llm_calls: 2

`scenario_json_schema` gives the JSON Schema of the file (published as
``docs/scenario.schema.json``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    model_validator,
)

from planexec.config import AgentConfig
from planexec.errors import ConfigError, ErrorKind
from planexec.recovery import Action
from planexec.results import ResolutionMethod, RunStatus, StepStatus

__all__ = [
    "SCENARIO_SUFFIX",
    "TYPE_NAMES",
    "LLMPurpose",
    "AnswerExpectation",
    "EvaluatorSpec",
    "Expectations",
    "FakeTool",
    "Matcher",
    "MCPTools",
    "ModelSpec",
    "ModuleTools",
    "PlanExpectation",
    "RaisedReply",
    "RecoveryExpectation",
    "Reply",
    "Scenario",
    "ScriptedApproval",
    "ScriptedReplies",
    "ScriptedVerdicts",
    "StepExpectation",
    "ToolCallExpectation",
    "ToolSource",
    "Value",
    "VerdictSpec",
    "as_matcher",
    "load_scenario",
    "scenario_name",
    "scenario_json_schema",
]

SCENARIO_SUFFIX = ".scenario.yaml"
"""The file name ending of scenario files (collected by the pytest plugin)."""

TYPE_NAMES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (float, int),
    "number": (float, int),
    "bool": (bool,),
    "list": (list, tuple),
    "dict": (dict,),
    "null": (type(None),),
    "any": (object,),
}
"""Type names usable in fake tool ``args`` and in ``type`` matchers."""

LLMPurpose = Literal["plan", "resolve", "reason", "select", "evaluate", "answer", "total"]
"""A model call purpose in ``expect.llm_calls`` (``total``: all purposes together)."""

TypeName = Literal["str", "int", "float", "number", "bool", "list", "dict", "null", "any"]
"""A type name (see `TYPE_NAMES`)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# --------------------------------------------------------------------------- matchers


class Matcher(_Strict):
    """A check on one value. Every key given must hold (they are combined with *and*).

    A plain value (string, number, boolean, null or list) where a matcher is expected
    means ``{equals: value}``; to compare against a mapping, write ``{equals: {...}}``.
    """

    equals: Any = None
    """The value must equal this (JSON equality; ``1`` equals ``1.0``)."""
    subset: Any = None
    """A mapping (or list) the value must contain: every key given, recursively."""
    json_subset: Any = None
    """The value is a string holding JSON (maybe in a code fence or in prose) that
    contains this subset."""
    contains: str | list[str] | None = None
    """The value (a string, or a list's items) contains this text, or each of these."""
    not_contains: str | list[str] | None = None
    """The value contains none of these texts (case-sensitive)."""
    regex: str | None = None
    """A regular expression that must match somewhere in the value (``re.search``)."""
    type: TypeName | None = None
    """The value's JSON type."""
    absent: bool | None = None
    """``true``: the value must be missing (an argument not passed); ``false``: present."""

    @model_validator(mode="after")
    def _not_empty(self) -> Matcher:
        if not self.given():
            raise ValueError(
                "a matcher needs at least one of: equals, subset, json_subset, contains, "
                "not_contains, regex, type, absent"
            )
        return self

    def given(self) -> dict[str, Any]:
        """The checks actually given, by key (an explicit ``equals: null`` included)."""
        out = {k: v for k, v in self.model_dump(exclude_none=True).items()}
        if "equals" in self.model_fields_set:
            out["equals"] = self.equals
        return out


Value = Matcher | str | int | float | bool | list[Any] | None
"""A matcher, or a plain value meaning ``{equals: value}``."""


def as_matcher(value: Value) -> Matcher:
    """Turn a plain value into ``Matcher(equals=value)``; a matcher stays as it is."""
    if isinstance(value, Matcher):
        return value
    return Matcher(equals=value)


# --------------------------------------------------------------------------- tools


class FakeTool(_Strict):
    """An inline fake tool (built with `planexec.testing.fake_tool`)."""

    name: str = Field(min_length=1)
    """The tool's name."""
    description: str | None = None
    """Its description, shown to the planner."""
    args: dict[str, str] = Field(default_factory=dict)
    """Argument names and type names (``str``, ``int``, ``float``, ``bool``, ``list``,
    ``dict``, ``any``); a trailing ``?`` (``str?``) makes the argument optional."""
    output: Any = None
    """What the tool returns (any YAML value; a dict stays a dict)."""
    error: str | None = None
    """Raise this message (every call, or the first ``fail_times`` calls)."""
    fail_times: int = Field(default=0, ge=0)
    """With ``error``: fail only this many times, then return ``output``."""
    latency: float = Field(default=0.0, ge=0, le=10)
    """Seconds to wait (asynchronously) before answering."""
    hints: dict[str, bool] = Field(default_factory=dict)
    """Safety hints: ``read_only``, ``idempotent``, ``destructive``."""
    server: str | None = None
    """The server the tool belongs to (``#ServerN`` / ``server.tool`` in plans)."""

    @model_validator(mode="after")
    def _check(self) -> FakeTool:
        for arg, tname in self.args.items():
            base = tname.removesuffix("?")
            if base not in TYPE_NAMES:
                raise ValueError(
                    f"tool {self.name!r}: argument {arg!r} has unknown type {tname!r}; "
                    f"use one of {', '.join(TYPE_NAMES)} (add '?' for optional)"
                )
        unknown = set(self.hints) - {"read_only", "idempotent", "destructive"}
        if unknown:
            raise ValueError(f"tool {self.name!r}: unknown hints {sorted(unknown)}")
        return self


class ModuleTools(_Strict):
    """Tools from ``MODULE:ATTR``: a list of tools, or a zero-argument function giving one."""

    module: str = Field(pattern=r"^[\w.]+:[\w.]+$")
    """E.g. ``planexec.examples.tools:demo_tools`` (a fresh work-order book per run)."""
    fake: list[FakeTool] = Field(default_factory=list)
    """Extra inline fake tools, added after the module's."""


class MCPTools(_Strict):
    """Tools from MCP servers, started for the run and closed after it."""

    mcp_config: str
    """The MCP configuration (``{"mcpServers": ...}``), relative to the scenario file."""
    servers: list[str] | None = None
    """Only these servers (all by default)."""
    fake: list[FakeTool] = Field(default_factory=list)
    """Extra inline fake tools, added after the servers'."""


ToolSource = ModuleTools | MCPTools | list[FakeTool]
"""``{module: ...}``, ``{mcp_config: ...}``, or a list of inline fake tools."""


# --------------------------------------------------------------------------- model


class RaisedReply(_Strict):
    """A scripted reply that is an error: the model call raises instead of answering.

    Written ``- raise: "provider overloaded"`` in a list of replies.
    """

    raise_: str = Field(alias="raise", min_length=1)
    """The error message the model call raises."""
    transient: bool = False
    """``true``: a connection error, which the agent's model client retries (within
    ``config.model.retry``); ``false``: a provider error it does not retry."""


Reply = str | RaisedReply
"""A scripted reply: its text, or ``{raise: MESSAGE}`` for a model call that fails."""


class ScriptedReplies(_Strict):
    """Scripted replies, served in order by `planexec.testing.ScriptedChatModel`."""

    replies: list[str] = Field(default_factory=list)
    """Replies in the order the run asks for them (plan, fallbacks, reasoning, answer)."""


class ModelSpec(_Strict):
    """The model: a cassette, or scripted replies.

    With ``cassette``, ``planexec regress --record`` records the cassette against
    ``record_with``; otherwise the cassette is replayed and a request not in it fails
    the scenario with a diff against the closest recorded request.
    """

    cassette: str | None = None
    """A cassette file (``format: planexec-cassette``), relative to the scenario file."""
    replies: list[Reply] | None = None
    """Scripted replies, in order (instead of a cassette); ``{raise: MESSAGE}`` makes
    that call fail."""
    record_with: str | ScriptedReplies | None = None
    """What ``--record`` records against: a model spec (``openai:gpt-4o-mini``, or
    ``replay:PATH`` for a replies file relative to the scenario) or scripted replies."""
    strict: bool = True
    """Fail when replies or cassette entries are left unused, or the script ran out."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.cassette is None) == (self.replies is None):
            raise ValueError("model: give exactly one of 'cassette' or 'replies'")
        if self.record_with is not None and self.cassette is None:
            raise ValueError("model: 'record_with' needs a 'cassette' to record into")
        return self


# --------------------------------------------------------------------------- evaluator


class VerdictSpec(_Strict):
    """One scripted verdict (`planexec.evaluation.Verdict`)."""

    status: Literal["SUCCESS", "EXECUTION_ERROR", "INPUT_DATA_ERROR", "JOB_TOO_COMPLICATED"]
    """The verdict's status."""
    evaluation: str = ""
    """Why, in words."""
    lesson: str = ""
    """What the next plan should do differently."""
    judge_error: str | None = None
    """Set: the judge itself failed (the run stops with ``EVALUATION_FAILED``)."""


class ScriptedVerdicts(_Strict):
    """An evaluator answering from a script: one verdict per evaluation, in order.

    A plain status (``- SUCCESS``) stands for ``{status: SUCCESS}``. With ``model.strict``
    (the default), verdicts left unused fail the scenario; running out is an error.
    """

    verdicts: list[
        VerdictSpec
        | Literal["SUCCESS", "EXECUTION_ERROR", "INPUT_DATA_ERROR", "JOB_TOO_COMPLICATED"]
    ] = Field(min_length=1)
    """The verdicts, in the order the run asks for them (one per finished plan)."""


EvaluatorSpec = Annotated[str, StringConstraints(pattern=r"^[\w.]+:[\w.]+$")] | ScriptedVerdicts
"""``MODULE:ATTR`` (an `Evaluator`, a zero-argument class or factory giving one, or a
function of the `EvalCase`), or ``{verdicts: [...]}``."""


# --------------------------------------------------------------------------- approvals


class ScriptedApproval(_Strict):
    """A person's scripted decision about a step that needs approval (docs/approval.md).

    Served in order, one per approval request; a run that asks for more than the script
    holds gets ``defer`` (the step waits: the run pauses ``WAITING_APPROVAL``).
    """

    action: Literal["approve", "edit", "reject", "defer"]
    """What the person decides."""
    step: int | None = None
    """The step this decision is for; a request for another step fails the scenario."""
    args: dict[str, Any] | None = None
    """For ``edit``: the arguments that replace the resolved ones (checked against the
    tool's schema; an invalid edit is refused and the next decision asked)."""
    reason: str | None = None
    """Why (required for ``reject``: the planner is told)."""
    by: str = "scenario"
    """Who decides."""

    @model_validator(mode="after")
    def _complete(self) -> ScriptedApproval:
        if self.action == "edit" and not self.args:
            raise ValueError("an 'edit' decision needs 'args'")
        if self.action == "reject" and not (self.reason or "").strip():
            raise ValueError("a 'reject' decision needs a 'reason'")
        return self


# --------------------------------------------------------------------------- expectations


class PlanExpectation(_Strict):
    """The shape of a plan (the last one tried, or ``version``)."""

    version: int | None = Field(default=None, ge=1)
    """Which plan attempt (1 = the first); the last one by default."""
    usable: bool | None = None
    """``false``: the planner's reply held no usable plan (``PLAN_PARSE``)."""
    steps: int | None = Field(default=None, ge=0)
    """How many steps it has."""
    tools: list[str | None] | None = None
    """Its tools in plan order (``none``/null for a reasoning step)."""
    dialect: Literal["hashstep", "rewoo", "llmcompiler"] | None = None
    """The dialect it was written in."""
    diagnostics: list[str] = Field(default_factory=list)
    """Diagnostic codes that must be present (e.g. ``ARGS_REPAIRED``)."""
    no_errors: bool | None = None
    """``true``: the plan has no error diagnostics."""


class ToolCallExpectation(_Strict):
    """Calls of one tool, with argument matchers."""

    tool: str
    """The tool's name."""
    args: dict[str, Value] = Field(default_factory=dict)
    """Argument matchers; arguments not named are not checked."""
    times: int | None = Field(default=None, ge=0)
    """Exactly this many matching calls (``0``: never called so); at least one otherwise."""


class StepExpectation(_Strict):
    """One step's result (its latest, across plan attempts, unless ``version``)."""

    id: int
    """The step's number."""
    version: int | None = Field(default=None, ge=1)
    """Look at the result in this plan attempt rather than the latest."""
    tool: str | None = None
    """The tool the step called."""
    status: StepStatus | None = None
    """How it ended."""
    error_kind: ErrorKind | None = None
    """Its error kind."""
    error: Value = None
    """A matcher on its error message."""
    note: Value = None
    """A matcher on its note."""
    args: dict[str, Value] = Field(default_factory=dict)
    """Matchers on the arguments it was called with."""
    resolution: dict[str, ResolutionMethod] = Field(default_factory=dict)
    """How each named argument was resolved."""
    output: Value = None
    """A matcher on its structured output."""
    attempts: int | None = Field(default=None, ge=0)
    """Tool call attempts (retries included)."""
    llm_calls: int | None = Field(default=None, ge=0)
    """Model calls made for the step."""


class RecoveryExpectation(_Strict):
    """One recovery decision (from the run's ``RecoveryDecided`` events)."""

    action: Action
    """The action chosen."""
    kind: ErrorKind | None = None
    """The error kind decided on."""
    step: int | None = None
    """The step concerned."""


AnswerExpectation = Matcher
"""The answer is checked by a `Matcher` (``equals``, ``contains``, ``regex``, ``json_subset``)."""


class Expectations(_Strict):
    """Everything a run must show. Only what is given is checked."""

    status: RunStatus | None = None
    """How the run ended (``SUCCEEDED``, ``FAILED``, ...)."""
    error_kind: ErrorKind | None = None
    """The kind of the failure that ended the run."""
    error: Value = None
    """A matcher on the run's error message."""
    plan: PlanExpectation | None = None
    """The plan's shape."""
    plans: list[PlanExpectation] = Field(default_factory=list)
    """Shapes of several plan attempts (give each a ``version``)."""
    plan_attempts: int | None = Field(default=None, ge=0)
    """How many plans were tried (1 + re-plans)."""
    tool_calls: list[ToolCallExpectation] = Field(default_factory=list)
    """Tool calls with argument matchers."""
    tool_sequence: list[str] | None = None
    """The exact sequence of tool calls, in call order (retries included)."""
    steps: list[StepExpectation] = Field(default_factory=list)
    """Step results."""
    recovery: list[RecoveryExpectation] | None = None
    """The exact sequence of recovery decisions (``[]``: none)."""
    fallbacks: list[str] = Field(default_factory=list)
    """Codes of ``FallbackUsed`` events that must have been emitted."""
    answer: Value = None
    """A matcher on the prose answer."""
    output: dict[str, Value] | None = None
    """The typed output (the scenario's ``output_type``), field by field.

    A plain value (or ``{equals: value}``) is also given to the run as the field's
    expected value, so a difference is ``OUTPUT_UNEXPECTED`` during the run (blamed,
    recovered from); any other matcher is checked after the run only. A failing field's
    message names the step its value came from (see docs/recovery.md, "Typed outputs
    and blame")."""
    max_llm_calls: int | None = Field(default=None, ge=0)
    """At most this many model calls, all purposes."""
    max_tool_calls: int | None = Field(default=None, ge=0)
    """At most this many tool call attempts."""
    llm_calls: dict[LLMPurpose, int] = Field(default_factory=dict)
    """Exactly this many model calls for each purpose named (``plan``, ``resolve``,
    ``reason``, ``evaluate``, ``answer``; ``total``: all purposes). Another key is an
    error, so a misspelt purpose is never a check silently passed."""

    def expected_output(self) -> dict[str, Any]:
        """The output fields with a plain expected value (what the run is given)."""
        out: dict[str, Any] = {}
        for name, value in (self.output or {}).items():
            matcher = as_matcher(value)
            if set(matcher.given()) == {"equals"}:
                out[name] = matcher.equals
        return out


# --------------------------------------------------------------------------- scenario


class Scenario(_Strict):
    """One regression scenario."""

    name: str = ""
    """Its name (the file name without ``.scenario.yaml`` by default)."""
    description: str = ""
    """What it checks and why."""
    tags: list[str] = Field(default_factory=list)
    """Tags, for ``--filter``."""
    skip: str | None = None
    """Skip it, with this reason."""
    question: str = ""
    """The question (required unless ``plan`` is given)."""
    tools: ToolSource = Field(default_factory=list)
    """The tools."""
    model: ModelSpec | None = None
    """The model; None runs ``plan`` without one (no fallback, no reasoning, no answer)."""
    plan: str | None = None
    """A plan to execute directly (no planner, no re-plan)."""
    output_type: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    """A pydantic model the run's typed output must fill, as ``MODULE:ATTR`` (the plan
    ends with a ``final_answer`` step; see docs/recovery.md, "Typed outputs and blame")."""
    config: AgentConfig = Field(default_factory=AgentConfig)
    """Overrides of the agent's settings (`planexec.config.AgentConfig`)."""
    evaluator: EvaluatorSpec | None = None
    """Judges each finished plan: ``MODULE:ATTR``, or scripted ``{verdicts: [...]}``; a
    non-success verdict re-plans with its lesson (``EVALUATION_FAILED``)."""
    approvals: list[ScriptedApproval] | None = None
    """Scripted approval decisions, in the order the run asks (turns approval on, with
    the ``config.approval`` policy); without it, ``config.approval.enabled`` pauses the
    run at the first step that needs approval (``expect.status: WAITING_APPROVAL``)."""
    cancel_after_tool_calls: int | None = Field(default=None, ge=0)
    """The caller cancels the run once this many tool calls (attempts) were made, when
    the next step finishes (``0``: when the first step finishes): steps still running
    or not started end ``CANCELLED``, and so does the run."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds the run may take."""
    expect: Expectations = Field(default_factory=Expectations)
    """What the run must show."""
    _path: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if not self.question and self.plan is None:
            raise ValueError("a scenario needs a 'question' (or a 'plan' to execute)")
        if self.model is None and self.plan is None:
            raise ValueError("a scenario without a 'model' needs a 'plan' to execute")
        if self.expect.output is not None and self.output_type is None:
            raise ValueError("'expect.output' checks a typed output: give 'output_type'")
        return self

    @property
    def path(self) -> str | None:
        """Where the scenario was read from (set by `load_scenario`), if from a file."""
        return self._path

    def with_path(self, path: str | Path | None) -> Scenario:
        """A copy that reads relative paths from ``path``'s folder."""
        copy = self.model_copy()
        copy._path = None if path is None else str(path)
        return copy

    @property
    def base_dir(self) -> Path:
        """The folder relative paths are read from (the file's folder, or the cwd)."""
        return Path(self.path).parent if self.path else Path.cwd()

    def resolve_path(self, relative: str) -> Path:
        """A path from the file, made absolute against `base_dir`."""
        p = Path(relative).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def _describe(exc: ValidationError, source: str, data: Any) -> str:
    from planexec._validation import describe_errors

    lines = describe_errors(exc, data, Scenario)
    return f"invalid scenario {source}:\n  " + "\n  ".join(lines)


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or does not validate (the
            message names each wrong key).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {str(p)!r}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"scenario {str(p)!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"scenario {str(p)!r}: the top level must be a mapping")
    data.setdefault("name", scenario_name(p))
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, repr(str(p)), data)) from exc
    return scenario.with_path(p)


def scenario_name(path: str | Path) -> str:
    """The default name of a scenario file: its name without ``.scenario.yaml``."""
    name = Path(path).name
    return name[: -len(SCENARIO_SUFFIX)] if name.endswith(SCENARIO_SUFFIX) else Path(name).stem


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {str(node["$ref"]).rsplit("/", 1)[-1]} if "$ref" in node else set()
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    return set()


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of scenario files (draft 2020-12).

    ``config`` is published as an open object: it is validated as an `AgentConfig` when
    the scenario is loaded (unknown keys rejected there), and its settings are documented
    with the configuration, so this schema does not change with every new setting.
    """
    schema = Scenario.model_json_schema(mode="validation")
    schema["properties"]["config"] = {
        "type": "object",
        "title": "Config",
        "description": "Overrides of the agent's settings (planexec.config.AgentConfig, the "
        "same structure as a config file); validated when the scenario is loaded, unknown "
        "keys rejected.",
        "default": {},
    }
    defs = schema.get("$defs", {})
    keep: set[str] = set()
    todo = _refs({k: v for k, v in schema.items() if k != "$defs"})
    while todo:
        name = todo.pop()
        if name in keep or name not in defs:
            continue
        keep.add(name)
        todo |= _refs(defs[name])
    schema["$defs"] = {k: v for k, v in defs.items() if k in keep}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://planexec.dev/schemas/scenario.schema.json",
        **schema,
    }
    out: dict[str, Any] = json.loads(json.dumps(schema, default=str))
    return out
