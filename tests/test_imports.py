"""The package's import graph has no cycles, and no module imports another's private names.

The graph is built from the source (``ast`` over every ``planexec/**/*.py``), not by
importing it. Its nodes are planexec's modules (packages are their ``__init__``); an edge
``A -> B`` means "executing A imports B". The rules:

1. Every ``import planexec.x``, ``from planexec.x import y`` and relative import in A is
   an edge, wherever it is: at module level, or inside a function, method or class. A lazy
   import still runs, and a cycle through it still half-initialises a module or fails at
   run time; deferring an import is not a way out of a cycle.
2. Except imports in the body of an ``if TYPE_CHECKING:`` block (never executed; its
   ``else`` branch counts).
3. Importing ``planexec.a.b`` first imports the package ``planexec.a`` (its ``__init__``),
   so that is an edge too, except to the packages that contain A itself: Python imports
   those before A, so whenever A runs they are already imported (or being imported),
   and the edge would add nothing but a cycle for every package whose ``__init__``
   imports its own submodules. For the same reason no module gets an implicit edge to
   the top-level ``planexec`` package; an explicit ``from planexec import x`` is an edge
   to it (``planexec/__init__`` itself imports nothing of planexec: every public name
   is lazy, rule 6).
4. ``from planexec.a import b`` where ``planexec.a.b`` is a module is an edge to
   ``planexec.a.b`` (plus ``planexec.a`` by rule 3); for any other name it is an edge to
   ``planexec.a``, even from inside ``planexec.a`` (the name must be initialised).
5. ``importlib.import_module("planexec.x")`` with a literal name is an edge to
   ``planexec.x``.
6. Lazy re-exports of a package (PEP 562): when a package ``__init__`` defines a
   module-level ``__getattr__`` that imports names on first use — from a module-level
   ``_LAZY = {"name": "planexec.module", ...}`` table, or by ``from planexec.m import
   name`` statements inside ``__getattr__`` — importing the package does not run them,
   so they are NOT edges from the package. Instead ``from planexec.pkg import name`` of
   a lazy name is an edge from the importer to the module that provides it (that
   import is what runs it).

The test fails naming every cycle (each edge with its file and line), and fails naming
file:line for every ``from planexec.x import _name`` of an underscore-prefixed name (not
a dunder) from another module. Private *modules* (``planexec._log``,
``planexec.parsing._common``) may be imported; private *names* of another module may not.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = "planexec"


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    lazy: dict[str, str] = field(default_factory=dict)
    """Names the package's ``__getattr__`` imports on first use -> their module."""


@dataclass(frozen=True)
class Import:
    """One import statement (or ``import_module`` call) found in a module."""

    module: str | None
    """The module imported from (absolute; None for ``from . import x`` at the top)."""
    names: tuple[str, ...]
    """The names of a ``from`` import (empty for ``import x``)."""
    line: int
    lazy_reexport: bool
    """Inside a package ``__init__``'s module-level ``__getattr__`` (rule 6)."""


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def load_modules(root: Path, top: str) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted((root / top).rglob("*.py")):
        name, is_package = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules[name] = Module(name, path, is_package, tree)
    for mod in modules.values():
        if mod.is_package:
            mod.lazy = lazy_names(mod)
    return modules


def is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def resolve(mod: Module, level: int, target: str | None) -> str | None:
    """The absolute module of an import (``level`` > 0: relative to ``mod``)."""
    if level == 0:
        return target
    package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    if target:
        return f"{package}.{target}" if package else target
    return package


def walk_imports(mod: Module, *, type_checking: bool = False) -> Iterator[Import]:
    """Every executed import of ``mod`` (``type_checking``: and those under ``if
    TYPE_CHECKING:``, which a type checker follows)."""

    # a package's own TYPE_CHECKING block declares its lazy re-exports (rule 6)
    follow = type_checking and not mod.is_package

    def visit(node: ast.AST, in_getattr: bool) -> Iterator[Import]:
        if isinstance(node, ast.If) and is_type_checking(node.test) and not follow:
            for child in node.orelse:
                yield from visit(child, in_getattr)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, (), node.lineno, in_getattr)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(mod, node.level, node.module)
            names = tuple(a.name for a in node.names)
            yield Import(base, names, node.lineno, in_getattr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Import(node.args[0].value, (), node.lineno, in_getattr)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, in_getattr)

    for stmt in mod.tree.body:
        getattr_hook = (
            mod.is_package
            and isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
            and stmt.name == "__getattr__"
        )
        yield from visit(stmt, getattr_hook)


def lazy_names(mod: Module) -> dict[str, str]:
    """A package's lazily re-exported names -> the module each comes from (rule 6)."""
    out: dict[str, str] = {}
    for stmt in mod.tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name) and target.id == "_LAZY" and isinstance(value, ast.Dict):
            for key, val in zip(value.keys, value.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and isinstance(val, ast.Constant)
                    and isinstance(val.value, str)
                ):
                    out[key.value] = val.value
    for imp in walk_imports(mod):
        if imp.lazy_reexport and imp.module is not None:
            for name in imp.names:
                out.setdefault(name, imp.module)
    return out


@dataclass
class Graph:
    root: Path
    modules: dict[str, Module]
    edges: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    private: list[str] = field(default_factory=list)

    def add(self, src: str, dst: str, line: int) -> None:
        if dst != src and dst in self.modules:
            lines = self.edges.setdefault(src, {}).setdefault(dst, [])
            if line not in lines:
                lines.append(line)

    def add_with_parents(self, src: str, dst: str, line: int) -> None:
        """An edge to ``dst`` and to the packages on the way that do not contain ``src``."""
        self.add(src, dst, line)
        parts = dst.split(".")
        for i in range(2, len(parts)):  # never the top-level package (rule 3)
            package = ".".join(parts[:i])
            if not (src == package or src.startswith(package + ".")):
                self.add(src, package, line)

    def where(self, src: str, line: int) -> str:
        return f"{self.modules[src].path.relative_to(self.root)}:{line}"


def build_graph(root: Path = ROOT, top: str = TOP, *, type_checking: bool = False) -> Graph:
    """The import graph of the package ``top`` under ``root`` (rules in the docstring).

    ``type_checking``: imports under ``if TYPE_CHECKING:`` are edges too.
    """
    modules = load_modules(root, top)
    graph = Graph(root, modules)
    for mod in modules.values():
        for imp in walk_imports(mod, type_checking=type_checking):
            base = imp.module
            if base is None or not (base == top or base.startswith(top + ".")):
                continue
            for name in imp.names:
                if (
                    name.startswith("_")
                    and not (name.startswith("__") and name.endswith("__"))
                    and f"{base}.{name}" not in modules
                    and base != mod.name
                ):
                    graph.private.append(
                        f"{graph.where(mod.name, imp.line)}: {mod.name} imports the private "
                        f"name {name!r} of {base}"
                    )
            if imp.lazy_reexport:
                continue  # rule 6: not an edge from the package
            if not imp.names:
                graph.add_with_parents(mod.name, base, imp.line)
                continue
            named_module = False
            for name in imp.names:
                sub = f"{base}.{name}"
                provider = modules[base].lazy.get(name) if base in modules else None
                if sub in modules:
                    graph.add_with_parents(mod.name, sub, imp.line)
                    named_module = True
                elif provider is not None:
                    graph.add_with_parents(mod.name, provider, imp.line)
                    named_module = True  # the package itself is still imported
                    graph.add_with_parents(mod.name, base, imp.line)
                else:
                    graph.add(mod.name, base, imp.line)
            if named_module:
                graph.add_with_parents(mod.name, base, imp.line)
    return graph


def strongly_connected(edges: dict[str, dict[str, list[int]]], nodes: list[str]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def connect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(nodes):
        if node not in index:
            connect(node)
    return out


def simple_cycles(
    edges: dict[str, dict[str, list[int]]], component: list[str], limit: int = 200
) -> list[list[str]]:
    """The elementary cycles inside one component (each starting at its smallest node)."""
    members = set(component)
    cycles: list[list[str]] = []

    def extend(path: list[str]) -> None:
        start = path[0]
        for w in sorted(edges.get(path[-1], {})):
            if len(cycles) >= limit or w not in members or w < start:
                continue
            if w == start:
                cycles.append([*path, start])
            elif w not in path:
                extend([*path, w])

    for start in sorted(members):
        extend([start])
    return cycles


def describe(graph: Graph, cycle: list[str]) -> str:
    hops = [
        f"  {a} -> {b}  ({', '.join(graph.where(a, n) for n in graph.edges[a][b])})"
        for a, b in zip(cycle, cycle[1:], strict=False)
    ]
    return " -> ".join(cycle) + "\n" + "\n".join(hops)


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The rules themselves, on modules whose imports are known."""
    graph = build_graph()
    # planexec/__init__ imports its public names on first use: they are not edges
    assert "planexec" not in graph.edges
    assert graph.modules["planexec"].lazy["StepError"] == "planexec.results"
    # a lazy (function-level) import is an edge: the agent parses plans inside a method
    assert "planexec.parsing" in graph.edges["planexec.agent"]
    # a package __init__ imports its submodules; they get no edge back to it
    assert "planexec.store.base" in graph.edges["planexec.store"]
    assert "planexec.store" not in graph.edges.get("planexec.store.base", {})
    # the regress package's lazy re-exports (its __getattr__) are not edges from it
    assert "planexec.regress.runner" not in graph.edges.get("planexec.regress", {})


def test_the_rules_on_a_small_package(tmp_path: Path) -> None:
    """Lazy, relative, TYPE_CHECKING and lazy re-export imports, a cycle, a private name."""
    files = {
        "pkg/__init__.py": (
            "import importlib\n"
            "from pkg.base import VALUE\n"
            "_LAZY = {'High': 'pkg.sub.high'}\n"
            "def __getattr__(name):\n"
            "    from pkg.sub.high import High\n"
            "    return High\n"
        ),
        "pkg/base.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from pkg.sub import high\n"
            "VALUE = 1\n"
            "def later():\n"
            "    from pkg.low import helper\n"
        ),
        "pkg/low.py": "def helper():\n    from pkg import High\n_secret = 2\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/high.py": "from ..base import VALUE\nfrom pkg.low import _secret\nHigh = 3\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = build_graph(tmp_path, "pkg")
    edges = {src: set(dst) for src, dst in graph.edges.items()}
    assert edges["pkg"] == {"pkg.base"}  # __getattr__'s lazy re-export is not an edge
    assert edges["pkg.base"] == {"pkg.low"}  # function-level counts; TYPE_CHECKING does not
    assert edges["pkg.low"] == {"pkg", "pkg.sub", "pkg.sub.high"}  # the lazy name's module
    assert edges["pkg.sub.high"] == {"pkg.base", "pkg.low"}  # relative; no edge to pkg.sub
    [component] = strongly_connected(graph.edges, list(graph.modules))
    assert component == ["pkg", "pkg.base", "pkg.low", "pkg.sub.high"]
    cycles = simple_cycles(graph.edges, component)
    assert ["pkg.base", "pkg.low", "pkg.sub.high", "pkg.base"] in cycles
    assert "pkg/base.py:6" in describe(graph, cycles[0]) + describe(graph, cycles[-1])
    assert len(graph.private) == 1
    assert graph.private[0].startswith("pkg/sub/high.py:2:") and "'_secret'" in graph.private[0]


def test_no_import_cycles() -> None:
    graph = build_graph()
    components = strongly_connected(graph.edges, list(graph.modules))
    report = []
    for component in components:
        report.append(f"cycle among {', '.join(component)}:")
        report.extend(describe(graph, c) for c in simple_cycles(graph.edges, component))
    assert not components, "import cycles in planexec:\n" + "\n".join(report)


def test_no_import_cycles_counting_type_checking_imports() -> None:
    """A type-only cycle is a cycle of the design (each module needs the other's
    types): none, the imports under ``if TYPE_CHECKING:`` counted as edges."""
    graph = build_graph(type_checking=True)
    components = strongly_connected(graph.edges, list(graph.modules))
    report = []
    for component in components:
        report.append(f"cycle among {', '.join(component)}:")
        report.extend(describe(graph, c) for c in simple_cycles(graph.edges, component))
    assert not components, "import cycles in planexec (type-only ones too):\n" + "\n".join(
        report
    )


def test_no_private_names_imported_from_other_modules() -> None:
    graph = build_graph()
    assert not graph.private, "private names imported across modules:\n" + "\n".join(
        graph.private
    )


def loaded_after(module: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of ``prefixes`` that importing ``module`` loads."""
    code = (
        f"import sys, {module}\n"
        f"print(','.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return [m for m in out.stdout.strip().split(",") if m]


def test_importing_the_config_does_not_import_the_distributed_package() -> None:
    assert loaded_after("planexec.config", ("planexec.distributed",)) == []


def test_importing_the_ray_tool_runner_does_not_import_the_run_drivers() -> None:
    loaded = loaded_after(
        "planexec.distributed.runner",
        ("planexec.distributed.runs", "planexec.distributed.regress", "planexec.agent",
         "planexec.runs"),
    )
    assert loaded == []


@pytest.mark.parametrize(
    "module", ["planexec", "planexec.plan", "planexec.parsing", "planexec.cli"]
)
def test_parsing_and_the_cli_do_not_import_langchain(module: str) -> None:
    """Plans parse without langchain; the CLI imports a command's module when it runs."""
    assert loaded_after(module, ("langchain_core", "langsmith", "langgraph")) == []


def test_reading_a_plan_does_not_import_pydantic() -> None:
    """docs/api.md: pydantic loads when a schema is asked for (`planexec.parsing.JsonPlan`)."""
    assert loaded_after("planexec.parsing", ("pydantic",)) == []
    code = "import sys; from planexec.parsing import JsonPlan; print('pydantic' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "True"  # the probe can fail


def test_the_executor_does_import_langchain() -> None:
    """The probe can fail: the tool catalog is built on langchain-core tools."""
    assert "langchain_core" in loaded_after("planexec.executor", ("langchain_core",))


def test_the_executor_loads_no_planner_selection_reasoning_or_agent() -> None:
    """The executor's protocols carry their own types (`ToolChoice`, `SelectionFailure`):
    importing it loads none of the model-backed step helpers nor the agent, nor the model
    client (the resolver imports it for a fallback model; the executor's retries and
    breakers come from `planexec._retry`, not `planexec.resilience`)."""
    heavy = (
        "planexec._models",
        "planexec.resilience",
        "planexec.planner",
        "planexec.reasoning",
        "planexec.selection",
        "planexec.agent",
        "planexec.runtime",
        "planexec.models",
        "planexec.evaluation",
    )
    assert loaded_after("planexec.executor", heavy) == []
    assert "planexec.planner" in loaded_after("planexec.selection", heavy)  # the probe can fail
    assert "planexec._models" in loaded_after("planexec.resilience", heavy)  # and this one


def test_an_executor_without_a_model_runs_without_the_model_client() -> None:
    """Not only the import: building an executor and running a plan loads no model client."""
    code = (
        "import asyncio, sys\n"
        "from langchain_core.tools import tool\n"
        "from planexec.executor import Executor\n"
        "from planexec.plan import Plan, Step\n"
        "from planexec.tools import ToolCatalog\n"
        "@tool\n"
        "def sites() -> list[str]:\n"
        "    \"\"\"The sites.\"\"\"\n"
        "    return ['MAIN']\n"
        "plan = Plan((Step(1, tool='sites'),))\n"
        "[result] = asyncio.run(Executor(ToolCatalog([sites])).run(plan))\n"
        "assert result.output == ['MAIN'], result\n"
        "model_side = ('planexec._models', 'planexec.resilience')\n"
        "print(sorted(m for m in sys.modules if m in model_side))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
        timeout=120,
    )
    assert out.stdout.strip() == "[]"
