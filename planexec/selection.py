"""Tool selection for steps that name an agent or server but no tool: `ModelToolSelector`.

Real planners often write ``#Agent1: IoT Data Download`` and no ``#Tool1``. Such a step
is not a reasoning step (that is ``#Tool: none``, or no tool and no agent): it asks for
*some* tool of that agent. The executor gives it one by **selection**: one model call
(purpose ``select``) chooses a tool among the candidates (`tool_candidates`: the named
server's tools, or the whole catalog when the name matches no server) and fills its
arguments; the choice is validated against the tool's schema, and an unusable reply is
asked again **once**, with the problem as feedback. The executor records the arguments
with method ``selected`` and a note naming the chosen tool.

Nothing is guessed silently: a reply naming no candidate, arguments that do not fit the
schema after the retry, or a reply saying that no tool fits are a `SelectionFailure`
(kind ``TOOL_SELECTION_FAILED``); without a model the executor fails the step with the
same kind instead of running it as reasoning.

The executor defines what it needs (`planexec.executor.ToolSelector`) and knows no
model; the runtime (`planexec.runtime.Runtime`) builds one selector per run on the
run-bound resilient client, so its calls get the run's timeout, retries, breaker and
usage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import ValidationError

from planexec._text import as_text, cut
from planexec.errors import ErrorKind
from planexec.executor import SelectionFailure, ToolChoice
from planexec.grounding import OutputIndex
from planexec.parsing.jsonrepair import extract_json_object
from planexec.parsing.refs import contains_placeholder
from planexec.plan import Step, to_jsonable
from planexec.planner import FINAL_STEP_TOOL
from planexec.reasoning import ModelStepHelper
from planexec.results import StepError, StepResult
from planexec.tools import ToolCatalog, ToolSpec

__all__ = [
    "SELECT_SYSTEM",
    "ModelToolSelector",
    "SelectionFailure",
    "ToolChoice",
    "tool_candidates",
]

SELECT_SYSTEM = (
    "You choose the tool for one step of a plan. The step names an agent or server, "
    "not a tool. Choose exactly one tool from the candidates listed - the one that does "
    "the step's task - and fill its arguments, using the argument names of its "
    "signature (arguments marked ? are optional). Take every value from the question, "
    "the step's task, the arguments written in the plan or the results of earlier steps "
    "shown; never invent one. Reply with one JSON object only: "
    '{"tool": "<a candidate name, as listed>", "args": {...}}. '
    'If no candidate can do the task, reply {"tool": null, "why": "<the reason>"}.'
)
"""The system prompt of a selection call."""

_AFFIXES = ("agent", "server", "tools", "tool")
"""Words stripped from the end of an agent or server name when matching server names."""


def _norm(name: str) -> str:
    """A server or agent name reduced for matching: lower-case letters and digits only."""
    text = re.sub(r"[^0-9a-z]+", "", name.lower())
    for affix in _AFFIXES:
        if text.endswith(affix) and len(text) > len(affix):
            return text[: -len(affix)]
    return text


def tool_candidates(step: Step, catalog: ToolCatalog) -> tuple[list[ToolSpec], str]:
    """The tools a step naming ``step.server`` may get, and where they come from.

    The named server's tools when the name matches a server of the catalog (compared
    without case, spaces and punctuation, and without a trailing ``agent`` /
    ``server`` / ``tools``: ``IoT Agent`` matches ``iot``); otherwise the whole catalog
    (a plan's agent names often match no server).

    Returns:
        The candidates (catalog order) and the scope in words.
    """
    # the typed output's mapping tool (`planexec.output`) is never a candidate
    specs = [s for s in catalog.specs() if s.name != FINAL_STEP_TOOL]
    named = step.server or ""
    want = _norm(named)
    if want:
        same = [s for s in specs if s.server is not None and _norm(s.server) == want]
        if same:
            return same, f"server {same[0].server!r}"
    return specs, f"the whole catalog ({named!r} matches no server)"


class _Unusable(Exception):
    """A reply that cannot be used; the message is the feedback for the retry."""


class ModelToolSelector(ModelStepHelper):
    """A `planexec.executor.ToolSelector` that asks a chat model (purpose ``select``).

    The prompt holds the question (if given), the step's task, the agent or server it
    names, the candidate tools (signature and description), the arguments written in
    the plan (if any) and the outputs of the step's dependencies, cut to ``budget``
    characters in all. The call's ``keys`` are the candidates' qualified names.
    """

    def prompt(
        self,
        step: Step,
        candidates: Sequence[ToolSpec],
        scope: str,
        inputs: Mapping[int, StepResult],
        feedback: StepError | None = None,
    ) -> str:
        """The human message of a selection (built by concatenation: nothing is formatted)."""
        lines: list[str] = []
        if self.question:
            lines += ["Question:", self.question, ""]
        lines += [f"Task (step {step.id}):", step.task or "(no task text)", ""]
        lines += [f"Agent or server named by the plan: {step.server}", ""]
        lines.append(f"Candidate tools ({scope}):")
        for spec in candidates:
            desc = " ".join((spec.description or "").split())
            name = f"{spec.server}.{spec.signature()}" if spec.server else spec.signature()
            lines.append(f"- {name}" + (f": {desc}" if desc else ""))
        lines.append("")
        lines += self.written_lines(step)
        lines += self.inputs_lines(inputs)
        if feedback is not None:
            lines += ["", "The previous attempt at this step failed:", feedback.message]
        return "\n".join(lines)

    async def select(
        self,
        step: Step,
        catalog: ToolCatalog,
        inputs: Mapping[int, StepResult],
        *,
        feedback: StepError | None = None,
    ) -> ToolChoice | SelectionFailure:
        """Choose a tool for ``step`` among `tool_candidates` and fill its arguments.

        Args:
            step: The step (it names an agent or server, and no tool).
            catalog: The run's tools.
            inputs: The succeeded results of the step's dependencies.
            feedback: Why the step's previous attempt failed (a re-run), if it did.

        Returns:
            The choice, or why there is none.

        Raises:
            ModelError: the model call failed (after the client's retries).
            CircuitOpenError: the model provider's breaker is open.
        """
        candidates, scope = tool_candidates(step, catalog)
        where = f"step {step.id} (agent/server {step.server!r})"
        if not candidates:
            return SelectionFailure(
                ErrorKind.TOOL_SELECTION_FAILED,
                f"{where}: no tool to select from: the catalog is empty; no tool was called",
            )
        names = tuple(s.qualified_name for s in candidates)
        messages: list[BaseMessage] = [
            SystemMessage(SELECT_SYSTEM),
            HumanMessage(self.prompt(step, candidates, scope, inputs, feedback)),
        ]
        calls = 0
        problem = ""
        reply = ""
        for _ in range(2):  # an unusable reply is asked again once, with the problem
            reply = await self.client.complete(
                messages, purpose="select", step_id=step.id, keys=names
            )
            calls += 1
            try:
                spec, args = self._read(reply, candidates)
                if spec is not None:
                    self._check_grounded(step, spec, args, inputs)
            except _Unusable as exc:
                problem = str(exc)
                messages = [
                    *messages,
                    AIMessage(reply),
                    HumanMessage(
                        f"That reply cannot be used: {problem}. Reply again with one JSON "
                        'object {"tool": ..., "args": {...}}, choosing one of: '
                        f"{', '.join(names)}."
                    ),
                ]
                continue
            if spec is None:  # the model says no candidate fits
                return SelectionFailure(
                    ErrorKind.TOOL_SELECTION_FAILED,
                    f"{where}: the model found no tool of {scope} for the task: "
                    f"{cut(as_text(args.get('why') or 'no reason given'), 300)}; "
                    "no tool was called",
                    llm_calls=calls,
                    cause=str(args.get("why") or "") or None,
                    reply=cut(reply, 500),
                )
            return ToolChoice(spec, args, names, scope, llm_calls=calls)
        return SelectionFailure(
            ErrorKind.TOOL_SELECTION_FAILED,
            f"{where}: no usable tool choice after {calls} model calls: {problem}; "
            "no tool was called",
            llm_calls=calls,
            cause=problem,
            reply=cut(reply, 500),
        )

    def _check_grounded(
        self,
        step: Step,
        spec: ToolSpec,
        args: Mapping[str, Any],
        inputs: Mapping[int, StepResult],
    ) -> None:
        """Reject arguments whose values occur nowhere the model could have read them.

        A value is grounded when it occurs in the dependencies' outputs, the step's task,
        the arguments written in the plan, the question or the schema's enum/const
        (`planexec.grounding.OutputIndex.ground`); free text and values with nothing like
        them in the outputs are allowed. An ungrounded identifier makes the reply
        unusable, so the one retry sees why, as the resolver's fallback does.

        Raises:
            _Unusable: an argument is an identifier the sources do not hold.
        """
        index = OutputIndex({sid: r.output for sid, r in inputs.items()})
        written = [as_text(to_jsonable(step.args))] if step.args else []
        text = [t for t in (step.task, self.question, *written) if t]
        properties = spec.json_schema.get("properties", {})
        for name, value in args.items():
            prop = properties.get(name, {}) if isinstance(properties, dict) else {}
            named = [*prop.get("enum", ()), *([prop["const"]] if "const" in prop else ())]
            grounding = index.ground(name, value, extra={"plan": text, "schema": named})
            if not grounding.grounded:
                raise _Unusable(
                    f"argument {name!r} = {cut(as_text(value), 80)!r} occurs nowhere in the "
                    "outputs of the steps it depends on, its task or the plan; use a value "
                    "found there"
                )

    @staticmethod
    def _read(
        reply: str, candidates: Sequence[ToolSpec]
    ) -> tuple[ToolSpec | None, dict[str, Any]]:
        """The chosen tool and validated arguments (None and ``{"why": ...}``: none fits).

        Raises:
            _Unusable: the reply names no candidate, or its arguments do not fit.
        """
        data = extract_json_object(reply)
        if not isinstance(data, dict):
            raise _Unusable(f"no JSON object in the reply ({cut(reply.strip(), 120)!r})")
        if "tool" not in data:
            raise _Unusable('the JSON object has no "tool" key')
        name = data.get("tool")
        if name is None or (isinstance(name, str) and name.strip().lower() in ("", "none")):
            return None, {"why": data.get("why")}
        if not isinstance(name, str):
            raise _Unusable(f'"tool" must be a name, got {json.dumps(name)}')
        chosen = [s for s in candidates if name.strip() in (s.name, s.qualified_name)]
        if len(chosen) != 1:
            what = "is not one of the candidates" if not chosen else "names several candidates"
            raise _Unusable(f"the tool {name!r} {what}")
        spec = chosen[0]
        raw = data.get("args", {})
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise _Unusable(f'"args" must be a JSON object, got {cut(as_text(raw), 80)!r}')
        for key, value in raw.items():
            if _has_placeholder(value):
                raise _Unusable(
                    f"argument {key!r} holds a placeholder ({cut(as_text(value), 80)!r}); "
                    "give the value itself"
                )
        try:
            args = spec.validate(raw)
        except ValidationError as exc:
            errors = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise _Unusable(
                f"the arguments do not fit the schema of {spec.qualified_name!r}: {errors}"
            ) from exc
        return spec, args


def _has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return contains_placeholder(value)
    if isinstance(value, Mapping):
        return any(_has_placeholder(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_placeholder(v) for v in value)
    return False
