"""The demo domain's tools: industrial assets, sensors, failure modes and work orders.

They are plain langchain-core `StructuredTool` objects with pydantic argument schemas and
JSON-serialisable outputs, grouped into three servers through
``tool.metadata["planexec"]["server"]``:

- ``iot``: `sites`, `assets`, `asset`, `sensors`, `history`, `detect_anomalies`,
  `current_date_time` — read-only, idempotent.
- ``fmsr`` (failure modes and sensor relevance): `failure_modes`,
  `failure_mode_sensors` — read-only, idempotent.
- ``wo`` (work orders): `create_work_order` (destructive), `list_work_orders` (read-only).

Most tools return dicts; `sensors` and `list_work_orders` return JSON *text*, as many
real tool servers do. An unknown site, asset, sensor, asset type or failure mode gives an
error payload in the tool's usual form, ``{"error": "unknown asset 'X' at site 'MAIN';
known: ..."}``, never an exception.

Use `TOOLS` (one shared work-order book) or `demo_tools()` (a fresh book per call):

    planexec run planexec/examples/plans/chiller_sensors.txt --tools planexec.examples.tools:TOOLS
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from planexec.examples.data import DEMO_NOW, DemoData, DemoLookupError, dataset, parse_time, stats

__all__ = [
    "SERVERS",
    "TOOLS",
    "WorkOrderBook",
    "demo_tools",
    "tools_for_server",
]

SERVERS: tuple[str, ...] = ("iot", "fmsr", "wo")
"""The demo servers, in the order their tools appear in `demo_tools`."""

_READ = {"read_only": True, "idempotent": True, "destructive": False}
_WRITE = {"read_only": False, "idempotent": False, "destructive": True}


# -- argument schemas -------------------------------------------------------------------


class NoArgs(BaseModel):
    """No arguments."""


class SiteArgs(BaseModel):
    """Arguments naming a site."""

    site_name: str = Field(description="Site name, e.g. 'MAIN' or 'SITE_B'.")
    """Site name."""


class AssetArgs(SiteArgs):
    """Arguments naming an asset at a site."""

    asset_id: str = Field(
        description="Asset id, e.g. 'CWC04006' (not the display name 'Chiller 6')."
    )
    """Asset id."""


class HistoryArgs(AssetArgs):
    """Arguments of `history`."""

    start: str = Field(description="Start of the window, ISO date or date-time (inclusive).")
    """Start of the window."""
    final: str = Field(
        description="End of the window, ISO date or date-time (inclusive; a bare date "
        "includes that whole day)."
    )
    """End of the window."""
    sensor: str | None = Field(
        default=None, description="One sensor name, e.g. 'Supply Temperature'; all if omitted."
    )
    """One sensor, or all."""


class AnomalyArgs(AssetArgs):
    """Arguments of `detect_anomalies`."""

    sensor: str = Field(description="Sensor name, e.g. 'Purge Runtime'.")
    """Sensor name."""
    start: str = Field(description="Start of the window, ISO date or date-time (inclusive).")
    """Start of the window."""
    final: str = Field(description="End of the window, ISO date or date-time (inclusive).")
    """End of the window."""
    threshold: float = Field(
        default=3.0, gt=0, description="Flag readings whose |z-score| is at least this."
    )
    """Z-score threshold."""


class AssetTypeArgs(BaseModel):
    """Arguments naming an asset type."""

    asset_type: str = Field(description="Asset type: 'chiller', 'ahu' or 'wind_turbine'.")
    """Asset type."""


class FailureModeSensorArgs(AssetTypeArgs):
    """Arguments of `failure_mode_sensors`."""

    failure_mode: str | None = Field(
        default=None, description="One failure mode, e.g. 'excess purge'; all if omitted."
    )
    """One failure mode, or all."""


class CreateWorkOrderArgs(AssetArgs):
    """Arguments of `create_work_order`."""

    description: str = Field(min_length=1, description="What the technician should do.")
    """What to do."""
    priority: Literal["low", "medium", "high", "urgent"] = Field(
        description="One of 'low', 'medium', 'high', 'urgent'."
    )
    """Priority."""


class ListWorkOrdersArgs(SiteArgs):
    """Arguments of `list_work_orders`."""

    asset_id: str | None = Field(default=None, description="Only this asset's work orders.")
    """Optional asset filter."""


# -- the work-order book ----------------------------------------------------------------


class WorkOrderBook:
    """Work orders kept in memory: the seeded ones plus those created in this book."""

    def __init__(self, data: DemoData) -> None:
        """Start from the dataset's seeded work orders."""
        self._data = data
        self._orders: list[dict[str, Any]] = [dict(o) for o in data.seed_work_orders]
        self._next = data.first_work_order_id

    def create(
        self, site_name: str, asset_id: str, description: str, priority: str
    ) -> dict[str, Any]:
        """Create an open work order and return it."""
        a = self._data.asset(site_name, asset_id)
        order = {
            "id": f"WO-{self._next}",
            "site_name": a["site_name"],
            "asset_id": a["id"],
            "description": description,
            "priority": priority,
            "status": "open",
            "created_at": DEMO_NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        self._next += 1
        self._orders.append(order)
        return self._with_name(order)

    def list(self, site_name: str, asset_id: str | None = None) -> list[dict[str, Any]]:
        """Return the work orders of a site (optionally one asset), by id."""
        site = self._data.site(site_name)["name"]
        wanted = self._data.asset(site, asset_id)["id"] if asset_id is not None else None
        found = [
            self._with_name(o)
            for o in self._orders
            if o["site_name"] == site and (wanted is None or o["asset_id"] == wanted)
        ]
        return sorted(found, key=lambda o: o["id"])

    def _with_name(self, order: dict[str, Any]) -> dict[str, Any]:
        name = self._data.asset(order["site_name"], order["asset_id"])["name"]
        return {**order, "asset_name": name}


# -- helpers ----------------------------------------------------------------------------


def _guarded(fn: Callable[..., Any], *, as_text: bool = False) -> Callable[..., Any]:
    """Turn `DemoLookupError` into an error payload; optionally return JSON text."""

    def run(**kwargs: Any) -> Any:
        try:
            out = fn(**kwargs)
        except DemoLookupError as exc:
            out = {"error": str(exc)}
        return json.dumps(out, ensure_ascii=False) if as_text else out

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _tool(
    fn: Callable[..., Any],
    *,
    name: str,
    description: str,
    schema: type[BaseModel],
    server: str,
    hints: dict[str, bool],
    as_text: bool = False,
) -> BaseTool:
    tool = StructuredTool.from_function(
        func=_guarded(fn, as_text=as_text),
        name=name,
        description=description,
        args_schema=schema,
    )
    tool.metadata = {"planexec": {"server": server, **hints}}
    return tool


def _ts(text: str, *, end_of_day: bool = False) -> str:
    return parse_time(text, end_of_day=end_of_day).strftime("%Y-%m-%dT%H:%M:%S")


# -- the tools --------------------------------------------------------------------------


def demo_tools() -> list[BaseTool]:
    """Build the demo tools with a fresh in-memory work-order book.

    Tools from one call share one book (so `list_work_orders` sees what
    `create_work_order` created); separate calls never share state.
    """
    ds = dataset()
    book = WorkOrderBook(ds)

    def sites() -> dict[str, Any]:
        return {"sites": [dict(s) for s in ds.sites]}

    def assets(site_name: str) -> dict[str, Any]:
        items = [
            {k: a[k] for k in ("id", "name", "type", "status")} for a in ds.assets_at(site_name)
        ]
        return {"site_name": ds.site(site_name)["name"], "count": len(items), "assets": items}

    def asset(site_name: str, asset_id: str) -> dict[str, Any]:
        return ds.asset(site_name, asset_id)

    def sensors(site_name: str, asset_id: str) -> dict[str, Any]:
        a = ds.asset(site_name, asset_id)
        found = ds.sensors_of(site_name, asset_id)
        return {
            "site_name": a["site_name"],
            "asset_id": a["id"],
            "asset_name": a["name"],
            "count": len(found),
            "sensors": found,
        }

    def history(
        site_name: str, asset_id: str, start: str, final: str, sensor: str | None = None
    ) -> dict[str, Any]:
        a = ds.asset(site_name, asset_id)
        names, readings = ds.readings(site_name, asset_id, start, final, sensor)
        units = {s["name"]: s["unit"] for s in ds.sensors_of(site_name, asset_id)}
        summary: dict[str, Any] = {}
        for n in names:
            values = [r["value"] for r in readings if r["sensor"] == n]
            if values:
                mean, _ = stats(values)
                summary[n] = {
                    "unit": units[n],
                    "count": len(values),
                    "min": min(values),
                    "max": max(values),
                    "mean": round(mean, 2),
                }
        out: dict[str, Any] = {
            "site_name": a["site_name"],
            "asset_id": a["id"],
            "asset_name": a["name"],
            "start": _ts(start),
            "final": _ts(final, end_of_day=True),
            "sensors": names,
            "count": len(readings),
            "summary": summary,
            "readings": readings,
        }
        if not readings:
            out["note"] = f"no readings in this window; history covers {ds.coverage()}"
        return out

    def detect_anomalies(
        site_name: str, asset_id: str, sensor: str, start: str, final: str, threshold: float = 3.0
    ) -> dict[str, Any]:
        a = ds.asset(site_name, asset_id)
        s = ds.sensor(site_name, asset_id, sensor)
        _, readings = ds.readings(site_name, asset_id, start, final, s["name"])
        out: dict[str, Any] = {
            "site_name": a["site_name"],
            "asset_id": a["id"],
            "asset_name": a["name"],
            "sensor": s["name"],
            "unit": s["unit"],
            "start": _ts(start),
            "final": _ts(final, end_of_day=True),
            "points": len(readings),
            "threshold": threshold,
        }
        if not readings:
            return {
                **out,
                "mean": None,
                "std": None,
                "count": 0,
                "anomalies": [],
                "note": f"no readings in this window; history covers {ds.coverage()}",
            }
        mean, std = stats([r["value"] for r in readings])
        anomalies = []
        if std > 0:
            for r in readings:
                z = (r["value"] - mean) / std
                if abs(z) >= threshold:
                    anomalies.append(
                        {"timestamp": r["timestamp"], "value": r["value"], "z": round(z, 2)}
                    )
        return {
            **out,
            "mean": round(mean, 2),
            "std": round(std, 2),
            "count": len(anomalies),
            "anomalies": anomalies,
        }

    def current_date_time() -> dict[str, Any]:
        return {
            "now": DEMO_NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "date": DEMO_NOW.date().isoformat(),
            "weekday": DEMO_NOW.strftime("%A"),
            "timezone": "UTC",
            "note": f"fixed demo clock; sensor history covers {ds.coverage()}",
        }

    def failure_modes(asset_type: str) -> dict[str, Any]:
        t = ds.asset_type(asset_type)
        modes = ds.failure_modes[t]
        return {
            "asset_type": t,
            "failure_modes": list(modes),
            "descriptions": {m: r["description"] for m, r in modes.items()},
        }

    def failure_mode_sensors(asset_type: str, failure_mode: str | None = None) -> dict[str, Any]:
        t = ds.asset_type(asset_type)
        if failure_mode is None:
            mapping = {m: list(r["sensors"]) for m, r in ds.failure_modes[t].items()}
        else:
            name, record = ds.failure_mode(t, failure_mode)
            mapping = {name: list(record["sensors"])}
        return {"asset_type": t, "fm_to_sensors": mapping}

    def create_work_order(
        site_name: str, asset_id: str, description: str, priority: str
    ) -> dict[str, Any]:
        return {
            "created": True,
            "work_order": book.create(site_name, asset_id, description, priority),
        }

    def list_work_orders(site_name: str, asset_id: str | None = None) -> dict[str, Any]:
        orders = book.list(site_name, asset_id)
        return {
            "site_name": ds.site(site_name)["name"],
            "asset_id": None if asset_id is None else ds.asset(site_name, asset_id)["id"],
            "count": len(orders),
            "work_orders": orders,
        }

    return [
        _tool(
            sites,
            name="sites",
            schema=NoArgs,
            server="iot",
            hints=_READ,
            description='List the sites. Returns {"sites": [{"name", "description", '
            '"city", "timezone"}]}.',
        ),
        _tool(
            assets,
            name="assets",
            schema=SiteArgs,
            server="iot",
            hints=_READ,
            description='List the assets at a site. Returns {"site_name", "count", '
            '"assets": [{"id", "name", "type", "status"}]}; ids look like '
            "'CWC04006', names like 'Chiller 6'.",
        ),
        _tool(
            asset,
            name="asset",
            schema=AssetArgs,
            server="iot",
            hints=_READ,
            description='Get one asset\'s details by id. Returns {"site_name", "id", '
            '"name", "type", "manufacturer", "model", "installed", "location", '
            '"status"}.',
        ),
        _tool(
            sensors,
            name="sensors",
            schema=AssetArgs,
            server="iot",
            hints=_READ,
            as_text=True,
            description='List an asset\'s sensors. Returns JSON text {"site_name", '
            '"asset_id", "asset_name", "count", "sensors": [{"name", "unit", '
            '"description", "tag"}]}.',
        ),
        _tool(
            history,
            name="history",
            schema=HistoryArgs,
            server="iot",
            hints=_READ,
            description="Get an asset's hourly sensor readings between start and final "
            '(inclusive), for one sensor or all. Returns {"site_name", "asset_id", '
            '"asset_name", "start", "final", "sensors", "count", "summary": '
            '{sensor: {"unit", "count", "min", "max", "mean"}}, "readings": '
            '[{"timestamp", "sensor", "value"}]}.',
        ),
        _tool(
            detect_anomalies,
            name="detect_anomalies",
            schema=AnomalyArgs,
            server="iot",
            hints=_READ,
            description="Flag readings of one sensor whose z-score over the window is at "
            'least the threshold. Returns {"sensor", "unit", "points", "mean", '
            '"std", "threshold", "count", "anomalies": [{"timestamp", "value", '
            '"z"}], ...}.',
        ),
        _tool(
            current_date_time,
            name="current_date_time",
            schema=NoArgs,
            server="iot",
            hints=_READ,
            description='Get the current date and time (UTC). Returns {"now", "date", '
            '"weekday", "timezone", "note"}.',
        ),
        _tool(
            failure_modes,
            name="failure_modes",
            schema=AssetTypeArgs,
            server="fmsr",
            hints=_READ,
            description='List the failure modes of an asset type. Returns {"asset_type", '
            '"failure_modes": [name, ...], "descriptions": {name: text}}.',
        ),
        _tool(
            failure_mode_sensors,
            name="failure_mode_sensors",
            schema=FailureModeSensorArgs,
            server="fmsr",
            hints=_READ,
            description="Map failure modes of an asset type to the sensors relevant for "
            'detecting them. Returns {"asset_type", "fm_to_sensors": {failure_mode: '
            "[sensor name, ...]}}.",
        ),
        _tool(
            create_work_order,
            name="create_work_order",
            schema=CreateWorkOrderArgs,
            server="wo",
            hints=_WRITE,
            description="Create a work order for an asset (this changes state). Returns "
            '{"created": true, "work_order": {"id", "site_name", "asset_id", '
            '"asset_name", "description", "priority", "status", "created_at"}}.',
        ),
        _tool(
            list_work_orders,
            name="list_work_orders",
            schema=ListWorkOrdersArgs,
            server="wo",
            hints=_READ,
            as_text=True,
            description="List the work orders of a site, optionally for one asset. Returns "
            'JSON text {"site_name", "asset_id", "count", "work_orders": [{"id", '
            '"asset_id", "asset_name", "description", "priority", "status", '
            '"created_at", ...}]}.',
        ),
    ]


def tools_for_server(name: str, tools: list[BaseTool] | None = None) -> list[BaseTool]:
    """Return the tools of one demo server (``iot``, ``fmsr`` or ``wo``).

    Args:
        name: The server name.
        tools: Tools to filter; a fresh `demo_tools()` list when omitted.

    Raises:
        KeyError: not a demo server.
    """
    if name not in SERVERS:
        raise KeyError(f"unknown demo server {name!r}; known: {', '.join(SERVERS)}")
    pool = demo_tools() if tools is None else tools
    return [t for t in pool if (t.metadata or {}).get("planexec", {}).get("server") == name]


TOOLS: list[BaseTool] = demo_tools()
"""The demo tools, sharing one work-order book for the life of the process."""
