"""Failures are data: a literal from the plan is never sent to the LLM.

Re-resolution reads the arguments a failure names from its `StepError`, never from its
message. These properties throw random plans (literals and references under names such
as ``type``, ``input`` and ``value``) and random failures whose messages quote the
tool's JSON schema and pydantic errors naming *every* argument at the resolver and at
the whole agent, and check, through the purpose-aware fake model (the keys each
``resolve`` call asks for), that no literal ever reaches the model and that every
literal reaches the tool as written.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage

from planexec.agent import PlanExecuteAgent
from planexec.config import AgentConfig
from planexec.errors import ErrorKind
from planexec.plan import Ref, Step
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus
from planexec.testing import FunctionModel, ModelCall, fake_tool
from planexec.tools import ToolCatalog

NAMES = ("type", "input", "value", "site", "n", "query", "limit")
"""Argument names; several are words every schema and pydantic error contains."""

SOURCE = {"site": "MAIN", "n": 5, "items": [{"id": "CH-6", "type": "chiller"}]}
"""The output of step 1, which references point into."""

REFS = {  # written reference → the type of what it gives (None: the path does not exist)
    "{step_1.site}": str,
    "{step_1.items[0].id}": str,
    "{step_1.items[0].type}": str,
    "{step_1.n}": int,
    "{step_1.no_such_key}": None,
    "{step_1.items[3].id}": None,
}

literals = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABC0123456789-_.", min_size=1, max_size=12),
    st.integers(-5, 500),
)


@st.composite
def plans(draw: st.DrawFn) -> dict[str, tuple[str, Any]]:
    """Random arguments: name → ("literal", value) or ("ref", written reference)."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    out: dict[str, tuple[str, Any]] = {}
    for name in names:
        if draw(st.booleans()):
            out[name] = ("literal", draw(literals))
        else:
            out[name] = ("ref", draw(st.sampled_from(sorted(REFS))))
    return out


def schema_of(args: dict[str, tuple[str, Any]]) -> dict[str, type]:
    """The tool's types: what each written value is (so literals fit), else str."""
    types: dict[str, type] = {}
    for name, (how, value) in args.items():
        if how == "literal":
            types[name] = type(value)
        else:
            types[name] = REFS[value] or str
    return types


def hostile_message(types: dict[str, type]) -> str:
    """A failure message quoting the schema and a pydantic error for every argument."""
    schema = {"properties": {n: {"type": t.__name__, "title": n} for n, t in types.items()}}
    errors = "\n".join(
        f"{n}\n  Input should be a valid {t.__name__} [type=value_error, input_value='{n}', "
        f"input_type=str]; argument '{n}' is wrong"
        for n, t in types.items()
    )
    return (
        f"{len(types)} validation errors for target\n{errors}\n"
        f"arguments {', '.join(repr(n) for n in types)} failed; schema: {json.dumps(schema)}"
    )


def filler(types: dict[str, type]) -> FunctionModel:
    """A model that fills every key it is asked for with a value of the right type."""

    def reply(call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "resolve":
            return json.dumps({k: 7 if types.get(k) is int else f"llm-{k}" for k in call.keys})
        return "done"

    return FunctionModel(function=reply)


def literal_names(args: dict[str, tuple[str, Any]]) -> set[str]:
    return {n for n, (how, _) in args.items() if how == "literal"}


def asked_keys(model: FunctionModel) -> set[str]:
    return {k for call in model.calls_made if call.purpose == "resolve" for k in call.keys}


# ------------------------------------------------------------------ at the resolver

failure_kinds = st.sampled_from(
    [ErrorKind.ARGS_INVALID, ErrorKind.RESOLUTION_FAILED, ErrorKind.TOOL_ERROR,
     ErrorKind.OUTPUT_INVALID, ErrorKind.EMPTY_OUTPUT]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=plans(), kind=failure_kinds, data=st.data())
def test_re_resolution_never_sends_a_literal_to_the_llm(
    args: dict[str, tuple[str, Any]], kind: ErrorKind, data: st.DataObject
) -> None:
    types = schema_of(args)
    named = data.draw(st.lists(st.sampled_from([*NAMES, "missing_arg"]), unique=True))
    # literal_args as a careless producer might fill them: the resolver must not trust them
    marked = data.draw(st.lists(st.sampled_from(named), unique=True)) if named else []
    feedback = StepError(kind, hostile_message(types), args=tuple(named),
                         literal_args=tuple(marked))
    step = Step(id=2, task="do it", tool="target", depends_on=(1,), args={
        name: (value if how == "literal" else _ref(value)) for name, (how, value) in args.items()
    })
    spec = ToolCatalog([fake_tool("target", args=dict(types))]).get("target")
    model = filler(types)
    results = {1: StepResult(1, "source", StepStatus.SUCCEEDED, args={}, output=SOURCE)}
    out = asyncio.run(ArgResolver(model).resolve(step, spec, results, feedback=feedback))

    assert not asked_keys(model) & literal_names(args)
    if isinstance(out, ResolvedArgs):
        for name in literal_names(args):
            assert out.args[name] == args[name][1]
            assert out.methods[name] is ResolutionMethod.LITERAL
    else:
        assert isinstance(out, ResolutionFailure)


def _ref(written: str) -> Ref:
    from planexec.parsing.refs import parse_ref

    ref = parse_ref(written)
    assert ref is not None
    return ref


# ------------------------------------------------------------------ through the agent


def plan_text(args: dict[str, tuple[str, Any]]) -> str:
    written = {n: (v if how == "literal" else v) for n, (how, v) in args.items()}
    return (
        "#Task1: Get the source.\n#Tool1: source\n#Args1: {}\n#Dependency1: None\n\n"
        "#Task2: Use it.\n#Tool2: target\n"
        f"#Args2: {json.dumps(written)}\n#Dependency2: #S1\n"
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=plans(), failures=st.integers(0, 3), policy=st.sampled_from(
    ["RERESOLVE", "RETRY_STEP"]))
def test_no_literal_reaches_the_llm_whatever_the_tool_says_and_every_literal_reaches_the_tool(
    args: dict[str, tuple[str, Any]], failures: int, policy: str
) -> None:
    types = schema_of(args)
    calls: list[dict[str, Any]] = []

    def target(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        if len(calls) <= failures:
            raise ValueError(hostile_message(types))
        return {"ok": True}

    tools = [
        fake_tool("source", SOURCE, hints={"read_only": True}),
        fake_tool("target", args=dict(types), function=target, hints={"read_only": True}),
    ]
    config = AgentConfig.from_dict({
        "recovery": {"policy": {"TOOL_ERROR": policy}, "max_reresolutions_per_step": 3,
                     "max_retries_per_step": 3, "early_replan": False},
        "executor": {"tool_retry": {"attempts": 1}},
    })
    model = filler(types)
    run = asyncio.run(PlanExecuteAgent(model, tools, config=config).execute_plan(
        plan_text(args)))

    assert not asked_keys(model) & literal_names(args), run.to_dict()
    for made in calls:
        for name in literal_names(args):
            assert made[name] == args[name][1]
