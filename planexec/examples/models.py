"""Typed results for demo questions asked with ``output_type`` (see `planexec.output`).

`SensorWeek` is the typed answer of the demo question in
`planexec.examples.questions.TYPED_DEMO_QUESTIONS`: the planner ends its plan with a
``final_answer`` step whose arguments fill these fields from the tools' outputs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SensorWeek"]


class SensorWeek(BaseModel):
    """One sensor of one asset over a window of hourly readings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    site_name: str
    """The site, e.g. ``MAIN``."""
    asset_id: str
    """The asset's id, e.g. ``CWC04006``."""
    asset_name: str
    """The asset's name, e.g. ``Chiller 6``."""
    sensor: str
    """The sensor's name, e.g. ``Supply Temperature``."""
    unit: str
    """The unit of the readings, e.g. ``degF``."""
    readings: int = Field(ge=0)
    """How many hourly readings the window holds."""
    min_value: float
    """The lowest reading."""
    max_value: float
    """The highest reading."""
    mean_value: float
    """The mean reading."""
