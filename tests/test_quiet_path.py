"""A quiet happy path: notices that need no action are INFO, each diagnostic shown once.

And the early re-plan counts one argument of one step failing one way: two steps whose
arguments share a name are two failures, not one failing twice.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from planexec.cli import main
from planexec.errors import ErrorKind
from planexec.recovery import Action, Failure, RecoveryPolicy, RecoveryState
from planexec.results import StepError

pytestmark = pytest.mark.timeout(120)

HINTED = (
    "#Task1: assets\n#Tool1: assets\n#Args1: {\"site_name\": \"MAIN\"}\n#Dependency1: None\n\n"
    "#Task2: asset\n#Tool2: asset\n"
    '#Args2: {"site_name": "MAIN", "asset_id": "{asset_id_for_Chiller_6_from_step_1}"}\n'
    "#Dependency2: #S1\n"
)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    logger.remove()
    logger.add(lambda message: sys.stderr.write(message), level="WARNING")


def test_the_demo_prints_no_warning_on_its_happy_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-store", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "WARNING" not in err, err


def test_with_v_the_demo_shows_the_notices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "demo", "--no-store", "--quiet", "--question", "1"]) == 0
    err = capsys.readouterr().err
    assert "REF_HINTED" in err and "filter grammar" in err
    assert all(line.startswith("INFO") for line in err.splitlines() if "REF_HINTED" in line)


@pytest.mark.parametrize(
    "argv",
    [
        ["parse"],
        ["parse", "--json"],
        ["validate", "--tools", "planexec.examples.tools:TOOLS"],
        ["run", "--tools", "planexec.examples.tools:TOOLS", "--no-store"],
        ["run", "--tools", "planexec.examples.tools:TOOLS", "--no-store", "--json"],
    ],
    ids=" ".join,
)
def test_a_plans_diagnostic_is_shown_once(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(HINTED, encoding="utf-8")
    main(["-v", argv[0], str(plan), *argv[1:]])  # -v: even the INFO records
    out = capsys.readouterr()
    assert (out.out + out.err).count("REF_HINTED") == 1, (out.out, out.err)


def failure(step: int) -> Failure:
    error = StepError(ErrorKind.RESOLUTION_FAILED, f"step {step}: asset_id", args=("asset_id",))
    return Failure(ErrorKind.RESOLUTION_FAILED, error.message, step, "asset", ("asset_id",),
                   True, 1, error=error)


def test_two_steps_failing_on_arguments_of_one_name_are_not_one_failing_twice() -> None:
    policy, state = RecoveryPolicy(max_reresolutions_per_step=2), RecoveryState()
    assert policy.decide(failure(2), state).action is Action.RERESOLVE
    assert policy.decide(failure(3), state).action is Action.RERESOLVE  # another argument
    second = policy.decide(failure(2), state)  # step 2's argument again, the same way
    assert second.action is Action.REPLAN and "2 times" in second.reason
