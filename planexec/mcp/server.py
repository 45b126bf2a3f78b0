"""planexec as an MCP server: planning and execution exposed as MCP tools.

`build_server` returns an SDK `MCPServer` with these tools, each with a description and
JSON schemas for its input and its output:

- ``parse_plan``: plan text → the plan as JSON and its diagnostics;
- ``validate_plan``: plan text → diagnostics, including unknown tools (with close
  matches) and missing required arguments, checked against the tool catalog;
- ``execute_plan``: plan text → step results, with a progress notification per step;
- ``ask``: a question → the answer and a run summary (needs a model);
- ``get_run``: a recorded run from the run store.

With ``expose_tools=True`` it also re-exposes the underlying tools themselves
(`expose_tool`), with their input schemas and safety hints as MCP annotations.

Bad input — plan text with no usable plan, unknown tools, arguments of the wrong type —
comes back as an MCP error result (``is_error``) with a clear message; the server keeps
running. `serve` runs the server over stdio, or over streamable HTTP bound to 127.0.0.1
by default, with bearer-token authentication when a token is given.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Annotated, Any

from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planexec._log import logger
from planexec.errors import ConfigError, PlanexecError, require_extra
from planexec.results import jsonable

require_extra("mcp", "mcp")

import mcp_types  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp.server.mcpserver.tools import Tool as MCPServerTool  # noqa: E402
from mcp.server.mcpserver.utilities.func_metadata import (  # noqa: E402
    ArgModelBase,
    FuncMetadata,
)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from planexec.config import AgentConfig
    from planexec.plan import Plan
    from planexec.tools import ToolCatalog

__all__ = [
    "PLANEXEC_TOOLS",
    "AskResult",
    "DiagnosticOut",
    "ExecutePlanResult",
    "GetRunResult",
    "ParsePlanResult",
    "StepResultOut",
    "ValidatePlanResult",
    "bearer_auth",
    "build_server",
    "expose_tool",
    "serve",
    "tools_server",
]

PLANEXEC_TOOLS = ("parse_plan", "validate_plan", "execute_plan", "ask", "get_run")
"""The names of the tools planexec itself exposes."""

SERVER_INSTRUCTIONS = (
    "planexec parses, validates and executes plans of tool steps. A plan is text in the "
    "hashstep dialect (#Task1: ..., #Tool1: name, #Args1: {json}, #Dependency1: None), or "
    "rewoo / llmcompiler. Arguments may refer to earlier results: <step_1>, "
    "<step_2.items[0].id>. Call validate_plan before execute_plan; use ask to have planexec "
    "plan and answer a question itself (when it was started with a model)."
)


# --------------------------------------------------------------------------- inputs

PlanText = Annotated[str, Field(description="The plan text, as a planner wrote it.")]
"""The ``text`` input of the plan tools."""
Dialect = Annotated[
    str, Field(description="The plan dialect: auto (detect), hashstep, rewoo or llmcompiler.")
]
"""The ``dialect`` input of the plan tools."""
Question = Annotated[str, Field(description="The question to answer.")]
"""The ``question`` input of ``ask``."""
RunId = Annotated[str, Field(description="The run's id, as returned by execute_plan or ask.")]
"""The ``run_id`` input of ``get_run``."""


# --------------------------------------------------------------------------- outputs


class DiagnosticOut(BaseModel):
    """One diagnostic about a plan."""

    line: int | None = Field(description="1-based line in the plan text, or null.")
    severity: str = Field(description="info, warning or error.")
    code: str = Field(description="A stable code, e.g. ARGS_REPAIRED or UNKNOWN_TOOL.")
    message: str = Field(description="What was found.")
    step: int | None = Field(default=None, description="The step concerned, if any.")


class ParsePlanResult(BaseModel):
    """A parsed plan."""

    dialect: str = Field(description="hashstep, rewoo or llmcompiler.")
    steps: list[dict[str, Any]] = Field(
        description="The steps: id, task, server, tool, args, depends_on, references, ..."
    )
    diagnostics: list[DiagnosticOut] = Field(description="Everything noticed while parsing.")
    has_errors: bool = Field(description="Whether any diagnostic is an error.")


class ValidatePlanResult(BaseModel):
    """A plan checked against the tool catalog."""

    valid: bool = Field(description="True when no diagnostic is an error.")
    dialect: str = Field(description="hashstep, rewoo or llmcompiler.")
    steps: int = Field(description="How many steps the plan has.")
    diagnostics: list[DiagnosticOut] = Field(description="Parse and check diagnostics.")
    unknown_tools: list[str] = Field(description="Tools the plan names that do not exist.")


class StepResultOut(BaseModel):
    """The outcome of one step."""

    model_config = ConfigDict(extra="allow")

    step_id: int = Field(description="The step's number.")
    tool: str | None = Field(description="The tool called (null for a reasoning step).")
    status: str = Field(description="SUCCEEDED, FAILED, BLOCKED, SKIPPED or CANCELLED.")
    output: Any = Field(default=None, description="The structured output.")
    error: str | None = Field(default=None, description="Why it failed, if it did.")
    error_kind: str | None = Field(default=None, description="The failure's kind.")


class ExecutePlanResult(BaseModel):
    """The results of executing a plan."""

    run_id: str = Field(description="The run's id (get_run returns it when a store is set).")
    ok: bool = Field(description="True when every step succeeded (or was skipped on purpose).")
    results: list[StepResultOut] = Field(description="Step results, in plan order.")
    diagnostics: list[DiagnosticOut] = Field(description="Parse and check diagnostics.")
    usage: dict[str, Any] = Field(
        default_factory=dict,
        description="Model calls by purpose (each attempt of a retried call counts), "
        "tokens, tool calls, wall time.",
    )


class AskResult(BaseModel):
    """A question answered by a plan-and-execute run."""

    run_id: str = Field(description="The run's id.")
    status: str = Field(description="SUCCEEDED, FAILED or CANCELLED.")
    answer: str | None = Field(description="The answer, if any.")
    error: str | None = Field(default=None, description="Why the run failed, if it did.")
    plans: int = Field(description="How many plans were tried.")
    results: list[StepResultOut] = Field(description="The latest result of every step.")
    usage: dict[str, Any] = Field(description="Model calls, tokens, tool calls, wall time.")


class GetRunResult(BaseModel):
    """A run from the run store."""

    run: dict[str, Any] = Field(description="The recorded run.")


# --------------------------------------------------------------------------- helpers


def _diagnostics(plan: Plan) -> list[DiagnosticOut]:
    return [DiagnosticOut(**d.to_dict()) for d in plan.diagnostics]


def _describe_errors(plan: Plan, limit: int = 20) -> str:
    lines = [f"  - {d}" for d in plan.errors[:limit]]
    more = len(plan.errors) - limit
    if more > 0:
        lines.append(f"  ... and {more} more")
    return "\n".join(lines)


def _parse(text: str, dialect: str) -> Plan:
    from planexec.parsing import parse_plan

    if not text.strip():
        raise ToolError("the plan text is empty")
    try:
        return parse_plan(text, dialect)
    except PlanexecError as exc:
        diags = getattr(exc, "diagnostics", ())
        extra = "".join(f"\n  - {d}" for d in list(diags)[:10])
        raise ToolError(f"no usable plan in the text: {exc}{extra}") from exc
    except ValueError as exc:
        raise ToolError(f"cannot parse the plan: {exc}") from exc


def _literal_arg_errors(plan: Plan, catalog: ToolCatalog) -> list[str]:
    """Type-check the arguments of steps that refer to no other step."""
    problems: list[str] = []
    for step in plan.steps:
        if step.tool is None or step.refs or step.positional or not step.args_valid:
            continue
        if not catalog.has(step.tool, step.server):
            continue
        try:
            catalog.validate(step.tool, dict(step.args), step.server)
        except KeyError:  # an ambiguous name: check_plan reports it
            continue
        except ValidationError as exc:
            errs = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}"
                for e in exc.errors()
            )
            problems.append(f"step {step.id} ({step.tool}): invalid arguments: {errs}")
    return problems


def _step_out(result: Any) -> StepResultOut:
    return StepResultOut(**jsonable(result.to_dict()))


class _AnyArgs(ArgModelBase):
    """Arguments passed through as given; the tool's own schema validates them."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        """Return the arguments as received."""
        return dict(self.model_extra or {})


def _result_for(value: Any, *, wrap: bool = False) -> mcp_types.CallToolResult:
    """A tool output as an MCP result: structured content plus its text.

    The structured content is the output itself when it is an object (and ``wrap`` is
    false), else ``{"result": output}``; the text is the JSON of the output (a string
    output is its own text).
    """
    data = jsonable(value)
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    structured = data if isinstance(data, dict) and not wrap else {"result": data}
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=structured
    )


def _return_annotation(tool: BaseTool) -> Any:
    """The return annotation of a tool's function (None when there is none to use)."""
    import inspect
    import typing

    fn = getattr(tool, "coroutine", None) or getattr(tool, "func", None)
    if fn is None:
        return None
    fn = inspect.unwrap(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: no declared output
        return None
    ann = hints.get("return")
    if ann in (None, Any, type(None), object):
        return None
    return ann


def output_schema_for(tool: BaseTool, public: str) -> tuple[dict[str, Any], bool]:
    """The JSON schema of a tool's output, and whether outputs are wrapped as ``result``.

    In order: a schema the tool declares (``metadata["planexec"]["output_schema"]``, or
    the ``output_schema`` of a tool that came from an MCP server); else the schema of the
    function's return annotation (a non-object type is wrapped as ``{"result": ...}``,
    titled ``<name>Output`` as the MCP SDK does); else a permissive object schema (a
    non-object output then comes back as ``{"result": ...}``).
    """
    meta = tool.metadata or {}
    for key in ("planexec", "mcp"):
        declared = (meta.get(key) or {}).get("output_schema")
        if isinstance(declared, Mapping) and declared:
            schema = dict(declared)
            if schema.get("type") == "object":
                return schema, False
            return _wrapper_schema(public, schema), True
    ann = _return_annotation(tool)
    if ann is not None:
        from pydantic import TypeAdapter

        try:
            schema = TypeAdapter(ann).json_schema()
        except Exception:  # a type pydantic cannot describe: fall back to permissive
            schema = {}
        if schema.get("type") == "object":
            schema.setdefault("title", f"{public}Output")
            return schema, False
        if schema:
            return _wrapper_schema(public, schema), True
    return {
        "type": "object",
        "description": f"The output of {public}: an object, or {{\"result\": value}} "
        "for any other value.",
        "additionalProperties": True,
    }, False


def _wrapper_schema(public: str, inner: Mapping[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "title": f"{public}Output",
        "properties": {"result": {k: v for k, v in inner.items() if k != "$defs"}},
        "required": ["result"],
    }
    if "$defs" in inner:
        schema["$defs"] = inner["$defs"]
    return schema


def expose_tool(
    catalog: ToolCatalog,
    name: str,
    *,
    server_name: str | None = None,
    exposed_name: str | None = None,
) -> MCPServerTool:
    """An MCP server tool that re-exposes one catalog tool (pass it to ``MCPServer(tools=)``).

    Its input schema is the tool's JSON schema, its output schema comes from
    `output_schema_for`; its safety hints become MCP annotations (``readOnlyHint``,
    ``idempotentHint``, ``destructiveHint``). Invalid arguments and errors raised by the
    tool come back as error results with the message.
    """
    from planexec.tools import error_payload, invoke_tool, normalize_output

    spec = catalog.get(name, server_name)
    hints = spec.hints
    annotations = mcp_types.ToolAnnotations(
        read_only_hint=hints.read_only,
        idempotent_hint=hints.idempotent,
        destructive_hint=hints.destructive,
    )
    schema = dict(spec.json_schema or {"type": "object", "properties": {}})
    schema.setdefault("type", "object")
    schema.pop("title", None)
    public = exposed_name or spec.name
    out_schema, wrap = output_schema_for(spec.tool, public)

    async def run(**kwargs: Any) -> mcp_types.CallToolResult:
        try:
            args = catalog.validate(spec.name, kwargs, spec.server)
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {public!r}: {exc}") from exc
        try:
            out = await invoke_tool(spec, args)
        except Exception as exc:  # the tool's failure, reported to the caller
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        structured, _ = normalize_output(out)
        err = error_payload(structured)
        if err:
            raise ToolError(err)
        return _result_for(structured, wrap=wrap)

    return MCPServerTool(
        fn=run,
        name=public,
        description=spec.description or f"The {spec.name} tool.",
        parameters=schema,
        fn_metadata=FuncMetadata(arg_model=_AnyArgs, output_schema=out_schema),
        is_async=True,
        annotations=annotations,
        meta={"planexec/server": spec.server} if spec.server else None,
    )


def _exposed_tools(catalog: ToolCatalog) -> list[MCPServerTool]:
    return [
        expose_tool(catalog, tool_name, server_name=server_name, exposed_name=public)
        for tool_name, server_name, public in _exposed_names(catalog)
    ]


def _exposed_names(catalog: ToolCatalog) -> list[tuple[str, str | None, str]]:
    """(name, server, public name) of every tool; names shared by servers are qualified."""
    specs = list(catalog.specs())
    counts: dict[str, int] = {}
    for s in specs:
        counts[s.name] = counts.get(s.name, 0) + 1
    out = []
    for s in specs:
        public = s.name if counts[s.name] == 1 or not s.server else f"{s.server}.{s.name}"
        if public in PLANEXEC_TOOLS:
            raise ConfigError(
                f"cannot expose tool {public!r}: it has the name of a planexec tool "
                f"({', '.join(PLANEXEC_TOOLS)})"
            )
        out.append((s.name, s.server, public))
    return out


def tools_server(
    tools: Sequence[BaseTool], *, name: str, instructions: str | None = None
) -> MCPServer[Any]:
    """An MCP server that exposes exactly these tools (no planexec tools).

    Used for the demo servers (``python -m planexec.examples.mcp_server iot``). Tools
    that share a name on different servers are exposed as ``server.name``.
    """
    from planexec.tools import ToolCatalog

    catalog = ToolCatalog(list(tools))
    return MCPServer(
        name,
        instructions=instructions,
        version=_version(),
        log_level="WARNING",
        tools=_exposed_tools(catalog),
    )


# --------------------------------------------------------------------------- server


def build_server(
    tools: Sequence[BaseTool],
    *,
    model: BaseChatModel | None = None,
    store: Any = None,
    expose_tools: bool = False,
    name: str = "planexec",
    agent_options: Mapping[str, Any] | None = None,
    tool_source: Mapping[str, str] | None = None,
    all_runs: bool = False,
    config: AgentConfig | None = None,
) -> MCPServer[Any]:
    """Build the planexec MCP server over a set of tools.

    ``execute_plan`` and ``ask`` run through one `planexec.runtime.Runtime` built from
    ``config``: the same model timeout, retries and circuit breaker (shared by every
    call of this server), limits and executor settings as the library.

    Args:
        tools: The tools plans may call.
        model: The chat model for ``ask``, the resolver's LLM fallback and reasoning
            steps; without it ``ask`` returns an error result, references that need
            the fallback fail with ``RESOLUTION_FAILED`` and reasoning steps are skipped.
        store: A run store (``SQLiteRunStore``); runs of ``execute_plan`` and ``ask``
            are recorded there, and ``get_run`` reads it.
        expose_tools: Also expose the tools themselves.
        name: The server's name.
        agent_options: Extra keyword arguments for `PlanExecuteAgent` (``config`` ...).
        tool_source: Where the tools came from (`planexec.runs.tool_source`),
            recorded in each run's config so ``planexec runs resume`` can load them.
        all_runs: Let ``get_run`` read every run of the store. By default it reads only
            the runs this server recorded: the store may hold the user's other runs.
        config: Every setting (`AgentConfig`; ``agent_options["config"]`` or the
            defaults otherwise).

    Raises:
        ConfigError: the config names tools that are not among ``tools``.
    """
    from planexec.runs import TOOL_SOURCE_KEY, StampedStore
    from planexec.runtime import Runtime
    from planexec.tools import ToolCatalog

    catalog = ToolCatalog(list(tools))
    options = dict(agent_options or {})
    runtime = Runtime(
        model,
        catalog,
        config if config is not None else options.get("config"),
        breakers=options.get("breakers"),
        runner=options.get("runner"),
    )
    # `ask`'s agents share the runtime's settings, breakers and runner with execute_plan
    options.update(config=runtime.config, breakers=runtime.breakers, runner=runtime.runner)
    extra_config = {TOOL_SOURCE_KEY: dict(tool_source)} if tool_source else {}
    recording = StampedStore(store, extra_config) if store is not None and extra_config else store
    own_runs: set[str] = set()
    server: MCPServer[Any] = MCPServer(
        name,
        instructions=SERVER_INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",
        tools=_exposed_tools(catalog) if expose_tools else None,
    )

    @server.tool(
        description=(
            "Parse plan text (hashstep, rewoo or llmcompiler) into steps with their tools, "
            "arguments, references and dependencies, and report every deviation as a "
            "diagnostic. Does not check tools; see validate_plan."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    def parse_plan(text: PlanText, dialect: Dialect = "auto") -> ParsePlanResult:
        plan = _parse(text, dialect)
        return ParsePlanResult(
            dialect=plan.dialect,
            steps=[jsonable(s.to_dict()) for s in plan.steps],
            diagnostics=_diagnostics(plan),
            has_errors=plan.has_errors,
        )

    @server.tool(
        description=(
            "Check plan text against the available tools: unknown tools (with close "
            "matches), missing or forward references, cycles, missing required arguments. "
            "Returns valid=false with the diagnostics when the plan cannot run as written."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    def validate_plan(text: PlanText, dialect: Dialect = "auto") -> ValidatePlanResult:
        from planexec.parsing import check_plan

        plan = check_plan(_parse(text, dialect), catalog)
        unknown = sorted(
            {s.tool for s in plan.steps if s.tool is not None and not catalog.has(s.tool, s.server)}
        )
        return ValidatePlanResult(
            valid=not plan.has_errors,
            dialect=plan.dialect,
            steps=len(plan.steps),
            diagnostics=_diagnostics(plan),
            unknown_tools=unknown,
        )

    @server.tool(
        description=(
            "Execute plan text: steps run in dependency order (in parallel where possible), "
            "references to earlier results are resolved, and each step's result or error is "
            "returned. Sends a progress notification as each step finishes. A plan that does "
            "not validate (unknown tools, bad references, arguments of the wrong type) is "
            "rejected with an error before anything runs."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def execute_plan(
        text: PlanText, ctx: Context, dialect: Dialect = "auto"
    ) -> ExecutePlanResult:
        from planexec.events import EventBus, StepFinished
        from planexec.parsing import check_plan
        from planexec.results import StepStatus, Usage
        from planexec.runs import execute_recorded

        plan = check_plan(_parse(text, dialect), catalog)
        problems = [str(d) for d in plan.errors] + _literal_arg_errors(plan, catalog)
        if problems:
            raise ToolError(
                "the plan cannot run as written:\n" + "\n".join(f"  - {p}" for p in problems)
            )
        run_id = uuid.uuid4().hex[:12]
        own_runs.add(run_id)
        bus = EventBus()
        _attach_store(store, bus)
        total = len(plan.steps)
        finished = 0

        async def on_event(event: Any) -> None:
            nonlocal finished
            if isinstance(event, StepFinished):
                finished += 1
                r = event.result
                msg = f"step {r.step_id} ({r.tool or 'reasoning'}): {r.status}"
                if r.error:
                    msg += f" - {r.error[:200]}"
                try:
                    await ctx.report_progress(finished, total, msg)
                except Exception as exc:  # a lost notification must not fail the run
                    logger.bind(run_id=run_id, step_id=r.step_id).warning(
                        "progress notification failed: {}", exc
                    )

        bus.subscribe(on_event)
        # the executor alone (no recovery, no answer), with the runtime's model client
        # (timeout, retries, breaker), limits and runner
        usage = Usage()
        executor = runtime.open_run(run_id=run_id, usage=usage, bus=bus).executor
        # recorded as `planexec run` records a plan, so `planexec runs resume` can continue it
        recorded = {**runtime.config.model_dump(mode="json"), **extra_config}
        started = time.perf_counter()
        try:
            results = await execute_recorded(
                executor, plan, text, bus=bus, store=store, config=recorded
            )
        finally:
            usage.wall_time = time.perf_counter() - started
        order = {sid: i for i, sid in enumerate(plan.ids)}
        results = sorted(results, key=lambda r: order.get(r.step_id, len(order)))
        ok = all(r.status in (StepStatus.SUCCEEDED, StepStatus.SKIPPED) for r in results)
        return ExecutePlanResult(
            run_id=run_id,
            ok=ok,
            results=[_step_out(r) for r in results],
            diagnostics=_diagnostics(plan),
            usage=usage.to_dict(),
        )

    @server.tool(
        description=(
            "Answer a question with a plan-and-execute run: a model writes a plan over the "
            "available tools, planexec executes it (re-planning on failures) and answers. "
            "Needs the server to be started with a model (planexec serve --model SPEC)."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def ask(question: Question, ctx: Context) -> AskResult:
        if model is None:
            raise ToolError(
                "ask needs a model: start the server with --model SPEC "
                "(e.g. --model replay:replies.json or --model openai:gpt-4o-mini)"
            )
        if not question.strip():
            raise ToolError("the question is empty")
        from planexec.agent import PlanExecuteAgent
        from planexec.events import StepFinished

        finished = 0

        async def on_event(event: Any) -> None:
            nonlocal finished
            if isinstance(event, StepFinished):
                finished += 1
                r = event.result
                try:
                    await ctx.report_progress(
                        finished, None, f"step {r.step_id} ({r.tool or 'reasoning'}): {r.status}"
                    )
                except Exception as exc:  # a lost notification must not fail the run
                    logger.bind(run_id=event.run_id, step_id=r.step_id).warning(
                        "progress notification failed: {}", exc
                    )

        agent = PlanExecuteAgent(model, list(tools), store=recording, **options)
        try:
            run = await agent.run(question, event_handlers=[on_event])
        finally:
            if agent.last_run is not None:
                own_runs.add(agent.last_run.run_id)
        return AskResult(
            run_id=run.run_id,
            status=str(run.status),
            answer=run.answer,
            error=run.error,
            plans=len(run.attempts),
            results=[_step_out(r) for r in run.results],
            usage=run.usage.to_dict(),
        )

    @server.tool(
        description=(
            "Return a recorded run (question, plans, step results, answer, usage) from the "
            "run store by its id: a run this server made with execute_plan or ask (unless "
            "it was started with --all-runs). Needs the server to have a run store."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    async def get_run(
        run_id: RunId,
    ) -> GetRunResult:
        if store is None:
            raise ToolError("no run store: start the server with --store PATH")
        if not all_runs and run_id not in own_runs:
            # the same message as an unknown id: other runs' existence is not revealed
            raise ToolError(
                f"no run with id {run_id!r} made by this server (get_run returns only the "
                "runs of this server's execute_plan and ask, unless it is started with "
                "--all-runs)"
            )
        return GetRunResult(run=await _load_run(store, run_id))

    return server


def _version() -> str:
    from planexec import __version__

    return __version__


def _attach_store(store: Any, bus: Any) -> None:
    if store is None:
        return
    attach = getattr(store, "attach", None)
    if callable(attach):
        attach(bus)
    else:
        bus.subscribe(store)


async def _load_run(store: Any, run_id: str) -> dict[str, Any]:
    from planexec.errors import RunNotFoundError

    getter = getattr(store, "export", None) or getattr(store, "get_run", None)
    if getter is None:
        raise ToolError("the run store cannot read runs")
    try:
        run = getter(run_id)
        if asyncio.iscoroutine(run):
            run = await run
    except (RunNotFoundError, KeyError) as exc:
        raise ToolError(f"no run with id {run_id!r} in the store") from exc
    if run is None:
        raise ToolError(f"no run with id {run_id!r} in the store")
    data = run.to_dict() if hasattr(run, "to_dict") else run
    out = jsonable(data)
    if not isinstance(out, dict):
        raise ToolError(f"the store returned an unreadable run for {run_id!r}")
    return out


# --------------------------------------------------------------------------- transports


ASGIApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


def bearer_auth(app: ASGIApp, token: str) -> ASGIApp:
    """Wrap an ASGI app so every HTTP request needs ``Authorization: Bearer <token>``.

    The scheme is matched case-insensitively (RFC 7235) and the token compared in
    constant time; other scopes (lifespan) pass through. A missing or wrong token gets
    ``401`` with ``WWW-Authenticate: Bearer``.
    """
    expected = token.encode()

    async def wrapped(
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        given = b""
        for key, value in scope.get("headers") or ():
            if key.lower() == b"authorization":
                given = value
                break
        scheme, _, credentials = given.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(credentials.strip(), expected):
            body = json.dumps(
                {"error": "unauthorized", "error_description": "a valid bearer token is required"}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="planexec"'),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return wrapped


async def serve(
    server_factory: Callable[[list[BaseTool]], MCPServer[Any]],
    *,
    tools: Sequence[BaseTool] = (),
    toolset: AbstractAsyncContextManager[Any] | None = None,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a planexec MCP server until it is stopped.

    Args:
        server_factory: Builds the server from the tools (see `build_server`).
        tools: Local tools.
        toolset: An `MCPToolset` (or any async context manager with ``tools``) kept
            open while the server runs; its tools are added to ``tools``.
        http: Serve streamable HTTP at ``http://host:port/mcp`` instead of stdio.
        host: The address to bind (loopback by default).
        port: The port to bind.
        token: Require this bearer token on every HTTP request.
        on_ready: Called with the endpoint once the server listens.
    """
    async with toolset if toolset is not None else nullcontext() as opened:
        all_tools = list(tools) + (list(opened.tools) if opened is not None else [])
        server = server_factory(all_tools)
        if not http:
            if on_ready:
                on_ready("stdio")
            await server.run_stdio_async()
            return
        import uvicorn

        app: Any = server.streamable_http_app(host=host)
        if token:
            app = bearer_auth(app, token)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        userver = uvicorn.Server(config)
        if on_ready:

            async def announce() -> None:
                for _ in range(600):
                    if userver.started:
                        on_ready(f"http://{host}:{port}/mcp")
                        return
                    await asyncio.sleep(0.05)

            task = asyncio.create_task(announce())
            try:
                await userver.serve()
            finally:
                task.cancel()
        else:
            await userver.serve()
