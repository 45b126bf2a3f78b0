"""Store test fixtures.

``make_store`` gives every store kind the same tests (the contract suite): memory,
SQLite and PostgreSQL. PostgreSQL is ``$PLANEXEC_TEST_POSTGRES_URL`` when set (``.ci/run``
sets it), else a temporary cluster started here from the machine's server binaries
(`pg_cluster`) for the session; without either, the PostgreSQL cases skip, saying why.
Each test gets a database of its own.

Tests run with ``--import-mode=importlib``; this directory goes on ``sys.path`` so the
tests (and the subprocesses of the crash tests) can import ``store_fixtures``,
``crash_tools`` and ``test_concurrency`` by name.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pg_cluster  # noqa: E402
from store_fixtures import StoreFactory  # noqa: E402

from planexec.store import MemoryRunStore, RunStore, SQLiteRunStore  # noqa: E402
from planexec.store.postgres import PostgresRunStore  # noqa: E402

POSTGRES_ENV = "PLANEXEC_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a PostgreSQL server the tests may create databases on (or a skip)."""
    url = os.environ.get(POSTGRES_ENV)
    if url:
        yield url
        return
    bindir = pg_cluster.find_bindir()
    if bindir is None:
        pytest.skip(f"no PostgreSQL: ${POSTGRES_ENV} is not set and no server binaries "
                    "(initdb, pg_ctl) are installed")
    base = Path(tempfile.mkdtemp(prefix="planexec-pg-"))
    try:
        url = pg_cluster.start(base, bindir)
    except BaseException:
        pg_cluster.stop(base, bindir)
        raise
    try:
        yield url
    finally:
        pg_cluster.stop(base, bindir)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server (dropped after the test)."""
    import psycopg

    name = f"planexec_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield urlsplit(postgres_server)._replace(path=f"/{name}").geturl()
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of one kind; SQLite ones share one file, PostgreSQL ones a database."""
    opened: list[RunStore] = []
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""

    def factory() -> RunStore:
        store: RunStore
        if request.param == "memory":
            store = opened[0] if opened else MemoryRunStore()
        elif request.param == "postgres":
            store = PostgresRunStore(url)
        else:
            store = SQLiteRunStore(tmp_path / "runs.sqlite3")
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()
