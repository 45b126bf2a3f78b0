"""How to write your own tools module for ``planexec run --tools`` / ``planexec ask --tools``.

``--tools MODULE:ATTR`` names either a list of langchain-core tools or a zero-argument
function returning one. Run this file's tools with::

    planexec run my_plan.txt --tools examples.custom_tools:TOOLS      # from the repo root
    planexec run my_plan.txt --tools custom_tools:make_tools          # from examples/

Rules of thumb:

- Give every tool a description and typed arguments (a pydantic ``args_schema`` or type
  hints): the planner sees them, and the resolver validates arguments against them.
- Return structured data (dicts, lists, pydantic models) or JSON text: references such as
  ``{step_1.items[0].id}`` are resolved against that structure.
- Report "not found" and similar as ``{"error": "..."}`` (the executor treats it as a
  tool error) with a message that says what *is* known, so a re-plan can fix it.
- Say what is safe to retry: ``metadata={"planexec": {"read_only": True,
  "idempotent": True}}``; mark tools that change the world ``{"destructive": True}``.
  Tools without hints are never retried.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, tool
from pydantic import BaseModel, Field

_STOCK = {"bolt-m8": 1200, "nut-m8": 950, "washer-m8": 0}


@tool
def list_parts() -> dict[str, Any]:
    """List the spare parts in the store. Returns {"parts": [{"sku", "quantity"}]}."""
    return {"parts": [{"sku": s, "quantity": q} for s, q in _STOCK.items()]}


list_parts.metadata = {"planexec": {"read_only": True, "idempotent": True}}


class ReorderArgs(BaseModel):
    """Arguments of `reorder`."""

    sku: str = Field(description="Part number, e.g. 'bolt-m8'.")
    quantity: int = Field(gt=0, description="How many to order.")


def _reorder(sku: str, quantity: int) -> dict[str, Any]:
    if sku not in _STOCK:
        return {"error": f"unknown part {sku!r}; known: {', '.join(_STOCK)}"}
    return {"ordered": True, "sku": sku, "quantity": quantity}


reorder = StructuredTool.from_function(
    func=_reorder,
    name="reorder",
    description='Order more of a spare part. Returns {"ordered", "sku", "quantity"}.',
    args_schema=ReorderArgs,
    metadata={"planexec": {"destructive": True}},
)


def make_tools() -> list[BaseTool]:
    """Return the tools (a zero-argument callable works for ``--tools`` too)."""
    return [list_parts, reorder]


TOOLS: list[BaseTool] = make_tools()
