"""Exceptions carry the data a caller decides on, not only a message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import ToolException

from planexec._loading import load_object
from planexec._models import ModelClient
from planexec.errors import (
    AmbiguousToolError,
    CassetteMissError,
    MissingExtraError,
    ModelError,
    RunNotFoundError,
    ToolCallError,
    ToolLoadError,
    ToolOutputError,
    require_extra,
)
from planexec.regress.cassette import CassetteChatModel
from planexec.schemas import InvalidSchemaError, schema_validator
from planexec.store import MemoryRunStore
from planexec.testing import FunctionChatModel, ScriptedChatModel, fake_tool
from planexec.tools import ToolCatalog, check_output, invoke_tool


def test_a_missing_run_names_its_id() -> None:
    with pytest.raises(RunNotFoundError) as caught:
        MemoryRunStore().get_run("nope")
    assert caught.value.run_id == "nope"


@pytest.mark.parametrize("spec", ["no_colon", "planexec_no_such_module:X", "planexec:no_such"])
def test_a_tool_load_error_names_its_source(spec: str) -> None:
    with pytest.raises(ToolLoadError) as caught:
        load_object(spec)
    assert caught.value.source == spec


async def test_a_model_error_names_the_call_s_purpose() -> None:
    def fail(_: list[BaseMessage]) -> Any:
        raise RuntimeError("provider down")

    client = ModelClient(FunctionChatModel(function=fail))
    with pytest.raises(ModelError) as caught:
        await client.complete([HumanMessage("hi")], purpose="plan")
    assert caught.value.purpose == "plan"


async def test_a_tool_call_error_names_the_tool_and_keeps_its_content() -> None:
    t = fake_tool("boom", error=ToolException("database down"))
    t.handle_tool_error = True
    with pytest.raises(ToolCallError) as caught:
        await invoke_tool(ToolCatalog([t]).get("boom"), {})
    assert caught.value.tool == "boom"
    assert caught.value.content == "database down"
    assert isinstance(caught.value, RuntimeError)  # `except RuntimeError` still catches it


def test_an_output_over_the_limit_says_its_size_and_the_limit() -> None:
    with pytest.raises(ToolOutputError) as text:
        check_output("abcd", limit=3)
    assert (text.value.size, text.value.limit) == (4, 3)
    assert isinstance(text.value, ValueError)
    with pytest.raises(ToolOutputError) as data:  # its JSON, counted to just over the limit
        check_output(["abcdef", "g"], limit=3)
    assert data.value.limit == 3 and data.value.size is not None and data.value.size > 3


def test_an_output_refused_for_its_shape_has_no_size() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ToolOutputError) as caught:
        check_output(cycle)
    assert (caught.value.size, caught.value.limit) == (None, None)


def test_an_ambiguous_tool_lists_the_candidates() -> None:
    a, b = fake_tool("history", 1), fake_tool("history", 2)
    a.metadata = {**(a.metadata or {}), "planexec": {"server": "iot"}}
    b.metadata = {**(b.metadata or {}), "planexec": {"server": "wo"}}
    with pytest.raises(AmbiguousToolError) as caught:
        ToolCatalog([a, b]).get("history")
    assert caught.value.name == "history"
    assert sorted(caught.value.candidates) == ["iot.history", "wo.history"]
    assert isinstance(caught.value, KeyError)


def test_a_missing_extra_names_the_module_and_what_to_install() -> None:
    with pytest.raises(MissingExtraError) as caught:
        require_extra("planexec_no_such_module", "otel")
    assert caught.value.module == "planexec_no_such_module"
    assert caught.value.name == "planexec_no_such_module"  # ImportError's own field
    assert caught.value.install == "planexec[otel]"


def test_an_invalid_schema_says_where() -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        schema_validator({"type": "object", "properties": {"n": {"minimum": "ten"}}})
    assert caught.value.where == "properties/n/minimum"
    assert isinstance(caught.value, ValueError)


def test_a_cassette_miss_says_the_key_and_how_often_it_was_recorded(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    recorder = CassetteChatModel(path, mode="record", inner=ScriptedChatModel(replies=["a"]))
    recorder.invoke("hello")
    replay = CassetteChatModel(path)
    assert replay.invoke("hello").content == "a"
    with pytest.raises(CassetteMissError) as again:
        replay.invoke("hello")
    assert again.value.recorded == 1 and again.value.key
    with pytest.raises(CassetteMissError) as other:
        replay.invoke("something else")
    assert other.value.recorded == 0 and other.value.key not in (None, again.value.key)
