"""The mutation runner's own rules (mutation/run.py): how a mutant is found, when it is
stale, how outcomes are scored, and that the mutant list and equivalents file are sound.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_run", ROOT / "mutation" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_run"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SOURCE = '''\
def f(x):
    if x > 1:
        return 1
    return 0


class C:
    def g(self, x):
        if x > 1:
            return 2
        return 0
'''


def test_a_mutant_is_found_by_its_text_once_within_its_function(
    runner: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(SOURCE)
    module = runner.Module("m", ["m.py", "m/*.py"], ["t.py"])

    def where(find: str, function: str | None = None) -> object:
        return runner.locate(tmp_path, module, runner.Mutant("x", "m", find, "", "", function))

    assert isinstance(where("if x > 1:"), str)  # twice in the file: ambiguous
    assert "2 times" in str(where("if x > 1:"))
    path, at = where("if x > 1:", "C.g")
    assert SOURCE[at:].startswith("if x > 1:\n            return 2")
    path, at = where("if x > 1:", "f")
    assert SOURCE[at:].startswith("if x > 1:\n        return 1")
    assert "not found" in str(where("if x >= 1:"))  # stale: the text is gone
    assert "function 'h'" in str(where("return 0", "h"))
    assert "no file" in str(runner.locate(tmp_path, runner.Module("n", ["n.py"], []),
                                          runner.Mutant("x", "n", "a", "", "")))


def test_a_module_that_became_a_package_keeps_its_mutants(
    runner: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "core.py").write_text(SOURCE)
    module = runner.Module("m", ["m.py", "m/*.py"], ["t.py"])
    path, _ = runner.locate(tmp_path, module,
                            runner.Mutant("x", "m", "return 2", "return 3", "", "C.g"))
    assert path == tmp_path / "m" / "core.py"


def test_scores_leave_equivalent_stale_and_not_run_mutants_out(runner: ModuleType) -> None:
    config = runner.Config({}, [], {"e": "why"})
    outcomes = [runner.Outcome(i, "m", s, "") for i, s in [
        ("a", "killed"), ("b", "killed"), ("c", "killed"), ("d", "survived"),
        ("e", "equivalent"), ("f", "stale"), ("g", "not-run")]]
    row = runner.summarize(outcomes, config)["modules"]["m"]
    assert (row["killed"], row["survived"], row["equivalent"], row["stale"]) == (3, 1, 1, 1)
    assert row["score"] == 0.75


def test_the_mutant_list_and_the_equivalents_are_sound(runner: ModuleType) -> None:
    config = runner.load(ROOT / "mutation" / "mutants.toml",
                         ROOT / "mutation" / "equivalents.toml")
    ids = [m.id for m in config.mutants]
    assert len(ids) == len(set(ids))
    assert all(m.find != m.replace and m.why.strip() for m in config.mutants)
    assert set(config.equivalents) <= set(ids)
    for module in config.modules.values():
        assert module.tests and all((ROOT / t).exists() for t in module.tests), module.name
    assert {m.module for m in config.mutants} == set(config.modules)


def test_every_mutant_applies_to_the_code_as_it_is(runner: ModuleType) -> None:
    """A refactor that moves a mutant's text fails here, in the suite, not only in a run."""
    config = runner.load(ROOT / "mutation" / "mutants.toml",
                         ROOT / "mutation" / "equivalents.toml")
    stale = {
        m.id: where
        for m in config.mutants
        if isinstance(where := runner.locate(ROOT, config.modules[m.module], m), str)
    }
    assert stale == {}


STALE_LIST = '''
[modules.m]
files = ["planexec/approval.py"]
tests = ["tests/test_imports.py"]

[[mutant]]
id = "gone"
module = "m"
find = "text that is in no module"
replace = "x"
why = "a mutant whose code was rewritten"
'''


def test_a_stale_mutant_fails_the_run_and_the_check(runner: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "mutants.toml").write_text(STALE_LIST)
    lists = ["--mutants", str(tmp_path / "mutants.toml"),
             "--equivalents", str(tmp_path / "none.toml")]
    assert runner.main([*lists, "--check"]) == 1
    out = tmp_path / "out"
    handler = signal.getsignal(signal.SIGTERM)  # main() installs its own
    try:
        assert runner.main([*lists, "--no-baseline", "--out", str(out)]) == 1
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert "Stale mutants" in (out / "report.md").read_text()
