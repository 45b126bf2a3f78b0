"""The model-backed reasoner for tool-less steps: `ModelReasoner`.

A step without a tool (``#Tool: none``) is a reasoning step. The executor defines what
it needs (`planexec.executor.Reasoner`) and knows no model; this module answers such a
step with a chat model, through a `ModelClient` (purpose ``reason``). The runtime
(`planexec.runtime.Runtime`) builds one per run, on the run-bound resilient client, so
its calls get the run's timeout, retries, breaker and usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from langchain_core.messages import HumanMessage, SystemMessage

from planexec._models import ModelClient
from planexec._text import as_text as _as_text
from planexec._text import cut as _cut
from planexec.events import EventBus
from planexec.plan import Step, to_jsonable
from planexec.results import StepResult, Usage

__all__ = ["REASON_SYSTEM", "ModelReasoner", "ModelStepHelper"]

REASON_SYSTEM = (
    "You carry out one reasoning step of a plan: there is no tool to call. Answer the "
    "step's task using only the results of the earlier steps shown. Reply with the "
    "answer only. If those results do not hold what the task needs, say exactly what "
    "is missing; never invent values."
)
"""The system prompt of a reasoning step."""


class ModelStepHelper:
    """What the model-backed helpers of a step share: a client, the question, a budget.

    `ModelReasoner` and `planexec.selection.ModelToolSelector` build on it; `bind`
    returns a copy whose client counts into a run's usage.
    """

    def __init__(
        self, client: ModelClient, *, question: str | None = None, budget: int = 4000
    ) -> None:
        """Build the helper.

        Args:
            client: The model client (its usage counts the calls).
            question: The question the plan answers, shown as context.
            budget: Characters of dependency outputs shown, in all.
        """
        self.client = client
        """The model client (its usage counts the calls)."""
        self.question = question
        """The question the plan answers, shown as context."""
        self.budget = budget
        """Characters of dependency outputs shown, in all."""

    def written_lines(self, step: Step) -> list[str]:
        """The prompt lines showing a step's own arguments as the plan wrote them, if any."""
        if not (step.args or step.positional):
            return []
        written = to_jsonable(step.args) if step.args else to_jsonable(list(step.positional))
        return ["Arguments written in the plan:", _as_text(written), ""]

    def inputs_lines(self, inputs: Mapping[int, StepResult]) -> list[str]:
        """The prompt lines showing the dependencies' outputs, cut to ``budget`` in all."""
        if not inputs:
            return ["No earlier step results are available to this step."]
        per = max(200, self.budget // len(inputs))
        lines = ["Results of earlier steps:"]
        for sid in sorted(inputs):
            r = inputs[sid]
            label = f"step {sid}" + (f" (tool {r.tool})" if r.tool else "")
            lines.append(f"- {label}: {_cut(_as_text(r.output), per)}")
        return lines

    def bind(self, *, usage: Usage, bus: EventBus | None, run_id: str) -> Self:
        """Return a copy whose client counts into ``usage`` for ``run_id``."""
        return type(self)(
            self.client.bind(usage=usage, bus=bus, run_id=run_id),
            question=self.question,
            budget=self.budget,
        )


class ModelReasoner(ModelStepHelper):
    """A `planexec.executor.Reasoner` that asks a chat model (purpose ``reason``).

    The prompt holds the step's task, the question (if given) and the outputs of the
    step's dependencies, cut to ``budget`` characters in all. The step's expected
    output is not shown, so it cannot be echoed back as a result. Its calls are counted
    wherever ``client`` counts them (a run-bound client: the run's usage).
    """

    def prompt(self, step: Step, inputs: Mapping[int, StepResult]) -> str:
        """The human message for a step (built by concatenation: nothing is formatted)."""
        lines: list[str] = []
        if self.question:
            lines += ["Question:", self.question, ""]
        lines += [f"Task (step {step.id}):", step.task or "(no task text)", ""]
        # a reasoning step with #Args (ARGS_WITHOUT_TOOL): shown as written
        lines += self.written_lines(step)
        lines += self.inputs_lines(inputs)
        return "\n".join(lines)

    async def reason(self, step: Step, inputs: Mapping[int, StepResult]) -> str:
        """Ask the model to answer the step's task from its inputs.

        Raises:
            ModelError: the model call failed (after the client's retries).
            CircuitOpenError: the model provider's breaker is open.
        """
        messages = [SystemMessage(REASON_SYSTEM), HumanMessage(self.prompt(step, inputs))]
        return await self.client.complete(messages, purpose="reason", step_id=step.id)
