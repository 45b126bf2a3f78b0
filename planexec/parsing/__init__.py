"""Plan text → `planexec.plan.Plan`: four dialects, tolerant JSON, references, checks.

`parse_plan` is the entry point: it detects the dialect (or takes the one given),
parses, runs the structural `check_plan` pass (no catalog) and returns a `Plan` whose
diagnostics report every deviation. A text it cannot read raises `PlanParseError` (whose
message says what was found instead of a plan); any other exception is a bug in planexec
and propagates unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from planexec.errors import PlanParseError
from planexec.parsing.checks import CatalogLike, check_plan
from planexec.parsing.hashstep import DRAFT_POLICIES, parse_hashstep
from planexec.parsing.jsonplan import (
    find_json_plan,
    looks_like_json_plan,
    parse_json_plan,
)
from planexec.parsing.jsonrepair import RepairResult, repair_json
from planexec.parsing.llmcompiler import parse_llmcompiler
from planexec.parsing.refs import contains_placeholder, find_refs, parse_ref
from planexec.parsing.rewoo import parse_rewoo
from planexec.plan import Plan

if TYPE_CHECKING:  # imported on first use (see __getattr__): they need pydantic
    from planexec.parsing.jsonschema import (
        JsonPlan,
        plan_schema,
    )

_LAZY: dict[str, str] = {
    "JsonPlan": "planexec.parsing.jsonschema",
    "plan_schema": "planexec.parsing.jsonschema",
}
"""Public names imported on first use, so reading a plan does not import pydantic."""


def __getattr__(name: str) -> Any:
    """Import a lazy public name's module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "DIALECTS",
    "DRAFT_POLICIES",
    "CatalogLike",
    "JsonPlan",
    "RepairResult",
    "check_plan",
    "contains_placeholder",
    "detect_dialect",
    "find_json_plan",
    "find_refs",
    "parse_hashstep",
    "parse_json_plan",
    "parse_llmcompiler",
    "parse_plan",
    "parse_ref",
    "parse_rewoo",
    "plan_schema",
    "repair_json",
]

DIALECTS = ("hashstep", "rewoo", "llmcompiler", "json")
"""The plan dialects `parse_plan` reads."""

# The line-anchored patterns below never let a repetition run past the end of a line
# before their first fixed text ([^\S\n] is whitespace but a newline): from every line
# start such a repetition would otherwise scan the rest of the reply ("```\n" * 8000),
# which is quadratic.
# A field line may open with what the hashstep parser's field pattern takes before a key:
# a blockquote, a bullet or a list number ("1. #Task1:"), bold or code ("`#Task1`:").
_HASHSTEP_RE = re.compile(
    r"^(?:[^\S\n]|[>*+\-\u2022#]|\d{1,3}[.)])*(?:\*\*|__|`)?[^\S\n]*#[^\S\n]?"
    r"(?:task|step|tool|args|agent|dependency)"
    r"\s*(?:<[^<>:\n]{0,8}>|\d{1,9})?\s*(?:\*\*|__|`)?\s*:",
    re.IGNORECASE | re.MULTILINE,
)
_REWOO_RE = re.compile(r"#E\d+\s*=\s*[A-Za-z_][\w.\-]*\s*\[", re.MULTILINE)
_REWOO_LOOSE_RE = re.compile(
    r"^[^\w\n]*Plan[^\S\n]*\d*[^\S\n]*:.*$|#E\d+", re.IGNORECASE | re.MULTILINE
)
_LLMC_RE = re.compile(
    r"^[^\S\n]*\d{1,6}\s*\.\s*[A-Za-z_][\w.]*\s*\(.*\)\s*(?:<END_OF_PLAN>)?\s*$",
    re.MULTILINE,
)


def detect_dialect(text: str) -> str:
    """Guess the dialect of a plan text.

    The dialect with the most lines of its own shape wins: hashstep field lines
    (``#Task1:``), rewoo assignments (``#E1 = Tool[``), llmcompiler calls
    (``1. tool(...)``). A reply that *is* a JSON plan (it starts with plan-shaped JSON,
    also after a code fence opener) is json, whatever its strings hold; so is a reply
    with a plan-shaped JSON value in prose when no other dialect's lines are found (a
    hashstep plan whose ``#Args`` hold JSON stays hashstep). With none of those, a text
    with both ``Plan:`` labels and ``#EN`` is rewoo; anything else is hashstep (whose
    parser then says what the text holds instead of a plan).

    Args:
        text: The planner's reply.

    Returns:
        ``"hashstep"``, ``"rewoo"``, ``"llmcompiler"`` or ``"json"``.
    """
    text = text.removeprefix("\ufeff")  # the encoding's mark, as `clean_reply` drops it
    if "\r" in text:  # a lone CR ends a line for every parser (`clean_reply`), and for ^ here
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if looks_like_json_plan(text):
        return "json"
    rewoo = len(_REWOO_RE.findall(text)) * 3
    llmcompiler = len(_LLMC_RE.findall(text)) * 3
    if rewoo or llmcompiler:
        scores = {
            "hashstep": len(_HASHSTEP_RE.findall(text)),
            "rewoo": rewoo,
            "llmcompiler": llmcompiler,
        }
        return max(scores, key=lambda k: scores[k])  # the first of equal scores
    if _HASHSTEP_RE.search(text):  # no other dialect's line: one field line decides
        return "hashstep"
    if find_json_plan(text) is not None:
        return "json"
    loose = _REWOO_LOOSE_RE.findall(text)
    if any(s.startswith("#E") for s in loose) and any(not s.startswith("#E") for s in loose):
        return "rewoo"
    return "hashstep"


def parse_plan(
    text: str,
    dialect: str = "auto",
    *,
    draft_policy: str = "last_complete",
    catalog: CatalogLike | None = None,
) -> Plan:
    """Parse a planner's reply into a checked `Plan`.

    Args:
        text: The reply, exactly as received.
        dialect: ``"auto"`` (detect with `detect_dialect`), ``"hashstep"``,
            ``"rewoo"``, ``"llmcompiler"`` or ``"json"``.
        draft_policy: For hashstep replies holding several drafts: ``"last_complete"``
            (default), ``"first"`` or ``"last"``.
        catalog: The tools the plan may use (a `planexec.tools.ToolCatalog`). The json
            dialect finds each step's tool with it (the field whose value names a
            catalog tool, whatever its key) and maps positional argument lists onto the
            tool's parameters; every dialect's plan is then checked against it.

    Returns:
        The plan, with the parser's diagnostics and those of `check_plan` (structural
        checks, and the catalog's when one is given).

    Raises:
        PlanParseError: the text holds no usable plan (or is not a string); the message
            says what it holds instead. This is the only exception a text can cause: any
            other one is a bug in planexec and propagates unchanged, never disguised as
            a `PlanParseError`.
        ValueError: ``dialect`` or ``draft_policy`` is not a known name.
    """
    if dialect != "auto" and dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected 'auto' or one of {DIALECTS}")
    if draft_policy not in DRAFT_POLICIES:
        raise ValueError(f"unknown draft policy {draft_policy!r}; expected one of {DRAFT_POLICIES}")
    if not isinstance(text, str):
        raise PlanParseError(f"expected plan text, got {type(text).__name__}")
    chosen = detect_dialect(text) if dialect == "auto" else dialect
    if dialect == "auto" and chosen != "json" and catalog is not None and looks_like_json_plan(
        text, catalog
    ):
        chosen = "json"  # JSON whose steps only the catalog recognizes (a field names a tool)
    if chosen == "rewoo":
        plan = parse_rewoo(text)
    elif chosen == "llmcompiler":
        plan = parse_llmcompiler(text)
    elif chosen == "json":
        plan = parse_json_plan(text, catalog)
    else:
        plan = parse_hashstep(text, draft_policy=draft_policy)
    return check_plan(plan, catalog)
