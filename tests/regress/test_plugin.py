from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import yaml

pytest_plugins = ["pytester"]

Factory = Callable[..., dict[str, object]]


@pytest.fixture
def project(pytester: pytest.Pytester, sites_scenario: Factory) -> pytest.Pytester:
    pytester.makefile(
        ".scenario.yaml",
        sites_ok=yaml.safe_dump(sites_scenario(name="sites ok", tags=["demo"])),
        sites_bad=yaml.safe_dump(
            sites_scenario(
                name="sites bad",
                tags=["broken"],
                expect={"status": "FAILED", "answer": {"contains": "SITE_B"}},
            )
        ),
        sites_skip=yaml.safe_dump(sites_scenario(name="sites skip", skip="not today")),
    )
    pytester.makepyfile(test_normal="def test_plain():\n    assert 1 + 1 == 2\n")
    return pytester


@pytest.fixture(autouse=True)
def ini(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n"
    )


def test_scenario_files_are_collected_beside_normal_tests(project: pytest.Pytester) -> None:
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "*sites_bad.scenario.yaml::sites bad",
            "*sites_ok.scenario.yaml::sites ok",
            "*sites_skip.scenario.yaml::sites skip",
            "test_normal.py::test_plain",
        ]
    )
    assert result.ret == 0


def test_a_failing_scenario_reads_as_its_failing_expectations(project: pytest.Pytester) -> None:
    result = project.runpytest("-q", "-rs")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    out = result.stdout.str()
    assert "scenario 'sites bad'" in out
    assert "- status: expected FAILED, got SUCCEEDED" in out
    assert "- answer: expected to contain 'SITE_B'" in out
    assert "Traceback" not in out
    assert "runtest" not in out
    result.stdout.fnmatch_lines(["*SKIPPED*not today*"])


def test_tags_are_keywords(project: pytest.Pytester) -> None:
    result = project.runpytest("-q", "-k", "demo")
    result.assert_outcomes(passed=1)


def test_an_invalid_scenario_file_fails_its_item_without_breaking_collection(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".scenario.yaml", broken="question: q\nexpect: {statuz: FAILED}\n")
    pytester.makepyfile(test_normal="def test_plain():\n    pass\n")
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*unknown key 'expect.statuz'*"])


def test_the_plugin_can_be_disabled(project: pytest.Pytester) -> None:
    result = project.runpytest("-q", "-p", "no:planexec")
    result.assert_outcomes(passed=1)


def test_the_plugin_adds_nothing_heavy_to_importing_planexec() -> None:
    # pytest imports the plugin in every session: beyond the planexec package itself, it
    # must not pull in the runner, the agent, YAML or langchain.
    code = (
        "import sys, planexec; before = set(sys.modules); "
        "import planexec.regress.plugin; added = set(sys.modules) - before; "
        "print(sorted(m for m in added if m.split('.')[0] in "
        "('planexec', 'yaml', 'langchain_core', 'pydantic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # (planexec.errors: ScenarioFailed's base; it imports nothing but the standard library)
    assert out.stdout.strip() == (
        "['planexec.errors', 'planexec.regress', 'planexec.regress.plugin']"
    )
