"""One local Ray for the whole test session (started on first use, shut down at the end).

The Ray tests skip when Ray is not installed. Tests run with ``--import-mode=importlib``:
this directory goes on ``sys.path`` (and on the Ray workers' PYTHONPATH), so
``ray_helpers`` is importable by name in the tests and inside the workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from ray_helpers import worker_env  # noqa: E402


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    saved = {k: os.environ.get(k) for k in worker_env()}
    os.environ.update(worker_env())
    try:
        if not ray.is_initialized():
            # "local": a Ray of our own, even if another one runs on this machine
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    finally:  # Ray's processes have their environment; give the session its own back
        for key, value in saved.items():
            if key == "RAY_AUTH_MODE":
                continue  # the driver needs it for as long as it talks to Ray
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield ray
    ray.shutdown()
