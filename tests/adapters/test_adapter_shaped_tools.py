"""Tools shaped exactly like langchain-mcp-adapters 0.3.2 builds them, built by hand.

The adapter (``langchain_mcp_adapters.tools.convert_mcp_tool_to_langchain_tool``) makes a
``StructuredTool`` with ``response_format="content_and_artifact"``, the MCP tool's
annotations dumped into ``metadata`` (``{"title": ..., "readOnlyHint": ..., ...}``), a
coroutine returning ``(content_blocks, {"structured_content": ...} | None)``, and raising
a ``ToolException`` subclass (turned back into content blocks by ``handle_tool_error``)
when the server answers ``isError``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ToolCallError
from planexec.results import StepStatus
from planexec.tools import ToolCatalog, ToolHints, invoke_tool, normalize_output


class _MCPToolExecutionError(ToolException):
    """As the adapter's: carries the content blocks of an ``isError`` result."""

    def __init__(self, tool_content: list[dict[str, Any]]) -> None:
        super().__init__(tool_content)
        self.tool_content = tool_content


def _handle_error(error: ToolException) -> Any:
    if isinstance(error, _MCPToolExecutionError):
        return error.tool_content
    raise error


def adapter_tool(name: str, annotations: dict[str, Any] | None, outputs: list[Any],
                 schema: dict[str, Any] | None = None) -> tuple[BaseTool, list[dict[str, Any]]]:
    """An adapter-shaped tool answering ``outputs`` in turn (an Exception is ``isError``)."""
    seen: list[dict[str, Any]] = []

    async def call_tool(**arguments: Any) -> tuple[Any, Any]:
        seen.append(arguments)
        out = outputs[min(len(seen), len(outputs)) - 1]
        if isinstance(out, Exception):
            raise _MCPToolExecutionError([{"type": "text", "text": str(out)}])
        import json
        blocks = [{"type": "text", "text": json.dumps(out)}]
        return blocks, {"structured_content": out}

    metadata = {"title": None, "openWorldHint": None, **annotations} if annotations else None
    return StructuredTool(
        name=name,
        description=f"the {name} tool",
        args_schema=schema or {"type": "object", "properties": {}},
        coroutine=call_tool,
        response_format="content_and_artifact",
        metadata=metadata,
        handle_tool_error=_handle_error,  # type: ignore[arg-type]
    ), seen


SITE_SCHEMA = {"type": "object", "properties": {"site_name": {"type": "string"}},
               "required": ["site_name"]}
SENSOR_SCHEMA = {"type": "object",
                 "properties": {"site_name": {"type": "string"}, "asset_id": {"type": "string"}},
                 "required": ["site_name", "asset_id"]}

PLAN = """#Task1: List the assets at MAIN.
#Tool1: assets
#Args1: {"site_name": "MAIN"}
#Dependency1: None

#Task2: Get the sensors of the first asset.
#Tool2: sensors
#Args2: {"site_name": "MAIN", "asset_id": "{step_1.assets[0].id}"}
#Dependency2: #S1
"""

RETRY = AgentConfig.from_dict({
    "planner": {"max_reprompts": 0},
    "executor": {"tool_retry": {"attempts": 2, "base_delay": 0.0, "jitter": 0.0}},
    "recovery": {"max_replans": 0},
})


def test_mcp_annotations_in_metadata_are_the_tools_hints() -> None:
    read, _ = adapter_tool("read", {"readOnlyHint": True, "destructiveHint": False}, [{}])
    idem, _ = adapter_tool("idem", {"idempotentHint": True, "readOnlyHint": False}, [{}])
    snake, _ = adapter_tool("snake", {"read_only_hint": True}, [{}])
    wipe, _ = adapter_tool("wipe", {"destructiveHint": True, "idempotentHint": True}, [{}])
    bare, _ = adapter_tool("bare", None, [{}])
    catalog = ToolCatalog([read, idem, snake, wipe, bare])
    assert [catalog.get(n).hints.safe for n in ("read", "idem", "snake", "wipe", "bare")] == [
        True, True, True, False, False]
    assert catalog.get("read").hints == ToolHints(read_only=True, destructive=False)


def test_planexec_hints_override_the_mcp_annotations() -> None:
    t, _ = adapter_tool("t", {"readOnlyHint": True}, [{}])
    t.metadata = {**(t.metadata or {}), "planexec": {"read_only": False}}
    assert not ToolCatalog([t]).get("t").hints.safe
    assert not ToolCatalog([t], hints={"t": {"readOnlyHint": False}}).get("t").hints.safe


async def test_the_structured_content_of_an_adapter_tool_is_its_output() -> None:
    data = {"assets": [{"id": "CH-6"}]}
    t, _ = adapter_tool("assets", {"readOnlyHint": True}, [data])
    raw = await invoke_tool(ToolCatalog([t]).get("assets"), {})
    assert normalize_output(raw)[0] == data
    # The adapter's coroutine answers the (content, artifact) pair.
    assert normalize_output(await t.coroutine())[0] == data  # type: ignore[misc]
    message = ToolMessage(content="x", artifact={"structured_content": data}, tool_call_id="1")
    assert normalize_output(message)[0] == data


def test_a_pair_without_structured_content_gives_its_text() -> None:
    assert normalize_output(([{"type": "text", "text": '{"a": 1}'}], None))[0] == {"a": 1}
    # A plain tuple is still a list; a dict with more than the artifact's key is kept.
    assert normalize_output((1, 2))[0] == [1, 2]
    both = {"structured_content": 1, "other": 2}
    assert normalize_output(both)[0] == both


async def test_a_path_reference_follows_an_adapter_tools_structured_content() -> None:
    assets, _ = adapter_tool("assets", {"readOnlyHint": True},
                             [{"assets": [{"id": "CH-6"}, {"id": "CH-7"}]}], SITE_SCHEMA)
    sensors, seen = adapter_tool("sensors", {"readOnlyHint": True},
                                 [{"sensors": ["temp"]}], SENSOR_SCHEMA)
    run = await PlanExecuteAgent(None, [assets, sensors], config=RETRY).execute_plan(PLAN)
    assert [r.status for r in run.results] == [StepStatus.SUCCEEDED, StepStatus.SUCCEEDED]
    assert seen == [{"site_name": "MAIN", "asset_id": "CH-6"}]
    assert run.results[1].output == {"sensors": ["temp"]}


async def test_only_safe_adapter_tools_are_retried() -> None:
    """An adapter's error result carries no class a retry could be judged by (by default
    it is not retried): both tools here say theirs are retryable (``retry_on``), and
    still only the safe one is called again."""
    outputs: list[Any] = [RuntimeError("503 busy"), {"sensors": ["temp"]}]
    retryable = {"planexec": {"retry_on": ToolCallError}}
    assets, _ = adapter_tool("assets", {"readOnlyHint": True},
                             [{"assets": [{"id": "CH-6"}]}], SITE_SCHEMA)
    safe, safe_seen = adapter_tool("sensors", {"readOnlyHint": True, **retryable}, outputs,
                                   SENSOR_SCHEMA)
    run = await PlanExecuteAgent(None, [assets, safe], config=RETRY).execute_plan(PLAN)
    assert run.results[1].status is StepStatus.SUCCEEDED and len(safe_seen) == 2

    unsafe, unsafe_seen = adapter_tool("sensors", {"readOnlyHint": False,
                                                   "destructiveHint": True, **retryable},
                                       outputs, SENSOR_SCHEMA)
    run = await PlanExecuteAgent(None, [assets, unsafe], config=RETRY).execute_plan(PLAN)
    assert run.results[1].status is StepStatus.FAILED and len(unsafe_seen) == 1
    assert "503 busy" in (run.results[1].error or "")
