"""`PostgresRunStore`: runs shared by many hosts, in one PostgreSQL database.

The same records, the same contract and the same durability choices as
`planexec.store.SQLiteRunStore`, for several replicas (``planexec serve --http`` behind
a load balancer, Ray drivers on several hosts) on one database: a run paused on one
host can be read, decided and resumed through another.

- **Schema migrations with a version table**: ``planexec_schema`` holds the schema
  version; `MIGRATIONS` lists the steps from an empty database to the current schema,
  applied in one transaction under an advisory lock (two replicas starting at once
  migrate once). A database written by a newer planexec is refused. Give planexec a
  database (or a schema: ``?options=-csearch_path%3Dplanexec``) of its own.
- **Transactions**: every write is one transaction; the rows it changes are locked by
  the statements that change them (``INSERT ... ON CONFLICT DO UPDATE``, ``UPDATE``),
  so two hosts writing one run serialize on its row. Events are numbered by a sequence.
- **Durability** (the ``durability`` argument, as SQLite's): `handle` commits checkpoint
  events (`planexec.store.base.is_checkpoint`) before it returns; other events ride along
  with the next commit (a result waits at most ``result_delay`` seconds). A commit
  is a prefix of the queue: a recorded step's inputs are recorded too. Every commit is on
  the server when `handle` returns (it survives this process being killed); which
  commits wait for the server's WAL flush (``synchronous_commit = on``, surviving a
  crash of the database host) is the mode: ``"calls"`` those in
  `planexec.store.sqlite.FLUSHED_EVENTS` (an unsafe call's start, ``RunFinished``,
  ``ApprovalDecided``), ``"full"`` all, ``"process"`` none.
- **Group commit, one round trip**: a commit takes the whole queue (every run's events)
  in one transaction, sent in pipeline mode: one round trip for the batch. Commits run
  on a worker thread (``asyncio.to_thread``), never blocking the event loop; events
  queued while a commit is in flight go in the next one.
- **Reads** are synchronous (the `RunStore` protocol), each in its own short
  transaction on the store's connection, and see every other host's commits.

The connection is psycopg 3's (``pip install "planexec[postgres]"``). The protocol's
reads are synchronous, so the store uses psycopg's synchronous connection and moves
commits off the event loop with a thread, as the SQLite store does.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from planexec._log import logger
from planexec.errors import RunNotFoundError, StoreError
from planexec.events import Event, EventBus
from planexec.results import RunStatus
from planexec.store.base import (
    HOST,
    MY_START,
    RUN_FIELDS,
    ApprovalRecord,
    CancelRequest,
    Lease,
    RecordedPlan,
    RecordedStep,
    RequestState,
    RunRecord,
    StartedCall,
    checkpoint,
    export_document,
    run_record,
    unmatched_calls,
)
from planexec.store.cas import CompareAndSet
from planexec.store.codec import dumps, plan_from_json, result_from_json
from planexec.store.rows import MAX_BUFFERED, MAY_BE_SAFE, Effect, Queued, encode, from_data
from planexec.store.sqlite import DURABILITY, FLUSHED_EVENTS, RESULT_DELAY

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresRunStore", "is_postgres_url", "redact"]

T = TypeVar("T")

_V1 = """
CREATE TABLE runs (
    run_id       TEXT PRIMARY KEY,
    question     TEXT NOT NULL DEFAULT '',
    config       TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL,
    created_at   DOUBLE PRECISION,
    updated_at   DOUBLE PRECISION,
    finished_at  DOUBLE PRECISION,
    answer       TEXT,
    error        TEXT,
    error_kind   TEXT,
    plan_version INTEGER,
    pid          INTEGER,
    host         TEXT,
    pid_start    DOUBLE PRECISION,
    ord          BIGSERIAL
);
CREATE INDEX runs_by_created ON runs (created_at);
CREATE INDEX runs_by_status ON runs (status, created_at);
CREATE TABLE plans (
    run_id      TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  DOUBLE PRECISION,
    text        TEXT NOT NULL DEFAULT '',
    reason      TEXT,
    plan        TEXT,
    diagnostics TEXT NOT NULL DEFAULT '[]',
    error       TEXT,
    drafts      TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, version)
);
CREATE TABLE step_results (
    run_id       TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    step_id      INTEGER NOT NULL,
    seq          BIGINT NOT NULL,
    status       TEXT NOT NULL,
    tool         TEXT,
    error_kind   TEXT,
    started_at   DOUBLE PRECISION,
    duration     DOUBLE PRECISION,
    recorded_at  DOUBLE PRECISION,
    result       TEXT NOT NULL,
    PRIMARY KEY (run_id, plan_version, step_id)
);
CREATE TABLE events (
    seq          BIGSERIAL PRIMARY KEY,
    run_id       TEXT NOT NULL,
    ts           DOUBLE PRECISION NOT NULL,
    type         TEXT NOT NULL,
    step_id      INTEGER,
    plan_version INTEGER,
    data         TEXT NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, seq);
"""


def _migrate_v1(conn: psycopg.Connection[Any]) -> None:
    for statement in _V1.split(";"):
        if statement.strip():
            conn.execute(statement)


_V2 = """
CREATE TABLE leases (
    run_id       TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    pid          INTEGER,
    host         TEXT,
    pid_start    DOUBLE PRECISION,
    acquired_at  DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    ttl          DOUBLE PRECISION NOT NULL
);
CREATE TABLE approvals (
    run_id       TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    step_id      INTEGER NOT NULL,
    request_no   INTEGER NOT NULL,
    state        TEXT NOT NULL,
    opened_at    DOUBLE PRECISION NOT NULL,
    record       TEXT NOT NULL,
    PRIMARY KEY (run_id, plan_version, step_id, request_no)
);
CREATE INDEX approvals_by_run ON approvals (run_id, opened_at);
"""


def _migrate_v2(conn: psycopg.Connection[Any]) -> None:
    """One driver per run (leases) and approval requests as durable, decided-once rows."""
    for statement in _V2.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_owners(conn: psycopg.Connection[Any]) -> None:
    """The principal that started each run (a shared ``planexec serve --http``)."""
    conn.execute(
        "CREATE TABLE run_owners (run_id TEXT PRIMARY KEY, principal TEXT NOT NULL, "
        "created_at DOUBLE PRECISION NOT NULL)"
    )


Migration = tuple[int, Callable[["psycopg.Connection[Any]"], None]]

MIGRATIONS: list[Migration] = [(1, _migrate_v1), (2, _migrate_v2), (3, _migrate_owners)]
"""Schema steps ``(version, apply)`` in order; a database at version N gets every step > N."""

SCHEMA_VERSION = MIGRATIONS[-1][0]
"""The schema version this planexec writes."""

_MIGRATION_LOCK = 0x706C616E65786563  # "planexec": the advisory lock migrations take

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> bool:
    """Whether a store location names a PostgreSQL database (``postgresql://...``)."""
    return isinstance(target, str) and target.startswith(_SCHEMES)


def redact(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)[1]
        user = parts.username or ""
        return parts._replace(netloc=f"{user}:***@{netloc}").geturl()
    except ValueError:
        return "postgresql://(unparseable URL)"


def _request(text: str) -> ApprovalRecord:
    """An ``approvals`` row's record (`ApprovalRecord.to_dict`'s JSON) read back."""
    data = json.loads(text)
    data["state"] = RequestState(data["state"])
    return ApprovalRecord(**data)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class PostgresRunStore(CompareAndSet["psycopg.Connection[Any]"]):
    """A `RunStore` in a PostgreSQL database, shared by every process and host that opens it.

    Example:
        >>> store = PostgresRunStore("postgresql://planexec@db/planexec")  # doctest: +SKIP

    Args:
        url: a ``postgresql://`` URL (libpq's: user, password, host, port, database, and
            options such as ``sslmode``).
        durability: ``"calls"`` (default), ``"full"`` or ``"process"``: which commits wait
            for the server's WAL flush (see the module docstring).
        buffer_events: hold non-checkpoint events in memory until the next commit; False
            commits every event at once.
        result_delay: the longest, in seconds, a step's result is held before it is
            committed (0: every result is a checkpoint, as with ``durability="full"``).
        connect_timeout: seconds to wait for the server when connecting.
        clock: the monotonic clock ``result_delay`` is measured with.

    Raises:
        StoreError: a bad URL, an unreachable server, psycopg missing, or a database with
            a newer schema.
    """

    def __init__(
        self,
        url: str,
        *,
        durability: str = "calls",
        buffer_events: bool = True,
        result_delay: float = RESULT_DELAY,
        connect_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if durability not in DURABILITY:
            raise StoreError(
                f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}"
            )
        if not result_delay >= 0:
            raise StoreError(f"result_delay must be 0 or more seconds, not {result_delay!r}")
        if not is_postgres_url(url):
            raise StoreError(f"not a PostgreSQL URL (postgresql://...): {redact(str(url))!r}")
        self.url = url
        self.display = redact(url)
        self.durability = durability
        self.buffer_events = buffer_events
        self.result_delay = float(result_delay)
        self.connect_timeout = connect_timeout
        self._clock = clock
        self._strict_results = durability == "full" or self.result_delay == 0
        self._hooked = type(self)._before_commit is not PostgresRunStore._before_commit
        self._lock = threading.RLock()
        """Held while the connection is in use (a commit or a read)."""
        self._pending_lock = threading.Lock()
        self._pending: list[tuple[int, Queued, bool]] = []
        """Queued events: (ticket, item, whether its commit waits for the WAL flush)."""
        self._tickets = 0
        self._committed = 0
        self._held_since: float | None = None
        self._timer: threading.Timer | None = None
        self._closed = False
        self._conn: psycopg.Connection[Any] | None = None
        self._conn_pid: int | None = None
        self._written: dict[int, Event] = {}
        """Events a store method wrote itself: ignored when a bus delivers them."""
        self.commits = 0
        """Transactions committed by this store object (for benchmarks)."""
        with self._lock:
            self._connection()

    def __repr__(self) -> str:
        return f"PostgresRunStore({self.display!r})"

    def __enter__(self) -> PostgresRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connection, schema --------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        """This process's connection (opened and the schema migrated on first use).

        A connection inherited through ``fork`` is never reused; a broken one is replaced.
        """
        conn = self._conn
        if conn is not None and self._conn_pid == os.getpid() and not conn.closed:
            return conn
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError(
                'the PostgreSQL store needs psycopg: pip install "planexec[postgres]"'
            ) from exc
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout)),
                application_name="planexec",
            )
        except (psycopg.Error, ValueError) as exc:
            raise StoreError(
                f"cannot open the run store {self.display}: {_one_line(exc)}"
            ) from exc
        try:
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._conn_pid = conn, os.getpid()
        return conn

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        import psycopg

        latest = MIGRATIONS[-1][0]
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS planexec_schema (version INTEGER NOT NULL)"
                )
                row = conn.execute("SELECT max(version) FROM planexec_schema").fetchone()
                version = int(row[0]) if row and row[0] is not None else 0
                if version > latest:
                    raise StoreError(
                        f"the run store {self.display} has schema version {version}, newer "
                        f"than this planexec understands ({latest}); upgrade planexec"
                    )
                for target, apply in MIGRATIONS:
                    if target > version:
                        apply(conn)
                        conn.execute("DELETE FROM planexec_schema")
                        conn.execute("INSERT INTO planexec_schema VALUES (%s)", (target,))
                        if version > 0:
                            logger.bind(run_id="-", step_id="-").warning(
                                "run store {}: migrated schema to version {}",
                                self.display, target,
                            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the run store {self.display}: {_one_line(exc)}") from exc

    def schema_version(self) -> int:
        """The schema version of the database (``planexec_schema``)."""
        row = self._read(lambda c: c.execute("SELECT max(version) FROM planexec_schema").fetchone())
        return int(row[0]) if row and row[0] is not None else 0

    @contextmanager
    def _using(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection, held (``_lock``); psycopg errors become `StoreError`."""
        import psycopg

        with self._lock:
            conn = self._connection()
            try:
                yield conn
            except psycopg.Error as exc:
                raise StoreError(f"run store {self.display}: {_one_line(exc)}") from exc

    def _read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn`` in one short read transaction (one snapshot)."""
        with self._using() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return fn(conn)

    # -- recording -----------------------------------------------------------------

    def attach(self, bus: EventBus) -> None:
        """Subscribe `handle` to ``bus``."""
        bus.subscribe(self.handle)

    async def handle(self, event: Event) -> None:
        """Record one event; a checkpoint is committed (per ``durability``) on return.

        The commit takes every event queued (of every run) in one transaction, on a
        worker thread; events queued while it is in flight go in the next commit.
        """
        if self._written and self._skip(event):
            return
        ticket = self._enqueue(event)
        if ticket is not None:
            await asyncio.to_thread(self._commit_through, ticket)

    def record(self, event: Event) -> None:
        """Record one event synchronously (same rules as `handle`)."""
        if self._written and self._skip(event):
            return
        ticket = self._enqueue(event)
        if ticket is not None:
            self._commit_through(ticket)

    async def flush(self) -> None:
        """Commit every event still held in memory (on a worker thread)."""
        await asyncio.to_thread(self.flush_sync)

    def flush_sync(self) -> None:
        """Commit every event still held in memory."""
        with self._pending_lock:
            ticket = self._tickets
        self._commit_through(ticket)

    def write_events(self, batch: list[dict[str, Any]]) -> None:
        """Commit encoded events (`planexec.store.codec.event_to_json`) in one transaction.

        They are committed after (and with) every event already queued.
        """
        with self._pending_lock:
            for data in batch:
                self._tickets += 1
                self._pending.append((self._tickets, from_data(data), False))
            ticket = self._tickets
        self._commit_through(ticket)

    def _policy(self, kind: str, safe: bool) -> tuple[bool, bool]:
        """``(due, flush)`` of an event: committed before its handler returns; WAL-flushed."""
        due = not self.buffer_events or checkpoint(kind, safe) or (
            self._strict_results and kind == "StepFinished"
        )
        if self.durability == "full":
            flush = True
        elif self.durability == "process":
            flush = False
        else:
            flush = kind in FLUSHED_EVENTS and checkpoint(kind, safe)
        return due, flush

    def _enqueue(self, event: Event) -> int | None:
        """Queue an event; return its ticket when it must be committed before returning."""
        item = encode(event)
        kind = item[0][2]
        safe = kind in MAY_BE_SAFE and getattr(event, "safe", None) is True
        due, flush = self._policy(kind, safe)
        with self._pending_lock:
            self._tickets += 1
            ticket = self._tickets
            self._pending.append((ticket, item, flush))
            if not due:
                if self._held_since is not None:
                    due = self._clock() - self._held_since >= self.result_delay
                elif kind == "StepFinished":
                    self._held_since = self._clock()
                    self._start_timer()
            if not due and len(self._pending) < MAX_BUFFERED:
                return None
        return ticket

    def _start_timer(self) -> None:
        """Commit the held results ``result_delay`` seconds from now if nothing does sooner."""
        timer = threading.Timer(self.result_delay, self._commit_held)
        timer.daemon = True
        previous, self._timer = self._timer, timer
        if previous is not None:
            previous.cancel()
        timer.start()

    def _commit_held(self) -> None:
        if self._closed:
            return
        try:
            self.flush_sync()
        except StoreError as exc:  # the next commit (or flush) carries them or raises
            logger.bind(run_id="-", step_id="-").warning(
                "run store {}: committing held results failed: {}", self.display, exc
            )

    def _commit_through(self, ticket: int) -> None:
        """Commit the queue, in one transaction, unless ``ticket`` is already committed.

        A batch that fails goes back to the head of the queue (the next commit takes it
        again) and the failure is raised.
        """
        with self._lock:
            if self._committed >= ticket:
                return
            with self._pending_lock:
                batch, self._pending = self._pending, []
                self._held_since = None
            if not batch:
                return
            flush = any(f for _, _, f in batch)
            try:
                self._write_batch([item for _, item, _ in batch], flush)
            except BaseException:
                with self._pending_lock:
                    self._pending[:0] = batch
                raise
            self._committed = batch[-1][0]
            self.commits += 1

    def _before_commit(self, batch: list[dict[str, Any]]) -> None:
        """Called inside the write transaction, its statements sent, just before ``COMMIT``.

        ``batch``: the batch's events (decoded). A hook for instrumentation and crash
        tests (kill the process mid-write); it does nothing here.
        """

    def _write_batch(self, batch: list[Queued], flush: bool) -> None:
        """Write a batch of events in one transaction, sent as one pipeline."""
        with self._using() as conn, conn.pipeline() as pipe, conn.transaction():
            cur = conn.cursor()
            if not flush:
                cur.execute("SET LOCAL synchronous_commit = off")
            self._write_rows(cur, batch)
            if self._hooked:
                pipe.sync()
                self._before_commit([json.loads(q[0][5]) for q in batch])

    def _write_rows(self, cur: psycopg.Cursor[Any], batch: list[Queued]) -> None:
        """The statements that record ``batch``, in order (inside a transaction)."""
        spans: dict[str, list[float]] = {}
        for row, _ in batch:
            span = spans.get(row[0])
            if span is None:
                spans[row[0]] = [row[1], row[1]]
            else:
                span[1] = row[1]
        for run_id, (first_ts, last_ts) in spans.items():
            cur.execute(
                "INSERT INTO runs (run_id, status, created_at, updated_at, pid, host, "
                "pid_start) VALUES (%s, 'RUNNING', %s, %s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO UPDATE SET updated_at = EXCLUDED.updated_at",
                (run_id, first_ts, last_ts, os.getpid(), HOST, MY_START),
            )
        plain: list[tuple[Any, ...]] = []
        for row, effect in batch:
            if effect is None:
                plain.append(row)
                continue
            if plain:
                self._insert_events(cur, plain)
                plain = []
            self._insert_events(cur, [row])
            if isinstance(effect, Effect):
                self._apply(cur, effect)
            else:  # a StepFinished: numbered as its event row
                self._write_step(cur, row, effect)
        if plain:
            self._insert_events(cur, plain)

    @staticmethod
    def _insert_events(cur: psycopg.Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        cur.executemany(
            "INSERT INTO events (run_id, ts, type, step_id, plan_version, data) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )

    @staticmethod
    def _write_step(cur: psycopg.Cursor[Any], row: tuple[Any, ...], step: tuple[Any, ...]) -> None:
        """Write a result to ``step_results`` (the latest of a step replaces it)."""
        run_id, ts = row[0], row[1]
        cur.execute(
            "INSERT INTO step_results (run_id, plan_version, step_id, status, tool, error_kind, "
            "started_at, duration, recorded_at, result, seq) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, currval('events_seq_seq')) "
            "ON CONFLICT (run_id, plan_version, step_id) DO UPDATE SET "
            "status = EXCLUDED.status, tool = EXCLUDED.tool, error_kind = EXCLUDED.error_kind, "
            "started_at = EXCLUDED.started_at, duration = EXCLUDED.duration, "
            "recorded_at = EXCLUDED.recorded_at, result = EXCLUDED.result, seq = EXCLUDED.seq",
            (run_id, *step[:7], ts, step[7]),
        )
        if step[2] == "FAILED" and step[4]:
            cur.execute("UPDATE runs SET error_kind = %s WHERE run_id = %s", (step[4], run_id))

    @staticmethod
    def _apply(cur: psycopg.Cursor[Any], effect: Effect) -> None:
        """Apply what one event but a ``StepFinished`` changes in other tables."""
        data = effect.data
        run_id, ts, kind = data["run_id"], float(data["ts"]), data["type"]
        if kind == "RunStarted":
            cur.execute(
                "UPDATE runs SET question = %s, config = %s, status = 'RUNNING', pid = %s, "
                "host = %s, pid_start = %s, finished_at = NULL, error = NULL WHERE run_id = %s",
                (data.get("question", ""), dumps(data.get("config") or {}), os.getpid(),
                 HOST, MY_START, run_id),
            )
        elif kind == "PlanCreated":
            plan = data.get("plan")
            version = int(data["version"])
            cur.execute(
                "INSERT INTO plans (run_id, version, created_at, text, reason, plan, "
                "diagnostics, error, drafts) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (run_id, version) DO UPDATE SET created_at = EXCLUDED.created_at, "
                "text = EXCLUDED.text, reason = EXCLUDED.reason, plan = EXCLUDED.plan, "
                "diagnostics = EXCLUDED.diagnostics, error = EXCLUDED.error, "
                "drafts = EXCLUDED.drafts",
                (run_id, version, ts, data.get("text", ""), data.get("reason"),
                 effect.plan_text, dumps(plan.get("diagnostics", []) if plan else []),
                 data.get("error"), dumps(list(data.get("drafts") or []))),
            )
            cur.execute(
                "UPDATE runs SET plan_version = GREATEST(COALESCE(plan_version, 0), %s) "
                "WHERE run_id = %s",
                (version, run_id),
            )
        elif kind == "StepDiscarded":
            cur.execute(
                "DELETE FROM step_results WHERE run_id = %s AND plan_version = %s "
                "AND step_id = %s",
                (run_id, int(data.get("plan_version", 1)), int(data["step_id"])),
            )
        elif kind == "RecoveryDecided" and data.get("error_kind"):
            cur.execute(
                "UPDATE runs SET error_kind = %s WHERE run_id = %s", (data["error_kind"], run_id)
            )
        elif kind == "RunFinished":
            cur.execute(
                "UPDATE runs SET status = %s, answer = %s, error = %s, finished_at = %s "
                "WHERE run_id = %s",
                (str(RunStatus(data["status"])), data.get("answer"), data.get("error"), ts,
                 run_id),
            )

    def mark_status(
        self,
        run_id: str,
        status: RunStatus | str,
        *,
        error: str | None = None,
        error_kind: str | None = None,
    ) -> None:
        """Set a run's status and reason (and, for ``RUNNING``, claim it for this process).

        Raises:
            RunNotFoundError: no such run.
        """
        st = RunStatus(status)
        now = time.time()
        self.flush_sync()  # what is queued (held results among it) comes first
        running = st is RunStatus.RUNNING
        with self._using() as conn, conn.transaction():
            cur = conn.execute(
                "UPDATE runs SET status = %s, error = %s, updated_at = %s, "
                "error_kind = COALESCE(%s, error_kind), "
                "finished_at = CASE WHEN %s THEN %s ELSE NULL END, "
                "pid = CASE WHEN %s THEN %s ELSE pid END, "
                "host = CASE WHEN %s THEN %s ELSE host END, "
                "pid_start = CASE WHEN %s THEN %s ELSE pid_start END WHERE run_id = %s",
                (str(st), error, now, error_kind,
                 st not in (RunStatus.RUNNING, RunStatus.INTERRUPTED), now,
                 running, os.getpid(), running, HOST, running, MY_START, run_id),
            )
            if cur.rowcount == 0:
                raise RunNotFoundError(f"no run {run_id!r} in the store {self.display}")

    # -- leases and approvals ----------------------------------------------------------

    def _skip(self, event: Event) -> bool:
        """Whether a store method wrote ``event`` already (then it is forgotten)."""
        with self._pending_lock:
            return self._written.pop(id(event), None) is event

    def _cas(
        self, run_id: str, fn: Callable[[psycopg.Connection[Any]], T],
        event: Event | None = None,
    ) -> T:
        """Run ``fn`` and append ``event`` in one transaction, holding the run's lock.

        Everything queued before is committed first (a prefix of the events). The
        transaction takes the run's advisory lock (`pg_advisory_xact_lock`), so every
        compare-and-set on one run — from any host — sees the previous one committed,
        rows that do not exist yet included (a first lease, a first request). ``fn``
        raising rolls the whole transaction back. A transaction that appends an event
        waits for the server's WAL flush (unless ``durability="process"``).
        """
        self.flush_sync()
        with self._using() as conn, conn.transaction():
            if event is None or self.durability == "process":
                conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                         (f"planexec-run:{run_id}",))
            out = fn(conn)
            if event is not None:
                self._write_rows(conn.cursor(), [encode(event)])
        self.commits += 1
        if event is not None:
            with self._pending_lock:
                self._written[id(event)] = event
                while len(self._written) > 1024:  # never delivered: forget the oldest
                    del self._written[next(iter(self._written))]
        return out

    @staticmethod
    def _lease_row(conn: psycopg.Connection[Any], run_id: str) -> Lease | None:
        row = conn.execute(
            "SELECT run_id, owner, pid, host, pid_start, acquired_at, heartbeat_at, ttl "
            "FROM leases WHERE run_id = %s", (run_id,),
        ).fetchone()
        return Lease(*row) if row is not None else None

    @staticmethod
    def _put_lease(conn: psycopg.Connection[Any], lease: Lease) -> None:
        conn.execute(
            "INSERT INTO leases (run_id, owner, pid, host, pid_start, acquired_at, "
            "heartbeat_at, ttl) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET owner = EXCLUDED.owner, pid = EXCLUDED.pid, "
            "host = EXCLUDED.host, pid_start = EXCLUDED.pid_start, "
            "acquired_at = EXCLUDED.acquired_at, heartbeat_at = EXCLUDED.heartbeat_at, "
            "ttl = EXCLUDED.ttl",
            (lease.run_id, lease.owner, lease.pid, lease.host, lease.pid_start,
             lease.acquired_at, lease.heartbeat_at, lease.ttl),
        )

    @staticmethod
    def _drop_lease(conn: psycopg.Connection[Any], run_id: str, owner: str) -> bool:
        cur = conn.execute("DELETE FROM leases WHERE run_id = %s AND owner = %s",
                           (run_id, owner))
        return cur.rowcount > 0

    def get_lease(self, run_id: str) -> Lease | None:
        """The run's lease as recorded, or None."""
        return self._read(lambda conn: self._lease_row(conn, run_id))

    def set_owner(self, run_id: str, principal: str) -> None:
        """Record the principal that started a run (the first one recorded stands)."""
        now = time.time()

        def insert(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "INSERT INTO run_owners (run_id, principal, created_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (run_id) DO NOTHING",
                (run_id, principal, now),
            )

        self._cas(run_id, insert)

    def owner(self, run_id: str) -> str | None:
        """The principal that started a run (None: none was recorded)."""
        row = self._read(
            lambda conn: conn.execute(
                "SELECT principal FROM run_owners WHERE run_id = %s", (run_id,)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    @staticmethod
    def _latest_request(
        conn: psycopg.Connection[Any], run_id: str, plan_version: int, step_id: int
    ) -> ApprovalRecord | None:
        row = conn.execute(
            "SELECT record FROM approvals WHERE run_id = %s AND plan_version = %s "
            "AND step_id = %s ORDER BY request_no DESC LIMIT 1 FOR UPDATE",
            (run_id, plan_version, step_id),
        ).fetchone()
        return _request(row[0]) if row is not None else None

    @staticmethod
    def _put_request(conn: psycopg.Connection[Any], rec: ApprovalRecord) -> None:
        conn.execute(
            "INSERT INTO approvals (run_id, plan_version, step_id, request_no, state, "
            "opened_at, record) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id, plan_version, step_id, request_no) DO UPDATE SET "
            "state = EXCLUDED.state, opened_at = EXCLUDED.opened_at, record = EXCLUDED.record",
            (rec.run_id, rec.plan_version, rec.step_id, rec.request_no, str(rec.state),
             rec.opened_at, dumps(rec.to_dict())),
        )

    def approval_requests(self, run_id: str) -> list[ApprovalRecord]:
        """Every request of a run, in the order opened."""

        def read(conn: psycopg.Connection[Any]) -> list[ApprovalRecord]:
            rows = conn.execute(
                "SELECT record FROM approvals WHERE run_id = %s ORDER BY opened_at, request_no",
                (run_id,),
            ).fetchall()
            return [_request(r[0]) for r in rows]

        return self._read(read)

    # -- reading ---------------------------------------------------------------------

    _RUN_COLUMNS = ", ".join(RUN_FIELDS)

    def _record(self, conn: psycopg.Connection[Any], row: tuple[Any, ...]) -> RunRecord:
        fields = dict(zip(RUN_FIELDS, row, strict=True))
        fields["config"] = json.loads(fields["config"] or "{}")
        version = fields["plan_version"] if fields["plan_version"] is not None else 1
        counts = {
            status: int(n)
            for status, n in conn.execute(
                "SELECT status, COUNT(*) FROM step_results WHERE run_id = %s "
                "AND plan_version = %s GROUP BY status",
                (fields["run_id"], version),
            ).fetchall()
        }
        found = conn.execute(
            "SELECT plan FROM plans WHERE run_id = %s AND version = %s",
            (fields["run_id"], version),
        ).fetchone()
        plan = json.loads(found[0]) if found is not None and found[0] else None
        return run_record(fields, counts, len(plan["steps"]) if plan else None)

    def _require(self, conn: psycopg.Connection[Any], run_id: str) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,)).fetchone() is None:
            raise RunNotFoundError(f"no run {run_id!r} in the store {self.display}")

    def get_run(self, run_id: str) -> RunRecord:
        """Return a run's record.

        Raises:
            RunNotFoundError: no such run.
        """

        def read(conn: psycopg.Connection[Any]) -> RunRecord:
            row = conn.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in the store {self.display}")
            return self._record(conn, row)

        return self._read(read)

    def list_runs(self, status: RunStatus | str | None = None, limit: int = 50) -> list[RunRecord]:
        """Return runs, newest first, optionally only those with ``status``.

        ``INTERRUPTED`` lists runs recorded as running whose process (on this host) is gone.
        """
        want = RunStatus(status) if status is not None else None
        if limit <= 0:
            return []

        def read(conn: psycopg.Connection[Any]) -> list[RunRecord]:
            sql = f"SELECT {self._RUN_COLUMNS} FROM runs"
            params: tuple[Any, ...] = ()
            if want is not None:
                stored = RunStatus.RUNNING if want is RunStatus.INTERRUPTED else want
                sql += " WHERE status IN (%s, %s)"
                params = (str(stored), str(want))
            sql += " ORDER BY created_at DESC NULLS LAST, ord DESC"
            out: list[RunRecord] = []
            for row in conn.execute(sql, params).fetchall():
                record = self._record(conn, row[:len(RUN_FIELDS)])
                if want is None or record.status is want:
                    out.append(record)
                    if len(out) >= limit:
                        break
            return out

        return self._read(read)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's events in order, as JSON data (committed events only)."""

        def read(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            self._require(conn, run_id)
            rows = conn.execute(
                "SELECT data FROM events WHERE run_id = %s ORDER BY seq", (run_id,)
            ).fetchall()
            return [json.loads(r[0]) for r in rows]

        return self._read(read)

    def step_results(self, run_id: str, plan_version: int | None = None) -> list[RecordedStep]:
        """Return the latest result of each step, in the order they were recorded."""

        def read(conn: psycopg.Connection[Any]) -> list[RecordedStep]:
            self._require(conn, run_id)
            sql = "SELECT plan_version, recorded_at, result FROM step_results WHERE run_id = %s"
            params: tuple[Any, ...] = (run_id,)
            if plan_version is not None:
                sql += " AND plan_version = %s"
                params += (plan_version,)
            rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
            return [
                RecordedStep(plan_version=v, result=result_from_json(json.loads(r)),
                             recorded_at=ts)
                for v, ts, r in rows
            ]

        return self._read(read)

    def plans(self, run_id: str) -> list[RecordedPlan]:
        """Return every plan version of a run, oldest first."""

        def read(conn: psycopg.Connection[Any]) -> list[RecordedPlan]:
            self._require(conn, run_id)
            rows = conn.execute(
                "SELECT version, created_at, text, reason, plan, error, drafts FROM plans "
                "WHERE run_id = %s ORDER BY version",
                (run_id,),
            ).fetchall()
            return [
                RecordedPlan(
                    version=v,
                    plan=plan_from_json(json.loads(p)) if p else None,
                    text=text or "",
                    reason=reason,
                    created_at=ts,
                    error=error,
                    drafts=tuple(json.loads(drafts or "[]")),
                )
                for v, ts, text, reason, p, error, drafts in rows
            ]

        return self._read(read)

    def cancel_request(self, run_id: str) -> CancelRequest | None:
        """Return the run's latest cancel request (committed, by any host), if any."""

        def read(conn: psycopg.Connection[Any]) -> CancelRequest | None:
            self._require(conn, run_id)
            row = conn.execute(
                "SELECT data FROM events WHERE run_id = %s AND type = 'RunCancelRequested' "
                "ORDER BY seq DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            return None if row is None else CancelRequest.from_event(json.loads(row[0]))

        return self._read(read)

    def started_calls_without_result(self, run_id: str) -> list[StartedCall]:
        """Return the steps whose tool call started and whose result was never recorded."""

        def read(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            self._require(conn, run_id)
            rows = conn.execute(
                "SELECT data FROM events WHERE run_id = %s "
                "AND type IN ('ToolCallStarted', 'StepFinished') ORDER BY seq",
                (run_id,),
            ).fetchall()
            return [json.loads(r[0]) for r in rows]

        return unmatched_calls(self._read(read))

    def export(self, run_id: str) -> dict[str, Any]:
        """Return everything recorded about a run as one JSON document."""
        return export_document(self, run_id)

    def close(self) -> None:
        """Commit held events and close the connection."""
        self._closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._conn is not None and self._conn_pid == os.getpid():
            try:
                self.flush_sync()
            finally:
                with self._lock:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
        else:
            self._conn = None
