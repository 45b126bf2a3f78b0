"""Faithful JSON encoding of plans, step results and events, for the run store.

`Plan.to_dict` is a display shape: it writes references as text. The store needs to
give a plan back exactly as it was parsed (a resumed run executes it), so references
and templates are encoded as tagged objects here and decoded back into `Ref` and
`Template`. Step results keep their structured output as JSON data: a pydantic model
comes back as a dict, which is what references resolve against anyway.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from json.encoder import encode_basestring
from math import isfinite
from typing import Any

import planexec._fastpaths as _fastpaths
from planexec._json import json_data
from planexec.errors import ErrorKind
from planexec.events import ArgResolved, Event, StepFinished, StepStarted, ToolCallStarted
from planexec.grounding import Grounding
from planexec.plan import Diagnostic, Plan, Ref, Severity, Step, Template
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, jsonable

__all__ = [
    "args_digest",
    "canonical_json",
    "decode_value",
    "dumps",
    "dumps_with",
    "encode_value",
    "event_text",
    "event_to_json",
    "json_data",
    "plan_from_json",
    "plan_to_json",
    "result_from_json",
    "result_to_json",
]

_REF = "__planexec_ref__"
_TEMPLATE = "__planexec_template__"
_DICT = "__planexec_dict__"
_TAGS = frozenset({_REF, _TEMPLATE, _DICT})


def _ref_to_json(ref: Ref) -> dict[str, Any]:
    return {
        "step": ref.step,
        "path": list(ref.path),
        "hint": ref.hint,
        "raw": ref.raw,
        "whole_value": ref.whole_value,
        "location": ref.location,
    }


def _ref_from_json(data: dict[str, Any]) -> Ref:
    return Ref(
        step=int(data["step"]),
        path=tuple(data.get("path") or ()),
        hint=data.get("hint"),
        raw=data.get("raw", ""),
        whole_value=bool(data.get("whole_value", True)),
        location=data.get("location", ""),
    )


def encode_value(value: Any) -> Any:
    """Encode an argument value as JSON data, keeping `Ref` and `Template` recoverable."""
    t = type(value)
    if (t is dict or t is list or t is tuple) and not value:  # most steps' args, positional
        return {} if t is dict else []
    if isinstance(value, Ref):
        return {_REF: _ref_to_json(value)}
    if isinstance(value, Template):
        return {
            _TEMPLATE: [p if isinstance(p, str) else {_REF: _ref_to_json(p)} for p in value.parts]
        }
    if isinstance(value, dict):
        encoded = {str(k): encode_value(v) for k, v in value.items()}
        if len(encoded) == 1 and next(iter(encoded)) in _TAGS:
            return {_DICT: encoded}  # a literal dict that looks like a tag: escape it
        return encoded
    if isinstance(value, list | tuple):
        return [encode_value(v) for v in value]
    return jsonable(value)


def decode_value(data: Any) -> Any:
    """Invert `encode_value`."""
    if isinstance(data, dict):
        if len(data) == 1:
            (key, inner), = data.items()
            if key == _REF:
                return _ref_from_json(inner)
            if key == _TEMPLATE:
                return Template(
                    tuple(p if isinstance(p, str) else _ref_from_json(p[_REF]) for p in inner)
                )
            if key == _DICT:
                return {k: decode_value(v) for k, v in inner.items()}
        return {k: decode_value(v) for k, v in data.items()}
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    return data


def _step_to_json(step: Step) -> dict[str, Any]:
    return {
        "id": step.id,
        "task": step.task,
        "tool": step.tool,
        "args": encode_value(step.args),
        "positional": encode_value(list(step.positional)),
        "args_valid": step.args_valid,
        "args_text": step.args_text,
        "server": step.server,
        "no_tool": step.no_tool,
        "cut_off": step.cut_off,
        "depends_on": list(step.depends_on),
        "explicit_deps": list(step.explicit_deps),
        "expected_output": step.expected_output,
        "lines": list(step.lines),
    }


def _step_from_json(data: dict[str, Any]) -> Step:
    lines = data.get("lines") or (0, 0)
    return Step(
        id=int(data["id"]),
        task=data.get("task", ""),
        tool=data.get("tool"),
        args=decode_value(data.get("args") or {}),
        positional=tuple(decode_value(data.get("positional") or [])),
        args_valid=bool(data.get("args_valid", True)),
        args_text=data.get("args_text"),
        server=data.get("server"),
        no_tool=bool(data.get("no_tool", False)),
        cut_off=bool(data.get("cut_off", False)),
        depends_on=tuple(int(i) for i in data.get("depends_on") or ()),
        explicit_deps=tuple(int(i) for i in data.get("explicit_deps") or ()),
        expected_output=data.get("expected_output"),
        lines=(int(lines[0]), int(lines[1])),
    )


def _diagnostic_from_json(data: dict[str, Any]) -> Diagnostic:
    return Diagnostic(
        line=data.get("line"),
        severity=Severity(data.get("severity", "info")),
        code=data.get("code", ""),
        message=data.get("message", ""),
        step=data.get("step"),
    )


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """Encode a plan so that `plan_from_json` gives back an equal plan."""
    return {
        "dialect": plan.dialect,
        "source": plan.source,
        "steps": [_step_to_json(s) for s in plan.steps],
        "diagnostics": [d.to_dict() for d in plan.diagnostics],
    }


def plan_from_json(data: dict[str, Any]) -> Plan:
    """Decode a plan encoded by `plan_to_json`."""
    return Plan(
        steps=tuple(_step_from_json(s) for s in data.get("steps") or ()),
        diagnostics=tuple(_diagnostic_from_json(d) for d in data.get("diagnostics") or ()),
        dialect=data.get("dialect", "hashstep"),
        source=data.get("source", ""),
    )


def _copy(value: Any) -> Any:
    """``json_data(value)``, with no call for an empty dict (most steps' arguments)."""
    if type(value) is dict and not value:
        return {}
    return json_data(value)


def result_to_json(result: StepResult) -> dict[str, Any]:
    """Encode a step result: exactly its `StepResult.to_dict` data (a test checks it).

    Built here with `json_data`, the fast path for plain JSON values, because the store
    encodes a result on every step's critical path.
    """
    failure = result.failure
    output = json_data(result.output)
    return {
        "step_id": result.step_id,
        "tool": result.tool,
        "server": result.server,
        "status": str(result.status),
        "args": _copy(result.args),
        "output": output,
        # one object (a tool's own output): one copy, shared (JSON data either way)
        "raw_output": output if result.raw_output is result.output else _copy(
            result.raw_output
        ),
        "error": result.error,
        "error_kind": str(result.error_kind) if result.error_kind else None,
        "resolution": {k: str(v) for k, v in result.resolution.items()},
        "llm_calls": result.llm_calls,
        "attempts": result.attempts,
        "started_at": result.started_at,
        "duration": result.duration,
        "note": result.note,
        "reused": result.reused,
        "streamed": result.streamed,
        "failure": failure.to_dict() if failure else None,
        "grounding": {k: g.to_dict() for k, g in result.grounding.items()},
    }


def result_from_json(data: dict[str, Any]) -> StepResult:
    """Decode a step result encoded by `result_to_json`.

    Results recorded before `StepError` existed (no ``failure`` key) get a failure of
    their kind and message, with no arguments named.
    """
    kind = data.get("error_kind")
    failure = data.get("failure")
    return StepResult(
        step_id=int(data["step_id"]),
        tool=data.get("tool"),
        status=StepStatus(data["status"]),
        args=data.get("args"),
        output=data.get("output"),
        raw_output=data.get("raw_output"),
        error=data.get("error"),
        error_kind=ErrorKind(kind) if kind else None,
        resolution={k: ResolutionMethod(v) for k, v in (data.get("resolution") or {}).items()},
        llm_calls=int(data.get("llm_calls") or 0),
        attempts=int(data.get("attempts") or 0),
        started_at=data.get("started_at"),
        duration=data.get("duration"),
        server=data.get("server"),
        note=data.get("note"),
        reused=bool(data.get("reused", False)),
        streamed=bool(data.get("streamed", False)),
        failure=StepError.from_dict(failure) if failure else None,
        grounding={k: Grounding.from_dict(v) for k, v in (data.get("grounding") or {}).items()},
    )


_RECORDED: dict[type, tuple[str, ...]] = {}


def _recorded_fields(cls: type) -> tuple[str, ...]:
    names = _RECORDED.get(cls)
    if names is None:
        names = _RECORDED[cls] = tuple(
            f.name for f in dataclasses.fields(cls) if f.metadata.get("record", True) is not False
        )
    return names


_HOT = frozenset({StepStarted, ToolCallStarted, StepFinished})
"""The events a run records on every step: encoded without the general loop."""

_TEXT_HOT = _HOT | {ArgResolved}
"""The events `event_text` writes straight to text (a resolved argument: most steps')."""


def _hot_data(event: Any) -> dict[str, Any] | None:
    """`event_to_json` of a hot event whose fields are plain (None: not plain).

    What the general loop gives for such fields, built at once.
    """
    run_id, ts = event.run_id, event.ts
    if type(run_id) is not str or type(ts) is not float or not isfinite(ts):
        return None
    t = type(event)
    if t is StepStarted:
        step_id, tool, version = event.step_id, event.tool, event.plan_version
        if (
            type(step_id) is int and type(version) is int
            and (tool is None or type(tool) is str)
        ):
            return {"type": "StepStarted", "run_id": run_id, "ts": ts, "step_id": step_id,
                    "tool": tool, "plan_version": version}
    elif t is ToolCallStarted:
        step_id, tool, args, attempt = event.step_id, event.tool, event.args, event.attempt
        version, safe = event.plan_version, event.safe
        if (
            type(step_id) is int and type(tool) is str and type(args) is dict
            and type(attempt) is int and type(version) is int and type(safe) is bool
        ):
            return {"type": "ToolCallStarted", "run_id": run_id, "ts": ts,
                    "step_id": step_id, "tool": tool, "args": _copy(args),
                    "attempt": attempt, "plan_version": version, "safe": safe}
    elif t is StepFinished:
        result, version, safe = event.result, event.plan_version, event.safe
        if type(result) is StepResult and type(version) is int and type(safe) is bool:
            return {"type": "StepFinished", "run_id": run_id, "ts": ts,
                    "result": result_to_json(result), "plan_version": version, "safe": safe}
    return None


def event_to_json(event: Event) -> dict[str, Any]:
    """Encode any event as ``{"type": ..., <fields>...}``.

    Plans and step results use the faithful encodings above; everything else goes
    through `planexec.results.jsonable` (`json_data`), so events added later are
    recorded too. Fields marked ``metadata={"record": False}`` (`RunFinished.run`) are
    left out.
    """
    if type(event) in _HOT and _fastpaths.ON:
        hot = _hot_data(event)
        if hot is not None:
            return hot
    data: dict[str, Any] = {"type": event.type}
    for name in _recorded_fields(type(event)):
        value = getattr(event, name)
        t = type(value)
        if t is str or t is int or t is bool or value is None or (
            t is float and value - value == 0.0  # finite: NaN and infinities are encoded
        ):
            data[name] = value
        elif isinstance(value, Plan):
            data[name] = plan_to_json(value)
        elif isinstance(value, StepResult):
            data[name] = result_to_json(value)
        elif isinstance(value, str):
            data[name] = str(value)  # StrEnum → plain text
        else:
            data[name] = json_data(value)
    return data


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

_PLAIN_ENCODER = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _ENCODER.default, encode_basestring, None, ":", ",", False, False, True
) if json.encoder.c_make_encoder is not None else None  # type: ignore[attr-defined]
"""The C encoder behind `_ENCODER`, made once, for values `json_data` gave (never circular,
so no marker dict): `_ENCODER.encode` builds one on every call, which costs as much as
encoding a small value."""


def dumps(value: Any) -> str:
    """Compact JSON text (``separators=(",", ":")``, ``ensure_ascii=False``).

    One encoder for every call: ``json.dumps`` with options builds a new encoder each
    time, which costs about as much as encoding a small event.
    """
    return _ENCODER.encode(value)


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a value: `encode_value`'s data, keys sorted, no whitespace.

    Two values that a tool would receive as equal JSON have the same text, whatever the
    order their keys were written in; a `Ref` or `Template` (never passed to a tool)
    keeps its tag, so it never equals the text it was written as.
    """
    return json.dumps(
        encode_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        allow_nan=True,
    )


def args_digest(args: Any) -> str:
    """The digest a decision is matched by: sha256 (hex) of `canonical_json` of ``args``.

    A decision applies to a call only when the call's exact arguments have the digest the
    decision was made for (docs/approval.md).
    """
    return hashlib.sha256(canonical_json(args).encode("utf-8")).hexdigest()


def _fresh_text(data: Any) -> str:
    """``dumps(data)`` for data that `event_to_json` (or `json_data`) built: never circular."""
    if _PLAIN_ENCODER is None or type(data) is str:  # pragma: no cover - no C encoder
        return _ENCODER.encode(data)
    return "".join(_PLAIN_ENCODER(data, 0))


def dumps_with(data: dict[str, Any], key: str) -> tuple[str, str | None]:
    """``dumps(data)`` of an encoded event, and the text of its value at ``key``, encoded once.

    For a store that keeps that value's text apart too (a step's result, a plan): the
    event's text is made of the text of the keys before ``key``, that value's text and
    the text of the keys after it, which is exactly ``dumps(data)``.

    Returns:
        The event's text, and the value's text (None when ``key`` is absent or None).
    """
    value = data.get(key)
    if value is None:
        return _fresh_text(data), None
    value_text = _fresh_text(value)
    keys = list(data)
    at = keys.index(key)
    before = _fresh_text({k: data[k] for k in keys[:at]})[:-1]  # "{..." without "}"
    after = _fresh_text({k: data[k] for k in keys[at + 1:]})[1:]  # "...}" without "{"
    return (
        f"{before}{',' if at else ''}{encode_basestring(key)}:{value_text}"
        f"{',' if at < len(keys) - 1 else ''}{after}"
    ), value_text


def _data_text(value: Any) -> str:
    """``dumps(json_data(value))``: the text of a value as the store records it."""
    if value is None:
        return "null"
    if type(value) is dict:
        if not value:
            return "{}"
        if len(value) <= _FLAT_ITEMS:
            text = _flat_text(value)
            if text is not None:
                return text
    return _fresh_text(json_data(value))


_FLAT_ITEMS = 4
"""Dicts up to this size of scalars (a small tool output, a step's arguments) are written
by `_flat_text`: cheaper than the C encoder's set-up for so few items."""

_SCALAR_TEXT = {True: "true", False: "false", None: "null"}


def _flat_text(value: dict[Any, Any]) -> str | None:
    """The text of a dict of str keys and plain scalar values (None: anything else)."""
    parts = []
    for k, v in value.items():
        t = type(v)
        if type(k) is not str:
            return None
        if t is str:
            text = encode_basestring(v)
        elif t is bool or v is None:
            text = _SCALAR_TEXT[v]
        elif t is int:
            text = int.__repr__(v)
        elif t is float and v - v == 0.0:
            text = float.__repr__(v)
        else:
            return None
        parts.append(f"{encode_basestring(k)}:{text}")
    return "{" + ",".join(parts) + "}"


def _opt_str(value: Any) -> str | None:
    """The JSON text of a str or None; None when ``value`` is neither (no fast path)."""
    if value is None:
        return "null"
    if type(value) is str:
        return encode_basestring(value)
    return None


def _opt_float(value: Any) -> str | None:
    """The JSON text of a finite float or None; None otherwise (no fast path)."""
    if value is None:
        return "null"
    if type(value) is float and value - value == 0.0:
        return float.__repr__(value)
    return None


_BOOL = {True: "true", False: "false"}


def _result_text(result: StepResult) -> str | None:
    """The text of ``dumps(result_to_json(result))``, built directly (None: not plain)."""
    r = result
    # each optional field: its text, or None (not plain: the general path)
    tool, server, error, note = (
        _opt_str(r.tool), _opt_str(r.server), _opt_str(r.error), _opt_str(r.note)
    )
    started, duration = _opt_float(r.started_at), _opt_float(r.duration)
    if (
        tool is None or server is None or error is None or note is None or started is None
        or duration is None or type(r.step_id) is not int or type(r.llm_calls) is not int
        or type(r.attempts) is not int or type(r.reused) is not bool
        or type(r.streamed) is not bool
    ):
        return None
    kind, failure, resolution, grounding = r.error_kind, r.failure, r.resolution, r.grounding
    output = _data_text(r.output)
    raw = output if r.raw_output is r.output else _data_text(r.raw_output)
    return (
        f'{{"step_id":{r.step_id},"tool":{tool},"server":{server},'
        f'"status":{encode_basestring(str(r.status))},"args":{_data_text(r.args)},'
        f'"output":{output},"raw_output":{raw},'
        f'"error":{error},'
        f'"error_kind":{encode_basestring(str(kind)) if kind else "null"},'
        f'"resolution":{_resolution_text(resolution) if resolution else "{}"},'
        f'"llm_calls":{r.llm_calls},"attempts":{r.attempts},"started_at":{started},'
        f'"duration":{duration},"note":{note},"reused":{_BOOL[r.reused]},'
        f'"streamed":{_BOOL[r.streamed]},'
        f'"failure":{_ENCODER.encode(failure.to_dict()) if failure else "null"},'
        f'"grounding":'
        f'{_ENCODER.encode({k: g.to_dict() for k, g in grounding.items()}) if grounding else "{}"}'
        "}"
    )


def _resolution_text(resolution: dict[Any, Any]) -> str:
    """The text of ``{k: str(v) for k, v in resolution.items()}`` (a result's methods)."""
    parts = []
    for k, v in resolution.items():
        if type(k) is not str:
            return _ENCODER.encode({k: str(v) for k, v in resolution.items()})
        parts.append(f"{encode_basestring(k)}:{encode_basestring(str(v))}")
    return "{" + ",".join(parts) + "}"


def _arg_resolved_text(e: ArgResolved, head: str) -> str | None:
    step_id, arg, method, grounding = e.step_id, e.arg, e.method, e.grounding
    if (
        type(step_id) is not int or type(arg) is not str
        or type(method) is not ResolutionMethod or grounding is not None
    ):
        return None
    return (
        f'{{"type":"ArgResolved",{head},"step_id":{step_id},"arg":{encode_basestring(arg)},'
        f'"method":{encode_basestring(str(method))},"grounding":null}}'
    )


def _step_started_text(e: StepStarted, head: str) -> str | None:
    step_id, tool, version = e.step_id, e.tool, e.plan_version
    if type(step_id) is not int or type(version) is not int:
        return None
    if tool is None:
        tool_text = "null"
    elif type(tool) is str:
        tool_text = encode_basestring(tool)
    else:
        return None
    return (
        f'{{"type":"StepStarted",{head},"step_id":{step_id},"tool":{tool_text},'
        f'"plan_version":{version}}}'
    )


def _tool_call_started_text(e: ToolCallStarted, head: str) -> str | None:
    step_id, tool, attempt, version, safe = e.step_id, e.tool, e.attempt, e.plan_version, e.safe
    if (
        type(tool) is not str or type(step_id) is not int or type(attempt) is not int
        or type(version) is not int or type(safe) is not bool
    ):
        return None
    return (
        f'{{"type":"ToolCallStarted",{head},"step_id":{step_id},'
        f'"tool":{encode_basestring(tool)},"args":{_data_text(e.args)},'
        f'"attempt":{attempt},"plan_version":{version},"safe":{_BOOL[safe]}}}'
    )


def _step_finished_text(e: StepFinished, head: str) -> tuple[str, str] | None:
    version, safe = e.plan_version, e.safe
    if type(e.result) is not StepResult or type(version) is not int or type(safe) is not bool:
        return None
    result = _result_text(e.result)
    if result is None:
        return None
    return (
        f'{{"type":"StepFinished",{head},"result":{result},'
        f'"plan_version":{version},"safe":{_BOOL[safe]}}}'
    ), result


def event_text(event: Event) -> tuple[str, str | None] | None:
    """Encode a hot event straight to compact JSON text, or None.

    The events a run records on every step (``StepStarted``, ``ArgResolved`` without a
    grounding, ``ToolCallStarted``, ``StepFinished``, exactly those classes) are written
    straight to text when their fields are plain (exact ``str``, ``int``, ``bool``,
    finite ``float`` values, as the executor gives them): the text is
    ``dumps(event_to_json(event))``, character for character (a test checks it on
    generated events). For a ``StepFinished`` the text of its result (the value of its
    ``"result"`` key) comes too.

    Returns:
        ``(text, result_text)`` (``result_text`` None but for a ``StepFinished``), or
        None for any other event or field: encode ``event_to_json(event)`` then.
    """
    t = type(event)
    if t not in _TEXT_HOT or not _fastpaths.ON:  # (`planexec._fastpaths`)
        return None
    run_id, ts = event.run_id, event.ts
    if type(run_id) is not str or type(ts) is not float or ts - ts != 0.0:  # finite
        return None
    head = f'"run_id":{encode_basestring(run_id)},"ts":{float.__repr__(ts)}'
    if t is StepStarted:
        text = _step_started_text(event, head)  # type: ignore[arg-type]
    elif t is ToolCallStarted:
        text = _tool_call_started_text(event, head)  # type: ignore[arg-type]
    elif t is ArgResolved:
        text = _arg_resolved_text(event, head)  # type: ignore[arg-type]
    else:
        return _step_finished_text(event, head)  # type: ignore[arg-type]
    return None if text is None else (text, None)
