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


class FakeRay:
    """Stands in for the ``ray`` module: records how planexec would start Ray."""

    def __init__(self) -> None:
        self.inits: list[dict[str, Any]] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: Any) -> None:
        self.inits.append(kwargs)


@pytest.mark.parametrize(
    ("address", "env", "joined"),
    [
        (None, None, "local"),  # never an unrelated Ray that happens to run here
        ("", None, "local"),
        (None, "ray://head:10001", "ray://head:10001"),
        ("auto", "ray://head:10001", "auto"),
        ("head:6379", None, "head:6379"),
    ],
)
def test_without_an_address_planexec_starts_a_private_ray_not_any_running_one(
    monkeypatch: pytest.MonkeyPatch, address: str | None, env: str | None, joined: str
) -> None:
    from planexec.distributed import _ray

    fake = FakeRay()
    monkeypatch.setattr(_ray, "import_ray", lambda: fake)
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    assert _ray.ensure_ray(address, num_cpus=2) is fake
    assert fake.inits[0]["address"] == joined and fake.inits[0]["num_cpus"] == 2


@pytest.mark.parametrize(
    ("argv", "address"),
    [(["--ray"], None), (["--ray", "auto"], "auto"), (["--ray", "ray://h:10001"], "ray://h:10001")],
)
def test_regress_ray_passes_the_address_and_warns_that_workers_do_not_apply(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    argv: list[str],
    address: str | None,
) -> None:
    import planexec.distributed.regress as dr
    from planexec.cli import main
    from planexec.regress.report import ScenarioResult, SuiteReport

    seen: dict[str, Any] = {}

    def fake_suite(paths: Any, *, address: str | None = None, **kw: Any) -> SuiteReport:
        seen["address"] = address
        return SuiteReport([ScenarioResult(name="a")])

    monkeypatch.setattr(dr, "run_suite_on_ray", fake_suite)
    assert main(["regress", str(tmp_path), *argv, "--workers", "4"]) == 0
    assert seen["address"] == address  # None: $RAY_ADDRESS, else a private local Ray
    err = capsys.readouterr().err
    assert "--workers 4 is ignored with --ray" in err
    assert main(["regress", str(tmp_path), *argv]) == 0
    assert "ignored" not in capsys.readouterr().err
