"""Scenario and suite results, their JSON and JUnit XML forms, and baseline comparison.

Everything here is plain data (picklable, JSON-ready), so results travel from worker
processes (or, later, Ray workers) back to the driver unchanged.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from planexec.errors import ConfigError

__all__ = [
    "REPORT_FORMAT",
    "Change",
    "Comparison",
    "ExpectationFailure",
    "ScenarioResult",
    "ScenarioStatus",
    "SuiteReport",
    "compare_reports",
    "describe_comparison",
    "load_report",
    "stable_run",
    "write_json",
    "write_junit",
]

REPORT_FORMAT = "planexec-regress-report"
"""The ``format`` value of JSON reports."""

ScenarioStatus = Literal["passed", "failed", "error", "skipped"]
"""``passed``; ``failed`` (an expectation did not hold); ``error`` (the scenario could
not run: invalid file, missing cassette entry, timeout, ...); ``skipped``."""

_VOLATILE = frozenset({"started_at", "duration", "wall_time", "ts"})


def stable_run(run: Any) -> Any:
    """A run's JSON data without its timings (``started_at``, ``duration``, ``wall_time``).

    Two runs of the same scenario against the same replies give equal stable runs.
    """
    if isinstance(run, Mapping):
        return {k: stable_run(v) for k, v in run.items() if k not in _VOLATILE}
    if isinstance(run, list):
        return [stable_run(v) for v in run]
    return run


@dataclass(frozen=True)
class ExpectationFailure:
    """One expectation that did not hold."""

    where: str
    """The expectation's place in the file, e.g. ``steps[1].error_kind``."""
    message: str
    """What was expected and what happened."""

    def __str__(self) -> str:
        return (
            self.message
            if self.message.startswith(self.where)
            else (f"{self.where}: {self.message}")
        )

    def to_dict(self) -> dict[str, str]:
        """JSON-ready data."""
        return {"where": self.where, "message": self.message}


@dataclass
class ScenarioResult:
    """The outcome of one scenario."""

    name: str
    """The scenario's name."""
    path: str | None = None
    """The scenario file, if any."""
    status: ScenarioStatus = "passed"
    """How it ended."""
    failures: list[ExpectationFailure] = field(default_factory=list)
    """Expectations that did not hold (``failed``), in the file's order."""
    error: str | None = None
    """Why the scenario could not run (``error``) or the skip reason (``skipped``)."""
    tags: list[str] = field(default_factory=list)
    """The scenario's tags."""
    llm_calls: int = 0
    """Model calls made, all purposes."""
    llm_calls_by_purpose: dict[str, int] = field(default_factory=dict)
    """Model calls by purpose."""
    tool_calls: int = 0
    """Tool call attempts made."""
    wall_time: float = 0.0
    """Seconds the scenario took (loading, running and checking)."""
    run: dict[str, Any] | None = None
    """The `Run` as JSON data (`planexec.results.Run.to_dict`), when it ran."""
    recorded: bool = False
    """Whether its cassette was (re-)recorded in this run."""

    @property
    def passed(self) -> bool:
        """Whether it passed."""
        return self.status == "passed"

    @property
    def first_problem(self) -> str:
        """The first failing expectation, or the error, or ``""``.

        An error whose first line only introduces details (``invalid scenario 'x':``)
        is given with its first detail, so the wrong key shows in one line.
        """
        if self.failures:
            return str(self.failures[0])
        lines = [line.strip() for line in (self.error or "").splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].endswith(":"):
            return f"{lines[0]} {lines[1]}"
        return self.error or ""

    def describe(self) -> str:
        """A readable multi-line account of what went wrong (empty when it passed)."""
        if self.status == "passed":
            return ""
        where = f" ({self.path})" if self.path else ""
        lines = [f"scenario {self.name!r}{where} {self.status.upper()}"]
        if self.error:
            lines.append(self.error)
        for f in self.failures:
            lines.append(f"- {f}")
        if self.run is not None:
            lines.append(
                f"run: status {self.run.get('status')}, "
                f"{len(self.run.get('attempts', []))} plan(s), "
                f"{self.llm_calls} model call(s), {self.tool_calls} tool call(s)"
            )
            for attempt in self.run.get("attempts", []):
                for r in attempt.get("results", []):
                    if r.get("status") != "SUCCEEDED":
                        kind = r.get("error_kind") or ""
                        why = r.get("error") or r.get("note") or ""
                        line = (
                            f"  plan {attempt.get('version')} step {r.get('step_id')} "
                            f"({r.get('tool') or 'reasoning'}): {r.get('status')} {kind} {why}"
                        )
                        lines.append(line.rstrip())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "name": self.name,
            "path": self.path,
            "status": self.status,
            "failures": [f.to_dict() for f in self.failures],
            "error": self.error,
            "tags": list(self.tags),
            "llm_calls": self.llm_calls,
            "llm_calls_by_purpose": dict(self.llm_calls_by_purpose),
            "tool_calls": self.tool_calls,
            "wall_time": round(self.wall_time, 4),
            "recorded": self.recorded,
            "run": self.run,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScenarioResult:
        """Read the data of `to_dict` back."""
        return cls(
            name=str(data["name"]),
            path=data.get("path"),
            status=data.get("status", "passed"),
            failures=[
                ExpectationFailure(str(f.get("where", "")), str(f.get("message", "")))
                for f in data.get("failures", [])
            ],
            error=data.get("error"),
            tags=list(data.get("tags", [])),
            llm_calls=int(data.get("llm_calls", 0)),
            llm_calls_by_purpose=dict(data.get("llm_calls_by_purpose", {})),
            tool_calls=int(data.get("tool_calls", 0)),
            wall_time=float(data.get("wall_time", 0.0)),
            run=data.get("run"),
            recorded=bool(data.get("recorded", False)),
        )

    def outcome(self) -> dict[str, Any]:
        """What must not depend on timing or workers: status, failures, calls, the run.

        The run is taken without its timings, and each plan attempt's step results in
        step order (parallel steps finish in an order that timing decides).
        """
        run = stable_run(self.run)
        if isinstance(run, dict):
            for attempt in run.get("attempts", []):
                attempt["results"] = sorted(attempt["results"], key=lambda r: r["step_id"])
        return {
            "name": self.name,
            "status": self.status,
            "failures": [f.to_dict() for f in self.failures],
            "error": self.error,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "run": run,
        }


@dataclass
class SuiteReport:
    """The outcome of a suite: every scenario's result, in path order."""

    results: list[ScenarioResult] = field(default_factory=list)
    """One per scenario, in the order the scenarios were given (not completion order)."""
    wall_time: float = 0.0
    """Seconds the whole suite took."""
    workers: int = 1
    """Worker processes used."""

    def count(self, status: ScenarioStatus) -> int:
        """How many scenarios ended with ``status``."""
        return sum(1 for r in self.results if r.status == status)

    @property
    def passed(self) -> bool:
        """Whether no scenario failed or errored."""
        return all(r.status in ("passed", "skipped") for r in self.results)

    @property
    def summary(self) -> dict[str, int]:
        """Counts by status, and the total."""
        return {
            "total": len(self.results),
            "passed": self.count("passed"),
            "failed": self.count("failed"),
            "error": self.count("error"),
            "skipped": self.count("skipped"),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (the ``--json`` report)."""
        return {
            "format": REPORT_FORMAT,
            "version": 1,
            "summary": self.summary,
            "wall_time": round(self.wall_time, 4),
            "workers": self.workers,
            "llm_calls": sum(r.llm_calls for r in self.results),
            "tool_calls": sum(r.tool_calls for r in self.results),
            "scenarios": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SuiteReport:
        """Read a JSON report's data back.

        Raises:
            ConfigError: the data is not a regression report.
        """
        if data.get("format") != REPORT_FORMAT:
            raise ConfigError(f"not a planexec regression report (format {data.get('format')!r})")
        return cls(
            results=[ScenarioResult.from_dict(s) for s in data.get("scenarios", [])],
            wall_time=float(data.get("wall_time", 0.0)),
            workers=int(data.get("workers", 1)),
        )


def write_json(
    report: SuiteReport, path: str | os.PathLike[str], *, comparison: Comparison | None = None
) -> None:
    """Write the JSON report (with the baseline ``comparison`` under ``baseline``, if any)."""
    data = report.to_dict()
    if comparison is not None:
        data["baseline"] = comparison.to_dict()
    Path(path).write_text(
        json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )


def load_report(path: str | os.PathLike[str]) -> SuiteReport:
    """Read a JSON report (e.g. the baseline).

    Raises:
        ConfigError: the file cannot be read or is not a report.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read report {str(p)!r}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(
            f'{str(p)!r} is not a planexec regression report: expected "format": '
            f"{REPORT_FORMAT!r} (found {found!r}); write one with planexec regress --json FILE"
        )
    return SuiteReport.from_dict(data)


def write_junit(report: SuiteReport, path: str | os.PathLike[str]) -> None:
    """Write JUnit XML: one ``testcase`` per scenario; failures, errors and skips as such."""
    s = report.summary
    suite = ET.Element(
        "testsuite",
        {
            "name": "planexec-regress",
            "tests": str(s["total"]),
            "failures": str(s["failed"]),
            "errors": str(s["error"]),
            "skipped": str(s["skipped"]),
            "time": f"{report.wall_time:.3f}",
        },
    )
    for r in report.results:
        classname = "scenarios"
        if r.path:
            classname = Path(r.path).parent.name or classname
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": classname, "name": r.name, "time": f"{r.wall_time:.3f}"},
        )
        if r.status == "failed":
            el = ET.SubElement(case, "failure", {"message": r.first_problem[:500]})
            el.text = r.describe()
        elif r.status == "error":
            el = ET.SubElement(case, "error", {"message": (r.error or "")[:500]})
            el.text = r.describe()
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", {"message": r.error or ""})
        out = ET.SubElement(case, "system-out")
        out.text = f"llm_calls={r.llm_calls} {r.llm_calls_by_purpose} tool_calls={r.tool_calls}"
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


@dataclass(frozen=True)
class Change:
    """How one scenario moved between the baseline and now."""

    name: str
    """The scenario."""
    before: str | None
    """Its status in the baseline (None: new scenario)."""
    after: str | None
    """Its status now (None: gone)."""
    llm_calls: tuple[int, int] = (0, 0)
    """Model calls, before and after."""
    tool_calls: tuple[int, int] = (0, 0)
    """Tool calls, before and after."""
    wall_time: tuple[float, float] = (0.0, 0.0)
    """Seconds, before and after."""

    @property
    def status_changed(self) -> bool:
        """Whether the status differs (a new or removed scenario counts)."""
        return self.before != self.after

    @property
    def regressed(self) -> bool:
        """Whether it passed before and does not now."""
        return self.before == "passed" and self.after not in ("passed", None)

    @property
    def fixed(self) -> bool:
        """Whether it did not pass before and does now."""
        return self.before not in ("passed", None) and self.after == "passed"


@dataclass(frozen=True)
class Comparison:
    """A suite compared with a baseline report."""

    changes: tuple[Change, ...]
    """Every scenario in either report, in the current report's order, then removed ones."""

    @property
    def status_changes(self) -> list[Change]:
        """Scenarios whose status changed (new and removed included)."""
        return [c for c in self.changes if c.status_changed]

    @property
    def regressions(self) -> list[Change]:
        """Scenarios that passed in the baseline and do not now."""
        return [c for c in self.changes if c.regressed]

    @property
    def fixes(self) -> list[Change]:
        """Scenarios that now pass and did not."""
        return [c for c in self.changes if c.fixed]

    def totals(self) -> dict[str, tuple[float, float]]:
        """Total model calls, tool calls and seconds, before and after (common scenarios)."""
        common = [c for c in self.changes if c.before is not None and c.after is not None]
        return {
            "llm_calls": (
                sum(c.llm_calls[0] for c in common),
                sum(c.llm_calls[1] for c in common),
            ),
            "tool_calls": (
                sum(c.tool_calls[0] for c in common),
                sum(c.tool_calls[1] for c in common),
            ),
            "wall_time": (
                round(sum(c.wall_time[0] for c in common), 4),
                round(sum(c.wall_time[1] for c in common), 4),
            ),
        }

    def moved(self) -> list[Change]:
        """Common scenarios whose model or tool calls changed."""
        return [
            c
            for c in self.changes
            if c.before is not None
            and c.after is not None
            and (c.llm_calls[0] != c.llm_calls[1] or c.tool_calls[0] != c.tool_calls[1])
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "status_changes": [
                {"name": c.name, "before": c.before, "after": c.after} for c in self.status_changes
            ],
            "regressions": [c.name for c in self.regressions],
            "fixes": [c.name for c in self.fixes],
            "moved": [
                {
                    "name": c.name,
                    "llm_calls": list(c.llm_calls),
                    "tool_calls": list(c.tool_calls),
                }
                for c in self.moved()
            ],
            "totals": {k: list(v) for k, v in self.totals().items()},
        }


def _by_name(results: Iterable[ScenarioResult]) -> dict[str, ScenarioResult]:
    return {r.name: r for r in results}


def compare_reports(current: SuiteReport, baseline: SuiteReport) -> Comparison:
    """Compare ``current`` with ``baseline``, scenario by scenario (matched by name)."""
    before = _by_name(baseline.results)
    changes: list[Change] = []
    seen: set[str] = set()
    for r in current.results:
        seen.add(r.name)
        b = before.get(r.name)
        changes.append(
            Change(
                r.name,
                b.status if b else None,
                r.status,
                (b.llm_calls if b else 0, r.llm_calls),
                (b.tool_calls if b else 0, r.tool_calls),
                (b.wall_time if b else 0.0, r.wall_time),
            )
        )
    for name, b in before.items():
        if name not in seen:
            changes.append(
                Change(
                    name,
                    b.status,
                    None,
                    (b.llm_calls, 0),
                    (b.tool_calls, 0),
                    (b.wall_time, 0.0),
                )
            )
    return Comparison(tuple(changes))


def describe_comparison(comparison: Comparison) -> Sequence[str]:
    """The comparison as lines of text."""
    lines: list[str] = []
    for c in comparison.status_changes:
        lines.append(f"{c.name}: {c.before or 'new'} → {c.after or 'removed'}")
    for c in comparison.moved():
        lines.append(
            f"{c.name}: model calls {c.llm_calls[0]} → {c.llm_calls[1]}, "
            f"tool calls {c.tool_calls[0]} → {c.tool_calls[1]}"
        )
    t = comparison.totals()
    lines.append(
        f"totals: model calls {t['llm_calls'][0]:g} → {t['llm_calls'][1]:g}, tool calls "
        f"{t['tool_calls'][0]:g} → {t['tool_calls'][1]:g}, time {t['wall_time'][0]:.2f}s → "
        f"{t['wall_time'][1]:.2f}s"
    )
    return lines
