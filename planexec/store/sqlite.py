"""`SQLiteRunStore`: the default run store, one SQLite file.

- **WAL mode**: readers (``planexec runs list`` in another terminal) never block the
  writer, and a commit survives the process being killed.
- **Schema versioning**: ``PRAGMA user_version`` holds the schema version; `MIGRATIONS`
  lists the steps from an empty file to the current schema, applied in one transaction
  when a file is opened. A file written by a newer planexec is refused.
- **One writer at a time, short transactions**: every write is one ``BEGIN IMMEDIATE``
  transaction holding a few rows. Inside a process a lock serializes use of the
  connection; between processes SQLite's file lock does, with ``busy_timeout`` and then
  retries with exponential backoff and jitter on ``database is locked``.
- **Durability**: `handle` commits checkpoint events (`planexec.store.base.is_checkpoint`:
  ``PlanCreated``, the ``ToolCallStarted`` of an unsafe tool, approvals,
  ``RunFinished``, ...) before it returns. Other events ride along with the next
  commit: a safe tool's call start, and every step's result, which waits at most
  ``result_delay`` seconds (`RESULT_DELAY`) — every result a later unsafe call can
  depend on is committed with that call's start, before the call. A commit takes the
  queue in order, so what is committed is always a prefix of the events: a recorded
  step's inputs are recorded too. ``durability="full"`` (or ``result_delay=0``) makes
  every result a checkpoint. Every commit survives the process being killed; which
  commits are also flushed to disk against an OS crash is the ``durability`` mode
  (`FLUSHED_EVENTS`).
- **Group commit**: one queue of events for every run; a commit takes the whole queue,
  in one transaction. A commit that is not flushed runs on the calling thread when no
  other commit is in flight (a short transaction that never waits); when other steps
  are running, it waits for the end of the event loop's turn, so the results recorded
  in that turn share it. A flushed commit runs on the calling thread too when no other
  step of the store is running (a chain of unsafe calls: no thread hand-off per call)
  and the store's last flushed commit took less than ``loop_flush_limit`` seconds
  (`LOOP_FLUSH_LIMIT`, 1 ms): a disk that is slow to flush is measured and never
  blocks the loop twice in a row. Any other flushed commit (call starts that begin
  together, in a fan-out: one flush for all), and one that finds a commit in flight or
  the file locked, is left to the store's writer thread, which commits everything
  queued meanwhile with one flush, waiting and retrying on locks: a lock wait never
  blocks the event loop. The writer thread also runs the WAL checkpoints. Reads are
  short and synchronous.
- **Cheap per event**: the store subscribes a synchronous observer that returns its
  commit only when there is one to wait for (`attach`); an event is encoded once, at
  once (a tool may change its arguments afterwards), straight to the JSON text of its
  ``events`` row for the events of every step (`planexec.store.codec.event_text`), and
  queued as that row; a result's text (and a plan's) is made once for its event and
  its own table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import planexec._fastpaths as _fastpaths
from planexec._log import logger
from planexec.errors import RunNotFoundError, StoreError
from planexec.events import Event, EventBus, ToolCallStarted
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
from planexec.store.codec import (
    dumps,
    plan_from_json,
    result_from_json,
)
from planexec.store.rows import MAX_BUFFERED as _MAX_BUFFERED
from planexec.store.rows import MAY_BE_SAFE as _MAY_BE_SAFE
from planexec.store.rows import Effect as _Effect
from planexec.store.rows import Queued as _Queued
from planexec.store.rows import encode as _encode
from planexec.store.rows import from_data as _from_data

__all__ = [
    "DURABILITY",
    "FLUSHED_EVENTS",
    "LOOP_FLUSH_LIMIT",
    "MIGRATIONS",
    "RESULT_DELAY",
    "SCHEMA_VERSION",
    "SQLiteRunStore",
]

T = TypeVar("T")

_V1 = """
CREATE TABLE runs (
    run_id       TEXT PRIMARY KEY,
    question     TEXT NOT NULL DEFAULT '',
    config       TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL,
    created_at   REAL,
    updated_at   REAL,
    finished_at  REAL,
    answer       TEXT,
    error        TEXT,
    error_kind   TEXT,
    plan_version INTEGER,
    pid          INTEGER,
    host         TEXT
);
CREATE INDEX runs_by_created ON runs (created_at);
CREATE INDEX runs_by_status ON runs (status, created_at);
CREATE TABLE plans (
    run_id      TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  REAL,
    text        TEXT NOT NULL DEFAULT '',
    reason      TEXT,
    plan        TEXT,
    diagnostics TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, version)
);
CREATE TABLE step_results (
    run_id       TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    step_id      INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    status       TEXT NOT NULL,
    tool         TEXT,
    error_kind   TEXT,
    started_at   REAL,
    duration     REAL,
    recorded_at  REAL,
    result       TEXT NOT NULL,
    PRIMARY KEY (run_id, plan_version, step_id)
);
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL,
    ts           REAL NOT NULL,
    type         TEXT NOT NULL,
    step_id      INTEGER,
    plan_version INTEGER,
    data         TEXT NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, seq);
"""


def _migrate_v1(conn: sqlite3.Connection) -> None:
    for statement in _V1.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_v2(conn: sqlite3.Connection) -> None:
    """Record when a run's process started, so a reused pid is not taken for it."""
    conn.execute("ALTER TABLE runs ADD COLUMN pid_start REAL")


def _migrate_v3(conn: sqlite3.Connection) -> None:
    """Keep why a plan version has no plan, and the planner's rejected drafts."""
    conn.execute("ALTER TABLE plans ADD COLUMN error TEXT")
    conn.execute("ALTER TABLE plans ADD COLUMN drafts TEXT NOT NULL DEFAULT '[]'")


_V4 = """
CREATE TABLE leases (
    run_id       TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    pid          INTEGER,
    host         TEXT,
    pid_start    REAL,
    acquired_at  REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    ttl          REAL NOT NULL
);
CREATE TABLE approvals (
    run_id       TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    step_id      INTEGER NOT NULL,
    request_no   INTEGER NOT NULL,
    state        TEXT NOT NULL,
    opened_at    REAL NOT NULL,
    record       TEXT NOT NULL,
    PRIMARY KEY (run_id, plan_version, step_id, request_no)
);
CREATE INDEX approvals_by_run ON approvals (run_id, opened_at);
"""


def _migrate_v4(conn: sqlite3.Connection) -> None:
    """One driver per run (leases) and approval requests as durable, decided-once rows."""
    for statement in _V4.split(";"):
        if statement.strip():
            conn.execute(statement)


def _migrate_owners(conn: sqlite3.Connection) -> None:
    """The principal that started each run (a shared ``planexec serve --http``)."""
    conn.execute(
        "CREATE TABLE run_owners (run_id TEXT PRIMARY KEY, principal TEXT NOT NULL, "
        "created_at REAL NOT NULL)"
    )


Migration = tuple[int, Callable[[sqlite3.Connection], None]]

MIGRATIONS: list[Migration] = [
    (1, _migrate_v1), (2, _migrate_v2), (3, _migrate_v3), (4, _migrate_v4),
    (5, _migrate_owners),
]
"""Schema steps ``(version, apply)`` in order; a file at version N gets every step > N."""

SCHEMA_VERSION = MIGRATIONS[-1][0]
"""The schema version this planexec writes."""

_COUNTED = frozenset({"StepStarted", "StepFinished", "RunFinished"})
"""Event types that change the count of running steps (`SQLiteRunStore._count_running`)."""

_CHECKPOINT_EVERY = 200
"""Commits on the event loop's side between two checkpoints by the writer thread."""

RESULT_DELAY = 0.25
"""The default ``result_delay`` of `SQLiteRunStore`, in seconds."""

LOOP_FLUSH_LIMIT = 0.001
"""The default ``loop_flush_limit`` of `SQLiteRunStore`, in seconds."""

DURABILITY = ("calls", "full", "process")
"""The durability modes of `SQLiteRunStore` (see its ``durability`` argument)."""

FLUSHED_EVENTS = frozenset(
    {"ToolCallStarted", "RunFinished", "ApprovalDecided", "RunCancelRequested"}
)
"""Events whose commit is flushed to disk in the ``"calls"`` durability mode.

Losing the ``ToolCallStarted`` of an unsafe tool to an OS crash would let resume call it
again as if it had never been called; losing a later ``StepFinished`` only makes resume
see an interrupted call (re-run if safe, ``UNKNOWN_OUTCOME`` if not). The flush of a
``ToolCallStarted`` also makes every earlier commit durable (the WAL is one file,
written in order), so a step's result is on disk before any later unsafe call starts.
The call start of a safe tool is not a checkpoint (`planexec.store.base.is_checkpoint`)
and is not flushed: resume runs such a step again either way.
"""


def _request_from_text(text: str) -> ApprovalRecord:
    data = json.loads(text)
    data["state"] = RequestState(data["state"])
    return ApprovalRecord(**data)


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def _not_writable(directory: Path) -> str:
    if _read_only_fs(directory):
        return f"the directory {directory} is on a read-only file system"
    return f"the directory {directory} is not writable (permission denied)"


def open_problem(path: str | os.PathLike[str]) -> str | None:
    """Say why a store file cannot be opened for writing, from what the file system shows.

    SQLite only says ``unable to open database file``; this names the path and the
    reason: a directory that does not exist (and cannot be created), a file where a
    directory is expected, a directory where the file is expected, a file or directory
    that is not writable, a read-only file system. (SQLite also writes ``-wal`` and
    ``-shm`` files next to the store, so its directory must be writable too.)

    Args:
        path: the store file.

    Returns:
        The reason, or None when nothing visible prevents opening it.
    """
    target = Path(os.path.abspath(path))
    parent = target.parent
    probe = parent
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if probe != parent:  # the directory is missing
        if not probe.is_dir():
            return (
                f"{probe} is a file, not a directory, so the directory {parent} cannot "
                "be created"
            )
        if not os.access(probe, os.W_OK | os.X_OK) or _read_only_fs(probe):
            return f"the directory {parent} does not exist and cannot be created: " + (
                _not_writable(probe)
            )
        return f"the directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if target.is_dir():
        return f"{target} is a directory, not a file"
    if not os.access(parent, os.W_OK | os.X_OK) or _read_only_fs(parent):
        what = "" if target.exists() else f", so the file {target.name} cannot be created"
        return _not_writable(parent) + (
            what or f" (SQLite must create {target.name}-wal and -shm next to the file)"
        )
    if target.exists() and not os.access(target, os.R_OK | os.W_OK):
        return f"the file {target} is not readable and writable (permission denied)"
    return None


def _open_error(path: Path, exc: BaseException) -> StoreError:
    why = open_problem(path)
    detail = f"{why} ({exc})" if why else str(exc)
    return StoreError(f"cannot open the run store {path}: {detail}")


@dataclass(frozen=True)
class _Waiter:
    """Someone waiting for a queued event's commit (``future`` None: a synchronous caller)."""

    future: asyncio.Future[None] | None
    flush: bool
    """Whether that commit must also be flushed to disk."""
    loop: asyncio.AbstractEventLoop | None


def _resolve(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)


def _settle(waiters: list[_Waiter], exc: BaseException | None) -> None:
    """Tell each waiter its commit is done (or failed with ``exc``), on its own loop."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for w in waiters:
        if w.future is None or w.loop is None:
            continue
        if w.loop is running:
            _resolve(w.future, exc)
        else:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                w.loop.call_soon_threadsafe(_resolve, w.future, exc)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SQLiteRunStore(CompareAndSet[sqlite3.Connection]):
    """A `RunStore` in one SQLite file, safe for several runs and several processes.

    Args:
        path: the database file (created with its parent directories if absent).
        durability: what a commit survives. ``"calls"`` (the default): every commit
            survives the process being killed, and the commit of an unsafe tool's
            ``ToolCallStarted`` or of a ``RunFinished`` is also flushed to disk (fsync),
            which makes it — and every earlier commit — survive an OS crash or power
            loss. ``"full"``: every commit is flushed. ``"process"``: none is
            (fastest; survives the process being killed, not an OS crash).
        busy_timeout: seconds SQLite waits for another writer's lock.
        retries: further attempts, with exponential backoff and jitter, when the lock
            is still held after ``busy_timeout``.
        buffer_events: hold non-checkpoint events in memory until the next commit
            (fewer transactions); False commits every event at once.
        result_delay: the longest, in seconds, that a step's result is held in memory
            before it is committed, when no checkpoint commits it sooner: what a crash
            of the process can lose of finished work (on resume, a safe step runs
            again; an unsafe call whose result was lost has an unknown outcome and is
            not made again without a decision). Checked when events arrive and by the
            writer thread. 0 commits every result before the handler returns, as
            ``durability="full"`` always does.
        loop_flush_limit: a flushed commit runs on the event loop's thread, when no
            other step is running, only while the last flushed commit took less than
            this many seconds; 0 leaves every flush to the writer thread.
        clock: the monotonic clock that ``result_delay`` and flushes are measured with
            (tests give a fake one).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "calls",
        busy_timeout: float = 5.0,
        retries: int = 6,
        buffer_events: bool = True,
        result_delay: float = RESULT_DELAY,
        loop_flush_limit: float = LOOP_FLUSH_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if durability not in DURABILITY:
            raise StoreError(
                f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}"
            )
        if not result_delay >= 0:
            raise StoreError(f"result_delay must be 0 or more seconds, not {result_delay!r}")
        if not loop_flush_limit >= 0:
            raise StoreError(
                f"loop_flush_limit must be 0 or more seconds, not {loop_flush_limit!r}"
            )
        self.path = Path(path)
        self.durability = durability
        self.busy_timeout = busy_timeout
        self.retries = retries
        self.buffer_events = buffer_events
        self.result_delay = float(result_delay)
        self.loop_flush_limit = float(loop_flush_limit)
        self._last_flush = 0.0
        """Seconds the last flushed commit took (the loop's or the writer's)."""
        self._clock = clock
        self._strict_results = durability == "full" or self.result_delay == 0
        self._held_since: float | None = None
        """When the oldest result held in the queue was queued (``clock``), or None."""
        self._lock = threading.RLock()
        self._pending: list[_Queued] = []
        self._hooked = type(self)._before_commit is not SQLiteRunStore._before_commit
        self._policies: dict[str, tuple[bool, bool]] = {}
        self._safe_policies: dict[str, tuple[bool, bool]] = {}
        self._waiters: list[_Waiter] = []
        self._pending_lock = threading.Lock()
        self._wake = threading.Condition()
        self._writer: threading.Thread | None = None
        self._writer_pid: int | None = None
        self._work = False
        self._stopping = False
        self._writer_wakes_at: float | None = None
        """When the waiting writer thread looks at the held results again (``clock``)."""
        self._inline_commits = 0
        self._checkpoint_due = False
        self._running: dict[str, int] = {}
        self._running_total = 0
        self._soon: set[asyncio.AbstractEventLoop] = set()
        self._ckpt: sqlite3.Connection | None = None
        self._conn: sqlite3.Connection | None = None
        self._fast: sqlite3.Connection | None = None
        self._conn_pid: int | None = None
        self._syncs: dict[sqlite3.Connection, str] = {}
        """Each open connection's ``PRAGMA synchronous`` (`_set_sync`)."""
        self._written: dict[int, Event] = {}
        """Events a store method wrote itself: ignored when a bus delivers them."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _open_error(self.path, exc) from exc
        with self._lock:
            self._connection()
        self._restrict_permissions()

    def __repr__(self) -> str:
        return f"SQLiteRunStore({str(self.path)!r})"

    def __enter__(self) -> SQLiteRunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connection, schema, retries ---------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """Return this process's connection, opening (and migrating) it if needed.

        A connection inherited through ``fork`` is never reused.
        """
        if self._conn is not None and self._conn_pid == os.getpid():
            return self._conn
        self._fast = None
        # The file, its -wal and its -shm are created readable by the owner only.
        old_umask = os.umask(0o077)
        try:
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise _open_error(self.path, exc) from exc
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
                mode = self._retry(
                    lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                )
                if str(mode).lower() != "wal":
                    raise StoreError(f"the run store {self.path} cannot use WAL mode ({mode})")
                self._syncs.clear()
                self._retry(lambda: self._migrate(conn))
            except (sqlite3.Error, StoreError) as exc:
                conn.close()
                if open_problem(self.path) is None:
                    raise  # e.g. a newer schema: not a question of access
                raise _open_error(self.path, exc) from exc
            except BaseException:
                conn.close()
                raise
        finally:
            os.umask(old_umask)
        self._conn, self._conn_pid = conn, os.getpid()
        return conn

    def _private_files(self) -> list[Path]:
        return [self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))]

    def _restrict_permissions(self) -> None:
        """Make the store file and its ``-wal``/``-shm`` files readable by the owner only.

        Runs hold questions, tool arguments, outputs and answers. Files created by this
        store are 0600 from the start (see `_connection`); this also tightens files that
        an older planexec created, when they belong to this user.
        """
        for f in self._private_files():
            try:
                st = f.stat()
                if st.st_uid == os.getuid() and st.st_mode & 0o077:
                    f.chmod(0o600)
            except (OSError, AttributeError):  # absent, not ours, or no getuid (Windows)
                continue

    def _fast_connection(self) -> sqlite3.Connection:
        """A second connection that never waits for a lock (``_set_sync`` chooses its flush)."""
        self._connection()
        if self._fast is None:
            try:
                fast = sqlite3.connect(
                    self.path, timeout=0.0, isolation_level=None, check_same_thread=False
                )
                fast.execute("PRAGMA busy_timeout = 0")
                fast.execute("PRAGMA synchronous = NORMAL")
                # its commits never copy the WAL into the file (a checkpoint, which
                # flushes to disk): the writer thread does, off the event loop
                fast.execute("PRAGMA wal_autocheckpoint = 0")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the run store {self.path}: {exc}") from exc
            self._fast = fast
            self._syncs[fast] = "NORMAL"
        return self._fast

    def _migrate(self, conn: sqlite3.Connection) -> None:
        latest = MIGRATIONS[-1][0]
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > latest:
            raise StoreError(
                f"the run store {self.path} has schema version {version}, newer than this "
                f"planexec understands ({latest}); upgrade planexec"
            )
        if version == latest:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # re-read locked
            for target, apply in MIGRATIONS:
                if target > version:
                    apply(conn)
                    conn.execute(f"PRAGMA user_version = {int(target)}")
                    if version > 0:
                        logger.bind(run_id="-", step_id="-").warning(
                            "run store {}: migrated schema to version {}", self.path, target
                        )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _retry(self, fn: Callable[[], T]) -> T:
        """Call ``fn``, retrying with backoff while the database is locked."""
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or attempt == self.retries:
                    raise StoreError(f"run store {self.path}: {exc}") from exc
                logger.bind(run_id="-", step_id="-").warning(
                    "run store {} is locked ({}); retry {} of {} in {:.2f}s",
                    self.path, exc, attempt + 1, self.retries, delay,
                )
                time.sleep(delay * (1 + random.random()))  # noqa: S311 - jitter
                delay = min(delay * 2, 2.0)
            except sqlite3.Error as exc:
                raise StoreError(f"run store {self.path}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _set_sync(self, conn: sqlite3.Connection, flush: bool) -> None:
        """Choose, before a transaction, whether its commit is flushed to disk."""
        mode = "FULL" if flush else "NORMAL"
        if self._syncs.get(conn) != mode:
            conn.execute(f"PRAGMA synchronous = {mode}")
            self._syncs[conn] = mode

    def _write(self, fn: Callable[[sqlite3.Connection], None], flush: bool = True) -> None:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction, with retries."""

        def tx() -> None:
            conn = self._connection()
            self._set_sync(conn, flush and self.durability != "process")
            conn.execute("BEGIN IMMEDIATE")
            try:
                fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        with self._lock:
            self._retry(tx)

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return self._retry(lambda: fn(self._connection()))

    def schema_version(self) -> int:
        """The schema version of the file (``PRAGMA user_version``)."""
        return int(self._read(lambda c: c.execute("PRAGMA user_version").fetchone()[0]))

    def journal_mode(self) -> str:
        """The journal mode of the file (``wal``)."""
        return str(self._read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0]))

    # -- recording -----------------------------------------------------------------

    def attach(self, bus: EventBus) -> None:
        """Subscribe to ``bus``: `handle`'s work, without a coroutine per event.

        (A subclass that overrides `handle` gets `handle` subscribed.)
        """
        overridden = type(self).handle is not SQLiteRunStore.handle
        general = overridden or not _fastpaths.ON  # (`planexec._fastpaths`)
        bus.subscribe(self.handle if general else self._observe)

    async def handle(self, event: Event) -> None:
        """Record one event; a checkpoint is committed (and flushed, per mode) on return.

        Which events are checkpoints: `planexec.store.base.is_checkpoint` (and, with
        ``durability="full"`` or ``result_delay=0``, every ``StepFinished``). Others are
        held in memory and committed in the same transaction as the next commit of any
        run; a held result makes the queue due ``result_delay`` seconds later.
        A commit that is not flushed to disk runs on the calling thread when no other
        commit is in flight (a short transaction that never waits); a flushed commit, or
        one that finds a commit in flight or the file locked, is left to the store's
        writer thread, which commits everything queued meanwhile in one transaction with
        one flush (group commit).
        """
        pending = self._observe(event)
        if pending is not None:
            await pending

    def _observe(self, event: Event) -> Awaitable[None] | None:
        """`handle`, as a bus subscriber: None when nothing is to be awaited."""
        if self._written and self._skip(event):
            return None
        waiter = self._enqueue(event, _encode(event), asynchronous=True)
        if waiter is None:
            return None
        loop = waiter.loop
        assert loop is not None and waiter.future is not None
        # the steps running but the one whose call starts (a result's step is done)
        others = self._running_total - (type(event) is ToolCallStarted)
        if waiter.flush:
            # alone (a chain), a fast disk: flush here, saving two thread hand-offs; else
            # the writer flushes, once for every call start queued meanwhile
            if others <= 0 and self._commit_inline(flush=True):
                return None
            self._wake_writer()
        elif others > 0:
            # other steps are running: the results they record in this turn of the loop
            # share one commit, made at its end
            if loop not in self._soon:
                self._soon.add(loop)
                loop.call_soon(self._commit_soon, loop)
        elif self._commit_inline():
            return None
        else:
            self._wake_writer()
        return waiter.future

    def _commit_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """Commit what this turn of ``loop`` queued (inline, or through the writer)."""
        self._soon.discard(loop)
        if not self._commit_inline():
            self._wake_writer()

    def record(self, event: Event) -> None:
        """Record one event synchronously (same rules as `handle`)."""
        if self._written and self._skip(event):
            return
        if self._enqueue(event, _encode(event), asynchronous=False) is not None:
            self.flush_sync()

    def _flush_wanted(self, kind: str, safe: bool) -> bool:
        """Whether the commit of an event is flushed to disk (fsync) in this mode."""
        if self.durability == "full":
            return True
        if self.durability == "process":
            return False
        return kind in FLUSHED_EVENTS and checkpoint(kind, safe)

    def _is_due(self, kind: str, safe: bool) -> bool:
        """Whether an event is committed before its handler returns (a checkpoint)."""
        if not self.buffer_events or checkpoint(kind, safe):
            return True
        return self._strict_results and kind == "StepFinished"

    def _policy(self, kind: str, safe: bool) -> tuple[bool, bool]:
        """``(due, flush)`` of an event of type ``kind`` (`_is_due`, `_flush_wanted`)."""
        policies = self._safe_policies if safe else self._policies
        policy = policies.get(kind)
        if policy is None:
            policy = policies[kind] = (self._is_due(kind, safe), self._flush_wanted(kind, safe))
        return policy

    def _enqueue(self, event: Event, item: _Queued, *, asynchronous: bool) -> _Waiter | None:
        """Queue an event; return what to wait for when it must be committed now.

        ``asynchronous``: the waiter gets a future of the running loop (else none: a
        synchronous caller commits itself). A result (not due) starts the
        ``result_delay`` clock if none is held yet; any event that arrives after the delay
        has run out makes the queue due.
        """
        row = item[0]
        kind = row[2]
        safe = kind in _MAY_BE_SAFE and getattr(event, "safe", None) is True
        policy = (self._safe_policies if safe else self._policies).get(kind)
        due, flush = policy if policy is not None else self._policy(kind, safe)
        start_timer = False
        with self._pending_lock:
            if kind in _COUNTED:
                self._count_running(kind, row[0])
            self._pending.append(item)
            if not due:
                held = self._held_since
                if held is not None:
                    due = self._clock() - held >= self.result_delay
                elif kind == "StepFinished":
                    self._held_since = self._clock()
                    start_timer = True
            if not due and len(self._pending) < _MAX_BUFFERED:
                if start_timer:  # the writer thread commits it if nothing else does
                    self._wake_writer(work=False)
                return None
            loop = asyncio.get_running_loop() if asynchronous else None
            waiter = _Waiter(loop.create_future() if loop is not None else None, flush, loop)
            self._waiters.append(waiter)
        return waiter

    def _count_running(self, kind: str, run_id: str) -> None:
        """Keep count of the steps started and not finished, per run (``_pending_lock``).

        Only decides whether a result waits for the end of the loop's turn to share a
        commit (`handle`); a count that drifts (a step cancelled without a result) costs
        that wait, never a commit, and ends with its run.
        """
        if kind == "StepStarted":
            self._running[run_id] = self._running.get(run_id, 0) + 1
            self._running_total += 1
        elif kind == "StepFinished":
            if self._running.get(run_id, 0) > 0:
                self._running[run_id] -= 1
                self._running_total -= 1
        else:  # RunFinished
            self._running_total -= self._running.pop(run_id, 0)

    def _take(self, may_flush: bool) -> tuple[list[_Queued], list[_Waiter], bool] | None:
        """Take every queued event and waiter (None: a flush is wanted and not allowed).

        Called with ``_lock`` held: no other commit is in flight, so whatever was taken
        before is committed.
        """
        with self._pending_lock:
            flush = self.durability == "full" or any(w.flush for w in self._waiters)
            if flush and not may_flush:
                return None
            batch, waiters = self._pending, self._waiters
            self._pending, self._waiters = [], []
            self._held_since = None
        return batch, waiters, flush and self.durability != "process"

    def _commit_inline(self, flush: bool = False) -> bool:
        """Commit the queue on the calling thread if that needs no wait.

        Returns False, leaving the queue to the writer thread, when another commit is in
        flight (in this process: ``_lock``; in another: the file's write lock) or the
        queue holds an event whose commit is flushed to disk, unless ``flush`` allows it
        and the last flushed commit took less than ``loop_flush_limit`` seconds.
        """
        if flush and not self._last_flush < self.loop_flush_limit:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            taken = self._take(may_flush=flush)
            if taken is None:
                return False
            batch, waiters, flushed = taken
            if not batch:
                _settle(waiters, None)
                return True
            try:
                started = self._clock()
                conn = self._fast_connection()
                self._set_sync(conn, flushed)
                self._write_batch(conn, batch)
                if flushed:
                    self._last_flush = self._clock() - started
            except (sqlite3.Error, StoreError):
                # locked by another process, or any trouble: the writer waits and retries
                self._requeue(batch, waiters)
                return False
            _settle(waiters, None)
            self._inline_commits += 1
            if self._inline_commits >= _CHECKPOINT_EVERY:
                self._inline_commits = 0
                self._checkpoint_due = True
                self._wake_writer()
            return True
        finally:
            self._lock.release()

    def _write_batch(self, conn: sqlite3.Connection, batch: list[_Queued]) -> None:
        """Write ``batch`` in one transaction on ``conn``: committed, or rolled back."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._apply_batch(conn, batch)
            if self._hooked:
                self._before_commit([json.loads(q[0][5]) for q in batch])
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _requeue(self, batch: list[_Queued], waiters: list[_Waiter]) -> None:
        """Put a batch that was not committed back at the head of the queue."""
        with self._pending_lock:
            self._pending[:0] = batch
            self._waiters[:0] = waiters

    def _commit_queue(self) -> None:
        """Commit (and flush, if any queued event wants it) the whole queue; waits for locks.

        The writer thread's work, and `flush_sync`'s. The waiters of the batch get the
        outcome: done, or the `StoreError` that stopped the commit.
        """
        with self._lock:
            taken = self._take(may_flush=True)
            assert taken is not None
            batch, waiters, flush = taken
            if not batch:
                _settle(waiters, None)
                return

            def tx() -> None:
                conn = self._connection()
                self._set_sync(conn, flush)
                self._write_batch(conn, batch)

            try:
                started = self._clock()
                self._retry(tx)
                if flush:
                    self._last_flush = self._clock() - started
            except BaseException as exc:
                _settle(waiters, exc if isinstance(exc, Exception) else StoreError(
                    f"run store {self.path}: the commit was interrupted ({exc!r})"))
                raise
        _settle(waiters, None)

    def _wake_writer(self, work: bool = True) -> None:
        """Start the writer thread if needed (one per process) and tell it there is work.

        ``work=False``: only make it look at the held results' deadline (``result_delay``).
        """
        with self._wake:
            if (
                self._writer is None
                or self._writer_pid != os.getpid()  # forked: threads do not follow
                or not self._writer.is_alive()  # ended by a bug (it raised)
            ):
                self._writer = threading.Thread(
                    target=self._writer_loop, name=f"planexec-store-{self.path.name}",
                    daemon=True,
                )
                self._writer_pid = os.getpid()
                self._stopping = False
                self._writer.start()
            if work:
                self._work = True
            elif self._writer_wakes_at is not None and self._writer_wakes_at <= (
                self._held_since if self._held_since is not None else self._clock()
            ) + self.result_delay:
                return  # it wakes by then anyway (one wake per delay, not per result)
            self._wake.notify()

    def _hold_left(self) -> float | None:
        """Seconds until the held results are due (None: none is held)."""
        since = self._held_since
        if since is None:
            return None
        return since + self.result_delay - self._clock()

    def _writer_loop(self) -> None:
        """Commit whatever is queued, batch after batch, until `close`.

        Also commits held results once ``result_delay`` has run out, when no event
        arrived to do it.
        """
        while True:
            with self._wake:
                while not self._work and not self._stopping:
                    left = self._hold_left()
                    if left is not None and left <= 0:
                        break
                    self._writer_wakes_at = None if left is None else self._clock() + left
                    self._wake.wait(left)
                self._writer_wakes_at = None
                if self._stopping and not self._work:
                    return
                self._work = False
            try:
                self._commit_queue()
            except StoreError as exc:  # the waiters got it; the writer carries on
                logger.bind(run_id="-", step_id="-").warning(
                    "run store {}: a commit failed: {}", self.path, exc
                )
            if self._checkpoint_due:
                self._checkpoint_due = False
                self._checkpoint()

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file (``PASSIVE``: never waits for anyone).

        On the writer thread's own connection, without ``_lock``: commits go on meanwhile.
        A busy file is no error: the next checkpoint (or SQLite's own) catches up.
        """
        try:
            if self._ckpt is None:
                self._ckpt = sqlite3.connect(
                    self.path, timeout=0.0, isolation_level=None, check_same_thread=False
                )
            self._ckpt.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            logger.bind(run_id="-", step_id="-").debug(
                "run store {}: checkpoint skipped: {}", self.path, exc
            )

    async def flush(self) -> None:
        """Commit every buffered event.

        On the calling thread when that needs no wait and no disk flush (nothing queued,
        or a short commit: `_commit_inline`), else on a thread, waiting for the commit
        in flight, locks and the disk.
        """
        if not self._commit_inline():
            await asyncio.to_thread(self.flush_sync)

    def flush_sync(self) -> None:
        """Commit every buffered event, synchronously."""
        self._commit_queue()

    def write_events(self, batch: list[dict[str, Any]]) -> None:
        """Commit encoded events (`planexec.store.codec.event_to_json`) in one transaction.

        They are committed after (and with) every event already queued.
        """
        items = [_from_data(data) for data in batch]
        with self._pending_lock:
            self._pending.extend(items)
        self._commit_queue()

    def _before_commit(self, batch: list[dict[str, Any]]) -> None:
        """Called inside the write transaction, just before ``COMMIT``.

        ``batch``: the batch's events (`planexec.store.codec.event_to_json`'s data,
        decoded from the text written). A hook for instrumentation and for crash tests
        (kill the process mid-write); it does nothing here (and the batch is decoded only
        when a subclass overrides it).
        """

    def _apply_batch(self, conn: sqlite3.Connection, batch: list[_Queued]) -> None:
        """Write a batch of events, of one run or several, in order (inside a transaction).

        The event rows go in with one ``executemany``, numbered here after the table's
        last ``seq`` (the transaction holds the write lock, so nobody else numbers);
        what an event changes in the other tables is applied in the events' order, the
        ``step_results`` rows of consecutive results with one ``executemany``.
        """
        spans: dict[str, list[float]] = {}
        for row, _ in batch:
            span = spans.get(row[0])
            if span is None:
                spans[row[0]] = [row[1], row[1]]
            else:
                span[1] = row[1]
        for run_id, (first_ts, last_ts) in spans.items():
            conn.execute(
                "INSERT INTO runs (run_id, status, created_at, updated_at, pid, host, "
                "pid_start) VALUES (?, 'RUNNING', ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET updated_at = excluded.updated_at",
                (run_id, first_ts, last_ts, os.getpid(), HOST, MY_START),
            )
        last = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        first = int(last[0]) + 1 if last else 1
        conn.executemany(
            "INSERT INTO events (seq, run_id, ts, type, step_id, plan_version, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(seq, *row) for seq, (row, _) in enumerate(batch, first)],
        )
        steps: list[tuple[Any, ...]] = []
        for seq, (row, effect) in enumerate(batch, first):
            if effect is None:
                continue
            if isinstance(effect, _Effect):
                if steps:
                    self._write_steps(conn, steps)
                    steps = []
                self._apply(conn, effect, seq)
                continue
            steps.append((row[0], *effect[:7], row[1], effect[7], seq))  # a StepFinished
        if steps:
            self._write_steps(conn, steps)

    @staticmethod
    def _write_steps(conn: sqlite3.Connection, steps: list[tuple[Any, ...]]) -> None:
        """Write consecutive results to ``step_results`` (the latest of a step replaces it)."""
        conn.executemany(
            "INSERT OR REPLACE INTO step_results (run_id, plan_version, step_id, status, tool, "
            "error_kind, started_at, duration, recorded_at, result, seq) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            steps,
        )
        for step in steps:
            if step[3] == "FAILED" and step[5]:
                conn.execute(
                    "UPDATE runs SET error_kind = ? WHERE run_id = ?", (step[5], step[0])
                )

    def _apply(self, conn: sqlite3.Connection, effect: _Effect, seq: int) -> None:
        """Apply what one event changes elsewhere (already in ``events`` as row ``seq``).

        Not for a ``StepFinished``: `_apply_batch` writes those (`_write_steps`).
        """
        data = effect.data
        run_id, ts, kind = data["run_id"], float(data["ts"]), data["type"]
        if kind == "RunStarted":
            conn.execute(
                "UPDATE runs SET question = ?, config = ?, status = 'RUNNING', pid = ?, "
                "host = ?, pid_start = ?, finished_at = NULL, error = NULL WHERE run_id = ?",
                (data.get("question", ""), dumps(data.get("config") or {}), os.getpid(),
                 HOST, MY_START, run_id),
            )
        elif kind == "PlanCreated":
            plan = data.get("plan")
            conn.execute(
                "INSERT OR REPLACE INTO plans (run_id, version, created_at, text, reason, plan, "
                "diagnostics, error, drafts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, int(data["version"]), ts, data.get("text", ""), data.get("reason"),
                 effect.plan_text,
                 dumps(plan.get("diagnostics", []) if plan else []),
                 data.get("error"), dumps(list(data.get("drafts") or []))),
            )
            conn.execute(
                "UPDATE runs SET plan_version = MAX(COALESCE(plan_version, 0), ?) "
                "WHERE run_id = ?",
                (int(data["version"]), run_id),
            )
        elif kind == "StepDiscarded":  # a streamed step the final plan does not hold
            conn.execute(
                "DELETE FROM step_results WHERE run_id = ? AND plan_version = ? AND step_id = ?",
                (run_id, int(data.get("plan_version", 1)), int(data["step_id"])),
            )
        elif kind == "RecoveryDecided" and data.get("error_kind"):
            conn.execute(
                "UPDATE runs SET error_kind = ? WHERE run_id = ?", (data["error_kind"], run_id)
            )
        elif kind == "RunFinished":
            conn.execute(
                "UPDATE runs SET status = ?, answer = ?, error = ?, finished_at = ? "
                "WHERE run_id = ?",
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

        def apply(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE runs SET status = ?, error = ?, updated_at = ?, "
                "error_kind = COALESCE(?, error_kind), "
                "finished_at = CASE WHEN ? THEN ? ELSE NULL END WHERE run_id = ?",
                (str(st), error, now, error_kind,
                 st not in (RunStatus.RUNNING, RunStatus.INTERRUPTED), now, run_id),
            )
            if cur.rowcount == 0:
                raise RunNotFoundError(f"no run {run_id!r} in the store {self.path}", run_id=run_id)
            if st is RunStatus.RUNNING:
                conn.execute(
                    "UPDATE runs SET pid = ?, host = ?, pid_start = ? WHERE run_id = ?",
                    (os.getpid(), HOST, MY_START, run_id),
                )

        self._write(apply)

    # -- leases and approvals ----------------------------------------------------------

    def _skip(self, event: Event) -> bool:
        """Whether a store method wrote ``event`` already (then it is forgotten)."""
        with self._pending_lock:
            return self._written.pop(id(event), None) is event

    def _cas(
        self, run_id: str, fn: Callable[[sqlite3.Connection], T], event: Event | None = None
    ) -> T:
        """Run ``fn`` and append ``event`` in one ``BEGIN IMMEDIATE`` transaction.

        Everything queued before is committed first (a prefix of the events). ``fn``
        raising rolls everything of the transaction back.
        """
        self.flush_sync()
        out: list[T] = []

        def tx(conn: sqlite3.Connection) -> None:
            out.append(fn(conn))
            if event is not None:
                self._apply_batch(conn, [_encode(event)])

        self._write(tx, flush=event is not None)
        if event is not None:
            with self._pending_lock:
                self._written[id(event)] = event
                while len(self._written) > 1024:  # never delivered: forget the oldest
                    del self._written[next(iter(self._written))]
        return out[0]

    @staticmethod
    def _lease_row(conn: sqlite3.Connection, run_id: str) -> Lease | None:
        row = conn.execute(
            "SELECT run_id, owner, pid, host, pid_start, acquired_at, heartbeat_at, ttl "
            "FROM leases WHERE run_id = ?", (run_id,),
        ).fetchone()
        return Lease(*row) if row is not None else None

    @staticmethod
    def _put_lease(conn: sqlite3.Connection, lease: Lease) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO leases (run_id, owner, pid, host, pid_start, acquired_at, "
            "heartbeat_at, ttl) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (lease.run_id, lease.owner, lease.pid, lease.host, lease.pid_start,
             lease.acquired_at, lease.heartbeat_at, lease.ttl),
        )

    @staticmethod
    def _drop_lease(conn: sqlite3.Connection, run_id: str, owner: str) -> bool:
        cur = conn.execute("DELETE FROM leases WHERE run_id = ? AND owner = ?",
                           (run_id, owner))
        return cur.rowcount > 0

    def get_lease(self, run_id: str) -> Lease | None:
        """The run's lease as recorded, or None."""
        return self._read(lambda conn: self._lease_row(conn, run_id))

    @staticmethod
    def _latest_request(
        conn: sqlite3.Connection, run_id: str, plan_version: int, step_id: int
    ) -> ApprovalRecord | None:
        row = conn.execute(
            "SELECT record FROM approvals WHERE run_id = ? AND plan_version = ? AND step_id = ? "
            "ORDER BY request_no DESC LIMIT 1", (run_id, plan_version, step_id),
        ).fetchone()
        return _request_from_text(row[0]) if row is not None else None

    @staticmethod
    def _put_request(conn: sqlite3.Connection, rec: ApprovalRecord) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO approvals (run_id, plan_version, step_id, request_no, state, "
            "opened_at, record) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rec.run_id, rec.plan_version, rec.step_id, rec.request_no, str(rec.state),
             rec.opened_at, dumps(rec.to_dict())),
        )

    def approval_requests(self, run_id: str) -> list[ApprovalRecord]:
        """Every request of a run, in the order opened."""

        def read(conn: sqlite3.Connection) -> list[ApprovalRecord]:
            rows = conn.execute(
                "SELECT record FROM approvals WHERE run_id = ? ORDER BY opened_at, request_no",
                (run_id,),
            ).fetchall()
            return [_request_from_text(r[0]) for r in rows]

        return self._read(read)

    def set_owner(self, run_id: str, principal: str) -> None:
        """Record the principal that started a run (the first one recorded stands)."""
        now = time.time()

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO run_owners (run_id, principal, created_at) "
                "VALUES (?, ?, ?)",
                (run_id, principal, now),
            )

        self._write(apply)

    def owner(self, run_id: str) -> str | None:
        """The principal that started a run (None: none was recorded)."""
        row = self._read(
            lambda c: c.execute(
                "SELECT principal FROM run_owners WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    # -- reading ---------------------------------------------------------------------

    def _record(self, conn: sqlite3.Connection, row: sqlite3.Row | tuple[Any, ...]) -> RunRecord:
        fields = dict(zip(RUN_FIELDS, row, strict=True))
        fields["config"] = json.loads(fields["config"] or "{}")
        plan_version = fields["plan_version"]
        counts = dict(
            conn.execute(
                "SELECT status, COUNT(*) FROM step_results WHERE run_id = ? AND plan_version = ? "
                "GROUP BY status",
                (fields["run_id"], plan_version if plan_version is not None else 1),
            ).fetchall()
        )
        row = conn.execute(
            "SELECT plan FROM plans WHERE run_id = ? AND version = ?",
            (fields["run_id"], plan_version if plan_version is not None else 1),
        ).fetchone()
        plan = json.loads(row[0]) if row is not None and row[0] else None
        return run_record(fields, counts, len(plan["steps"]) if plan else None)

    _RUN_COLUMNS = ", ".join(RUN_FIELDS)

    def _require(self, conn: sqlite3.Connection, run_id: str) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise RunNotFoundError(f"no run {run_id!r} in the store {self.path}", run_id=run_id)

    def get_run(self, run_id: str) -> RunRecord:
        """Return a run's record.

        Raises:
            RunNotFoundError: no such run.
        """

        def read(conn: sqlite3.Connection) -> RunRecord:
            row = conn.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in the store {self.path}", run_id=run_id)
            return self._record(conn, row)

        return self._read(read)

    def list_runs(self, status: RunStatus | str | None = None, limit: int = 50) -> list[RunRecord]:
        """Return runs, newest first, optionally only those with ``status``.

        ``INTERRUPTED`` lists runs recorded as running whose process is gone.
        """
        want = RunStatus(status) if status is not None else None
        if limit <= 0:
            return []

        def read(conn: sqlite3.Connection) -> list[RunRecord]:
            sql = f"SELECT {self._RUN_COLUMNS} FROM runs"
            params: tuple[Any, ...] = ()
            if want is not None:
                stored = RunStatus.RUNNING if want is RunStatus.INTERRUPTED else want
                sql += " WHERE status IN (?, ?)"
                params = (str(stored), str(want))
            sql += " ORDER BY created_at DESC, rowid DESC"
            out: list[RunRecord] = []
            for row in conn.execute(sql, params).fetchall():
                record = self._record(conn, row)
                if want is None or record.status is want:
                    out.append(record)
                    if len(out) >= limit:
                        break
            return out

        return self._read(read)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's events in order, as JSON data (committed events only)."""

        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            self._require(conn, run_id)
            rows = conn.execute(
                "SELECT data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            return [json.loads(r[0]) for r in rows]

        return self._read(read)

    def step_results(self, run_id: str, plan_version: int | None = None) -> list[RecordedStep]:
        """Return the latest result of each step, in the order they were recorded."""

        def read(conn: sqlite3.Connection) -> list[RecordedStep]:
            self._require(conn, run_id)
            sql = "SELECT plan_version, recorded_at, result FROM step_results WHERE run_id = ?"
            params: tuple[Any, ...] = (run_id,)
            if plan_version is not None:
                sql += " AND plan_version = ?"
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

        def read(conn: sqlite3.Connection) -> list[RecordedPlan]:
            self._require(conn, run_id)
            rows = conn.execute(
                "SELECT version, created_at, text, reason, plan, error, drafts FROM plans "
                "WHERE run_id = ? ORDER BY version",
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
        """Return the run's latest cancel request (committed), if any."""

        def read(conn: sqlite3.Connection) -> CancelRequest | None:
            self._require(conn, run_id)
            row = conn.execute(
                "SELECT data FROM events WHERE run_id = ? AND type = 'RunCancelRequested' "
                "ORDER BY seq DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            return None if row is None else CancelRequest.from_event(json.loads(row[0]))

        return self._read(read)

    def started_calls_without_result(self, run_id: str) -> list[StartedCall]:
        """Return the steps whose tool call started and whose result was never recorded."""

        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            self._require(conn, run_id)
            rows = conn.execute(
                "SELECT data FROM events WHERE run_id = ? "
                "AND type IN ('ToolCallStarted', 'StepFinished') ORDER BY seq",
                (run_id,),
            ).fetchall()
            return [json.loads(r[0]) for r in rows]

        return unmatched_calls(self._read(read))

    def export(self, run_id: str) -> dict[str, Any]:
        """Return everything recorded about a run as one JSON document."""
        return export_document(self, run_id)

    def close(self) -> None:
        """Commit buffered events, stop the writer thread and close the connections."""
        self.flush_sync()
        with self._wake:
            writer, self._writer = self._writer, None
            self._stopping = True
            self._wake.notify()
        if (
            writer is not None
            and self._writer_pid == os.getpid()
            and writer is not threading.current_thread()
        ):
            writer.join()
        if self._ckpt is not None:
            self._ckpt.close()
            self._ckpt = None
        with self._lock:
            if self._conn is not None and self._conn_pid == os.getpid():
                self._conn.close()
                if self._fast is not None:
                    self._fast.close()
            self._conn = self._fast = None
            self._syncs.clear()
