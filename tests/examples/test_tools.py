from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from pydantic import ValidationError

from planexec.examples import _generate, example_path
from planexec.examples.data import DemoLookupError, dataset, load_json, parse_time
from planexec.examples.tools import SERVERS, TOOLS, demo_tools, tools_for_server

EXPECTED_TOOLS = {
    "sites": "iot",
    "assets": "iot",
    "asset": "iot",
    "sensors": "iot",
    "history": "iot",
    "detect_anomalies": "iot",
    "current_date_time": "iot",
    "failure_modes": "fmsr",
    "failure_mode_sensors": "fmsr",
    "create_work_order": "wo",
    "list_work_orders": "wo",
}
JSON_TEXT_TOOLS = {"sensors", "list_work_orders"}
WEEK = {"start": "2025-06-01", "final": "2025-06-07"}


def by_name(tools: list[BaseTool] | None = None) -> dict[str, BaseTool]:
    return {t.name: t for t in (tools if tools is not None else demo_tools())}


def call(tool: BaseTool, **args: Any) -> Any:
    out = tool.invoke(args)
    return json.loads(out) if tool.name in JSON_TEXT_TOOLS else out


@pytest.fixture
def tools() -> dict[str, BaseTool]:
    return by_name()


# -- catalog shape -------------------------------------------------------------------


def test_the_demo_has_every_expected_tool_each_with_a_description() -> None:
    tools = by_name(TOOLS)
    assert set(tools) == set(EXPECTED_TOOLS)
    for tool in tools.values():
        assert tool.description and len(tool.description) > 30, tool.name
        assert tool.args_schema is not None


def test_every_tool_names_its_server_and_safety_hints() -> None:
    for tool in TOOLS:
        hints = tool.metadata["planexec"]  # type: ignore[index]
        assert hints["server"] == EXPECTED_TOOLS[tool.name]
        if tool.name == "create_work_order":
            assert hints["destructive"] is True
            assert hints["read_only"] is False
            assert hints["idempotent"] is False
        else:
            assert hints == {
                "server": hints["server"],
                "read_only": True,
                "idempotent": True,
                "destructive": False,
            }


def test_tools_for_server_groups_the_tools_by_server() -> None:
    grouped = {s: [t.name for t in tools_for_server(s)] for s in SERVERS}
    assert sorted(n for names in grouped.values() for n in names) == sorted(EXPECTED_TOOLS)
    assert grouped["fmsr"] == ["failure_modes", "failure_mode_sensors"]
    assert grouped["wo"] == ["create_work_order", "list_work_orders"]


def test_tools_for_an_unknown_server_is_a_key_error_listing_the_servers() -> None:
    with pytest.raises(KeyError, match="iot, fmsr, wo"):
        tools_for_server("tsdb")


def test_work_order_tools_of_one_server_share_their_book() -> None:
    wo = by_name(tools_for_server("wo"))
    call(
        wo["create_work_order"],
        site_name="MAIN",
        asset_id="CWC04009",
        description="check",
        priority="low",
    )
    listed = call(wo["list_work_orders"], site_name="MAIN", asset_id="CWC04009")
    assert [o["id"] for o in listed["work_orders"]] == ["WO-1001"]


# -- outputs -------------------------------------------------------------------------


def test_sites_lists_both_sites(tools: dict[str, BaseTool]) -> None:
    out = call(tools["sites"])
    assert [s["name"] for s in out["sites"]] == ["MAIN", "SITE_B"]


def test_assets_lists_ids_names_and_types_with_chiller_6_first(
    tools: dict[str, BaseTool],
) -> None:
    out = call(tools["assets"], site_name="MAIN")
    assert out["site_name"] == "MAIN"
    assert out["count"] == len(out["assets"]) == 4
    assert out["assets"][0] == {
        "id": "CWC04006",
        "name": "Chiller 6",
        "type": "chiller",
        "status": "running",
    }
    site_b = call(tools["assets"], site_name="site_b")
    assert {a["type"] for a in site_b["assets"]} == {"chiller", "ahu", "wind_turbine"}


def test_asset_returns_the_details_of_one_asset(tools: dict[str, BaseTool]) -> None:
    out = call(tools["asset"], site_name="MAIN", asset_id="cwc04006")
    assert out["id"] == "CWC04006"
    assert out["name"] == "Chiller 6"
    assert {"manufacturer", "model", "installed", "location", "status"} <= set(out)


def test_sensors_returns_json_text_with_names_units_and_tags(
    tools: dict[str, BaseTool],
) -> None:
    raw = tools["sensors"].invoke({"site_name": "MAIN", "asset_id": "CWC04006"})
    assert isinstance(raw, str)
    out = json.loads(raw)
    assert out["asset_name"] == "Chiller 6"
    assert out["count"] == 6
    assert out["sensors"][0] == {
        "name": "Supply Temperature",
        "unit": "degF",
        "description": "Chilled water supply temperature",
        "tag": "CWC04006.SupplyTemperature",
    }


def test_history_of_one_sensor_on_one_day_has_24_hourly_readings(
    tools: dict[str, BaseTool],
) -> None:
    out = call(
        tools["history"],
        site_name="MAIN",
        asset_id="CWC04006",
        start="2025-06-05",
        final="2025-06-05",
        sensor="Purge Runtime",
    )
    assert out["count"] == 24
    assert out["sensors"] == ["Purge Runtime"]
    assert out["start"] == "2025-06-05T00:00:00"
    assert out["final"] == "2025-06-05T23:59:59"
    assert out["readings"][0] == {
        "timestamp": "2025-06-05T00:00:00",
        "sensor": "Purge Runtime",
        "value": 2.69,
    }
    summary = out["summary"]["Purge Runtime"]
    assert summary["unit"] == "min"
    assert summary["max"] > 30 > summary["min"]


def test_history_without_a_sensor_returns_every_sensor(tools: dict[str, BaseTool]) -> None:
    out = call(
        tools["history"],
        site_name="SITE_B",
        asset_id="WTG00001",
        start="2025-06-01T00:00:00",
        final="2025-06-01T02:00:00",
    )
    assert out["count"] == 3 * 5
    assert set(out["summary"]) == set(out["sensors"])


def test_history_outside_the_stored_week_is_empty_with_a_note(
    tools: dict[str, BaseTool],
) -> None:
    out = call(
        tools["history"],
        site_name="MAIN",
        asset_id="CWC04006",
        start="2020-06-01",
        final="2020-06-30",
    )
    assert out["count"] == 0
    assert "2025-06-01T00:00:00" in out["note"]


def test_history_accepts_utc_offsets(tools: dict[str, BaseTool]) -> None:
    out = call(
        tools["history"],
        site_name="MAIN",
        asset_id="CWC04006",
        start="2025-06-05T08:00:00+02:00",
        final="2025-06-05T06:00:00Z",
        sensor="Purge Runtime",
    )
    assert [r["timestamp"] for r in out["readings"]] == ["2025-06-05T06:00:00"]


def test_detect_anomalies_finds_the_excess_purge_episode_of_chiller_6(
    tools: dict[str, BaseTool],
) -> None:
    out = call(
        tools["detect_anomalies"],
        site_name="MAIN",
        asset_id="CWC04006",
        sensor="Purge Runtime",
        **WEEK,
    )
    assert out["points"] == 168
    assert out["count"] == 7
    assert out["anomalies"][0]["timestamp"] == "2025-06-05T06:00:00"
    assert all(a["z"] >= 3 for a in out["anomalies"])
    pressure = call(
        tools["detect_anomalies"],
        site_name="MAIN",
        asset_id="CWC04006",
        sensor="Condenser Pressure",
        **WEEK,
    )
    assert pressure["count"] == 5


def test_detect_anomalies_finds_nothing_on_a_healthy_asset(
    tools: dict[str, BaseTool],
) -> None:
    out = call(
        tools["detect_anomalies"],
        site_name="SITE_B",
        asset_id="WTG00002",
        sensor="Vibration",
        **WEEK,
    )
    assert out["count"] == 0
    assert out["anomalies"] == []


def test_current_date_time_is_the_fixed_demo_clock(tools: dict[str, BaseTool]) -> None:
    out = call(tools["current_date_time"])
    assert out["now"] == "2025-06-08T09:00:00Z"
    assert out["weekday"] == "Sunday"


def test_failure_modes_accepts_common_spellings_of_the_asset_type(
    tools: dict[str, BaseTool],
) -> None:
    for spelling in ("chiller", "Chiller", "chillers"):
        out = call(tools["failure_modes"], asset_type=spelling)
        assert out["asset_type"] == "chiller"
        assert out["failure_modes"][0] == "excess purge"
    assert call(tools["failure_modes"], asset_type="Wind Turbine")["asset_type"] == ("wind_turbine")
    assert call(tools["failure_modes"], asset_type="AHU")["asset_type"] == "ahu"


def test_failure_mode_sensors_maps_excess_purge_to_sensors_the_chillers_have(
    tools: dict[str, BaseTool],
) -> None:
    out = call(tools["failure_mode_sensors"], asset_type="chiller", failure_mode="Excess Purge")
    assert out == {
        "asset_type": "chiller",
        "fm_to_sensors": {"excess purge": ["Purge Runtime", "Condenser Pressure"]},
    }
    every = call(tools["failure_mode_sensors"], asset_type="chiller")
    assert len(every["fm_to_sensors"]) == 4
    sensor_names = {
        s["name"] for s in call(tools["sensors"], site_name="MAIN", asset_id="CWC04009")["sensors"]
    }
    for sensors in every["fm_to_sensors"].values():
        assert set(sensors) <= sensor_names


def test_every_failure_mode_sensor_exists_on_every_asset_of_that_type() -> None:
    ds = dataset()
    for asset in ds.assets:
        names = {s["name"] for s in ds.sensors_of(asset["site_name"], asset["id"])}
        for record in ds.failure_modes[asset["type"]].values():
            assert set(record["sensors"]) <= names


def test_create_work_order_then_list_shows_it(tools: dict[str, BaseTool]) -> None:
    created = call(
        tools["create_work_order"],
        site_name="MAIN",
        asset_id="CWC04006",
        description="Inspect purge unit",
        priority="high",
    )
    assert created["created"] is True
    order = created["work_order"]
    assert order["id"] == "WO-1001"
    assert order["asset_name"] == "Chiller 6"
    assert order["status"] == "open"
    listed = call(tools["list_work_orders"], site_name="MAIN", asset_id="CWC04006")
    assert listed["asset_id"] == "CWC04006"
    assert [o["id"] for o in listed["work_orders"]] == ["WO-0990", "WO-1001"]
    second = call(
        tools["create_work_order"],
        site_name="MAIN",
        asset_id="AHU01001",
        description="x",
        priority="low",
    )
    assert second["work_order"]["id"] == "WO-1002"


def test_each_demo_tools_call_has_its_own_work_order_book() -> None:
    first, second = by_name(), by_name()
    call(
        first["create_work_order"],
        site_name="MAIN",
        asset_id="CWC04006",
        description="x",
        priority="low",
    )
    assert call(second["list_work_orders"], site_name="MAIN")["count"] == 2
    assert call(first["list_work_orders"], site_name="MAIN")["count"] == 3


def test_create_work_order_rejects_an_unknown_priority(tools: dict[str, BaseTool]) -> None:
    with pytest.raises(ValidationError):
        tools["create_work_order"].invoke(
            {
                "site_name": "MAIN",
                "asset_id": "CWC04006",
                "description": "x",
                "priority": "whenever",
            }
        )


# -- error payloads ------------------------------------------------------------------

ERROR_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("assets", {"site_name": "NORTH"}, "unknown site 'NORTH'; known: MAIN, SITE_B"),
    (
        "asset",
        {"site_name": "MAIN", "asset_id": "Chiller 6"},
        "unknown asset 'Chiller 6' at site 'MAIN'; known: CWC04006 (Chiller 6), "
        "CWC04009 (Chiller 9), AHU01001 (AHU 1), AHU01002 (AHU 2)",
    ),
    (
        "sensors",
        {"site_name": "MAIN", "asset_id": "WTG00001"},
        "unknown asset 'WTG00001' at site 'MAIN'",
    ),
    (
        "history",
        {"site_name": "MAIN", "asset_id": "CWC04006", "sensor": "Humidity", **WEEK},
        "unknown sensor 'Humidity' on asset 'CWC04006' (Chiller 6); known: Supply Temperature",
    ),
    (
        "history",
        {"site_name": "MAIN", "asset_id": "CWC04006", "start": "June 1", "final": "2025-06-07"},
        "cannot read 'June 1' as a date",
    ),
    (
        "history",
        {"site_name": "MAIN", "asset_id": "CWC04006", "start": "2025-06-07", "final": "2025-06-01"},
        "final '2025-06-01' is before start '2025-06-07'",
    ),
    (
        "detect_anomalies",
        {"site_name": "MAIN", "asset_id": "CWC04006", "sensor": "{step_2}", **WEEK},
        "unknown sensor '{step_2}'",
    ),
    (
        "failure_modes",
        {"asset_type": "boiler"},
        "unknown asset type 'boiler'; known: chiller, ahu, wind_turbine",
    ),
    (
        "failure_mode_sensors",
        {"asset_type": "chiller", "failure_mode": "flooding"},
        "unknown failure mode 'flooding' for asset type 'chiller'; known: excess purge",
    ),
    (
        "create_work_order",
        {"site_name": "MAIN", "asset_id": "X1", "description": "x", "priority": "low"},
        "unknown asset 'X1' at site 'MAIN'",
    ),
    ("list_work_orders", {"site_name": "SOUTH"}, "unknown site 'SOUTH'"),
]


@pytest.mark.parametrize(
    ("name", "args", "message"), ERROR_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(ERROR_CASES)]
)
def test_unknown_inputs_give_an_error_payload_naming_what_is_known(
    tools: dict[str, BaseTool], name: str, args: dict[str, Any], message: str
) -> None:
    raw = tools[name].invoke(args)
    assert isinstance(raw, str) == (name in JSON_TEXT_TOOLS)
    out = json.loads(raw) if isinstance(raw, str) else raw
    assert set(out) == {"error"}
    assert message in out["error"]


def test_a_failed_create_work_order_creates_nothing(tools: dict[str, BaseTool]) -> None:
    call(
        tools["create_work_order"], site_name="MAIN", asset_id="X1", description="x", priority="low"
    )
    created = call(
        tools["create_work_order"],
        site_name="MAIN",
        asset_id="CWC04006",
        description="x",
        priority="low",
    )
    assert created["work_order"]["id"] == "WO-1001"


# -- determinism and data ------------------------------------------------------------


def test_outputs_are_deterministic_and_json_serialisable() -> None:
    args = {
        "sites": {},
        "assets": {"site_name": "MAIN"},
        "asset": {"site_name": "MAIN", "asset_id": "CWC04006"},
        "sensors": {"site_name": "MAIN", "asset_id": "CWC04006"},
        "history": {"site_name": "MAIN", "asset_id": "CWC04006", **WEEK},
        "detect_anomalies": {
            "site_name": "MAIN",
            "asset_id": "CWC04006",
            "sensor": "Purge Runtime",
            **WEEK,
        },
        "current_date_time": {},
        "failure_modes": {"asset_type": "chiller"},
        "failure_mode_sensors": {"asset_type": "chiller"},
        "create_work_order": {
            "site_name": "MAIN",
            "asset_id": "CWC04006",
            "description": "x",
            "priority": "low",
        },
        "list_work_orders": {"site_name": "MAIN"},
    }
    assert set(args) == set(EXPECTED_TOOLS)
    first = {n: json.dumps(t.invoke(args[n]), sort_keys=True) for n, t in by_name().items()}
    second = {n: json.dumps(t.invoke(args[n]), sort_keys=True) for n, t in by_name().items()}
    assert first == second


def test_outputs_do_not_alias_the_dataset(tools: dict[str, BaseTool]) -> None:
    out = call(tools["asset"], site_name="MAIN", asset_id="CWC04006")
    out["name"] = "changed"
    call(tools["sites"])["sites"][0]["name"] = "changed"
    call(tools["failure_mode_sensors"], asset_type="chiller")["fm_to_sensors"][
        "excess purge"
    ].append("changed")
    assert call(tools["asset"], site_name="MAIN", asset_id="CWC04006")["name"] == "Chiller 6"
    assert call(tools["sites"])["sites"][0]["name"] == "MAIN"
    assert "changed" not in dataset().failure_modes["chiller"]["excess purge"]["sensors"]


def test_stored_data_files_are_exactly_what_the_generator_produces() -> None:
    for name, content in _generate.build_dataset().items():
        stored = example_path(f"data/{name}").read_text(encoding="utf-8")
        assert stored == _generate.render(content), name
        assert load_json(name) == json.loads(_generate.render(content))


def test_the_dataset_is_small() -> None:
    total = sum(example_path(f"data/{n}").stat().st_size for n in _generate.build_dataset())
    assert total < 200_000


def test_the_dataset_has_two_sites_and_eight_assets_with_unique_ids() -> None:
    ds = dataset()
    assert [s["name"] for s in ds.sites] == ["MAIN", "SITE_B"]
    ids = [a["id"] for a in ds.assets]
    assert len(ids) == len(set(ids)) == 8
    assert set(ds.series) == set(ids)


def test_parse_time_reads_dates_and_rejects_prose() -> None:
    assert parse_time("2025-06-01").hour == 0
    assert parse_time("2025-06-01", end_of_day=True).hour == 23
    with pytest.raises(DemoLookupError):
        parse_time("yesterday")
