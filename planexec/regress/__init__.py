"""The regression suite: scenario files, cassettes, the runner and the pytest plugin.

- `Scenario` / `load_scenario` / `scenario_json_schema`: scenario files (YAML).
- `CassetteChatModel` / `load_cassette_model`: recorded model replies.
- `run_scenario` / `run_suite`: run one scenario or many (``workers`` processes).
- `SuiteReport`, `write_junit`, `write_json`, `load_report`, `compare_reports`.

See docs/regression.md. The names are imported on first use, so importing this package
(as pytest does for the plugin) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planexec.regress.cassette import (
        CASSETTE_FORMAT,
        Cassette,
        CassetteChatModel,
        load_cassette_model,
    )
    from planexec.regress.report import (
        Comparison,
        ExpectationFailure,
        ScenarioResult,
        SuiteReport,
        compare_reports,
        load_report,
        stable_run,
        write_json,
        write_junit,
    )
    from planexec.regress.runner import discover, matches_filter, run_scenario, run_suite
    from planexec.regress.scenario import (
        SCENARIO_SUFFIX,
        Expectations,
        Matcher,
        Scenario,
        load_scenario,
        scenario_json_schema,
    )

__all__ = [
    "CASSETTE_FORMAT",
    "SCENARIO_SUFFIX",
    "Cassette",
    "CassetteChatModel",
    "Comparison",
    "ExpectationFailure",
    "Expectations",
    "Matcher",
    "Scenario",
    "ScenarioResult",
    "SuiteReport",
    "compare_reports",
    "discover",
    "load_cassette_model",
    "load_report",
    "load_scenario",
    "matches_filter",
    "run_scenario",
    "run_suite",
    "scenario_json_schema",
    "stable_run",
    "write_json",
    "write_junit",
]

_EXPORTS: dict[str, str] = {
    "CASSETTE_FORMAT": "planexec.regress.cassette",
    "SCENARIO_SUFFIX": "planexec.regress.scenario",
    "Cassette": "planexec.regress.cassette",
    "CassetteChatModel": "planexec.regress.cassette",
    "Comparison": "planexec.regress.report",
    "ExpectationFailure": "planexec.regress.report",
    "Expectations": "planexec.regress.scenario",
    "Matcher": "planexec.regress.scenario",
    "Scenario": "planexec.regress.scenario",
    "ScenarioResult": "planexec.regress.report",
    "SuiteReport": "planexec.regress.report",
    "compare_reports": "planexec.regress.report",
    "discover": "planexec.regress.runner",
    "load_cassette_model": "planexec.regress.cassette",
    "load_report": "planexec.regress.report",
    "load_scenario": "planexec.regress.scenario",
    "matches_filter": "planexec.regress.runner",
    "run_scenario": "planexec.regress.runner",
    "run_suite": "planexec.regress.runner",
    "scenario_json_schema": "planexec.regress.scenario",
    "stable_run": "planexec.regress.report",
    "write_json": "planexec.regress.report",
    "write_junit": "planexec.regress.report",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'planexec.regress' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
