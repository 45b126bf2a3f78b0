"""Typed final answers: the final mapping step, its instantiation, and output blame.

When a run asks for a typed result (``output_type=Model``, a pydantic model), the
planner ends its plan with a *final mapping step* whose tool is the reserved name
``final_answer`` (`OUTPUT_TOOL`)::

    #Task5: Fill the result
    #Tool5: final_answer
    #Args5: {"asset_id": "<step_4.id>", "site": "<step_1.sites[0].name>"}
    #Dependency5: #S1, #S4

This module holds everything about that step, independently of the agent loop:

- **plan time** — `check_output_plan`: a plan without the step fails with
  ``OUTPUT_MISSING_STEP``; a step that leaves required fields unfilled fails with
  ``OUTPUT_ARGS_MISSING``. Both are re-planned with the problem as feedback.
- **instantiation** — `resolve_output`: the step's args are resolved like any step's
  (`ArgResolver`, with a virtual `ToolSpec` whose args schema is the output model) and
  validated into the model. A failure is ``OUTPUT_INVALID``: the mapping alone is
  re-resolved with the validation errors as feedback.
- **expected values and blame** — given expected field values, a mismatch is
  ``OUTPUT_UNEXPECTED`` and each wrong field is *blamed* on the step whose output it came
  from, followed through the references (`trace_field`): field ← final step arg ←
  ``<step_4.id>`` ← step 4 passed on the value it received as ``<step_2.items[0]>`` ←
  step 2 produced it. Feedback to models never contains the expected values (a model told
  the answer would just copy it); the human-facing `OutputMismatch.describe` does.

The final mapping step is never run by the executor (`without_output_step`): it calls
no tool, and the agent instantiates it after every other step succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ValidationError

from planexec._text import clip
from planexec.errors import ConfigError, ErrorKind
from planexec.events import EventBus
from planexec.plan import Plan, Ref, Step, Template, iter_refs, to_jsonable
from planexec.planner import FINAL_STEP_TOOL
from planexec.resolver import ArgResolver, ResolutionFailure, follow_path
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, jsonable
from planexec.tools import ToolCatalog, ToolHints, ToolSpec

__all__ = [
    "OUTPUT_TOOL",
    "Blame",
    "Hop",
    "OutputMismatch",
    "OutputOutcome",
    "OutputProblem",
    "catalog_with_output",
    "check_expected",
    "check_output_plan",
    "compare_output",
    "output_feedback",
    "output_spec",
    "output_step",
    "output_tool",
    "resolve_output",
    "trace_field",
    "without_output_step",
]

OUTPUT_TOOL = FINAL_STEP_TOOL
"""The reserved tool name of the final mapping step: ``final_answer``."""

_MAX_HOPS = 32
_NOTHING: Any = object()
_VALUE_CUT = 120


def _short(value: Any, limit: int = _VALUE_CUT) -> str:
    text = json.dumps(jsonable(value), ensure_ascii=False, default=str)
    return clip(text, limit)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON data (``1`` equals ``1.0``, but ``True`` is not ``1``)."""
    a, b = jsonable(a), jsonable(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# --------------------------------------------------------------------------- the step


def output_tool(output_type: type[BaseModel]) -> BaseTool:
    """The ``final_answer`` tool of ``output_type``, for catalogs that check plans.

    Calling it validates its arguments into the model (the agent never calls it: it
    instantiates the mapping itself, see `resolve_output`).
    """

    async def final_answer(**kwargs: Any) -> dict[str, Any]:
        return output_type.model_validate(kwargs).model_dump(mode="json")

    tool = StructuredTool.from_function(
        coroutine=final_answer,
        name=OUTPUT_TOOL,
        description=(
            f"The final mapping step: fill the fields of the final result "
            f"({output_type.__name__}) from earlier steps' outputs."
        ),
        args_schema=output_type,
    )
    tool.metadata = {"planexec": {"read_only": True}}
    return tool


def output_spec(output_type: type[BaseModel]) -> ToolSpec:
    """A virtual `ToolSpec` whose args schema is ``output_type`` (for the resolver)."""
    return ToolSpec(
        name=OUTPUT_TOOL,
        server=None,
        tool=output_tool(output_type),
        description=f"Fill the fields of the final result ({output_type.__name__}).",
        args_schema=output_type,
        json_schema=output_type.model_json_schema(),
        hints=ToolHints(read_only=True),
    )


def catalog_with_output(catalog: ToolCatalog, output_type: type[BaseModel] | None) -> ToolCatalog:
    """``catalog`` plus the ``final_answer`` tool of ``output_type`` (unchanged if None)."""
    if output_type is None:
        return catalog
    specs = catalog.specs()
    return ToolCatalog(
        [*(s.tool for s in specs), output_tool(output_type)],
        hints={s.qualified_name: s.hints for s in specs},
        unavailable=catalog.unavailable,
    )


def output_step(plan: Plan) -> Step | None:
    """The plan's final mapping step: its last ``final_answer`` step, or None."""
    for step in reversed(plan.steps):
        if step.tool == OUTPUT_TOOL:
            return step
    return None


def without_output_step(plan: Plan) -> Plan:
    """The plan without its ``final_answer`` steps: what the executor runs."""
    return replace(plan, steps=tuple(s for s in plan.steps if s.tool != OUTPUT_TOOL))


def _bound(step: Step, names: Sequence[str]) -> dict[str, Any]:
    """The step's keyword args plus its positional ones bound to ``names`` in order."""
    args = dict(step.args)
    for name, value in zip(names, step.positional, strict=False):
        args.setdefault(name, value)
    return args


@dataclass(frozen=True)
class OutputProblem:
    """Why a plan cannot give the typed output (found at plan time)."""

    kind: ErrorKind
    """``OUTPUT_MISSING_STEP`` or ``OUTPUT_ARGS_MISSING``."""
    message: str
    """What is wrong, in words the planner can act on."""
    step_id: int | None = None
    """The final mapping step, if there is one."""
    fields: tuple[str, ...] = ()
    """The fields left unfilled."""


def _fields_text(output_type: type[BaseModel]) -> str:
    parts = []
    for name, info in output_type.model_fields.items():
        parts.append(name if info.is_required() else f"{name}?")
    return ", ".join(parts) or "none"


def check_output_plan(plan: Plan, output_type: type[BaseModel]) -> OutputProblem | None:
    """Check that ``plan`` ends with a final mapping step filling ``output_type``.

    Returns:
        None when the plan has a ``final_answer`` step giving every required field;
        otherwise the problem (``OUTPUT_MISSING_STEP`` or ``OUTPUT_ARGS_MISSING``).
    """
    model = output_type.__name__
    step = output_step(plan)
    if step is None:
        return OutputProblem(
            ErrorKind.OUTPUT_MISSING_STEP,
            f"the plan has no final mapping step: end it with a step '#ToolN: {OUTPUT_TOOL}' "
            f"whose #ArgsN fill the fields of {model} ({_fields_text(output_type)}) from "
            'earlier steps\' results, using references like "<step_2.id>"',
        )
    required = [n for n, f in output_type.model_fields.items() if f.is_required()]
    if not step.args_valid:
        return OutputProblem(
            ErrorKind.OUTPUT_ARGS_MISSING,
            f"step {step.id} ({OUTPUT_TOOL}): its #Args could not be read, so no field of "
            f"{model} is filled; required: {', '.join(required) or 'none'}",
            step.id,
            tuple(required),
        )
    given = _bound(step, list(output_type.model_fields))
    missing = [n for n in required if n not in given]
    if missing:
        unknown = [n for n in given if n not in output_type.model_fields]
        extra = (
            f"; it gives {', '.join(repr(n) for n in unknown)}, which {model} does not have"
            if unknown
            else ""
        )
        return OutputProblem(
            ErrorKind.OUTPUT_ARGS_MISSING,
            f"step {step.id} ({OUTPUT_TOOL}): the final mapping leaves required field(s) "
            f"{', '.join(repr(n) for n in missing)} of {model} unfilled{extra}; fill every "
            f"field ({_fields_text(output_type)}) from earlier steps' results",
            step.id,
            tuple(missing),
        )
    return None


def check_expected(output_type: type[BaseModel], expected: Mapping[str, Any]) -> None:
    """Check that every expected field exists in ``output_type``.

    Raises:
        ConfigError: an expected field is not a field of the model.
    """
    unknown = [k for k in expected if k not in output_type.model_fields]
    if unknown:
        raise ConfigError(
            f"expected output field(s) {', '.join(repr(k) for k in unknown)} are not fields "
            f"of {output_type.__name__} (fields: {_fields_text(output_type)})"
        )


# --------------------------------------------------------------------------- blame


@dataclass(frozen=True)
class Hop:
    """One step a field's value went through, newest first."""

    step_id: int
    """The step."""
    tool: str | None
    """Its tool (None for a reasoning step)."""
    arg: str | None = None
    """The argument through which the value reached the step (None: the step made it)."""
    ref: str | None = None
    """The reference that argument was written as (``<step_2.items[0]>``)."""

    def describe(self) -> str:
        """``step 4 (pick) arg 'item' = <step_2.items[0]>`` or ``step 2 (assets)``."""
        head = f"step {self.step_id} ({self.tool or 'reasoning'})"
        if self.arg is None:
            return head
        return f"{head} arg {self.arg!r}" + (f" = {self.ref}" if self.ref else "")


@dataclass(frozen=True)
class Blame:
    """Where a field of the typed output got its value."""

    field: str
    """The output field."""
    step_id: int
    """The step blamed: the one that produced the value."""
    tool: str | None
    """That step's tool."""
    hops: tuple[Hop, ...] = ()
    """The steps the value went through, from the final mapping to the producer."""
    reason: str = "produced the value"
    """Why this step is blamed."""
    sources: tuple[int, ...] = ()
    """Every producing step, when the value was assembled from several references."""

    @property
    def chain(self) -> tuple[int, ...]:
        """The step ids of `hops`, final mapping first, producer last."""
        return tuple(h.step_id for h in self.hops)

    def describe(self) -> str:
        """The trace in one line, e.g. ``field 'id' ← step 5 ... ← step 2 (assets): ...``."""
        trail = " ← ".join(h.describe() for h in self.hops)
        return (
            f"field {self.field!r} ← {trail}: {self.reason}"
            if trail
            else (f"field {self.field!r}: {self.reason}")
        )


def _whole_refs(
    value: Any, at: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], Ref]]:
    """Every whole-value `Ref` nested in a plan value, with its location in the value."""
    if isinstance(value, Ref):
        if not value.is_hinted:
            yield at, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _whole_refs(v, (*at, k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _whole_refs(v, (*at, i))


def _written_text(value: Any) -> str | None:
    """How a value was written in the plan (references canonically)."""
    if value is None:
        return None
    if isinstance(value, Ref | Template):
        return value.canonical
    return json.dumps(to_jsonable(value), ensure_ascii=False, default=str)


def _step_in(plan: Plan, step_id: int) -> Step | None:
    try:
        return plan.step(step_id)
    except KeyError:
        return None


def _passed_on(
    step: Step, result: StepResult, path: tuple[Any, ...]
) -> tuple[str, Ref, tuple[Any, ...]] | None:
    """Whether the value at ``path`` of the step's output was an input passed on unchanged.

    The value itself, or a value enclosing it (a prefix of ``path``), must equal an
    argument the step received through a whole-value reference. Returns the argument,
    the reference and the rest of the path inside the referenced value.
    """
    if result.args is None:
        return None
    names = [k for k in result.args if k not in step.args]
    args = _bound(step, names)
    candidates = [
        (name, loc, ref) for name, value in args.items() for loc, ref in _whole_refs(value)
    ]
    if not candidates:
        return None
    for i in range(len(path), -1, -1):
        try:
            enclosing = follow_path(result.output, path[:i])
        except LookupError:
            continue
        for name, loc, ref in candidates:
            try:
                received = follow_path(result.args, (name, *loc))
            except LookupError:
                continue
            if _same(enclosing, received):
                return name, ref, tuple(path[i:])
    return None


def _follow(
    plan: Plan, results: Mapping[int, StepResult], step_id: int, path: tuple[Any, ...]
) -> list[Hop]:
    """Follow a value from ``step_id``'s output back to the step that produced it."""
    hops: list[Hop] = []
    seen: set[tuple[int, tuple[Any, ...]]] = set()
    while len(hops) < _MAX_HOPS and (step_id, path) not in seen:
        seen.add((step_id, path))
        result = results.get(step_id)
        step = _step_in(plan, step_id)
        tool = result.tool if result is not None else (step.tool if step else None)
        found = _passed_on(step, result, path) if step and result else None
        if found is None:
            hops.append(Hop(step_id, tool))
            break
        arg, ref, rest = found
        hops.append(Hop(step_id, tool, arg, ref.raw or ref.canonical))
        step_id, path = ref.step, (*ref.path, *rest)
    return hops


def trace_field(
    plan: Plan,
    results: Mapping[int, StepResult],
    field_name: str,
    *,
    output_type: type[BaseModel] | None = None,
) -> Blame:
    """Blame the step that produced ``field_name`` of the typed output.

    The field's argument in the final mapping step is followed through its reference
    into the referenced step; a step that received the value (or a value enclosing it)
    through a whole-value reference and returned it unchanged passes the blame on to the
    step it came from, and so on until the step that actually produced it.

    Args:
        plan: The plan with the final mapping step (kept steps merged in).
        results: The step results by id, the final mapping's included when known (its
            resolution methods tell whether the LLM fallback filled a field).
        field_name: The output field.
        output_type: The output model (binds positional arguments to its field names).

    Returns:
        The blame. A field written as a literal, left unfilled, or filled by the LLM
        fallback is blamed on the final mapping step itself.
    """
    final = output_step(plan)
    if final is None:
        raise ValueError("the plan has no final mapping step")
    names = list(output_type.model_fields) if output_type is not None else []
    written = _bound(final, names).get(field_name)
    head = Hop(final.id, OUTPUT_TOOL, field_name, _written_text(written))
    mine = Hop(final.id, OUTPUT_TOOL)
    if written is None:
        return Blame(field_name, final.id, OUTPUT_TOOL, (mine,), "the final mapping left it out")
    refs = [r for r in iter_refs(written) if not r.is_hinted]
    result = results.get(final.id)
    method = result.resolution.get(field_name) if result is not None else None
    if method is ResolutionMethod.LLM and isinstance(written, Ref) and not written.is_hinted:
        # the fallback gave the value the reference points at: it is the reference's
        if result is not None and result.args is not None and field_name in result.args:
            try:
                pointed = follow_path(results[written.step].output, written.path)
            except (LookupError, KeyError):
                pointed = _NOTHING
            if pointed is not _NOTHING and _same(pointed, result.args[field_name]):
                method = ResolutionMethod.REFERENCE
    if (isinstance(written, Ref) and written.is_hinted) or method is ResolutionMethod.LLM:
        sources = tuple(
            dict.fromkeys(
                (_follow(plan, results, r.step, r.path)[-1].step_id if not r.is_hinted else r.step)
                for r in iter_refs(written)
                if r.step in results
            )
        )
        why = "the LLM fallback of the final mapping filled it" + (
            f" (from step(s) {', '.join(map(str, sources))})" if sources else ""
        )
        return Blame(field_name, final.id, OUTPUT_TOOL, (head,), why, sources)
    if isinstance(written, Ref):
        if written.step not in results:
            return Blame(
                field_name,
                final.id,
                OUTPUT_TOOL,
                (head,),
                f"it refers to step {written.step}, which has no result",
            )
        hops = _follow(plan, results, written.step, written.path)
        last = hops[-1]
        return Blame(field_name, last.step_id, last.tool, (head, *hops), sources=(last.step_id,))
    if refs:
        traces = [_follow(plan, results, r.step, r.path) for r in refs if r.step in results]
        if traces:
            sources = tuple(dict.fromkeys(t[-1].step_id for t in traces))
            first = traces[0]
            kind = "text" if isinstance(written, Template) else "value"
            return Blame(
                field_name,
                first[-1].step_id,
                first[-1].tool,
                (head, *first),
                f"produced a part of it (the final mapping builds the {kind} from "
                f"step(s) {', '.join(map(str, sources))})",
                sources,
            )
    return Blame(
        field_name, final.id, OUTPUT_TOOL, (head,), "the final mapping wrote it as a literal"
    )


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class OutputMismatch:
    """A field of the typed output that differs from its expected value."""

    field: str
    """The field."""
    expected: Any
    """The value expected."""
    actual: Any
    """The value found."""
    blame: Blame
    """The step whose output it came from."""

    def describe(self) -> str:
        """For people (it shows the expected value; never give it to a model)."""
        return (
            f"field {self.field!r} is {_short(self.actual)}, expected {_short(self.expected)}; "
            f"blamed on step {self.blame.step_id} ({self.blame.tool or 'reasoning'}): "
            f"{self.blame.describe()}"
        )

    def feedback(self) -> str:
        """For models: the wrong value and where it came from, not the expected one."""
        return f"field {self.field!r} = {_short(self.actual)} is wrong; {self.blame.describe()}"


def compare_output(
    value: BaseModel,
    expected: Mapping[str, Any],
    plan: Plan,
    results: Mapping[int, StepResult],
) -> list[OutputMismatch]:
    """The fields of ``value`` that differ from ``expected``, each with its blame."""
    out: list[OutputMismatch] = []
    for name, want in expected.items():
        got = getattr(value, name)
        if not _same(got, want):
            blame = trace_field(plan, results, name, output_type=type(value))
            out.append(OutputMismatch(name, want, got, blame))
    return out


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class OutputOutcome:
    """What instantiating the final mapping gave."""

    result: StepResult
    """The final mapping step's result (its output is the model instance, if any)."""
    value: BaseModel | None = None
    """The model instance (also when it is unexpected), or None when it is invalid."""
    kind: ErrorKind | None = None
    """None on success; ``OUTPUT_INVALID``, ``OUTPUT_UNEXPECTED``, or the resolver's kind
    (``MISSING_REFERENCE``, ``UPSTREAM_FAILED``, ``ARGS_SYNTAX``)."""
    message: str | None = None
    """The failure, in words safe to show a model (no expected values)."""
    fields: tuple[str, ...] = ()
    """The fields concerned, sorted."""
    mismatches: tuple[OutputMismatch, ...] = ()
    """For ``OUTPUT_UNEXPECTED``: every wrong field with its blame."""

    @property
    def ok(self) -> bool:
        """Whether the output is valid and as expected."""
        return self.kind is None

    @property
    def blamed_steps(self) -> tuple[int, ...]:
        """The steps blamed for wrong fields, in field order, without repeats."""
        return tuple(dict.fromkeys(m.blame.step_id for m in self.mismatches))

    def describe(self) -> str:
        """For people: the message, with expected values for mismatches."""
        if not self.mismatches:
            return self.message or "the typed output is valid"
        return "; ".join(m.describe() for m in self.mismatches)


async def resolve_output(
    plan: Plan,
    output_type: type[BaseModel],
    results: Mapping[int, StepResult],
    resolver: ArgResolver,
    *,
    expected: Mapping[str, Any] | None = None,
    feedback: StepError | None = None,
    run_id: str = "-",
    bus: EventBus | None = None,
) -> OutputOutcome:
    """Resolve the final mapping step, validate it into ``output_type``, compare it.

    Args:
        plan: The plan (with its final mapping step; `check_output_plan` passed).
        output_type: The output model.
        results: Every other step's result, by id.
        resolver: Resolves the mapping's args (with the model as the args schema).
        expected: Expected field values; a difference is ``OUTPUT_UNEXPECTED``.
        feedback: Why the previous instantiation was unusable (re-resolution).
        run_id: For logs and events.
        bus: Where the resolver's events go.

    Returns:
        The outcome; failures are in it, never raised.
    """
    step = output_step(plan)
    if step is None:
        raise ValueError("the plan has no final mapping step (check_output_plan first)")
    model = output_type.__name__
    where = f"step {step.id} ({OUTPUT_TOOL})"
    names = list(output_type.model_fields)
    resolved = await resolver.resolve(
        step,
        output_spec(output_type),
        results,
        feedback=feedback,
        run_id=run_id,
        bus=bus,
    )

    def failed(
        kind: ErrorKind,
        message: str,
        fields: tuple[str, ...],
        *,
        literal: tuple[str, ...] = (),
        upstream: int | None = None,
        cause: str | None = None,
        **extra: Any,
    ) -> OutputOutcome:
        error = StepError(
            kind, message, args=fields, literal_args=literal, cause=cause, upstream=upstream
        )
        result = StepResult(
            step_id=step.id,
            tool=OUTPUT_TOOL,
            status=StepStatus.FAILED,
            failure=error,
            **extra,
        )
        return OutputOutcome(result, extra.get("output"), kind, message, fields)

    if isinstance(resolved, ResolutionFailure):
        fields = tuple(sorted(a for a in resolved.args if a in names))
        literal = tuple(a for a in resolved.literal_args if a in fields)
        if resolved.kind in (ErrorKind.ARGS_INVALID, ErrorKind.RESOLUTION_FAILED):
            detail = resolved.cause or resolved.message
            message = f"{where}: the final mapping does not validate into {model}: {detail}"
            return failed(
                ErrorKind.OUTPUT_INVALID,
                message,
                fields,
                literal=literal,
                cause=resolved.cause,
                llm_calls=resolved.llm_calls,
            )
        return failed(
            resolved.kind,
            resolved.message,
            fields,
            literal=literal,
            upstream=resolved.upstream,
            cause=resolved.cause,
            llm_calls=resolved.llm_calls,
        )
    try:
        value = output_type.model_validate(resolved.args)
    except ValidationError as exc:  # the resolver validated already; model-level rules
        message = f"{where}: the final mapping does not validate into {model}: " + "; ".join(
            f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors()
        )
        fields = tuple(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))
        return failed(
            ErrorKind.OUTPUT_INVALID,
            message,
            fields,
            args=resolved.args,
            resolution=resolved.methods,
            llm_calls=resolved.llm_calls,
        )
    ok = StepResult(
        step_id=step.id,
        tool=OUTPUT_TOOL,
        status=StepStatus.SUCCEEDED,
        args=resolved.args,
        output=value,
        raw_output=value.model_dump(mode="json"),
        resolution=resolved.methods,
        llm_calls=resolved.llm_calls,
    )
    if not expected:
        return OutputOutcome(ok, value)
    mismatches = compare_output(value, expected, plan, {**results, step.id: ok})
    if not mismatches:
        return OutputOutcome(ok, value)
    fields = tuple(sorted(m.field for m in mismatches))
    message = (
        f"{where}: the typed output {model} differs from the expected values in "
        f"{len(mismatches)} field(s): " + "; ".join(m.feedback() for m in mismatches)
    )
    result = replace(
        ok,
        status=StepStatus.FAILED,
        failure=StepError(
            ErrorKind.OUTPUT_UNEXPECTED,
            message,
            args=fields,
            literal_args=tuple(
                f for f in fields if resolved.methods.get(f) is ResolutionMethod.LITERAL
            ),
        ),
    )
    return OutputOutcome(
        result, value, ErrorKind.OUTPUT_UNEXPECTED, message, fields, tuple(mismatches)
    )


def output_feedback(outcome: OutputOutcome) -> StepError:
    """The re-resolution feedback for a failed outcome: its error, with words for the model.

    The fields to fill again are the error's ``args`` (data); the message only explains.
    """
    assert outcome.message is not None and outcome.result.failure is not None
    fields = ", ".join(f"'{f}'" for f in outcome.fields) or "every field"
    if outcome.kind is ErrorKind.OUTPUT_UNEXPECTED:
        text = (
            f"{outcome.message}\nRe-check which earlier step's output each of these fields "
            f"must come from, and fill them again: {fields}."
        )
    else:
        text = f"{outcome.message}\nFill these fields again so that they validate: {fields}."
    return replace(outcome.result.failure, message=text)
