"""What a plan that arrives over time tells the executor: `FeedItem`.

A planner's reply streamed into `planexec.executor.Executor.run_feed` becomes a sequence
of feed items: a step is complete (`StepArrived`), a step reported earlier no longer
holds (`StepWithdrawn`: a later draft dropped or changed it), and the plan is complete
(`PlanComplete`, always last: the whole, checked plan). `planexec.streaming` produces them
from the model's stream; the executor only follows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from planexec.plan import Plan, Step
from planexec.results import StepResult

__all__ = ["FeedItem", "PlanComplete", "StepArrived", "StepWithdrawn", "same_work"]


def same_work(a: Step, b: Step) -> bool:
    """Whether two versions of a step do the same work, wherever they are written.

    Same tool, server, arguments (keyword and positional, references included),
    dependencies and readability; for a reasoning step also the same task. Where the step
    sits in the text (its lines) and its expected output do not matter.
    """
    return (
        a.id == b.id
        and a.tool == b.tool
        and a.server == b.server
        and a.no_tool == b.no_tool
        and a.args == b.args
        and a.positional == b.positional
        and a.depends_on == b.depends_on
        and a.args_valid == b.args_valid
        and a.cut_off == b.cut_off
        and (a.tool is not None or a.task == b.task)
    )


@dataclass(frozen=True)
class StepArrived:
    """A step's block is complete: it may start once the executor's rules allow."""

    step: Step
    dialect: str | None = None
    """The dialect of the plan it comes from, as far as known."""


@dataclass(frozen=True)
class StepWithdrawn:
    """A step reported earlier no longer holds as reported."""

    step_id: int
    reason: str
    """Why, in words (e.g. "a later draft of the plan drops it")."""


@dataclass(frozen=True)
class PlanComplete:
    """The reply ended: the whole plan, checked.

    Steps it does not hold as they arrived are withdrawn; steps that waited for the whole
    plan may start.
    """

    plan: Plan
    prior: Mapping[int, StepResult] = field(default_factory=dict)
    """More prior results, known only now (e.g. kept or refused steps)."""
    reason: str = "the final plan does not hold it as it arrived"
    """Why the steps it withdraws are withdrawn."""


FeedItem: TypeAlias = StepArrived | StepWithdrawn | PlanComplete
"""One item of a plan feed."""
