"""The same plans, tools and assertions on the local backend and on Ray."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import BaseTool

from planexec.config import ExecutorSettings, RetrySettings
from planexec.errors import ErrorKind
from planexec.events import Event, EventBus, FallbackUsed, StepFinished
from planexec.executor import Executor
from planexec.parsing.refs import find_refs
from planexec.plan import Plan, Step
from planexec.results import StepResult, StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

pytest.importorskip("ray")

import ray_helpers as h  # noqa: E402 - after the skip

from planexec.distributed import (  # noqa: E402
    RayOptions,
    RaySettings,
    RayToolRunner,
    WorkerLostError,
    runner_for,
    tool_options,
)

pytestmark = [pytest.mark.ray]

FAST = RetrySettings(attempts=3, base_delay=0.0, max_delay=0.0, jitter=0.0)
SAFE = {"read_only": True}


def mk(sid: int, tool: str | None, args: dict[str, Any] | None = None,
       deps: tuple[int, ...] = ()) -> Step:
    parsed = find_refs(args or {})
    refs = {r.step for r in Step(id=sid, args=parsed).refs}
    return Step(id=sid, tool=tool, args=parsed, explicit_deps=deps,
                depends_on=tuple(sorted(set(deps) | refs)))


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return str(request.param)


def make_runner(backend: str, settings: RaySettings | None = None) -> RayToolRunner | None:
    if backend == "local":
        return None
    return RayToolRunner(settings or RaySettings(default=RayOptions(num_cpus=0.5)))


async def run_plan(
    backend: str, tools: list[BaseTool], *steps: Step, runner: Any = None, **config: Any
) -> tuple[dict[int, StepResult], list[Event]]:
    events: list[Event] = []
    executor = Executor(
        ToolCatalog(tools),
        config=ExecutorSettings(tool_retry=FAST, **config),
        bus=EventBus([events.append]),
        run_id="r",
        runner=runner if runner is not None else make_runner(backend),
    )
    results = await executor.run(Plan(steps=steps))
    return {r.step_id: r for r in results}, events


def comparable(r: StepResult) -> dict[str, Any]:
    d = r.to_dict()
    for key in ("started_at", "duration"):
        d.pop(key)
    return d


# -- same results on both backends ----------------------------------------------------------


async def test_a_fan_out_plan_gives_the_same_results_on_both_backends(backend: str) -> None:
    tools = [
        fake_tool("sites", {"sites": ["MAIN", "WEST"]}, hints=SAFE),
        fake_tool("assets", None, args={"site_name": str}, hints=SAFE,
                  function=lambda site_name: {"site": site_name, "assets": ["CH-6"]}),
        fake_tool("report", None, args={"a": dict, "b": dict}, hints=SAFE,
                  function=lambda a, b: f"{a['site']}+{b['site']}"),
    ]
    steps = (
        mk(1, "sites"),
        mk(2, "assets", {"site_name": "<step_1.sites[0]>"}),
        mk(3, "assets", {"site_name": "<step_1.sites[1]>"}),
        mk(4, "report", {"a": "<step_2>", "b": "<step_3>"}),
    )
    got, _ = await run_plan(backend, tools, *steps)
    want, _ = await run_plan("local", tools, *steps)
    assert {k: comparable(v) for k, v in got.items()} == {
        k: comparable(v) for k, v in want.items()
    }
    assert got[4].output == "MAIN+WEST" and got[4].status is StepStatus.SUCCEEDED


async def test_a_tool_exception_is_the_same_tool_error_on_both_backends(backend: str) -> None:
    tools = [fake_tool("bad", error=ValueError("boom"), args={"x": int})]
    got, _ = await run_plan(backend, tools, mk(1, "bad", {"x": 1}))
    r = got[1]
    assert r.status is StepStatus.FAILED and r.error_kind is ErrorKind.TOOL_ERROR
    assert r.error is not None and "raised ValueError: boom" in r.error
    assert "not retried" in r.error and r.attempts == 1


async def test_an_error_payload_and_a_blocked_dependent_match_on_both_backends(
    backend: str,
) -> None:
    tools = [
        fake_tool("lookup", {"error": "unknown site"}, hints=SAFE),
        fake_tool("use", "x", args={"v": str}, hints=SAFE),
    ]
    steps = (mk(1, "lookup"), mk(2, "use", {"v": "<step_1.name>"}))
    got, _ = await run_plan(backend, tools, *steps)
    want, _ = await run_plan("local", tools, *steps)
    assert [comparable(r) for r in got.values()] == [comparable(r) for r in want.values()]
    assert got[1].error_kind is ErrorKind.TOOL_ERROR
    assert got[2].status is StepStatus.BLOCKED
    assert got[2].error_kind is ErrorKind.UPSTREAM_FAILED


async def test_a_slow_tool_times_out_with_tool_timeout_on_both_backends(backend: str) -> None:
    tools = [fake_tool("slow", "late", latency=30.0)]
    got, _ = await run_plan(backend, tools, mk(1, "slow"), tool_timeout=0.5)
    assert got[1].error_kind is ErrorKind.TOOL_TIMEOUT
    assert got[1].error is not None and "timed out after 0.5s" in got[1].error


async def test_a_flaky_safe_tool_is_retried_and_reported_on_both_backends(
    backend: str, tmp_path: Path
) -> None:
    tools = [h.flaky_tool(str(tmp_path), fail_times=1)]
    got, events = await run_plan(backend, tools, mk(1, "flaky", {"x": 7}))
    assert got[1].status is StepStatus.SUCCEEDED and got[1].output == {"x": 7, "call": 2}
    assert got[1].attempts == 2 and h.calls_of(tmp_path, "flaky") == 2
    assert [e.code for e in events if isinstance(e, FallbackUsed)] == ["TOOL_RETRY"]


async def test_the_invariant_holds_the_tool_is_not_called_with_a_placeholder(
    backend: str, tmp_path: Path
) -> None:
    tools = [h.flaky_tool(str(tmp_path), fail_times=0)]
    got, _ = await run_plan(backend, tools, mk(1, "flaky", {"x": "{step_9_hint}"}))
    assert got[1].status is StepStatus.FAILED
    assert h.calls_of(tmp_path, "flaky") == 0


async def test_a_tool_keeps_its_in_process_state_between_calls_on_both_backends(
    backend: str,
) -> None:
    steps = (
        mk(1, "count"), mk(2, "count", deps=(1,)), mk(3, "note", {"text": "a"}, deps=(2,)),
        mk(4, "note", {"text": "b"}, deps=(3,)), mk(5, "notes", deps=(4,)),
    )
    got, _ = await run_plan(backend, h.counter_tools(), *steps)
    assert [got[i].output["n"] for i in (1, 2)] == [1, 2]
    # Two tools sharing one list (like the demo's work-order book) still share it.
    assert got[5].output["notes"] == ["a", "b"]


async def test_a_flaky_in_memory_tool_recovers_on_its_retry_on_both_backends(
    backend: str,
) -> None:
    tools = [fake_tool("flaky", {"ok": True}, error="down", fail_times=1, hints=SAFE)]
    got, events = await run_plan(backend, tools, mk(1, "flaky"))
    assert got[1].ok and got[1].attempts == 2, got[1].error
    assert [e.code for e in events if isinstance(e, FallbackUsed)] == ["TOOL_RETRY"]


# -- Ray only -------------------------------------------------------------------------------


async def test_tools_that_ask_for_nothing_share_one_actor_and_others_get_their_own(
    ray_session: Any,
) -> None:
    runner = RayToolRunner()
    tools = [*h.counter_tools(), h.where_tool()]
    got, _ = await run_plan(
        "ray", tools, mk(1, "count"), mk(2, "notes"), mk(3, "where"), runner=runner
    )
    assert all(r.ok for r in got.values())
    assert got[1].output["pid"] == got[2].output["pid"] != os.getpid()
    assert got[3].output["pid"] != got[1].output["pid"]  # where asks for 0.5 CPU
    assert got[3].output["resources"] == {"CPU": 0.5}
    assert (runner.actors, runner.tasks, runner.calls) == (2, 0, 3)
    runner.close()
    again, _ = await run_plan("ray", tools, mk(1, "count"), runner=runner)
    assert again[1].output["n"] == 1  # a closed runner's actors (and state) are gone


async def test_a_stateless_tool_runs_each_call_as_a_task_on_a_fresh_copy(
    ray_session: Any,
) -> None:
    runner = RayToolRunner(RaySettings(tool_options={"count": RayOptions(stateless=True)}))
    got, _ = await run_plan(
        "ray", h.counter_tools(), mk(1, "count"), mk(2, "count", deps=(1,)), runner=runner
    )
    assert [got[i].output["n"] for i in (1, 2)] == [1, 1]  # the documented trade-off
    assert (runner.tasks, runner.actors) == (2, 0)
    opts = tool_options(ToolCatalog(h.counter_tools()).get("count"), runner.settings)
    assert opts.stateless and opts.to_ray() == {}  # not a Ray option




async def test_tool_steps_run_in_ray_worker_processes_with_their_resources(
    ray_session: Any,
) -> None:
    runner = RayToolRunner()
    got, events = await run_plan("ray", [h.where_tool()], mk(1, "where"), runner=runner)
    out = got[1].output
    assert got[1].ok and out["pid"] != os.getpid()
    assert out["resources"] == {"CPU": 0.5}  # from tool.metadata["planexec"]["ray"]
    assert runner.calls == 1
    assert [e.type for e in events][-1] == "StepFinished"


def test_resource_options_merge_default_tool_metadata_and_settings() -> None:
    spec = ToolCatalog([h.where_tool()]).get("where")
    settings = RaySettings(
        default=RayOptions(num_cpus=1, resources={"zone_a": 1}),
        tool_options={"where": RayOptions(num_gpus=1, resources={"big": 2})},
    )
    assert tool_options(spec, settings).to_ray() == {
        "num_cpus": 0.5, "num_gpus": 1, "resources": {"zone_a": 1, "big": 2}
    }
    assert tool_options(spec, RaySettings()).to_ray() == {"num_cpus": 0.5}


async def test_a_whole_output_reaches_the_next_task_as_an_object_reference(
    ray_session: Any,
) -> None:
    tools = h.big_tools(200_000)
    runner = RayToolRunner(RaySettings(default=RayOptions(num_cpus=0.5)))
    got, _ = await run_plan(
        "ray", tools, mk(1, "produce"), mk(2, "consume", {"table": "<step_1>"}), runner=runner,
        max_output_chars=None,  # a big table is the point here: no output cap
    )
    assert got[2].ok and got[2].output["n"] == 200_000, got[2].error
    assert runner.refs_passed == 1
    assert runner.object_ref(got[1].output) is not None
    # The consumer ran in a worker and got the table there, not from this process.
    assert got[2].output["pid"] != os.getpid()
    # Passing by value gives the same result.
    by_value = RayToolRunner(RaySettings(default=RayOptions(num_cpus=0.5), pass_refs=False))
    again, _ = await run_plan(
        "ray", tools, mk(1, "produce"), mk(2, "consume", {"table": "<step_1>"}),
        runner=by_value, max_output_chars=None,
    )
    assert again[2].output["n"] == 200_000 and by_value.refs_passed == 0


async def test_tools_that_do_not_pickle_are_loaded_in_the_worker_by_factory_spec(
    ray_session: Any,
) -> None:
    tools = h.unpicklable_tools()
    shipped, _ = await run_plan("ray", tools, mk(1, "locked", {"word": "hi"}))
    assert shipped[1].error_kind is ErrorKind.TOOL_ERROR  # a lock does not pickle
    assert shipped[1].error is not None and "cannot be sent to the Ray workers" in shipped[1].error
    assert "executor.ray.tools" in shipped[1].error
    runner = RayToolRunner(
        RaySettings(tools="ray_helpers:unpicklable_tools", default=RayOptions(num_cpus=0.5))
    )
    got, _ = await run_plan("ray", tools, mk(1, "locked", {"word": "hi"}), runner=runner)
    assert got[1].ok and got[1].output["word"] == "HI", got[1].error
    assert got[1].output["pid"] != os.getpid()


async def test_a_worker_that_dies_during_a_safe_call_is_retried_by_the_executor(
    ray_session: Any, tmp_path: Path
) -> None:
    tool = h.crash_once_tool(str(tmp_path), SAFE)
    got, events = await run_plan("ray", [tool], mk(1, "crashy"))
    assert got[1].ok and got[1].attempts == 2
    retry = [e for e in events if isinstance(e, FallbackUsed)]
    assert retry and "was lost" in retry[0].message


async def test_a_worker_that_dies_during_an_unsafe_call_fails_the_step_unretried(
    ray_session: Any, tmp_path: Path
) -> None:
    tool = h.crash_once_tool(str(tmp_path), {"destructive": True})
    got, _ = await run_plan("ray", [tool], mk(1, "crashy"))
    r = got[1]
    assert r.error_kind is ErrorKind.TOOL_ERROR and r.attempts == 1
    assert r.error is not None and WorkerLostError.__name__ in r.error
    assert "outcome is unknown" in r.error and "destructive" in r.error
    assert h.calls_of(tmp_path, "crashy") == 1


def test_the_backend_setting_chooses_the_runner() -> None:
    assert runner_for("local") is None
    assert isinstance(runner_for("ray", RaySettings(address="auto")), RayToolRunner)


def test_step_finished_events_carry_the_same_result_shape() -> None:
    # A StepFinished from a Ray run pickles like any event (it crosses processes).
    import pickle

    ev = StepFinished(run_id="r", result=StepResult(step_id=1, tool="t",
                                                    status=StepStatus.SUCCEEDED))
    assert pickle.loads(pickle.dumps(ev)) == ev


async def test_one_setting_moves_an_agent_s_tool_calls_to_ray(backend: str) -> None:
    from planexec.agent import PlanExecuteAgent
    from planexec.config import AgentConfig
    from planexec.testing import ScriptedChatModel

    config = AgentConfig.from_dict({
        "executor": {"backend": backend, "ray": {"default": {"num_cpus": 0.5}}},
    })
    tools = [h.where_tool(), fake_tool("echo", None, args={"pid": int}, hints=SAFE,
                                       function=lambda pid: {"seen": pid})]
    model = ScriptedChatModel(replies=[
        h.plan_text((1, "where", "{}", "None"), (2, "echo", '{"pid": "<step_1.pid>"}', "#S1")),
        "answered",
    ])
    run = await PlanExecuteAgent(model, tools, config=config).run("where do tools run?")
    assert run.answer == "answered" and [r.status for r in run.results] == [
        StepStatus.SUCCEEDED, StepStatus.SUCCEEDED
    ]
    pid = run.results[0].output["pid"]
    assert (pid == os.getpid()) is (backend == "local")
    assert run.results[1].output == {"seen": pid}
