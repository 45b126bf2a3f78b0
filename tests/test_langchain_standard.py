"""langchain's own standard suites (``langchain-tests``) over planexec's fake chat models.

Each fake of `planexec.testing` keeps the contract of a langchain chat model: the unit
suite (``ChatModelUnitTests``) and the integration suite (``ChatModelIntegrationTests``,
which needs no network here: the models are fakes) run over every one. The capability
flags say honestly what each fake does: a text-only fake has no tool calling and no
structured output; `StreamingModel` binds tools (its reply is a call of the first
bound tool).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import BaseMessage  # noqa: E402
from langchain_tests.integration_tests import ChatModelIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import ChatModelUnitTests  # noqa: E402

from planexec.testing import (  # noqa: E402
    FunctionChatModel,
    FunctionModel,
    ModelCall,
    ScriptedChatModel,
    StreamingModel,
)

USAGE = {"input_tokens": 7, "output_tokens": 3}


def _reply(call: ModelCall, messages: list[BaseMessage]) -> str:
    return "Hello! I am a fake model."


def _text(messages: list[BaseMessage]) -> str:
    return "Hello! I am a fake model."


def _joke(call: ModelCall, messages: list[BaseMessage]) -> Any:
    """The value langchain's structured-output tests ask for (a ``Joke``)."""
    return {"setup": "Why did the cat sit on the computer?", "punchline": "To watch the mouse."}


# What the integration suite's tool-calling questions ask for, as a model would answer
# them. (The suite is langchain's: its questions are the only thing to answer by. The
# fake's reply to a call with tools bound is a call of the tool, with these arguments.)
SUITE_ANSWERS: list[tuple[str, Any]] = [
    ("magic_function_no_args()", {}),
    ("magic_function(3)", {"input": 3}),
    ("Pirate greeting", {"answer_style": "pirate"}),
    ("weather in San Francisco", {"location": "San Francisco, CA"}),
    ("Hello!", {"input": 3}),  # tool_choice: magic_function, or "any" (the first: the same)
]


def _suite(call: ModelCall, messages: list[BaseMessage]) -> Any:
    question = next((m.text for m in reversed(messages) if m.type == "human"), "")
    customer = re.search(r"Create a customer named '([^']+)'", question)
    if customer and messages[-1].type == "human":
        return {"customer_name": customer.group(1), "description": "A company"}
    if "joke" in question:
        return _joke(call, messages)
    for words, answer in SUITE_ANSWERS:
        if words in question and messages[-1].type == "human":
            return answer
    return "Hello! I am a fake model."


class _Fake:
    """What every fake does: it answers as the model a call names (``model=...``)."""

    @property
    def model_override_value(self) -> str:
        return "planexec-fake-override"


class _TextOnly(_Fake):
    """Flags of a text-only fake: no tools, no structured output, no media."""

    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_tool_choice(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def supports_json_mode(self) -> bool:
        return False


# --------------------------------------------------------------------------- ScriptedChatModel


class TestScriptedChatModelUnit(_TextOnly, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ScriptedChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"replies": ["Hello! I am a fake model."], "repeat_last": True, "usage": USAGE}


class TestScriptedChatModelIntegration(_TextOnly, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ScriptedChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"replies": ["Hello! I am a fake model."], "repeat_last": True, "usage": USAGE}


# --------------------------------------------------------------------------- FunctionChatModel


class TestFunctionChatModelUnit(_TextOnly, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FunctionChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _text, "usage": USAGE}


class TestFunctionChatModelIntegration(_TextOnly, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FunctionChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _text, "usage": USAGE}


# --------------------------------------------------------------------------- FunctionModel


class TestFunctionModelUnit(_TextOnly, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FunctionModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _reply, "usage": USAGE}


class TestFunctionModelIntegration(_TextOnly, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FunctionModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _reply, "usage": USAGE}


# --------------------------------------------------------------------------- structured fakes


class _Structured(_Fake):
    """Flags of `FunctionModel(structured=True)`: native structured output, no tools."""

    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_tool_choice(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True


class TestStructuredFunctionModelUnit(_Structured, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FunctionModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _joke, "structured": True, "usage": USAGE}


class TestStructuredFunctionModelIntegration(_Structured, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return FunctionModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _joke, "structured": True, "usage": USAGE}


# --------------------------------------------------------------------------- StreamingModel


class _Streaming(_Fake):
    """Flags of `StreamingModel`: it binds tools (the reply calls one); structured
    output only with ``structured=True``."""

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def supports_json_mode(self) -> bool:
        return False


class TestStreamingModelUnit(_Streaming, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return StreamingModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _suite, "usage": USAGE, "tokens_per_chunk": 2}


class TestStreamingModelIntegration(_Streaming, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return StreamingModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _suite, "usage": USAGE, "tokens_per_chunk": 2}


class _StreamingStructured(_Streaming):
    @property
    def has_structured_output(self) -> bool:
        return True


class TestStructuredStreamingModelUnit(_StreamingStructured, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return StreamingModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _suite, "structured": True, "usage": USAGE, "tokens_per_chunk": 2}


class TestStructuredStreamingModelIntegration(_StreamingStructured, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return StreamingModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"function": _suite, "structured": True, "usage": USAGE, "tokens_per_chunk": 2}
