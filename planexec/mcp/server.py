"""planexec as an MCP server: planning and execution exposed as MCP tools.

`build_server` returns an SDK `MCPServer` with these tools, each with a description and
JSON schemas for its input and its output:

- ``parse_plan``: plan text → the plan as JSON and its diagnostics;
- ``validate_plan``: plan text → diagnostics, including unknown tools (with close
  matches) and missing required arguments, checked against the tool catalog;
- ``execute_plan``: plan text → step results, with a progress notification per step;
- ``ask``: a question → the answer and a run summary (needs a model);
- ``get_run``: a recorded run from the run store, its step results a page at a time;
- ``approve_step`` / ``reject_step`` / ``resume_run``: decide about the steps of a run
  paused ``WAITING_APPROVAL`` and continue it (docs/approval.md). With approval on
  (``approval.enabled`` in the config), ``execute_plan`` and ``ask`` never block on a
  person: they return the run paused, with ``pending_approval`` (each waiting step, its
  resolved arguments, how each was resolved and its ``request_key``, which
  ``approve_step`` / ``reject_step`` take so a decision lands only on the request the
  client saw). These tools see the same runs as
  ``get_run``.

With ``expose_tools=True`` it also re-exposes the underlying tools themselves
(`expose_tool`), with their input schemas and safety hints as MCP annotations.

Bad input — plan text with no usable plan, unknown tools, arguments of the wrong type —
comes back as an MCP error result (``is_error``) with a clear message; the server keeps
running. So do arguments a tool does not take (`check_arguments`) and plan text over
``max_plan_chars``. Plans are parsed and checked on a worker thread, so a large plan does
not stall other clients' calls. Results are bounded (`RESULT_BUDGET_BYTES`): a large run
returns its first step results and the run id, and ``get_run`` pages through the rest.

`serve` runs the server over stdio (behind `planexec.mcp.stdio_guard`, which answers every
malformed request instead of dropping it), or over streamable HTTP bound to 127.0.0.1 by
default, with Host/Origin checks (DNS-rebinding protection) on every bind and
bearer-token authentication when a token is given.
"""

from __future__ import annotations

import asyncio
import difflib
import hmac
import ipaddress
import itertools
import json
import socket
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Annotated, Any

from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planexec._log import logger
from planexec.errors import ConfigError, PlanexecError, require_extra
from planexec.mcp.principals import PRINCIPAL_KEY, principal_of
from planexec.results import jsonable, new_run_id

require_extra("mcp", "mcp")

import anyio.to_thread  # noqa: E402
import mcp_types  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp.server.mcpserver.tools import Tool as MCPServerTool  # noqa: E402
from mcp.server.mcpserver.utilities.func_metadata import (  # noqa: E402
    ArgModelBase,
    FuncMetadata,
)
from mcp.server.transport_security import TransportSecuritySettings  # noqa: E402

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from planexec.config import AgentConfig
    from planexec.plan import Plan
    from planexec.tools import ToolCatalog

__all__ = [
    "PLANEXEC_TOOLS",
    "AskResult",
    "CancelResult",
    "DiagnosticOut",
    "DecisionResult",
    "ExecutePlanResult",
    "GetRunResult",
    "ParsePlanResult",
    "PendingApprovalOut",
    "StepResultOut",
    "ValidatePlanResult",
    "allowed_hosts_for",
    "bearer_auth",
    "bind_socket",
    "build_server",
    "check_arguments",
    "expose_tool",
    "host_header",
    "is_loopback",
    "serve",
    "tools_only",
    "tools_server",
]

PLANEXEC_TOOLS = (
    "parse_plan",
    "validate_plan",
    "execute_plan",
    "ask",
    "get_run",
    "approve_step",
    "reject_step",
    "cancel_run",
    "resume_run",
)
"""The names of the tools planexec itself exposes."""

MAX_PLAN_CHARS = 200_000
"""The default limit on the plan text ``parse_plan``, ``validate_plan`` and
``execute_plan`` accept (characters); ``build_server(max_plan_chars=)`` and
``planexec serve --max-plan-chars`` change it."""

RESULT_BUDGET_BYTES = 200_000
"""The most UTF-8 bytes of step results (JSON) one ``execute_plan``, ``ask`` or ``get_run``
result carries. A result also carries the same JSON as its text content, so one result
stays well under the 1 MiB the official client accepts per server-sent event."""

DIAGNOSTICS_BUDGET_BYTES = 40_000
"""The most UTF-8 bytes of diagnostics (JSON) one result carries (the count is exact)."""

DEFAULT_PAGE = 100
"""How many step results ``execute_plan`` and ``ask`` return, and ``get_run`` pages by
default (fewer when they exceed `RESULT_BUDGET_BYTES`)."""

MAX_PAGE = 1000
"""The largest ``limit`` ``get_run`` accepts."""

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
Offset = Annotated[
    int, Field(ge=0, description="The first step result to return (0-based; next_offset of "
               "the previous page).")
]
"""The ``offset`` input of ``get_run``."""
Limit = Annotated[
    int, Field(ge=1, le=MAX_PAGE, description="The most step results to return (fewer when "
               "they would exceed the result size budget).")
]
"""The ``limit`` input of ``get_run``."""
StepNumber = Annotated[int, Field(ge=0, description="The step's number in the run's plan.")]
"""The ``step`` input of ``approve_step`` and ``reject_step``."""
EditedArgs = Annotated[
    dict[str, Any] | None,
    Field(description="Edited arguments: they replace the resolved arguments of the same "
          "names (checked against the tool's schema). Omit to approve as resolved."),
]
"""The ``args`` input of ``approve_step``."""
DecidedBy = Annotated[str, Field(description="Who decides (recorded with the decision).")]
CancelReason = Annotated[
    str, Field(min_length=1, description="Why the run is cancelled (recorded and shown).")
]
"""The ``by`` input of ``approve_step`` and ``reject_step``."""
Reason = Annotated[str, Field(min_length=1, description="Why the step is rejected (the "
                              "planner is told).")]
"""The ``reason`` input of ``reject_step``."""
RequestKey = Annotated[
    str | None,
    Field(description="The request_key of the pending_approval entry decided about: when "
          "the step has asked again since (other arguments, tool or plan version), nothing "
          "is recorded and the call fails. Omit to decide whatever the step waits on now."),
]
"""The ``request_key`` input of ``approve_step`` and ``reject_step``."""


# --------------------------------------------------------------------------- outputs


class DiagnosticOut(BaseModel):
    """One diagnostic about a plan."""

    line: int | None = Field(description="1-based line in the plan text, or null.")
    severity: str = Field(description="info, warning or error.")
    code: str = Field(description="A stable code, e.g. ARGS_REPAIRED or UNKNOWN_TOOL.")
    message: str = Field(description="What was found.")
    step: int | None = Field(default=None, description="The step concerned, if any.")


class ParsePlanResult(BaseModel):
    """A parsed plan (a page of its steps for a long plan)."""

    dialect: str = Field(description="hashstep, rewoo or llmcompiler.")
    steps: list[dict[str, Any]] = Field(
        description="The steps from offset on: id, task, server, tool, args, depends_on, "
        "references, ..."
    )
    steps_total: int = Field(default=0, description="How many steps the plan has.")
    next_offset: int | None = Field(
        default=None, description="The offset of the next page of steps, or null."
    )
    diagnostics: list[DiagnosticOut] = Field(description="Everything noticed while parsing.")
    diagnostics_total: int = Field(
        default=0, description="How many diagnostics there are (diagnostics may hold fewer)."
    )
    has_errors: bool = Field(description="Whether any diagnostic is an error.")


class ValidatePlanResult(BaseModel):
    """A plan checked against the tool catalog."""

    valid: bool = Field(description="True when no diagnostic is an error.")
    dialect: str = Field(description="hashstep, rewoo or llmcompiler.")
    steps: int = Field(description="How many steps the plan has.")
    diagnostics: list[DiagnosticOut] = Field(description="Parse and check diagnostics.")
    diagnostics_total: int = Field(
        default=0, description="How many diagnostics there are (diagnostics may hold fewer)."
    )
    unknown_tools: list[str] = Field(description="Tools the plan names that do not exist.")


class StepResultOut(BaseModel):
    """The outcome of one step."""

    model_config = ConfigDict(extra="allow")

    step_id: int = Field(description="The step's number.")
    tool: str | None = Field(description="The tool called (null for a reasoning step).")
    status: str = Field(
        description="SUCCEEDED, FAILED, BLOCKED, SKIPPED, CANCELLED or WAITING_APPROVAL."
    )
    output: Any = Field(default=None, description="The structured output.")
    error: str | None = Field(default=None, description="Why it failed, if it did.")
    error_kind: str | None = Field(default=None, description="The failure's kind.")


class PendingApprovalOut(BaseModel):
    """A step waiting for a person's decision (approve_step / reject_step)."""

    step_id: int = Field(description="The step's number.")
    plan_version: int = Field(default=1, description="The plan version of the step.")
    tool: str = Field(description="The tool that would be called.")
    args: dict[str, Any] = Field(description="The resolved arguments it would receive.")
    resolution: dict[str, str] = Field(
        default_factory=dict,
        description="How each argument was resolved: literal, reference, path, llm, ...",
    )
    reason: str = Field(default="", description="Why the step needs approval.")
    request_key: str = Field(
        description="The key of this request: pass it to approve_step / reject_step so the "
        "decision lands only on this request, not on one the step asks later."
    )


class ExecutePlanResult(BaseModel):
    """The results of executing a plan (the first page of them for a large plan)."""

    run_id: str = Field(description="The run's id (get_run returns it when a store is set).")
    ok: bool = Field(
        description="True when the run SUCCEEDED (see status): every step succeeded or was "
        "skipped on purpose, and the plan is complete."
    )
    status_counts: dict[str, int] = Field(
        default_factory=dict, description="How many steps ended in each status."
    )
    results_total: int = Field(default=0, description="How many step results the run has.")
    next_offset: int | None = Field(
        default=None,
        description="null when results holds every step result; else results holds the "
        "first ones (in plan order) and get_run(run_id, offset=next_offset) returns the rest.",
    )
    results: list[StepResultOut] = Field(
        description="Step results, in plan order (the first next_offset of them, when set)."
    )
    diagnostics: list[DiagnosticOut] = Field(description="Parse and check diagnostics.")
    diagnostics_total: int = Field(
        default=0, description="How many diagnostics there are (diagnostics may hold fewer)."
    )
    usage: dict[str, Any] = Field(
        default_factory=dict,
        description="Model calls by purpose (each attempt of a retried call counts), "
        "tokens, tool calls, wall time.",
    )
    status: str = Field(
        default="",
        description="The run's status: SUCCEEDED, FAILED, CANCELLED, INCOMPLETE or "
        "WAITING_APPROVAL (then see pending_approval).",
    )
    pending_approval: list[PendingApprovalOut] = Field(
        default_factory=list,
        description="Steps waiting for a decision (approve_step / reject_step, then "
        "resume_run); empty unless status is WAITING_APPROVAL.",
    )


class AskResult(BaseModel):
    """A question answered by a plan-and-execute run."""

    run_id: str = Field(description="The run's id.")
    status: str = Field(
        description="SUCCEEDED, FAILED, CANCELLED, INCOMPLETE or WAITING_APPROVAL."
    )
    answer: str | None = Field(description="The answer, if any.")
    error: str | None = Field(default=None, description="Why the run failed, if it did.")
    plans: int = Field(description="How many plans were tried.")
    results: list[StepResultOut] = Field(
        description="The latest result of every step (the first ones, when results_truncated)."
    )
    results_total: int = Field(default=0, description="How many step results there are.")
    results_truncated: bool = Field(
        default=False,
        description="True when results holds only the first ones: get_run pages through all.",
    )
    usage: dict[str, Any] = Field(description="Model calls, tokens, tool calls, wall time.")
    pending_approval: list[PendingApprovalOut] = Field(
        default_factory=list,
        description="Steps waiting for a decision (approve_step / reject_step, then "
        "resume_run); empty unless status is WAITING_APPROVAL.",
    )


class DecisionResult(BaseModel):
    """A decision recorded about a step waiting for approval."""

    run_id: str = Field(description="The run.")
    step_id: int = Field(description="The step.")
    action: str = Field(description="approve, edit or reject.")
    args: dict[str, Any] | None = Field(
        default=None, description="The arguments the tool will be called with (null on reject)."
    )
    by: str | None = Field(default=None, description="Who decided.")
    pending_approval: list[PendingApprovalOut] = Field(
        default_factory=list, description="Steps of the run still waiting for a decision."
    )



class CancelResult(BaseModel):
    """What ``cancel_run`` did."""

    run_id: str
    stopped: bool = Field(
        description="True: nobody executed the run and it is CANCELLED now; false: the "
        "process executing it stops it within a second or so."
    )
    by: str | None = Field(description="Who asked.")
    reason: str = Field(description="Why.")
    withdrawn_steps: list[int] = Field(description="Steps whose approval requests were withdrawn.")


class GetRunResult(BaseModel):
    """A run from the run store, with one page of its step results."""

    run: dict[str, Any] = Field(
        description="The recorded run: run (status, question, config, answer, step counts, "
        "...), plans (each version's text and parsed plan; summarized when too large) and "
        "steps (this page of step results, by plan version then plan order)."
    )
    offset: int = Field(description="The index of the first step result in run.steps.")
    steps_total: int = Field(description="How many step results the run has.")
    next_offset: int | None = Field(
        description="The offset of the next page, or null when this page is the last."
    )
    pending_approval: list[PendingApprovalOut] = Field(
        default_factory=list,
        description="Steps of the run waiting for a decision now, each with its "
        "request_key (approve_step / reject_step).",
    )


# --------------------------------------------------------------------------- helpers


def _diagnostics(plan: Plan) -> list[DiagnosticOut]:
    """The plan's diagnostics, as many as fit `DIAGNOSTICS_BUDGET_BYTES`."""
    out: list[DiagnosticOut] = []
    used = 0
    for d in plan.diagnostics:
        item = DiagnosticOut(**d.to_dict())
        used += _json_size(item.model_dump(mode="json"))
        if used > DIAGNOSTICS_BUDGET_BYTES and out:
            break
        out.append(item)
    return out


def check_arguments(tool: str, given: Collection[str], accepted: Collection[str]) -> None:
    """Refuse arguments a tool does not take, naming them with their close matches.

    Used by planexec's own tools and by every tool `expose_tool` re-exposes: an unknown
    argument is never ignored (``execute_plan {"dry_run": true}`` would otherwise run
    the plan).

    Args:
        tool: The tool's public name (for the message).
        given: The argument names the caller sent.
        accepted: The argument names the tool takes.

    Raises:
        ToolError: some argument is not accepted.
    """
    unknown = [name for name in given if name not in accepted]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(accepted), n=3, cutoff=0.6)
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        parts.append(f"{name!r}{hint}")
    takes = ", ".join(sorted(accepted)) or "no arguments"
    noun = "argument" if len(unknown) == 1 else "arguments"
    raise ToolError(f"{tool} got unknown {noun} {', '.join(parts)}; it takes: {takes}")


class _StrictTool(MCPServerTool):
    """An SDK tool that refuses unknown arguments (`check_arguments`) before running.

    ``accepted_args`` is the set of names it takes (None: the properties of its input
    schema); ``check_args=False`` lets a tool whose schema allows extra arguments take
    any.
    """

    accepted_args: frozenset[str] | None = None
    check_args: bool = True

    def model_post_init(self, context: Any, /) -> None:
        """Say in the input schema what `run` enforces: ``additionalProperties: false``.

        (Only for a tool that refuses unknown arguments; a schema that already says
        something about additional properties is left as it is.)
        """
        super().model_post_init(context)
        if self.check_args and "additionalProperties" not in self.parameters:
            self.parameters = {**self.parameters, "additionalProperties": False}

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        """Check the argument names, then run the tool as the SDK does."""
        if self.check_args:
            accepted = self.accepted_args
            if accepted is None:
                accepted = frozenset(self.parameters.get("properties") or {})
            check_arguments(self.name, arguments, accepted)
        return await super().run(arguments, context, convert_result=convert_result)


def _json_size(value: Any) -> int:
    """The UTF-8 size of ``value``'s JSON (surrogates counted, not rejected)."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


_KEEP_WHOLE = frozenset({"step_id", "tool", "server", "status", "error_kind"})


def _trimmed(item: dict[str, Any], budget: int) -> dict[str, Any]:
    """A step result cut to fit ``budget``: its largest fields become short previews.

    The cut fields are listed in ``truncated``; the full result stays in the run store
    (``planexec runs export RUN_ID``).
    """
    out = dict(item)
    cut: list[str] = []
    sizes = sorted(
        ((k, _json_size(v)) for k, v in out.items() if k not in _KEEP_WHOLE),
        key=lambda kv: kv[1],
        reverse=True,
    )
    for key, size in sizes:
        if _json_size(out) <= budget:
            break
        preview = json.dumps(out[key], ensure_ascii=False, default=str)[:1000]
        out[key] = f"{preview}... ({size} bytes, truncated)"
        cut.append(key)
    out["truncated"] = cut
    return out


def _fit(items: Iterable[dict[str, Any]], limit: int, budget: int) -> list[dict[str, Any]]:
    """The leading ``items`` (at most ``limit``) whose JSON fits ``budget`` bytes.

    At least one item is returned when there is one: alone over the budget, it is cut
    to fit (`_trimmed`).
    """
    out: list[dict[str, Any]] = []
    used = 0
    for item in itertools.islice(items, limit):
        size = _json_size(item)
        if size > budget:
            if out:
                break
            item = _trimmed(item, budget)
            size = _json_size(item)
        if out and used + size > budget:
            break
        out.append(item)
        used += size
    return out


def _model_result(model: BaseModel) -> mcp_types.CallToolResult:
    """A tool result whose text is the compact JSON of its structured content.

    The SDK would render it indented, which can multiply its size.
    """
    data = model.model_dump(mode="json")
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=data
    )


def _describe_errors(plan: Plan, limit: int = 20) -> str:
    lines = [f"  - {d}" for d in plan.errors[:limit]]
    more = len(plan.errors) - limit
    if more > 0:
        lines.append(f"  ... and {more} more")
    return "\n".join(lines)


def _check_size(text: str, max_chars: int) -> None:
    if len(text) > max_chars:
        raise ToolError(
            f"the plan text has {len(text):,} characters, over this server's limit of "
            f"{max_chars:,} (planexec serve --max-plan-chars); split the plan or raise the limit"
        )


def _parse(text: str, dialect: str, catalog: ToolCatalog | None = None) -> Plan:
    from planexec.parsing import parse_plan

    if not text.strip():
        raise ToolError("the plan text is empty")
    try:
        return parse_plan(text, dialect, catalog=catalog)
    except PlanexecError as exc:
        diags = getattr(exc, "diagnostics", ())
        extra = "".join(f"\n  - {d}" for d in list(diags)[:10])
        raise ToolError(f"no usable plan in the text: {exc}{extra}") from exc
    except ValueError as exc:
        raise ToolError(f"cannot parse the plan: {exc}") from exc


def _pending_out(requests: Iterable[Any]) -> list[PendingApprovalOut]:
    """`planexec.approval.ApprovalRequest` objects as MCP outputs."""
    from planexec.runs import request_key

    return [
        PendingApprovalOut(
            step_id=r.step_id, plan_version=r.plan_version, tool=r.tool,
            args=jsonable(r.args), resolution={k: str(v) for k, v in r.resolution.items()},
            reason=r.reason, request_key=request_key(r),
        )
        for r in requests
    ]


def _requests_on(bus: Any) -> dict[int, Any]:
    """Collect the run's approval requests by step, as they are emitted on ``bus``."""
    from planexec.approval import ApprovalRequest
    from planexec.events import ApprovalRequested
    from planexec.store.codec import event_to_json

    seen: dict[int, Any] = {}

    def on_event(event: Any) -> None:
        if isinstance(event, ApprovalRequested):
            seen[event.step_id] = ApprovalRequest.from_event(event_to_json(event))

    bus.subscribe(on_event)
    return seen


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
        err = error_payload(structured, raw=out)
        if err:
            raise ToolError(err)
        return _result_for(structured, wrap=wrap)

    return _StrictTool(
        fn=run,
        name=public,
        description=spec.description or f"The {spec.name} tool.",
        parameters=schema,
        fn_metadata=FuncMetadata(arg_model=_AnyArgs, output_schema=out_schema),
        is_async=True,
        annotations=annotations,
        meta={"planexec/server": spec.server} if spec.server else None,
        accepted_args=frozenset(spec.arg_names),
        check_args=not spec.allows_extra_args,
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
    return tools_only(
        MCPServer(
            name,
            instructions=instructions,
            version=_version(),
            log_level="WARNING",
            tools=_exposed_tools(catalog),
            subscriptions=False,
        )
    )


_NOT_SERVED = ("prompts/", "resources/", "completion/")
"""Methods planexec's servers do not serve (they have no prompts and no resources)."""


def tools_only(server: MCPServer[Any]) -> MCPServer[Any]:
    """Advertise only what planexec serves: tools (no prompts, resources, completions).

    ``MCPServer`` registers prompt and resource handlers whether or not any prompt or
    resource is added, and a server's capabilities follow its handlers; planexec's
    servers have neither, so their handlers are removed (a client that asks gets
    method-not-found, as for any method not served). Built with ``subscriptions=False``
    the server also does not advertise ``listChanged`` (its tool list never changes).

    Returns:
        The same server.
    """
    handlers = server._lowlevel_server._request_handlers  # the SDK has no public remover
    for method in [m for m in handlers if m.startswith(_NOT_SERVED)]:
        del handlers[method]
    return server


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
    max_plan_chars: int = MAX_PLAN_CHARS,
    admins: Collection[str] = (),
) -> MCPServer[Any]:
    """Build the planexec MCP server over a set of tools.

    ``execute_plan`` and ``ask`` run through one `planexec.runtime.Runtime` built from
    ``config``: the same model timeout, retries and circuit breaker (shared by every
    call of this server), limits and executor settings as the library.

    Every tool refuses arguments it does not take (`check_arguments`). Plan text is
    parsed and checked on a worker thread, never on the server's event loop. Results
    are bounded: at most `DEFAULT_PAGE` step results within `RESULT_BUDGET_BYTES`;
    ``get_run`` pages through the rest with ``offset`` and ``limit``.

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
        max_plan_chars: The longest plan text the plan tools accept; longer text is an
            error result.
        admins: Principals (`planexec.mcp.principals`) that may read and decide every
            run of the store. With principals (``serve(tokens=...)``) a run belongs to
            the principal that started it: any other gets "no run" for it.

    Raises:
        ConfigError: the config names tools that are not among ``tools``, or
            ``max_plan_chars`` is not positive.
    """
    from planexec.runs import TOOL_SOURCE_KEY, StampedStore
    from planexec.runtime import Runtime
    from planexec.tools import ToolCatalog

    if max_plan_chars < 1:
        raise ConfigError(f"max_plan_chars must be positive, not {max_plan_chars}")
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
    own_tools: list[MCPServerTool] = []

    def register(
        description: str, annotations: mcp_types.ToolAnnotations
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            own_tools.append(
                _StrictTool.from_function(fn, description=description, annotations=annotations)
            )
            return fn

        return add

    async def parsed(text: str, dialect: str, *, check: bool) -> Plan:
        """Parse (and check) plan text on a worker thread: the event loop keeps serving."""
        from planexec.parsing import check_plan

        _check_size(text, max_plan_chars)

        def work() -> Plan:
            plan = _parse(text, dialect, catalog if check else None)
            return check_plan(plan, catalog) if check else plan

        return await anyio.to_thread.run_sync(work)

    @register(
        description=(
            "Parse plan text (hashstep, rewoo or llmcompiler) into steps with their tools, "
            "arguments, references and dependencies, and report every deviation as a "
            "diagnostic. Does not check tools; see validate_plan. A long plan's steps come "
            "a page at a time (offset, limit)."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    async def parse_plan(
        text: PlanText, dialect: Dialect = "auto", offset: Offset = 0, limit: Limit = DEFAULT_PAGE
    ) -> Annotated[mcp_types.CallToolResult, ParsePlanResult]:
        plan = await parsed(text, dialect, check=False)
        steps = [jsonable(s.to_dict()) for s in plan.steps]
        page = _fit(steps[offset:], limit, RESULT_BUDGET_BYTES)
        end = offset + len(page)
        return _model_result(
            ParsePlanResult(
                dialect=plan.dialect,
                steps=page,
                steps_total=len(steps),
                next_offset=end if end < len(steps) else None,
                diagnostics=_diagnostics(plan),
                diagnostics_total=len(plan.diagnostics),
                has_errors=plan.has_errors,
            )
        )

    @register(
        description=(
            "Check plan text against the available tools: unknown tools (with close "
            "matches), missing or forward references, cycles, missing required arguments. "
            "Returns valid=false with the diagnostics when the plan cannot run as written."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    async def validate_plan(
        text: PlanText, dialect: Dialect = "auto"
    ) -> Annotated[mcp_types.CallToolResult, ValidatePlanResult]:
        plan = await parsed(text, dialect, check=True)
        unknown = sorted(
            {s.tool for s in plan.steps if s.tool is not None and not catalog.has(s.tool, s.server)}
        )
        return _model_result(
            ValidatePlanResult(
                valid=not plan.has_errors,
                dialect=plan.dialect,
                steps=len(plan.steps),
                diagnostics=_diagnostics(plan),
                diagnostics_total=len(plan.diagnostics),
                unknown_tools=unknown,
            )
        )

    @register(
        description=(
            "Execute plan text: steps run in dependency order (in parallel where possible), "
            "references to earlier results are resolved, and each step's result or error is "
            "returned. Sends a progress notification as each step finishes. A step named by an "
            "error diagnostic (an unknown tool, a bad reference, unreadable arguments) does "
            "not run and fails with its kind, the steps depending on it fail "
            "UPSTREAM_FAILED, and the rest runs (validate_plan checks a plan first). A large "
            "run returns its run id, status counts and first step results; get_run pages "
            "through the rest."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def execute_plan(
        text: PlanText, ctx: Context, dialect: Dialect = "auto"
    ) -> Annotated[mcp_types.CallToolResult, ExecutePlanResult]:
        from planexec.events import EventBus, RunFinished, StepFinished
        from planexec.results import RunStatus, StepStatus, Usage
        from planexec.runs import execute_recorded

        # a plan with error diagnostics runs as everywhere (planexec.plan_errors): the
        # steps they name fail, with their dependants; the rest runs
        plan = await parsed(text, dialect, check=True)
        run_id = new_run_id()
        own_runs.add(run_id)
        await _claim(store, run_id, principal_of(ctx))
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
        ended: list[Any] = []  # the run's status, as the store and `planexec run` have it

        def on_run_finished(event: Any) -> None:
            if isinstance(event, RunFinished):
                ended.append(event)

        bus.subscribe(on_run_finished)
        requests = _requests_on(bus)
        # the executor alone (no recovery, no answer), with the runtime's model client
        # (timeout, retries, breaker), limits and runner
        usage = Usage()
        # traced like an agent run when anybody traces (LangSmith, OpenTelemetry)
        trace = await runtime.start_trace(None, run_id=run_id, question="")
        executor = runtime.open_run(
            run_id=run_id, usage=usage, bus=bus, trace=trace, store=store
        ).executor
        # recorded as `planexec run` records a plan, so `planexec runs resume` can continue it
        recorded = {**runtime.config.model_dump(mode="json"), **extra_config}
        try:
            results = await execute_recorded(
                executor, plan, text, bus=bus, store=store, config=recorded
            )
        except (asyncio.CancelledError, anyio.get_cancelled_exc_class()):
            # the client cancelled its request (notifications/cancelled): a cancel request
            # like any other, so the run is final (recorded even while being cancelled)
            if store is not None:
                with anyio.CancelScope(shield=True):
                    await _record_client_cancel(store, run_id)
            raise
        order = {sid: i for i, sid in enumerate(plan.ids)}
        results = sorted(results, key=lambda r: order.get(r.step_id, len(order)))
        waiting = [r.step_id for r in results if r.status is StepStatus.WAITING_APPROVAL]
        status = ended[-1].status if ended else str(RunStatus.FAILED)
        ok = status == str(RunStatus.SUCCEEDED)
        counts: dict[str, int] = {}
        for r in results:
            counts[str(r.status)] = counts.get(str(r.status), 0) + 1
        outs = [_step_out(r).model_dump(mode="json") for r in results[:DEFAULT_PAGE]]
        page = _fit(outs, DEFAULT_PAGE, RESULT_BUDGET_BYTES)
        return _model_result(
            ExecutePlanResult(
                run_id=run_id,
                ok=ok,
                status_counts=counts,
                results_total=len(results),
                next_offset=len(page) if len(page) < len(results) else None,
                results=[StepResultOut(**r) for r in page],
                diagnostics=_diagnostics(plan),
                diagnostics_total=len(plan.diagnostics),
                usage=usage.to_dict(),
                status=status,
                pending_approval=_pending_out(requests[sid] for sid in waiting if sid in requests),
            )
        )

    @register(
        description=(
            "Answer a question with a plan-and-execute run: a model writes a plan over the "
            "available tools, planexec executes it (re-planning on failures) and answers. "
            "Needs the server to be started with a model (planexec serve --model SPEC)."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def ask(
        question: Question, ctx: Context
    ) -> Annotated[mcp_types.CallToolResult, AskResult]:
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

        from planexec.events import EventBus

        agent = PlanExecuteAgent(model, list(tools), store=recording, **options)
        seen = EventBus()
        requests = _requests_on(seen)
        run_id = new_run_id()
        await _claim(store, run_id, principal_of(ctx))
        try:
            run = await agent.run(
                question, run_id=run_id, event_handlers=[on_event, seen.emit]
            )
        finally:
            own_runs.add(run_id)
        return _model_result(_run_result(run, requests))

    def visible(run_id: str, tool: str, ctx: Any) -> None:
        """Refuse a run this server may not show (the same limits as get_run)."""
        if store is None:
            raise ToolError("no run store: start the server with --store PATH")
        principal = principal_of(ctx)
        if principal is not None:
            _owned_or_refused(store, run_id, principal, admins, tool)
            return
        if not all_runs and run_id not in own_runs:
            # the same message as an unknown id: other runs' existence is not revealed
            raise ToolError(
                f"no run with id {run_id!r} made by this server ({tool} sees only the "
                "runs of this server's execute_plan and ask, unless it is started with "
                "--all-runs)"
            )

    async def decide(
        run_id: str, step: int, decision: Any, tool: str, ctx: Any, seen: str | None
    ) -> DecisionResult:
        from planexec.errors import ApprovalError, RunNotFoundError
        from planexec.runs import decide_step, waiting_steps

        visible(run_id, tool, ctx)
        try:
            decided = await decide_step(
                store, run_id, step, decision, catalog=catalog, seen=seen
            )
        except RunNotFoundError as exc:
            raise ToolError(f"no run with id {run_id!r} in the store") from exc
        except ApprovalError as exc:
            raise ToolError(str(exc)) from exc
        left = await anyio.to_thread.run_sync(lambda: waiting_steps(store, run_id))
        return DecisionResult(
            run_id=run_id, step_id=step, action=str(decided.action),
            args=jsonable(decided.args), by=decided.by, pending_approval=_pending_out(left),
        )

    @register(
        description=(
            "Approve a step of a run waiting for approval (status WAITING_APPROVAL, from "
            "execute_plan or ask), optionally with edited arguments (they replace the "
            "resolved ones of the same names and must fit the tool's schema). Nothing runs "
            "until resume_run."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def approve_step(
        run_id: RunId,
        step: StepNumber,
        ctx: Context,
        args: EditedArgs = None,
        by: DecidedBy = "mcp client",
        request_key: RequestKey = None,
    ) -> Annotated[mcp_types.CallToolResult, DecisionResult]:
        from planexec.approval import ApprovalDecision

        decision = (
            ApprovalDecision.edit(args, by=by) if args else ApprovalDecision.approve(by=by)
        )
        return _model_result(
            await decide(run_id, step, decision, "approve_step", ctx, request_key)
        )

    @register(
        description=(
            "Reject a step of a run waiting for approval, with a reason: its tool is never "
            "called; on resume_run the step fails REJECTED and the planner (if any) is told "
            "the reason and plans around it."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def reject_step(
        run_id: RunId,
        step: StepNumber,
        reason: Reason,
        ctx: Context,
        by: DecidedBy = "mcp client",
        request_key: RequestKey = None,
    ) -> Annotated[mcp_types.CallToolResult, DecisionResult]:
        from planexec.approval import ApprovalDecision

        if not reason.strip():
            raise ToolError("the reason is empty: say why (the planner is told)")
        decision = ApprovalDecision.reject(reason, by=by)
        return _model_result(
            await decide(run_id, step, decision, "reject_step", ctx, request_key)
        )

    @register(
        description=(
            "Cancel a run (one get_run may read): the request is recorded with who and why; "
            "a run executing in any process that shares this server's store stops within a "
            "second or so (running steps cancelled, nothing new started), and a run nobody "
            "executes (waiting for approval, interrupted) is CANCELLED at once. A cancelled "
            "run does not resume."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def cancel_run(
        run_id: RunId, ctx: Context, reason: CancelReason = "cancelled by an MCP client",
        by: DecidedBy = "mcp client",
    ) -> Annotated[mcp_types.CallToolResult, CancelResult]:
        from planexec.cancelling import cancel_run as cancel
        from planexec.errors import RunError, RunNotFoundError

        visible(run_id, "cancel_run", ctx)
        try:
            outcome = await cancel(store, run_id, reason=reason, by=by)
        except RunNotFoundError as exc:
            raise ToolError(f"no run with id {run_id!r} in the store") from exc
        except RunError as exc:
            raise ToolError(str(exc)) from exc
        return _model_result(
            CancelResult(
                run_id=run_id, stopped=outcome.stopped, by=outcome.request.by,
                reason=outcome.request.reason, withdrawn_steps=list(outcome.withdrawn),
            )
        )

    @register(
        description=(
            "Continue a run paused WAITING_APPROVAL (or interrupted) after its decisions: "
            "finished steps are not run again, approved steps are called with the approved "
            "arguments, rejected ones fail REJECTED (re-planned with a model). Returns the "
            "run as ask does; it may pause again for later steps."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def resume_run(
        run_id: RunId, ctx: Context
    ) -> Annotated[mcp_types.CallToolResult, AskResult]:
        from planexec.agent import PlanExecuteAgent
        from planexec.errors import RunError, RunNotFoundError
        from planexec.events import EventBus
        from planexec.runs import resume_run as resume

        visible(run_id, "resume_run", ctx)
        agent = PlanExecuteAgent(model, list(tools), store=recording, **options)
        seen = EventBus()
        requests = _requests_on(seen)
        agent.event_handlers.append(seen.emit)
        try:
            run = await resume(agent, recording, run_id)
        except RunNotFoundError as exc:
            raise ToolError(f"no run with id {run_id!r} in the store") from exc
        except RunError as exc:
            raise ToolError(str(exc)) from exc
        return _model_result(_run_result(run, requests))

    @register(
        description=(
            "Return a recorded run (question, plans, answer, usage), a page of its step "
            "results and its steps waiting for approval (pending_approval, each with its "
            "request_key) from the run store by its id: a run this server made with execute_plan "
            "or ask (unless it was started with --all-runs). Page with offset and limit: "
            "next_offset is the offset of the next page (null after the last). Needs the "
            "server to have a run store."
        ),
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )
    async def get_run(
        run_id: RunId, ctx: Context, offset: Offset = 0, limit: Limit = DEFAULT_PAGE
    ) -> Annotated[mcp_types.CallToolResult, GetRunResult]:
        visible(run_id, "get_run", ctx)
        return _model_result(await _load_run(store, run_id, offset, limit))

    return tools_only(
        MCPServer(
            name,
            instructions=SERVER_INSTRUCTIONS,
            version=_version(),
            log_level="WARNING",
            tools=(_exposed_tools(catalog) if expose_tools else []) + own_tools,
            subscriptions=False,
        )
    )


async def _claim(store: Any, run_id: str, principal: str | None) -> None:
    """Record the principal that starts a run (nothing without principals or a store)."""
    if principal is None or store is None:
        return
    await anyio.to_thread.run_sync(lambda: store.set_owner(run_id, principal))


def _owned_or_refused(
    store: Any, run_id: str, principal: str, admins: Collection[str], tool: str
) -> None:
    """Refuse (as an unknown id) a run another principal started; admins see every run."""
    if principal in admins:
        return
    if store.owner(run_id) != principal:
        raise ToolError(
            f"no run with id {run_id!r} started by you ({tool} sees only the runs your "
            "token started)"
        )


async def _record_client_cancel(store: Any, run_id: str) -> None:
    """Record that an MCP client cancelled the ``execute_plan`` request of ``run_id``."""
    from planexec.events import RunCancelRequested

    await store.handle(
        RunCancelRequested(
            run_id=run_id, reason="the client cancelled its execute_plan request",
            by="mcp client",
        )
    )
    await store.flush()


def _run_result(run: Any, requests: Mapping[int, Any]) -> AskResult:
    """A run as ``ask`` and ``resume_run`` return it (a page of results, pending steps)."""
    from planexec.results import StepStatus

    outs = [_step_out(r).model_dump(mode="json") for r in run.results[:DEFAULT_PAGE]]
    page = _fit(outs, DEFAULT_PAGE, RESULT_BUDGET_BYTES)
    waiting = [r.step_id for r in run.results if r.status is StepStatus.WAITING_APPROVAL]
    return AskResult(
        run_id=run.run_id,
        status=str(run.status),
        answer=run.answer,
        error=run.error,
        plans=len(run.attempts),
        results=[StepResultOut(**r) for r in page],
        results_total=len(run.results),
        results_truncated=len(page) < len(run.results),
        usage=run.usage.to_dict(),
        pending_approval=_pending_out(requests[sid] for sid in waiting if sid in requests),
    )


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


async def _load_run(store: Any, run_id: str, offset: int, limit: int) -> GetRunResult:
    """One page of a recorded run, read on a worker thread (the store may be SQLite).

    The run record and its plans come first; plans too large for half the result budget
    are summarized (their step count and the start of their text). The steps are sorted
    by plan version, then plan order, and paged within what is left of the budget.
    """
    from planexec.errors import RunNotFoundError
    from planexec.runs import waiting_steps

    required = ("get_run", "plans", "step_results")
    if not all(callable(getattr(store, m, None)) for m in required):
        raise ToolError("the run store cannot read runs")

    def read() -> GetRunResult:
        try:
            record = store.get_run(run_id)
            plans, steps = store.plans(run_id), store.step_results(run_id)
        except (RunNotFoundError, KeyError) as exc:
            raise ToolError(f"no run with id {run_id!r} in the store") from exc
        if record is None:
            raise ToolError(f"no run with id {run_id!r} in the store")
        pending = _pending_out(waiting_steps(store, run_id))
        return _run_page(record, plans, steps, offset, limit, pending)

    return await anyio.to_thread.run_sync(read)


def _run_page(
    record: Any, plans: Sequence[Any], steps: Sequence[Any], offset: int, limit: int,
    pending: list[PendingApprovalOut],
) -> GetRunResult:
    run = jsonable(record.to_dict())
    if _json_size(run) > RESULT_BUDGET_BYTES // 4:
        run = _trimmed(run, RESULT_BUDGET_BYTES // 4)
    half = RESULT_BUDGET_BYTES // 2
    large = any(len(p.text) > half or (p.plan and len(p.plan.steps) > DEFAULT_PAGE) for p in plans)
    plan_docs = [] if large else [jsonable(p.to_dict()) for p in plans]
    if large or _json_size(plan_docs) > half:
        plan_docs = [
            {
                "version": p.version,
                "reason": p.reason,
                "created_at": p.created_at,
                "error": p.error,
                "steps": len(p.plan.steps) if p.plan else 0,
                "text": p.text[:2000],
                "truncated": True,
            }
            for p in plans
        ]
    order = {p.version: {sid: i for i, sid in enumerate(p.plan.ids)} for p in plans if p.plan}
    steps = sorted(
        steps,
        key=lambda s: (s.plan_version, order.get(s.plan_version, {}).get(s.result.step_id, 0)),
    )
    waiting = [p.model_dump(mode="json") for p in pending]
    budget = max(RESULT_BUDGET_BYTES - _json_size([run, plan_docs, waiting]),
                 RESULT_BUDGET_BYTES // 4)
    window = (jsonable(s.to_dict()) for s in steps[offset : offset + limit])
    page = _fit(window, limit, budget)
    end = offset + len(page)
    return GetRunResult(
        run={"run": run, "plans": plan_docs, "steps": page},
        offset=offset,
        steps_total=len(steps),
        next_offset=end if end < len(steps) else None,
        pending_approval=pending,
    )


# --------------------------------------------------------------------------- transports


ASGIApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


_NOBODY = object()
"""`_bearer_principal`'s answer for a missing or wrong token."""


def _bearer_principal(
    scheme: bytes, credentials: bytes, expected: Sequence[tuple[str | None, bytes]]
) -> Any:
    """The principal a bearer token names (None: the one unnamed token), else `_NOBODY`.

    Every token is compared (in constant time), whichever matches.
    """
    found: Any = _NOBODY
    for name, value in expected:
        if hmac.compare_digest(credentials, value) and scheme.lower() == b"bearer":
            found = name
    return found


def bearer_auth(app: ASGIApp, token: str | Mapping[str, str]) -> ASGIApp:
    """Wrap an ASGI app so every HTTP request needs ``Authorization: Bearer <token>``.

    The scheme is matched case-insensitively (RFC 7235) and the token compared in
    constant time; other scopes (lifespan) pass through. A missing or wrong token gets
    ``401`` with ``WWW-Authenticate: Bearer``. ``token`` may map principals to their
    tokens (`planexec.mcp.principals`): the request's principal is then put in its scope
    under `planexec.mcp.principals.PRINCIPAL_KEY`.
    """
    named = {None: token} if isinstance(token, str) else dict(token)
    expected = [(name, value.encode()) for name, value in named.items()]

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
        who = _bearer_principal(scheme, credentials.strip(), expected)
        if who is _NOBODY:
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
        if who is not None:
            scope[PRINCIPAL_KEY] = who
        await app(scope, receive, send)

    return wrapped


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def host_header(host: str) -> str:
    """The bind address as it appears in a Host header (IPv6 in brackets)."""
    bare = host.strip("[]")
    try:
        if ipaddress.ip_address(bare).version == 6:
            return f"[{bare}]"
    except ValueError:
        pass
    return host.lower()


def allowed_hosts_for(
    host: str,
    port: int,
    *,
    extra_hosts: Sequence[str] = (),
    extra_origins: Sequence[str] = (),
) -> TransportSecuritySettings:
    """The Host/Origin checks (DNS-rebinding protection) for a server bound to host:port.

    The SDK turns them on by itself only when the bind address is exactly
    ``127.0.0.1``, ``localhost`` or ``::1``; `serve` turns them on for every bind.

    Allowed ``Host`` values: the bind address with the port (``127.0.0.2:8000``,
    ``[::1]:8000``); for a loopback bind also ``localhost``, ``127.0.0.1`` and
    ``[::1]``; for a wildcard bind (``0.0.0.0``, ``::``) the loopback names and this
    machine's host name; each without the port too when the port is 80; then
    ``extra_hosts`` verbatim (``name:port``, or ``name:*`` for any port). Allowed
    ``Origin`` values: ``http://`` + each derived host, then ``extra_origins`` verbatim.
    A request without an ``Origin`` (not from a browser) passes the Origin check.

    Args:
        host: The bind address.
        port: The port actually bound.
        extra_hosts: More ``Host`` values to accept (a reverse proxy's name ...).
        extra_origins: More ``Origin`` values to accept (``https://app.example``).
    """
    names = [host_header(host)]
    if is_loopback(host) or _is_wildcard(host):
        names += ["localhost", "127.0.0.1", "[::1]"]
    if _is_wildcard(host):
        names.append(socket.gethostname().lower())
    derived: list[str] = []
    for name in dict.fromkeys(names):
        derived.append(f"{name}:{port}")
        if port == 80:
            derived.append(name)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*derived, *extra_hosts],
        allowed_origins=[*(f"http://{h}" for h in derived), *extra_origins],
    )


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to host:port (port 0: any free port).

    Raises:
        ConfigError: the address cannot be bound.
    """
    try:
        info = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.set_inheritable(True)
    return sock


async def serve(
    server_factory: Callable[[list[BaseTool]], MCPServer[Any]],
    *,
    tools: Sequence[BaseTool] = (),
    toolset: AbstractAsyncContextManager[Any] | None = None,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | Mapping[str, str] | None = None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    on_ready: Callable[[str], None] | None = None,
    header_timeout: float | None = None,
) -> None:
    """Run a planexec MCP server until it is stopped.

    Over stdio, `planexec.mcp.stdio_guard` stands in front of the SDK's transport and
    answers every malformed request with a JSON-RPC error. Over HTTP, the Host/Origin
    checks of `allowed_hosts_for` apply to every bind.

    Args:
        server_factory: Builds the server from the tools (see `build_server`).
        tools: Local tools.
        toolset: An `MCPToolset` (or any async context manager with ``tools``) kept
            open while the server runs; its tools are added to ``tools``.
        http: Serve streamable HTTP at ``http://host:port/mcp`` instead of stdio.
        host: The address to bind (loopback by default).
        port: The port to bind (0: any free port; ``on_ready`` gets the one bound).
        token: Require this bearer token on every HTTP request; or a mapping of
            principals to their tokens (`planexec.mcp.principals`): each request's
            principal then owns the runs it starts.
        allowed_hosts: More ``Host`` header values to accept (see `allowed_hosts_for`).
        allowed_origins: More ``Origin`` header values to accept.
        on_ready: Called with the endpoint once the server listens.
        header_timeout: Seconds an HTTP request may take to complete its headers
            (`planexec.mcp.http_guard`; `HEADER_TIMEOUT` by default): a slower
            connection is closed, so held connections cannot exhaust the descriptors.

    Raises:
        ConfigError: the address cannot be bound.
    """
    async with toolset if toolset is not None else nullcontext() as opened:
        all_tools = list(tools) + (list(opened.tools) if opened is not None else [])
        server = server_factory(all_tools)
        if not http:
            from planexec.mcp.stdio_guard import run_guarded_stdio

            if on_ready:
                on_ready("stdio")
            await run_guarded_stdio(server)
            return
        sock = bind_socket(host, port)
        bound = int(sock.getsockname()[1])
        security = allowed_hosts_for(
            host, bound, extra_hosts=allowed_hosts, extra_origins=allowed_origins
        )
        app: Any = server.streamable_http_app(host=host, transport_security=security)
        if token:
            app = bearer_auth(app, token)
        from planexec.mcp import http_guard

        await http_guard.serve(
            app,
            sock,
            address=f"http://{host_header(host)}:{bound}/mcp",
            header_timeout=http_guard.HEADER_TIMEOUT if header_timeout is None else header_timeout,
            lifespan="on",
            on_ready=on_ready,
        )
