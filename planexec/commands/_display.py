"""What the commands that show step results share on screen (internal)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from planexec.commands._output import DEFAULT_WIDTH, console, terminal_width, to_json
from planexec.events import (
    Event,
    PlanCreated,
    RecoveryDecided,
    RunFinished,
    RunStarted,
    StepStarted,
)
from planexec.results import StepStatus

__all__ = [
    "DEFAULT_WIDTH",
    "STEP_STYLES",
    "PlannerStatus",
    "console",
    "terminal_width",
    "to_json",
]

STEP_STYLES: dict[StepStatus, str] = {
    StepStatus.SUCCEEDED: "green",
    StepStatus.FAILED: "red",
    StepStatus.BLOCKED: "yellow",
    StepStatus.SKIPPED: "cyan",
    StepStatus.CANCELLED: "magenta",
    StepStatus.WAITING_APPROVAL: "blue",
}
"""The rich style of each step status (statuses not listed have none)."""


class PlannerStatus:
    """An event handler showing a status line on standard error while the planner thinks.

    The line (a rich status with a spinner) appears when a run starts or a re-plan is
    decided, and goes when the plan arrives (`planexec.events.PlanCreated`), a step
    starts, or the run ends. Only on a terminal: in a pipe or a log it shows nothing.
    Call `stop` when the run is over (also after an interruption).
    """

    def __init__(self, screen: Console | None = None) -> None:
        """Create the handler.

        Args:
            screen: Where to draw (standard error, as wide as the terminal, by default).
        """
        self.console = screen or console(stderr=True)
        self._status: Any = None

    @property
    def active(self) -> bool:
        """Whether the status line is shown now."""
        return self._status is not None

    def __call__(self, event: Event) -> None:
        """Start or stop the status line for one event."""
        if isinstance(event, RunStarted):
            self._start("the planner is thinking…")
        elif isinstance(event, RecoveryDecided) and event.action == "REPLAN":
            self._start("the planner is thinking again (re-plan)…")
        elif isinstance(event, PlanCreated | StepStarted | RunFinished):
            self.stop()

    def _start(self, message: str) -> None:
        if not self.console.is_terminal:
            return
        self.stop()
        self._status = self.console.status(message)
        self._status.start()

    def stop(self) -> None:
        """Remove the status line, if it is shown."""
        if self._status is not None:
            self._status.stop()
            self._status = None
