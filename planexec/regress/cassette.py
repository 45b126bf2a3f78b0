"""Cassettes: recorded model requests and replies, replayed without a network.

A cassette is a readable YAML (or JSON, by file suffix) file::

    format: planexec-cassette
    version: 1
    model: {llm_type: openai-chat, model_name: gpt-4o-mini}
    entries:
    - key: 5be0c1d2a3f4e5d6
      params: {stop: null}
      messages:
      - type: system
        content: |-
          You are the planner of a plan-and-execute agent. ...
      - type: human
        content: 'Question: Which sensors does Chiller 6 have?'
      reply: |-
        #Task1: ...

Each entry is keyed by a stable hash of the request: the model's identity (the
cassette's ``model``), the call parameters (``stop`` and other call options) and every
message's type and text. `CassetteChatModel` in ``record`` mode wraps a real chat model
and stores each request and its reply (the file is rewritten after every call); in
``replay`` mode it serves the replies by key, identical requests in the order they were
recorded, and a request that is not in the cassette raises `CassetteMissError` with a
unified diff against the closest recorded request, so prompt drift is visible.

``planexec.models.load_model("replay:PATH")`` serves cassettes too.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from planexec._models import message_text
from planexec.errors import CassetteError, CassetteMissError

__all__ = [
    "CASSETTE_FORMAT",
    "CASSETTE_VERSION",
    "Cassette",
    "CassetteChatModel",
    "load_cassette_model",
    "model_identity",
    "render_request",
    "request_key",
]

CASSETTE_FORMAT = "planexec-cassette"
"""The ``format`` value of every cassette."""
CASSETTE_VERSION = 1
"""The cassette format version written."""
_DIFF_LINES = 200
_PARAM_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "n")


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, sort_keys=True, default=str))
    except (TypeError, ValueError):
        return repr(value)


def model_identity(model: BaseChatModel) -> dict[str, Any]:
    """The parts of a model's identity that key its requests: type, name, sampling.

    Secrets and connection details are left out: only keys naming the model and the
    sampling parameters are kept.
    """
    try:
        params = dict(model._identifying_params)
    except Exception:  # noqa: BLE001 - third-party models may raise anything here
        params = {}
    out: dict[str, Any] = {"llm_type": getattr(model, "_llm_type", type(model).__name__)}
    for key, value in params.items():
        if ("model" in key.lower() or key in _PARAM_KEYS) and "key" not in key.lower():
            out[key] = _jsonable(value)
    return out


def _messages_data(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    return [{"type": m.type, "content": message_text(m)} for m in messages]


def request_key(
    model: Mapping[str, Any], params: Mapping[str, Any], messages: Sequence[Mapping[str, str]]
) -> str:
    """The stable key of a request: a hash of model identity, call params and messages."""
    canonical = json.dumps(
        {
            "model": _jsonable(dict(model)),
            "params": _jsonable(dict(params)),
            "messages": [[m["type"], m["content"]] for m in messages],
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def render_request(params: Mapping[str, Any], messages: Sequence[Mapping[str, str]]) -> str:
    """A request as text, for diffs: the params, then each message under its type."""
    lines = [f"params: {json.dumps(_jsonable(dict(params)), sort_keys=True)}"]
    for m in messages:
        lines.append(f"[{m['type']}]")
        lines.extend(m["content"].splitlines() or [""])
    return "\n".join(lines)


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings as literal blocks, so prompts read as they were sent."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


class Cassette:
    """The contents of a cassette file: the model's identity and the entries.

    Args:
        path: The file (``.json`` is written as JSON, anything else as YAML).
        model: The recorded model's identity (see `model_identity`).
        entries: The recorded requests and replies, in recording order.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: Mapping[str, Any] | None = None,
        entries: list[dict[str, Any]] | None = None,
    ) -> None:
        self.path = Path(path)
        """The cassette file."""
        self.model: dict[str, Any] = dict(model or {})
        """The model's identity (part of every key)."""
        self.entries: list[dict[str, Any]] = list(entries or [])
        """Entries: ``key``, ``params``, ``messages``, ``reply`` (and ``usage``)."""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        """Read a cassette file.

        Raises:
            CassetteError: the file is missing, unreadable, or not a cassette.
        """
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise CassetteError(f"cannot read cassette {str(p)!r}: {exc}") from exc
        try:
            data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise CassetteError(f"cassette {str(p)!r} cannot be parsed: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != CASSETTE_FORMAT:
            raise CassetteError(
                f"{str(p)!r} is not a cassette (expected 'format: {CASSETTE_FORMAT}')"
            )
        if data.get("version") != CASSETTE_VERSION:
            raise CassetteError(
                f"cassette {str(p)!r} has version {data.get('version')!r}; this planexec "
                f"reads version {CASSETTE_VERSION} (re-record it with --record)"
            )
        entries = data.get("entries") or []
        model = data.get("model") or {}
        if not isinstance(entries, list) or not isinstance(model, dict):
            raise CassetteError(f"cassette {str(p)!r}: 'entries' must be a list")
        checked: list[dict[str, Any]] = []
        for i, entry in enumerate(entries):
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("messages"), list)
                or not isinstance(entry.get("reply"), str)
            ):
                raise CassetteError(
                    f"cassette {str(p)!r}: entry {i} needs 'messages' (a list) and 'reply' "
                    "(a string)"
                )
            params = entry.get("params") or {}
            messages = [
                {"type": str(m.get("type", "human")), "content": str(m.get("content", ""))}
                for m in entry["messages"]
            ]
            # The key is always recomputed, so a hand-edited entry is served by what it says.
            checked.append(
                {
                    **entry,
                    "params": params,
                    "messages": messages,
                    "key": request_key(model, params, messages),
                }
            )
        return cls(p, model, checked)

    def to_data(self) -> dict[str, Any]:
        """The file's data."""
        return {
            "format": CASSETTE_FORMAT,
            "version": CASSETTE_VERSION,
            "model": self.model,
            "entries": self.entries,
        }

    def save(self) -> None:
        """Write the file atomically (a temporary file renamed over it).

        Raises:
            CassetteError: the file cannot be written.
        """
        data = self.to_data()
        if self.path.suffix.lower() == ".json":
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        else:
            text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".cassette-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.path)
        except OSError as exc:
            raise CassetteError(f"cannot write cassette {str(self.path)!r}: {exc}") from exc


class CassetteChatModel(BaseChatModel):
    """A chat model that records to, or replays from, a cassette.

    Args:
        path: The cassette file.
        mode: ``replay`` (serve recorded replies; no network) or ``record`` (call
            ``inner`` and store every request and reply; the file is rewritten from
            scratch and saved after every call).
        inner: The model to record against (``record`` mode only).

    Example:
        >>> from planexec.testing import ScriptedChatModel
        >>> rec = CassetteChatModel(path="c.yaml", mode="record",  # doctest: +SKIP
        ...                         inner=ScriptedChatModel(replies=["hi"]))
        >>> rec.invoke("hello").content  # doctest: +SKIP
        'hi'
        >>> CassetteChatModel(path="c.yaml").invoke("hello").content  # doctest: +SKIP
        'hi'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: str
    """The cassette file."""
    mode: Literal["replay", "record"] = "replay"
    """``replay`` or ``record``."""
    inner: BaseChatModel | None = None
    """The model recorded against (``record`` mode)."""
    _cassette: Cassette = PrivateAttr()
    _by_key: dict[str, list[dict[str, Any]]] = PrivateAttr(default_factory=dict)
    _served: Counter[str] = PrivateAttr(default_factory=Counter)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _misses: list[str] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: Literal["replay", "record"] = "replay",
        inner: BaseChatModel | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(path=str(path), mode=mode, inner=inner, **kwargs)

    def model_post_init(self, context: Any) -> None:
        """Load the cassette (replay) or start an empty one (record)."""
        super().model_post_init(context)
        if self.mode == "record":
            if self.inner is None:
                raise CassetteError("record mode needs an inner model to record against")
            self._cassette = Cassette(self.path, model_identity(self.inner))
        else:
            self._cassette = Cassette.load(self.path)
            for entry in self._cassette.entries:
                self._by_key.setdefault(entry["key"], []).append(entry)

    @property
    def _llm_type(self) -> str:
        return "planexec-cassette"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"cassette": self.path, "mode": self.mode, **self._cassette.model}

    @property
    def cassette(self) -> Cassette:
        """The cassette's contents (in record mode, what was recorded so far)."""
        return self._cassette

    @property
    def calls(self) -> int:
        """Requests served or recorded so far."""
        return sum(self._served.values())

    @property
    def misses(self) -> list[str]:
        """The messages of every `CassetteMissError` raised so far (replay mode)."""
        return list(self._misses)

    def unused_entries(self) -> list[dict[str, Any]]:
        """Recorded entries that were not served (replay mode): a sign of drift too."""
        out: list[dict[str, Any]] = []
        for key, entries in self._by_key.items():
            out.extend(entries[self._served[key] :])
        return out

    # -- requests ------------------------------------------------------------------------

    @staticmethod
    def _params(stop: list[str] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {"stop": list(stop) if stop else None}
        for k, v in sorted(kwargs.items()):
            if k not in ("run_manager", "callbacks", "tags", "metadata", "run_name"):
                params[k] = _jsonable(v)
        return params

    def _replay(self, params: dict[str, Any], messages: list[dict[str, str]]) -> dict[str, Any]:
        key = request_key(self._cassette.model, params, messages)
        with self._lock:
            entries = self._by_key.get(key)
            n = self._served[key]
            if entries and n < len(entries):
                self._served[key] += 1
                return entries[n]
        if entries:
            message = (
                f"cassette {self.path!r}: this request (key {key}) was recorded "
                f"{len(entries)} time(s) and is asked for time {n + 1}; the run makes more "
                "identical model calls than when it was recorded (re-record with --record)"
            )
        else:
            message = self._miss_message(key, params, messages)
        with self._lock:
            self._misses.append(message)
        raise CassetteMissError(message, key=key, recorded=len(entries) if entries else 0)

    def _miss_message(
        self, key: str, params: dict[str, Any], messages: list[dict[str, str]]
    ) -> str:
        actual = render_request(params, messages)
        head = (
            f"cassette {self.path!r}: no recorded request matches this one (key {key}); "
            "the prompt, the parameters or the model changed — re-record with --record "
            "if the change is intended."
        )
        if not self._cassette.entries:
            return f"{head}\nThe cassette is empty. Request:\n{actual[:4000]}"
        best, best_ratio = None, -1.0
        for entry in self._cassette.entries:
            text = render_request(entry["params"], entry["messages"])
            matcher = difflib.SequenceMatcher(None, text, actual, autojunk=False)
            if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
                continue
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best, best_ratio = (entry, text), ratio
        assert best is not None
        entry, text = best
        diff = list(
            difflib.unified_diff(
                text.splitlines(),
                actual.splitlines(),
                fromfile=f"recorded (key {entry['key']})",
                tofile="requested",
                lineterm="",
                n=2,
            )
        )
        if len(diff) > _DIFF_LINES:
            diff = [*diff[:_DIFF_LINES], f"... ({len(diff) - _DIFF_LINES} more diff lines)"]
        return (
            f"{head}\nClosest recorded request (similarity {best_ratio:.2f}), diff "
            f"recorded → requested:\n" + "\n".join(diff)
        )

    def _store(
        self,
        params: dict[str, Any],
        messages: list[dict[str, str]],
        reply: BaseMessage,
    ) -> None:
        key = request_key(self._cassette.model, params, messages)
        entry: dict[str, Any] = {
            "key": key,
            "params": params,
            "messages": messages,
            "reply": message_text(reply),
        }
        usage = getattr(reply, "usage_metadata", None)
        if usage:
            entry["usage"] = {k: int(v) for k, v in dict(usage).items() if isinstance(v, int)}
        with self._lock:
            self._cassette.entries.append(entry)
            self._served[key] += 1
            self._cassette.save()

    @staticmethod
    def _result(entry: Mapping[str, Any]) -> ChatResult:
        msg = AIMessage(content=str(entry["reply"]))
        usage = entry.get("usage")
        if isinstance(usage, dict) and usage:
            inp = int(usage.get("input_tokens", 0))
            out = int(usage.get("output_tokens", 0))
            msg.usage_metadata = {
                "input_tokens": inp,
                "output_tokens": out,
                "total_tokens": int(usage.get("total_tokens", inp + out)),
            }
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        params, data = self._params(stop, kwargs), _messages_data(messages)
        if self.mode == "replay":
            return self._result(self._replay(params, data))
        assert self.inner is not None
        reply = self.inner.invoke(messages, stop=stop, **kwargs)
        self._store(params, data, reply)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        params, data = self._params(stop, kwargs), _messages_data(messages)
        if self.mode == "replay":
            return self._result(self._replay(params, data))
        assert self.inner is not None
        reply = await self.inner.ainvoke(messages, stop=stop, **kwargs)
        self._store(params, data, reply)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def load_cassette_model(path: str | os.PathLike[str]) -> CassetteChatModel:
    """A replaying `CassetteChatModel` for a cassette file (``--model replay:PATH``).

    Raises:
        CassetteError: the file is missing or not a cassette.
    """
    return CassetteChatModel(path, mode="replay")
