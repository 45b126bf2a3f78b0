"""The demo dataset: sites, assets, sensors, history, failure modes and work orders.

The JSON files in ``planexec/examples/data/`` are loaded with `importlib.resources`, so
the dataset works from an installed wheel. Lookups that fail raise `DemoLookupError`
with a message that names what was asked for and what is known; the tools turn it into
an error payload (``{"error": "..."}``).

Example:
    >>> ds = dataset()
    >>> ds.asset("MAIN", "CWC04006")["name"]
    'Chiller 6'
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "DEMO_NOW",
    "DemoData",
    "DemoLookupError",
    "dataset",
    "load_json",
    "parse_time",
    "stats",
]

DEMO_NOW = datetime(2025, 6, 8, 9, 0, 0)
"""The demo's fixed clock (UTC): the morning after the week of stored history."""

ASSET_TYPE_ALIASES: dict[str, str] = {
    "chiller": "chiller",
    "chillers": "chiller",
    "ahu": "ahu",
    "ahus": "ahu",
    "air handling unit": "ahu",
    "air handler": "ahu",
    "wind turbine": "wind_turbine",
    "wind turbines": "wind_turbine",
    "wind_turbine": "wind_turbine",
    "turbine": "wind_turbine",
}
"""Accepted spellings of each asset type (lower case)."""


class DemoLookupError(LookupError):
    """Something asked of the demo dataset does not exist or is malformed."""


def load_json(name: str) -> Any:
    """Load one data file (e.g. ``"assets.json"``) shipped in the package."""
    path = resources.files("planexec.examples").joinpath("data", name)
    return json.loads(path.read_text(encoding="utf-8"))


def parse_time(text: str, *, end_of_day: bool = False) -> datetime:
    """Parse an ISO date or date-time into a naive UTC datetime.

    Args:
        text: ``2025-06-01``, ``2025-06-01T06:00``, ``2025-06-01 06:00:00Z`` or with an
            offset (converted to UTC).
        end_of_day: For a bare date, return its last second instead of midnight (used
            for the ``final`` bound, so ``final="2025-06-07"`` includes that day).

    Raises:
        DemoLookupError: the text is not an ISO date or date-time.
    """
    raw = text.strip()
    try:
        if len(raw) == 10:
            d = date.fromisoformat(raw)
            base = datetime(d.year, d.month, d.day)
            return base + timedelta(days=1, seconds=-1) if end_of_day else base
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise DemoLookupError(
            f"cannot read {text!r} as a date or date-time; use ISO 8601, e.g. "
            "'2025-06-01' or '2025-06-01T06:00:00'"
        ) from exc
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def _fmt(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class DemoData:
    """Read-only access to the demo dataset (work orders are kept by the tools)."""

    sites: tuple[dict[str, Any], ...]
    """Site records: ``name``, ``description``, ``city``, ``timezone``."""
    assets: tuple[dict[str, Any], ...]
    """Asset records: ``site_name``, ``id``, ``name``, ``type`` and details."""
    sensor_types: dict[str, list[dict[str, str]]]
    """Sensors per asset type: ``name``, ``unit``, ``description``."""
    failure_modes: dict[str, dict[str, dict[str, Any]]]
    """Failure modes per asset type: ``description`` and relevant ``sensors``."""
    seed_work_orders: tuple[dict[str, Any], ...]
    """Work orders that exist before any run."""
    first_work_order_id: int
    """Number of the first work order created during a run (``WO-<n>``)."""
    history_start: datetime
    """Timestamp of the first history point."""
    interval: timedelta
    """Time between history points."""
    series: dict[str, dict[str, list[float]]]
    """History values by asset id, then sensor name."""

    # -- sites and assets -------------------------------------------------------------

    def site(self, site_name: str) -> dict[str, Any]:
        """Return a site by name (case-insensitive).

        Raises:
            DemoLookupError: no such site.
        """
        for s in self.sites:
            if s["name"].lower() == site_name.strip().lower():
                return dict(s)
        known = ", ".join(s["name"] for s in self.sites)
        raise DemoLookupError(f"unknown site {site_name!r}; known: {known}")

    def assets_at(self, site_name: str) -> list[dict[str, Any]]:
        """Return the assets of a site, in catalog order."""
        name = self.site(site_name)["name"]
        return [dict(a) for a in self.assets if a["site_name"] == name]

    def asset(self, site_name: str, asset_id: str) -> dict[str, Any]:
        """Return one asset by id (case-insensitive) at a site.

        Raises:
            DemoLookupError: unknown site, or no asset with that id there (the message
                lists the known ids with their names).
        """
        here = self.assets_at(site_name)
        for a in here:
            if a["id"].lower() == asset_id.strip().lower():
                return a
        known = ", ".join(f"{a['id']} ({a['name']})" for a in here)
        raise DemoLookupError(
            f"unknown asset {asset_id!r} at site {here[0]['site_name']!r}; known: {known}"
        )

    def sensors_of(self, site_name: str, asset_id: str) -> list[dict[str, str]]:
        """Return the sensors of an asset: ``name``, ``unit``, ``description``, ``tag``."""
        a = self.asset(site_name, asset_id)
        return [
            {**s, "tag": f"{a['id']}.{s['name'].replace(' ', '')}"}
            for s in self.sensor_types[a["type"]]
        ]

    def sensor(self, site_name: str, asset_id: str, sensor: str) -> dict[str, str]:
        """Return one sensor of an asset by name or tag (case-insensitive).

        Raises:
            DemoLookupError: unknown site, asset or sensor.
        """
        sensors = self.sensors_of(site_name, asset_id)
        wanted = sensor.strip().lower()
        for s in sensors:
            if wanted in (s["name"].lower(), s["tag"].lower()):
                return s
        a = self.asset(site_name, asset_id)
        known = ", ".join(s["name"] for s in sensors)
        raise DemoLookupError(
            f"unknown sensor {sensor!r} on asset {a['id']!r} ({a['name']}); known: {known}"
        )

    # -- history ----------------------------------------------------------------------

    @property
    def history_end(self) -> datetime:
        """Timestamp of the last history point."""
        points = len(next(iter(next(iter(self.series.values())).values())))
        return self.history_start + self.interval * (points - 1)

    def readings(
        self, site_name: str, asset_id: str, start: str, final: str, sensor: str | None = None
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Return the sensor names and the readings of an asset between two times.

        Both bounds are inclusive; a bare-date ``final`` includes that whole day.

        Raises:
            DemoLookupError: unknown site, asset or sensor; unreadable or reversed times.
        """
        a = self.asset(site_name, asset_id)
        t0 = parse_time(start)
        t1 = parse_time(final, end_of_day=True)
        if t1 < t0:
            raise DemoLookupError(f"final {final!r} is before start {start!r}")
        names = (
            [self.sensor(site_name, asset_id, sensor)["name"]]
            if sensor is not None
            else [s["name"] for s in self.sensor_types[a["type"]]]
        )
        out: list[dict[str, Any]] = []
        series = self.series[a["id"]]
        points = len(series[names[0]])
        for i in range(points):
            ts = self.history_start + self.interval * i
            if t0 <= ts <= t1:
                for n in names:
                    out.append({"timestamp": _fmt(ts), "sensor": n, "value": series[n][i]})
        return names, out

    def coverage(self) -> str:
        """Describe the time range the history covers."""
        return f"{_fmt(self.history_start)} to {_fmt(self.history_end)} (hourly, UTC)"

    # -- failure modes ----------------------------------------------------------------

    def asset_type(self, asset_type: str) -> str:
        """Return the canonical asset type for a spelling like ``"Chiller"`` or ``"AHU"``.

        Raises:
            DemoLookupError: not a known asset type.
        """
        key = asset_type.strip().lower().replace("-", " ")
        canonical = ASSET_TYPE_ALIASES.get(key) or ASSET_TYPE_ALIASES.get(key.replace("_", " "))
        if canonical is None:
            known = ", ".join(self.failure_modes)
            raise DemoLookupError(f"unknown asset type {asset_type!r}; known: {known}")
        return canonical

    def failure_mode(self, asset_type: str, failure_mode: str) -> tuple[str, dict[str, Any]]:
        """Return a failure mode's canonical name and record (case-insensitive).

        Raises:
            DemoLookupError: unknown asset type or failure mode.
        """
        t = self.asset_type(asset_type)
        wanted = failure_mode.strip().lower()
        for name, record in self.failure_modes[t].items():
            if name == wanted:
                return name, record
        known = ", ".join(self.failure_modes[t])
        raise DemoLookupError(
            f"unknown failure mode {failure_mode!r} for asset type {t!r}; known: {known}"
        )


def stats(values: list[float]) -> tuple[float, float]:
    """Return the mean and population standard deviation of non-empty values."""
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return mean, math.sqrt(var)


@cache
def dataset() -> DemoData:
    """Load the demo dataset once (it is read-only)."""
    history = load_json("history.json")
    orders = load_json("work_orders.json")
    return DemoData(
        sites=tuple(load_json("sites.json")["sites"]),
        assets=tuple(load_json("assets.json")["assets"]),
        sensor_types=load_json("sensors.json")["sensor_types"],
        failure_modes=load_json("failure_modes.json")["failure_modes"],
        seed_work_orders=tuple(orders["work_orders"]),
        first_work_order_id=int(orders["next_id"]),
        history_start=datetime.fromisoformat(history["start"]),
        interval=timedelta(minutes=int(history["interval_minutes"])),
        series=history["series"],
    )
