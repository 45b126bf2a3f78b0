"""Cost of recording a run, per step: no store vs MemoryRunStore vs SQLiteRunStore.

Runs 1,000-step plans of a no-op tool with the `Executor`, with the store attached to
the event bus, and compares wall times measured in this one run:

- ``chain``: step i depends on step i-1, so any commit a step waits for is on the
  critical path (the worst case for a durable store); the tool is read-only (safe to
  call again), so in the default durability its results are held and share commits;
- ``fan``: independent steps of that tool, run 8 at a time;
- ``chain_unsafe``: the chain with a tool that has no safety hints (so not safe to call
  again): its call start is committed, and in the default durability flushed to disk,
  before each call — one disk flush per step on the critical path.

Stores: ``none``, ``listener`` (a subscriber that does nothing: what building and
emitting the events costs, the floor under any store), ``memory``, and `SQLiteRunStore`
in each durability mode:
``sqlite_calls`` (the default: every commit survives a killed process; the call starts
of unsafe tools and the run's end are flushed to disk), ``sqlite_full`` (every commit
flushed) and ``sqlite_process`` (none flushed). Rounds are interleaved (one run of each
store per round, so drift hits every store alike); each store's median wall time, with
its min and max, is divided by the median of ``none`` measured in the same run. A
flush (fsync) costs what the disk makes it cost: ``fsync_ms`` records one measured in
the same run. Writes ``benchmarks/results/store.json`` and prints the table that
``docs/durability.md`` quotes.

    python benchmarks/store.py [--steps 1000] [--repeat 7] [--quick]

With ``--postgres URL`` it measures, in one run, the stores for several hosts instead:
`PostgresRunStore` in each durability mode beside ``sqlite_calls``, and LangGraph's
``PostgresSaver`` (a chain graph of as many nodes, ``durability="sync"``: each step's
checkpoint written before the next, against the same graph without a checkpointer) on
the same server: time added per step, and commits and round trips per step (counted
once per store: commits from the server's ``pg_stat_database``, round trips by a
counting TCP proxy in front of the server). Writes
``benchmarks/results/store_postgres.json``. A throwaway server::

    python tests/store/pg_cluster.py start /tmp/pgbench   # prints its URL
    python benchmarks/store.py --postgres URL --steps 300 --repeat 5
    python tests/store/pg_cluster.py stop /tmp/pgbench
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loguru import logger

from planexec.config import ExecutorSettings
from planexec.events import EventBus, PlanCreated, RunFinished, RunStarted
from planexec.executor import Executor
from planexec.plan import Plan, Step
from planexec.store import MemoryRunStore, PostgresRunStore, RunStore, SQLiteRunStore
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

RESULTS = Path(__file__).resolve().parent / "results"
STORES = ("none", "listener", "memory", "sqlite_process", "sqlite_calls", "sqlite_full")
SHAPES = ("chain", "fan", "chain_unsafe")
LABELS = {
    "listener": "a subscriber that does nothing (the events alone)",
    "memory": "`MemoryRunStore`",
    "sqlite_process": '`SQLiteRunStore`, `durability="process"`',
    "sqlite_calls": '`SQLiteRunStore`, `durability="calls"` (default)',
    "sqlite_full": '`SQLiteRunStore`, `durability="full"`',
}


def make_plan(steps: int, shape: str) -> Plan:
    chain = shape.startswith("chain")
    tool = "write" if shape == "chain_unsafe" else "noop"
    return Plan(
        steps=tuple(
            Step(id=i, tool=tool, depends_on=(i - 1,) if chain and i > 1 else ())
            for i in range(1, steps + 1)
        )
    )


class Listener:
    """A subscriber that ignores every event: what building and emitting them costs."""

    def attach(self, bus: EventBus) -> None:
        bus.subscribe(self.handle)

    def handle(self, event: object) -> None:
        return None

    async def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def make_store(kind: str, directory: Path, n: int) -> RunStore | Listener | None:
    if kind == "none":
        return None
    if kind == "listener":
        return Listener()
    if kind == "memory":
        return MemoryRunStore()
    durability = kind.removeprefix("sqlite_")
    return SQLiteRunStore(directory / f"{kind}-{n}.sqlite3", durability=durability)


async def one_run(
    catalog: ToolCatalog, plan: Plan, store: RunStore | Listener | None, run_id: str
) -> tuple[float, float]:
    """Wall and CPU seconds (all threads of the process) of one recorded run."""
    bus = EventBus()
    if store is not None:
        store.attach(bus)
    executor = Executor(catalog, config=ExecutorSettings(max_concurrency=8), bus=bus,
                        run_id=run_id)
    gc.collect()  # the garbage of the previous run is not this one's cost
    t0, c0 = time.perf_counter(), time.process_time()
    await bus.emit(RunStarted(run_id=run_id, question="benchmark"))
    await bus.emit(PlanCreated(run_id=run_id, version=1, plan=plan))
    results = await executor.run(plan)
    await bus.emit(RunFinished(run_id=run_id, status="SUCCEEDED"))
    if store is not None:
        await store.flush()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(results) == len(plan.steps) and all(r.ok for r in results)
    return elapsed, cpu


def fsync_ms(directory: Path, n: int = 100) -> float:
    """Median milliseconds of one small WAL commit with ``synchronous=FULL``."""
    import sqlite3

    conn = sqlite3.connect(directory / "fsync.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (x TEXT)")
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
        conn.execute("COMMIT")
        times.append(time.perf_counter() - t0)
    conn.close()
    return statistics.median(times) * 1000


def summary(times: list[float], base: float, steps: int) -> dict[str, Any]:
    med = statistics.median(times)
    return {
        "median_s": round(med, 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "runs_s": [round(t, 4) for t in times],
        "ratio_to_none": round(med / base, 3),
        "added_ms_per_step": round((med - base) * 1000 / steps, 4),
    }


def table(out: dict[str, Any]) -> str:
    """The markdown table of ``docs/durability.md``, from a result document."""
    shapes = out["shapes"]
    head = ["store"]
    for shape in SHAPES:
        head += [f"{shape}: ratio to no store (min–max)", "added per step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    none = ["no store (median wall)"]
    for shape in SHAPES:
        entry = shapes[shape]["none"]
        per_step = entry["median_s"] * 1000 / out["steps"]
        none += [f"{entry['median_s']:.3f} s", f"{per_step:.2f} ms"]
    lines.append("| " + " | ".join(none) + " |")
    for kind in STORES[1:]:
        row = [LABELS[kind]]
        for shape in SHAPES:
            entry = shapes[shape][kind]
            base = shapes[shape]["none"]["median_s"]
            row += [
                f"{entry['ratio_to_none']:.2f} ({entry['min_s'] / base:.2f}–"
                f"{entry['max_s'] / base:.2f})",
                f"{entry['added_ms_per_step']:.3f} ms",
            ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="200 steps, 2 rounds: a smoke run")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--postgres", metavar="URL", default=None,
                        help="measure PostgresRunStore and LangGraph's PostgresSaver on this "
                        "server (it creates and drops databases of its own)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeat = 200, 2
    if args.postgres:
        return postgres_main(args)
    args.out = args.out or RESULTS / "store.json"
    catalog = ToolCatalog([
        fake_tool("noop", {"ok": True}, hints={"read_only": True}),
        fake_tool("write", {"ok": True}),  # no hints: not safe to call again
    ])
    out: dict[str, Any] = {
        "benchmark": "store",
        "steps": args.steps,
        "repeat": args.repeat,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_before": list(os.getloadavg()),
        "shapes": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        out["fsync_ms"] = round(fsync_ms(directory), 3)
        print(f"one WAL commit with fsync: {out['fsync_ms']} ms")
        for shape in SHAPES:
            plan = make_plan(args.steps, shape)
            asyncio.run(one_run(catalog, plan, None, "warmup"))
            times: dict[str, list[float]] = {k: [] for k in STORES}
            cpus: dict[str, list[float]] = {k: [] for k in STORES}
            for n in range(args.repeat):
                # interleaved, so drift hits every store alike; each round starts at
                # another store, so no store always runs first
                for kind in STORES[n % len(STORES):] + STORES[:n % len(STORES)]:
                    store = make_store(kind, directory, n)
                    wall, cpu = asyncio.run(one_run(catalog, plan, store, f"{shape}-{kind}-{n}"))
                    times[kind].append(wall)
                    cpus[kind].append(cpu)
                    if store is not None:
                        store.close()
            base = statistics.median(times["none"])
            cpu_base = statistics.median(cpus["none"])
            shape_out = {kind: summary(times[kind], base, args.steps) for kind in STORES}
            for kind in STORES:  # CPU time: steadier than wall time on a busy machine
                shape_out[kind]["cpu"] = summary(cpus[kind], cpu_base, args.steps)
            out["shapes"][shape] = shape_out
            print(f"{shape:>12}: " + ", ".join(
                f"{k} {v['median_s']:.3f}s (x{v['ratio_to_none']}, "
                f"+{v['added_ms_per_step']:.3f} ms/step)" for k, v in shape_out.items()
            ))
    out["load_average_after"] = list(os.getloadavg())
    out["table_md"] = table(out)
    print(out["table_md"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


# -- PostgreSQL: several hosts' stores ------------------------------------------------

PG_STORES = ("none", "sqlite_calls", "postgres_process", "postgres_calls", "postgres_full")
PG_SHAPES = ("chain", "chain_unsafe")
PG_LABELS = {
    "sqlite_calls": '`SQLiteRunStore`, `durability="calls"` (default)',
    "postgres_process": '`PostgresRunStore`, `durability="process"`',
    "postgres_calls": '`PostgresRunStore`, `durability="calls"` (default)',
    "postgres_full": '`PostgresRunStore`, `durability="full"`',
    "langgraph_postgres": "LangGraph `PostgresSaver`, `durability=\"sync\"` (its own chain)",
}


class TurnCounter:
    """A TCP proxy in front of the server that counts round trips (request/reply turns).

    A turn starts each time the client sends after the server last spoke (or first).
    """

    def __init__(self, host: str, port: int) -> None:
        import socket
        import threading

        self.target = (host, port)
        self.turns = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            last = ["server"]
            for a, b, side in ((client, upstream, "client"), (upstream, client, "server")):
                threading.Thread(target=self._pipe, args=(a, b, side, last),
                                 daemon=True).start()

    def _pipe(self, src: Any, dst: Any, side: str, last: list[str]) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    if side == "client" and last[0] == "server":
                        self.turns += 1
                    last[0] = side
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()


def _url_for(url: str, db: str, port: int | None = None) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    netloc = parts.netloc
    if port is not None:
        netloc = netloc.rsplit(":", 1)[0] + f":{port}"
    return parts._replace(netloc=netloc, path=f"/{db}").geturl()


def _fresh_db(admin_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return _url_for(admin_url, name)


def _commits(admin_url: str, name: str) -> int:
    import psycopg

    time.sleep(1.2)  # the backends flush their statistics when idle (at most every second)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        row = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                            (name,)).fetchone()
    return int(row[0]) if row else 0


def _langgraph_chain(steps: int, saver: Any) -> Any:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        i: int

    def step(state: State) -> dict[str, int]:
        return {"i": state["i"] + 1}

    graph = StateGraph(State)
    for k in range(1, steps + 1):
        graph.add_node(f"n{k}", step)
        graph.add_edge(START if k == 1 else f"n{k - 1}", f"n{k}")
    graph.add_edge(f"n{steps}", END)
    return graph.compile(checkpointer=saver)


def langgraph_run(steps: int, url: str | None, thread: str) -> float:
    """Wall seconds of one chain of ``steps`` nodes (with PostgresSaver at ``url``)."""
    config = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    if url is None:
        app = _langgraph_chain(steps, None)
        gc.collect()
        t0 = time.perf_counter()
        assert app.invoke({"i": 0}, config)["i"] == steps
        return time.perf_counter() - t0
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        app = _langgraph_chain(steps, saver)
        gc.collect()
        t0 = time.perf_counter()
        assert app.invoke({"i": 0}, config, durability="sync")["i"] == steps
        return time.perf_counter() - t0


def _counted(admin_url: str, name: str, work: Any) -> tuple[int, int]:
    """Commits and round trips of ``work(url)`` on a fresh database (through the proxy)."""
    from urllib.parse import urlsplit

    url = _fresh_db(admin_url, name)
    parts = urlsplit(url)
    proxy = TurnCounter(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        before = _commits(admin_url, name)
        turns0 = proxy.turns
        work(_url_for(url, name, proxy.port), before)
        turns = proxy.turns - turns0
    finally:
        proxy.close()
    return _commits(admin_url, name) - before, turns


def postgres_main(args: argparse.Namespace) -> int:
    """The ``--postgres URL`` benchmark (see the module docstring)."""
    admin_url = args.postgres
    out_path = args.out or RESULTS / "store_postgres.json"
    catalog = ToolCatalog([
        fake_tool("noop", {"ok": True}, hints={"read_only": True}),
        fake_tool("write", {"ok": True}),
    ])
    out: dict[str, Any] = {
        "benchmark": "store_postgres",
        "steps": args.steps,
        "repeat": args.repeat,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_before": list(os.getloadavg()),
        "shapes": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        db = "planexec_bench"
        url = _fresh_db(admin_url, db)
        PostgresRunStore(url).close()  # the schema, once
        for shape in PG_SHAPES:
            plan = make_plan(args.steps, shape)
            asyncio.run(one_run(catalog, plan, None, "warmup"))
            times: dict[str, list[float]] = {k: [] for k in PG_STORES}
            for n in range(args.repeat):
                for kind in PG_STORES[n % len(PG_STORES):] + PG_STORES[:n % len(PG_STORES)]:
                    store: RunStore | Listener | None
                    if kind.startswith("postgres_"):
                        store = PostgresRunStore(url, durability=kind.removeprefix("postgres_"))
                    else:
                        store = make_store(kind, directory, n)
                    wall, _ = asyncio.run(one_run(catalog, plan, store, f"{shape}-{kind}-{n}"))
                    times[kind].append(wall)
                    if store is not None:
                        store.close()
            base = statistics.median(times["none"])
            shape_out = {kind: summary(times[kind], base, args.steps) for kind in PG_STORES}
            for kind in ("postgres_process", "postgres_calls", "postgres_full"):
                durability = kind.removeprefix("postgres_")

                def work(u: str, _: int, durability: str = durability,
                         plan: Plan = plan, kind: str = kind) -> None:
                    with PostgresRunStore(u, durability=durability) as st:
                        asyncio.run(one_run(catalog, plan, st, f"count-{kind}"))

                commits, turns = _counted(admin_url, f"{db}_count", work)
                shape_out[kind]["commits_per_step"] = round(commits / args.steps, 3)
                shape_out[kind]["round_trips_per_step"] = round(turns / args.steps, 3)
            out["shapes"][shape] = shape_out
            print(f"{shape:>12}: " + ", ".join(
                f"{k} +{v['added_ms_per_step']:.3f} ms/step" for k, v in shape_out.items()))
        lg: dict[str, list[float]] = {"none": [], "postgres": []}
        lg_url = _fresh_db(admin_url, f"{db}_langgraph")
        langgraph_run(args.steps, lg_url, "warmup")
        for n in range(args.repeat):
            lg["none"].append(langgraph_run(args.steps, None, f"t{n}"))
            lg["postgres"].append(langgraph_run(args.steps, lg_url, f"t{n}"))
        lg_out = summary(lg["postgres"], statistics.median(lg["none"]), args.steps)
        lg_out["none_median_s"] = round(statistics.median(lg["none"]), 4)
        commits, turns = _counted(
            admin_url, f"{db}_count", lambda u, _: langgraph_run(args.steps, u, "count")
        )
        lg_out["commits_per_step"] = round(commits / args.steps, 3)
        lg_out["round_trips_per_step"] = round(turns / args.steps, 3)
        out["langgraph_postgres"] = lg_out
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as admin:
            for name in (db, f"{db}_count", f"{db}_langgraph"):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    out["load_average_after"] = list(os.getloadavg())
    out["table_md"] = postgres_table(out)
    print(out["table_md"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out_path}")
    return 0


def postgres_table(out: dict[str, Any]) -> str:
    """The PostgreSQL table of ``docs/durability.md``, from a ``--postgres`` result."""
    head = ["store"]
    for shape in PG_SHAPES:
        head += [f"{shape}: added per step", "commits / step", "round trips / step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kind in PG_STORES[1:]:
        row = [PG_LABELS[kind]]
        for shape in PG_SHAPES:
            e = out["shapes"][shape][kind]
            row += [f"{e['added_ms_per_step'] * 1000:.0f} µs",
                    str(e.get("commits_per_step", "–")), str(e.get("round_trips_per_step", "–"))]
        lines.append("| " + " | ".join(row) + " |")
    lg = out["langgraph_postgres"]
    lines.append("| " + " | ".join(
        [PG_LABELS["langgraph_postgres"],
         f"{lg['added_ms_per_step'] * 1000:.0f} µs", str(lg["commits_per_step"]),
         str(lg["round_trips_per_step"]), "–", "–", "–"]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    logger.remove()  # planexec's warnings are not part of the figures
    sys.exit(main())
