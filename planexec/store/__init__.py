"""Durable runs: the run store, which records runs and reads them back.

- `RunStore`: the protocol; `MemoryRunStore` (in memory), `SQLiteRunStore` (one
  file, the default) and `PostgresRunStore` (one PostgreSQL database shared by many
  hosts: a ``postgresql://`` URL).
- `default_store_path` / `open_store`: where runs are recorded unless told otherwise
  (``$PLANEXEC_STORE``, else ``runs.sqlite3`` in the user data directory).
- `run_from_store`: a recorded run read back as a `Run`.

The store observes runs and never drives them: resuming and recorded execution are run
drivers, in `planexec.runs` (`plan_resume`, `resume_run`, `execute_recorded`).
"""

from __future__ import annotations

import os
from pathlib import Path

from planexec.store.base import (
    LEASE_TTL,
    ApprovalRecord,
    CancelRequest,
    Lease,
    RecordedPlan,
    RecordedStep,
    RequestState,
    RunRecord,
    RunStore,
    StartedCall,
)
from planexec.store.memory import MemoryRunStore
from planexec.store.postgres import PostgresRunStore, is_postgres_url
from planexec.store.reading import run_from_store
from planexec.store.sqlite import SCHEMA_VERSION, SQLiteRunStore

__all__ = [
    "ENV_VAR",
    "LEASE_TTL",
    "MEMORY",
    "SCHEMA_VERSION",
    "ApprovalRecord",
    "CancelRequest",
    "Lease",
    "MemoryRunStore",
    "PostgresRunStore",
    "RecordedPlan",
    "RecordedStep",
    "RequestState",
    "RunRecord",
    "RunStore",
    "SQLiteRunStore",
    "StartedCall",
    "default_store_path",
    "open_store",
    "run_from_store",
]

ENV_VAR = "PLANEXEC_STORE"
"""The environment variable that sets the store location."""

MEMORY = ":memory:"
"""The store "path" that gives a `MemoryRunStore`."""


def default_store_path() -> Path:
    """Return the store file: ``$PLANEXEC_STORE``, else ``runs.sqlite3`` in the user data dir."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return platformdirs.user_data_path("planexec", appauthor=False) / "runs.sqlite3"


def open_store(path: str | os.PathLike[str] | None = None) -> RunStore:
    """Open the run store at ``path`` (default: ``$PLANEXEC_STORE``, else `default_store_path`).

    ``":memory:"`` gives a `MemoryRunStore`; a ``postgresql://`` (or ``postgres://``) URL
    a `PostgresRunStore`; anything else is a `SQLiteRunStore` file.

    Raises:
        StoreError: the file cannot be opened or has a newer schema; the URL is bad or
            its server unreachable.
    """
    target = path if path is not None else os.environ.get(ENV_VAR) or default_store_path()
    if str(target) == MEMORY:
        return MemoryRunStore()
    if is_postgres_url(str(target)):
        return PostgresRunStore(str(target))
    return SQLiteRunStore(Path(target).expanduser())
