"""Every fast path gives what its general path gives: random plans run both ways.

`planexec._fastpaths.ON` switches every fast path of the hot path (the table in
docs/performance.md): the resolver's quick resolution, the tool's direct coroutine, the
call driven in the step's task, the one-attempt call, a chain run on in one task, the
quick tool lookup, the frozen dataclasses built at once, the quick output check, the
store's hot-event encoding and its coroutine-free subscriber. Random plans (chains,
fan-outs, failures, timeouts, retries, empty outputs, approvals, rejections, NaN
literals, reasoning steps) run with it on and off must give equal results, equal events
(per step, in order: steps that run at once may interleave differently) and equal
records in a `MemoryRunStore` and a `SQLiteRunStore`.

A circuit breaker is shared by every step calling its tool, so which of several steps
failing at once finds it open depends on the order their calls end: that is scheduling,
not a path. Each step that fails therefore calls a tool of its own (``hang3``, ``flaky5``),
and the breakers open after two failures, so a step's own third attempt finds its
breaker open: the breaker's path is run both ways, step by step.
"""

from __future__ import annotations

import asyncio
import math
import re
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planexec._fastpaths as _fastpaths
from planexec.approval import ApprovalDecision, ApprovalGate, ApprovalPolicy, ApprovalRequest
from planexec.config import ExecutorSettings, RetrySettings
from planexec.errors import RetryableToolError
from planexec.events import Event, EventBus, RunStarted
from planexec.executor import Executor
from planexec.plan import Plan, Ref, Step
from planexec.resilience import BreakerRegistry
from planexec.store import SQLiteRunStore
from planexec.store.codec import event_to_json
from planexec.store.memory import MemoryRunStore
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

BOUND = 30.0
RUN_ID = "diff"
SAFE = {"read_only": True}

# what differs from one run to the next whatever the path: clocks
_TIMES = {"ts", "started_at", "duration", "at", "recorded_at", "decided_at", "requested_at"}


MAX_STEPS = 7
_FAILING = ("bad", "payload", "hang", "flaky", "empty")  # one tool per step: its own breaker


def _tools() -> ToolCatalog:
    """Fresh tools (their counters start at zero) for one run."""
    flaky_calls: dict[int, int] = defaultdict(int)

    def flaky(n: int) -> dict[str, int]:
        flaky_calls[n] += 1
        if flaky_calls[n] == 1:
            raise RetryableToolError(f"transient {n}")  # retried by class
        return {"v": n}

    async def hang(**_: Any) -> str:
        await asyncio.Event().wait()  # never set: the tool's timeout ends it
        return "never"

    per_step = [
        tool
        for sid in range(1, MAX_STEPS + 1)
        for tool in (
            fake_tool(f"bad{sid}", error="boom", args={"n": int}),
            fake_tool(f"payload{sid}", {"error": "no such thing"}, args={"n": int}),
            fake_tool(f"hang{sid}", function=hang, args={"n": int}, hints=SAFE),
            fake_tool(f"flaky{sid}", function=flaky, args={"n": int}, hints=SAFE),
            fake_tool(f"empty{sid}", [], args={"n": int}, hints=SAFE),
        )
    ]
    return ToolCatalog(
        [
            *per_step,
            fake_tool("get", function=lambda x: {"v": x * 2, "items": [x, x + 1]},
                      args={"x": int}, hints=SAFE),
            fake_tool("cat", function=lambda a, b="": f"{a}|{b}",
                      args={"a": object, "b": (str, "")}, hints=SAFE),
            fake_tool("wipe", function=lambda target: f"wiped {target}",
                      args={"target": str}, hints={"destructive": True}),
        ]
    )


async def _approver(request: ApprovalRequest) -> ApprovalDecision:
    target = str(request.args.get("target", ""))
    if target.endswith("0"):
        return ApprovalDecision.reject("not that one", by="tester")
    if target.endswith("1"):
        return ApprovalDecision.defer("later")
    if target.endswith("2"):
        return ApprovalDecision.edit({"target": "edited"}, by="tester")
    return ApprovalDecision.approve(by="tester")


_KINDS = ("get", "get_ref", "cat_ref", "cat_path", "flaky", "bad", "empty", "payload",
          "hang", "wipe", "nan", "reason", "unknown")


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    n = draw(st.integers(1, MAX_STEPS))
    steps: list[Step] = []
    for sid in range(1, n + 1):
        kind = draw(st.sampled_from(_KINDS if sid > 1 else _KINDS[:1] + _KINDS[4:]))
        k = draw(st.integers(0, 9))
        earlier = draw(st.integers(1, sid - 1)) if sid > 1 else None
        deps: tuple[int, ...] = ()
        tool: str | None
        args: dict[str, Any]
        if kind == "get":
            tool, args = "get", {"x": k}
        elif kind == "get_ref":
            tool, args, deps = "get", {"x": Ref(earlier, ("v",))}, (earlier,)  # type: ignore[arg-type]
        elif kind == "cat_ref":
            tool, args, deps = "cat", {"a": Ref(earlier), "b": str(k)}, (earlier,)  # type: ignore[arg-type]
        elif kind == "cat_path":
            tool, args, deps = "cat", {"a": Ref(earlier, ("items", 0))}, (earlier,)  # type: ignore[arg-type]
        elif kind == "wipe":
            tool, args = "wipe", {"target": f"t{k}"}
        elif kind == "nan":
            tool, args = "get", {"x": draw(st.sampled_from([math.inf, -math.inf, math.nan]))}
        elif kind == "reason":
            tool, args = None, {}
            deps = (earlier,) if earlier is not None else ()
        elif kind == "unknown":
            tool, args = "no_such_tool", {"n": k}
        elif kind == "flaky":  # its own counter: steps running at once may run in any order
            tool, args = f"flaky{sid}", {"n": sid * 10 + k}
        elif kind in _FAILING:
            tool, args = f"{kind}{sid}", {"n": k}
        else:
            tool, args = kind, {"n": k}
        if draw(st.booleans()) and earlier is not None and not deps:
            deps = (earlier,)  # an order-only dependency
        steps.append(Step(id=sid, tool=tool, args=args, explicit_deps=deps, depends_on=deps))
    return Plan(steps=tuple(steps))


_COUNTDOWN = re.compile(r"next try in \d+\.\d+s")


def _plain(value: Any) -> Any:
    """Recorded data without clocks."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, str):  # an open breaker's countdown is a clock too
        return _COUNTDOWN.sub("next try in Ns", value)
    return value


def _by_step(events: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    """Events per step, each step's in order (steps that run at once may interleave)."""
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        out[e.get("step_id", e.get("result", {}).get("step_id"))].append(_plain(e))
    return dict(out)


async def _run_once(plan: Plan, fast: bool, root: Path) -> dict[str, Any]:
    _fastpaths.ON = fast
    seen: list[Event] = []
    bus = EventBus([seen.append])
    memory = MemoryRunStore()
    memory.attach(bus)
    sqlite = SQLiteRunStore(root / f"runs-{fast}.db")
    sqlite.attach(bus)
    try:
        config = ExecutorSettings(
            tool_retry=RetrySettings(attempts=3, base_delay=0.0, max_delay=0.0, jitter=0.0),
            tool_timeouts={f"hang{sid}": 0.02 for sid in range(1, MAX_STEPS + 1)},
        )
        gate = ApprovalGate(ApprovalPolicy(), _approver, bus=bus, run_id=RUN_ID)
        executor = Executor(
            _tools(), config=config, bus=bus, run_id=RUN_ID, approvals=gate,
            breakers=BreakerRegistry(2, 30.0),
        )
        await bus.emit(RunStarted(run_id=RUN_ID, question="differential"))
        results = await asyncio.wait_for(executor.run(plan), BOUND)
        await sqlite.flush()
        await memory.flush()
        return {
            "results": {r.step_id: _plain(r.to_dict()) for r in results},
            "events": _by_step([event_to_json(e) for e in seen]),
            "memory": _by_step(memory.events(RUN_ID)),
            "memory_steps": {
                s.result.step_id: _plain(s.to_dict()) for s in memory.step_results(RUN_ID)
            },
            "sqlite": _by_step(sqlite.events(RUN_ID)),
            "sqlite_steps": {
                s.result.step_id: _plain(s.to_dict()) for s in sqlite.step_results(RUN_ID)
            },
        }
    finally:
        sqlite.close()
        _fastpaths.ON = True


async def _both_ways(plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        fast = await _run_once(plan, True, Path(tmp))
        general = await _run_once(plan, False, Path(tmp))
    return fast, general


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
def test_random_plans_give_the_same_results_events_and_records_both_ways(plan: Plan) -> None:
    fast, general = asyncio.run(_both_ways(plan))
    for key in fast:
        assert fast[key] == general[key], key
    # every step has a result, but those held behind a step waiting for approval
    missing = {s.id for s in plan.steps} - set(fast["results"])
    waiting = {sid for sid, r in fast["results"].items() if r["status"] == "WAITING_APPROVAL"}
    for s in plan.steps:
        if s.id in missing:
            assert s.deps & (waiting | missing), s.id


async def test_the_general_path_is_taken_when_the_switch_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The switch reaches the fast paths: with it off, the resolver's quick path is not
    taken (a plan of literals resolves through the full resolution)."""
    from planexec import resolver as resolver_module

    taken: list[bool] = []
    quick = resolver_module._quick_resolution

    def spy(*args: Any, **kwargs: Any) -> Any:
        taken.append(True)
        return quick(*args, **kwargs)

    monkeypatch.setattr(resolver_module, "_quick_resolution", spy)
    plan = Plan(steps=(Step(id=1, tool="get", args={"x": 1}),))
    with tempfile.TemporaryDirectory() as tmp:
        await _run_once(plan, False, Path(tmp))
        assert taken == []
        await _run_once(plan, True, Path(tmp))
    assert taken
