"""The call gate under random interleavings (issue 25, item 13): a `RuleBasedStateMachine`.

One run per example, recorded in SQLite on a tmp file. Rules: start it (a plan with a
destructive step; a step that selects its tool; a streamed reply whose first draft asks
approval for a step the final plan replaces with a destructive one), decide (approve,
edit, reject; one decider or two at once, each with its own connection), resume (one
driver or two at once, each with its own connection and event loop, under any config),
and kills: a driver is dropped while its approval callback is asking or while its
destructive tool runs (its event loop is abandoned and its objects kept, so nothing of it
runs again — no ``finally``, no heartbeat — as when a process dies; the next driver
resumes from the file once the dead driver's lease has expired).

Oracle, independent of the store's claims: each tool appends its call to a list, and
reads the file (a connection of its own) to see whether its step already has a recorded
success. Invariants: every destructive call was allowed by a decision on record for that
tool with exactly those arguments, claimed once (calls <= claimed decisions of that
content); no tool call of a step whose success is on record.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from langchain_core.tools import BaseTool

import planexec.runs as runs_module
from planexec.agent import PlanExecuteAgent
from planexec.approval import ApprovalDecision, ApprovalRequest
from planexec.config import AgentConfig
from planexec.errors import AlreadyDecidedError, ApprovalError, LeaseHeldError, RunError
from planexec.events import ApprovalRequested, Event
from planexec.runs import decide_step, resume_run, waiting_steps
from planexec.store import RequestState, SQLiteRunStore
from planexec.store.codec import canonical_json
from planexec.testing import FunctionModel, ModelCall, StreamingModel, fake_tool
from planexec.tools import ToolCatalog

RUN = "run"
TTL = 0.15  # the lease's time to live in this test: a dead driver's lease expires soon
BOUND = 20.0  # seconds: a bound on every wait, never asserted on
EXAMPLES = 12
STEPS = 6
DESTRUCTIVE = ("pay", "wipe")
PARKED: list[Any] = []
"""What dead drivers left behind: kept alive so that none of it ever runs again."""


def block(n: int, tool: str | None, args: dict[str, Any], dep: str = "None",
          agent: str | None = None) -> str:
    head = f"#Task{n}: step {n}\n" + (f"#Agent{n}: {agent}\n" if agent else "")
    body = f"#Tool{n}: {tool}\n#Args{n}: {json.dumps(args)}\n" if tool else ""
    return head + body + f"#Dependency{n}: {dep}\n"


FIXED = block(1, "read", {"label": "s1"}) + block(2, "pay", {"to": "s2", "amount": 5}, "#S1")
SELECT = block(1, "read", {"label": "s1"}) + block(2, None, {}, "#S1", agent="bank")
STREAMED = (
    block(1, "read", {"label": "s1"}) + block(2, "peek", {"label": "s2"})
    + block(3, "read", {"label": "s3"})
    + "\nRevised plan:\n" + block(1, "read", {"label": "s1"})
    + block(2, "wipe", {"to": "s2"}, "#S1")
)

choices = st.sampled_from
APPROVERS = choices(["none", "approve", "edit", "reject", "defer", "garbage", "hang"])
SELECTIONS = st.one_of(
    st.builds(lambda n: {"tool": "pay", "args": {"to": "s2", "amount": n}}, st.integers(1, 3)),
    st.just({"tool": "wipe", "args": {"to": "s2"}}),
)


class Killed(Exception):
    """Raised nowhere: marks the driver outcome "killed"."""


class World:
    """The file, the oracle's call log, and the kill switch of the current driver."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.repeats: list[str] = []
        self.lock = threading.Lock()

    def succeeded(self, step: int) -> bool:
        conn = sqlite3.connect(self.path, timeout=BOUND)
        try:
            row = conn.execute(  # a success of a recorded plan (not of a lost draft)
                "SELECT 1 FROM step_results s JOIN plans p ON p.run_id = s.run_id AND "
                "p.version = s.plan_version WHERE s.run_id = ? AND s.step_id = ? AND "
                "s.status = 'SUCCEEDED'", (RUN, step),
            ).fetchone()
        except sqlite3.OperationalError:  # no table yet
            row = None
        finally:
            conn.close()
        return row is not None

    def tools(self, driver: Driver) -> list[BaseTool]:
        def tool(name: str, key: str, hints: dict[str, bool], args: dict[str, type],
                 server: str | None = None) -> BaseTool:
            async def body(**kwargs: Any) -> Any:
                step = int(str(kwargs[key])[1:])
                if self.succeeded(step):
                    self.repeats.append(f"{name}{kwargs}: step {step} already succeeded")
                with self.lock:
                    self.calls.append((name, dict(kwargs)))
                if name == driver.hang_tool:
                    await driver.die()
                return {"done": name}

            t = fake_tool(name, function=body, args=args)
            t.metadata = {**(t.metadata or {}), "planexec": {**hints, "server": server}}
            return t

        return [
            tool("read", "label", {"read_only": True}, {"label": str}),
            tool("peek", "label", {"read_only": True}, {"label": str}),
            tool("pay", "to", {"destructive": True}, {"to": str, "amount": int}, "bank"),
            tool("wipe", "to", {"destructive": True}, {"to": str}, "bank"),
        ]


class Driver:
    """One process's driver of the run: its own store connection and event loop."""

    def __init__(self, world: World, *, approver: str, selection: dict[str, Any],
                 hang_tool: str | None, approval: bool) -> None:
        self.world = world
        self.approver = approver
        self.selection = selection
        self.hang_tool = hang_tool
        self.approval = approval
        self.loop = asyncio.new_event_loop()
        self.dead = self.loop.create_future()
        self.store = SQLiteRunStore(world.path, durability="process")
        self.asked = asyncio.Event()

    async def die(self) -> None:
        if not self.dead.done():
            self.dead.set_result(None)
        await asyncio.Event().wait()  # never returns: the process is gone

    async def ask(self, request: ApprovalRequest) -> Any:
        if self.approver == "approve":
            return ApprovalDecision.approve(by="cb")
        if self.approver == "edit":
            field = "amount" if request.tool == "pay" else "to"
            return ApprovalDecision.edit({field: 9 if field == "amount" else "s2"}, by="cb")
        if self.approver == "reject":
            return ApprovalDecision.reject("no", by="cb")
        if self.approver == "defer":
            return ApprovalDecision.defer("later")
        if self.approver == "garbage":
            return "approve"
        await self.die()  # "hang": killed while asking
        raise AssertionError("unreachable")

    def model(self, streamed: bool) -> FunctionModel:
        def answer(call: ModelCall, messages: list[Any]) -> str:
            if call.purpose == "select":
                return json.dumps(self.selection)
            if call.purpose == "plan":
                return STREAMED
            return "done"

        if not streamed:
            return FunctionModel(function=answer)

        async def gate(index: int, sent: str) -> None:
            if "Revised plan" in sent and not self.asked.is_set():
                try:  # the draft's step asks first (when it gets that far)
                    await asyncio.wait_for(self.asked.wait(), 0.3)
                except TimeoutError:
                    pass

        return StreamingModel(function=answer, chars_per_token=16, gate=gate)

    def agent(self, streamed: bool = False) -> PlanExecuteAgent:
        section: dict[str, Any] = {"enabled": True, "tools": ["peek"]} if self.approval else {}
        cfg = AgentConfig.model_validate({
            "approval": section, "recovery": {"max_replans": 0},
            "model": {"retry": {"attempts": 1}},
        })

        def seen(event: Event) -> None:
            if isinstance(event, ApprovalRequested):
                self.asked.set()

        return PlanExecuteAgent(
            self.model(streamed), self.world.tools(self), config=cfg, store=self.store,
            approver=None if self.approver == "none" else self.ask, event_handlers=[seen],
        )

    def drive(self, coro: Any) -> str:
        """Run ``coro`` until it ends or the driver dies; ``done``, ``killed`` or an error."""
        task = self.loop.create_task(coro)
        waiter = asyncio.wait({task, self.dead}, timeout=BOUND,
                              return_when=asyncio.FIRST_COMPLETED)
        self.loop.run_until_complete(waiter)
        if self.dead.done():
            PARKED.append((self, task))  # never resumed, never collected: a dead process
            return "killed"
        assert task.done(), "a driver neither finished nor died within the bound"
        exc = task.exception()
        self.loop.close()
        self.store.close()
        if exc is None:
            return "done"
        if isinstance(exc, LeaseHeldError):
            return "refused"
        raise exc


class GateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.kind: str | None = None
        self.saved_ttl = runs_module.LEASE_TTL

    @initialize()
    def setup(self) -> None:
        base = Path(TMP[0]) / f"example-{next(EXAMPLE_NO)}"
        base.mkdir(parents=True)
        self.world = World(base / "runs.sqlite3")
        runs_module.LEASE_TTL = TTL

    def teardown(self) -> None:
        runs_module.LEASE_TTL = self.saved_ttl

    def driver(self, **kw: Any) -> Driver:
        assert self.world is not None
        return Driver(self.world, **kw)

    @precondition(lambda self: self.kind is None)
    @rule(kind=choices(["fixed", "select", "stream"]), approver=APPROVERS,
          selection=SELECTIONS, hang=choices([None, "pay", "wipe"]))
    def start(self, kind: str, approver: str, selection: dict[str, Any],
              hang: str | None) -> None:
        d = self.driver(approver=approver, selection=selection, hang_tool=hang, approval=True)
        agent = d.agent(streamed=kind == "stream")
        if kind == "stream":
            coro = agent.run("clean up", run_id=RUN)
        else:
            coro = agent.execute_plan(FIXED if kind == "fixed" else SELECT, run_id=RUN)
        self.kind = kind
        outcome = d.drive(coro)
        event(f"start: {outcome}")
        assert outcome in ("done", "killed")

    @precondition(lambda self: self.kind is not None)
    @rule(action=choices(["approve", "edit", "reject"]), together=st.booleans())
    def decide(self, action: str, together: bool) -> None:
        assert self.world is not None
        reader = SQLiteRunStore(self.world.path)
        try:
            waiting = [r for r in waiting_steps(reader, RUN)]
        finally:
            reader.close()
        if not waiting:
            return
        request = waiting[0]
        field = "amount" if request.tool == "pay" else ("to" if request.tool == "wipe"
                                                       else "label")
        value: Any = 7 if field == "amount" else "s2"

        def one(i: int) -> str:
            store = SQLiteRunStore(self.world.path)  # type: ignore[union-attr]
            decision = {
                "approve": ApprovalDecision.approve(by=f"d{i}"),
                "edit": ApprovalDecision.edit({field: value}, by=f"d{i}"),
                "reject": ApprovalDecision.reject("no", by=f"d{i}"),
            }[action if i == 0 else ("reject" if action != "reject" else "approve")]
            try:
                asyncio.run(decide_step(store, RUN, request.step_id, decision,
                                        catalog=ToolCatalog(self.world.tools(  # type: ignore
                                            Driver.__new__(Driver)))))
                return "ok"
            except AlreadyDecidedError:
                return "late"
            except ApprovalError:
                return "refused"
            finally:
                store.close()

        outcomes = run_together(one, 2 if together else 1)
        event(f"decide: {sorted(outcomes)}")
        assert outcomes.count("ok") <= 1, outcomes  # compare-and-set: one decider wins

    @precondition(lambda self: self.kind is not None)
    @rule(approver=APPROVERS, selection=SELECTIONS, hang=choices([None, "pay", "wipe"]),
          together=st.booleans(), approval=st.booleans())
    def resume(self, approver: str, selection: dict[str, Any], hang: str | None,
               together: bool, approval: bool) -> None:
        import time

        time.sleep(TTL * 1.5)  # a dead driver's lease expires (no heartbeat)

        def one(i: int) -> str:
            d = self.driver(approver=approver, selection=selection,
                            hang_tool=hang if i == 0 else None, approval=approval)
            agent = d.agent(streamed=self.kind == "stream")
            try:
                return d.drive(resume_run(agent, d.store, RUN, allow_running=True))
            except RunError as exc:  # e.g. refused before the loop ran (never a call)
                return f"error: {exc}"

        outcomes = run_together(one, 2 if together else 1)
        for o in outcomes:
            event(f"resume: {o if not o.startswith('error') else 'error'}")
        assert all(o in ("done", "killed", "refused") or o.startswith("error")
                   for o in outcomes), outcomes

    @invariant()
    def destructive_calls_only_with_a_claimed_matching_decision(self) -> None:
        if self.world is None or not self.world.path.exists():
            return
        reader = SQLiteRunStore(self.world.path)
        try:
            records = reader.approval_requests(RUN)
        finally:
            reader.close()
        claimed = Counter(
            (r.tool, canonical_json(r.decided_args)) for r in records
            if r.state is RequestState.CLAIMED
        )
        made = Counter(
            (tool, canonical_json(args)) for tool, args in self.world.calls
            if tool in DESTRUCTIVE
        )
        for key, n in made.items():
            assert n <= claimed[key], (
                f"{key} called {n} time(s) with {claimed[key]} claimed decision(s) for it; "
                f"records: {[(r.tool, r.state, r.action, r.decided_args) for r in records]}"
            )

    @invariant()
    def no_recorded_success_runs_again(self) -> None:
        if self.world is not None:
            assert self.world.repeats == []


def run_together(fn: Any, n: int) -> list[str]:
    """``fn(i)`` for i < n, at once in threads (n = 1: here)."""
    if n == 1:
        return [fn(0)]
    out: list[str] = [""] * n
    barrier = threading.Barrier(n)

    def go(i: int) -> None:
        barrier.wait(BOUND)
        out[i] = fn(i)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND * 3)
        assert not t.is_alive(), "a concurrent driver did not finish within the bound"
    return out


SEEN: Counter[str] = Counter()
"""What the examples did (kills, refusals, late deciders), for the coverage check."""


def event(what: str) -> None:
    SEEN[what] += 1


TMP: list[str] = []
EXAMPLE_NO = itertools.count()

GateMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_gate_holds_under_random_interleavings(tmp_path: Path) -> None:
    TMP[:] = [str(tmp_path)]
    SEEN.clear()
    GateMachine.TestCase("runTest").runTest()
    print(dict(SEEN))  # noqa: T201 - the coverage, shown with -s
    # the examples reach what the gate must hold against (derandomized: stable)
    assert SEEN["start: killed"] + SEEN["resume: killed"] > 0
    assert any(k.startswith("decide: ") and "late" in k for k in SEEN)
    assert SEEN["resume: refused"] > 0
