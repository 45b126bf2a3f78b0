"""What the commands that show step results share on screen (internal)."""

from __future__ import annotations

from planexec.results import StepStatus

__all__ = ["STEP_STYLES"]

STEP_STYLES: dict[StepStatus, str] = {
    StepStatus.SUCCEEDED: "green",
    StepStatus.FAILED: "red",
    StepStatus.BLOCKED: "yellow",
    StepStatus.SKIPPED: "cyan",
    StepStatus.CANCELLED: "magenta",
}
"""The rich style of each step status (statuses not listed have none)."""
