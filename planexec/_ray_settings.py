"""Settings of the Ray backend (pure pydantic: importing this never imports Ray).

They live outside `planexec.distributed` so that the agent configuration
(`planexec.config`) can use them without importing the Ray backend;
`planexec.distributed.settings` re-exports them.

They live under ``[executor.ray]`` in an agent configuration file, next to the one
setting that chooses the backend::

    [executor]
    backend = "ray"              # "local" (default) or "ray"

    [executor.ray]
    address = "auto"             # or "ray://head:10001"; default: $RAY_ADDRESS, else "local"
    tools = "myapp.tools:TOOLS"  # optional: load tools inside the workers
    default = { num_cpus = 1 }
    tool_options = { forecast = { num_cpus = 4, resources = { big_mem = 1 }, stateless = true } }
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RayOptions", "RaySettings"]


class RayOptions(BaseModel):
    """Resources a Ray task or tool actor asks for (see ``ray.remote`` options).

    Unset values are left to Ray (a task asks for one CPU by default). A tool actor holds
    what it asks for as long as it lives.
    """

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )

    num_cpus: float | None = Field(default=None, ge=0)
    """CPUs the task needs (fractions allowed, e.g. 0.25 for I/O-bound tools)."""
    num_gpus: float | None = Field(default=None, ge=0)
    """GPUs the task needs."""
    memory: int | None = Field(default=None, ge=0)
    """Bytes of memory the task reserves (a scheduling hint)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom resources, e.g. ``{"big_mem": 1}`` (declared with ``ray start --resources``)."""
    stateless: bool | None = None
    """Tool calls only: run each call as a Ray task with a fresh copy of the tool (spreads
    over the cluster; in-process state does not carry over) instead of in the tool's actor
    (the default: state persists between calls, as locally). Not a Ray option."""

    def merged(self, other: RayOptions) -> RayOptions:
        """Return these options with every value that ``other`` sets taken from ``other``."""
        data = self.model_dump(exclude_none=True)
        over = other.model_dump(exclude_none=True)
        resources = {**data.pop("resources", {}), **over.pop("resources", {})}
        return RayOptions(**{**data, **over, "resources": resources})

    def to_ray(self) -> dict[str, Any]:
        """The keyword arguments for ``remote_function.options(...)``."""
        out: dict[str, Any] = self.model_dump(exclude_none=True)
        out.pop("stateless", None)
        if not out.get("resources"):
            out.pop("resources", None)
        return out

    @classmethod
    def coerce(cls, value: RayOptions | Mapping[str, Any] | None) -> RayOptions:
        """Accept options or a mapping of them (None: no options)."""
        if value is None:
            return cls()
        if isinstance(value, RayOptions):
            return value
        return cls.model_validate(dict(value))


class RaySettings(BaseModel):
    """How the Ray backend reaches the cluster and what tool tasks ask for."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )

    address: str | None = None
    """Cluster address: ``auto`` (the ``ray start`` cluster of this machine),
    ``ray://host:10001``, ``host:6379``, or ``local`` (a new private Ray); None:
    ``$RAY_ADDRESS`` if set, else ``local``."""
    tools: str | None = None
    """``MODULE:ATTR`` of the tools, loaded inside each worker; None: tools are shipped
    to the workers pickled (cloudpickle)."""
    default: RayOptions = Field(default_factory=RayOptions)
    """Options of every tool task."""
    tool_options: dict[str, RayOptions] = Field(default_factory=dict)
    """Options per tool, by name or qualified ``server.name``; they override the tool's own
    ``tool.metadata["planexec"]["ray"]`` and ``default``."""
    pass_refs: bool = True
    """Pass earlier outputs to later tool tasks as Ray object references."""
