"""Demo questions for the agent loop, each with its recorded model replies.

``replies`` names a JSON file (a list of reply strings, in the order the model is
called: the planner's plan, then any argument-resolver replies, then reasoning-step
replies, then the final answer); ``plan`` names the plan the planner's reply contains, when
it is also shipped as a plan file. Paths are relative to the ``planexec.examples``
package (see `planexec.examples.example_path`).
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["DEMO_QUESTIONS", "TYPED_DEMO_QUESTIONS", "DemoQuestion", "TypedDemoQuestion"]


class DemoQuestion(TypedDict):
    """One demo question and its recorded replies."""

    question: str
    """The question asked."""
    replies: str
    """The recorded replies file, relative to the package."""
    plan: str | None
    """A plan file with the same plan as the planner's reply, if any."""


DEMO_QUESTIONS: list[DemoQuestion] = [
    {
        "question": "Does Chiller 6 at site MAIN show signs of excess purge in the first "
        "week of June 2025?",
        "replies": "replies/ask_excess_purge.json",
        "plan": "plans/ask_excess_purge.txt",
    },
    {
        "question": "Which wind turbine at SITE_B had abnormal vibration last week, and is "
        "there already an open work order for it?",
        "replies": "replies/ask_turbine_vibration.json",
        "plan": "plans/ask_turbine_vibration.txt",
    },
    {
        "question": "Open a high-priority work order to check the condenser of Chiller 9 at "
        "MAIN, then show me its open work orders.",
        "replies": "replies/ask_work_order.json",
        "plan": "plans/ask_work_order.txt",
    },
]
"""The demo questions, the first being the README's."""


class TypedDemoQuestion(TypedDict):
    """A demo question answered as a typed model (``output_type``), with its replies."""

    question: str
    """The question asked."""
    replies: str
    """The recorded replies file, relative to the package (the plan is the first reply
    and ends with a ``final_answer`` step)."""
    output_type: str
    """The pydantic model of the answer, as ``MODULE:ATTR``."""
    expected: dict[str, object]
    """Field values the typed answer must have (``run(..., expected=...)``)."""


TYPED_DEMO_QUESTIONS: list[TypedDemoQuestion] = [
    {
        "question": "What did Chiller 6's supply temperature at site MAIN look like in the "
        "first week of June 2025 (unit, number of readings, min, max and mean)?",
        "replies": "replies/ask_typed_supply_temperature.json",
        "output_type": "planexec.examples.models:SensorWeek",
        "expected": {
            "asset_id": "CWC04006",
            "unit": "degF",
            "readings": 168,
            "max_value": 45.4,
        },
    },
]
"""Demo questions answered as typed models (see `planexec.output`)."""
