"""Load Python objects named ``MODULE:ATTR`` (tools, evaluators, output types)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from planexec.errors import ToolLoadError

__all__ = ["load_object", "module_root"]


def module_root(spec: str) -> str | None:
    """The absolute ``sys.path`` entry that ``MODULE`` of ``MODULE:ATTR`` is imported from.

    Found as `load_object` would find it (the current directory is on the path), without
    importing the module. None when it cannot be found or is not a file (built in).
    Recorded with a run so that a resume from another directory imports the same module.
    """
    module_name = spec.partition(":")[0]
    top = module_name.split(".")[0]
    if not top:
        return None
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    if found.submodule_search_locations:  # a package: the folder holding its folder
        locations = list(found.submodule_search_locations)
        return str(Path(locations[0]).resolve().parent) if locations else None
    if found.origin and os.path.isfile(found.origin):  # a module file: its folder
        return str(Path(found.origin).resolve().parent)
    return None


def load_object(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) and return the attribute.

    Raises:
        ToolLoadError: the spec is malformed, the module or attribute is missing, or
            the module fails to import (a syntax error, an exception its code raised).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ToolLoadError(f"expected MODULE:ATTR, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:  # like uvicorn: a module beside the user is importable
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolLoadError(f"cannot import module {module_name!r}: {exc}") from exc
    except SyntaxError as exc:  # the person's module, not planexec: say where
        raise ToolLoadError(
            f"module {module_name!r} has a syntax error: {exc.msg} "
            f"({exc.filename}, line {exc.lineno})"
        ) from exc
    except Exception as exc:  # raised by the module's own code while it was imported
        raise ToolLoadError(
            f"module {module_name!r} raised {type(exc).__name__} on import: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ToolLoadError(f"module {module_name!r} has no attribute {attr!r}") from exc
    return obj
