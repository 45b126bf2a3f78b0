"""Model specs: turn ``replay:PATH`` or ``provider:model`` into a chat model.

- ``replay:PATH`` — a JSON file holding a list of replies (or an object with a
  ``"replies"`` list), replayed **in call order** by `ReplayChatModel` (a
  `planexec.testing.ScriptedChatModel`); for demos and tests. The replies are not matched
  to requests: a run that takes another path than the recorded one (other limits, tools
  or config) gets replies meant for other calls, and a run that needs more replies than
  the file holds fails with a `ScriptExhaustedError` (and a loguru warning) saying so.
  To match replies by request, use a cassette. A regression cassette (an object with ``"format":
  "planexec-cassette"``) is handed to ``planexec.regress.cassette.load_cassette_model``.
- ``provider:model`` — a real model through its langchain integration package, e.g.
  ``openai:gpt-4o-mini`` (``langchain-openai``), ``anthropic:claude-sonnet-4-5``,
  ``ollama:llama3.1``. A missing package is a `MissingExtraError` naming the package.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from planexec._log import logger
from planexec.errors import ConfigError, MissingExtraError
from planexec.testing import ScriptedChatModel, ScriptExhaustedError

__all__ = [
    "PROVIDERS",
    "CASSETTE_FORMAT",
    "Provider",
    "ReplayChatModel",
    "load_model",
    "load_replies",
]

CASSETTE_FORMAT = "planexec-cassette"
"""The ``format`` value that marks a JSON file as a regression cassette."""


@dataclass(frozen=True)
class Provider:
    """A langchain integration package for one model provider."""

    module: str
    """The module to import, e.g. ``langchain_openai``."""
    cls: str
    """The chat model class in it."""
    package: str
    """The pip package that provides the module."""
    model_kwarg: str = "model"
    """The constructor argument that takes the model name."""


PROVIDERS: dict[str, Provider] = {
    "openai": Provider("langchain_openai", "ChatOpenAI", "langchain-openai"),
    "azure_openai": Provider(
        "langchain_openai", "AzureChatOpenAI", "langchain-openai", "azure_deployment"
    ),
    "anthropic": Provider("langchain_anthropic", "ChatAnthropic", "langchain-anthropic"),
    "ollama": Provider("langchain_ollama", "ChatOllama", "langchain-ollama"),
    "google_genai": Provider(
        "langchain_google_genai", "ChatGoogleGenerativeAI", "langchain-google-genai"
    ),
    "mistralai": Provider("langchain_mistralai", "ChatMistralAI", "langchain-mistralai"),
    "groq": Provider("langchain_groq", "ChatGroq", "langchain-groq"),
    "ibm": Provider("langchain_ibm", "ChatWatsonx", "langchain-ibm", "model_id"),
    "watsonx": Provider("langchain_ibm", "ChatWatsonx", "langchain-ibm", "model_id"),
}
"""Providers known to ``provider:model`` specs."""


def load_replies(path: str | Path) -> list[str]:
    """Read a replay file: a JSON list of replies, or an object with a ``replies`` list.

    Replies that are not strings (e.g. a JSON object meant as the reply's text) are
    written back as compact JSON.

    Raises:
        ConfigError: the file is missing, not JSON, or holds no list of replies.
    """
    data = _read_json(Path(path))
    return _replies_of(data, Path(path))


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"replay file {str(path)!r} cannot be read: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"replay file {str(path)!r} is not valid JSON: {exc}") from exc


def _read_yaml(path: Path) -> Any:
    """Read a YAML replay file (cassettes are YAML by default)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"replay file {str(path)!r} cannot be read: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"replay file {str(path)!r} is not valid YAML: {exc}") from exc


def _replies_of(data: Any, path: Path) -> list[str]:
    if isinstance(data, dict) and "replies" in data:
        data = data["replies"]
    if not isinstance(data, list):
        raise ConfigError(
            f"replay file {str(path)!r} must hold a JSON list of replies or an object "
            f'with a "replies" list, not {type(data).__name__}'
        )
    return [r if isinstance(r, str) else json.dumps(r, separators=(",", ":")) for r in data]


class ReplayChatModel(ScriptedChatModel):
    """The model of a ``replay:PATH`` spec: the file's replies, served in call order.

    Replies are not matched to requests (a cassette does that). When the run asks for
    more replies than the file holds, it logs a warning and raises `ScriptExhaustedError`
    naming the file and explaining why that happens.
    """

    path: str = ""
    """The replay file, for messages."""

    def _next(self, messages: list[BaseMessage]) -> str:
        try:
            return super()._next(messages)
        except ScriptExhaustedError as exc:
            n = len(self.replies)
            message = (
                f"replay file {self.path!r} holds {n} replies, consumed in call order, and "
                f"the run asked for reply {self.calls}. Replay files are not matched to "
                "requests: a run that takes another path than the recorded one (other "
                "limits, config or tools) gets replies meant for other calls and runs out. "
                "Record a cassette (format planexec-cassette, see docs/regression.md) to "
                "match replies by request."
            )
            logger.warning(message)
            raise ScriptExhaustedError(f"{message}\n{exc}") from None


def _load_replay(path_text: str) -> BaseChatModel:
    path = Path(path_text).expanduser()
    data = _read_yaml(path) if path.suffix.lower() in (".yaml", ".yml") else _read_json(path)
    if isinstance(data, dict) and data.get("format") == CASSETTE_FORMAT:
        try:
            cassette = importlib.import_module("planexec.regress.cassette")
        except ImportError as exc:
            raise ConfigError(
                f"{str(path)!r} is a regression cassette, and cassette support "
                f"(planexec.regress.cassette) is not available: {exc}"
            ) from exc
        model: BaseChatModel = cassette.load_cassette_model(path)
        return model
    return ReplayChatModel(
        replies=list(_replies_of(data, path)), name_=f"replay:{path}", path=str(path)
    )


def _load_provider(provider: str, model_name: str) -> BaseChatModel:
    info = PROVIDERS.get(provider.lower())
    if info is None:
        known = ", ".join(sorted(PROVIDERS))
        raise ConfigError(
            f"unknown model provider {provider!r} in '{provider}:{model_name}'; "
            f"known providers: {known}, or replay:PATH"
        )
    if importlib.util.find_spec(info.module) is None:
        raise MissingExtraError(
            f"model '{provider}:{model_name}' needs the {info.package!r} package "
            f"(module {info.module}): pip install {info.package}",
            module=info.module,
            install=info.package,
        )
    module = importlib.import_module(info.module)
    cls = getattr(module, info.cls, None)
    if cls is None:
        raise ConfigError(f"{info.module} has no {info.cls}: upgrade {info.package}")
    try:
        model = cls(**{info.model_kwarg: model_name})
    except Exception as exc:  # noqa: BLE001 - provider constructors raise anything
        raise ConfigError(
            f"could not create {info.cls}({info.model_kwarg}={model_name!r}): {exc}"
        ) from exc
    if not isinstance(model, BaseChatModel):
        raise ConfigError(f"{info.module}.{info.cls} is not a langchain-core chat model")
    return model


def load_model(spec: str) -> BaseChatModel:
    """Build a chat model from a spec.

    Args:
        spec: ``replay:PATH`` or ``provider:model`` (``openai:gpt-4o-mini``,
            ``anthropic:...``, ``ollama:...``, ``google_genai:...``, ``mistralai:...``,
            ``groq:...``, ``ibm:...``/``watsonx:...``, ``azure_openai:DEPLOYMENT``).

    Raises:
        MissingExtraError: the provider's langchain package is not installed (the
            message names it).
        ConfigError: the spec is malformed, the provider unknown, or the replay file
            unusable.
    """
    kind, sep, rest = spec.partition(":")
    if not sep or not kind.strip() or not rest.strip():
        raise ConfigError(
            f"expected a model spec like 'replay:PATH' or 'openai:gpt-4o', got {spec!r}"
        )
    kind, rest = kind.strip(), rest.strip()
    if kind == "replay":
        return _load_replay(rest)
    return _load_provider(kind, rest)
