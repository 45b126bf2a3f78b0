"""What the executor needs from its collaborators, and the local tool runner.

The tool runner, the reasoner, the tool selector, the approval gate and the guard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from planexec.tools import invoke_tool

if TYPE_CHECKING:  # the executor knows no model code: langchain's config via tracing
    from pydantic import BaseModel

    from planexec.approval import ApprovalDecision
    from planexec.events import ToolCallStarted
    from planexec.plan import Step
    from planexec.results import ResolutionMethod, StepError, StepResult
    from planexec.selection import SelectionFailure, ToolChoice
    from planexec.tools import ToolCatalog, ToolSpec
    from planexec.tracing import RunnableConfig

__all__ = ["Approvals", "Guard", "LocalToolRunner", "Reasoner", "ToolRunner", "ToolSelector"]

Guard = Callable[["Step", str], "str | None"]
"""Called before a step's tool call; a returned message fails it with LIMIT_EXCEEDED."""


@runtime_checkable
class ToolRunner(Protocol):
    """Makes one tool call (locally by default; a Ray runner can replace it)."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        """Call the tool with resolved arguments and return its raw output."""
        ...


class LocalToolRunner:
    """Calls tools in this process (see `planexec.tools.invoke_tool`).

    Async tools run on the running event loop, sync ones in a daemon thread of their own.
    """

    async def call(
        self,
        spec: ToolSpec,
        args: dict[str, Any],
        config: RunnableConfig | None = None,
        *,
        validated: BaseModel | None = None,
        callbacks: bool | None = None,
    ) -> Any:
        """Call the tool through `planexec.tools.invoke_tool` (with ``config`` if given).

        ``validated``: the arguments as the resolver validated them (not validated
        again on the direct path). ``callbacks``: whether a langchain callback would see
        the call (`planexec.tools.callbacks_around`; None: asked per call).
        """
        return await invoke_tool(spec, args, config, validated=validated, callbacks=callbacks)


@runtime_checkable
class Reasoner(Protocol):
    """Answers a reasoning step (no tool) from its dependencies' results."""

    async def reason(self, step: Step, inputs: Mapping[int, StepResult]) -> str:
        """Return the step's answer."""
        ...


@runtime_checkable
class ToolSelector(Protocol):
    """Chooses the tool of a step that names an agent or server but no tool.

    `planexec.selection.ModelToolSelector` is the model-backed one.
    """

    async def select(
        self,
        step: Step,
        catalog: ToolCatalog,
        inputs: Mapping[int, StepResult],
        *,
        feedback: StepError | None = None,
    ) -> ToolChoice | SelectionFailure:
        """Return the chosen tool with validated arguments, or why there is none."""
        ...


@runtime_checkable
class Approvals(Protocol):
    """Decides whether a step's call may go ahead (`planexec.approval.ApprovalGate`)."""

    async def review(
        self,
        step: Step,
        spec: ToolSpec,
        args: dict[str, Any],
        resolution: Mapping[str, ResolutionMethod],
        *,
        plan_version: int,
        dialect: str | None = None,
    ) -> ApprovalDecision | None:
        """None: no approval needed; else the decision (approve/edit carry the args).

        ``dialect``: the plan's, for the check of edited arguments.
        """
        ...

    def claim(self, step_id: int, plan_version: int, tool: str, args: Mapping[str, Any],
              start: ToolCallStarted | None) -> None:
        """Claim the decision for this exact call and record its start, at once.

        Raises:
            DecisionClaimError: no decision allows the call (it must not happen).
        """
        ...

    async def withdraw(self, step_id: int, plan_version: int, reason: str) -> None:
        """Withdraw the step's request (its streamed draft was withdrawn)."""
        ...
