"""The top-level public list is one table: `planexec._LAZY` (name -> defining module).

`__all__`, the lazy imports and `dir(planexec)` are made from it at run time; type
checkers read the ``if TYPE_CHECKING:`` block of ``planexec/__init__.py`` instead, so
these tests hold that block equal to the table, name for name and module for module.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import planexec

INIT = Path(planexec.__file__)


def type_checking_imports(source: str) -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of a module re-exports -> their module.

    Only ``from m import X as X`` re-exports a name to a strict type checker; any other
    import in the block is reported as a name with a ``!`` prefix, so it never matches.
    """
    out: dict[str, str] = {}
    for stmt in ast.parse(source).body:
        if not (isinstance(stmt, ast.If) and getattr(stmt.test, "id", None) == "TYPE_CHECKING"):
            continue
        for node in stmt.body:
            assert isinstance(node, ast.ImportFrom) and node.module is not None, ast.dump(node)
            for alias in node.names:
                key = alias.name if alias.asname == alias.name else f"!{alias.name}"
                assert key not in out, f"{alias.name} imported twice"
                out[key] = node.module
    return out


def test_the_type_checking_block_is_the_table() -> None:
    """A name added to one and not the other (or from another module) fails here."""
    assert type_checking_imports(INIT.read_text(encoding="utf-8")) == planexec._LAZY


def test_the_comparison_sees_a_drift() -> None:
    """The probe can fail: a missing name, a wrong module, an import not re-exported."""
    source = INIT.read_text(encoding="utf-8")
    line = "    from planexec.results import StepError as StepError\n"
    assert line in source
    assert "StepError" not in type_checking_imports(source.replace(line, ""))
    moved = type_checking_imports(source.replace(line, line.replace("results", "plan")))
    assert moved["StepError"] == "planexec.plan"
    hidden = type_checking_imports(source.replace(line, line.replace(" as StepError", "")))
    assert "!StepError" in hidden and "StepError" not in hidden


def test_all_is_the_table_and_every_name_is_its_modules_own() -> None:
    assert planexec.__all__ == [*planexec._LAZY, "__version__"]
    assert len(set(planexec.__all__)) == len(planexec.__all__)
    assert "StepError" in planexec.__all__  # the central failures-as-data type
    for name, module in planexec._LAZY.items():
        assert getattr(planexec, name) is getattr(importlib.import_module(module), name), name
    assert set(planexec.__all__) <= set(dir(planexec))


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from planexec import *", namespace)
    assert set(planexec.__all__) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        planexec.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(planexec, "_no_such_name")


def test_importing_planexec_imports_no_public_module() -> None:
    """Every public name loads on first use: ``import planexec`` runs no planexec module."""
    code = "import sys, planexec; print(sorted(m for m in sys.modules if m.startswith('planexec')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "['planexec']"
