"""All the settings of a `PlanExecuteAgent` in one pydantic model: `AgentConfig`.

Every model here forbids unknown keys, so a misspelled setting is an error that names
the key, never a silent default. `load_config` reads the same structure from a TOML or
YAML file::

    [recovery]
    max_replans = 2

    [recovery.policy]
    TOOL_ERROR = "REPLAN"

    [limits]
    max_steps = 30
    per_tool_limits = { search = 5 }
    sequence_limits = [ { pattern = ["search", "fetch"], max_repeats = 3 } ]

    [executor]
    max_concurrency = 64
    tool_concurrency = { render = 2 }
    tool_timeouts = { history = 10.0 }
    run_timeout = 600.0
    max_output_chars = 1000000
    tool_output_limits = { fetch = 5000000 }

Every float setting must be finite (NaN and infinity are refused) and every timeout
above zero.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planexec._ray_settings import RaySettings
from planexec.errors import Action, ConfigError, ErrorKind

if TYPE_CHECKING:
    from planexec._retry import RetryPolicy
    from planexec.tools import ToolSpec

__all__ = [
    "AgentConfig",
    "ApprovalSettings",
    "EvaluationSettings",
    "ExecutorSettings",
    "LimitSettings",
    "ModelSettings",
    "PlannerSettings",
    "RecoverySettings",
    "ResolverSettings",
    "RetrySettings",
    "SequenceLimit",
    "StoreSettings",
    "load_config",
]


class _Settings(BaseModel):
    # allow_inf_nan=False: no float setting may be NaN or infinite (``1e999`` in TOML).
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )


PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite number of seconds above zero."""


class RetrySettings(_Settings):
    """Retries with exponential backoff and jitter."""

    attempts: int = Field(default=3, ge=1)
    """Attempts in all (1 means no retry)."""
    base_delay: float = Field(default=0.2, ge=0)
    """Seconds before the first retry; doubled on each further retry."""
    max_delay: float = Field(default=5.0, ge=0)
    """The longest wait between two attempts, in seconds."""
    jitter: float = Field(default=0.1, ge=0)
    """Random seconds (up to this) added to each wait."""

    def policy(self) -> RetryPolicy:
        """These settings as a `planexec.resilience.RetryPolicy` (built once, then shared)."""
        return _retry_policy(self.attempts, self.base_delay, self.max_delay, self.jitter)


@functools.lru_cache(maxsize=64)
def _retry_policy(attempts: int, base_delay: float, max_delay: float, jitter: float) -> RetryPolicy:
    from planexec._retry import RetryPolicy

    return RetryPolicy(
        attempts=attempts, base_delay=base_delay, max_delay=max_delay, jitter=jitter
    )


class ExecutorSettings(_Settings):
    """How steps are run."""

    max_concurrency: int = Field(default=1024, ge=1)
    """Steps run at the same time, at most.

    High by default: tools are mostly I/O-bound (HTTP, MCP, databases) and a waiting
    step costs little, so every ready step starts (a fan-out of 1,000 steps runs in one
    wave). Bound the heavy tools with ``tool_concurrency``, or lower this for all.
    """
    tool_concurrency: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Calls of one tool running at the same time, at most, by tool name or qualified
    ``server.name`` (e.g. ``{ render = 2 }`` for a CPU-heavy or rate-limited tool).
    A step whose tool is at its limit waits for a slot before its call (its call
    timeout starts with the call); the other steps go on."""
    step_timeout: float | None = Field(default=None, gt=0)
    """Seconds a whole step may take (resolution, calls and retries); None for no limit."""
    tool_timeout: float | None = Field(default=None, gt=0)
    """Seconds one tool call may take, unless ``tool_timeouts`` names the tool."""
    tool_timeouts: dict[str, PositiveSeconds] = Field(default_factory=dict)
    """Per-tool call timeouts in seconds, by tool name or qualified ``server.name``."""
    run_timeout: float | None = Field(default=600.0, gt=0)
    """Seconds one execution of a plan (`Executor.run`) may take; None for no limit.

    When it runs out, the steps still running are cancelled without waiting for tools
    that ignore cancellation (they are left running, detached, and logged), the steps
    not started are recorded ``CANCELLED``, and the run ends ``CANCELLED`` with the
    reason ``run timeout of Ns exceeded``.
    """
    callback_timeout: float = Field(default=10.0, gt=0)
    """Seconds one trace event (a run's, a plan attempt's or a step's start or end) waits
    for the langchain callback handlers. A handler that takes longer (or never returns)
    is abandoned with a warning, and the run goes on untraced (`planexec.tracing`)."""
    max_output_chars: int | None = Field(default=1_000_000, ge=1)
    """The largest tool output kept, in characters (its text, or its JSON encoding);
    None for no limit. A larger output fails the step with ``TOOL_ERROR`` naming its
    size and the limit: it is not truncated (no value is ever silently changed)."""
    tool_output_limits: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Per-tool output limits in characters, by tool name or qualified ``server.name``
    (they replace ``max_output_chars`` for that tool)."""
    error_payload_keys: tuple[str, ...] = ("error",)
    """Keys of a dict output that mark it as an error payload (``{"error": ...}``)."""
    empty_output: Literal["fail", "warn"] = "fail"
    """An empty tool output fails the step (``fail``) or is kept with a warning."""
    tool_retry: RetrySettings = Field(default_factory=RetrySettings)
    """Retries, inside one step, of failed calls to safe (read-only/idempotent) tools."""
    retry_unsafe: bool = False
    """Also retry tools not marked safe. Destructive tools are never retried, nor is an
    approved call of a tool not marked safe (its decision allows one call)."""
    retry_error_payloads: bool = True
    """Retry error payloads and ``is_error`` results of safe tools like exceptions.

    On by default (`DESIGN.md`: a TOOL_ERROR is retried if the tool is safe). Turn it
    off when such results are the tool's final answer (``unknown site``), so only
    exceptions and timeouts are retried.
    """
    empty_output_attempts: int = Field(default=2, ge=1)
    """Attempts (at most) for a safe tool that keeps returning an empty output."""
    reason_budget: int = Field(default=4000, ge=100)
    """Characters of dependency outputs shown to a reasoning step's model."""
    backend: Literal["local", "ray"] = "local"
    """Where tool calls run: in this process (``local``) or as Ray tasks (``ray``, needs
    ``planexec[ray]``; see docs/scaling.md)."""
    ray: RaySettings = Field(default_factory=RaySettings)
    """The Ray backend's address, tool loading and resources per tool."""

    def timeout_for(self, spec: ToolSpec) -> float | None:
        """The call timeout of a tool.

        ``tool_timeouts`` by qualified name (``server.name``), then by name, then
        ``tool_timeout``.
        """
        for key in (spec.qualified_name, spec.name):
            if key in self.tool_timeouts:
                return self.tool_timeouts[key]
        return self.tool_timeout

    def concurrency_for(self, spec: ToolSpec) -> int | None:
        """The concurrency limit of a tool's calls (None: only ``max_concurrency``).

        ``tool_concurrency`` by qualified name (``server.name``), then by name.
        """
        for key in (spec.qualified_name, spec.name):
            if key in self.tool_concurrency:
                return self.tool_concurrency[key]
        return None

    def output_limit_for(self, spec: ToolSpec) -> int | None:
        """The output limit of a tool, in characters.

        ``tool_output_limits`` by qualified name (``server.name``), then by name, then
        ``max_output_chars``.
        """
        for key in (spec.qualified_name, spec.name):
            if key in self.tool_output_limits:
                return self.tool_output_limits[key]
        return self.max_output_chars


class ResolverSettings(_Settings):
    """How arguments are resolved."""

    output_budget: int = Field(default=4000, ge=100)
    """Characters of each referenced output shown to the LLM fallback."""
    ungrounded: Literal["warn", "reresolve", "fail"] = "reresolve"
    """What a value the LLM fallback filled does when it occurs nowhere in the referenced
    outputs though values like it do (an identifier; free text is never held to it):
    ``warn`` (event, flag on the step), ``reresolve`` (ask once more, showing the
    values that do occur; then fail) or ``fail`` (``RESOLUTION_UNGROUNDED``). See
    docs/resolution.md, "Grounding"."""
    prose_hints: bool = True
    """Let the filter tier read hints written as prose (``asset_id_for_Chiller_6_from_step_1``,
    ``Name from #E1``) without a model, when exactly one value fits them; false sends them
    to the LLM fallback. See docs/resolution.md, "The filter tier"."""


class ModelSettings(_Settings):
    """How the chat model is called (every purpose)."""

    timeout: float | None = Field(default=120.0, gt=0)
    """Seconds a model call may take, streaming included; None for no limit."""
    retry: RetrySettings = Field(default_factory=RetrySettings)
    """Retries of transient model errors (timeouts, provider errors)."""
    breaker_failure_threshold: int = Field(default=5, ge=1)
    """Consecutive failures after which the provider's circuit breaker opens."""
    breaker_recovery_time: float = Field(default=30.0, ge=0)
    """Seconds an open breaker waits before letting one trial call through."""
    stream: bool = False
    """Stream replies (the timeout then bounds the whole stream)."""


class PlannerSettings(_Settings):
    """How plans are asked for and read."""

    dialect: Literal["auto", "hashstep", "rewoo", "llmcompiler", "json"] = "auto"
    """The plan dialect to parse text replies in (the prompt teaches hashstep, or the
    json dialect when this is ``json``)."""
    mode: Literal["auto", "text", "structured"] = "auto"
    """How plans are asked for: ``structured`` output (a JSON plan, the json dialect)
    where the model has it and ``text`` otherwise (``auto``), always ``text``, or always
    ``structured`` (a model without structured output is a configuration error)."""
    draft_policy: Literal["last_complete", "first", "last"] = "last_complete"
    """Which plan to keep when a reply holds several drafts."""
    max_reprompts: int = Field(default=2, ge=0)
    """Re-prompts with the diagnostics when a reply has errors or unknown tools."""
    output_budget: int = Field(default=1500, ge=100)
    """Characters of each succeeded step's output shown in a re-plan prompt."""
    instructions: str | None = None
    """Extra instructions appended to the planner's system prompt."""
    stream: bool = True
    """Stream the plan into the executor where the model streams (it implements
    ``_astream``): safe steps start while the plan is still being written
    (docs/streaming.md). False: wait for the whole reply."""


class RecoverySettings(_Settings):
    """Budgets and the recovery policy (see docs/recovery.md)."""

    max_replans: int = Field(default=3, ge=0)
    """Re-plans per run."""
    max_reresolutions_per_step: int = Field(default=2, ge=0)
    """Re-resolutions of one step's arguments (with feedback), per plan."""
    max_retries_per_step: int = Field(default=1, ge=0)
    """Re-runs of one failed step by the agent, per plan (after the executor's own retries)."""
    early_replan: bool = True
    """Re-plan when the same argument of the same tool fails the same way twice."""
    policy: dict[ErrorKind, Action] = Field(default_factory=dict)
    """Overrides of the default action per error kind, e.g. ``{TOOL_ERROR: REPLAN}``."""


class SequenceLimit(_Settings):
    """A pattern of consecutive tool calls that may occur at most ``max_repeats`` times."""

    pattern: tuple[str, ...] = Field(min_length=1)
    """Tool names called one right after the other, e.g. ``["search", "fetch"]``."""
    max_repeats: int = Field(ge=0)
    """How many times the pattern may occur in the run's tool calls."""


class LimitSettings(_Settings):
    """Limits that end a run with ``LIMIT_EXCEEDED``."""

    max_steps: int | None = Field(default=50, ge=1)
    """Tool calls (steps) started per run, re-runs included; None for no limit."""
    per_tool_limits: dict[str, int] = Field(default_factory=dict)
    """Calls per run, by tool name."""
    sequence_limits: tuple[SequenceLimit, ...] = ()
    """Repeated-sequence limits."""


class EvaluationSettings(_Settings):
    """How the evaluator and the answer see the results."""

    output_budget: int = Field(default=2000, ge=100)
    """Characters of each step's output shown to the judge and the summarizer."""


class ApprovalSettings(_Settings):
    """Which steps need a person's decision before their tool is called (`planexec.approval`).

    A step needs approval when the gate is on (``enabled``, or an ``approver`` callback
    given to the agent or runtime), its tool is not in ``allow``, and the tool is in
    ``tools`` or falls under one of ``require``. The person sees the resolved arguments.
    """

    enabled: bool = False
    """Ask for approval (without a callback, a step that needs it pauses the run
    ``WAITING_APPROVAL``). Giving an ``approver`` callback turns it on too."""
    require: tuple[Literal["destructive", "unknown", "all"], ...] = ("destructive",)
    """Which tools need approval: ``destructive`` (marked destructive), ``unknown`` (no
    hint says read-only, nor whether it is destructive), ``all``."""
    tools: tuple[str, ...] = ()
    """Tools that always need approval (names or ``server.name``)."""
    allow: tuple[str, ...] = ()
    """Tools that never need approval (the allow-list; it wins over everything else)."""
    max_edit_attempts: int = Field(default=3, ge=1)
    """Edits refused by the tool's schema before the callback's step is deferred (the
    callback is asked again with the validation errors each time)."""


class StoreSettings(_Settings):
    """Where runs are recorded (`planexec.store.open_store`), when no ``--store`` is given."""

    url: str | None = None
    """The run store: a file path, ``:memory:``, or a ``postgresql://`` URL for a database
    shared by several hosts (``--store`` wins over it; it wins over ``$PLANEXEC_STORE``).
    Without a password: the configuration is recorded with every run, so the password
    goes in ``PGPASSWORD`` or ``~/.pgpass``."""

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        from urllib.parse import urlsplit

        if value is not None and value.startswith(("postgresql://", "postgres://")):
            try:
                password = urlsplit(value).password
            except ValueError:
                password = None
            if password:
                raise ValueError(
                    "store.url holds a password, and the configuration is recorded with "
                    "every run: put the password in PGPASSWORD or ~/.pgpass instead"
                )
        return value


class AgentConfig(_Settings):
    """Every setting of a `PlanExecuteAgent`; the defaults are those of docs/recovery.md."""

    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    """Planning."""
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    """Running steps."""
    resolver: ResolverSettings = Field(default_factory=ResolverSettings)
    """Resolving arguments."""
    model: ModelSettings = Field(default_factory=ModelSettings)
    """Calling the model."""
    recovery: RecoverySettings = Field(default_factory=RecoverySettings)
    """Budgets and the recovery policy."""
    limits: LimitSettings = Field(default_factory=LimitSettings)
    """Run limits."""
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    """Evaluation and the final answer."""
    approval: ApprovalSettings = Field(default_factory=ApprovalSettings)
    """Human approval of steps (docs/approval.md)."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """The run store (docs/durability.md)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> AgentConfig:
        """Validate ``data`` into a config.

        Raises:
            ConfigError: unknown keys or bad values; the message names each key and
                ``source``.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, source, data)) from exc


def _describe(exc: ValidationError, source: str, data: Any) -> str:
    from planexec._validation import describe_errors

    lines = [f"{source}: {line}" for line in describe_errors(exc, data, AgentConfig)]
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_config(path: str | Path) -> AgentConfig:
    """Read an `AgentConfig` from a ``.toml``, ``.yaml`` or ``.yml`` file.

    Raises:
        ConfigError: the file cannot be read or parsed, has unknown keys or bad values.
            The message names the file and the key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(p)!r}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"cannot read config file {str(p)!r}: it is not UTF-8 text "
            f"(byte {exc.start}: {exc.reason})"
        ) from exc
    data: Any
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise ConfigError(
                f"config file {str(p)!r}: unknown format {suffix!r} (use .toml, .yaml or .yml)"
            )
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid {suffix[1:]}: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r}: the top level must be a table/mapping")
    return AgentConfig.from_dict(data, source=str(p))
