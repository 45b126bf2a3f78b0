"""Generate the demo dataset in ``planexec/examples/data/`` (run once; the output is committed).

The dataset is small and fully deterministic: a fixed catalog of sites, assets, sensor
types, failure modes and work orders, plus one week of hourly sensor history computed by
a seeded formula (a daily cycle plus seeded noise, with a few injected anomalies that the
demo plans find). Regenerating it gives byte-identical files; a test checks that.

Run ``python -m planexec.examples._generate`` to rewrite the files.
"""

from __future__ import annotations

import json
import math
import random
import re
import zlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["DATA_DIR", "build_dataset", "main", "render"]

DATA_DIR = Path(__file__).parent / "data"
"""Where the generated JSON files live."""

HISTORY_START = datetime(2025, 6, 1, 0, 0, 0)
"""Timestamp of the first history point (UTC, stored without offset)."""
HISTORY_POINTS = 168
"""Number of hourly points per series (one week)."""
INTERVAL_MINUTES = 60
"""Minutes between two history points."""

SITES: list[dict[str, Any]] = [
    {
        "name": "MAIN",
        "description": "Main campus central plant",
        "city": "Yorktown Heights, NY",
        "timezone": "America/New_York",
    },
    {
        "name": "SITE_B",
        "description": "Coastal facility with a small wind farm",
        "city": "Galveston, TX",
        "timezone": "America/Chicago",
    },
]

ASSETS: list[dict[str, Any]] = [
    {
        "site_name": "MAIN",
        "id": "CWC04006",
        "name": "Chiller 6",
        "type": "chiller",
        "manufacturer": "Trane",
        "model": "CVHF 1000",
        "installed": "2012-05-14",
        "location": "Central plant, bay 2",
        "status": "running",
    },
    {
        "site_name": "MAIN",
        "id": "CWC04009",
        "name": "Chiller 9",
        "type": "chiller",
        "manufacturer": "Carrier",
        "model": "19XR 800",
        "installed": "2016-09-02",
        "location": "Central plant, bay 3",
        "status": "running",
    },
    {
        "site_name": "MAIN",
        "id": "AHU01001",
        "name": "AHU 1",
        "type": "ahu",
        "manufacturer": "Daikin",
        "model": "Vision 30",
        "installed": "2014-03-21",
        "location": "Building 1 roof",
        "status": "running",
    },
    {
        "site_name": "MAIN",
        "id": "AHU01002",
        "name": "AHU 2",
        "type": "ahu",
        "manufacturer": "Daikin",
        "model": "Vision 30",
        "installed": "2014-03-21",
        "location": "Building 2 roof",
        "status": "running",
    },
    {
        "site_name": "SITE_B",
        "id": "CWC05003",
        "name": "Chiller 3",
        "type": "chiller",
        "manufacturer": "York",
        "model": "YK 600",
        "installed": "2019-07-30",
        "location": "Plant room",
        "status": "standby",
    },
    {
        "site_name": "SITE_B",
        "id": "AHU02003",
        "name": "AHU 3",
        "type": "ahu",
        "manufacturer": "Trane",
        "model": "Performance Climate Changer",
        "installed": "2020-01-10",
        "location": "Office block roof",
        "status": "running",
    },
    {
        "site_name": "SITE_B",
        "id": "WTG00001",
        "name": "Wind Turbine 1",
        "type": "wind_turbine",
        "manufacturer": "Vestas",
        "model": "V90-2.0",
        "installed": "2018-11-05",
        "location": "Row A, pad 1",
        "status": "running",
    },
    {
        "site_name": "SITE_B",
        "id": "WTG00002",
        "name": "Wind Turbine 2",
        "type": "wind_turbine",
        "manufacturer": "Vestas",
        "model": "V90-2.0",
        "installed": "2018-11-05",
        "location": "Row A, pad 2",
        "status": "running",
    },
]

# name, unit, description, base, daily amplitude, noise sd
SENSOR_TYPES: dict[str, list[tuple[str, str, str, float, float, float]]] = {
    "chiller": [
        ("Supply Temperature", "degF", "Chilled water supply temperature", 44.0, 0.8, 0.3),
        ("Return Temperature", "degF", "Chilled water return temperature", 54.0, 2.0, 0.4),
        ("Condenser Water Flow", "gpm", "Condenser water flow rate", 2400.0, 150.0, 25.0),
        ("Condenser Pressure", "psi", "Refrigerant pressure in the condenser", 18.0, 1.5, 0.3),
        ("Power Input", "kW", "Electrical power drawn by the compressor", 520.0, 90.0, 12.0),
        ("Purge Runtime", "min", "Minutes per hour the purge unit ran", 4.0, 1.0, 0.5),
    ],
    "ahu": [
        ("Supply Air Temperature", "degF", "Supply air temperature", 55.0, 1.5, 0.4),
        ("Return Air Temperature", "degF", "Return air temperature", 72.0, 1.5, 0.3),
        ("Fan Speed", "%", "Supply fan speed command", 65.0, 12.0, 2.0),
        (
            "Filter Differential Pressure",
            "inH2O",
            "Pressure drop across the filter bank",
            0.6,
            0.05,
            0.02,
        ),
    ],
    "wind_turbine": [
        ("Wind Speed", "m/s", "Nacelle anemometer wind speed", 8.0, 3.0, 0.8),
        ("Power Output", "kW", "Active power delivered to the grid", 900.0, 0.0, 0.0),
        ("Rotor Speed", "rpm", "Rotor speed", 14.0, 2.0, 0.4),
        ("Gearbox Oil Temperature", "degC", "Gearbox oil sump temperature", 55.0, 3.0, 0.6),
        ("Vibration", "mm/s", "Drive train vibration velocity (RMS)", 2.2, 0.3, 0.15),
    ],
}

FAILURE_MODES: dict[str, dict[str, dict[str, Any]]] = {
    "chiller": {
        "excess purge": {
            "description": "The purge unit runs far more than usual, a sign of air or "
            "moisture leaking into the refrigerant circuit.",
            "sensors": ["Purge Runtime", "Condenser Pressure"],
        },
        "compressor overheating": {
            "description": "The compressor runs hot, usually from high head pressure or "
            "low refrigerant charge.",
            "sensors": ["Power Input", "Condenser Pressure", "Supply Temperature"],
        },
        "condenser fouling": {
            "description": "Scale or debris in the condenser tubes reduces heat transfer.",
            "sensors": ["Condenser Pressure", "Condenser Water Flow", "Power Input"],
        },
        "refrigerant leak": {
            "description": "Refrigerant charge is lost, reducing capacity.",
            "sensors": ["Supply Temperature", "Return Temperature", "Power Input"],
        },
    },
    "ahu": {
        "clogged filter": {
            "description": "The filter bank is loaded with dust and restricts airflow.",
            "sensors": ["Filter Differential Pressure", "Fan Speed"],
        },
        "fan belt failure": {
            "description": "A slipping or broken belt stops the supply fan delivering air.",
            "sensors": ["Fan Speed", "Supply Air Temperature"],
        },
        "stuck damper": {
            "description": "The outside-air damper no longer modulates.",
            "sensors": ["Supply Air Temperature", "Return Air Temperature"],
        },
    },
    "wind_turbine": {
        "gearbox wear": {
            "description": "Worn gears or bearings in the gearbox.",
            "sensors": ["Gearbox Oil Temperature", "Vibration"],
        },
        "blade imbalance": {
            "description": "Uneven mass or pitch across the blades.",
            "sensors": ["Vibration", "Rotor Speed"],
        },
        "yaw misalignment": {
            "description": "The nacelle does not face the wind, so power is lost.",
            "sensors": ["Power Output", "Wind Speed"],
        },
    },
}

WORK_ORDERS: list[dict[str, Any]] = [
    {
        "id": "WO-0990",
        "site_name": "MAIN",
        "asset_id": "CWC04006",
        "description": "Annual tube cleaning",
        "priority": "medium",
        "status": "closed",
        "created_at": "2025-03-12T14:00:00Z",
    },
    {
        "id": "WO-0997",
        "site_name": "MAIN",
        "asset_id": "AHU01002",
        "description": "Replace filter bank",
        "priority": "low",
        "status": "open",
        "created_at": "2025-05-28T09:30:00Z",
    },
    {
        "id": "WO-0998",
        "site_name": "SITE_B",
        "asset_id": "WTG00001",
        "description": "Inspect gearbox after high vibration alarm",
        "priority": "high",
        "status": "open",
        "created_at": "2025-05-30T16:45:00Z",
    },
]

# (asset id, sensor, first hour index, last hour index inclusive, added value)
ANOMALIES: list[tuple[str, str, int, int, float]] = [
    ("CWC04006", "Purge Runtime", 4 * 24 + 6, 4 * 24 + 12, 31.0),  # 2025-06-05 06:00-12:00
    ("CWC04006", "Condenser Pressure", 4 * 24 + 6, 4 * 24 + 12, 5.5),
    ("WTG00001", "Vibration", 2 * 24 + 14, 2 * 24 + 16, 6.0),  # 2025-06-03 14:00-16:00
]


def _series(
    asset: dict[str, Any],
    sensor: tuple[str, str, str, float, float, float],
    wind: list[float] | None,
) -> list[float]:
    name, _unit, _desc, base, amplitude, sd = sensor
    rng = random.Random(zlib.crc32(f"{asset['id']}|{name}".encode()))
    offset = (zlib.crc32(asset["id"].encode()) % 7) / 10.0  # small per-asset bias
    values: list[float] = []
    for i in range(HISTORY_POINTS):
        hour = i % 24
        cycle = math.sin(2 * math.pi * (hour - 9) / 24)
        if name == "Power Output" and wind is not None:
            v = min(2000.0, 4.2 * max(wind[i] - 3.0, 0.0) ** 3) + rng.gauss(0, 15.0)
        elif asset["type"] == "ahu" and name == "Filter Differential Pressure":
            v = base + amplitude * cycle + rng.gauss(0, sd)
            if asset["id"] == "AHU01002":
                v += 0.004 * i  # slowly loading filter
        else:
            v = base * (1 + offset / 100) + amplitude * cycle + rng.gauss(0, sd)
        for aid, sname, first, last, add in ANOMALIES:
            if aid == asset["id"] and sname == name and first <= i <= last:
                v += add
        values.append(round(max(v, 0.0), 2))
    return values


def build_dataset() -> dict[str, Any]:
    """Build every data file's content, keyed by file name."""
    history: dict[str, dict[str, list[float]]] = {}
    for asset in ASSETS:
        per_sensor: dict[str, list[float]] = {}
        wind: list[float] | None = None
        for sensor in SENSOR_TYPES[asset["type"]]:
            values = _series(asset, sensor, wind)
            if sensor[0] == "Wind Speed":
                wind = values
            per_sensor[sensor[0]] = values
        history[asset["id"]] = per_sensor
    return {
        "sites.json": {"sites": SITES},
        "assets.json": {"assets": ASSETS},
        "sensors.json": {
            "sensor_types": {
                t: [{"name": n, "unit": u, "description": d} for n, u, d, *_ in sensors]
                for t, sensors in SENSOR_TYPES.items()
            }
        },
        "failure_modes.json": {"failure_modes": FAILURE_MODES},
        "work_orders.json": {"work_orders": WORK_ORDERS, "next_id": 1001},
        "history.json": {
            "start": HISTORY_START.isoformat(),
            "interval_minutes": INTERVAL_MINUTES,
            "points": HISTORY_POINTS,
            "end": (HISTORY_START + timedelta(hours=HISTORY_POINTS - 1)).isoformat(),
            "series": history,
        },
    }


def render(content: Any) -> str:
    """Render one file's content as the stored JSON text (number lists kept on one line)."""
    text = json.dumps(content, indent=1, ensure_ascii=False, separators=(",", ":"))
    return (
        re.sub(
            r"\[\s*(-?[\d.]+(?:,\s*-?[\d.]+)*)\s*\]",
            lambda m: "[" + re.sub(r"\s+", "", m.group(1)) + "]",
            text,
        )
        + "\n"
    )


def main() -> None:
    """Write the dataset files into `DATA_DIR`."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for name, content in build_dataset().items():
        (DATA_DIR / name).write_text(render(content), encoding="utf-8")


if __name__ == "__main__":
    main()
