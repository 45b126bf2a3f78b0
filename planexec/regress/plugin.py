"""pytest plugin: collects ``*.scenario.yaml`` files as test items.

Registered through the ``pytest11`` entry point, so any project with planexec installed
gets it. It imports only pytest and the standard library at load time (pytest loads it in
every session); the runner is imported when a scenario item first runs. Each scenario
file becomes one item named after the scenario; its tags are keywords (``pytest -k
demo``); a failing scenario shows every failing expectation, not a traceback.

Disable it with ``-p no:planexec``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from planexec.errors import PlanexecError

if TYPE_CHECKING:
    from planexec.regress.report import ScenarioResult

__all__ = ["ScenarioFailed", "ScenarioFile", "ScenarioItem", "pytest_collect_file"]

_SUFFIX = ".scenario.yaml"


class ScenarioFailed(PlanexecError):
    """A scenario's expectations did not hold, or it could not run."""

    def __init__(self, result: ScenarioResult) -> None:
        super().__init__(result.first_problem)
        self.result = result


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect a ``*.scenario.yaml`` file as a `ScenarioFile`."""
    if file_path.name.endswith(_SUFFIX):
        collector: ScenarioFile = ScenarioFile.from_parent(parent, path=file_path)
        return collector
    return None


class ScenarioFile(pytest.File):
    """A scenario file: one `ScenarioItem`."""

    def collect(self) -> Any:
        """Yield the file's item (named after the scenario, or the file if unreadable)."""
        name = self.path.name[: -len(_SUFFIX)]
        tags: list[str] = []
        try:
            import yaml

            data = yaml.safe_load(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                name = str(data.get("name") or name)
                raw_tags = data.get("tags") or []
                tags = [str(t) for t in raw_tags] if isinstance(raw_tags, list) else []
        except Exception:  # noqa: BLE001 - the item reports an unreadable file when it runs
            pass
        item = ScenarioItem.from_parent(self, name=name)
        for tag in tags:
            item.extra_keyword_matches.add(tag)
        yield item


class ScenarioItem(pytest.Item):
    """One scenario, run by `planexec.regress.runner.run_scenario`."""

    def runtest(self) -> None:
        """Run the scenario; skip or fail with its result."""
        from planexec.regress.runner import run_scenario

        result = run_scenario(self.path)
        if result.status == "skipped":
            pytest.skip(result.error or "skipped by the scenario")
        if result.status != "passed":
            raise ScenarioFailed(result)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | Any:
        """A scenario failure reads as its failing expectations; anything else as usual."""
        if isinstance(excinfo.value, ScenarioFailed):
            return excinfo.value.result.describe()
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the item comes from, for pytest's report."""
        return self.path, None, f"scenario: {self.name}"
