"""Tools from MCP servers, as langchain-core tools, over one persistent session per server.

`load_mcp_config` reads the configuration shape users already know::

    {"mcpServers": {
        "iot": {"command": "python", "args": ["-m", "planexec.examples.mcp_server", "iot"],
                "env": {"IOT_DEBUG": "1"}, "cwd": "."},
        "remote": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer x"}}
    }}

`MCPToolset` (also exported as `MCPSessionPool`) is an async context manager that opens
ONE session per server (stdio subprocess or streamable HTTP) for its whole lifetime, lists
each server's tools and turns them into `StructuredTool` objects:

- the input schema becomes a pydantic model (so `ToolCatalog.validate`, required
  arguments and coercion work unchanged) that keeps the schema WHOLE: arguments are
  checked against all of it with `jsonschema` before any call (``minimum``, ``pattern``,
  ``enum``, ``$ref``, formats...; `planexec.schemas`), a violation is ``ARGS_INVALID``
  naming the argument and the rule, and the schema shown to the planner is the
  server's; unknown arguments are rejected unless the schema allows additional
  properties, so nothing is dropped silently;
- a server's ``-32602`` (invalid params) raises `MCPArgumentsError`: ``ARGS_INVALID``,
  never retried; a tool that requires task-augmented execution, or whose schema is
  not valid JSON Schema, is not offered (`MCPToolset.skipped` says why);
- ``readOnlyHint`` / ``destructiveHint`` / ``idempotentHint`` become
  ``tool.metadata["planexec"]`` safety hints, with the server's name under ``"server"``
  (plans name servers with ``#ServerN`` or ``server.tool``);
- an ``is_error`` result raises a `ToolException` carrying the server's message (the
  executor reports ``TOOL_ERROR``); structured content is returned as structure;
- a server that fails to start raises `ToolLoadError` naming the server with the tail
  of its stderr; a server that dies mid-run makes its pending and later calls fail
  with a `ToolException` naming the server and its stderr tail, never a hang: every
  wait is bounded.

Each session lives in its own asyncio task, so a dying server cannot cancel the caller,
and the SDK client is entered and exited in the same task whatever task uses the toolset.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import keyword
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Annotated, Any, ClassVar, Literal, Union

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from planexec._log import logger
from planexec.errors import ConfigError, ToolArgumentsError, ToolLoadError, require_extra
from planexec.schemas import InvalidSchemaError, SchemaArgs, schema_validator
from planexec.tools import progress_sink

require_extra("mcp", "mcp")

import mcp_types  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

__all__ = [
    "HTTPServerConfig",
    "MCPArgumentsError",
    "MCPConfig",
    "MCPProgress",
    "MCPServerSession",
    "MCPSessionPool",
    "MCPTool",
    "MCPToolset",
    "MemoryTokenStorage",
    "OAuthClientCredentials",
    "ServerConfig",
    "StdioServerConfig",
    "load_mcp_config",
    "mcp_tool_to_langchain",
    "schema_to_model",
    "unavailable_marker",
]

DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds a tool call may take, unless the server's config or the caller says otherwise."""
DEFAULT_STARTUP_TIMEOUT = 30.0
"""Seconds a server may take to start, complete the handshake and list its tools."""
STDERR_TAIL = 2000
"""Characters of a server's stderr quoted in error messages."""

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


# --------------------------------------------------------------------------- config


class StdioServerConfig(BaseModel):
    """A server started as a subprocess, spoken to over its stdin/stdout."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["stdio"] | None = None
    """Optional transport tag; ``stdio`` when given."""
    command: str = Field(min_length=1)
    """The executable to run (looked up on ``PATH``)."""
    args: list[str] = Field(default_factory=list)
    """Its command-line arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables, merged over the SDK's safe default environment."""
    cwd: str | None = None
    """Working directory; relative paths are relative to the config file."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds a tool call may take (default `DEFAULT_CALL_TIMEOUT`)."""
    startup_timeout: float | None = Field(default=None, gt=0)
    """Seconds the server may take to start and list its tools."""


class OAuthClientCredentials(BaseModel):
    """OAuth 2 for an HTTP server: the client credentials grant, by the MCP SDK's client auth.

    On the server's ``401`` the SDK discovers the authorization server (protected
    resource metadata, then the server's metadata), asks its token endpoint for a token
    with the client's id and secret, and sends it as a bearer token; tokens are kept in
    memory for the session (`MemoryTokenStorage`) and asked again when they expire.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["oauth"]
    """``oauth``."""
    grant: Literal["client_credentials"] = "client_credentials"
    """The grant: only ``client_credentials`` (a machine client; the authorization code
    flow needs a person and a browser, which a runtime does not have)."""
    client_id: str = Field(min_length=1)
    """The client's id at the authorization server."""
    client_secret_env: str = Field(min_length=1)
    """The environment variable holding the client's secret (never the secret itself:
    the config file holds no secret). Read when the session starts."""
    scopes: list[str] = Field(default_factory=list)
    """Scopes to ask for (none: the server's default)."""
    issuer: str | None = None
    """The authorization server the credentials belong to (its issuer URL): a token is
    only asked of that server, whatever the MCP server points to. Strongly advised;
    without it the SDK warns (``MCPDeprecationWarning``) and uses the one discovered."""
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post"] = (
        "client_secret_basic"
    )
    """How the secret is sent to the token endpoint."""

    def secret(self) -> str:
        """The client's secret, from `client_secret_env`.

        Raises:
            ToolLoadError: the variable is not set (or empty).
        """
        value = os.environ.get(self.client_secret_env)
        if not value:
            raise ToolLoadError(
                f"auth.client_secret_env: the environment variable "
                f"{self.client_secret_env!r} (the OAuth client secret) is not set"
            )
        return value


class MemoryTokenStorage:
    """The SDK's ``TokenStorage`` in memory: one per session, gone when it closes."""

    def __init__(self) -> None:
        self._tokens: Any = None
        self._client: Any = None

    async def get_tokens(self) -> Any:
        """The tokens got so far (None before the first)."""
        return self._tokens

    async def set_tokens(self, tokens: Any) -> None:
        """Keep the tokens."""
        self._tokens = tokens

    async def get_client_info(self) -> Any:
        """The client's information (None before it is set)."""
        return self._client

    async def set_client_info(self, client_info: Any) -> None:
        """Keep the client's information."""
        self._client = client_info


class HTTPServerConfig(BaseModel):
    """A server reached over streamable HTTP."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["http", "streamable-http", "streamable_http"] | None = None
    """Optional transport tag."""
    url: str = Field(min_length=1)
    """The MCP endpoint, e.g. ``http://127.0.0.1:8000/mcp``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request (e.g. ``Authorization``)."""
    auth: OAuthClientCredentials | None = None
    """OAuth for the server (`OAuthClientCredentials`), instead of a static
    ``Authorization`` header."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds a tool call may take (default `DEFAULT_CALL_TIMEOUT`)."""
    startup_timeout: float | None = Field(default=None, gt=0)
    """Seconds the server may take to answer the handshake and list its tools."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_authorization(self) -> HTTPServerConfig:
        if self.auth is not None and any(k.lower() == "authorization" for k in self.headers):
            raise ValueError(
                "headers.Authorization and auth are both set: authenticate one way "
                "(auth gets and sends the bearer token itself)"
            )
        return self

    def oauth_provider(self) -> Any:
        """The SDK's ``httpx.Auth`` for `auth` (None without it).

        Raises:
            ToolLoadError: the client secret's environment variable is not set.
        """
        auth = self.auth
        if auth is None:
            return None
        from mcp.client.auth.extensions.client_credentials import (
            ClientCredentialsOAuthProvider,
        )

        return ClientCredentialsOAuthProvider(
            server_url=self.url,
            storage=MemoryTokenStorage(),
            client_id=auth.client_id,
            client_secret=auth.secret(),
            token_endpoint_auth_method=auth.token_endpoint_auth_method,
            scope=" ".join(auth.scopes) or None,
            issuer=auth.issuer,
        )


def _server_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "http" if "url" in value else "stdio"
    return "http" if isinstance(value, HTTPServerConfig) else "stdio"


ServerConfig = Annotated[
    Union[  # noqa: UP007 - a tagged union needs the Union form for Tag annotations
        Annotated[StdioServerConfig, Tag("stdio")],
        Annotated[HTTPServerConfig, Tag("http")],
    ],
    Discriminator(_server_kind),
]
"""One server: stdio (``command``) or streamable HTTP (``url``)."""


class MCPConfig(BaseModel):
    """The ``{"mcpServers": {...}}`` configuration."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, ServerConfig] = Field(alias="mcpServers")
    """Servers by name; the name is what plans write in ``#ServerN`` and ``server.tool``."""

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("mcpServers is empty: configure at least one server")
        for name in value:
            if not _SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r} must use only letters, digits, '_' and '-' "
                    "(plans refer to it as #ServerN and in server.tool names)"
                )
        return value


_THIS_PYTHON = frozenset({"python", "python3"})
"""Commands that mean the Python running planexec (see `load_mcp_config`)."""


def load_mcp_config(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any] | MCPConfig,
) -> MCPConfig:
    """Read and validate an MCP configuration (a JSON file path or its parsed data).

    Unknown keys are rejected. A relative ``cwd`` is made relative to the file's folder.
    A ``command`` that is exactly ``python`` or ``python3`` is the Python running
    planexec (``sys.executable``), so a config starting ``python -m some.server`` works
    from any environment, activated or not, and starts the server with the packages
    planexec sees; write a path (e.g. ``/usr/bin/python3``) to run another Python.

    Raises:
        ConfigError: the file cannot be read, is not JSON, or does not validate.
    """
    if isinstance(path_or_dict, MCPConfig):
        return path_or_dict
    base: Path | None = None
    where = "MCP config"
    if isinstance(path_or_dict, Mapping):
        data: Any = dict(path_or_dict)
    else:
        path = Path(path_or_dict)
        where = f"MCP config {str(path)!r}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {where}: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} is not valid JSON: {exc}") from exc
        base = path.resolve().parent
    try:
        config = MCPConfig.model_validate(data)
    except ValidationError as exc:
        from planexec._validation import describe_errors

        raise ConfigError(
            f"invalid {where}: " + "; ".join(describe_errors(exc, data, MCPConfig))
        ) from exc
    for server in config.servers.values():
        if isinstance(server, StdioServerConfig) and server.command in _THIS_PYTHON:
            server.command = sys.executable or server.command
    if base is not None:
        for server in config.servers.values():
            if isinstance(server, StdioServerConfig) and server.cwd:
                cwd = Path(server.cwd)
                if not cwd.is_absolute():
                    server.cwd = str(base / cwd)
    return config


# --------------------------------------------------------------------------- schemas


_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
    "object": dict[str, Any],
    "array": list[Any],
}


def _union(types_: list[Any]) -> Any:
    unique: list[Any] = []
    for t in types_:
        if t not in unique:
            unique.append(t)
    if Any in unique:
        return Any
    if len(unique) == 1:
        return unique[0]
    out = unique[0]
    for t in unique[1:]:
        out = Union[out, t]  # noqa: UP007 - built at run time from values
    return out


def _py_type(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    """A Python type for a JSON schema fragment (nested objects stay ``dict``)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return Any
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/") else None
        return _py_type(target, defs, depth + 1) if target is not None else Any
    if "const" in schema and isinstance(schema["const"], str | int | bool | float):
        return Literal[schema["const"]]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(
        isinstance(v, str | int | bool | float) or v is None for v in enum
    ):
        return Literal[tuple(enum)]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _union([_py_type(o, defs, depth + 1) for o in options])
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return _py_type(all_of[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([_py_type({**schema, "type": k}, defs, depth + 1) for k in kind])
    if kind == "array":
        items = schema.get("items")
        return list[_py_type(items, defs, depth + 1)] if items else list[Any]  # type: ignore[misc]
    if isinstance(kind, str):
        return _JSON_TYPES.get(kind, Any)
    if "properties" in schema:
        return dict[str, Any]
    return Any


def schema_to_model(name: str, schema: Mapping[str, Any] | None) -> type[BaseModel]:
    """Build a pydantic model from a tool's JSON input schema, keeping the schema whole.

    Required properties are required fields; optional ones keep their default (or
    None, and are then not sent unless given). Names that are not Python identifiers
    (or clash with pydantic) become aliased fields. Extra arguments are forbidden unless
    the schema sets ``additionalProperties``. The model is a `planexec.schemas.SchemaArgs`:
    validation also checks the arguments against the whole schema with `jsonschema`
    (``minimum``, ``pattern``, ``enum``, ``$ref``, formats...), and its
    ``model_json_schema()`` is the schema as given.

    Raises:
        InvalidSchemaError: the schema is not a valid JSON Schema.
    """
    schema = dict(schema or {})
    defs: dict[str, Any] = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    fields: dict[str, Any] = {}
    for prop, prop_schema in props.items():
        ptype = _py_type(prop_schema, defs)
        description = prop_schema.get("description") if isinstance(prop_schema, Mapping) else None
        field_name = prop
        alias: str | None = None
        if (
            not prop.isidentifier()
            or keyword.iskeyword(prop)
            or prop.startswith("_")
            or (prop.startswith("model_") and hasattr(BaseModel, prop))
        ):
            field_name = "f_" + re.sub(r"\W", "_", prop).lstrip("_")
            while field_name in props or field_name in fields:
                field_name += "_"
            alias = prop
        if prop in required:
            default: Any = ...
        elif isinstance(prop_schema, Mapping) and "default" in prop_schema:
            default = prop_schema["default"]
        else:
            ptype = ptype if ptype is Any else ptype | None
            default = None
        fields[field_name] = (
            ptype,
            Field(default=default, description=description, alias=alias),
        )
    extra: Literal["allow", "forbid"] = (
        "allow" if schema.get("additionalProperties") not in (None, False) else "forbid"
    )
    model_name = re.sub(r"\W", "_", name) or "tool"
    validator = schema_validator(schema)  # raises InvalidSchemaError before any model
    base = type(
        f"{model_name}_schema",
        (SchemaArgs,),
        {
            "model_config": ConfigDict(
                extra=extra, populate_by_name=True, protected_namespaces=()
            ),
            "__json_schema__": copy.deepcopy(schema),
            "__schema_validator__": validator,
            "__module__": __name__,
        },
    )
    with warnings.catch_warnings():
        # A property named like a BaseModel method ("json", "schema") shadows it: fine here.
        warnings.simplefilter("ignore")
        model: type[BaseModel] = create_model(f"{model_name}_args", __base__=base, **fields)
    return model


def _wire_arguments(model: type[BaseModel], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Turn a tool call's keyword arguments back into the server's argument names."""
    aliases = {n: f.alias for n, f in model.model_fields.items() if f.alias}
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True)
        out[aliases.get(key, key)] = value
    return out


# --------------------------------------------------------------------------- results


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text blocks of a tool result, joined (other blocks are named by type)."""
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{block.type} content]")
    return "\n".join(parts)


def _is_wrapper_schema(schema: Mapping[str, Any] | None, tool: str | None) -> bool:
    """Whether an output schema is the SDK's ``{"result": ...}`` wrapper of a non-object."""
    if not schema or tool is None:
        return False
    props = schema.get("properties")
    return (
        isinstance(props, Mapping)
        and set(props) == {"result"}
        and schema.get("title") == f"{tool}Output"
    )


def result_value(
    result: mcp_types.CallToolResult,
    output_schema: Mapping[str, Any] | None = None,
    tool: str | None = None,
) -> Any:
    """The useful value of a successful tool result.

    Structured content is returned as structure. The SDK wraps a non-object output as
    ``{"result": value}``: the wrapper is removed when the tool's output schema is that
    wrapper (``<tool>Output`` with only ``result``), or when the text content parses to
    exactly the wrapped value (or is that string). Without structured content, text
    blocks are returned as text (planexec parses JSON text downstream); other content is
    returned as a list of content dicts.
    """
    structured = result.structured_content
    if structured is not None:
        if isinstance(structured, Mapping) and set(structured) == {"result"}:
            if _is_wrapper_schema(output_schema, tool):
                return structured["result"]
            wrapped = structured["result"]
            text = result_text(result)
            if isinstance(wrapped, str) and text == wrapped:
                return wrapped  # a string output, given as its own text
            try:
                if json.loads(text) == wrapped:
                    return wrapped
            except ValueError:
                pass
        return structured
    content = list(result.content)
    if not content:
        return None
    if all(getattr(block, "type", None) == "text" for block in content):
        return result_text(result)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in content]


# --------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class MCPProgress:
    """A progress notification of a tool call (see `MCPToolset` ``on_progress``)."""

    server: str
    """The server's name."""
    tool: str
    """The tool being called."""
    progress: float
    """How far it is (increases with each notification)."""
    total: float | None
    """The total, when the server knows it."""
    message: str | None
    """What the server says it is doing."""


class MCPServerSession:
    """One persistent session with one MCP server, run in its own task.

    Created and driven by `MCPToolset`; `call` may be used from any task.
    """

    def __init__(
        self,
        name: str,
        config: StdioServerConfig | HTTPServerConfig,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        on_progress: Callable[[MCPProgress], Any] | None = None,
    ) -> None:
        self.name = name
        """The server's name in the configuration."""
        self.config = config
        """Its configuration."""
        self.call_timeout = config.timeout or call_timeout
        """Seconds a tool call may go without a word from the server (its result or a
        progress notification): an idle timeout."""
        self.startup_timeout = config.startup_timeout or startup_timeout
        """Seconds the server may take to start and list its tools."""
        self.tools: list[mcp_types.Tool] = []
        """The tools the server listed."""
        self.error: str | None = None
        """Why the session ended or never started, once it has."""
        self.calls = 0
        """Tool calls made through this session."""
        self.on_progress: Callable[[MCPProgress], Any] | None = on_progress
        """Called (and awaited, if it returns an awaitable) with each progress
        notification of a call of this session."""
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._stderr: IO[str] | None = None
        self.http_status: int | None = None
        """The last HTTP error status (>= 400) the server answered with (HTTP servers)."""

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if isinstance(self.config, StdioServerConfig) else "http"

    @property
    def alive(self) -> bool:
        """Whether the session is open and usable."""
        return (
            self._task is not None
            and not self._task.done()
            and self._ready.is_set()
            and self.error is None
        )

    def stderr_tail(self, limit: int = STDERR_TAIL) -> str:
        """The last ``limit`` characters the server wrote to stderr (stdio servers)."""
        f = self._stderr
        if f is None or f.closed:
            return ""
        try:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size - limit * 4)
            data = os.pread(f.fileno(), size - start, start)
        except OSError:
            return ""
        return data.decode("utf-8", "replace")[-limit:].strip()

    def describe_failure(self, what: str) -> str:
        """A message naming the server, what went wrong and its stderr tail."""
        msg = f"MCP server {self.name!r} ({self._target()}) {what}"
        tail = self.stderr_tail()
        if tail:
            msg += f"\n--- stderr tail of {self.name!r} ---\n{tail}"
        return msg

    def _target(self) -> str:
        if isinstance(self.config, StdioServerConfig):
            return " ".join([self.config.command, *self.config.args])
        return self.config.url

    def _client_for(self) -> Client:
        if isinstance(self.config, StdioServerConfig):
            self._stderr = tempfile.TemporaryFile(  # noqa: SIM115 - closed in close()
                mode="w+", encoding="utf-8", prefix=f"planexec-mcp-{self.name}-"
            )
            params = StdioServerParameters(
                command=self.config.command,
                args=list(self.config.args),
                env=dict(self.config.env) or None,
                cwd=self.config.cwd,
            )
            transport = stdio_client(params, errlog=self._stderr)
            return Client(transport)  # calls are bounded by `call` (an idle timeout)
        return Client(
            _http_transport(
                self.config.url,
                dict(self.config.headers),
                self._on_http_status,
                auth=self.config.oauth_provider(),
            )
        )

    def _on_http_status(self, status: int) -> None:
        self.http_status = status

    def _http_hint(self) -> str:
        """The HTTP status of a refused request, with what to check for 401/403."""
        status = self.http_status
        if status is None:
            return ""
        if status in (401, 403):
            word = "Unauthorized" if status == 401 else "Forbidden"
            what = "the token in headers.Authorization"
            if isinstance(self.config, HTTPServerConfig) and self.config.auth is not None:
                what = "auth.client_id, the secret in auth.client_secret_env and auth.scopes"
            return (
                f" (HTTP {status} {word}: check {what} of server {self.name!r} in the MCP "
                "config)"
            )
        return f" (HTTP {status})"

    async def _serve(self) -> None:
        try:
            async with self._client_for() as client:
                tools: list[mcp_types.Tool] = []
                cursor: str | None = None
                for _ in range(100):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.tools = tools
                self._client = client
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:  # the session's end, whatever its cause, is reported
            self.error = self.error or _leaf(exc)
        finally:
            self._client = None
            if self.error is None and not self._stop.is_set():
                self.error = "the connection closed"

    async def start(self) -> None:
        """Start the server (stdio) or connect (HTTP), and list its tools.

        Raises:
            ToolLoadError: it did not start, answer or list its tools in time.
        """
        self._task = asyncio.create_task(self._serve(), name=f"mcp-session-{self.name}")
        ready = asyncio.create_task(self._ready.wait())
        try:
            done, _ = await asyncio.wait(
                {self._task, ready},
                timeout=self.startup_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            ready.cancel()
        if self._ready.is_set():
            logger.bind(run_id="-", step_id=None).debug(
                "MCP server {!r}: session open, {} tools", self.name, len(self.tools)
            )
            return
        if not done:
            what = f"did not start within {self.startup_timeout:g}s"
        else:
            what = f"failed to start: {self.error or 'the connection closed'}{self._http_hint()}"
        message = self.describe_failure(what)
        await self.close()
        raise ToolLoadError(message)

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float | None = None,
        *,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call a tool on this server and return its value (see `result_value`).

        Raises:
            ToolException: the server returned ``is_error``, is not running, or died
                during the call.
            TimeoutError: the call did not finish within the timeout.
        """
        client, task = self._client, self._task
        if client is None or task is None or task.done() or self.error is not None:
            raise ToolException(
                self.describe_failure(f"is not running ({self.error or 'session closed'})")
            )
        limit = timeout or self.call_timeout
        self.calls += 1
        heard = [time.monotonic(), 0]  # when the server last said something, how often
        # the call's own sink (the executor's ToolProgress of its step), read here, in the
        # call's context: the SDK calls `heard_progress` from the session's task
        sink = progress_sink()

        async def heard_progress(
            progress: float, total: float | None, message: str | None
        ) -> None:
            heard[0] = time.monotonic()
            heard[1] += 1
            note = MCPProgress(self.name, tool, progress, total, message)
            logger.bind(run_id="-", step_id=None).debug("MCP progress: {}", note)
            hook = self.on_progress
            if hook is not None:
                out = hook(note)
                if inspect.isawaitable(out):
                    await out
            if sink is not None:
                told = sink(progress, total, message)
                if told is not None:
                    await told

        # A progress token on every call (the SDK sends one when given a callback); the
        # limit is an idle timeout: each progress notification starts it again.
        call = asyncio.create_task(
            client.call_tool(
                tool, arguments, read_timeout_seconds=None, progress_callback=heard_progress
            )
        )
        done: set[asyncio.Future[Any]] = set()
        try:
            while not done:
                idle = heard[0] + limit - time.monotonic()
                if idle <= 0:
                    break
                done, _ = await asyncio.wait(
                    {call, task}, timeout=idle, return_when=asyncio.FIRST_COMPLETED
                )
        except BaseException:
            call.cancel()
            raise
        if call not in done:
            call.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(call), 1.0)
            if task.done():
                raise ToolException(
                    self.describe_failure(
                        f"died during a call to {tool!r} ({self.error or 'connection closed'})"
                    )
                )
            quiet = f" after {heard[1]} progress notifications" if heard[1] else ""
            raise TimeoutError(
                f"MCP server {self.name!r}: tool {tool!r} sent nothing for {limit:g}s{quiet}"
            )
        try:
            result = call.result()
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED or task.done():
                self._mark_dead(f"closed the connection during a call to {tool!r}")
                raise ToolException(
                    self.describe_failure(f"died during a call to {tool!r} ({exc.message})")
                ) from exc
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise TimeoutError(
                    f"MCP server {self.name!r}: tool {tool!r} did not answer within {limit:g}s"
                ) from exc
            if exc.code == mcp_types.INVALID_PARAMS:
                raise MCPArgumentsError(
                    f"MCP server {self.name!r} refused the arguments of {tool!r} "
                    f"(invalid params, {exc.code}): {exc.message}"
                ) from exc
            raise ToolException(
                f"MCP server {self.name!r}: call to {tool!r} failed: {exc.message}"
            ) from exc
        except TimeoutError as exc:
            raise TimeoutError(
                f"MCP server {self.name!r}: tool {tool!r} did not answer within {limit:g}s"
            ) from exc
        except Exception as exc:
            if task.done() or isinstance(exc, anyio_closed_errors()):
                self._mark_dead(f"closed the connection during a call to {tool!r}")
                raise ToolException(
                    self.describe_failure(f"died during a call to {tool!r} ({_leaf(exc)})")
                ) from exc
            raise ToolException(
                f"MCP server {self.name!r}: call to {tool!r} failed: {_leaf(exc)}"
            ) from exc
        if result.is_error:
            raise ToolException(
                f"MCP server {self.name!r}: tool {tool!r} returned an error: "
                f"{result_text(result) or '(no message)'}"
            )
        return result_value(result, output_schema, tool)

    def _mark_dead(self, why: str) -> None:
        if self.error is None:
            self.error = why
            logger.bind(run_id="-", step_id=None).warning(
                "MCP server {!r} {}; its later calls fail", self.name, why
            )
        self._stop.set()

    async def close(self, timeout: float = 10.0) -> None:
        """End the session (and stop a stdio server); bounded by ``timeout``."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            if not self._ready.is_set():
                task.cancel()  # still starting: nothing to wind down politely
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if not done:
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=3.0)
            if not done:
                logger.bind(run_id="-", step_id=None).warning(
                    "MCP server {!r}: session did not close in time; abandoning it", self.name
                )
        if self._stderr is not None and not self._stderr.closed:
            self._stderr.close()


class MCPArgumentsError(ToolArgumentsError, ToolException):
    """An MCP server refused a call's arguments (JSON-RPC ``-32602``, invalid params).

    A `ToolArgumentsError` (the step fails ``ARGS_INVALID``, the call is not retried)
    and a langchain `ToolException`.
    """


def _leaf(exc: BaseException) -> str:
    """The message of the innermost meaningful exception (exception groups unwrapped)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


@contextlib.asynccontextmanager
async def _http_transport(
    url: str, headers: dict[str, str], on_error_status: Any = None, *, auth: Any = None
) -> AsyncIterator[Any]:
    """A streamable HTTP transport sending ``headers`` with every request.

    ``on_error_status(status)`` is called for each response with a status >= 400 (the
    SDK reports those without their status). ``auth``: the SDK's OAuth provider, if any.
    """
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers or None, auth=auth) as http:
        if on_error_status is not None:

            async def hook(response: Any) -> None:
                if response.status_code >= 400:
                    on_error_status(response.status_code)

            http.event_hooks = {"request": [], "response": [hook]}
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def anyio_closed_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the connection to a server is gone."""
    import anyio

    return (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


# --------------------------------------------------------------------------- tools


def _hints(tool: mcp_types.Tool, server: str) -> dict[str, Any]:
    ann = tool.annotations
    read_only = ann.read_only_hint if ann else None
    destructive = ann.destructive_hint if ann else None
    idempotent = ann.idempotent_hint if ann else None
    if read_only and destructive is None:
        destructive = False
    return {
        "read_only": read_only,
        "idempotent": idempotent,
        "destructive": destructive,
        "server": server,
    }


def _unusable(tool: mcp_types.Tool) -> str | None:
    """Why planexec cannot call a listed tool directly, or None."""
    execution = tool.execution
    if execution is not None and execution.task_support == "required":
        return (
            "it requires task-augmented execution (execution.taskSupport 'required'), "
            "which planexec's client does not do"
        )
    return None


class MCPTool(StructuredTool):
    """A tool of an MCP server: a `StructuredTool` whose schema is the server's, whole.

    ``tool_call_schema`` is the args schema itself (an MCP tool has no injected
    arguments), so what langchain shows a model (``bind_tools``) is the server's input
    schema, not a copy rebuilt from the pydantic fields. Only the async path runs
    (``ainvoke``); ``invoke`` is refused, as for langchain-mcp-adapters' tools.

    planexec's executor calls it through its session directly, without ``ainvoke``'s
    per-call machinery, when no callback would see the call: it passes the arguments
    given, validated, as `_parse_input` does (`planexec.tools.DIRECT_ARGUMENTS`).
    """

    planexec_direct_arguments: ClassVar[str] = "given"
    """Called directly with the arguments given (`planexec.tools.DIRECT_ARGUMENTS`)."""

    @property
    def tool_call_schema(self) -> Any:
        """The args schema (its JSON Schema is the server's input schema)."""
        return self.args_schema

    def _parse_input(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> str | dict[str, Any]:
        """The validated input, keeping only the arguments the call gave.

        langchain-core (1.x) also passes every optional field's default; for a server's
        tool that would send ``null`` (or the schema's default) for arguments the call
        never gave, which the schema may not even allow. The server gets what was
        given and validated (`planexec.schemas.SchemaArgs` validates exactly that).
        """
        parsed = super()._parse_input(tool_input, tool_call_id)
        if not isinstance(parsed, dict) or not isinstance(tool_input, dict):
            return parsed
        fields = getattr(self.args_schema, "model_fields", {})
        given = {
            name
            for name, info in fields.items()
            if name in tool_input or (info.alias is not None and info.alias in tool_input)
        }
        return {k: v for k, v in parsed.items() if k in given or k not in fields}

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """The call's arguments: those given, validated, even when the schema names none.

        langchain-core calls a tool whose schema has no fields with no arguments at all;
        a server whose input schema names no property but allows others
        (``additionalProperties``) would get ``{}`` whatever the call gave.
        """
        if isinstance(tool_input, dict) and not getattr(self.args_schema, "model_fields", None):
            parsed = self._parse_input(tool_input, tool_call_id)
            if isinstance(parsed, dict):
                return (), dict(parsed)
        return super()._to_args_and_kwargs(tool_input, tool_call_id)


def mcp_tool_to_langchain(session: MCPServerSession, tool: mcp_types.Tool) -> BaseTool:
    """Wrap one MCP tool of a session as a langchain `StructuredTool`.

    The tool's ``metadata`` holds ``planexec`` (safety hints and ``server``) and ``mcp``
    (server, tool name, transport, output schema, annotations). Its args schema keeps
    the server's input schema whole (`schema_to_model`).

    Raises:
        InvalidSchemaError: the tool's input schema is not a valid JSON Schema.
    """
    model = schema_to_model(f"{session.name}_{tool.name}", tool.input_schema)
    name = tool.name

    output_schema = dict(tool.output_schema) if tool.output_schema else None

    async def _call(**kwargs: Any) -> Any:
        return await session.call(
            name, _wire_arguments(model, kwargs), output_schema=output_schema
        )

    description = (tool.description or tool.title or f"MCP tool {tool.name}").strip()
    lc_tool = MCPTool(
        name=tool.name,
        description=description,
        args_schema=model,
        coroutine=_call,
    )
    lc_tool.metadata = {
        "planexec": _hints(tool, session.name),
        "mcp": {
            "server": session.name,
            "tool": tool.name,
            "transport": session.transport,
            "input_schema": dict(tool.input_schema),
            "output_schema": output_schema,
            "annotations": (
                tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
            ),
        },
    }
    return lc_tool


def unavailable_marker(server: str, reason: str) -> BaseTool:
    """A marker for an MCP server that could not start (see `MCPToolset.markers`).

    Calling it raises `ToolException` with ``reason``.
    """

    def fail(**_kwargs: Any) -> Any:
        raise ToolException(reason)

    marker = StructuredTool.from_function(
        func=fail,
        name=f"unavailable_server_{server}",
        description=f"MCP server {server!r} could not start.",
        args_schema=schema_to_model(f"{server}_unavailable", {"type": "object"}),
        infer_schema=False,
    )
    marker.metadata = {"planexec": {"server": server, "unavailable": reason}}
    return marker


class MCPToolset:
    """Persistent sessions with the configured MCP servers, and their tools.

    Example:
        >>> async def main():  # doctest: +SKIP
        ...     async with MCPToolset("mcp.json") as toolset:
        ...         agent = PlanExecuteAgent(model, toolset.tools)
        ...         return await agent.run("Which assets are at site MAIN?")
    """

    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any] | MCPConfig,
        *,
        servers: list[str] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        strict: bool = True,
        on_progress: Callable[[MCPProgress], Any] | None = None,
    ) -> None:
        """Prepare sessions; nothing starts until the toolset is entered.

        Args:
            config: The MCP configuration (path, data or `MCPConfig`).
            servers: Only these servers (all by default).
            call_timeout: Seconds a tool call may go without a word from its server
                (its result or a progress notification), unless the server's config
                says otherwise.
            startup_timeout: Seconds a server may take to start and list its tools.
            on_progress: Called (awaited if it returns an awaitable) with each
                `MCPProgress` a server sends during a call. Every call carries a progress
                token, and each notification also restarts the call's idle timeout.
            strict: Raise `ToolLoadError` when a server fails to start (the default);
                when False, skip it with a warning, record it in ``failures`` and give
                a marker for it in ``markers`` (a `ToolCatalog` built with the markers
                fails steps naming that server with ``TOOL_ERROR`` and its message).

        Raises:
            ConfigError: the configuration is invalid or names unknown servers.
        """
        self.config = load_mcp_config(config)
        """The validated configuration."""
        names = list(self.config.servers)
        if servers is not None:
            unknown = [s for s in servers if s not in self.config.servers]
            if unknown:
                raise ConfigError(f"unknown MCP servers {unknown}; configured: {names}")
            names = list(servers)
        self.strict = strict
        """Whether a server that fails to start fails the whole toolset."""
        self.sessions: dict[str, MCPServerSession] = {
            n: MCPServerSession(
                n,
                self.config.servers[n],
                call_timeout=call_timeout,
                startup_timeout=startup_timeout,
                on_progress=on_progress,
            )
            for n in names
        }
        """One session per server, by name."""
        self.failures: dict[str, str] = {}
        """Servers that failed to start (non-strict mode), with the reason."""
        self.skipped: dict[str, str] = {}
        """Tools a server listed that planexec does not offer, by ``server.tool``, with
        why: a tool that requires task-augmented execution (``execution.taskSupport``
        ``required``; planexec calls tools directly), or whose input schema is not a
        valid JSON Schema (its arguments could not be checked)."""
        self._tools: dict[str, list[BaseTool]] = {}
        self._entered = False

    async def __aenter__(self) -> MCPToolset:
        """Start every server concurrently and list their tools.

        Raises:
            ToolLoadError: a server failed to start (strict mode), naming it with its
                stderr tail.
        """
        if self._entered:
            raise RuntimeError("MCPToolset is already open")
        self._entered = True
        outcomes = await asyncio.gather(
            *(s.start() for s in self.sessions.values()), return_exceptions=True
        )
        errors: list[str] = []
        for session, outcome in zip(list(self.sessions.values()), outcomes, strict=True):
            if isinstance(outcome, BaseException):
                errors.append(str(outcome))
                self.failures[session.name] = str(outcome)
                if not self.strict:
                    logger.bind(run_id="-", step_id=None).warning(
                        "MCP server {!r} is unavailable; steps that use it fail with "
                        "TOOL_ERROR: {}", session.name, outcome
                    )
                    del self.sessions[session.name]
                continue
            self._tools[session.name] = self._usable_tools(session)
        if errors and self.strict:
            await self.aclose()
            raise ToolLoadError("\n".join(errors))
        return self

    def _usable_tools(self, session: MCPServerSession) -> list[BaseTool]:
        """The server's tools planexec can call; the others go to `skipped`, with why."""
        tools: list[BaseTool] = []
        for tool in session.tools:
            why = _unusable(tool)
            if why is None:
                try:
                    tools.append(mcp_tool_to_langchain(session, tool))
                    continue
                except InvalidSchemaError as exc:
                    why = f"its input schema cannot be checked: {exc}"
            self.skipped[f"{session.name}.{tool.name}"] = why
            logger.bind(run_id="-", step_id=None).warning(
                "MCP server {!r}: tool {!r} is not offered: {}", session.name, tool.name, why
            )
        return tools

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close every session (bounded)."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session (bounded); safe to call twice."""
        await asyncio.gather(*(s.close() for s in self.sessions.values()), return_exceptions=True)

    @property
    def markers(self) -> list[BaseTool]:
        """One marker per server that failed to start (non-strict mode).

        Pass them to `ToolCatalog` with the tools: they are not tools, they tell the
        catalog (``ToolCatalog.unavailable``) which servers are down and why, so that a
        step naming such a server fails with ``TOOL_ERROR`` carrying the server's
        startup error and stderr tail instead of ``UNKNOWN_TOOL``.
        """
        return [unavailable_marker(name, why) for name, why in self.failures.items()]

    @property
    def tools(self) -> list[BaseTool]:
        """Every server's tools, server by server in configuration order."""
        return [t for name in self.sessions for t in self._tools.get(name, [])]

    def tools_for(self, server: str) -> list[BaseTool]:
        """The tools of one server.

        Raises:
            KeyError: no such (started) server.
        """
        if server not in self._tools:
            raise KeyError(server)
        return list(self._tools[server])

    def session(self, server: str) -> MCPServerSession:
        """The session with one server.

        Raises:
            KeyError: no such server.
        """
        return self.sessions[server]


MCPSessionPool = MCPToolset
"""Another name for `MCPToolset`: a pool of persistent sessions, one per server."""
