"""Free-text placeholders are hinted references in every dialect, never text for a tool."""

from __future__ import annotations

import pytest

from planexec.parsing import parse_plan
from planexec.parsing.refs import NO_STEP
from planexec.plan import Plan, Ref

REWOO = """Plan: list the assets
#E1 = assets[MAIN]
Plan: their history
#E2 = history[<chiller asset id from #E1>]
Plan: something else
#E3 = history[<the chiller_asset_id>]
"""

LLMCOMPILER = """1. assets(site="MAIN")
2. history(asset_id="<chiller_asset_id>", note=$1)
3. history(asset_id="<chiller_asset_id>")
4. join()"""

JSON = (
    '{"steps": [{"id": 1, "tool": "assets", "args": {"site": "MAIN"}},'
    ' {"id": 2, "tool": "history", "args": {"asset_id": "<chiller_asset_id>"},'
    ' "depends_on": [1]},'
    ' {"id": 3, "tool": "history", "args": {"asset_id": "<the chiller asset>"}}]}'
)


def arg(plan: Plan, sid: int) -> object:
    step = plan.step(sid)
    return step.args.get("asset_id", step.positional[0] if step.positional else None)


@pytest.mark.parametrize(("text", "dialect"), [
    (REWOO, "rewoo"), (LLMCOMPILER, "llmcompiler"), (JSON, "json")])
def test_a_placeholder_over_a_known_step_is_a_hinted_reference_to_it(
    text: str, dialect: str
) -> None:
    plan = parse_plan(text, dialect)
    ref = arg(plan, 2)
    assert isinstance(ref, Ref) and ref.is_hinted and ref.step == 1
    assert 1 in plan.step(2).depends_on
    assert any(d.code == "REF_HINTED" and d.step == 2 for d in plan.diagnostics)


@pytest.mark.parametrize(("text", "dialect"), [
    (REWOO, "rewoo"), (LLMCOMPILER, "llmcompiler"), (JSON, "json")])
def test_a_placeholder_with_no_step_to_refer_to_is_a_missing_reference(
    text: str, dialect: str
) -> None:
    plan = parse_plan(text, dialect)
    ref = arg(plan, 3)
    assert isinstance(ref, Ref) and ref.step == NO_STEP
    assert NO_STEP not in plan.step(3).depends_on
    assert any(d.code == "REF_MISSING" and d.step == 3 for d in plan.errors)


@pytest.mark.parametrize(
    ("text", "dialect", "code", "valid"),
    [
        ('1. sites()\n2. search(q="pre {name} post")\n3. join()', "llmcompiler",
         "PLACEHOLDER_UNRECOGNIZED", True),
        ('1. sites()\n2. search(q="see {step-1} here")\n3. join()', "llmcompiler",
         "PLACEHOLDER_UNRECOGNIZED", True),
        ('1. sites()\n2. search({"$1": 1})\n3. join()', "llmcompiler", "REF_IN_KEY", False),
        ("Plan: a\n#E1 = Google[x]\nPlan: b\n#E2 = LLM[given {name} here]", "rewoo",
         "PLACEHOLDER_UNRECOGNIZED", True),
    ],
)
def test_a_placeholder_no_reference_reads_is_reported_in_every_dialect(
    text: str, dialect: str, code: str, valid: bool
) -> None:
    plan = parse_plan(text, dialect)
    assert code in {d.code for d in plan.diagnostics if d.step == 2}
    assert plan.step(2).args_valid is valid
