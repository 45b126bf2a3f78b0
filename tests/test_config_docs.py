"""Every configuration key the documentation names is a setting of `AgentConfig`.

The keys are read from ``README.md`` and ``docs/*.md``:

- every ```` ```toml ```` block (an agent config file), whole;
- YAML blocks and inline ``{...}`` mappings that are agent configs (their top-level keys
  include a section of `AgentConfig`) or scenarios (the mapping under ``config:``);
- backticked dotted names whose first segment is a section of `AgentConfig`
  (``executor.retry_error_payloads``, ``limits.sequence_limits[*].pattern``,
  ``executor.ray.tool_options.<tool>.stateless``), also written as an assignment
  (``planner.max_reprompts = 0``, ``executor.backend: ray``).

Each key is walked through the nested models (a dict field takes any key, a list field
its items' keys); whole blocks and ``name = value`` assignments are also loaded with
`AgentConfig.from_dict`, so their values must be valid too.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from planexec.config import AgentConfig
from planexec.regress.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
SECTIONS = frozenset(AgentConfig.model_fields)
SCENARIO_KEYS = frozenset(Scenario.model_fields)
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(
    r"^(?:AgentConfig\.|config\.)?"
    rf"((?:{'|'.join(sorted(SECTIONS))})(?:\.[^\s.=:]+)+)"
    r"\s*(?:([=:])\s*(.*))?$"
)
NOT_AGENT_CONFIG = ("pyproject.toml",)
"""A TOML block whose first line names one of these files is not an agent config."""
CONFIG_FILE = re.compile(r"^#\s*\S*(agent|config)\S*\.(ya?ml|toml)\b", re.IGNORECASE)
"""A first line naming an agent config file (``# agent.yaml``) marks a YAML block as one."""


@dataclass(frozen=True)
class Mention:
    """One config key (or whole config) named in the docs."""

    where: str
    """``file:line``."""
    path: tuple[str, ...]
    """The key's segments (indexes like ``[0]`` removed)."""
    config: Mapping[str, Any] | None = None
    """A whole config (a block or an assignment) to load, when there is one."""


def segments(dotted: str) -> tuple[str, ...]:
    """``limits.sequence_limits[*].pattern`` → ``("limits", "sequence_limits", "pattern")``."""
    return tuple(s for s in re.sub(r"\[[^\]]*\]", "", dotted).split(".") if s)


def key_paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path of a nested mapping (a list's mappings are walked as its items)."""
    for key, value in data.items():
        path = (*prefix, str(key))
        yield path
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, Mapping):
                yield from key_paths(item, path)


def configs_in(data: Any, *, config_file: bool = False) -> Iterator[Mapping[str, Any]]:
    """The agent configs in parsed YAML.

    A scenario (every key is a scenario's) holds one under ``config``. Any other mapping
    is one when it is marked as a config file (``config_file``) or when every key is a
    section of `AgentConfig` (scenario excerpts such as ``model: {replies: ...}`` are
    therefore only checked through a whole scenario's ``config``).
    """
    if not isinstance(data, Mapping) or not data:
        return
    keys = set(map(str, data))
    if "config" in keys and keys <= SCENARIO_KEYS:
        inner = data["config"]
        if isinstance(inner, Mapping):
            yield inner
    elif config_file or (keys <= SECTIONS and "model" not in keys):
        yield data


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def extract(text: str, source: str) -> list[Mention]:
    """Every config key and config the markdown ``text`` mentions (see the module doc)."""
    found: list[Mention] = []

    def add_config(data: Mapping[str, Any], where: str) -> None:
        found.append(Mention(where, (), data))
        found.extend(Mention(where, path) for path in key_paths(data))

    for block in FENCE.finditer(text):
        lang, body = block.group(1).lower(), block.group(2)
        where = f"{source}:{_line(text, block.start())}"
        first = body.strip().splitlines()[0] if body.strip() else ""
        if lang == "toml" and not any(name in first for name in NOT_AGENT_CONFIG):
            add_config(tomllib.loads(body), where)
        elif lang in ("yaml", "yml"):
            try:
                data = yaml.safe_load(body)
            except yaml.YAMLError:
                continue  # an excerpt, not a file (a cassette, a workflow)
            for config in configs_in(data, config_file=bool(CONFIG_FILE.match(first))):
                add_config(config, where)
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keep line numbers
    for span in SPAN.finditer(prose):
        code = span.group(1).strip()
        where = f"{source}:{_line(prose, span.start())}"
        if code.startswith("{"):
            try:
                data = yaml.safe_load(code)
            except yaml.YAMLError:
                continue
            for config in configs_in(data):
                add_config(config, where)
            continue
        match = DOTTED.match(code)
        if match is None:
            continue
        dotted, sign, _value = match.groups()
        config = None
        if sign == "=":  # `executor.backend = "ray"` is TOML: load it whole
            config = tomllib.loads(code.removeprefix("AgentConfig.").removeprefix("config."))
        found.append(Mention(where, segments(dotted), config))
    return found


def _unwrap(tp: Any) -> Any:
    """``X | None`` → ``X``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def unknown_key(path: Sequence[str], model: type[BaseModel] = AgentConfig) -> str | None:
    """None when ``path`` names a setting; else the part of it that names none.

    A model's field must exist; a dict field takes any key, then its values' type; a
    list or tuple field is walked as its items; nothing follows a plain value.
    """
    node: Any = model
    i = 0
    while i < len(path):
        node = _unwrap(node)
        origin = typing.get_origin(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(path[i])
            if field is None:
                return ".".join(path[: i + 1])
            node = field.annotation
            i += 1
        elif origin in (dict, Mapping) or node is dict:
            args = typing.get_args(node)
            node = args[1] if args else Any
            i += 1  # any key
        elif origin in (list, tuple, Sequence):
            args = [a for a in typing.get_args(node) if a is not Ellipsis]
            node = args[0] if args else Any
        else:
            return ".".join(path[: i + 1])
    return None


def all_mentions() -> list[Mention]:
    found: list[Mention] = []
    for path in DOCS:
        found += extract(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return found


# ------------------------------------------------------------------ the extractor itself

SAMPLE = '''
Set `executor.retry_unsafe` (or `executor.retry_unsafe = true`), never `planner.instructon`;
`model.timeout: 5` works, `limits.sequence_limits[*].pattern` too; `planexec/executor.py`
and `model` are not config keys.

```toml
[executor]
max_concurency = 4
tool_timeouts = { history = 10.0 }
```

```yaml
question: Which sensors?
model: {replies: ["#Task1: ..."]}
config:
  limits: {max_step: 3}
```

```yaml
# agent.yaml
model: {timeout: 5, retries: 2}
```

A scenario's `config` such as `{recovery: {max_replans: 0}, planner: {dialekt: auto}}`.
'''


def test_the_extractor_finds_keys_in_prose_toml_yaml_and_inline_mappings() -> None:
    mentions = extract(SAMPLE, "sample.md")
    paths = {m.path for m in mentions if m.path}
    assert {
        ("executor", "retry_unsafe"),
        ("planner", "instructon"),
        ("model", "timeout"),
        ("limits", "sequence_limits", "pattern"),
        ("executor", "max_concurency"),
        ("executor", "tool_timeouts", "history"),
        ("limits", "max_step"),
        ("recovery", "max_replans"),
        ("planner", "dialekt"),
        ("model", "retries"),
    } <= paths
    assert not any(p[0] not in SECTIONS for p in paths)  # file names and lone words skipped
    lines = {m.path: m.where for m in mentions}
    assert lines[("planner", "instructon")] == "sample.md:2"
    assert lines[("executor", "max_concurency")] == "sample.md:6"


def test_a_misspelled_key_is_found_and_a_correct_one_is_not() -> None:
    misspelled = {
        unknown_key(m.path) for m in extract(SAMPLE, "sample.md") if m.path
    } - {None}
    assert misspelled == {
        "planner.instructon",
        "executor.max_concurency",
        "limits.max_step",
        "planner.dialekt",
        "model.retries",
    }


def test_keys_under_dicts_and_lists_resolve_to_their_items_settings() -> None:
    assert unknown_key(("executor", "ray", "tool_options", "<tool>", "stateless")) is None
    assert unknown_key(("executor", "ray", "tool_options", "forecast", "stateles")) is not None
    assert unknown_key(("limits", "sequence_limits", "max_repeats")) is None
    assert unknown_key(("recovery", "policy", "TOOL_ERROR")) is None
    assert unknown_key(("model", "timeout", "seconds")) == "model.timeout.seconds"


# ------------------------------------------------------------------ the documentation


def test_the_docs_mention_config_keys_at_all() -> None:
    mentions = all_mentions()
    assert any(m.config is not None for m in mentions)  # the TOML examples are seen
    assert ("executor", "retry_error_payloads") in {m.path for m in mentions}


def test_every_config_key_named_in_the_docs_is_a_setting_of_agent_config() -> None:
    wrong = [
        f"{m.where}: {'.'.join(m.path)} ({bad!r} is no setting)"
        for m in all_mentions()
        if m.path and (bad := unknown_key(m.path)) is not None
    ]
    assert not wrong, "\n".join(wrong)


def test_every_config_block_and_assignment_in_the_docs_loads() -> None:
    for m in all_mentions():
        if m.config is not None:
            AgentConfig.from_dict(dict(m.config), source=m.where)  # raises naming the key


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("executor.retry_error_payloads", False),
        ("planner.instructions", "Prefer the iot server."),
        ("model.stream", True),
    ],
)
def test_settings_the_docs_describe_are_accepted(key: str, value: Any) -> None:
    section, name = key.split(".")
    config = AgentConfig.from_dict({section: {name: value}})
    assert getattr(getattr(config, section), name) == value
