"""Load Python objects named ``MODULE:ATTR`` (tools, evaluators, output types)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from planexec.errors import ToolLoadError

__all__ = ["load_object"]


def load_object(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted) and return the attribute.

    Raises:
        ToolLoadError: the spec is malformed, or the module or attribute is missing.
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
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ToolLoadError(f"module {module_name!r} has no attribute {attr!r}") from exc
    return obj
