"""Pydantic validation errors as one-line problems about the user's own file.

The one place that turns a `pydantic.ValidationError` from data a person wrote (an agent
config, an MCP config, a scenario, edited tool arguments) into what they can act on:

- the path of each problem is written as it is in their data: the tags pydantic adds for
  a union's member (``mcpServers.iot.stdio.command``) are left out when the data has no
  such key (``mcpServers.iot.command``);
- an unknown key names the keys that would be accepted there when one is close
  (``unknown key 'comand'; did you mean 'command'?``).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["close_keys", "describe_errors", "keys_at"]


def describe_errors(
    exc: ValidationError, data: Any = None, model: type[BaseModel] | None = None
) -> list[str]:
    """Each problem of ``exc`` on one line, ``path: message`` (duplicates dropped).

    Args:
        exc: The validation error.
        data: The data that was validated (to write paths as they are in it).
        model: The model it was validated against (to suggest keys it accepts).
    """
    out: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        shown = ".".join(str(part) for part in _path_in_data(data, loc))
        if err["type"] == "extra_forbidden":
            key = str(loc[-1]) if loc else ""
            line = f"unknown key {shown!r}"
            close = close_keys(key, keys_at(model, loc[:-1])) if model is not None else []
            if close:
                line += f"; did you mean {' or '.join(map(repr, close))}?"
        else:
            line = f"{shown}: {err['msg']}" if shown else str(err["msg"])
        out.append(line)
    return list(dict.fromkeys(out))


def close_keys(key: str, accepted: Sequence[str] | set[str]) -> list[str]:
    """The accepted keys close to ``key`` (at most three, closest first)."""
    return difflib.get_close_matches(key, sorted(accepted), n=3, cutoff=0.6)


def _path_in_data(data: Any, loc: tuple[Any, ...]) -> list[Any]:
    """``loc`` without the parts that are not keys or indexes of ``data`` (union tags).

    A key missing from a mapping of the data is kept when it is the last part (a
    missing or unknown key is the problem's subject).
    """
    if data is None:
        return list(loc)
    shown: list[Any] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, Sequence) and not isinstance(node, str) and isinstance(part, int):
            node = node[part] if -len(node) <= part < len(node) else None
        elif not (last and isinstance(node, Mapping)):
            continue  # a tag pydantic added (a union's member): not in the person's data
        shown.append(part)
    return shown


def keys_at(model: type[BaseModel] | None, loc: Sequence[Any]) -> set[str]:
    """The keys the models at ``loc`` (from ``model``) accept: field names and aliases."""
    types_at: list[Any] = [model] if model is not None else []
    for part in loc:
        types_at = [t for node in types_at for t in _step(node, part)]
    keys: set[str] = set()
    for node in types_at:
        for member in _members(node):
            if isinstance(member, type) and issubclass(member, BaseModel):
                for name, field in member.model_fields.items():
                    keys.add(field.alias or name)
    return keys


def _members(tp: Any) -> Iterator[Any]:
    """The types ``tp`` may be: a union's members, ``Annotated`` and ``Optional`` unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        yield from _members(typing.get_args(tp)[0])
    elif origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            yield from _members(arg)
    else:
        yield tp


def _tags(tp: Any) -> set[str]:
    """The union tags (``Tag("stdio")``) and class names a union member answers to."""
    tags: set[str] = set()
    if typing.get_origin(tp) is typing.Annotated:
        for meta in typing.get_args(tp)[1:]:
            tag = getattr(meta, "tag", None)
            if isinstance(tag, str):
                tags.add(tag)
        tp = typing.get_args(tp)[0]
    if isinstance(tp, type):
        tags.add(tp.__name__)
    return tags


def _step(tp: Any, part: Any) -> list[Any]:
    """The types found one step (``part`` of a loc) inside ``tp``."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _step(typing.get_args(tp)[0], part)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(tp)
        tagged = [a for a in args if isinstance(part, str) and part in _tags(a)]
        if tagged:  # the part is the member's tag: the member itself
            return [m for a in tagged for m in _members(a)]
        return [t for a in args for t in _step(a, part)]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if part in (name, field.alias):
                return [field.annotation]
        return []
    args = typing.get_args(tp)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return [args[1]] if len(args) == 2 else []
    if isinstance(origin, type) and issubclass(origin, (list, tuple, set, frozenset, Sequence)):
        return [args[0]] if args else []
    return []
