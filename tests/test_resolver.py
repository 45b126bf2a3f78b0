from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger
from pydantic import BaseModel

from planexec._models import ModelClient
from planexec.errors import ErrorKind
from planexec.events import ArgResolved, Event, EventBus, FallbackUsed, LLMCalled
from planexec.parsing.refs import contains_placeholder
from planexec.plan import Ref, Step, Template
from planexec.resolver import (
    ArgResolver,
    ResolutionFailure,
    ResolvedArgs,
    follow_path,
)
from planexec.results import ResolutionMethod, StepError, StepResult, StepStatus, Usage
from planexec.testing import ScriptedChatModel, fake_tool, messages_text
from planexec.tools import ToolCatalog, ToolSpec

M = ResolutionMethod


class Sensor(BaseModel):
    name: str
    unit: str


class Asset(BaseModel):
    id: str
    sensors: list[Sensor]


class Opaque:
    """An arbitrary object: paths must never look into it."""

    looked_into = False

    @property
    def id(self) -> str:
        Opaque.looked_into = True
        return "SECRET"

    def __getattr__(self, name: str) -> Any:
        Opaque.looked_into = True
        return "SECRET"


def ok(step_id: int, output: Any, tool: str = "t") -> StepResult:
    return StepResult(step_id, tool, StepStatus.SUCCEEDED, output=output)


RESULTS: dict[int, StepResult] = {
    1: ok(1, {"sites": [{"name": "MAIN", "count": "7"}, {"name": "SOUTH", "count": "2"}]}),
    2: ok(2, [{"id": "CH-6", "name": "Chiller 6"}, {"id": "CH-7", "name": "Chiller 7"}]),
    3: ok(3, Asset(id="CH-6", sensors=[Sensor(name="temp", unit="C")])),
    4: ok(4, {"fm_to_sensors": {"excess purge": ["purge_rate"]}, "n": 42}),
    5: ok(5, "UNREFERENCED-SECRET-OUTPUT"),
    6: ok(6, Opaque()),
}


def spec_of(tool_name: str = "target", /, **args: Any) -> ToolSpec:
    return ToolCatalog([fake_tool(tool_name, args=args)]).get(tool_name)


def step(args: dict[str, Any] | None = None, **kw: Any) -> Step:
    return Step(id=kw.pop("id", 9), task=kw.pop("task", "do the thing"), tool="target",
                args=args or {}, **kw)


async def resolve(
    s: Step,
    spec: ToolSpec | None,
    model: Any = None,
    results: dict[int, StepResult] | None = None,
    **kw: Any,
) -> ResolvedArgs | ResolutionFailure:
    resolver = ArgResolver(model, output_budget=kw.pop("output_budget", 4000))
    return await resolver.resolve(s, spec, RESULTS if results is None else results, **kw)


def resolved(out: ResolvedArgs | ResolutionFailure) -> ResolvedArgs:
    assert isinstance(out, ResolvedArgs), out
    assert not contains_placeholder(out.args)
    return out


def failed(out: ResolvedArgs | ResolutionFailure, kind: ErrorKind) -> ResolutionFailure:
    assert isinstance(out, ResolutionFailure), out
    assert out.kind is kind, out.message
    return out


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    yield seen
    logger.remove(sink)


def prompt_of(model: ScriptedChatModel, call: int = 0) -> str:
    return messages_text(model.requests[call])


# -- deterministic tiers -------------------------------------------------------------


async def test_literals_are_kept_as_written() -> None:
    spec = spec_of(n=int, name=str, opts=dict)
    out = resolved(await resolve(step({"n": 3, "name": "x", "opts": {"a": [1]}}), spec))
    assert out.args == {"n": 3, "name": "x", "opts": {"a": [1]}}
    assert out.methods == {"n": M.LITERAL, "name": M.LITERAL, "opts": M.LITERAL}
    assert out.llm_calls == 0


async def test_a_whole_value_reference_keeps_the_type_of_the_output() -> None:
    spec = spec_of(data=dict, rows=list, asset=Asset)
    out = resolved(
        await resolve(step({"data": Ref(1), "rows": Ref(2), "asset": Ref(3)}), spec)
    )
    assert out.args["data"] is RESULTS[1].output
    assert out.args["rows"] is RESULTS[2].output
    assert out.args["asset"] is RESULTS[3].output
    assert set(out.methods.values()) == {M.REFERENCE}


async def test_paths_follow_dict_keys_list_indexes_and_quoted_keys() -> None:
    spec = spec_of(site=str, last=str, sensors=list[str], n=int)
    args = {
        "site": Ref(1, ("sites", 0, "name")),
        "last": Ref(2, (-1, "id")),
        "sensors": Ref(4, ("fm_to_sensors", "excess purge")),
        "n": Ref(4, ("n",)),
    }
    out = resolved(await resolve(step(args), spec))
    assert out.args == {"site": "MAIN", "last": "CH-7", "sensors": ["purge_rate"], "n": 42}
    assert set(out.methods.values()) == {M.PATH}


async def test_paths_enter_pydantic_models_through_their_fields() -> None:
    spec = spec_of(unit=str, sensor=Sensor)
    args = {"unit": Ref(3, ("sensors", 0, "unit")), "sensor": Ref(3, ("sensors", 0))}
    out = resolved(await resolve(step(args), spec))
    assert out.args["unit"] == "C"
    assert out.args["sensor"] is RESULTS[3].output.sensors[0]


async def test_paths_never_look_into_arbitrary_objects() -> None:
    Opaque.looked_into = False
    out = await resolve(step({"asset_id": Ref(6, ("id",), raw="<step_6.id>")}),
                        spec_of(asset_id=str))
    fail = failed(out, ErrorKind.RESOLUTION_FAILED)
    assert "'asset_id'" in fail.message and "step 9" in fail.message
    assert "cannot look into a Opaque" in fail.message
    assert not Opaque.looked_into
    with pytest.raises(LookupError):
        follow_path(Opaque(), ("id",))
    assert not Opaque.looked_into


async def test_embedded_references_are_interpolated_as_text_and_compact_json() -> None:
    spec = spec_of(q=str)
    template = Template(
        ("site ", Ref(1, ("sites", 0, "name"), whole_value=False), " assets ",
         Ref(2, (0,), whole_value=False), " n=", Ref(4, ("n",), whole_value=False),
         " asset ", Ref(3, whole_value=False))
    )
    out = resolved(await resolve(step({"q": template}), spec))
    assert out.args["q"] == (
        'site MAIN assets {"id":"CH-6","name":"Chiller 6"} n=42 asset '
        '{"id":"CH-6","sensors":[{"name":"temp","unit":"C"}]}'
    )
    assert out.methods["q"] is M.INTERPOLATED


async def test_references_nested_at_depth_are_resolved_and_the_strongest_method_is_kept() -> None:
    spec = spec_of(filters=list[dict[str, Any]])
    args = {
        "filters": [
            {"site": Ref(1, ("sites", 1, "name")), "fixed": 1},
            {"label": Template(("asset ", Ref(2, (0, "id"), whole_value=False)))},
        ]
    }
    out = resolved(await resolve(step(args), spec))
    assert out.args["filters"] == [{"site": "SOUTH", "fixed": 1}, {"label": "asset CH-6"}]
    assert out.methods["filters"] is M.INTERPOLATED


async def test_a_numeric_string_is_coerced_to_the_schema_type_loudly(
    warnings: list[str],
) -> None:
    events: list[Event] = []
    bus = EventBus([events.append])
    out = resolved(
        await resolve(step({"count": Ref(1, ("sites", 0, "count"))}), spec_of(count=int), bus=bus)
    )
    assert out.args == {"count": 7}
    assert out.methods == {"count": M.COERCED}
    assert any("argument 'count' coerced" in w for w in warnings)
    fallbacks = [e for e in events if isinstance(e, FallbackUsed)]
    assert [e.code for e in fallbacks] == ["ARG_COERCED"]
    assert [(e.arg, e.method) for e in events if isinstance(e, ArgResolved)] == [
        ("count", M.COERCED)
    ]


async def test_a_value_that_already_fits_is_not_reported_as_coerced() -> None:
    out = resolved(await resolve(step({"x": 3, "when": "2024-01-01"}),
                                 spec_of(x=float, when=str)))
    assert out.methods == {"x": M.LITERAL, "when": M.LITERAL}
    assert out.args == {"x": 3, "when": "2024-01-01"}


async def test_a_one_element_list_is_not_unwrapped_into_a_scalar() -> None:
    results = {**RESULTS, 7: ok(7, ["CH-6"])}
    out = await resolve(step({"asset_id": Ref(7, raw="<step_7>")}), spec_of(asset_id=str),
                        results=results)
    fail = failed(out, ErrorKind.RESOLUTION_FAILED)
    assert "argument 'asset_id'" in fail.message and "step 9" in fail.message
    assert "does not fit" in fail.message and "no model is configured" in fail.message
    # The real cause leads; the unavailable fallback comes after it.
    assert fail.message.index("does not fit") < fail.message.index("no model")


async def test_a_one_element_list_goes_to_the_fallback_with_a_model() -> None:
    results = {**RESULTS, 7: ok(7, ["CH-6"])}
    model = ScriptedChatModel(replies=['{"asset_id": "CH-6"}'])
    out = resolved(await resolve(step({"asset_id": Ref(7)}), spec_of(asset_id=str), model,
                                 results=results))
    assert out.args == {"asset_id": "CH-6"} and out.methods == {"asset_id": M.LLM}


async def test_a_reasoning_step_resolves_references_without_validation() -> None:
    s = Step(id=9, task="summarise", tool=None, args={"data": Ref(3), "n": "not-a-number"},
             positional=(Ref(2, (0, "id")),))
    out = resolved(await resolve(s, None))
    assert out.args == {"data": RESULTS[3].output, "n": "not-a-number", "input": "CH-6"}


async def test_positional_arguments_bind_to_the_schema_order() -> None:
    spec = spec_of(site_name=str, limit=int)
    s = step(positional=(Ref(1, ("sites", 0, "name")), 5))
    out = resolved(await resolve(s, spec))
    assert out.args == {"site_name": "MAIN", "limit": 5}
    assert out.methods == {"site_name": M.PATH, "limit": M.LITERAL}


async def test_too_many_positional_arguments_are_args_invalid_naming_the_extra_one() -> None:
    s = step(positional=("MAIN", 5, "extra"))
    fail = failed(await resolve(s, spec_of(site_name=str, limit=int)), ErrorKind.ARGS_INVALID)
    assert "step 9" in fail.message and "positional argument #3" in fail.message
    assert "'extra'" in fail.message and fail.arg == "#3"


async def test_an_argument_given_by_position_and_by_name_is_args_invalid() -> None:
    s = step({"site_name": "X"}, positional=("MAIN",))
    fail = failed(await resolve(s, spec_of(site_name=str)), ErrorKind.ARGS_INVALID)
    assert "argument 'site_name'" in fail.message and "step 9" in fail.message


async def test_unreadable_args_are_args_syntax() -> None:
    s = step(args_valid=False, args_text='{"a": ')
    fail = failed(await resolve(s, spec_of(a=int)), ErrorKind.ARGS_SYNTAX)
    assert "step 9" in fail.message


# -- reference failures ----------------------------------------------------------------


async def test_a_reference_to_a_missing_step_fails_with_missing_reference() -> None:
    s = step({"asset_id": Ref(12, ("id",), raw="<step_12.id>")})
    fail = failed(await resolve(s, spec_of(asset_id=str)), ErrorKind.MISSING_REFERENCE)
    assert "step 9" in fail.message and "argument 'asset_id'" in fail.message
    assert "step 12" in fail.message and "<step_12.id>" in fail.message
    assert fail.arg == "asset_id"


@pytest.mark.parametrize("status", [StepStatus.FAILED, StepStatus.BLOCKED, StepStatus.SKIPPED])
async def test_a_reference_to_a_step_that_did_not_succeed_fails_with_upstream_failed(
    status: StepStatus,
) -> None:
    results = {
        **RESULTS,
        8: StepResult(8, "sites", status, error="step 8 (sites): database down",
                      error_kind=ErrorKind.TOOL_ERROR),
    }
    s = step({"opts": {"site": [Ref(8, ("name",))]}})
    model = ScriptedChatModel(replies=[])
    fail = failed(await resolve(s, spec_of(opts=dict), model, results=results),
                  ErrorKind.UPSTREAM_FAILED)
    assert "step 9" in fail.message and "argument 'opts'" in fail.message
    assert "database down" in fail.message and "TOOL_ERROR" in fail.message
    assert str(status) in fail.message
    assert model.calls == 0


# -- the LLM fallback ----------------------------------------------------------------


HINTED = Ref(2, hint="step_2_selected_asset_id",
             raw="{step_2_selected_asset_id}")


async def test_without_a_model_a_hinted_reference_fails_saying_which_argument_and_why() -> None:
    fail = failed(await resolve(step({"asset_id": HINTED}, id=3), spec_of(asset_id=str)),
                  ErrorKind.RESOLUTION_FAILED)
    message = fail.message
    assert message.startswith("step 3 (target): argument 'asset_id': hinted reference "
                              "{step_2_selected_asset_id}")
    assert message.index("{step_2_selected_asset_id}") < message.index("LLM fallback")
    assert "no model is configured" in message
    assert fail.arg == "asset_id" and fail.llm_calls == 0


async def test_a_hinted_reference_is_filled_by_the_fallback(warnings: list[str]) -> None:
    model = ScriptedChatModel(replies=['{"asset_id": "CH-6"}'])
    events: list[Event] = []
    out = resolved(await resolve(step({"asset_id": HINTED, "site": "MAIN"}),
                                 spec_of(asset_id=str, site=str), model,
                                 bus=EventBus([events.append])))
    assert out.args == {"asset_id": "CH-6", "site": "MAIN"}
    assert out.methods == {"asset_id": M.LLM, "site": M.LITERAL}
    assert out.llm_calls == 1 and model.calls == 1
    assert any("LLM fallback" in w and "'asset_id'" in w for w in warnings)
    assert [e.code for e in events if isinstance(e, FallbackUsed)] == ["ARG_LLM_FALLBACK"]
    assert [e.purpose for e in events if isinstance(e, LLMCalled)] == ["resolve"]


async def test_the_prompt_holds_task_tool_schema_referenced_outputs_and_hints_only() -> None:
    model = ScriptedChatModel(replies=['{"asset_id": "CH-6"}'])
    s = step({"asset_id": HINTED, "site": Ref(1, ("sites", 0, "name"))},
             task="get the history of Chiller 6")
    resolved(await resolve(s, spec_of("history", asset_id=str, site=str), model))
    text = prompt_of(model)
    assert "get the history of Chiller 6" in text
    assert "Name: history" in text and "Fake tool history." in text
    assert '"required": ["asset_id", "site"]' in text
    assert "### step_1" in text and "### step_2" in text and "Chiller 6" in text
    assert "UNREFERENCED-SECRET-OUTPUT" not in text and "### step_3" not in text
    assert "- asset_id:" in text and "{step_2_selected_asset_id}" in text
    assert "hinted reference" in text
    assert 'exactly these keys: "asset_id"' in text
    assert "- site =" in text  # already resolved, shown for context only


async def test_long_outputs_are_cut_to_the_budget_with_a_note() -> None:
    big = {"rows": ["x" * 50] * 100}
    total = len(json.dumps(big))
    results = {**RESULTS, 7: ok(7, big)}
    model = ScriptedChatModel(replies=[json.dumps({"row": "x" * 50})])  # a grounded row
    s = step({"row": Ref(7, hint="the_first_row", raw="{the_first_row_of_step_7}")})
    resolved(await resolve(s, spec_of(row=str), model, results=results, output_budget=120))
    text = prompt_of(model)
    assert f"[cut: 120 of {total} characters shown]" in text
    assert "x" * 50 * 3 not in text


async def test_one_call_covers_every_argument_that_needs_the_fallback() -> None:
    model = ScriptedChatModel(replies=['{"a": "CH-6", "b": "temp", "c": 7}'])
    s = step({
        "a": HINTED,
        "b": Ref(3, ("sensors", 5, "name"), raw="<step_3.sensors[5].name>"),
        "c": Ref(2, (0, "id")),
        "d": "literal",
    })
    out = resolved(await resolve(s, spec_of(a=str, b=str, c=int, d=str), model))
    assert model.calls == 1 and out.llm_calls == 1
    assert out.args == {"a": "CH-6", "b": "temp", "c": 7, "d": "literal"}
    assert out.methods == {"a": M.LLM, "b": M.LLM, "c": M.LLM, "d": M.LITERAL}
    text = prompt_of(model)
    assert "index 5 is out of range for a list of 1 items" in text
    assert "does not fit the argument's type" in text


async def test_a_path_that_does_not_exist_needs_the_fallback() -> None:
    s = step({"name": Ref(1, ("sites", 0, "title"), raw="<step_1.sites[0].title>")})
    fail = failed(await resolve(s, spec_of(name=str)), ErrorKind.RESOLUTION_FAILED)
    assert "argument 'name'" in fail.message
    assert "path .sites[0].title of <step_1.sites[0].title> does not exist" in fail.message
    assert "no key 'title'" in fail.message


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"asset_id": "CH-6"}\n```',
        '```json{"asset_id": "CH-6"}```',
        'Sure! The asset is {"asset_id": "CH-6"} as found in step 2.',
        "{'asset_id': 'CH-6',}",
    ],
)
async def test_the_reply_is_parsed_tolerantly(reply: str) -> None:
    model = ScriptedChatModel(replies=[reply])
    out = resolved(await resolve(step({"asset_id": HINTED}), spec_of(asset_id=str), model))
    assert out.args == {"asset_id": "CH-6"} and model.calls == 1


async def test_an_unusable_reply_is_retried_once_with_the_problem_as_feedback(
    warnings: list[str],
) -> None:
    model = ScriptedChatModel(replies=["I think it is Chiller 6.", '{"asset_id": "CH-6"}'])
    out = resolved(await resolve(step({"asset_id": HINTED}), spec_of(asset_id=str), model))
    assert out.args == {"asset_id": "CH-6"}
    assert model.calls == 2 and out.llm_calls == 2
    retry = prompt_of(model, 1)
    assert "I think it is Chiller 6." in retry
    assert "could not be used: no JSON object was found" in retry
    assert any("asking once more" in w for w in warnings)


@pytest.mark.parametrize(
    ("replies", "problem"),
    [
        (["", "   "], "the reply was empty"),
        (["not json at all", "still not json"], "no JSON object was found"),
        (['{"other": 1}', '{"other": 2}'], "lacks 'count'"),
        (['{"count": "many"}', '{"count": [3]}'], "does not fit its schema"),
        (['{"count": "{step_2}"}', '{"count": "<step_1.n>"}'], "still holds a placeholder"),
    ],
)
async def test_a_second_unusable_reply_fails_with_resolution_failed_after_exactly_two_calls(
    replies: list[str], problem: str
) -> None:
    model = ScriptedChatModel(replies=[*replies, '{"count": 1}'])
    s = step({"count": Ref(2, hint="count_from_step_2", raw="{count_from_step_2}")})
    fail = failed(await resolve(s, spec_of(count=int), model), ErrorKind.RESOLUTION_FAILED)
    assert model.calls == 2 and fail.llm_calls == 2
    assert "step 9" in fail.message and "argument 'count'" in fail.message
    assert problem in fail.message
    assert fail.reply == replies[1]
    assert repr(replies[1]) in fail.message


async def test_an_unparseable_reply_never_becomes_empty_args() -> None:
    # DESIGN.md silent failure: "unparseable LLM reply becomes {}".
    model = ScriptedChatModel(replies=["{asset_id: ", "Sorry, I cannot help."])
    tool = fake_tool("target", args={"asset_id": (str | None, None)})
    spec = ToolCatalog([tool]).get("target")
    out = await resolve(step({"asset_id": HINTED}), spec, model)
    fail = failed(out, ErrorKind.RESOLUTION_FAILED)
    assert "Sorry, I cannot help." in fail.message


async def test_the_failure_message_cuts_a_long_reply() -> None:
    long_reply = "no " * 400
    model = ScriptedChatModel(replies=[long_reply, long_reply])
    fail = failed(await resolve(step({"asset_id": HINTED}), spec_of(asset_id=str), model),
                  ErrorKind.RESOLUTION_FAILED)
    assert fail.reply is not None and len(fail.reply) <= 503
    assert len(fail.message) < 900


async def test_a_model_error_is_resolution_failed_with_its_cause_and_no_retry() -> None:
    model = ScriptedChatModel(replies=[RuntimeError("rate limited"), '{"asset_id": "x"}'])
    fail = failed(await resolve(step({"asset_id": HINTED}), spec_of(asset_id=str), model),
                  ErrorKind.RESOLUTION_FAILED)
    assert "rate limited" in fail.message and "argument 'asset_id'" in fail.message
    assert model.calls == 1 and fail.llm_calls == 1


async def test_a_fallback_value_is_coerced_to_the_schema_type() -> None:
    model = ScriptedChatModel(replies=['{"count": "7"}'])
    s = step({"count": Ref(2, hint="count_from_step_2", raw="{count_from_step_2}")})
    out = resolved(await resolve(s, spec_of(count=int), model))
    assert out.args == {"count": 7} and out.methods == {"count": M.LLM}


async def test_the_fallback_counts_its_calls_where_its_run_bound_client_counts() -> None:
    usage = Usage()
    client = ModelClient(ScriptedChatModel(replies=['{"asset_id": "CH-6"}']), usage=usage)
    out = resolved(await resolve(step({"asset_id": HINTED}), spec_of(asset_id=str), client))
    assert out.args == {"asset_id": "CH-6"}
    assert usage.llm_calls == {"resolve": 1}


async def test_a_hinted_reference_in_a_reasoning_step_uses_the_fallback_without_a_schema() -> None:
    model = ScriptedChatModel(replies=['{"asset": "CH-6"}'])
    s = Step(id=4, task="think", tool=None, args={"asset": HINTED})
    out = resolved(await resolve(s, None, model))
    assert out.args == {"asset": "CH-6"}
    assert "None: this is a reasoning step." in prompt_of(model)


# -- placeholders and validation -----------------------------------------------------


async def test_a_nested_placeholder_is_never_passed_through() -> None:
    # DESIGN.md silent failure: "nested placeholder passed through".
    s = step({"filters": [{"asset_id": "{step_2_selected_asset}"}]})
    tool = fake_tool("target", args={"filters": list})
    fail = failed(await resolve(s, ToolCatalog([tool]).get("target")),
                  ErrorKind.RESOLUTION_FAILED)
    assert "argument 'filters'" in fail.message and "step 9" in fail.message
    assert "{step_2_selected_asset}" in fail.message
    assert tool.metadata is not None and tool.metadata["calls"].count == 0


async def test_a_missing_required_argument_is_args_invalid() -> None:
    fail = failed(await resolve(step({"site": "MAIN"}), spec_of(site=str, start=str)),
                  ErrorKind.ARGS_INVALID)
    assert "step 9" in fail.message
    assert "argument 'start' is required but was not given" in fail.message
    assert fail.arg == "start"


async def test_an_unknown_argument_is_args_invalid_not_dropped() -> None:
    fail = failed(await resolve(step({"site": "MAIN", "colour": "red"}), spec_of(site=str)),
                  ErrorKind.ARGS_INVALID)
    assert "argument 'colour' is not a parameter of the tool (parameters: site)" in fail.message


async def test_feedback_forces_the_fallback_for_the_arguments_it_names() -> None:
    model = ScriptedChatModel(replies=['{"start": "2024-01-01"}'])
    s = step({"site": "MAIN", "start": Ref(4, ("n",))})
    message = "argument 'start': the tool wants an ISO date, got 42 (argument 'site' is fine)"
    feedback = StepError(ErrorKind.ARGS_INVALID, message, args=("start",))
    out = resolved(await resolve(s, spec_of(site=str, start=str), model, feedback=feedback))
    assert out.args == {"site": "MAIN", "start": "2024-01-01"}
    assert out.methods == {"site": M.LITERAL, "start": M.LLM}
    text = prompt_of(model)
    assert "## Feedback on the previous attempt" in text and message in text
    assert 'exactly these keys: "start"' in text


async def test_feedback_naming_no_argument_resends_only_the_arguments_from_references() -> None:
    model = ScriptedChatModel(replies=['{"n": 42}'])  # grounded: step 4 has n = 42
    feedback = StepError(ErrorKind.TOOL_ERROR, "the tool said: nothing found for site, n")
    out = resolved(await resolve(step({"site": "MAIN", "n": Ref(4, ("n",))}),
                                 spec_of(site=str, n=int), model, feedback=feedback))
    assert out.methods == {"site": M.LITERAL, "n": M.LLM}
    assert out.args == {"site": "MAIN", "n": 42}


async def test_feedback_naming_a_literal_never_sends_it_to_the_fallback() -> None:
    model = ScriptedChatModel(replies=[])
    feedback = StepError(ErrorKind.ARGS_INVALID, "argument 'site' bad", args=("site",),
                         literal_args=("site",))
    out = resolved(await resolve(step({"site": "MAIN"}), spec_of(site=str), model,
                                 feedback=feedback))
    assert out.methods == {"site": M.LITERAL} and model.calls == 0


async def test_a_literal_that_does_not_fit_its_type_fails_without_asking_the_llm() -> None:
    model = ScriptedChatModel(replies=[])
    out = failed(await resolve(step({"site": "MAIN", "n": "many"}), spec_of(site=str, n=int),
                               model), ErrorKind.ARGS_INVALID)
    assert out.args == ("n",) and out.literal_args == ("n",)
    assert model.calls == 0


async def test_feedback_can_fill_a_missing_required_argument() -> None:
    model = ScriptedChatModel(replies=['{"start": "2024-01-01"}'])
    feedback = StepError(ErrorKind.ARGS_INVALID, "argument 'start' is required but was not "
                         "given", args=("start",))
    out = resolved(await resolve(step({"site": "MAIN"}), spec_of(site=str, start=str), model,
                                 feedback=feedback))
    assert out.args == {"site": "MAIN", "start": "2024-01-01"}
    assert "start: not given in the plan" in prompt_of(model)


async def test_every_argument_emits_arg_resolved() -> None:
    events: list[Event] = []
    resolved(await resolve(step({"a": 1, "b": Ref(4, ("n",))}), spec_of(a=int, b=int),
                           bus=EventBus([events.append])))
    assert [(e.step_id, e.arg, e.method) for e in events if isinstance(e, ArgResolved)] == [
        (9, "a", M.LITERAL),
        (9, "b", M.PATH),
    ]


async def test_a_number_for_a_string_argument_is_coerced_to_text() -> None:
    out = resolved(await resolve(step({"asset_id": Ref(4, ("n",))}), spec_of(asset_id=str)))
    assert out.args == {"asset_id": "42"} and out.methods == {"asset_id": M.COERCED}


async def test_a_model_output_for_a_dict_argument_is_coerced_to_its_data() -> None:
    out = resolved(await resolve(step({"asset": Ref(3)}), spec_of(asset=dict)))
    assert out.args == {"asset": {"id": "CH-6", "sensors": [{"name": "temp", "unit": "C"}]}}
    assert out.methods == {"asset": M.COERCED}


async def test_a_list_of_models_for_a_plain_list_argument_keeps_its_type() -> None:
    sensors = RESULTS[3].output.sensors
    out = resolved(await resolve(step({"rows": Ref(3, ("sensors",))}), spec_of(rows=list)))
    assert out.args["rows"] is sensors and out.methods == {"rows": M.PATH}


async def test_a_hinted_reference_to_a_missing_step_never_reaches_the_model() -> None:
    # DESIGN.md silent failure: "missing step dropped from context".
    model = ScriptedChatModel(replies=['{"asset_id": "CH-6"}'])
    s = step({"asset_id": Ref(11, hint="asset_from_step_11", raw="{asset_from_step_11}")})
    fail = failed(await resolve(s, spec_of(asset_id=str), model), ErrorKind.MISSING_REFERENCE)
    assert "argument 'asset_id'" in fail.message and "step 11" in fail.message
    assert model.calls == 0


# -- keys, partial methods, JSON text, nested placeholders -------------------------------


async def test_a_placeholder_in_a_dict_key_needs_the_fallback_and_fails_without_a_model() -> None:
    fail = failed(
        await resolve(step({"tags": {"{step_1}": 1}}), spec_of(tags=dict)),
        ErrorKind.RESOLUTION_FAILED,
    )
    assert "'tags'" in fail.message and "dict key '{step_1}'" in fail.message


async def test_a_placeholder_in_a_dict_key_is_replaced_by_the_fallback() -> None:
    model = ScriptedChatModel(replies=['{"tags": {"MAIN": 1}}'])
    out = resolved(await resolve(step({"tags": {"<site_name>": 1}}), spec_of(tags=dict), model))
    assert out.args == {"tags": {"MAIN": 1}} and out.methods == {"tags": M.LLM}


async def test_a_fallback_reply_with_a_placeholder_key_is_retried() -> None:
    model = ScriptedChatModel(replies=['{"tags": {"{step_1}": 1}}', '{"tags": {"MAIN": 1}}'])
    out = resolved(await resolve(step({"tags": Ref(1, hint="tags of step 1", raw="{x}")}),
                                 spec_of(tags=dict), model))
    assert out.args == {"tags": {"MAIN": 1}} and model.calls == 2


async def test_a_failure_keeps_the_methods_of_the_arguments_that_resolved() -> None:
    fail = failed(
        await resolve(step({"site": Ref(1, ("sites", 0, "name")), "asset_id": HINTED, "n": 3}),
                      spec_of(site=str, asset_id=str, n=int)),
        ErrorKind.RESOLUTION_FAILED,
    )
    assert fail.methods == {"site": M.PATH, "n": M.LITERAL}


async def test_an_invalid_argument_failure_keeps_every_method() -> None:
    fail = failed(
        await resolve(step({"site": Ref(1, ("sites", 0, "name")), "colour": "red"}),
                      spec_of(site=str)),
        ErrorKind.ARGS_INVALID,
    )
    assert fail.methods == {"site": M.PATH, "colour": M.LITERAL}


def embedded(*parts: Any) -> Template:
    return Template(tuple(Ref(p[0], p[1], whole_value=False) if isinstance(p, tuple) else p
                          for p in parts))


async def test_a_value_interpolated_where_escaped_json_wants_a_value_is_written_as_json(
    warnings: list[str],
) -> None:
    events: list[Event] = []
    value = embedded('[{"site": ', (1, ("sites", 0, "name")), "}]")
    out = resolved(await resolve(step({"json_string": value}), spec_of(json_string=str),
                                 bus=EventBus([events.append])))
    assert out.args == {"json_string": '[{"site": "MAIN"}]'}
    assert json.loads(out.args["json_string"]) == [{"site": "MAIN"}]
    assert out.methods == {"json_string": M.INTERPOLATED}
    assert [e.code for e in events if isinstance(e, FallbackUsed)] == ["ARG_INTERPOLATED_JSON"]
    assert any("written as JSON" in w for w in warnings)


async def test_a_value_interpolated_inside_a_json_string_is_escaped() -> None:
    results = {1: ok(1, {"name": 'Chiller "6"'})}
    value = embedded('{"name": "', (1, ("name",)), '"}')
    out = resolved(await resolve(step({"j": value}), spec_of(j=str), results=results))
    assert json.loads(out.args["j"]) == {"name": 'Chiller "6"'}


async def test_json_text_that_needs_no_change_is_interpolated_plainly_and_silently() -> None:
    events: list[Event] = []
    value = embedded('[{"name": "', (1, ("sites", 0, "name")), '", "n": ', (4, ("n",)), "}]")
    out = resolved(await resolve(step({"j": value}), spec_of(j=str),
                                 bus=EventBus([events.append])))
    assert out.args == {"j": '[{"name": "MAIN", "n": 42}]'}
    assert not [e for e in events if isinstance(e, FallbackUsed)]


async def test_json_looking_text_that_stays_invalid_is_reported() -> None:
    events: list[Event] = []
    value = embedded("{site: ", (1, ("sites", 0, "name")), "}")
    out = resolved(await resolve(step({"j": value}), spec_of(j=str),
                                 bus=EventBus([events.append])))
    assert out.args == {"j": "{site: MAIN}"}
    notes = [e.message for e in events if isinstance(e, FallbackUsed)]
    assert len(notes) == 1 and "not valid JSON" in notes[0]


async def test_ordinary_text_is_interpolated_plainly() -> None:
    value = embedded("site ", (1, ("sites", 0, "name")), " now")
    out = resolved(await resolve(step({"q": value}), spec_of(q=str)))
    assert out.args == {"q": "site MAIN now"}


async def test_interpolation_that_leaves_a_reference_needs_the_fallback() -> None:
    # {step_1[{step_1.sites[0].name}]}: the inner reference resolves, the outer stays
    value = embedded("{step_1[", (1, ("sites", 0, "name")), "]}")
    fail = failed(await resolve(step({"q": value}), spec_of(q=str)), ErrorKind.RESOLUTION_FAILED)
    assert "still looks like a reference" in fail.message and "'q'" in fail.message


@pytest.mark.parametrize(
    "reply", ['{"value": NaN}', '{"value": Infinity}', '{"value": [1, -Infinity]}']
)
async def test_a_fallback_reply_without_a_finite_number_is_never_used(reply: str) -> None:
    model = ScriptedChatModel(replies=[reply, reply, '{"value": 1.5}'])
    s = step({"value": Ref(2, hint="value_from_step_2", raw="{value_from_step_2}")})
    fail = failed(await resolve(s, spec_of(value=Any), model), ErrorKind.RESOLUTION_FAILED)
    assert model.calls == 2 and fail.reply == reply  # refused as JSON: never used
