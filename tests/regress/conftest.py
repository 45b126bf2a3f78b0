from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

SITES_PLAN = """\
#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: The sites.
"""


@pytest.fixture
def scenarios_dir() -> Path:
    return SCENARIOS


def _sites_scenario(**extra: object) -> dict[str, object]:
    """A small valid scenario (as data) with a scripted plan and answer."""
    data: dict[str, object] = {
        "name": "sites",
        "tags": ["unit"],
        "question": "Which sites are there?",
        "tools": [
            {"name": "sites", "output": {"sites": [{"name": "MAIN"}]}, "hints": {"read_only": True}}
        ],
        "model": {"replies": [SITES_PLAN, "There is one site, MAIN."]},
        "expect": {"status": "SUCCEEDED", "tool_sequence": ["sites"]},
    }
    data.update(extra)
    return data


@pytest.fixture
def sites_scenario() -> Callable[..., dict[str, object]]:
    """Build a small valid scenario (as data); keyword arguments replace its keys."""
    return _sites_scenario
