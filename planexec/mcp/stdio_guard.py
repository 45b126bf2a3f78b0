r"""A guard in front of the MCP SDK's stdio transport: every bad request gets a reply.

The SDK's stdio transport drops a line it cannot validate without a word: malformed
JSON, ``"params": "x"``, JSON nested 100,000 deep, a lone surrogate (``"\ud800"``), an
id of the wrong type (``1.5``, ``true``: the message is then taken for a notification).
The client then waits for its own timeout. `run_guarded_stdio` reads stdin itself, checks
each line with `check_line` and passes only good lines on to the SDK; a bad line gets a
JSON-RPC error reply, written through the SDK's own stdout writer:

- ``-32700`` Parse error (id null): not JSON at all, and no id can be read from it;
- ``-32600`` Invalid Request (with the request's id when it can be read): not an object,
  a batch, no ``"jsonrpc": "2.0"``, an id that is not a string or an integer, a method
  that is not a string, invalid UTF-8 or a lone surrogate, nesting deeper than
  `MAX_DEPTH`, a line over `MAX_LINE_BYTES`, or anything else the SDK would refuse;
- ``-32602`` Invalid params (with the request's id): ``params`` is not an object.

A bad notification (no id) gets no reply, as JSON-RPC requires; it is logged.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from typing import IO, TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread
import mcp_types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from planexec._log import logger

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp.server.mcpserver import MCPServer

__all__ = ["MAX_DEPTH", "MAX_LINE_BYTES", "check_line", "run_guarded_stdio"]

MAX_LINE_BYTES = 4 * 1024 * 1024
"""The longest message (one line, in bytes) accepted: the SDK's HTTP request limit."""

MAX_DEPTH = 100
"""The deepest nesting of objects and arrays accepted in a message (the SDK's own JSON
parser gives up at about 200, and drops the message)."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:]')
_SURROGATE = re.compile("[\ud800-\udfff]")
_WORKER_THRESHOLD = 64 * 1024  # lines longer than this are checked on a worker thread

Reply = dict[str, Any]
"""A JSON-RPC error reply."""


def _error(request_id: Any, code: int, message: str) -> Reply:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _valid_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def _scan(text: str) -> tuple[int, Any]:
    """The nesting depth of JSON text and its top-level ``id`` (None when not found).

    A linear scan that needs no valid JSON (strings are skipped whole), so the id of a
    message too deep or too broken to parse can still be answered.
    """
    depth = deepest = 0
    found: Any = None
    previous = ""
    decoder = json.JSONDecoder()
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "}]":
            depth -= 1
        elif token == ":" and depth == 1 and previous == '"id"' and found is None:
            start = match.end()
            while start < len(text) and text[start] in " \t\r\n":
                start += 1
            with suppress(ValueError):
                value, _ = decoder.raw_decode(text, start)
                if _valid_id(value):
                    found = value
        previous = token
    return deepest, found


def _has_surrogate(value: Any) -> bool:
    """Whether any string (or key) in parsed JSON holds a lone surrogate (no recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check_line(raw: bytes) -> tuple[str | None, Reply | None]:
    """Check one line read from stdin.

    Returns:
        ``(text, None)`` for a good line, to pass on; ``(None, reply)`` for a bad line
        that needs an error reply; ``(None, None)`` for a blank line or a bad
        notification (nothing to pass on, nothing to reply).
    """
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        return None, None
    try:
        text = raw.decode("utf-8")
        bad_utf8 = False
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        bad_utf8 = True
    depth, scanned_id = _scan(text)
    if depth > MAX_DEPTH:
        return None, _error(
            scanned_id, INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels"
        )
    try:
        message = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if scanned_id is not None:
            return None, _error(scanned_id, PARSE_ERROR, f"Parse error: {exc}")
        return None, _error(None, PARSE_ERROR, f"Parse error: {exc}")
    if isinstance(message, list):
        return None, _error(None, INVALID_REQUEST, "Invalid Request: batches are not supported")
    if not isinstance(message, dict):
        return None, _error(None, INVALID_REQUEST, "Invalid Request: not a JSON-RPC object")
    has_id = "id" in message
    request_id = message.get("id")
    if has_id and not _valid_id(request_id):
        return None, _error(
            None, INVALID_REQUEST, "Invalid Request: the id must be a string or an integer"
        )

    def bad(code: int, why: str) -> tuple[None, Reply | None]:
        if not has_id:  # a notification: JSON-RPC forbids a reply
            logger.bind(run_id="-", step_id=None).warning("dropped a bad notification: {}", why)
            return None, None
        return None, _error(request_id, code, why)

    if bad_utf8:
        return bad(INVALID_REQUEST, "Invalid Request: the message is not valid UTF-8")
    if _has_surrogate(message):
        return bad(INVALID_REQUEST, "Invalid Request: the message holds a lone surrogate")
    if message.get("jsonrpc") != "2.0":
        return bad(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" in message:
        if not isinstance(message["method"], str):
            return bad(INVALID_REQUEST, "Invalid Request: the method must be a string")
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return bad(
                INVALID_PARAMS,
                f"Invalid params: params must be an object, not {type(params).__name__}",
            )
    elif not ({"result", "error"} & message.keys()):
        return bad(INVALID_REQUEST, "Invalid Request: no method, result or error")
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:  # a message the SDK would drop without a reply
        first = str(exc).splitlines()
        why = first[-1].strip() if first else type(exc).__name__
        return bad(INVALID_REQUEST, f"Invalid Request: {why}"[:500])
    return text, None


class _GuardedStdin:
    """Lines of stdin that passed `check_line`; bad ones are answered on the way."""

    def __init__(self, buffer: IO[bytes]) -> None:
        self._buffer = buffer
        self._out: MemoryObjectSendStream[SessionMessage] | None = None
        self._attached = anyio.Event()

    def attach(self, out: MemoryObjectSendStream[SessionMessage]) -> None:
        """Give the stream replies are written to (the SDK's stdout writer)."""
        self._out = out
        self._attached.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _read(self, limit: int) -> bytes:
        return await anyio.to_thread.run_sync(
            self._buffer.readline, limit, abandon_on_cancel=True
        )

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            raw = await self._read(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                _, scanned_id = _scan(raw[:65536].decode("utf-8", "replace"))
                rest = raw
                while rest and not rest.endswith(b"\n"):  # skip the rest of the line
                    rest = await self._read(1 << 20)
                await self._reply(
                    _error(
                        scanned_id,
                        INVALID_REQUEST,
                        f"Invalid Request: the message is over {MAX_LINE_BYTES} bytes",
                    )
                )
                continue
            if len(raw) > _WORKER_THRESHOLD:
                text, reply = await anyio.to_thread.run_sync(check_line, raw)
            else:
                text, reply = check_line(raw)
            if reply is not None:
                await self._reply(reply)
            if text is not None:
                yield text

    async def _reply(self, reply: Reply) -> None:
        await self._attached.wait()
        assert self._out is not None
        error = mcp_types.JSONRPCError(
            jsonrpc="2.0",
            id=reply["id"],
            error=mcp_types.ErrorData(**reply["error"]),
        )
        try:
            await self._out.send(SessionMessage(error))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return


def _claim_stdin() -> tuple[IO[bytes], Callable[[], None]]:
    """Stdin's wire on a private descriptor, with fd 0 pointed at the null device.

    As the SDK does for its own reader: tools and their children then read EOF, and
    cannot steal requests. Returns the reader and a function restoring fd 0. Where the
    descriptors cannot be moved, stdin is read in place.
    """
    try:
        if sys.stdin is None or sys.stdin.fileno() != 0:
            raise OSError("stdin is not fd 0")
        if sys.platform != "win32":
            import fcntl

            private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        else:  # pragma: no cover
            private = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
    except (OSError, ValueError, AttributeError):
        return sys.stdin.buffer, lambda: None

    def restore() -> None:
        with suppress(OSError):
            os.dup2(private, 0)

    # never closed: a worker thread may still block reading it after the server stops
    return os.fdopen(private, "rb", closefd=False), restore


async def run_guarded_stdio(server: MCPServer[Any]) -> None:
    """Serve ``server`` over stdin/stdout, answering every malformed request.

    Replaces ``server.run_stdio_async()``: the same SDK transport (which also claims
    stdout), fed by `check_line`'s good lines only.
    """
    buffer, restore = _claim_stdin()
    guard = _GuardedStdin(buffer)
    try:
        async with stdio_server(stdin=cast(Any, guard)) as (read_stream, write_stream):
            guard.attach(write_stream)
            # what MCPServer.run_stdio_async does with its own stdio_server()
            lowlevel = server._lowlevel_server
            await lowlevel.run(
                read_stream, write_stream, lowlevel.create_initialization_options()
            )
    finally:
        restore()
