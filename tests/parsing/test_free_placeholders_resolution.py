"""Free-text placeholders (``<chiller_asset_id>``) at resolution time (issue 13, item 2)."""

from __future__ import annotations

from planexec.errors import ErrorKind
from planexec.parsing.hashstep import parse_hashstep
from planexec.resolver import ArgResolver, ResolutionFailure, ResolvedArgs
from planexec.results import StepResult, StepStatus
from planexec.testing import ScriptedChatModel, fake_tool, messages_text
from planexec.tools import ToolCatalog

PLAN = (
    "#Task1: List the sites.\n#Tool1: sites()\n#Dependency1: None\n"
    "#Task2: List the assets.\n#Tool2: assets(site_name: \"MAIN\")\n#Dependency2: #S1\n"
    "#Task3: Get the chiller's history.\n"
    '#Tool3: history(asset_id: <chiller_asset_id>, start="2020-06-01")\n'
    "#Dependency3: #S1, #S2\n"
)
RESULTS = {
    1: StepResult(1, "sites", StepStatus.SUCCEEDED, output=["MAIN"]),
    2: StepResult(2, "assets", StepStatus.SUCCEEDED,
                  output=[{"id": "CH-6", "name": "Chiller 6"}]),
}
SPEC = ToolCatalog([fake_tool("history", args={"asset_id": str, "start": str})]).get("history")


async def test_the_fallback_sees_every_declared_dependency_and_the_hint() -> None:
    step = parse_hashstep(PLAN).step(3)
    model = ScriptedChatModel(replies=['{"asset_id": "CH-6"}'])
    out = await ArgResolver(model).resolve(step, SPEC, RESULTS)
    assert isinstance(out, ResolvedArgs), out
    assert out.args == {"asset_id": "CH-6", "start": "2020-06-01"}
    assert out.llm_calls == 1
    text = messages_text(model.requests[0])
    assert "### step_1" in text and "### step_2" in text and "Chiller 6" in text
    assert "<chiller_asset_id>" in text


async def test_without_a_model_the_placeholder_fails_loudly() -> None:
    step = parse_hashstep(PLAN).step(3)
    out = await ArgResolver(None).resolve(step, SPEC, RESULTS)
    assert isinstance(out, ResolutionFailure)
    assert "asset_id" in out.message


async def test_without_dependencies_the_placeholder_is_a_missing_reference() -> None:
    step = parse_hashstep(
        "#Task1: Get the history.\n#Tool1: history(asset_id: <chiller_asset_id>)\n"
    ).step(1)
    model = ScriptedChatModel(replies=['{"asset_id": "CH-6"}'])
    out = await ArgResolver(model).resolve(step, SPEC, {})
    assert isinstance(out, ResolutionFailure)
    assert out.kind is ErrorKind.MISSING_REFERENCE
    assert model.calls == 0
