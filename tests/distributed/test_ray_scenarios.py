"""Every regression scenario gives the same outcome with ``executor.backend: ray`` as locally.

Each scenario in ``tests/scenarios`` runs twice in this process: as written (local tool
calls) and with its configuration's ``executor.backend`` set to ``ray``, so every tool
call goes to a Ray tool actor. The two `ScenarioResult.outcome()`s (status, failures,
model and tool calls, the whole run without timings) must be equal, and the Ray run must
have made its tool calls on Ray.

One `RayToolRunner` serves every scenario of this module (``runner_for`` is patched to
return it): a tool actor is a worker process that takes a second or more to start here,
and each scenario builds new tool objects, so each keeps its own state in the shared
actor exactly as it would in a runner of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

import planexec.distributed as distributed  # noqa: E402
from planexec.distributed import RaySettings, RayToolRunner  # noqa: E402
from planexec.regress.runner import arun_scenario  # noqa: E402
from planexec.regress.scenario import MCPTools, Scenario, load_scenario  # noqa: E402

pytestmark = [pytest.mark.ray]

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
PATHS = sorted(SCENARIOS.glob("*.scenario.yaml"))

CANNOT_RUN_ON_RAY = (
    "its tools are an MCP stdio session, which cannot be pickled to a Ray worker; on Ray, "
    "MCP tools are loaded inside the workers (executor.ray.tools = 'MODULE:ATTR')"
)


def on_ray(scenario: Scenario) -> Scenario:
    """The scenario with ``config.executor.backend = "ray"`` (nothing else changed)."""
    executor = scenario.config.executor.model_copy(update={"backend": "ray"})
    config = scenario.config.model_copy(update={"executor": executor})
    return scenario.model_copy(update={"config": config})


@pytest.fixture(scope="module")
def shared_runner(ray_session: Any) -> Iterator[RayToolRunner]:
    runner = RayToolRunner()
    real = distributed.runner_for

    def runner_for(backend: str, settings: RaySettings | None = None) -> Any:
        if backend == "ray" and (settings is None or settings == RaySettings()):
            return runner
        return real(backend, settings)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distributed, "runner_for", runner_for)
        yield runner
    runner.close()


def test_the_scenario_folder_is_there() -> None:
    assert len(PATHS) >= 40, SCENARIOS


@pytest.mark.parametrize(
    "path", PATHS, ids=[p.name.removesuffix(".scenario.yaml") for p in PATHS]
)
async def test_a_scenario_gives_the_same_outcome_on_ray_as_locally(
    path: Path, shared_runner: RayToolRunner
) -> None:
    scenario = load_scenario(path)
    if isinstance(scenario.tools, MCPTools):
        pytest.skip(CANNOT_RUN_ON_RAY)
    assert scenario.config.executor.backend == "local"
    local = await arun_scenario(scenario)
    assert local.status in ("passed", "skipped"), local.describe()
    calls_before = shared_runner.calls
    remote = await arun_scenario(on_ray(scenario))
    assert remote.outcome() == local.outcome(), remote.describe()
    assert shared_runner.calls - calls_before == remote.tool_calls
