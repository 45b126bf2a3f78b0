from __future__ import annotations

from pathlib import Path

import pytest

from planexec.config import AgentConfig, load_config
from planexec.errors import ConfigError, ErrorKind
from planexec.recovery import Action, Limits, RecoveryPolicy


def test_defaults_match_the_documented_budgets() -> None:
    cfg = AgentConfig()
    assert cfg.recovery.max_replans == 3
    assert cfg.recovery.max_reresolutions_per_step == 2
    assert cfg.recovery.max_retries_per_step == 1
    assert cfg.limits.max_steps == 50
    assert cfg.planner.max_reprompts == 2


def test_a_toml_file_fills_nested_settings(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        """
[recovery]
max_replans = 1
[recovery.policy]
TOOL_ERROR = "REPLAN"
[limits]
max_steps = 7
per_tool_limits = { search = 2 }
sequence_limits = [ { pattern = ["search", "fetch"], max_repeats = 3 } ]
[executor]
max_concurrency = 2
tool_timeouts = { history = 1.5 }
error_payload_keys = ["error", "err"]
empty_output = "warn"
[model]
timeout = 9.0
[planner]
dialect = "hashstep"
"""
    )
    cfg = load_config(path)
    assert cfg.recovery.max_replans == 1
    assert cfg.recovery.policy == {ErrorKind.TOOL_ERROR: Action.REPLAN}
    assert cfg.limits.sequence_limits[0].pattern == ("search", "fetch")
    assert cfg.executor.tool_timeouts == {"history": 1.5}
    assert cfg.executor.error_payload_keys == ("error", "err")
    assert cfg.model.timeout == 9.0
    policy = RecoveryPolicy.from_settings(cfg.recovery)
    assert policy.action_for(ErrorKind.TOOL_ERROR) is Action.REPLAN
    limits = Limits.from_settings(cfg.limits)
    assert limits.max_steps == 7 and limits.per_tool_limits == {"search": 2}


def test_a_yaml_file_is_read_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("limits:\n  max_steps: 4\nrecovery:\n  early_replan: false\n")
    cfg = load_config(path)
    assert cfg.limits.max_steps == 4
    assert cfg.recovery.early_replan is False


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("a.toml", "[recovery]\nmax_replan = 2\n", "recovery.max_replan"),
        ("a.toml", "max_steps = 2\n", "max_steps"),
        ("a.yaml", "limits:\n  per_tool_limit: {a: 1}\n", "limits.per_tool_limit"),
        (
            "a.yaml",
            "limits:\n  sequence_limits:\n    - {pattern: [a], max_repeat: 1}\n",
            "limits.sequence_limits.0.max_repeat",
        ),
    ],
)
def test_a_misspelled_key_is_rejected_naming_the_key_and_the_file(
    tmp_path: Path, name: str, text: str, key: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"unknown key {key!r}" in str(info.value)
    assert str(path) in str(info.value)


def test_a_bad_value_is_rejected_with_its_key(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[recovery.policy]\nTOOL_ERROR = "RETRY_FOREVER"\n')
    with pytest.raises(ConfigError, match="recovery.policy.TOOL_ERROR"):
        load_config(path)


def test_an_unknown_error_kind_in_the_policy_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[recovery.policy]\nTOOL_EROR = "REPLAN"\n')
    with pytest.raises(ConfigError, match="TOOL_EROR"):
        load_config(path)


def test_unreadable_or_unknown_files_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "a.ini"
    bad.write_text("x=1")
    with pytest.raises(ConfigError, match="unknown format"):
        load_config(bad)
    broken = tmp_path / "b.toml"
    broken.write_text("[recovery\n")
    with pytest.raises(ConfigError, match="not valid toml"):
        load_config(broken)
    listy = tmp_path / "c.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level"):
        load_config(listy)


def test_an_empty_yaml_file_gives_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yml"
    path.write_text("")
    assert load_config(path) == AgentConfig()


def test_from_dict_rejects_unknown_keys_in_code_too() -> None:
    with pytest.raises(ConfigError, match="unknown key 'executor.max_concurency'"):
        AgentConfig.from_dict({"executor": {"max_concurency": 3}})
