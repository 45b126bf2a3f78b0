"""Exceptions carry the data a caller decides on, not only a message."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage

from planexec._loading import load_object
from planexec._models import ModelClient
from planexec.errors import ModelError, RunNotFoundError, ToolLoadError
from planexec.store import MemoryRunStore
from planexec.testing import FunctionChatModel


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
