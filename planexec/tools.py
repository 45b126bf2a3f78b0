"""The tool catalog: langchain-core tools, their schemas and their safety hints.

`ToolCatalog` wraps langchain-core tools (`BaseTool`, `StructuredTool`, ``@tool``) as
`ToolSpec` entries: name, server, description, a pydantic args schema (the tool's own,
or one built from a JSON schema), the JSON schema shown to models, the argument names
in schema order, and `ToolHints` (``read_only``, ``idempotent``, ``destructive``) that
decide what may be retried.

Tool names may be qualified by their server (``iot.sites``). The same tool name on two
servers is allowed; looking it up without the server is then an error that lists the
candidates (`AmbiguousToolError`).

The module also holds the helpers the executor uses around a call: `invoke_tool`
(a plain `StructuredTool` is called directly when no callback would see the call:
`direct_call`, `callbacks_around`; a tool without an async implementation runs in a
daemon thread of its own, so that a call that never returns can be abandoned),
`normalize_output` (step outputs keep their structure), `check_output` (size, cycles,
depth, what JSON cannot keep) and `error_payload`.

**Progress of a call.** While the executor makes a call that someone listens to (the
run's events, its trace), a tool may report how far it got with `report_progress`
(planexec's MCP client reports each progress notification of its server that way:
`progress_sink` is where it goes); the executor turns it into a
`planexec.events.ToolProgress` of that step (`reporting_progress` installs the sink).
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import functools
import inspect
import json
import threading
import typing
import uuid
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import langsmith.utils
from langchain_core.globals import get_debug
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tracers import context as lc_tracing
from langchain_core.utils.env import env_var_is_set
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import InitErrorDetails

import planexec._fastpaths as _fastpaths
from planexec._frozen import cached
from planexec._loading import load_object
from planexec._log import logger
from planexec._text import as_text
from planexec.errors import AmbiguousToolError, ToolCallError, ToolLoadError, ToolOutputError
from planexec.results import MAX_JSON_DEPTH, encode_json, plain_json_size

__all__ = [
    "AmbiguousToolError",
    "DirectCall",
    "ProgressSink",
    "ToolCallError",
    "ToolCatalog",
    "ToolHints",
    "ToolOutputError",
    "ToolSpec",
    "callbacks_around",
    "check_output",
    "direct_call",
    "direct_coroutine",
    "error_payload",
    "invoke_tool",
    "load_tools",
    "normalize_output",
    "progress_sink",
    "report_progress",
    "reporting_progress",
    "tool_hints",
]

_HINT_KEYS: dict[str, str] = {
    "read_only": "read_only",
    "readOnlyHint": "read_only",
    "idempotent": "idempotent",
    "idempotentHint": "idempotent",
    "destructive": "destructive",
    "destructiveHint": "destructive",
    "read_only_hint": "read_only",
    "idempotent_hint": "idempotent",
    "destructive_hint": "destructive",
}
"""Hint names accepted in mappings: planexec's own and MCP's tool annotations (the
protocol's camelCase and the snake_case of SDKs that dump annotations by field name)."""


@dataclass(frozen=True)
class ToolHints:
    """Safety hints for a tool. None means unknown, which counts as unsafe."""

    read_only: bool | None = None
    """The tool only reads: calling it again changes nothing."""
    idempotent: bool | None = None
    """Calling it twice with the same arguments has the effect of calling it once."""
    destructive: bool | None = None
    """The tool may destroy or overwrite something."""

    @property
    def safe(self) -> bool:
        """Whether a call may be repeated: read-only or idempotent, and not destructive."""
        return bool(self.read_only or self.idempotent) and not self.destructive

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> ToolHints:
        """Read hints from a mapping (``read_only`` or MCP's ``readOnlyHint`` spelling).

        Keys that are not hints (e.g. ``server``) are ignored.
        """
        values: dict[str, bool | None] = {}
        for key, value in (mapping or {}).items():
            name = _HINT_KEYS.get(key)
            if name is not None and value is not None:
                values[name] = bool(value)
        return cls(**values)

    def merged(self, other: ToolHints) -> ToolHints:
        """Return these hints with every hint that ``other`` knows taken from ``other``."""
        return ToolHints(
            read_only=other.read_only if other.read_only is not None else self.read_only,
            idempotent=other.idempotent if other.idempotent is not None else self.idempotent,
            destructive=(
                other.destructive if other.destructive is not None else self.destructive
            ),
        )

    def to_dict(self) -> dict[str, bool | None]:
        """Return the hints as a dict."""
        return {
            "read_only": self.read_only,
            "idempotent": self.idempotent,
            "destructive": self.destructive,
        }


_JSON_TYPE_NAMES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}


def _type_name(schema: Mapping[str, Any]) -> tuple[str, bool]:
    """A short type name for a JSON schema, and whether it admits null."""
    if "anyOf" in schema or "oneOf" in schema:
        names: list[str] = []
        nullable = False
        for sub in schema.get("anyOf", schema.get("oneOf", [])):
            name, sub_null = _type_name(sub)
            nullable = nullable or sub_null
            if name != "None" and name not in names:
                names.append(name)
        return ("|".join(names) or "any", nullable)
    if "enum" in schema:
        return ("|".join(json.dumps(v) for v in schema["enum"]), None in schema["enum"])
    if "$ref" in schema:
        return (str(schema["$ref"]).rsplit("/", 1)[-1], False)
    typ = schema.get("type")
    if isinstance(typ, list):
        names = [_JSON_TYPE_NAMES.get(str(t), str(t)) for t in typ if t != "null"]
        return ("|".join(names) or "any", "null" in typ)
    if typ == "array" and isinstance(schema.get("items"), Mapping):
        item, _ = _type_name(schema["items"])
        return (f"list[{item}]", False)
    if typ is None:
        return ("any", False)
    return (_JSON_TYPE_NAMES.get(str(typ), str(typ)), typ == "null")


@dataclass(frozen=True)
class ToolSpec:
    """One tool in a catalog, with what planning, resolution and execution need."""

    name: str
    """The tool's name."""
    server: str | None
    """The server it comes from (``tool.metadata["planexec"]["server"]``), if any."""
    tool: BaseTool = field(repr=False)
    """The langchain-core tool."""
    description: str
    """The tool's description."""
    args_schema: type[BaseModel] = field(repr=False)
    """The pydantic model arguments are validated with."""
    json_schema: dict[str, Any] = field(repr=False)
    """The arguments' JSON schema (what models are shown)."""
    hints: ToolHints = field(default_factory=ToolHints)
    """Safety hints."""

    @property
    def arg_names(self) -> list[str]:
        """The argument names, in schema order (positional arguments bind in this order).

        A field with an alias is named by its alias: the name its JSON schema shows and
        a call writes (an MCP server's ``from`` or ``a-b``).
        """
        return list(self._names[0])

    @property
    def required(self) -> list[str]:
        """The names of the required arguments, in schema order (aliases as `arg_names`)."""
        return list(self._names[1])

    @cached
    def _names(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """`arg_names` and `required`, computed once (a plan checks them on every step)."""
        fields = self.args_schema.model_fields.items()
        return (
            tuple(f.alias or n for n, f in fields),
            tuple(f.alias or n for n, f in fields if f.is_required()),
        )

    @property
    def qualified_name(self) -> str:
        """``server.name`` when the tool has a server, else ``name``."""
        return f"{self.server}.{self.name}" if self.server else self.name

    @cached
    def field_names(self) -> frozenset[str]:
        """The names the args schema accepts, computed once: `arg_names`.

        A field with an alias is named by its alias only (the name its JSON schema
        shows): its Python name (an MCP server's ``from`` is the model's ``f_from``) is
        no name of the tool, and is refused rather than renamed.
        """
        return frozenset(self._names[0])

    @cached
    def _python_names(self) -> frozenset[str]:
        """The Python names of the fields that have an alias (no name of the tool's)."""
        fields = self.args_schema.model_fields.items()
        return frozenset(n for n, f in fields if f.alias and f.alias != n)

    @property
    def allows_extra_args(self) -> bool:
        """Whether the schema accepts arguments it does not name, and the call passes them.

        langchain calls a tool whose own pydantic schema names no field with no
        arguments at all (``BaseTool._to_args_and_kwargs``), whatever the schema's
        ``extra``: arguments given to it would be dropped, so they are refused. A tool
        that declares it passes the arguments given (`DIRECT_ARGUMENTS` ``"given"``,
        planexec's MCP tools) gets them.
        """
        if self.args_schema.model_config.get("extra") != "allow":
            return False
        own = self.tool.args_schema
        drops = isinstance(own, type) and issubclass(own, BaseModel) and not own.model_fields
        return not drops or getattr(type(self.tool), DIRECT_ARGUMENTS, None) == "given"

    def signature(self) -> str:
        """A one-line signature, e.g. ``history(site_name: str, final: str?)``.

        ``?`` marks an optional argument.
        """
        props: Mapping[str, Any] = self.json_schema.get("properties", {})
        required = set(self.json_schema.get("required", []))
        parts = []
        for name in self.arg_names:
            type_name, _ = _type_name(props.get(name, {}))
            parts.append(f"{name}: {type_name}{'' if name in required else '?'}")
        return f"{self.name}({', '.join(parts)})"

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``args`` with the args schema; return the arguments that were given.

        An argument the schema does not name is an error (unless the schema allows
        extra arguments): it would otherwise be dropped without a word.

        Raises:
            pydantic.ValidationError: the arguments do not fit the schema.
        """
        return self.parse(args).model_dump(exclude_unset=True, by_alias=True)

    def parse(self, args: Mapping[str, Any]) -> BaseModel:
        """Validate ``args`` as `validate` does; return the validated model.

        `invoke_tool` takes it back (``validated``), so that a call on the direct path
        is validated once.

        Raises:
            pydantic.ValidationError: the arguments do not fit the schema.
        """
        names = self.field_names
        unknown = [k for k in args if k not in names]
        if unknown and self.allows_extra_args:
            # an extra argument is passed as given, never taken for an aliased field
            unknown = [k for k in unknown if k in self._python_names]
        if unknown:
            errors = [
                InitErrorDetails(type="extra_forbidden", loc=(k,), input=args[k])
                for k in unknown
            ]
            try:
                self.args_schema.model_validate(dict(args))
            except ValidationError as exc:
                errors = [cast(InitErrorDetails, e) for e in exc.errors()] + errors
            raise ValidationError.from_exception_data(self.args_schema.__name__, errors)
        return self.args_schema.model_validate(dict(args))

    @cached
    def direct(self) -> DirectCall | None:
        """How to call the tool's function without langchain's per-call machinery.

        None when the tool must go through ``ainvoke`` (see `direct_call`). Computed
        once per spec.
        """
        return direct_call(self)

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as JSON-ready data."""
        return {
            "name": self.name,
            "server": self.server,
            "qualified_name": self.qualified_name,
            "description": self.description,
            "signature": self.signature(),
            "args_schema": self.json_schema,
            "hints": self.hints.to_dict(),
        }


_SIMPLE_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict[str, Any],
    "null": type(None),
}


def _py_type(schema: Mapping[str, Any]) -> Any:
    """A Python type for a JSON schema (a lax, best-effort mapping)."""
    if "enum" in schema and schema["enum"]:
        return Literal[tuple(schema["enum"])]
    subs = schema.get("anyOf") or schema.get("oneOf")
    if subs:
        types = tuple(_py_type(s) for s in subs)
        union: Any = types[0]
        for t in types[1:]:
            union = union | t
        return union
    typ = schema.get("type")
    if isinstance(typ, list):
        return _py_type({"anyOf": [{**schema, "type": t} for t in typ]})
    if typ == "array":
        items = schema.get("items")
        return list[_py_type(items)] if isinstance(items, Mapping) else list[Any]  # type: ignore[misc]
    if isinstance(typ, str) and typ in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[typ]
    return Any


def model_from_json_schema(name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """Build a pydantic model from a JSON object schema (for tools that carry a dict).

    Nested objects become ``dict[str, Any]``; ``$ref`` and unknown types become ``Any``.
    The model allows extra arguments only if the schema says ``additionalProperties``.
    """
    props: Mapping[str, Any] = schema.get("properties", {}) or {}
    required = set(schema.get("required", []) or [])
    fields: dict[str, Any] = {}
    for prop, sub in props.items():
        typ = _py_type(sub if isinstance(sub, Mapping) else {})
        desc = sub.get("description") if isinstance(sub, Mapping) else None
        if prop in required:
            fields[prop] = (typ, Field(..., description=desc))
        else:
            default = sub.get("default") if isinstance(sub, Mapping) else None
            fields[prop] = (typ | None, Field(default=default, description=desc))
    extra: Literal["allow", "ignore"] = (
        "allow" if schema.get("additionalProperties") is True else "ignore"
    )
    model: type[BaseModel] = create_model(
        f"{name}_args", __config__=ConfigDict(extra=extra), **fields
    )
    return model


def _schemas(tool: BaseTool) -> tuple[type[BaseModel], dict[str, Any]]:
    """The pydantic args model and JSON schema of a tool (injected args left out).

    The tool's own args schema is used when the model sees all of its fields, so its
    validators and config (``extra``) apply; otherwise langchain's ``tool_call_schema``.
    """
    schema: Any = tool.tool_call_schema
    own: Any = tool.args_schema
    if (
        isinstance(own, type)
        and issubclass(own, BaseModel)
        and isinstance(schema, type)
        and issubclass(schema, BaseModel)
        and set(own.model_fields) == set(schema.model_fields)
    ):
        return own, own.model_json_schema()
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema, schema.model_json_schema()
    if isinstance(schema, Mapping):
        json_schema = dict(schema)
        return model_from_json_schema(tool.name, json_schema), json_schema
    empty = create_model(f"{tool.name}_args")
    return empty, empty.model_json_schema()


def _tool_meta(tool: BaseTool) -> Mapping[str, Any]:
    meta = (tool.metadata or {}).get("planexec")
    return meta if isinstance(meta, Mapping) else {}


_ToolT = TypeVar("_ToolT", bound=BaseTool)


def tool_hints(
    *,
    read_only: bool | None = None,
    idempotent: bool | None = None,
    destructive: bool | None = None,
) -> Callable[[_ToolT], _ToolT]:
    """Mark a tool read-only, idempotent or destructive: a decorator, or called on a tool.

    The hints go where `ToolCatalog` reads them (``tool.metadata["planexec"]``, beside
    any server name there); hints left ``None`` keep what the tool had. They decide what
    may be retried or re-run on resume (safe: read-only or idempotent, and not
    destructive) and what needs approval (destructive, by default).

    Example:
        >>> from langchain_core.tools import tool
        >>> @tool_hints(read_only=True)
        ... @tool
        ... def sites() -> list[str]:
        ...     '''The sites.'''
        ...     return ["MAIN"]
        >>> ToolCatalog([sites]).get("sites").hints.safe
        True
        >>> delete = tool_hints(destructive=True)(sites.model_copy(update={"name": "wipe"}))
        >>> ToolCatalog([delete]).get("wipe").hints.destructive
        True
    """
    given = ToolHints(read_only=read_only, idempotent=idempotent, destructive=destructive)

    def mark(tool: _ToolT) -> _ToolT:
        if not isinstance(tool, BaseTool):
            raise TypeError(
                f"tool_hints marks langchain-core tools (put it above @tool), not {tool!r}"
            )
        meta = dict(_tool_meta(tool))
        merged = ToolHints.from_mapping(meta).merged(given).to_dict()
        meta.update({k: v for k, v in merged.items() if v is not None})
        tool.metadata = {**(tool.metadata or {}), "planexec": meta}
        return tool

    return mark


class ToolCatalog:
    """The tools a plan may call, by name or ``server.name``.

    Example:
        >>> from planexec.testing import fake_tool
        >>> catalog = ToolCatalog([fake_tool("sites", ["MAIN"], args={"limit": int})])
        >>> catalog.get("sites").signature()
        'sites(limit: int)'
    """

    def __init__(
        self,
        tools: Iterable[BaseTool],
        *,
        hints: Mapping[str, Mapping[str, Any] | ToolHints] | None = None,
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        """Build the catalog.

        Args:
            tools: langchain-core tools. A tool's server is read from
                ``tool.metadata["planexec"]["server"]``. A marker for a server that
                could not start (``metadata["planexec"]["unavailable"]`` set to why, as
                `planexec.mcp.MCPToolset` makes them when not strict) is not a tool: it
                goes to `unavailable`. A tool's safety hints are MCP annotations at
                the top of ``tool.metadata`` (``readOnlyHint``, ``idempotentHint``,
                ``destructiveHint``, or snake_case, as langchain-mcp-adapters sets
                them), overridden by those in ``tool.metadata["planexec"]``.
            hints: Safety hints by tool name or qualified name; they override the
                hints in ``tool.metadata``.
            unavailable: Servers that could not start, with why (see `unavailable`).

        Raises:
            ToolLoadError: two tools have the same name on the same server, or an
                entry is not a langchain-core tool.
        """
        self._specs: dict[tuple[str | None, str], ToolSpec] = {}
        self._by_name: dict[str, list[ToolSpec]] = {}
        self.unavailable: dict[str, str] = dict(unavailable or {})
        """Servers that could not start, with why: steps naming them fail with
        ``TOOL_ERROR`` carrying that message (see `unavailable_reason`)."""
        explicit = dict(hints or {})
        for tool in tools:
            if not isinstance(tool, BaseTool):
                raise ToolLoadError(f"not a langchain-core tool: {tool!r}")
            meta = _tool_meta(tool)
            server = meta.get("server")
            server = str(server) if server else None
            if meta.get("unavailable") and server:
                self.unavailable[server] = str(meta["unavailable"])
                continue
            # MCP annotations at the top of ``tool.metadata`` (as langchain-mcp-adapters
            # puts them), then planexec's own hints, then the explicit ones.
            tool_hints = ToolHints.from_mapping(tool.metadata).merged(
                ToolHints.from_mapping(meta)
            )
            qualified = f"{server}.{tool.name}" if server else tool.name
            for key in (tool.name, qualified):
                extra = explicit.get(key)
                if extra is not None:
                    tool_hints = tool_hints.merged(
                        extra if isinstance(extra, ToolHints) else ToolHints.from_mapping(extra)
                    )
            args_schema, json_schema = _schemas(tool)
            spec = ToolSpec(
                name=tool.name,
                server=server,
                tool=tool,
                description=tool.description or "",
                args_schema=args_schema,
                json_schema=json_schema,
                hints=tool_hints,
            )
            if (server, tool.name) in self._specs:
                raise ToolLoadError(f"duplicate tool {qualified!r}")
            self._specs[(server, tool.name)] = spec
            self._by_name.setdefault(tool.name, []).append(spec)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.has(name)

    def specs(self) -> list[ToolSpec]:
        """Every tool, in the order given."""
        return list(self._specs.values())

    def names(self) -> list[str]:
        """The qualified name of every tool, in the order given."""
        return [s.qualified_name for s in self._specs.values()]

    def _find(self, name: str, server: str | None) -> list[ToolSpec]:
        if server is None and name not in self._by_name and "." in name:
            prefix, _, rest = name.partition(".")
            if (prefix, rest) in self._specs:
                return [self._specs[(prefix, rest)]]
        candidates = self._by_name.get(name, [])
        if server is None:
            return list(candidates)
        exact = [s for s in candidates if s.server == server]
        if exact:
            return exact
        # A server named by the plan matches a tool that declares no server.
        return [s for s in candidates if s.server is None]

    def lookup(self, name: str, server: str | None = None) -> ToolSpec | None:
        """Return the tool called ``name`` (``server.name`` works), or None if unknown.

        Raises:
            AmbiguousToolError: ``name`` exists on several servers and none was given.
        """
        found = self._find(name, server)
        if len(found) > 1:
            raise AmbiguousToolError(name, [s.qualified_name for s in found])
        return found[0] if found else None

    def get(self, name: str, server: str | None = None) -> ToolSpec:
        """Return the tool called ``name``.

        Raises:
            KeyError: no such tool (the message suggests close names).
            AmbiguousToolError: ``name`` exists on several servers (a `KeyError` too).
        """
        spec = self.lookup(name, server)
        if spec is None:
            where = f" on server {server!r}" if server else ""
            close = self.suggest(name)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"unknown tool {name!r}{where}{hint}")
        return spec

    def unavailable_reason(self, name: str, server: str | None = None) -> str | None:
        """Why a tool that is not in the catalog cannot be called, if a server is to blame.

        The server named (``server``, or the prefix of ``server.tool``) could not
        start: its message. The tool is unknown and some server could not start: the
        messages of those servers (the tool may have been one of theirs). Otherwise
        None (an unknown tool is just unknown).
        """
        if not self.unavailable:
            return None
        named = server
        if named is None and "." in name:
            prefix = name.partition(".")[0]
            named = prefix if prefix in self.unavailable else None
        if named is not None and named in self.unavailable:
            return self.unavailable[named]
        if named is None and not self._find(name, None):
            which = ", ".join(repr(s) for s in self.unavailable)
            details = "\n".join(self.unavailable.values())
            return (
                f"tool {name!r} is not available, and MCP server(s) {which} could not start "
                f"(it may be theirs):\n{details}"
            )
        return None

    def has(self, name: str, server: str | None = None) -> bool:
        """Whether a tool called ``name`` exists (an ambiguous name exists)."""
        return bool(self._find(name, server))

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Up to ``n`` known tool names close to ``name`` (best first)."""
        names = self.names()
        lowered = {q.lower(): q for q in names}
        for spec in self._specs.values():
            lowered.setdefault(spec.name.lower(), spec.qualified_name)
        out: list[str] = []
        if name.lower() in lowered:
            out.append(lowered[name.lower()])
        pool = list(dict.fromkeys([*names, *(s.name for s in self._specs.values())]))
        for match in difflib.get_close_matches(name, pool, n=n, cutoff=0.6):
            qualified = lowered.get(match.lower(), match)
            if qualified not in out:
                out.append(qualified)
        return out[:n]

    def required_args(self, name: str, server: str | None = None) -> list[str]:
        """The required argument names of a tool.

        Raises:
            KeyError: no such tool.
        """
        return self.get(name, server).required

    def arg_names(self, name: str, server: str | None = None) -> list[str]:
        """The argument names of a tool, in schema order.

        Raises:
            KeyError: no such tool.
        """
        return self.get(name, server).arg_names

    def validate(
        self, name: str, args: Mapping[str, Any], server: str | None = None
    ) -> dict[str, Any]:
        """Validate arguments for a tool; see `ToolSpec.validate`.

        Raises:
            KeyError: no such tool.
            pydantic.ValidationError: the arguments do not fit the schema.
        """
        return self.get(name, server).validate(args)


def load_tools(spec: str) -> list[BaseTool]:
    """Load tools from ``MODULE:ATTR``: a list/tuple of tools or a function returning one.

    Raises:
        ToolLoadError: the object cannot be imported, the function fails, or the
            result is not a list of langchain-core tools.
    """
    obj = load_object(spec)
    if callable(obj) and not isinstance(obj, BaseTool | list | tuple):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - any failure of user code
            raise ToolLoadError(f"{spec}: calling it failed: {exc!r}") from exc
    if not isinstance(obj, list | tuple):
        raise ToolLoadError(
            f"{spec}: expected a list of langchain-core tools (or a function returning "
            f"one), got {type(obj).__name__}"
        )
    tools: list[BaseTool] = []
    for i, item in enumerate(obj):
        if not isinstance(item, BaseTool):
            raise ToolLoadError(
                f"{spec}: item {i} is not a langchain-core tool: {type(item).__name__} "
                f"(wrap functions with langchain_core.tools.tool)"
            )
        tools.append(item)
    return tools


async def invoke_tool(
    spec: ToolSpec,
    args: Mapping[str, Any],
    config: RunnableConfig | None = None,
    *,
    validated: BaseModel | None = None,
    direct: bool = True,
    callbacks: bool | None = None,
) -> Any:
    """Call a tool asynchronously and return what it gives.

    A ``content_and_artifact`` tool gives its artifact (its content if it has none).
    Tools that turn their own errors into text (``handle_tool_error``) are called with
    a tool call, so that such an error raises `ToolCallError` instead of passing as
    output. Other exceptions propagate.

    A plain `StructuredTool` (`direct_call`) is called *directly* when no callback would
    see the call (no ``config``, no callbacks in the context, no LangSmith tracing, no
    langchain debug): its arguments validated as langchain's ``_parse_input`` does (or
    taken from ``validated``), then its coroutine awaited (its function run in a daemon
    thread). The output, the exceptions and the validation errors are those of
    ``ainvoke``, without its per-call cost (type hints and signatures recomputed, a
    callback manager configured: ≈300 µs of CPU).

    Args:
        spec: The tool.
        args: Its arguments.
        config: The call's ``RunnableConfig`` (callbacks, tags, metadata, run name),
            given when the run is traced (`planexec.tracing`): always through
            ``ainvoke``.
        validated: ``spec.parse(args)``, when the caller has it (not validated again).
        direct: False to always go through ``ainvoke`` (tests compare the two paths).
        callbacks: `callbacks_around` as the caller found it in this context (the
            executor asks once per run); None: asked here.
    """
    fast = spec.direct if direct and config is None and _fastpaths.ON else None
    if fast is not None and not (callbacks_around() if callbacks is None else callbacks):
        return await fast.call(args, validated)
    tool = spec.tool
    artifact = tool.response_format == "content_and_artifact"
    if artifact or tool.handle_tool_error or tool.handle_validation_error:
        call = {"type": "tool_call", "name": tool.name, "args": dict(args), "id": _call_id()}
        message = await _ainvoke(tool, call, config)
        if isinstance(message, ToolMessage):
            if message.status == "error":
                raise ToolCallError(
                    str(message.content), tool=tool.name, content=message.content
                )
            if artifact and message.artifact is not None:
                return message.artifact
            return message.content
        return message
    return await _ainvoke(tool, dict(args), config)


def direct_coroutine(
    spec: ToolSpec,
    args: Mapping[str, Any],
    *,
    validated: BaseModel | None = None,
    callbacks: bool | None = None,
) -> Coroutine[Any, Any, Any] | None:
    """The coroutine `invoke_tool` would await on the direct path, when it is one.

    The tool's own coroutine, called with its validated keyword arguments: what
    `invoke_tool` (without ``config``) awaits for a plain `StructuredTool` with an async
    function when no callback would see the call. None otherwise (a sync function, a
    tool that needs ``ainvoke``, or a callback around): call `invoke_tool`. Awaiting it
    is calling the tool, with no wrapper between (a caller that drives the call itself
    saves their cost on every turn of the loop).

    Raises:
        pydantic.ValidationError: the arguments do not fit the schema.
    """
    fast = spec.direct
    if fast is None or not fast.is_async:
        return None
    if callbacks_around() if callbacks is None else callbacks:
        return None
    coro = fast.function(**fast.kwargs(args, validated))
    return cast("Coroutine[Any, Any, Any]", coro)


@dataclass(frozen=True)
class DirectCall:
    """What calling a plain `StructuredTool` directly needs, computed once per tool.

    langchain-core's ``ainvoke`` recomputes it on every call (type hints and the
    signature of the function, the fields with defaults).
    """

    name: str
    """The tool's name (for the thread of a sync function)."""
    function: Callable[..., Any] = field(repr=False)
    """The tool's coroutine function, or its sync function."""
    is_async: bool
    """Whether ``function`` is the coroutine function."""
    schema: type[BaseModel] = field(repr=False)
    """The tool's own args schema."""
    fields: frozenset[str]
    """The schema's field names."""
    defaults: tuple[str, ...]
    """Fields with a default: passed explicitly even when not given (as langchain does)."""
    order: tuple[str, ...] = ()
    """The schema's field names in its order (the order of the keyword arguments)."""
    only_given: bool = False
    """Pass only the arguments given (validated), never a field's default: the tool's
    ``_parse_input`` keeps only those (`DIRECT_ARGUMENTS` ``"given"``)."""

    def kwargs(self, args: Mapping[str, Any], validated: BaseModel | None) -> dict[str, Any]:
        """The keyword arguments the tool's ``_parse_input`` would call the function with.

        Raises:
            pydantic.ValidationError: the arguments do not fit the schema.
        """
        if not self.fields and not self.only_given:
            return {}  # langchain ignores the input of a tool without arguments
        model = validated if validated is not None else self.schema.model_validate(dict(args))
        given = model.model_fields_set
        defaults = () if self.only_given else self.defaults
        out: dict[str, Any] = {}
        for key in self.order:
            if key in given or key in defaults or (key in args and not self.only_given):
                out[key] = getattr(model, key)
        for key in model.model_extra or {}:
            out[key] = getattr(model, key)
        return out

    async def call(self, args: Mapping[str, Any], validated: BaseModel | None = None) -> Any:
        """Call the function with the arguments validated; return what it returns."""
        kwargs = self.kwargs(args, validated)
        if self.is_async:
            return await self.function(**kwargs)
        return await run_in_daemon_thread(functools.partial(self.function, **kwargs), self.name)


_LANGCHAIN_PARAMS = frozenset({"config", "callbacks", "run_manager"})
"""Parameters langchain fills in itself (a function taking them needs ``ainvoke``)."""


DIRECT_ARGUMENTS = "planexec_direct_arguments"
"""The class attribute by which a `StructuredTool` subclass says it may be called directly.

Its value says which arguments its ``_parse_input`` passes to the function: ``"given"``,
only those the call gave (validated), never a field's default, and those even when its
schema names no field (langchain would pass none). The subclass promises
that apart from that, calling it is calling a `StructuredTool` (planexec's MCP tools:
`planexec.mcp.MCPTool`)."""


def direct_call(spec: ToolSpec) -> DirectCall | None:
    """How to call a tool directly, or None when only ``ainvoke`` is equivalent.

    Direct: a `StructuredTool` itself, or a subclass that declares `DIRECT_ARGUMENTS`;
    ``response_format="content"``, no ``handle_tool_error``/``handle_validation_error``,
    no callbacks or verbosity of its own, its own pydantic args schema as the catalog's
    (no injected arguments), and a function that takes none of ``config``,
    ``callbacks``, ``run_manager`` or a ``RunnableConfig``. Everything else (other
    `BaseTool` subclasses, artifacts...) goes through ``ainvoke``.
    """
    tool = spec.tool
    declared = getattr(type(tool), DIRECT_ARGUMENTS, None)
    if declared not in (None, "given"):
        return None
    if type(tool) is not StructuredTool and declared is None:
        return None
    if not isinstance(tool, StructuredTool) or tool.response_format != "content":
        return None
    if tool.handle_tool_error or tool.handle_validation_error or tool.callbacks or tool.verbose:
        return None
    schema = tool.args_schema
    if schema is not spec.args_schema or not (
        isinstance(schema, type) and issubclass(schema, BaseModel)
    ):
        return None
    function = tool.coroutine if tool.coroutine is not None else tool.func
    if function is None or _takes_langchain_params(function):
        return None
    fields = schema.model_fields
    return DirectCall(
        name=tool.name,
        function=function,
        is_async=tool.coroutine is not None,
        schema=schema,
        fields=frozenset(fields),
        order=tuple(schema.model_fields),
        only_given=declared == "given",
        defaults=tuple(
            k for k, f in fields.items() if k not in ("args", "kwargs") and not f.is_required()
        ),
    )


def _takes_langchain_params(function: Callable[..., Any]) -> bool:
    """Whether langchain would pass a function a config, callbacks or a run manager."""
    try:
        params = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True
    if _LANGCHAIN_PARAMS & set(params):
        return True
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - unresolvable annotations: let langchain call it
        return True
    return any(hint is RunnableConfig for hint in hints.values())


ProgressSink = Callable[[float, "float | None", "str | None"], "Awaitable[None] | None"]
"""Where a tool call's progress goes: ``sink(progress, total, message)``, awaited when it
returns an awaitable."""

_progress: contextvars.ContextVar[ProgressSink | None] = contextvars.ContextVar(
    "planexec_tool_progress", default=None
)


def progress_sink() -> ProgressSink | None:
    """Where the tool call being made reports its progress, or None (nobody listens).

    Read it in the call's own context (a task the call starts inherits it; a callback
    the call hands to another task should capture it first, as the MCP client does).
    """
    return _progress.get()


async def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """Report the progress of the tool call being made, from inside the tool.

    Nothing happens outside a call, or when nobody listens to the run's events or
    trace. Inside a call of the executor it becomes a `planexec.events.ToolProgress`
    naming the run, the step and the tool.
    """
    sink = _progress.get()
    if sink is not None:
        out = sink(progress, total, message)
        if out is not None:
            await out


class _Reporting:
    """The block of `reporting_progress` (a class: cheaper than a generator's, per call)."""

    __slots__ = ("sink", "token")

    def __init__(self, sink: ProgressSink | None) -> None:
        self.sink = sink
        self.token: contextvars.Token[ProgressSink | None] | None = None

    def __enter__(self) -> None:
        self.token = _progress.set(self.sink)

    def __exit__(self, *exc: object) -> None:
        assert self.token is not None
        _progress.reset(self.token)


def reporting_progress(sink: ProgressSink | None) -> AbstractContextManager[None]:
    """Send the progress of calls made in this block (this context) to ``sink``."""
    return _Reporting(sink)


def callbacks_around() -> bool:
    """Whether a langchain callback would see a tool call made now.

    Callbacks in the context's runnable config (planexec running inside a langchain
    runnable), LangSmith tracing (environment or context), langchain's debug mode, or
    a configure hook set in the context (e.g. ``collect_runs``). Then tools go through
    ``ainvoke``, which runs them.
    """
    config = var_child_runnable_config.get()
    if config and config.get("callbacks"):
        return True
    if get_debug() or lc_tracing.tracing_v2_callback_var.get() is not None:
        return True
    if langsmith.utils.tracing_is_enabled():
        return True
    hooks = getattr(lc_tracing, "_configure_hooks", None)  # langchain's hook registry
    if hooks is None:
        return True  # unknown langchain layout: assume someone listens
    for var, _inheritable, handler_class, env_var in hooks:
        if var.get() is not None:
            return True
        if env_var is not None and handler_class is not None and env_var_is_set(env_var):
            return True
    return False


def _call_id() -> str:
    return f"planexec-{uuid.uuid4().hex[:12]}"


def sync_only(tool: BaseTool) -> bool:
    """Whether a tool has no async implementation (only a sync function or ``_run``)."""
    coroutine = getattr(tool, "coroutine", _NO_ATTR)
    if coroutine is not _NO_ATTR:  # StructuredTool, Tool
        return coroutine is None
    return type(tool)._arun is BaseTool._arun


_NO_ATTR = object()


async def _ainvoke(tool: BaseTool, payload: Any, config: RunnableConfig | None = None) -> Any:
    if sync_only(tool):
        call = functools.partial(tool.invoke, payload, config)
        return await run_in_daemon_thread(call, tool.name)
    return await tool.ainvoke(payload, config)


async def run_in_daemon_thread(fn: Callable[[], Any], name: str) -> Any:
    """Run a blocking function in a daemon thread of its own and await its result.

    Unlike the event loop's default executor (which langchain uses for sync tools), the
    thread is not joined when the loop or the process ends: when the awaiting task is
    cancelled (a timeout, Ctrl-C), the call is abandoned and logged, and keeps running
    until it returns on its own; its result is then dropped.

    Args:
        fn: The call to make (with the caller's context variables).
        name: The tool's name, for the thread's name and the log.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def work() -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, context.run(fn))
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome = (False, exc)
        except BaseException as exc:  # noqa: BLE001 - SystemExit must not stop the loop
            outcome = (False, RuntimeError(f"tool {name!r} raised {type(exc).__name__}: {exc}"))
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits for this call any more
            pass

    thread = threading.Thread(target=work, name=f"planexec-tool-{name}", daemon=True)
    thread.start()
    try:
        return await future
    except asyncio.CancelledError:
        if thread.is_alive():
            logger.bind(run_id="-", step_id=None).warning(
                "tool {!r} runs in a thread that cannot be stopped: abandoned (it keeps "
                "running until it returns, and its result is dropped)",
                name,
            )
        raise


def _text_blocks(content: Any) -> str | None:
    """The joined text of a list of text content blocks, or None if it is not one."""
    if not isinstance(content, list) or not content:
        return None
    texts = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text" and "text" in block:
            texts.append(str(block["text"]))
        else:
            return None
    return "".join(texts)


def _adapter_artifact(raw: Any) -> Any:
    """The structured content of a langchain-mcp-adapters output, or `_NO_ATTR`.

    The adapter's tools answer ``(content, {"structured_content": X})`` to a call with
    plain arguments and put ``{"structured_content": X}`` in a `ToolMessage`'s artifact
    (its ``MCPToolArtifact``). A pair without an artifact gives its content (text
    blocks joined).
    """
    if isinstance(raw, Mapping) and set(raw) == {"structured_content"}:
        return raw["structured_content"]
    if isinstance(raw, tuple) and len(raw) == 2:
        content, artifact = raw
        if isinstance(artifact, Mapping) and set(artifact) == {"structured_content"}:
            return artifact["structured_content"]
        text = _text_blocks(content)
        if artifact is None and text is not None:
            return text
    return _NO_ATTR


def normalize_output(raw: Any) -> tuple[Any, Any]:
    """Return ``(structured, raw)`` for a tool's output.

    - dicts, lists and pydantic models keep their structure;
    - a string holding a JSON object or array is parsed (the text is kept as raw);
      other strings (including JSON scalars like ``"42"``) stay strings;
    - a `ToolMessage` gives its artifact, or else its content (text blocks joined);
    - an MCP artifact as langchain-mcp-adapters makes it, ``{"structured_content": X}``
      (also inside a ``(content, artifact)`` pair), gives ``X``; a pair without one
      gives its content.

    Raises:
        ToolOutputError: JSON text nested too deeply for the parser.
    """
    if type(raw) is dict and (len(raw) != 1 or "structured_content" not in raw):
        return raw, raw  # plain data, the common case (no adapter's artifact)
    if isinstance(raw, ToolMessage):
        if raw.artifact is not None:
            structured, _ = normalize_output(raw.artifact)
            return structured, raw.artifact
        content: Any = raw.content
        text = _text_blocks(content)
        if text is not None:
            content = text
        return normalize_output(content)
    structured_content = _adapter_artifact(raw)
    if structured_content is not _NO_ATTR:
        structured, _ = normalize_output(structured_content)
        return structured, raw
    if isinstance(raw, str):
        stripped = raw.strip()
        if stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                return raw, raw
            except RecursionError as exc:
                raise ToolOutputError(
                    f"the output is JSON text nested too deeply to read "
                    f"(more than {MAX_JSON_DEPTH} levels are refused)"
                ) from exc
            if isinstance(parsed, dict | list):
                return parsed, raw
        return raw, raw
    if isinstance(raw, tuple):
        return list(raw), raw
    return raw, raw


def _json_size(data: Any, limit: int | None) -> int:
    """The length of ``data``'s compact JSON text, counted up to just over ``limit``."""
    size = 0
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for chunk in encoder.iterencode(data):
        size += len(chunk)
        if limit is not None and size > limit:
            break
    return size


def check_output(raw: Any, *, limit: int | None = None) -> tuple[Any, Any, list[str]]:
    """Normalize a tool's output and check that it can be kept as it is.

    Args:
        raw: What the tool returned.
        limit: The largest output kept, in characters: the length of a text output
            (before its JSON is parsed), else of the output's compact JSON encoding.

    Returns:
        ``(output, raw, warnings)``: `normalize_output`'s pair, and what JSON cannot
        keep of it (colliding keys, objects recorded as their ``repr``; see
        `planexec.results.encode_json`).

    Raises:
        ToolOutputError: the output is over ``limit``, contains itself (a cycle), or is
            nested deeper than `planexec.results.MAX_JSON_DEPTH`.
    """
    if limit is not None and isinstance(raw, str) and len(raw) > limit:
        raise ToolOutputError(_too_large(len(raw), limit), size=len(raw), limit=limit)
    output, raw_out = normalize_output(raw)
    bound = plain_json_size(output) if _fastpaths.ON else None
    if bound is not None and (limit is None or isinstance(raw, str) or bound <= limit):
        return output, raw_out, []  # plain JSON data, surely within the limit: as it is
    encoded = encode_json(output)
    if encoded.error is not None:
        raise ToolOutputError(f"the output cannot be kept: {encoded.error}")
    if limit is not None and not isinstance(raw, str):
        size = _json_size(encoded.data, limit)
        if size > limit:
            message = _too_large(size, limit, json_text=True)
            raise ToolOutputError(message, size=size, limit=limit)
    return output, raw_out, encoded.warnings


def _too_large(size: int, limit: int, *, json_text: bool = False) -> str:
    what = "as JSON " if json_text else ""
    more = "more than " if json_text else ""
    return (
        f"the output is {more}{size:,} characters {what}long, over the limit of "
        f"{limit:,} (executor.max_output_chars / executor.tool_output_limits); it was not kept"
    )


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


_PLAIN_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})


def _raw_error(raw: Any) -> str | None:
    """The message of a raw output that is itself marked as an error, if it is one.

    A `ToolMessage` whose ``status`` is ``"error"`` (langchain's own error marker, which
    `normalize_output` would turn into its content), or an MCP-style result object whose
    ``isError``/``is_error`` attribute is true.
    """
    if type(raw) in _PLAIN_TYPES:  # plain data has no such attribute
        return None
    if isinstance(raw, ToolMessage):
        if raw.status != "error":
            return None
        text = _text_blocks(raw.content)
        message = text if text is not None else as_text(raw.content)
        return message or "the tool returned a ToolMessage with status 'error'"
    for attr in ("isError", "is_error"):
        if getattr(raw, attr, None) is True:
            content = getattr(raw, "content", None)
            return as_text(content) if content else f"the tool reported {attr}=true"
    return None


def error_payload(
    output: Any, keys: Sequence[str] = ("error",), *, raw: Any = None
) -> str | None:
    """The error message an output carries, or None if it carries none.

    An output carries an error when it is a dict (or pydantic model) with a truthy
    value under one of ``keys``, or an MCP-style result with ``isError``/``is_error``
    true (its text content is the message). ``raw`` is what the tool returned, before
    `normalize_output`: a `ToolMessage` with ``status="error"`` or a result object
    flagged ``isError`` carries its error there (normalizing keeps only its content).
    """
    flagged = _raw_error(raw)
    if flagged is not None:
        return flagged
    data: Any = output
    if type(output) is not dict:  # the common case needs none of these checks
        if isinstance(output, BaseModel):
            data = output.model_dump()
        if not isinstance(data, Mapping):
            return None
    for flag in ("isError", "is_error"):
        if data.get(flag) is True:
            content = data.get("content")
            text = _text_blocks(content)
            if text is None:
                text = _as_text(content) if content is not None else _as_text(dict(data))
            return text or f"the tool reported {flag}=true"
    for key in keys:
        value = data.get(key)
        if value:
            return _as_text(value)
    return None
