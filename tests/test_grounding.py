"""Grounding of filled-in values, hints as constraints, and the filter tier (issue 19)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from planexec._models import ModelCall
from planexec.errors import ErrorKind
from planexec.events import ArgResolved, Event, EventBus, FallbackUsed
from planexec.executor import Executor
from planexec.filters import hint_literals, parse_hint
from planexec.grounding import Grounding, OutputIndex, normalize, shape
from planexec.parsing import parse_plan
from planexec.plan import Plan, Ref, Step
from planexec.recovery import DEFAULT_POLICY, Action
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs
from planexec.results import ResolutionMethod, StepResult, StepStatus
from planexec.store.codec import result_from_json, result_to_json
from planexec.testing import FunctionModel, fake_tool, messages_text
from planexec.tools import ToolCatalog, ToolSpec

M = ResolutionMethod

ASSETS = {
    "site_name": "MAIN",
    "assets": [
        {"id": "CWC04006", "name": "Chiller 6", "site": "MAIN"},
        {"id": "CWC04009", "name": "Chiller 9", "site": "MAIN"},
        {"id": "AHU01001", "name": "AHU 1", "site": "NORTH"},
    ],
}


def ok(sid: int, output: Any) -> StepResult:
    return StepResult(sid, "t", StepStatus.SUCCEEDED, output=output)


RESULTS = {1: ok(1, ASSETS), 2: ok(2, "The chiller to check is CWC04009, says the note.")}


def spec_of(**args: Any) -> ToolSpec:
    return ToolCatalog([fake_tool("target", args=args)]).get("target")


def step(args: dict[str, Any], task: str = "check the chiller") -> Step:
    return Step(id=5, task=task, tool="target", args=args)


def hinted(text: str, sid: int = 1) -> Ref:
    return Ref(sid, hint=text, raw="{" + text + "}")


def answering(*replies: dict[str, Any] | str) -> FunctionModel:
    """A fallback model giving ``replies`` in order to ``resolve`` calls (last repeats)."""
    queue = list(replies)

    def reply(call: ModelCall, messages: Sequence[BaseMessage]) -> str:
        assert call.purpose == "resolve" and call.step_id == 5
        got = queue.pop(0) if len(queue) > 1 else queue[0]
        return got if isinstance(got, str) else json.dumps(got)

    return FunctionModel(function=reply)


async def resolve(
    s: Step,
    spec: ToolSpec | None,
    model: Any = None,
    results: dict[int, StepResult] | None = None,
    bus: EventBus | None = None,
    **options: Any,
) -> ResolvedArgs | ResolutionFailure:
    resolver = ArgResolver(model, **options)
    return await resolver.resolve(s, spec, RESULTS if results is None else results, bus=bus)


# -- normalisation and shapes ------------------------------------------------------------


def test_normalisation_ignores_case_whitespace_and_number_formatting() -> None:
    assert normalize("  Chiller\t 6 ") == normalize("chiller 6")
    assert normalize(7) == normalize(7.0) == normalize("7") == normalize("7.00")
    assert normalize("1e3") == normalize(1000)
    assert normalize(True) != normalize(1) and normalize(True) != normalize("true")
    assert shape("CH-6") == shape("ch-10") == "a-9"
    assert shape("CWC04009") == "a9" and shape("Chiller 6") == "a 9"


# -- item 1: grounding of LLM-filled values --------------------------------------------------


async def test_a_grounded_llm_value_records_the_path_where_it_occurs() -> None:
    events: list[Event] = []
    out = await resolve(step({"asset_id": hinted("step_1_selected_asset_id")}),
                        spec_of(asset_id=str), answering({"asset_id": "cwc04009 "}),
                        bus=EventBus([events.append]))
    assert isinstance(out, ResolvedArgs), out
    assert out.methods == {"asset_id": M.LLM}
    g = out.grounding["asset_id"]
    assert g.status == "grounded" and g.paths == ("step_1.assets[1].id",)
    (resolved,) = [e for e in events if isinstance(e, ArgResolved)]
    assert resolved.grounding == g


async def test_each_element_of_a_list_value_is_grounded_on_its_own() -> None:
    out = await resolve(step({"ids": hinted("ids_of_the_chillers_in_step_1")}),
                        spec_of(ids=list[str]), answering({"ids": ["CWC04006", "CWC04009"]}))
    assert isinstance(out, ResolvedArgs), out
    assert out.grounding["ids"].paths == ("step_1.assets[0].id", "step_1.assets[1].id")


async def test_a_value_inside_a_text_output_is_grounded_in_text() -> None:
    s = step({"asset_id": hinted("the_asset_of_step_2", 2)})
    out = await resolve(s, spec_of(asset_id=str), answering({"asset_id": "CWC04009"}))
    assert isinstance(out, ResolvedArgs), out
    assert out.grounding["asset_id"].paths == ("step_2 (in text)",)


PLAUSIBLE = {"asset_id": "CWC04007"}
"""An id of the right shape that occurs nowhere: the fallback guessed."""


async def test_warn_keeps_an_ungrounded_id_with_an_event_and_a_flag() -> None:
    events: list[Event] = []
    out = await resolve(step({"asset_id": hinted("step_1_selected_asset_id")}),
                        spec_of(asset_id=str), answering(PLAUSIBLE),
                        bus=EventBus([events.append]), ungrounded="warn")
    assert isinstance(out, ResolvedArgs), out
    g = out.grounding["asset_id"]
    assert g.status == "ungrounded" and g.missing == ('"CWC04007"',) and not g.grounded
    codes = [e.code for e in events if isinstance(e, FallbackUsed)]
    assert "ARG_UNGROUNDED" in codes
    assert out.llm_calls == 1
    result = StepResult(5, "target", StepStatus.SUCCEEDED, grounding=out.grounding)
    assert result.ungrounded == ("asset_id",)


async def test_reresolve_asks_once_more_showing_the_values_that_occur() -> None:
    model = answering(PLAUSIBLE, {"asset_id": "CWC04006"})
    out = await resolve(step({"asset_id": hinted("step_1_selected_asset_id")}),
                        spec_of(asset_id=str), model, ungrounded="reresolve")
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"asset_id": "CWC04006"} and out.llm_calls == 2
    retry = messages_text(model.requests[1])
    assert "occurs nowhere in the outputs" in retry
    assert "'CWC04006' at step_1.assets[0].id" in retry and "CWC04009" in retry


async def test_reresolve_fails_ungrounded_when_the_second_answer_is_no_better() -> None:
    out = await resolve(step({"asset_id": hinted("step_1_selected_asset_id")}),
                        spec_of(asset_id=str), answering(PLAUSIBLE), ungrounded="reresolve")
    assert isinstance(out, ResolutionFailure)
    assert out.kind is ErrorKind.RESOLUTION_UNGROUNDED and out.llm_calls == 2
    assert out.args == ("asset_id",)
    assert "CWC04007" in out.message and "not grounded" in out.message


async def test_fail_fails_ungrounded_at_once() -> None:
    out = await resolve(step({"asset_id": hinted("step_1_selected_asset_id")}),
                        spec_of(asset_id=str), answering(PLAUSIBLE), ungrounded="fail")
    assert isinstance(out, ResolutionFailure)
    assert out.kind is ErrorKind.RESOLUTION_UNGROUNDED and out.llm_calls == 1
    assert out.to_error().resolvable_args == ("asset_id",)


async def test_the_default_policy_is_reresolve() -> None:
    assert ArgResolver().ungrounded == "reresolve"
    out = await resolve(step({"asset_id": hinted("step_1_selected_asset_id")}),
                        spec_of(asset_id=str), answering(PLAUSIBLE))
    assert isinstance(out, ResolutionFailure)
    assert out.kind is ErrorKind.RESOLUTION_UNGROUNDED


@pytest.mark.parametrize("policy", ["warn", "reresolve", "fail"])
async def test_free_text_is_never_held_to_grounding(policy: str) -> None:
    summary = "Chiller 9 needs its condenser tubes cleaned this week"
    out = await resolve(step({"note": hinted("a_note_about_step_1")}), spec_of(note=str),
                        answering({"note": summary}), ungrounded=policy)
    assert isinstance(out, ResolvedArgs), out
    assert out.grounding["note"].status == "free" and out.grounding["note"].free


async def test_a_value_without_candidates_of_its_kind_is_free() -> None:
    out = await resolve(step({"when": hinted("date_from_step_1")}), spec_of(when=str),
                        answering({"when": "2025-06-01"}), ungrounded="fail")
    assert isinstance(out, ResolvedArgs), out
    assert out.grounding["when"].status == "free"


async def test_the_schema_grounds_values_too() -> None:
    from typing import Literal

    out = await resolve(step({"unit": hinted("unit_of_step_1")}),
                        spec_of(unit=Literal["C", "F"]), answering({"unit": "F"}),
                        ungrounded="fail")
    assert isinstance(out, ResolvedArgs), out
    assert out.grounding["unit"].paths == ("schema",)


def test_ungrounded_has_a_default_recovery_action() -> None:
    assert DEFAULT_POLICY[ErrorKind.RESOLUTION_UNGROUNDED] is Action.RERESOLVE


def test_grounding_is_stored_and_old_records_without_it_still_load() -> None:
    g = Grounding("ungrounded", ("step_1.assets[0].id",), ('"X"',), (), None)
    result = StepResult(5, "target", StepStatus.SUCCEEDED, grounding={"asset_id": g},
                        resolution={"asset_id": M.LLM})
    data = json.loads(json.dumps(result_to_json(result)))
    assert result_from_json(data).grounding == {"asset_id": g}
    del data["grounding"]
    assert result_from_json(data).grounding == {}


async def test_the_executor_records_grounding_on_the_step_result() -> None:
    plan = parse_plan(
        '#Task1: assets\n#Tool1: assets\n#Args1: {}\n#Dependency1: None\n\n'
        '#Task2: sensors\n#Tool2: sensors\n#Args2: {"asset_id": "{step_1_selected_asset_id}"}\n'
        "#Dependency2: #S1\n"
    )
    tools = [fake_tool("assets", ASSETS), fake_tool("sensors", {"ok": 1}, args={"asset_id": str})]

    def reply(call: ModelCall, messages: Sequence[BaseMessage]) -> str:
        return json.dumps({"asset_id": "CWC04006"})

    executor = Executor(ToolCatalog(tools), ArgResolver(FunctionModel(function=reply)))
    results = {r.step_id: r for r in await executor.run(plan)}
    assert results[2].ok and results[2].grounding["asset_id"].paths == ("step_1.assets[0].id",)
    assert results[2].to_dict()["grounding"]["asset_id"]["status"] == "grounded"


# -- item 2: hints are constraints ---------------------------------------------------------


def test_hint_literals_are_read_from_filters_and_prose() -> None:
    lits = hint_literals(hinted("step_1.find(name='Chiller 6').id"))
    assert [(x.key, x.value, x.strict) for x in lits] == [("name", "Chiller 6", True)]
    lits = hint_literals(hinted("asset_id_for_Chiller_6_from_step_1"))
    assert [(x.key, x.value, x.strict) for x in lits] == [(None, "Chiller 6", False)]
    lits = hint_literals(hinted("id of the asset named Chiller 9 from step 1"))
    assert [(x.key, x.value) for x in lits] == [(None, "Chiller 9")]
    assert hint_literals(hinted("step_1_selected_site")) == ()


@pytest.mark.parametrize(
    "hint",
    [
        "asset_id_for_Chiller_6_from_step_1",
        "id of the asset named Chiller 6 from step 1",
        "step_1.assets.find(name='Chiller 6', maybe).id",  # not readable as a whole
    ],
)
async def test_an_answer_contradicting_the_hint_is_rejected_with_the_reason(hint: str) -> None:
    model = answering({"asset_id": "CWC04009"}, {"asset_id": "CWC04006"})
    # prose_hints=False: the filter tier would read the prose form without any model;
    # its literal constrains the fallback all the same
    out = await resolve(step({"asset_id": hinted(hint)}), spec_of(asset_id=str), model,
                        ungrounded="warn", prose_hints=False)
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"asset_id": "CWC04006"} and out.llm_calls == 2
    retry = messages_text(model.requests[1])
    assert "'asset_id' = 'CWC04009' contradicts the hint" in retry
    assert "Chiller 6" in retry and "CWC04006" in retry


@pytest.mark.parametrize("policy", ["warn", "reresolve", "fail"])
async def test_a_contradicted_hint_fails_whatever_the_policy(policy: str) -> None:
    out = await resolve(step({"asset_id": hinted("asset_id_for_Chiller_6_from_step_1")}),
                        spec_of(asset_id=str), answering({"asset_id": "CWC04009"}),
                        ungrounded=policy, prose_hints=False)
    assert isinstance(out, ResolutionFailure)
    assert out.kind is ErrorKind.RESOLUTION_FAILED and out.llm_calls == 2
    assert "contradicts the hint {asset_id_for_Chiller_6_from_step_1}" in out.message


async def test_a_strict_literal_no_item_has_rejects_every_answer() -> None:
    s = step({"asset_id": hinted("step_1.assets.find(name='Chiller 7', x).id")})
    out = await resolve(s, spec_of(asset_id=str), answering({"asset_id": "CWC04006"}),
                        ungrounded="warn")
    assert isinstance(out, ResolutionFailure) and out.kind is ErrorKind.RESOLUTION_FAILED
    assert "no item of the outputs shown has it" in out.message


async def test_a_prose_literal_the_outputs_do_not_hold_is_not_enforced() -> None:
    out = await resolve(step({"asset_id": hinted("asset_id_for_Boiler_2_from_step_1")}),
                        spec_of(asset_id=str), answering({"asset_id": "CWC04006"}),
                        ungrounded="warn")
    assert isinstance(out, ResolvedArgs), out


# -- item 3: the filter tier ----------------------------------------------------------------


class Item(BaseModel):
    id: str
    name: str
    site: str


MODELS = {"assets": [Item(**a) for a in ASSETS["assets"]]}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("hint", "value", "where"),
    [
        ("step_1.find(name='Chiller 9').id", "CWC04009", "step_1.assets[1].id"),
        ('step_1.assets.find(name = "chiller 9").id', "CWC04009", "step_1.assets[1].id"),
        ("step_1.assets[name=Chiller 9].id", "CWC04009", "step_1.assets[1].id"),
        ("step_1.assets[name='Chiller 9'].id", "CWC04009", "step_1.assets[1].id"),
        ("step_1.assets[?site=='NORTH'].id", "AHU01001", "step_1.assets[2].id"),
        ("step_1.assets where name = 'AHU 1'", {"id": "AHU01001", "name": "AHU 1",
                                                "site": "NORTH"}, "step_1.assets[2]"),
        ("step_1.assets where name = AHU 1", {"id": "AHU01001", "name": "AHU 1",
                                              "site": "NORTH"}, "step_1.assets[2]"),
        ("step_1.assets.first().id", "CWC04006", "step_1.assets[0].id"),
        ("step_1.assets.last().name", "AHU 1", "step_1.assets[2].name"),
        ("step_1.assets.len()", 3, "len(step_1.assets)"),
        ("step_1.first().id", "CWC04006", "step_1.assets[0].id"),
    ],
)
async def test_each_filter_shape_resolves_without_a_model(hint: str, value: Any, where: str
                                                          ) -> None:
    events: list[Event] = []
    out = await resolve(step({"x": hinted(hint)}), None, None, bus=EventBus([events.append]))
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"x": value} and out.methods == {"x": M.FILTERED}
    assert out.llm_calls == 0 and out.grounding["x"].paths == (where,)
    assert [e.code for e in events if isinstance(e, FallbackUsed)] == ["ARG_FILTERED"]
    # the same on pydantic models
    models = {1: ok(1, MODELS)}
    out = await resolve(step({"x": hinted(hint)}), None, None, results=models)
    assert isinstance(out, ResolvedArgs), out
    got = out.args["x"]
    assert (got.model_dump() if isinstance(got, BaseModel) else got) == value


@pytest.mark.parametrize(
    ("path", "value"),
    [(("assets", "first", "id"), "CWC04006"), (("assets", "last", "site"), "NORTH"),
     (("assets", "len"), 3)],
)
async def test_first_last_len_in_a_plain_path_are_filters_on_a_list(
    path: tuple[str, ...], value: Any
) -> None:
    out = await resolve(step({"x": Ref(1, path)}), None)
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"x": value} and out.methods == {"x": M.FILTERED}


@pytest.mark.parametrize(
    ("hint", "why"),
    [
        ("step_1.assets[site=MAIN].id", "2 items of .assets match (.assets[0], .assets[1])"),
        ("step_1.assets.find(name='Chiller 7').id", "no item of .assets matches"),
        ("step_1.site_name.find(a=1)", ".site_name holds no list of items"),
    ],
)
async def test_no_match_or_several_fall_back_to_the_llm_with_the_reason(hint: str, why: str
                                                                        ) -> None:
    out = await resolve(step({"x": hinted(hint)}), spec_of(x=str))
    assert isinstance(out, ResolutionFailure) and out.kind is ErrorKind.RESOLUTION_FAILED
    assert "the filter grammar read it, but" in out.message and why in out.message


def test_hints_outside_the_grammar_are_not_read() -> None:
    for hint in ("Name from #E1", "step_1.assets[0].id", "step_1_selected", "step_1_the",
                 "step_2.find(name='x').id", "step_2_site"):  # a plain path is no filter;
        assert parse_hint(hinted(hint)) is None                # fillers only; wrong step
    assert parse_hint(hinted("asset_id_for_Chiller_6_from_step_1")) is None  # prose=False
    assert parse_hint(hinted("asset_id_for_Chiller_6_from_step_1"), prose=True) is not None


@pytest.mark.parametrize(
    ("hint", "output", "value", "where"),
    [
        ("step_1_selected_site", {"site": "MAIN", "assets": []}, "MAIN", "step_1.site"),
        ("step_1_site_name", ASSETS, "MAIN", "step_1.site_name"),
        ("step_1_selected_asset_id", {"asset": {"id": "A1", "name": "x"}}, "A1",
         "step_1.asset.id"),
        ("step_1_selected_asset_id", {"assets": [{"id": "A1"}]}, "A1", "step_1.assets[0].id"),
        ("step_1_asset_id", {"asset_id": "A1", "site": {"id": "S"}}, "A1", "step_1.asset_id"),
        ("step_1_sensor_names", {"sensor_names": ["a", "b"]}, ["a", "b"],
         "step_1.sensor_names"),
    ],
)
async def test_the_word_form_takes_the_one_field_its_words_name(
    hint: str, output: Any, value: Any, where: str
) -> None:
    out = await resolve(step({"x": hinted(hint)}), None, results={1: ok(1, output)})
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"x": value} and out.methods == {"x": M.FILTERED}
    assert out.llm_calls == 0 and out.grounding["x"].paths == (where,)


@pytest.mark.parametrize(
    ("hint", "output", "why"),
    [
        # several keys name it: which asset was "selected" is not clear
        ("step_1_selected_asset_id", ASSETS, "3 keys of the output name it"),
        # a bare ``id`` is not the asset's id: ``asset`` is on no key on its way
        ("step_1_selected_asset_id", {"id": "S1"}, "no key of the output names it"),
        ("step_1_selected_asset_name", {"site": {"name": "MAIN"}}, "no key of the output"),
        ("step_1_sensor_names", {"sensors": [{"name": "a"}, {"name": "b"}]}, "no key"),
    ],
)
async def test_the_word_form_never_guesses(hint: str, output: Any, why: str) -> None:
    out = await resolve(step({"x": hinted(hint)}), spec_of(x=str), results={1: ok(1, output)})
    assert isinstance(out, ResolutionFailure) and out.kind is ErrorKind.RESOLUTION_FAILED
    assert "the filter grammar read it, but" in out.message and why in out.message


async def test_field_from_step_is_the_prose_word_form() -> None:
    s = step({"x": hinted("Name from #E1")})
    results = {1: ok(1, {"name": "Jannik Sinner", "rank": 4})}
    out = await resolve(s, None, results=results, prose_hints=True)
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"x": "Jannik Sinner"} and out.methods == {"x": M.FILTERED}
    assert isinstance(await resolve(s, spec_of(x=str), results=results, prose_hints=False),
                      ResolutionFailure)


async def test_the_prose_form_is_read_by_default_and_can_be_turned_off() -> None:
    s = step({"asset_id": hinted("asset_id_for_Chiller_6_from_step_1")})
    out = await resolve(s, spec_of(asset_id=str))
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"asset_id": "CWC04006"} and out.methods == {"asset_id": M.FILTERED}
    assert out.grounding["asset_id"].paths == ("step_1.assets[0].id",)
    off = await resolve(s, spec_of(asset_id=str), prose_hints=False)
    assert isinstance(off, ResolutionFailure) and "no model is configured" in off.message


async def test_the_filter_tier_can_be_turned_off() -> None:
    out = await resolve(step({"x": hinted("step_1.find(name='Chiller 9').id")}), spec_of(x=str),
                        filters=False)
    assert isinstance(out, ResolutionFailure)
    assert "hinted reference {step_1.find(name='Chiller 9').id}" in out.message
    assert "no model is configured" in out.message


FIELDS = ("id", "name", "site", "kind")
VALUES = st.one_of(st.integers(-50, 50), st.text("abcXYZ 09_-", min_size=1, max_size=6))
RECORDS = st.lists(st.fixed_dictionaries({}, optional={f: VALUES for f in FIELDS}),
                   min_size=1, max_size=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.sampled_from(FIELDS), st.data(),
       st.sampled_from(["find({k}='{v}')", "[{k}='{v}']", "[?{k}=='{v}']", " where {k} = '{v}'"]))
def test_a_filter_picks_exactly_the_one_item_holding_the_value(
    records: list[dict[str, Any]], key: str, data: st.DataObject, form: str
) -> None:
    holding = [r for r in records if key in r]
    value = data.draw(st.sampled_from([r[key] for r in holding])) if holding else None
    text = str(value)
    if value is None or "'" in text or text != text.strip() or "  " in text:
        return  # the literal must be writable in the hint as it is
    # oracle: the items whose field equals the value, compared as the grammar compares
    oracle = [i for i, r in enumerate(records) if key in r and normalize(r[key]) ==
              normalize(text)]
    hint = "step_1.rows" + ("." if form.startswith("find") else "") + form.format(k=key, v=text)
    plan_step = Step(id=5, tool="target", args={"x": hinted(hint)})
    results = {1: ok(1, {"rows": records})}
    import asyncio

    out = asyncio.run(ArgResolver().resolve(plan_step, None, results))
    if len(oracle) == 1:
        assert isinstance(out, ResolvedArgs), (hint, out)
        assert out.args["x"] == records[oracle[0]]
        assert out.grounding["x"].paths == (f"step_1.rows[{oracle[0]}]",)
    else:
        assert isinstance(out, ResolutionFailure), (hint, out)
        assert "the filter grammar read it" in out.message


def test_the_index_finds_candidates_by_shape_and_by_key() -> None:
    index = OutputIndex({1: ASSETS})
    cands = [v for v, _ in index.candidates("asset_id", "CWC09999")]
    assert cands[:3] == ["CWC04006", "CWC04009", "AHU01001"]
    assert index.held("asset_id", "CWC09999")
    assert not index.held("note", "a long sentence written by the model for people")
    assert not index.held("flag", True)


def test_plan_parse_gives_hinted_refs_the_grammar_reads() -> None:
    plan: Plan = parse_plan(
        '#Task1: a\n#Tool1: assets\n#Args1: {}\n#Dependency1: None\n\n'
        '#Task2: b\n#Tool2: history\n#Args2: {"asset_id": "{step_1.find(name=\'CWC04009\').id}"}'
        "\n#Dependency2: #S1\n"
    )
    (ref,) = plan.step(2).refs
    query = parse_hint(ref)
    assert query is not None and query.filters == "find(name='CWC04009')"


TREES = st.recursive(
    VALUES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4),
    ),
    max_leaves=12,
)


def _key_paths(node: Any, key: str, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Oracle: every path ending in ``key``, by a plain walk of dicts and lists."""
    found: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                found.append((*path, k))
            found += _key_paths(v, key, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _key_paths(v, key, (*path, i))
    return found


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TREES, st.sampled_from(FIELDS), st.booleans())
def test_the_word_form_picks_the_one_key_or_falls_back(tree: Any, key: str, filler: bool
                                                       ) -> None:
    import asyncio

    hint = f"step_1_{'selected_' if filler else ''}{key}"
    out = asyncio.run(ArgResolver().resolve(Step(id=5, tool="target", args={"x": hinted(hint)}),
                                            None, {1: ok(1, tree)}))
    paths = _key_paths(tree, key)
    if len(paths) == 1:
        assert isinstance(out, ResolvedArgs), (hint, tree, out)
        node = tree
        for elem in paths[0]:
            node = node[elem]
        assert out.args["x"] == node and out.methods["x"] is M.FILTERED
    else:
        assert isinstance(out, ResolutionFailure), (hint, tree, out)
        assert "the filter grammar read it" in out.message


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RECORDS, st.sampled_from(["first", "last", "len"]), st.booleans())
def test_first_last_len_pick_by_position(records: list[dict[str, Any]], which: str,
                                         call: bool) -> None:
    import asyncio

    hint = f"step_1.rows.{which}{'()' if call else ''}"
    out = asyncio.run(ArgResolver().resolve(Step(id=5, tool="target", args={"x": hinted(hint)}),
                                            None, {1: ok(1, {"rows": records})}))
    assert isinstance(out, ResolvedArgs), (hint, out)
    expected = {"first": records[0], "last": records[-1], "len": len(records)}[which]
    assert out.args["x"] == expected and out.methods["x"] is M.FILTERED


PROSE_VALUES = st.one_of(st.integers(-50, 50), st.text("abcXYZ09-", min_size=1, max_size=6))
PROSE_RECORDS = st.lists(st.fixed_dictionaries({}, optional={f: PROSE_VALUES for f in FIELDS}),
                         min_size=1, max_size=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROSE_RECORDS, st.sampled_from(FIELDS), st.sampled_from(FIELDS), st.data())
def test_the_prose_form_picks_the_one_record_holding_the_value(
    records: list[dict[str, Any]], key: str, wanted: str, data: st.DataObject
) -> None:
    import asyncio

    holding = [r for r in records if key in r]
    if not holding:
        return
    text = str(data.draw(st.sampled_from([r[key] for r in holding])))
    # oracle: the records with any field equal to the value, compared as documented
    oracle = [r for r in records if any(normalize(v) == normalize(text) for v in r.values())]
    hint = f"{wanted}_for_{text}_from_step_1"
    out = asyncio.run(ArgResolver().resolve(Step(id=5, tool="target", args={"x": hinted(hint)}),
                                            None, {1: ok(1, {"rows": records})}))
    if len(oracle) == 1 and wanted in oracle[0]:
        assert isinstance(out, ResolvedArgs), (hint, out)
        assert out.args["x"] == oracle[0][wanted] and out.methods["x"] is M.FILTERED
    else:
        assert isinstance(out, ResolutionFailure), (hint, records, out)


# -- issue 25, defect 8: a message planexec wrote itself is never a source -------------------


@pytest.mark.parametrize("policy", ["reresolve", "fail"])
async def test_the_feedback_quoting_an_invented_value_does_not_ground_it(policy: str) -> None:
    # two rejected replies invent CWC04007; the failure (which quotes it) comes back as
    # feedback; the model insists: the value is still found nowhere a source is
    s = step({"asset_id": hinted("step_1_selected_asset_id")})
    first = await resolve(s, spec_of(asset_id=str), answering(PLAUSIBLE), ungrounded="reresolve")
    assert isinstance(first, ResolutionFailure) and "CWC04007" in first.message
    resolver = ArgResolver(answering(PLAUSIBLE), ungrounded=policy)
    again = await resolver.resolve(s, spec_of(asset_id=str), RESULTS,
                                   feedback=first.to_error())
    assert isinstance(again, ResolutionFailure), again
    assert again.kind is ErrorKind.RESOLUTION_UNGROUNDED
    assert "feedback" not in (again.grounding.get("asset_id") or Grounding("free")).paths


async def test_the_plan_literals_of_the_step_ground_a_value() -> None:
    # the step's own literal (written by the planner, not by planexec) is a source
    s = step({"asset_id": hinted("step_1_selected_asset_id"), "also": "CWC04007"})
    out = await resolve(s, spec_of(asset_id=str, also=str), answering(PLAUSIBLE),
                        ungrounded="fail")
    assert isinstance(out, ResolvedArgs), out
    assert out.grounding["asset_id"].paths == ("plan",)


@pytest.mark.parametrize("policy", ["reresolve", "fail"])
async def test_an_invented_value_never_reaches_the_tool_through_re_resolution(
    policy: str,
) -> None:
    from planexec.agent import PlanExecuteAgent

    plan = (
        '#Task1: assets\n#Tool1: assets\n#Args1: {}\n#Dependency1: None\n\n'
        '#Task2: sensors\n#Tool2: sensors\n'
        '#Args2: {"asset_id": "{step_1_selected_asset_id}"}\n#Dependency2: #S1\n'
    )
    called: list[Any] = []

    def sensors(asset_id: str) -> dict[str, Any]:
        called.append(asset_id)
        return {"ok": 1}

    def reply(call: ModelCall, messages: Sequence[BaseMessage]) -> str:
        if call.purpose == "plan":
            return plan
        if call.purpose == "resolve":
            return json.dumps(PLAUSIBLE)
        return "ANSWER"

    from langchain_core.tools import StructuredTool

    tools = [fake_tool("assets", ASSETS),
             StructuredTool.from_function(sensors, name="sensors", description="sensors")]
    from planexec.config import AgentConfig

    config = AgentConfig.model_validate(
        {"resolver": {"ungrounded": policy}, "recovery": {"max_replans": 0}}
    )
    agent = PlanExecuteAgent(FunctionModel(function=reply), tools, config=config)
    await agent.run("which sensors does the chiller have?")
    assert "CWC04007" not in called
