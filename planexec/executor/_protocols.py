"""What the executor needs from its collaborators, and the local tool runner.

The tool runner, the reasoner, the tool selector (and its answer: `ToolChoice` or
`SelectionFailure`), the approval gate and the guard. Their types are the executor's
own: importing it loads no planner, model client or reasoning module.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import planexec._fastpaths as _fastpaths
from planexec.errors import ErrorKind
from planexec.results import StepError
from planexec.tools import ToolSpec, direct_coroutine, invoke_tool

if TYPE_CHECKING:  # the executor knows no model code: langchain's config via tracing
    from pydantic import BaseModel

    from planexec.approval import ApprovalDecision
    from planexec.events import ToolCallStarted
    from planexec.plan import Step
    from planexec.results import ResolutionMethod, StepResult
    from planexec.tools import ToolCatalog
    from planexec.tracing import RunnableConfig

__all__ = [
    "Approvals",
    "Guard",
    "LocalToolRunner",
    "Reasoner",
    "SelectionFailure",
    "ToolChoice",
    "ToolRunner",
    "ToolSelector",
]

Guard = Callable[["Step", str], "str | None"]
"""Called before a step's tool call; a returned message fails it with LIMIT_EXCEEDED."""


@runtime_checkable
class ToolRunner(Protocol):
    """Makes one tool call (locally by default; a Ray runner can replace it)."""

    async def call(self, spec: ToolSpec, args: dict[str, Any]) -> Any:
        """Call the tool with resolved arguments and return its raw output."""
        ...


CallOptions = tuple["RunnableConfig | None", "BaseModel | None", "bool | None"]
"""What the executor knows of one call beyond its tool and arguments: the call's
langchain config (traced runs), the arguments as the resolver validated them, and
whether a langchain callback would see the call (`planexec.tools.callbacks_around`)."""

call_options: ContextVar[CallOptions | None] = ContextVar("planexec_call_options", default=None)
"""The `CallOptions` of the call being made: set by the executor around each
``runner.call`` (`planexec.executor._call`); a runner may use them or not."""


class LocalToolRunner:
    """Calls tools in this process (see `planexec.tools.invoke_tool`).

    Async tools run on the running event loop, sync ones in a daemon thread of their own.
    """

    def call(
        self,
        spec: ToolSpec,
        args: dict[str, Any],
        config: RunnableConfig | None = None,
        *,
        validated: BaseModel | None = None,
        callbacks: bool | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """The tool's call, to await: its own coroutine when nothing needs ``ainvoke``.

        The direct path (`planexec.tools.direct_coroutine`: a plain async
        `StructuredTool`, no config, no callback around) awaits the tool's coroutine
        with no wrapper between; everything else goes through
        `planexec.tools.invoke_tool` (which calls a plain sync tool directly too, in a
        daemon thread, and any other through ``ainvoke``). Both give the same output,
        exceptions and validation errors (`tests/test_fast_paths.py`).

        ``config``, ``validated`` (the arguments as the resolver validated them, not
        validated again) and ``callbacks`` (whether a langchain callback would see the
        call; None: asked here) default to the executor's `call_options`.

        Raises:
            pydantic.ValidationError: the arguments do not fit the schema (direct path).
        """
        options = call_options.get()
        if options is not None:
            if config is None:
                config = options[0]
            if validated is None:
                validated = options[1]
            if callbacks is None:
                callbacks = options[2]
        if config is None and _fastpaths.ON:
            direct = direct_coroutine(spec, args, validated=validated, callbacks=callbacks)
            if direct is not None:
                return direct
        return invoke_tool(spec, args, config, validated=validated, callbacks=callbacks)


@runtime_checkable
class Reasoner(Protocol):
    """Answers a reasoning step (no tool) from its dependencies' results."""

    async def reason(self, step: Step, inputs: Mapping[int, StepResult]) -> str:
        """Return the step's answer."""
        ...


@dataclass(frozen=True)
class ToolChoice:
    """The tool selected for a step, with its validated arguments."""

    spec: ToolSpec
    """The chosen tool."""
    args: dict[str, Any]
    """Its arguments, validated against the tool's schema."""
    candidates: tuple[str, ...]
    """The qualified names of the tools it was chosen among."""
    scope: str
    """Where the candidates came from, in words (``server 'iot'``, ``the whole catalog``)."""
    llm_calls: int = 1
    """Model calls made (1, or 2 after a retry)."""

    @property
    def note(self) -> str:
        """A remark for the step's result naming the choice (``tool selected: ...``)."""
        return (
            f"tool selected: {self.spec.qualified_name} (chosen by the model among "
            f"{len(self.candidates)} tool(s) of {self.scope})"
        )


@dataclass(frozen=True)
class SelectionFailure:
    """Why no tool was selected for a step. No tool is called."""

    kind: ErrorKind
    """``TOOL_SELECTION_FAILED``."""
    message: str
    """For people: names the step, the agent or server and the problem."""
    llm_calls: int = 0
    """Model calls made before failing."""
    cause: str | None = None
    """The problem in its own words (a validation error, the model's reason)."""
    reply: str | None = None
    """The last reply, cut, when one was unusable."""

    def to_error(self) -> StepError:
        """The failure as the step's `StepError`."""
        return StepError(self.kind, self.message, cause=self.cause)



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
              start: ToolCallStarted | None, *, server: str | None = None) -> None:
        """Claim the decision for this exact call (``tool`` of ``server``) and record its start.

        The claim and the record of the start are one store transaction.

        Raises:
            DecisionClaimError: no decision allows the call (it must not happen).
        """
        ...

    async def withdraw(self, step_id: int, plan_version: int, reason: str) -> None:
        """Withdraw the step's request (its streamed draft was withdrawn)."""
        ...
