"""One exception tree, drawn in `planexec.errors`'s docstring, and the classes agree.

Every exception class a planexec module exports (its ``__all__``) is drawn in the tree
under its real parent, or is listed outside it on purpose (and is then no
`PlanexecError`); every name drawn is such a class.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import planexec
import planexec.errors
from planexec.errors import PlanexecError

NAME = re.compile(r"[A-Z][A-Za-z]*(?:Error|Failure|Failed|Miss)\b")


def drawn_tree(doc: str) -> tuple[dict[str, str | None], set[str]]:
    """``(name -> drawn parent, names listed outside)`` read from the docstring."""
    tree_text, _, outside_text = doc.partition("Outside the tree")
    block = tree_text.split("::", 1)[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (column, name) of the current branch
    for line in block.splitlines():
        match = NAME.match(line.lstrip(" │├└─"))
        if match is None:
            continue  # a continuation line
        column = len(line) - len(line.lstrip(" │├└─"))
        while stack and stack[-1][0] >= column:
            stack.pop()
        name = match.group()
        assert name not in parents, f"{name} drawn twice"
        parents[name] = stack[-1][1] if stack else None
        stack.append((column, name))
    outside = {
        m.group() for line in outside_text.split("::", 1)[1].splitlines()
        if (m := NAME.match(line.strip())) and line.startswith("    ") and line[4] != " "
    }
    return parents, outside


def exported_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class in the ``__all__`` of planexec and its modules."""
    found: dict[str, type[BaseException]] = {}
    modules = [planexec] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(planexec.__path__, "planexec.")
        if not info.name.rpartition(".")[2].startswith("_")
        and info.name != "planexec.__main__"
    ]
    for module in modules:
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                assert found.setdefault(value.__name__, value) is value, value.__name__
    return found


def planexec_parent(cls: type[BaseException]) -> str | None:
    """The name of ``cls``'s base in the tree (None for the root)."""
    bases = [b for b in cls.__bases__ if issubclass(b, PlanexecError)]
    assert len(bases) <= 1, f"{cls.__name__} has several planexec bases"
    return bases[0].__name__ if bases else None


def test_the_drawing_is_read_as_drawn() -> None:
    """The probe can fail: a small drawing with a continuation line and a deep branch."""
    doc = (
        "Tree::\n\n    AError\n    ├── BError    b (x,\n    │             y)\n"
        "    │   └── CFailure   c\n    └── DMiss\n\n"
        "Outside the tree, on purpose::\n\n    EError     e\n                 more\n"
    )
    parents, outside = drawn_tree(doc)
    assert parents == {"AError": None, "BError": "AError", "CFailure": "BError",
                       "DMiss": "AError"}
    assert outside == {"EError"}


def test_every_exported_exception_is_drawn_under_its_real_parent() -> None:
    parents, outside = drawn_tree(planexec.errors.__doc__ or "")
    exported = exported_exceptions()
    assert "StepError" not in exported  # failures as data: a record, not an exception
    assert set(parents) | outside == set(exported), "drawn and exported names differ"
    assert not set(parents) & outside
    for name, drawn in parents.items():
        cls = exported[name]
        assert issubclass(cls, PlanexecError), name
        assert planexec_parent(cls) == drawn, f"{name} is drawn under {drawn}"
    for name in outside:
        assert not issubclass(exported[name], PlanexecError), name


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("AmbiguousToolError", KeyError),
        ("ToolCallError", RuntimeError),
        ("ToolOutputError", ValueError),
        ("InvalidSchemaError", ValueError),
        ("MissingExtraError", ImportError),
        ("ToolArgumentsError", ValueError),
        ("RetryableToolError", RuntimeError),
    ],
)
def test_the_built_in_bases_callers_may_catch_are_kept(
    name: str, builtin: type[BaseException]
) -> None:
    assert issubclass(exported_exceptions()[name], builtin)
