from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from langchain_core.messages import HumanMessage, SystemMessage

from planexec.errors import CassetteError, CassetteMissError
from planexec.models import load_model
from planexec.regress.cassette import (
    Cassette,
    CassetteChatModel,
    load_cassette_model,
    request_key,
)
from planexec.regress.report import stable_run
from planexec.regress.runner import run_scenario
from planexec.testing import ScriptedChatModel

Factory = Callable[..., dict[str, object]]
PROMPT = [
    SystemMessage(content="You are the planner.\nUse the tools below.\n- sites()"),
    HumanMessage(content="Question: Which sites are there?"),
]


def record(path: Path, replies: list[str], requests: list[list[object]]) -> CassetteChatModel:
    model = CassetteChatModel(path, mode="record", inner=ScriptedChatModel(replies=replies))
    for messages in requests:
        model.invoke(messages)
    return model


def test_recording_writes_a_readable_yaml_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    record(path, ["#Task1: List the sites.\n#Tool1: sites"], [PROMPT])
    text = path.read_text(encoding="utf-8")
    assert "format: planexec-cassette" in text
    assert "content: |-\n      You are the planner.\n      Use the tools below." in text
    data = yaml.safe_load(text)
    entry = data["entries"][0]
    assert entry["reply"] == "#Task1: List the sites.\n#Tool1: sites"
    assert [m["type"] for m in entry["messages"]] == ["system", "human"]
    assert data["model"] == {"llm_type": "planexec-scripted", "model_name": "scripted"}


def test_replay_serves_the_recorded_reply_without_the_inner_model(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    record(path, ["plan text"], [PROMPT])
    replay = CassetteChatModel(path)
    assert replay.invoke(PROMPT).content == "plan text"
    assert replay.unused_entries() == []


def test_identical_requests_are_served_in_recording_order(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    record(path, ["first", "second", "other"], [PROMPT, PROMPT, ["hello"]])
    assert json.loads(path.read_text())["format"] == "planexec-cassette"
    replay = load_cassette_model(path)
    assert replay.invoke("hello").content == "other"
    assert replay.invoke(PROMPT).content == "first"
    assert replay.invoke(PROMPT).content == "second"
    with pytest.raises(CassetteMissError, match="recorded 2 time"):
        replay.invoke(PROMPT)


def test_a_changed_prompt_fails_with_a_diff_against_the_closest_request(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    record(path, ["a", "b"], [PROMPT, ["something else entirely"]])
    changed = [
        SystemMessage(content="You are the planner.\nUse ONLY the tools below.\n- sites()"),
        PROMPT[1],
    ]
    replay = CassetteChatModel(path)
    with pytest.raises(CassetteMissError) as info:
        replay.invoke(changed)
    message = str(info.value)
    assert "no recorded request matches" in message
    assert "-Use the tools below." in message
    assert "+Use ONLY the tools below." in message
    assert " Question: Which sites are there?" not in message.split("+++")[0]
    assert replay.misses == [message]


def test_unused_entries_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    record(path, ["a", "b"], [PROMPT, ["hello"]])
    replay = CassetteChatModel(path)
    replay.invoke(PROMPT)
    assert [e["reply"] for e in replay.unused_entries()] == ["b"]


async def test_replay_works_asynchronously(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    record(path, ["async reply"], [PROMPT])
    assert (await CassetteChatModel(path).ainvoke(PROMPT)).content == "async reply"


def test_the_key_covers_messages_params_and_model_but_not_dict_order() -> None:
    msgs = [{"type": "human", "content": "x"}]
    key = request_key({"a": 1, "b": 2}, {"stop": None}, msgs)
    assert key == request_key({"b": 2, "a": 1}, {"stop": None}, msgs)
    assert key != request_key({"a": 1, "b": 2}, {"stop": ["\n"]}, msgs)
    assert key != request_key({"a": 1, "b": 3}, {"stop": None}, msgs)
    assert key != request_key(
        {"a": 1, "b": 2}, {"stop": None}, [{"type": "system", "content": "x"}]
    )


def test_load_model_replay_serves_yaml_and_json_cassettes(tmp_path: Path) -> None:
    for name in ("c.yaml", "c.json"):
        record(tmp_path / name, ["served"], [PROMPT])
        model = load_model(f"replay:{tmp_path / name}")
        assert isinstance(model, CassetteChatModel)
        assert model.invoke(PROMPT).content == "served"


def test_a_file_that_is_not_a_cassette_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("replies: [a]\n")
    with pytest.raises(CassetteError, match="not a cassette"):
        CassetteChatModel(path)
    path.write_text("format: planexec-cassette\nversion: 99\nentries: []\n")
    with pytest.raises(CassetteError, match="version 99"):
        CassetteChatModel(path)
    with pytest.raises(CassetteError, match="cannot read"):
        CassetteChatModel(tmp_path / "missing.yaml")
    with pytest.raises(CassetteError, match="inner model"):
        CassetteChatModel(path, mode="record")


def test_a_hand_edited_entry_is_served_by_what_it_says(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    Cassette(
        path,
        {"llm_type": "x"},
        [
            {
                "key": "stale",
                "params": {"stop": None},
                "messages": [{"type": "human", "content": "hi"}],
                "reply": "hello",
            }
        ],
    ).save()
    assert CassetteChatModel(path).invoke("hi").content == "hello"


# -- the scenario-level round trip (issue 7's "done when") ---------------------------------


def scenario_with_cassette(sites_scenario: Factory, **extra: object) -> dict[str, object]:
    data = sites_scenario(**extra)
    replies = data["model"]["replies"]  # type: ignore[index]
    data["model"] = {
        "cassette": "cassettes/sites.cassette.yaml",
        "record_with": {"replies": replies},
    }
    return data


def test_record_then_replay_gives_an_identical_run_and_a_changed_prompt_shows_the_diff(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    path = tmp_path / "sites.scenario.yaml"
    path.write_text(yaml.safe_dump(scenario_with_cassette(sites_scenario)), encoding="utf-8")

    recorded = run_scenario(path, record=True)
    assert recorded.status == "passed", recorded.describe()
    assert recorded.recorded
    assert (tmp_path / "cassettes" / "sites.cassette.yaml").is_file()

    replayed = run_scenario(path)
    assert replayed.status == "passed", replayed.describe()
    assert not replayed.recorded
    assert stable_run(replayed.run) == stable_run(recorded.run)
    assert replayed.llm_calls == recorded.llm_calls == 2

    changed = scenario_with_cassette(
        sites_scenario, config={"planner": {"instructions": "Prefer fewer steps."}}
    )
    path.write_text(yaml.safe_dump(changed), encoding="utf-8")
    drifted = run_scenario(path)
    assert drifted.status == "error"
    assert drifted.error is not None
    assert "no recorded request matches" in drifted.error
    assert "+## Instructions" in drifted.error
    assert "+Prefer fewer steps." in drifted.error
    assert "Prefer fewer steps." in drifted.describe()


def test_recording_without_a_model_to_record_with_is_an_error(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    data = sites_scenario()
    data["model"] = {"cassette": "c.yaml"}
    path = tmp_path / "s.scenario.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_scenario(path, record=True)
    assert result.status == "error"
    assert "record_with" in (result.error or "")


def test_replaying_a_missing_cassette_is_an_error_naming_it(
    tmp_path: Path, sites_scenario: Factory
) -> None:
    path = tmp_path / "s.scenario.yaml"
    path.write_text(yaml.safe_dump(scenario_with_cassette(sites_scenario)), encoding="utf-8")
    result = run_scenario(path)
    assert result.status == "error"
    assert "sites.cassette.yaml" in (result.error or "")
