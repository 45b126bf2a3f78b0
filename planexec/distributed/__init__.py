"""Scale-out on Ray (``pip install "planexec[ray]"``): tool steps and whole runs.

- `RayToolRunner`: the executor's tool calls on Ray — in each tool's actor, so tool state
  persists between calls as locally (or as stateless tasks, opt-in per tool) — with
  resources per tool and earlier outputs passed as object references. Chosen by one setting,
  ``AgentConfig.executor.backend = "ray"`` (or ``Executor(..., runner=RayToolRunner())``).
- `run_many` / `arun_many`: whole agent runs on Ray workers, their events streamed back
  to the driver's store; a run whose worker dies is retried elsewhere when its tools are
  safe, else reported as failed with the reason.

Importing this package does not import Ray; Ray is imported (or reported missing with
the pip command) when a runner first needs it. See ``docs/scaling.md``.
"""

from __future__ import annotations

from planexec.distributed._ray import ensure_ray, import_ray
from planexec.distributed.runner import RayToolRunner, WorkerLostError, tool_options
from planexec.distributed.runs import RunOutcome, arun_many, run_jobs, run_many
from planexec.distributed.settings import RayOptions, RaySettings

__all__ = [
    "RayOptions",
    "RaySettings",
    "RayToolRunner",
    "RunOutcome",
    "WorkerLostError",
    "arun_many",
    "ensure_ray",
    "import_ray",
    "run_jobs",
    "run_many",
    "runner_for",
    "tool_options",
]


def runner_for(backend: str, settings: RaySettings | None = None) -> RayToolRunner | None:
    """The tool runner of a backend: None for ``local`` (the executor's default).

    Raises:
        ConfigError: an unknown backend.
        MissingExtraError: ``ray`` without Ray installed.
    """
    from planexec.errors import ConfigError, require_extra

    if backend == "local":
        return None
    if backend == "ray":
        require_extra("ray", "ray")
        return RayToolRunner(settings)
    raise ConfigError(f"unknown executor backend {backend!r} (use 'local' or 'ray')")
