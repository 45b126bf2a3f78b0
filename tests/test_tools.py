from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from pydantic import BaseModel, ValidationError, field_validator

from planexec.errors import ToolLoadError
from planexec.testing import fake_tool
from planexec.tools import (
    AmbiguousToolError,
    ToolCallError,
    ToolCatalog,
    ToolHints,
    error_payload,
    invoke_tool,
    load_tools,
    normalize_output,
)


@tool
def history(site_name: str, asset_id: str, start: str, final: str | None = None) -> dict[str, Any]:
    """Sensor history of an asset."""
    return {"site": site_name, "asset": asset_id, "start": start, "final": final}


@tool(response_format="content_and_artifact")
def report(asset_id: str) -> tuple[str, dict[str, Any]]:
    """A report with a text summary and a structured artifact."""
    return f"report for {asset_id}", {"asset_id": asset_id, "rows": [1, 2, 3]}


def on_server(t: BaseTool, server: str) -> BaseTool:
    t.metadata = {**(t.metadata or {}), "planexec": {"server": server}}
    return t


class DictSchemaTool(BaseTool):
    """A tool whose args schema is a JSON schema dict (as MCP adapters build them)."""

    name: str = "lookup"
    description: str = "Look up an asset."
    args_schema: Any = {
        "type": "object",
        "properties": {"asset_id": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["asset_id"],
    }

    def _run(self, **kwargs: Any) -> Any:
        return dict(kwargs)


# -- hints ---------------------------------------------------------------------------


def test_hints_are_unknown_by_default_and_unknown_is_not_safe() -> None:
    hints = ToolCatalog([fake_tool("t")]).get("t").hints
    assert hints == ToolHints(None, None, None)
    assert not hints.safe


@pytest.mark.parametrize(
    ("hints", "safe"),
    [
        (ToolHints(read_only=True), True),
        (ToolHints(idempotent=True), True),
        (ToolHints(read_only=True, destructive=True), False),
        (ToolHints(destructive=False), False),
        (ToolHints(read_only=False, idempotent=False), False),
    ],
)
def test_a_tool_is_safe_when_read_only_or_idempotent_and_not_destructive(
    hints: ToolHints, safe: bool
) -> None:
    assert hints.safe is safe


def test_hints_come_from_tool_metadata() -> None:
    catalog = ToolCatalog([fake_tool("t", hints={"read_only": True})])
    assert catalog.get("t").hints.read_only is True
    assert catalog.get("t").hints.safe


def test_explicit_hints_override_metadata_and_accept_mcp_spelling() -> None:
    catalog = ToolCatalog(
        [fake_tool("t", hints={"read_only": True})],
        hints={"t": {"readOnlyHint": False, "destructiveHint": True}},
    )
    assert catalog.get("t").hints == ToolHints(read_only=False, destructive=True)


# -- specs -----------------------------------------------------------------------------


def test_a_decorated_tool_gives_arg_names_in_schema_order_required_and_a_signature() -> None:
    spec = ToolCatalog([history]).get("history")
    assert spec.arg_names == ["site_name", "asset_id", "start", "final"]
    assert spec.required == ["site_name", "asset_id", "start"]
    assert spec.signature() == "history(site_name: str, asset_id: str, start: str, final: str?)"
    assert spec.description == "Sensor history of an asset."
    assert spec.json_schema["required"] == ["site_name", "asset_id", "start"]
    assert spec.qualified_name == "history"


def test_a_structured_tool_is_cataloged() -> None:
    st = StructuredTool.from_function(lambda n: n * 2, name="double", description="Double n.")
    spec = ToolCatalog([st]).get("double")
    assert spec.arg_names == ["n"]


def test_a_tool_with_a_json_schema_dict_gets_a_pydantic_model_for_validation() -> None:
    catalog = ToolCatalog([DictSchemaTool()])
    spec = catalog.get("lookup")
    assert spec.arg_names == ["asset_id", "limit"]
    assert spec.required == ["asset_id"]
    assert spec.signature() == "lookup(asset_id: str, limit: int?)"
    assert catalog.validate("lookup", {"asset_id": "A1", "limit": "3"}) == {
        "asset_id": "A1",
        "limit": 3,
    }
    with pytest.raises(ValidationError):
        catalog.validate("lookup", {"limit": 3})


# -- catalog lookups -----------------------------------------------------------------


def test_the_catalog_lists_gets_and_counts_its_tools() -> None:
    catalog = ToolCatalog([history, fake_tool("sites")])
    assert catalog.names() == ["history", "sites"]
    assert len(catalog) == 2
    assert [s.name for s in catalog] == ["history", "sites"]
    assert [s.name for s in catalog.specs()] == ["history", "sites"]
    assert catalog.has("sites") and not catalog.has("site")
    assert catalog.lookup("nope") is None
    assert catalog.required_args("history") == ["site_name", "asset_id", "start"]
    assert catalog.arg_names("history") == ["site_name", "asset_id", "start", "final"]


def test_an_unknown_tool_raises_key_error_with_suggestions() -> None:
    catalog = ToolCatalog([history, fake_tool("sites")])
    with pytest.raises(KeyError, match="did you mean sites"):
        catalog.get("site")
    assert catalog.suggest("histroy") == ["history"]
    assert catalog.suggest("Sites")[0] == "sites"
    assert catalog.suggest("zzzzzz") == []


def test_a_server_qualified_name_finds_the_tool() -> None:
    catalog = ToolCatalog([on_server(fake_tool("sites"), "iot")])
    assert catalog.names() == ["iot.sites"]
    assert catalog.get("iot.sites").server == "iot"
    assert catalog.get("sites", server="iot").qualified_name == "iot.sites"
    assert catalog.get("sites").qualified_name == "iot.sites"
    assert not catalog.has("sites", server="wo")


def test_a_server_named_by_the_plan_matches_a_tool_without_a_server() -> None:
    catalog = ToolCatalog([fake_tool("sites")])
    assert catalog.get("sites", server="IoTAgent").name == "sites"


def test_a_name_on_two_servers_must_be_qualified() -> None:
    catalog = ToolCatalog(
        [on_server(fake_tool("sites"), "iot"), on_server(fake_tool("sites"), "wo")]
    )
    assert catalog.has("sites")
    with pytest.raises(AmbiguousToolError) as info:
        catalog.get("sites")
    assert "iot.sites" in str(info.value) and "wo.sites" in str(info.value)
    assert isinstance(info.value, KeyError)
    with pytest.raises(AmbiguousToolError):
        catalog.lookup("sites")
    assert catalog.get("wo.sites").server == "wo"
    assert catalog.get("sites", server="iot").server == "iot"


def test_the_same_name_twice_on_one_server_is_a_load_error() -> None:
    with pytest.raises(ToolLoadError, match="duplicate tool 'sites'"):
        ToolCatalog([fake_tool("sites"), fake_tool("sites")])


def test_validate_returns_the_given_arguments_validated() -> None:
    catalog = ToolCatalog([history])
    args = {"site_name": "MAIN", "asset_id": "A1", "start": "2024-01-01"}
    assert catalog.validate("history", args) == args


def test_validate_rejects_a_missing_argument_and_an_unknown_one() -> None:
    catalog = ToolCatalog([history])
    with pytest.raises(ValidationError) as info:
        catalog.validate("history", {"site_name": "MAIN", "asset_id": "A1", "colour": "red"})
    errors = {(e["loc"][0], e["type"]) for e in info.value.errors()}
    assert ("start", "missing") in errors
    assert ("colour", "extra_forbidden") in errors


# -- load_tools ----------------------------------------------------------------------


@pytest.fixture
def tool_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = "planexec_test_toolmod"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from planexec.testing import fake_tool
            TOOLS = [fake_tool("a"), fake_tool("b")]
            TUPLE = (fake_tool("c"),)
            def make():
                return [fake_tool("d")]
            def broken():
                raise RuntimeError("no database")
            NOT_A_LIST = fake_tool("e")
            MIXED = [fake_tool("f"), print]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_load_tools_accepts_a_list_a_tuple_and_a_factory(tool_module: str) -> None:
    assert [t.name for t in load_tools(f"{tool_module}:TOOLS")] == ["a", "b"]
    assert [t.name for t in load_tools(f"{tool_module}:TUPLE")] == ["c"]
    assert [t.name for t in load_tools(f"{tool_module}:make")] == ["d"]


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("broken", "calling it failed"),
        ("NOT_A_LIST", "expected a list"),
        ("MIXED", "item 1 is not a langchain-core tool"),
        ("MISSING", "has no attribute"),
    ],
)
def test_load_tools_fails_clearly(tool_module: str, attr: str, message: str) -> None:
    with pytest.raises(ToolLoadError, match=message):
        load_tools(f"{tool_module}:{attr}")


def test_load_tools_rejects_a_malformed_spec() -> None:
    with pytest.raises(ToolLoadError, match="MODULE:ATTR"):
        load_tools("no_colon_here")


# -- invoking and outputs ------------------------------------------------------------


async def test_invoke_tool_returns_the_tools_structured_output() -> None:
    spec = ToolCatalog([history]).get("history")
    out = await invoke_tool(spec, {"site_name": "MAIN", "asset_id": "A1", "start": "s"})
    assert out == {"site": "MAIN", "asset": "A1", "start": "s", "final": None}


async def test_a_content_and_artifact_tool_gives_its_artifact() -> None:
    spec = ToolCatalog([report]).get("report")
    assert await invoke_tool(spec, {"asset_id": "A1"}) == {"asset_id": "A1", "rows": [1, 2, 3]}


async def test_a_fake_async_tool_is_awaited_and_records_the_call() -> None:
    t = fake_tool("sites", ["MAIN"], args={"limit": int})
    assert await invoke_tool(ToolCatalog([t]).get("sites"), {"limit": 2}) == ["MAIN"]
    assert t.metadata is not None and t.metadata["calls"].calls == [{"limit": 2}]


async def test_a_tool_exception_propagates() -> None:
    t = fake_tool("boom", error="database down")
    with pytest.raises(RuntimeError, match="database down"):
        await invoke_tool(ToolCatalog([t]).get("boom"), {})


async def test_a_tool_that_hides_its_errors_as_text_raises_tool_call_error() -> None:
    t = fake_tool("boom", error=ToolException("database down"))
    t.handle_tool_error = True
    with pytest.raises(ToolCallError, match="database down"):
        await invoke_tool(ToolCatalog([t]).get("boom"), {})


class Reading(BaseModel):
    sensor: str
    value: float


@pytest.mark.parametrize("raw", [{"a": 1}, [1, 2], Reading(sensor="t", value=1.0)])
def test_structured_outputs_keep_their_structure(raw: Any) -> None:
    structured, kept = normalize_output(raw)
    assert structured is raw and kept is raw


def test_a_json_string_is_parsed_and_its_text_kept() -> None:
    assert normalize_output('  {"a": [1, 2]} ') == ({"a": [1, 2]}, '  {"a": [1, 2]} ')
    assert normalize_output("[1, 2]") == ([1, 2], "[1, 2]")


@pytest.mark.parametrize("text", ["hello", "42", "{not json", "null", ""])
def test_other_strings_stay_strings(text: str) -> None:
    assert normalize_output(text) == (text, text)


def test_a_tool_message_gives_its_artifact_or_its_content() -> None:
    with_artifact = ToolMessage("summary", artifact={"rows": 3}, tool_call_id="1")
    assert normalize_output(with_artifact) == ({"rows": 3}, {"rows": 3})
    blocks = ToolMessage(content=[{"type": "text", "text": '{"a": 1}'}], tool_call_id="1")
    assert normalize_output(blocks) == ({"a": 1}, '{"a": 1}')


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ({"error": "site not found"}, "site not found"),
        ({"error": {"code": 404}}, '{"code":404}'),
        ({"error": None, "data": 1}, None),
        ({"error": ""}, None),
        ({"data": 1}, None),
        ("error: text is not a payload", None),
        ([{"error": "in a list"}], None),
        ({"isError": True, "content": [{"type": "text", "text": "bad asset"}]}, "bad asset"),
        ({"is_error": True, "content": "bad asset"}, "bad asset"),
        ({"isError": False, "content": []}, None),
    ],
)
def test_error_payloads_are_recognised(output: Any, expected: str | None) -> None:
    assert error_payload(output) == expected


def test_error_payload_keys_are_configurable_and_models_are_read() -> None:
    class Out(BaseModel):
        failure: str | None = None

    assert error_payload({"failure": "x"}, keys=("failure",)) == "x"
    assert error_payload({"failure": "x"}) is None
    assert error_payload(Out(failure="down"), keys=("failure",)) == "down"


class Limits(BaseModel):
    model_config = {"extra": "allow"}

    limit: int

    @field_validator("limit")
    @classmethod
    def positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("limit must be positive")
        return v


def test_validation_uses_the_tools_own_schema_with_its_validators_and_config() -> None:
    t = StructuredTool.from_function(
        lambda **kw: kw, name="capped", description="Capped.", args_schema=Limits
    )
    catalog = ToolCatalog([t])
    with pytest.raises(ValidationError, match="limit must be positive"):
        catalog.validate("capped", {"limit": 0})
    assert catalog.get("capped").allows_extra_args
    assert catalog.validate("capped", {"limit": 1, "other": 2}) == {"limit": 1, "other": 2}
