"""The runtime: the one place that assembles what a run needs from an `AgentConfig`.

Every entry point gets its model client, resolver, reasoner, executor, limits,
circuit breakers and tool runner here, so they all get the same timeouts, retries,
breaker and limits from the same configuration: `PlanExecuteAgent` (and through it
``planexec ask``, ``planexec demo``, ``planexec runs resume``, ``regress`` and the Ray
drivers), ``planexec run`` and the MCP server's ``execute_plan`` tool.

- `Runtime` (one per agent, command or server) holds the config, the catalog, the
  circuit breakers — one per model provider and per tool server, shared by every run it
  opens — and the tool runner (in process, or on Ray with ``executor.backend = "ray"``).
  Building one checks the tool names the config mentions against the catalog.
- `Runtime.client` is a run's model client: a `ResilientModelClient` with
  ``model.timeout``, retries with backoff and jitter from ``model.retry``, the
  provider's breaker and ``model.stream``, counting into the run's usage.
- `Runtime.open_run` returns a run's `RunServices`: that client, the `ArgResolver` and
  `ModelReasoner` on it, the run's `Limits`, and the `Executor` holding them (with the
  limits as its guard). The executor itself knows no model.
- `Runtime.start_trace` opens a run's trace (`planexec.tracing`) from the caller's
  ``RunnableConfig`` and the runtime's ``callbacks``, when anybody traces; given to
  `open_run`, it parents every model and tool call of the run under one callback run.

Example:
    >>> from planexec.events import EventBus
    >>> from planexec.results import Usage
    >>> from planexec.testing import fake_tool
    >>> runtime = Runtime(None, ToolCatalog([fake_tool("sites", ["MAIN"])]))
    >>> run = runtime.open_run(run_id="r1", usage=Usage(), bus=EventBus())
    >>> run.client is None and run.reasoner is None  # no model: no fallback, no reasoning
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from planexec._log import run_log
from planexec._models import ModelClient
from planexec.approval import ApprovalGate, ApprovalPolicy, Approver
from planexec.config import AgentConfig, ExecutorSettings
from planexec.errors import ConfigError
from planexec.events import EventBus
from planexec.executor import Executor, Guard, LocalToolRunner, Reasoner, ToolRunner
from planexec.plan import Step
from planexec.reasoning import ModelReasoner
from planexec.recovery import Limits
from planexec.resilience import BreakerRegistry, ResilientModelClient
from planexec.resolver import ArgResolver
from planexec.results import Usage
from planexec.selection import ModelToolSelector
from planexec.store.base import RunStore
from planexec.tools import ToolCatalog
from planexec.tracing import RunTrace, start_trace

__all__ = ["RunServices", "Runtime", "limit_guard", "tool_runner"]


@dataclass(frozen=True)
class RunServices:
    """What one run uses, bound to its id, usage and event bus (see `Runtime.open_run`)."""

    client: ModelClient | None
    """The run-bound resilient model client (None without a model)."""
    resolver: ArgResolver
    """The argument resolver; its LLM fallback calls ``client``."""
    reasoner: Reasoner | None
    """Answers reasoning steps with ``client`` (None without a model: they are skipped)."""
    limits: Limits
    """The run's limits (``limits`` settings), counting its tool calls."""
    executor: Executor
    """The executor holding the resolver, the reasoner, the limits and the runner."""


def tool_runner(settings: ExecutorSettings) -> ToolRunner:
    """The tool runner of ``executor.backend``: in this process, or on Ray.

    Raises:
        MissingExtraError: ``ray`` without Ray installed.
    """
    if settings.backend == "local":
        return LocalToolRunner()
    from planexec.distributed import runner_for

    runner = runner_for(settings.backend, settings.ray)
    return runner if runner is not None else LocalToolRunner()


def limit_guard(limits: Limits, catalog: ToolCatalog) -> Guard:
    """The executor's guard: `Limits.guard`, told the tool's server from the catalog.

    The server of each (tool, step's server) is looked up once: one guard serves one
    run, whose catalog does not change.
    """
    servers: dict[tuple[str, str | None], str | None] = {}

    def server_of(tool: str, named: str | None) -> str | None:
        try:
            spec = catalog.lookup(tool, named) or catalog.lookup(tool)
        except KeyError:  # ambiguous: keep the step's server
            spec = None
        return named if spec is None else (spec.server or "")

    def guard(step: Step, tool: str) -> str | None:
        key = (tool, step.server)
        if key in servers:
            server = servers[key]
        else:
            server = servers[key] = server_of(tool, step.server)
        return limits.guard(step, tool, server=server)

    return guard


class Runtime:
    """Builds the model clients, resolver, reasoner, limits and executor of runs.

    One runtime serves many runs: its breakers (and runner) are shared by all of them,
    so a provider that keeps failing opens its breaker for every later run too.
    """

    def __init__(
        self,
        model: BaseChatModel | None,
        catalog: ToolCatalog,
        config: AgentConfig | None = None,
        *,
        breakers: BreakerRegistry | None = None,
        runner: ToolRunner | None = None,
        callbacks: Callbacks = None,
        approver: Approver | None = None,
    ) -> None:
        """Assemble a runtime.

        Args:
            model: The chat model of the resolver's fallback, reasoning steps (and, for
                the agent, planning, answers and a judge); None for none.
            catalog: The tools.
            config: Every setting (the defaults of `AgentConfig` otherwise).
            breakers: Circuit breakers to share (by default a new registry with
                ``model.breaker_failure_threshold`` and ``model.breaker_recovery_time``).
            runner: How tools are called (by default from ``executor.backend``).
            callbacks: langchain callback handlers that see every traced run (see
                `start_trace`).
            approver: The in-process approval callback (`planexec.approval`); giving
                one turns approval on even when ``approval.enabled`` is false.

        Raises:
            ConfigError: the config names tools that are not in the catalog (see
                `check_tool_names`).
            MissingExtraError: ``executor.backend = "ray"`` without Ray installed.
        """
        self.model = model
        """The chat model (None: no fallback, no reasoning)."""
        self.catalog = catalog
        """The tools."""
        self.config = config if config is not None else AgentConfig()
        """The settings."""
        self.check_tool_names()
        settings = self.config.model
        self.breakers = (
            breakers
            if breakers is not None
            else BreakerRegistry(settings.breaker_failure_threshold, settings.breaker_recovery_time)
        )
        """Circuit breakers of the model provider and the tool servers, shared by runs."""
        self.runner: ToolRunner = (
            runner if runner is not None else tool_runner(self.config.executor)
        )
        """How tools are called (`LocalToolRunner`, or Ray's with ``backend = "ray"``)."""
        self.callbacks: Callbacks = callbacks
        """Callback handlers of every run (`start_trace`)."""
        self.approver = approver
        """The in-process approval callback, if any."""

    def check_tool_names(self, catalog: ToolCatalog | None = None) -> None:
        """Reject tool names in limits and timeouts that name no tool of the catalog.

        A name on an MCP server that could not start is not checked (with a warning).

        Args:
            catalog: The tools to check against (the runtime's by default).

        Raises:
            ConfigError: naming each key with an unknown tool, and close tool names.
        """
        catalog = catalog if catalog is not None else self.catalog
        cfg = self.config
        named = [(f"limits.per_tool_limits[{n!r}]", n) for n in cfg.limits.per_tool_limits]
        for i, seq in enumerate(cfg.limits.sequence_limits):
            named += [(f"limits.sequence_limits[{i}].pattern", n) for n in seq.pattern]
        named += [(f"executor.tool_timeouts[{n!r}]", n) for n in cfg.executor.tool_timeouts]
        named += [
            (f"executor.tool_output_limits[{n!r}]", n) for n in cfg.executor.tool_output_limits
        ]
        named += [(f"approval.tools[{n!r}]", n) for n in cfg.approval.tools]
        named += [(f"approval.allow[{n!r}]", n) for n in cfg.approval.allow]
        problems: list[str] = []
        down = getattr(catalog, "unavailable", None) or {}
        for key, name in named:
            if catalog.has(name):
                continue
            server = name.split(".", 1)[0] if "." in name else None
            if server is not None and server in down:
                run_log("-").warning(
                    "{}: tool {!r} is on server {!r}, which could not start; not checked",
                    key,
                    name,
                    server,
                )
                continue
            close = catalog.suggest(name)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            problems.append(f"{key}: unknown tool {name!r}{hint}")
        if problems:
            names = catalog.names()
            known = ", ".join(names[:30]) + (" …" if len(names) > 30 else "")
            raise ConfigError(
                "invalid configuration: tool names that are not in the catalog:\n  "
                + "\n  ".join(problems)
                + f"\n  (tools: {known or 'none'})"
            )

    def client_for(
        self,
        model: BaseChatModel,
        *,
        usage: Usage,
        bus: EventBus | None,
        run_id: str,
        trace: RunTrace | None = None,
    ) -> ResilientModelClient:
        """A run-bound client for ``model`` with the ``model`` settings.

        Timeout, retries (backoff and jitter), streaming and the provider's breaker are
        those of every model call of a run: planner, resolver, reasoning, answer, and an
        `LLMJudge` given a plain model. Every attempt counts in ``usage``; with a
        ``trace``, every call is parented in the run's trace.
        """
        cfg = self.config.model
        client = ResilientModelClient(
            model,
            timeout=cfg.timeout,
            usage=usage,
            bus=bus,
            run_id=run_id,
            retry=cfg.retry.policy(),
            breakers=self.breakers,
            stream=cfg.stream,
        )
        client.trace = trace
        return client

    def client(
        self,
        *,
        usage: Usage,
        bus: EventBus | None,
        run_id: str,
        trace: RunTrace | None = None,
    ) -> ModelClient | None:
        """The run-bound client of the runtime's model (None without a model)."""
        if self.model is None:
            return None
        return self.client_for(self.model, usage=usage, bus=bus, run_id=run_id, trace=trace)

    def resolver(self, client: ModelClient | None) -> ArgResolver:
        """An `ArgResolver` whose fallback calls ``client``, with ``resolver.output_budget``."""
        return ArgResolver(
            client,
            output_budget=self.config.resolver.output_budget,
            ungrounded=self.config.resolver.ungrounded,
            prose_hints=self.config.resolver.prose_hints,
        )

    async def start_trace(
        self, config: RunnableConfig | None, *, run_id: str, question: str
    ) -> RunTrace | None:
        """Open a run's trace: one parent callback run for all its calls.

        Args:
            config: The caller's ``RunnableConfig`` (callbacks, tags, metadata, run name).
            run_id: The run's id.
            question: The run's question (the parent run's input).

        Returns:
            The trace to give `open_run`, or None when nobody traces (no callbacks in
            ``config`` or the runtime, no langchain tracing, no OpenTelemetry).
        """
        return await start_trace(
            config,
            self.callbacks,
            run_id=run_id,
            inputs={"question": question},
            handler_timeout=self.config.executor.callback_timeout,
        )

    def approval_gate(
        self,
        *,
        bus: EventBus,
        run_id: str,
        store: RunStore | None = None,
        owner: str | None = None,
    ) -> ApprovalGate | None:
        """The run's approval gate (`planexec.approval.ApprovalGate`).

        None unless ``approval.enabled``, an ``approver``, or a request on record in
        ``store`` for the run asks for one: an open request is honoured whatever this
        config says (its step waits for a decision made for its exact call).

        Args:
            bus: The run's bus.
            run_id: The run.
            store: The run's store: where requests and decisions are recorded (None:
                in the gate only).
            owner: The run's lease holder (claims decisions), if it took the lease.
        """
        settings = self.config.approval
        policy = ApprovalPolicy.from_settings(settings)
        if not (settings.enabled or self.approver is not None):
            if store is None or not store.approval_requests(run_id):
                return None
            policy = ApprovalPolicy(require=frozenset(), tools=frozenset(), allow=policy.allow)
        return ApprovalGate(
            policy,
            self.approver,
            bus=bus,
            run_id=run_id,
            max_edit_attempts=settings.max_edit_attempts,
            store=store,
            owner=owner,
        )

    def open_run(
        self,
        *,
        run_id: str,
        usage: Usage,
        bus: EventBus,
        question: str = "",
        catalog: ToolCatalog | None = None,
        trace: RunTrace | None = None,
        store: Any = None,
        owner: str | None = None,
    ) -> RunServices:
        """Assemble one run: its client, resolver, reasoner, limits and executor.

        Args:
            run_id: The run's id (on logs and events).
            usage: Where the run's model and tool calls are counted.
            bus: Where the run's events go.
            question: The question the plan answers, shown to reasoning steps.
            catalog: The run's tools, when they differ from the runtime's (e.g. with
                the typed output's mapping tool added).
            trace: The run's trace (`planexec.tracing.start_trace`), when the caller
                traces: the client parents each model call in it, the executor each
                round, step and tool call. None: untraced, today's plain call path.
            store: The run's store: the approval gate records requests and decisions
                there, and honours those already on record (`approval_gate`). Anything
                but a `planexec.store.RunStore` (a bare event handler) keeps no requests:
                the gate keeps its own.
            owner: The run's lease holder, when its driver took the lease.

        Returns:
            The run's services; ``executor`` runs its plans.
        """
        catalog = catalog if catalog is not None else self.catalog
        client = self.client(usage=usage, bus=bus, run_id=run_id, trace=trace)
        resolver = self.resolver(client)
        settings = self.config.executor
        reasoner: Reasoner | None = None
        if client is not None:
            reasoner = ModelReasoner(client, question=question, budget=settings.reason_budget)
        limits = Limits.from_settings(self.config.limits)
        executor = Executor(
            catalog,
            resolver,
            config=settings,
            reasoner=reasoner,
            # steps naming an agent or server but no tool: selection, on the same client
            selector=ModelToolSelector(client, question=question) if client else None,
            bus=bus,
            run_id=run_id,
            usage=usage,
            breakers=self.breakers,
            guard=limit_guard(limits, catalog),
            runner=self.runner,
            trace=trace,
            approvals=self.approval_gate(
                bus=bus, run_id=run_id, owner=owner,
                store=store if isinstance(store, RunStore) else None,
            ),
        )
        return RunServices(client, resolver, reasoner, limits, executor)
