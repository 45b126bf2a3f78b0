"""Store test fixtures.

Tests run with ``--import-mode=importlib``; this directory goes on ``sys.path`` so the
tests (and the subprocesses of the crash tests) can import ``store_fixtures``,
``crash_tools`` and ``test_concurrency`` by name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from store_fixtures import StoreFactory  # noqa: E402

from planexec.store import MemoryRunStore, RunStore, SQLiteRunStore  # noqa: E402


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of one kind; SQLite ones share one file."""
    opened: list[RunStore] = []

    def factory() -> RunStore:
        store: RunStore
        if request.param == "memory":
            store = opened[0] if opened else MemoryRunStore()
        else:
            store = SQLiteRunStore(tmp_path / "runs.sqlite3")
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()
