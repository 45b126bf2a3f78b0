"""The resolution-calls benchmark counts the calls spent on free-text placeholders apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from planexec.parsing import parse_plan

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

PLAN = """\
#Task1: List the sites.
#Tool1: sites()
#Dependency1: None

#Task2: List the assets at MAIN.
#Tool2: assets(site_name: "MAIN")
#Dependency2: #S1

#Task3: List the sensors of the chiller.
#Tool3: sensors(site_name: "MAIN", asset_id: <chiller_asset_id>)
#Dependency3: #S2

#Task4: Its history.
#Tool4: history(asset_id="{asset_id_for_Chiller_6_from_step_2}")
#Dependency4: #S2
"""


async def test_free_text_placeholder_calls_are_reported_separately() -> None:
    plan = parse_plan(PLAN)
    row = (await rc.measure_plan(plan, "free", "test", lambda: rc.corpus_tools(plan))).to_dict()
    assert row["fallback_steps"] == {"3": {"asset_id": "free_text"}, "4": {"asset_id": "hinted"}}
    assert row["planexec_calls"] == 2
    assert row["planexec_free_text_calls"] == 1
    totals = rc._totals([await rc.measure_plan(plan, "free", "test",
                                               lambda: rc.corpus_tools(plan))])
    assert totals["planexec_free_text_calls"] == 1
    assert totals["fallback_args"] == {"free_text": 1, "hinted": 1}
