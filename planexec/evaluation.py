"""Evaluation of a run's result: the `Evaluator` protocol, `FunctionEvaluator`, `LLMJudge`.

A `Verdict` has a status, an evaluation text and a *lesson* the next plan is given.
A non-success verdict makes the agent re-plan with the lesson; ``JOB_TOO_COMPLICATED``
also asks the planner to decompose the task further.

**Priority.** When several statuses apply (one judge naming several problems, or several
evaluators combined with `combine_verdicts`), the most severe wins, in this order from
highest: ``EXECUTION_ERROR`` > ``INPUT_DATA_ERROR`` > ``JOB_TOO_COMPLICATED`` >
``SUCCESS``. This is the order of the seed system's evaluator ("the priority of status
is EXECUTION_ERROR > INPUT_DATA_ERROR > JOB_TOO_COMPLICATED_ERROR > SUCCESS"): a
verdict is a success only when nothing else applies, so adding an evaluator can never
turn a failure into a success. (The issue lists the statuses starting with SUCCESS;
read literally that would let any one passing check hide every failure, so we follow the
seed's order and document it here and in docs/recovery.md.)

**A judge reply that is not valid JSON** is retried once with a format reminder. If the
second reply is not valid either, the verdict is ``EXECUTION_ERROR`` with
``judge_error`` set and both replies in the evaluation text: an answer that could not
be judged is never reported as a success. The agent does not re-plan on such a
verdict (a new plan cannot fix the judge); it ends the run with ``EVALUATION_FAILED``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from planexec._log import run_log
from planexec._models import ModelClient, as_client
from planexec._text import cut as cut_text
from planexec.events import EventBus, FallbackUsed
from planexec.plan import Plan
from planexec.results import StepResult, Usage, jsonable

__all__ = [
    "EvalCase",
    "EvalStatus",
    "CombinedEvaluator",
    "Evaluator",
    "FunctionEvaluator",
    "LLMJudge",
    "Verdict",
    "combine_verdicts",
    "cut",
    "format_results",
]


class EvalStatus(StrEnum):
    """The status of a verdict."""

    SUCCESS = "SUCCESS"
    """The result answers the question."""
    EXECUTION_ERROR = "EXECUTION_ERROR"
    """A step or the reasoning went wrong: re-plan with the lesson."""
    INPUT_DATA_ERROR = "INPUT_DATA_ERROR"
    """A step's output (the input of later steps) was wrong or incomplete."""
    JOB_TOO_COMPLICATED = "JOB_TOO_COMPLICATED"
    """The plan tried too much at once: re-plan with smaller steps."""

    @property
    def severity(self) -> int:
        """Higher wins when several statuses apply (see the module docstring)."""
        return _SEVERITY[self]


_SEVERITY = {
    EvalStatus.SUCCESS: 0,
    EvalStatus.JOB_TOO_COMPLICATED: 1,
    EvalStatus.INPUT_DATA_ERROR: 2,
    EvalStatus.EXECUTION_ERROR: 3,
}


@dataclass(frozen=True)
class Verdict:
    """What an evaluator says about a run's result."""

    status: EvalStatus
    """The status."""
    evaluation: str = ""
    """Why, in words."""
    lesson: str = ""
    """What the next plan should do differently (empty on success)."""
    judge_error: str | None = None
    """Set when the judge itself failed (e.g. its reply was never valid JSON)."""

    @property
    def ok(self) -> bool:
        """Whether the verdict is a success."""
        return self.status is EvalStatus.SUCCESS

    def to_dict(self) -> dict[str, Any]:
        """Return the verdict as JSON-ready data."""
        return {
            "status": str(self.status),
            "evaluation": self.evaluation,
            "lesson": self.lesson,
            "judge_error": self.judge_error,
        }


def combine_verdicts(verdicts: Sequence[Verdict]) -> Verdict:
    """Combine verdicts: the most severe status wins; texts and lessons are joined.

    An empty sequence is a success.
    """
    if not verdicts:
        return Verdict(EvalStatus.SUCCESS, "no evaluator objected")
    top = max(verdicts, key=lambda v: v.status.severity)
    same = [v for v in verdicts if v.status is top.status]
    return Verdict(
        top.status,
        "\n".join(v.evaluation for v in same if v.evaluation),
        "\n".join(v.lesson for v in same if v.lesson),
        next((v.judge_error for v in same if v.judge_error), None),
    )


@dataclass(frozen=True)
class EvalCase:
    """What an evaluator looks at."""

    question: str
    """The question asked."""
    results: tuple[StepResult, ...]
    """The latest result of every step."""
    answer: str | None = None
    """The final answer, when a model wrote one."""
    plan: Plan | None = None
    """The plan that was run."""
    run_id: str = "-"
    """The run's id."""
    usage: Usage | None = None
    """Where model calls are counted (purpose ``evaluate``)."""
    bus: EventBus | None = None
    """Where events go."""
    output_budget: int = 2000
    """Characters of each step's output to show a judge."""
    client_for: Callable[[BaseChatModel], ModelClient] | None = None
    """Makes the run's resilient client for a judge's model (timeout, retries and
    breaker of the agent's ``model`` settings, counting into the run's usage); an
    `LLMJudge` built on a plain model uses it."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else a custom evaluator needs."""


@runtime_checkable
class Evaluator(Protocol):
    """Judges a run's result."""

    async def evaluate(self, case: EvalCase) -> Verdict:
        """Return the verdict on ``case``."""
        ...


VerdictLike = Verdict | bool | EvalStatus | str | tuple[Any, ...]
EvalFunction = Callable[[EvalCase], VerdictLike | Awaitable[VerdictLike]]


def _to_verdict(value: Any) -> Verdict:
    if isinstance(value, Verdict):
        return value
    if isinstance(value, bool):
        if value:
            return Verdict(EvalStatus.SUCCESS, "the check passed")
        return Verdict(EvalStatus.EXECUTION_ERROR, "the check failed")
    if isinstance(value, EvalStatus | str):
        return Verdict(EvalStatus(value))
    if isinstance(value, tuple) and value:
        status, *rest = value
        texts = [str(x) for x in rest] + ["", ""]
        return Verdict(EvalStatus(status), texts[0], texts[1])
    raise TypeError(f"an evaluator function returned {value!r}, not a Verdict")


class FunctionEvaluator:
    """An evaluator that is a function of the `EvalCase` (sync or async).

    The function returns a `Verdict`, a bool (True = success), an `EvalStatus`, or a
    tuple ``(status, evaluation, lesson)``.
    """

    def __init__(self, fn: EvalFunction) -> None:
        self.fn = fn

    async def evaluate(self, case: EvalCase) -> Verdict:
        """Call the function and turn its result into a `Verdict`."""
        out = self.fn(case)
        if inspect.isawaitable(out):
            out = await out
        return _to_verdict(out)


class CombinedEvaluator:
    """Several evaluators, all asked; `combine_verdicts` decides."""

    def __init__(self, evaluators: Sequence[Evaluator]) -> None:
        self.evaluators = list(evaluators)

    async def evaluate(self, case: EvalCase) -> Verdict:
        """Ask every evaluator, in order, and combine their verdicts."""
        return combine_verdicts([await e.evaluate(case) for e in self.evaluators])


def format_results(results: Sequence[StepResult], budget: int) -> str:
    """Describe step results for a model: outputs cut to ``budget``; failures as failures."""
    lines: list[str] = []
    for r in sorted(results, key=lambda r: r.step_id):
        what = r.tool or "reasoning"
        if r.ok:
            lines.append(f"step {r.step_id} ({what}) SUCCEEDED. Output: {cut(r.output, budget)}")
        else:
            kind = f" {r.error_kind}" if r.error_kind else ""
            lines.append(
                f"step {r.step_id} ({what}) {r.status}{kind}: {r.error or r.note or ''} "
                "-- this step produced no result; it is NOT evidence."
            )
    return "\n".join(lines) if lines else "(no steps ran)"


def cut(value: Any, budget: int) -> str:
    """Compact JSON text of ``value``, cut to ``budget`` characters with a marker."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = repr(value)
    return cut_text(text, budget)


JUDGE_SYSTEM = """You evaluate whether a plan-and-execute run answered a question.
Statuses, most severe first (when several apply, report the most severe):
- EXECUTION_ERROR: a step failed, a tool was misused, or the reasoning is wrong.
- INPUT_DATA_ERROR: an earlier step's output (input to later steps) was wrong or incomplete.
- JOB_TOO_COMPLICATED: the steps tried too much at once; smaller steps are needed.
- SUCCESS: the answer is complete and supported by the step results.
Reply with ONE JSON object and nothing else:
{"status": "<one of the statuses>", "evaluation": "<why>", "lesson": "<what the next plan \
should do differently, empty on success>"}"""

FORMAT_REMINDER = (
    "Your reply was not a valid JSON object with the keys status, evaluation and lesson. "
    "Reply again with exactly one JSON object, no prose and no code fence, e.g. "
    '{"status": "SUCCESS", "evaluation": "...", "lesson": ""}'
)


def _parse_judge(text: str) -> Verdict | None:
    candidate = text.strip()
    if candidate.startswith("```"):
        candidate = candidate.strip("`")
        candidate = candidate.removeprefix("json").strip()
    try:
        data = json.loads(candidate)
    except ValueError:
        start, end = candidate.find("{"), candidate.rfind("}")
        if start < 0 or end <= start:
            return None
        try:
            data = json.loads(candidate[start : end + 1])
        except ValueError:
            return None
    if not isinstance(data, dict):
        return None
    raw = data.get("status")
    statuses = raw if isinstance(raw, list) else [raw]
    parsed: list[EvalStatus] = []
    for s in statuses:
        name = str(s).strip().upper().removesuffix("_ERROR") if s is not None else ""
        for status in EvalStatus:
            if name in (status.value, status.value.removesuffix("_ERROR")):
                parsed.append(status)
    if not parsed:
        return None
    status = max(parsed, key=lambda s: s.severity)
    return Verdict(status, str(data.get("evaluation", "")), str(data.get("lesson", "") or ""))


class LLMJudge:
    """An evaluator that asks a chat model (purpose ``evaluate``) for a JSON verdict.

    Args:
        model: The judge's chat model (or a `ModelClient`).
        instructions: Extra criteria appended to the judge's system prompt.
    """

    def __init__(
        self, model: BaseChatModel | ModelClient, *, instructions: str | None = None
    ) -> None:
        client = as_client(model)
        assert client is not None
        self.client = client
        self.instructions = instructions

    def _client(self, case: EvalCase) -> ModelClient:
        """The client for one case: the run's resilient one, unless the judge has its own.

        A judge built on a plain chat model (wrapped in a plain `ModelClient`) gets the
        agent's timeout, retries and breaker through ``case.client_for``; a judge given
        a client of its own (e.g. a `ResilientModelClient`) keeps it, bound to the
        run's usage.
        """
        if case.client_for is not None and type(self.client) is ModelClient:
            return case.client_for(self.client.model)
        if case.usage is not None:
            return self.client.bind(usage=case.usage, bus=case.bus, run_id=case.run_id)
        return self.client

    def messages(self, case: EvalCase) -> list[BaseMessage]:
        """The judge's prompt for ``case``."""
        system = JUDGE_SYSTEM
        if self.instructions:
            system += f"\n\nAlso check:\n{self.instructions}"
        body = "\n\n".join(
            [
                "Question:\n" + case.question,
                "Step results:\n" + format_results(case.results, case.output_budget),
                "Answer:\n" + (case.answer if case.answer is not None else "(no prose answer)"),
            ]
        )
        return [SystemMessage(content=system), HumanMessage(content=body)]

    async def evaluate(self, case: EvalCase) -> Verdict:
        """Ask the judge; retry once with a format reminder when its reply is not JSON."""
        client = self._client(case)
        messages = self.messages(case)
        first = await client.complete(messages, purpose="evaluate")
        verdict = _parse_judge(first)
        if verdict is not None:
            return verdict
        run_log(case.run_id).warning("judge reply was not valid JSON; asking again once")
        if case.bus is not None:
            await case.bus.emit(
                FallbackUsed(
                    run_id=case.run_id,
                    step_id=None,
                    code="JUDGE_REPROMPT",
                    message="judge reply was not valid JSON; re-asked with a format reminder",
                )
            )
        second = await client.complete(
            [*messages, AIMessage(content=first), HumanMessage(content=FORMAT_REMINDER)],
            purpose="evaluate",
        )
        verdict = _parse_judge(second)
        if verdict is not None:
            return verdict
        return Verdict(
            EvalStatus.EXECUTION_ERROR,
            f"the judge's reply was not valid JSON twice; first: {first[:500]!r}; "
            f"second: {second[:500]!r}",
            "",
            judge_error="judge reply was not valid JSON after one format reminder",
        )
