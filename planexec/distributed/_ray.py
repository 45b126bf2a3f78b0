"""Importing and starting Ray, lazily: planexec's core never imports Ray itself."""

from __future__ import annotations

import os
from typing import Any

from planexec._log import logger
from planexec.errors import require_extra

__all__ = ["ensure_ray", "first_line", "import_ray", "worker_lost_errors"]


def import_ray() -> Any:
    """Return the ``ray`` module.

    Raises:
        MissingExtraError: Ray is not installed (the message has the pip command).
    """
    require_extra("ray", "ray")
    import ray

    return ray


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> Any:
    """Connect to Ray unless this process already is; return the ``ray`` module.

    Args:
        address: The cluster to join (``auto``, ``ray://host:10001``, ``host:6379``), or
            ``local`` for a new Ray of this process's own. None: ``$RAY_ADDRESS`` if set,
            else Ray's default — the cluster started with ``ray start`` on this machine
            if there is one, else a new local Ray.
        **init_kwargs: More ``ray.init`` arguments (e.g. ``num_cpus`` for a local Ray).

    Raises:
        MissingExtraError: Ray is not installed.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address in (None, "local"):
        init_kwargs.setdefault("include_dashboard", False)
    logger.info(
        "joining Ray at {}", address or "this machine's cluster, or a new local one"
    )
    ray.init(address=address, **init_kwargs)
    return ray


def worker_lost_errors() -> tuple[type[BaseException], ...]:
    """The Ray exceptions that mean a worker, a node or an object was lost.

    These are failures of the cluster, not of the code that ran; `RayTaskError` (the
    code raised) is not among them.
    """
    ray = import_ray()
    ex = ray.exceptions
    names = (
        "WorkerCrashedError",
        "NodeDiedError",
        "ObjectLostError",
        "OwnerDiedError",
        "ObjectReconstructionFailedError",
        "LocalRayletDiedError",
        "RaySystemError",
        "ActorDiedError",
        "ActorUnavailableError",
        "OutOfMemoryError",
    )
    return tuple(getattr(ex, n) for n in names if isinstance(getattr(ex, n, None), type))


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message, cut to its first sentence if long."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else "no message"
    if len(line) > limit:
        end = line.find(". ")
        line = line[: end + 1] if 0 < end < limit else line[:limit] + "..."
    return line
