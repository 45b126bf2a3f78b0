"""Without the ``ray`` extra: nothing imports Ray, and asking for it names the pip command."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Any

import pytest

from planexec.distributed import RaySettings, RayToolRunner, runner_for
from planexec.errors import ConfigError, MissingExtraError
from planexec.tools import ToolCatalog


def test_importing_planexec_and_its_ray_backend_does_not_import_ray() -> None:
    code = (
        "import sys, planexec, planexec.agent, planexec.config, planexec.distributed, "
        "planexec.distributed.regress; print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "ray" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.usefixtures("no_ray")
async def test_the_ray_backend_without_ray_fails_with_the_install_command() -> None:
    with pytest.raises(MissingExtraError, match=r'pip install "planexec\[ray\]"'):
        runner_for("ray", RaySettings())
    from planexec.testing import fake_tool

    spec = ToolCatalog([fake_tool("t", 1)]).get("t")
    with pytest.raises(MissingExtraError):
        await RayToolRunner().call(spec, {})


def test_an_unknown_backend_is_a_config_error() -> None:
    assert runner_for("local") is None
    with pytest.raises(ConfigError, match="unknown executor backend 'dask'"):
        runner_for("dask")
    from planexec.config import AgentConfig

    with pytest.raises(ConfigError, match="executor.backend"):
        AgentConfig.from_dict({"executor": {"backend": "dask"}})
