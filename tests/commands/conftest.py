"""CLI test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _store_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``run`` and ``ask`` record by default: never in the user's data directory here."""
    path = tmp_path / "default-runs.sqlite3"
    monkeypatch.setenv("PLANEXEC_STORE", str(path))
    return path
