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

The names are imported on first use (PEP 562), so importing one submodule does not load
the others: the tool runner (`planexec.distributed.runner`, a lower layer used by the
runtime) never pulls in the run drivers (`planexec.distributed.runs`, which use the agent).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planexec.distributed._ray import ensure_ray, import_ray
    from planexec.distributed.runner import (
        RayToolRunner,
        WorkerLostError,
        runner_for,
        tool_options,
    )
    from planexec.distributed.runs import RunOutcome, arun_many, run_jobs, run_many
    from planexec.distributed.settings import RayOptions, RaySettings

_LAZY: dict[str, str] = {
    "RayOptions": "planexec.distributed.settings",
    "RaySettings": "planexec.distributed.settings",
    "RayToolRunner": "planexec.distributed.runner",
    "RunOutcome": "planexec.distributed.runs",
    "WorkerLostError": "planexec.distributed.runner",
    "arun_many": "planexec.distributed.runs",
    "ensure_ray": "planexec.distributed._ray",
    "import_ray": "planexec.distributed._ray",
    "run_jobs": "planexec.distributed.runs",
    "run_many": "planexec.distributed.runs",
    "runner_for": "planexec.distributed.runner",
    "tool_options": "planexec.distributed.runner",
}
"""Public names imported on first use, and the module each comes from."""

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


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'planexec.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
