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
        address: The cluster to join: ``auto`` (the cluster started with ``ray start``
            on this machine), ``host:6379``, ``ray://host:10001``; or ``local`` for a
            new private Ray of this process's own. None (or empty): ``$RAY_ADDRESS`` if
            set, else ``local`` — never silently an unrelated Ray that happens to run on
            this machine (``ray.init()``'s own default would join that one).
        **init_kwargs: More ``ray.init`` arguments (e.g. ``num_cpus`` for a local Ray).

    Raises:
        MissingExtraError: Ray is not installed.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    if address == "local":
        init_kwargs.setdefault("include_dashboard", False)
        logger.info("starting a private local Ray (join a cluster with address='auto')")
    else:
        logger.info("joining Ray at {}", address)
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
