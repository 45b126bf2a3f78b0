from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from planexec.errors import ConfigError, MissingExtraError
from planexec.models import PROVIDERS, load_model, load_replies
from planexec.testing import ScriptedChatModel


def write(tmp_path: Path, data: Any, name: str = "replies.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_replay_file_replays_its_replies_in_order(tmp_path: Path) -> None:
    path = write(tmp_path, ["first", {"site": "MAIN"}])
    model = load_model(f"replay:{path}")
    assert isinstance(model, ScriptedChatModel)
    assert model.invoke("a").content == "first"
    assert model.invoke("b").content == '{"site":"MAIN"}'


def test_a_used_up_replay_file_warns_and_says_replies_go_in_call_order(tmp_path: Path) -> None:
    from loguru import logger

    from planexec.testing import ScriptExhaustedError

    path = write(tmp_path, ["only"])
    model = load_model(f"replay:{path}")
    assert model.invoke("a").content == "only"
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        with pytest.raises(ScriptExhaustedError) as info:
            model.invoke("b")
    finally:
        logger.remove(sink)
    message = str(info.value)
    assert str(path) in message and "holds 1 replies, consumed in call order" in message
    assert "asked for reply 2" in message and "planexec-cassette" in message
    assert len(warnings) == 1 and "consumed in call order" in warnings[0]


@pytest.mark.parametrize("command", ["ask", "run"])
def test_the_model_help_says_replay_files_go_in_call_order(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from planexec.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "consumed in call order" in help_text and "planexec-cassette" in help_text


def test_a_replay_object_with_a_replies_key_works_too(tmp_path: Path) -> None:
    path = write(tmp_path, {"replies": ["only"], "comment": "recorded by hand"})
    assert load_replies(path) == ["only"]
    assert load_model(f"replay:{path}").invoke("x").content == "only"


def test_a_replay_file_without_a_list_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, {"answers": []})
    with pytest.raises(ConfigError, match="list of replies"):
        load_model(f"replay:{path}")


def test_a_missing_or_broken_replay_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_model(f"replay:{tmp_path / 'nope.json'}")
    bad = tmp_path / "bad.json"
    bad.write_text("[1,", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(f"replay:{bad}")


def test_a_cassette_is_handed_to_the_regress_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"format": "planexec-cassette", "interactions": []})
    sentinel = ScriptedChatModel(replies=["from cassette"])
    seen: list[Path] = []

    def load_cassette_model(p: Path) -> ScriptedChatModel:
        seen.append(Path(p))
        return sentinel

    fake = types.ModuleType("planexec.regress.cassette")
    fake.load_cassette_model = load_cassette_model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "planexec.regress.cassette", fake)
    assert load_model(f"replay:{path}") is sentinel
    assert seen == [path]


@pytest.mark.parametrize("spec", ["gpt-4o", "replay:", ":model", ""])
def test_a_malformed_spec_is_a_config_error(spec: str) -> None:
    with pytest.raises(ConfigError, match="model spec"):
        load_model(spec)


def test_an_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown model provider 'nope'.*openai"):
        load_model("nope:some-model")


def test_a_missing_integration_package_is_named_with_its_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "langchain_anthropic" else real(name, *a),
    )
    with pytest.raises(MissingExtraError, match="pip install langchain-anthropic"):
        load_model("anthropic:claude-sonnet-4-5")


def test_an_installed_provider_builds_its_chat_model(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []

    class ChatWatsonx(ScriptedChatModel):
        def __init__(self, **kw: Any) -> None:
            built.append(kw)
            super().__init__(replies=["hi"])

    fake = types.ModuleType("langchain_ibm")
    fake.ChatWatsonx = ChatWatsonx  # type: ignore[attr-defined]
    fake.__spec__ = types.SimpleNamespace(name="langchain_ibm")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "langchain_ibm", fake)
    model = load_model("watsonx:ibm/granite-3-8b-instruct")
    assert isinstance(model, ChatWatsonx)
    assert built == [{"model_id": "ibm/granite-3-8b-instruct"}]


def test_every_provider_names_a_pip_package() -> None:
    for name, provider in PROVIDERS.items():
        assert provider.package.startswith("langchain-"), name
