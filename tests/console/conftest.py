"""Console test fixtures.

Tests run with ``--import-mode=importlib``; this directory goes on ``sys.path`` so the
tests (and the ``planexec run`` subprocesses that record their runs) can import
``console_tools`` and ``console_fixtures``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from console_fixtures import Recorded, record_runs  # noqa: E402


@pytest.fixture(scope="session")
def recorded_once(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The runs, recorded once per session by ``planexec run`` (three processes)."""
    return record_runs(tmp_path_factory.mktemp("console-runs"))


@pytest.fixture
def recorded(recorded_once: Recorded, tmp_path: Path) -> Recorded:
    """A copy of the recorded store for one test: a failed run, and ``pay`` and ``close``
    paused for approval."""
    for f in recorded_once.store.parent.glob(recorded_once.store.name + "*"):
        shutil.copy(f, tmp_path / f.name)
    return Recorded(
        store=tmp_path / recorded_once.store.name,
        failed=recorded_once.failed,
        pay=recorded_once.pay,
        close=recorded_once.close,
    )
