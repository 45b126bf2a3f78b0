"""The documented shape of a plan in the json dialect, as pydantic models.

`JsonPlan` (its JSON Schema is ``docs/plan.schema.json``, `plan_schema`) is what a model
with structured output is asked for; the reader (`planexec.parsing.jsonplan`) takes it
and the other shapes models emit. Kept apart from the reader so that parsing a plan
does not import pydantic.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["JsonPlan", "JsonStep", "plan_schema"]


class JsonStep(BaseModel):
    """One step of a JSON plan: a tool call, or a reasoning step when ``tool`` is null."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(ge=1, description="The step's number: 1, 2, 3, ... in plan order.")
    task: str = Field(description="What this step does, in one sentence.")
    tool: str | None = Field(
        default=None,
        description="The exact name of the tool to call, or null for a step that only "
        "reasons over earlier results.",
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description='The tool\'s arguments by name. To use an earlier step\'s result write '
        'a reference as a string: "<step_1>" for the whole result, "<step_2.items[0].id>" '
        'for a part of it; inside longer text it is filled in as text: "sensors of '
        '<step_1.name>".',
    )
    depends_on: list[int] = Field(
        default_factory=list, description="The ids of the earlier steps this step needs."
    )
    expected_output: str | None = Field(
        default=None, description="What the step should return (never used as its result)."
    )


class JsonPlan(BaseModel):
    """A plan: the steps to run, in order."""

    model_config = ConfigDict(extra="forbid", title="Plan")

    steps: list[JsonStep] = Field(description="The steps, in order, numbered from 1.")


def plan_schema() -> dict[str, Any]:
    """The JSON Schema of a plan in the json dialect (``docs/plan.schema.json``).

    Returns:
        The schema of `JsonPlan` (title ``Plan``), ready for ``with_structured_output``.
    """
    return JsonPlan.model_json_schema()
