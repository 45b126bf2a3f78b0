"""``docs/config.md``: the configuration reference, generated from `AgentConfig`.

Every section and key, with its type, its default and its attribute docstring, in the
order `AgentConfig` declares them. Regenerate the file after changing a setting::

    python -m planexec._config_doc            # writes docs/config.md
    python -m planexec._config_doc --check    # exit 1 when docs/config.md is stale

``tests/test_docs.py`` fails when the file differs from `render`.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import json
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from planexec.config import AgentConfig

__all__ = ["DEFAULT_PATH", "main", "render"]

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "docs" / "config.md"
"""Where the reference is written: ``docs/config.md`` of the source tree."""

HEADER = """\
# Configuration reference

<!-- Generated from planexec.config.AgentConfig: do not edit by hand.
     Regenerate with `python -m planexec._config_doc` (tests/test_docs.py checks it). -->

Every setting of `AgentConfig`, by section. A config file (`--config FILE`,
`load_config`) is TOML or YAML with these sections as tables; an unknown key is an
error that names it. `AgentConfig.from_dict` takes the same structure as a dict:

```toml
[planner]
instructions = "Prefer the iot server's tools."

[executor]
max_concurrency = 4
reason_budget = 8000

[model]
stream = true
```

Keys under a dict setting are free (a tool name, an error kind); `[*]` stands for each
item of a list setting. See [api.md](api.md) for the library and
[recovery.md](recovery.md) for the recovery policy and budgets.
"""


def _unwrap(tp: Any) -> Any:
    """``Annotated[X, ...]`` → ``X``; ``X | None`` → ``X``."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return tp


def type_name(tp: Any) -> str:
    """A readable name for a field's type: ``float | None``, ``dict[str, int]``, ``"a" | "b"``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if tp is type(None):
        return "None"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{name}[{inner}]"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _value(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return json.dumps(value.value)
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json", exclude_none=True))
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value, default=str)


def _default(field: FieldInfo) -> str | None:
    if field.default is not PydanticUndefined:
        return _value(field.default)
    if field.default_factory is not None:
        factory: Any = field.default_factory
        made = factory()
        if isinstance(made, BaseModel):
            return None  # a nested section: its keys are listed
        return _value(made)
    return None


def _model_of(tp: Any) -> tuple[type[BaseModel], str] | None:
    """The model a field nests and the path suffix of its keys (``""``, ``[*]``, ``.<key>``)."""
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp, ""
    origin = typing.get_origin(tp)
    args = [_unwrap(a) for a in typing.get_args(tp) if a is not Ellipsis]
    if origin in (list, tuple, Sequence) and args:
        item = args[0]
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, "[*]"
    if origin in (dict, Mapping) and len(args) == 2:
        item = args[1]
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, ".<key>"
    return None


_BOUNDS = (("ge", "at least"), ("gt", "above"), ("le", "at most"), ("lt", "below"))


def _constraints(field: FieldInfo) -> list[str]:
    """``at least 1``, ``above 0``, ``1 item at least`` from the field's metadata."""
    out: list[str] = []
    for meta in field.metadata:
        for attr, words in _BOUNDS:
            bound = getattr(meta, attr, None)
            if bound is not None:
                out.append(f"{words} `{bound}`")
        min_length = getattr(meta, "min_length", None)
        if min_length is not None:
            out.append(f"{min_length} item(s) at least")
    return out


def _enums(tp: Any) -> Iterator[type[enum.Enum]]:
    """Every enum class in a type (``dict[ErrorKind, Action]``)."""
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        yield tp
    for arg in typing.get_args(tp):
        yield from _enums(arg)


def _doc(text: str | None) -> str:
    return inspect.cleandoc(text) if text else ""


def _keys(model: type[BaseModel], prefix: str) -> Iterator[str]:
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}"
        nested = _model_of(field.annotation)
        lines = [f"### `{path}`", ""]
        facts = [f"Type `{type_name(field.annotation)}`"]
        default = _default(field)
        if default is not None:
            facts.append(f"default `{default}`")
        elif field.is_required():
            facts.append("required")
        facts += _constraints(field)
        lines += ["; ".join(facts) + ".", ""]
        if field.description:
            lines += [_doc(field.description), ""]
        for kind in dict.fromkeys(_enums(field.annotation)):
            values = ", ".join(f"`{m.value}`" for m in kind)
            lines += [f"`{kind.__name__}`: {values}.", ""]
        yield "\n".join(lines)
        if nested is not None:
            sub, suffix = nested
            if sub.__doc__:
                yield _doc(sub.__doc__) + "\n"
            yield from _keys(sub, path + suffix)


def render() -> str:
    """The whole reference, as markdown."""
    parts = [HEADER]
    for name, field in AgentConfig.model_fields.items():
        nested = _model_of(field.annotation)
        assert nested is not None, name
        model = nested[0]
        parts.append(f"## `{name}`: {_doc(field.description).rstrip('.')}\n")
        if model.__doc__:
            parts.append(_doc(model.__doc__) + "\n")
        parts.extend(_keys(model, name))
    return "\n".join(parts).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference (or, with ``--check``, exit 1 when it is stale)."""
    parser = argparse.ArgumentParser(
        prog="python -m planexec._config_doc", description="Generate docs/config.md."
    )
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    text = render()
    path: Path = args.path
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run python -m planexec._config_doc", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
