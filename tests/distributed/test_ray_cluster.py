"""A node dies mid-run on a simulated cluster (`ray.cluster_utils.Cluster`).

The cluster runs in its own process (``cluster_driver.py``): a Ray driver joins one Ray
at a time, and this test session already has its local Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from ray_helpers import HERE, worker_env  # noqa: E402

pytestmark = [pytest.mark.ray]


def test_removing_a_node_mid_run_retries_the_safe_run_and_fails_the_unsafe_one(
    tmp_path: Path,
) -> None:
    env = {**os.environ, **worker_env()}
    proc = subprocess.run(
        [sys.executable, str(HERE / "cluster_driver.py"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=170, check=False,
    )
    result_file = tmp_path / "result.json"
    assert proc.returncode == 0 and result_file.exists(), proc.stderr[-3000:]
    result = json.loads(result_file.read_text(encoding="utf-8"))
    node_a, node_b = result["node_a"], result["node_b"]
    assert result["started"]["safe_tool"]["node"] == node_a
    assert result["started"]["unsafe_tool"]["node"] == node_a
    safe, unsafe = result["outcomes"]

    assert safe["status"] == "SUCCEEDED", safe
    assert safe["run_ids"] == ["safe-run", "safe-run.retry1"]
    assert safe["nodes"] == [node_a, node_b] and safe["answer"] == "done"
    assert result["calls"]["safe_tool"] == 2

    assert unsafe["status"] == "FAILED" and unsafe["run_ids"] == ["unsafe-run"]
    assert "died mid-run" in unsafe["error"] and "not retried" in unsafe["error"]
    assert "unsafe_tool" in unsafe["error"] and result["calls"]["unsafe_tool"] == 1

    store = result["store"]
    assert store["safe-run"]["status"] == "FAILED" and "retried" in store["safe-run"]["error"]
    assert store["safe-run.retry1"]["status"] == "SUCCEEDED"
    assert store["unsafe-run"] == {"status": "FAILED", "error": unsafe["error"]}
