"""Smoke tests of the resolution-calls benchmark harness (counts only, no timings)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from planexec.examples.tools import demo_tools
from planexec.parsing import parse_plan
from planexec.plan import Plan
from planexec.resolver import follow_path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "resolution_calls.py"


def _load() -> ModuleType:
    name = "_bench_resolution_calls"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rc = _load()

TINY = """\
#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: The sites.

#Task2: List the assets at the first site.
#Tool2: assets
#Args2: {"site_name": "{step_1.sites[0].name}"}
#Dependency2: #S1
#ExpectedOutput2: The assets.

#Task3: List the sensors of Chiller 6.
#Tool3: sensors
#Args3: {"site_name": "MAIN", "asset_id": "{asset_id_for_Chiller_6_from_step_2}"}
#Dependency3: #S1, #S2
#ExpectedOutput3: The sensors.
"""


@pytest.fixture
def tiny() -> Plan:
    return parse_plan(TINY)


async def test_each_policy_is_charged_what_it_promises_on_a_tiny_plan(tiny: Plan) -> None:
    report = await rc.measure_plan(tiny, "tiny", "test", lambda: rc.corpus_tools(tiny))
    row = report.to_dict()
    assert (row["steps"], row["tool_steps"], row["placeholder_steps"]) == (3, 3, 2)
    # planexec: only the hinted reference needs the fallback; the path is followed.
    assert row["planexec_calls"] == 1
    assert row["fallback_steps"] == {"3": {"asset_id": "hinted"}}
    assert row["baseline_a_calls"] == 2
    assert row["baseline_b_calls"] == 3
    assert row["ratio_planexec_to_a"] == 0.5
    assert row["ratio_planexec_to_b"] == round(1 / 3, 3)
    assert row["statuses"] == {"SUCCEEDED": 3}
    assert row["consistent"] is True


def test_the_synthetic_output_holds_every_referenced_path(tiny: Plan) -> None:
    outputs = rc.synthetic_outputs(tiny)
    assert follow_path(outputs["sites"], ("sites", 0, "name")) == "syn:sites/sites/0/name"
    # No path enters the assets' output (the only reference to it is hinted).
    assert outputs["assets"] == {"result": "syn:assets"}


async def test_a_path_needing_another_shape_at_a_node_needs_the_fallback() -> None:
    plan = parse_plan(
        "#Task1: a\n#Tool1: a\n#Args1: {}\n#Dependency1: None\n\n"
        '#Task2: b\n#Tool2: b\n#Args2: {"x": "{step_1[0]}"}\n#Dependency2: #S1\n\n'
        '#Task3: c\n#Tool3: c\n#Args3: {"y": "{step_1.name}"}\n#Dependency3: #S1\n'
    )
    assert rc.synthetic_outputs(plan)["a"] == ["syn:a/0"]
    run = await rc.run_policy(plan, rc.corpus_tools(plan), "planexec")
    assert run.resolve_calls == 1
    assert run.llm_args == {3: {"y": "path"}}


async def test_flat_outputs_send_every_path_to_the_fallback(tiny: Plan) -> None:
    run = await rc.run_policy(tiny, rc.corpus_tools(tiny, shaped=False), "planexec")
    assert run.resolve_calls == 2
    assert run.llm_args == {2: {"site_name": "path"}, 3: {"asset_id": "hinted"}}


async def test_the_fake_model_fills_a_hinted_id_from_the_referenced_output(tiny: Plan) -> None:
    # Real demo tools reject an unknown asset id, so success means the right id was picked.
    # (prose hints off: the filter tier would read this hint without the model)
    run = await rc.run_policy(tiny, demo_tools(), "planexec", options={"prose_hints": False})
    assert run.resolve_calls == 1
    assert set(run.statuses.values()) == {"SUCCEEDED"}
    run = await rc.run_policy(tiny, demo_tools(), "planexec")
    assert run.resolve_calls == 0 and run.grounding == {"filtered": 1}
    assert set(run.statuses.values()) == {"SUCCEEDED"}


async def test_unreadable_args_cost_no_call_in_any_policy() -> None:
    plan = parse_plan(
        '#Task1: a\n#Tool1: a\n#Args1: {"x": "{step_9}", "y": \n#Dependency1: None\n'
    )
    for policy in rc.POLICIES:
        run = await rc.run_policy(plan, rc.corpus_tools(plan), policy)
        assert (run.resolve_calls, run.resolved_steps) == (0, 0)
        assert run.statuses == {1: "FAILED"}


WORDS = """\
#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None

#Task2: List the assets at the selected site.
#Tool2: assets
#Args2: {"site_name": "{step_1_selected_site}"}
#Dependency2: #S1

#Task3: List the sensors of Chiller 6.
#Tool3: sensors
#Args3: {"asset_id": "{asset_id_for_Chiller_6_from_step_2}"}
#Dependency3: #S2
"""


async def test_the_stages_compare_the_tiers_in_one_run_and_list_what_the_model_fills() -> None:
    plan = parse_plan(WORDS)
    report = await rc.measure_plan(plan, "words", "test",
                                   lambda: rc.corpus_tools(plan, hinted=True))
    calls = {stage: report.stages[stage]["calls"] for stage in rc.STAGES}
    # before: both hints go to the model; without prose: only the prose one; now: none
    assert calls == {"before": 2, "after_no_prose": 1, "after": 0}
    assert report.stages["after"]["grounding"] == {"filtered": 2}
    before = report.stages["before"]["grounding"]  # the fake model finds the asset id, and
    assert before == {"llm_grounded": 1, "llm_free": 1}  # writes a synthetic site name
    # what the default still sends to the model is listed with its references
    row = report.to_dict()
    assert row["fallback_refs"] == {} and row["planexec_calls"] == 0
    unshaped = await rc.run_policy(plan, rc.corpus_tools(plan), "planexec")
    assert unshaped.llm_refs == {2: {"site_name": "{step_1_selected_site}"},
                                 3: {"asset_id": "{asset_id_for_Chiller_6_from_step_2}"}}


def test_quick_writes_the_stages_of_the_demo_plans(tmp_path: Path) -> None:
    import json

    out = tmp_path / "rc.json"
    assert rc.main(["--quick", "--quiet", "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    stages = report["totals"]["demo"]["stages"]
    assert set(stages) == {"before", "after_no_prose", "after"}
    assert stages["after"]["calls"] <= stages["before"]["calls"]
    assert report["totals"]["corpus"]["plans"] == 0
