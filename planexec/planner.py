"""The planner: a prompt from the question and the tool catalog, a model call, a checked plan.

`Planner.plan` asks the model (purpose ``plan``) for a plan in the hashstep grammar,
parses the reply (`planexec.parsing.parse_plan`) and checks it against the catalog
(`check_plan`). When the reply holds no plan, the plan has error diagnostics, or it names
tools that do not exist, the planner re-prompts with the diagnostics, at most
``max_reprompts`` times; it then returns the best plan it got (the executor reports the
remaining problems per step, and the agent's recovery policy takes over).

Planner modes (``planner.mode``): with ``structured`` output the model is asked, through
``with_structured_output``, for a JSON plan of the schema `planexec.parsing.plan_schema`
(the json dialect); with ``text`` it writes the hashstep grammar as text. ``auto`` (the
default) uses structured output when the model has it and text otherwise; a model
without it, or a structured call that fails, gets the text prompt instead, with a
`FallbackUsed` event of code ``PLANNER_MODE``. Structured plans go through the same
checks and re-prompts, and stream into the same sink as text plans
(`ModelClient.complete_structured`).

On a re-plan the prompt also holds the previous plan, the steps that succeeded (outputs
cut to a budget), the steps that failed and why, and the lessons so far. Succeeded steps
are *kept*: the new plan may reference them (``<step_2>``) and they are not run again.
The planner merges the kept steps into the new plan (so its references check) and
returns the results to reuse as ``prior``.

Templates are filled in a single pass (`fill`): text put into a template (the question,
tool descriptions, step outputs) is never scanned for placeholders again, so a question
containing ``{context}`` or ``{{task}}`` arrives verbatim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from planexec._log import run_log
from planexec._models import ModelClient, ReplySink, as_client
from planexec.errors import ConfigError, ModelError, PlanParseError
from planexec.evaluation import cut
from planexec.events import EventBus, FallbackUsed
from planexec.plan import Diagnostic, Plan, Severity, Step, to_jsonable
from planexec.results import StepResult
from planexec.tools import ToolCatalog

__all__ = [
    "CUT_OFF_CODES",
    "FINAL_STEP_TOOL",
    "JSON_PLAN_GRAMMAR",
    "PLANNER_MODES",
    "PLAN_GRAMMAR",
    "CutOff",
    "Planner",
    "PlannerOutcome",
    "ReplanContext",
    "cut_off",
    "fill",
    "same_call",
    "schema_fields",
    "supports_structured_output",
]

PLANNER_MODES = ("auto", "text", "structured")
"""How a plan is asked for (``planner.mode``)."""

FINAL_STEP_TOOL = "final_answer"
"""The tool name of the final mapping step asked for when an output schema is given."""

_MISSING_CODES = ("REF_MISSING", "DEPENDENCY_MISSING", "REF_FORWARD", "DEPENDENCY_FORWARD")
_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")


def fill(template: str, **values: str) -> str:
    """Replace each ``{{name}}`` in ``template`` by ``values[name]``, in one pass.

    The inserted values are never scanned again, so user text that looks like a
    placeholder stays as it is. Every placeholder in the template must have a value.

    >>> fill("Q: {{question}}", question="what is {context}? {{task}}")
    'Q: what is {context}? {{task}}'

    Raises:
        KeyError: the template names a value that was not given.
    """

    def _sub(m: re.Match[str]) -> str:
        return values[m.group(1)]

    return _PLACEHOLDER.sub(_sub, template)


PLAN_GRAMMAR = """\
Write the plan as blocks, one per step, numbered in order starting at {{first_id}}:
#Task{{first_id}}: what this step does, in one sentence
#Tool{{first_id}}: the tool's exact name from the list, or none for a step that only \
reasons over earlier results
#Args{{first_id}}: the arguments as ONE JSON object on one line ({} when there are none)
#Dependency{{first_id}}: None, or the steps it needs, like #S1, #S2
#ExpectedOutput{{first_id}}: what the step should return

Rules:
- Use only the tools listed above, with their argument names; give every required \
argument (arguments marked ? are optional).
- To use an earlier step's result, write a reference as a JSON string: "<step_1>" for the \
whole result, or "<step_2.items[0].id>" for a part of it. Never invent a value that an \
earlier step can look up.
- A reference inside longer text is filled in as text: "sensors of <step_1.name>".
- Write only the plan: no prose before or after it, no code fences, one plan only."""

EXAMPLE = """\
Example (the tools search(query: str) and fetch(url: str) are illustrative only; use \
the tools listed above):
Question: What is the title of the first search result for "solar inverter"?
#Task1: Search for "solar inverter"
#Tool1: search
#Args1: {"query": "solar inverter"}
#Dependency1: None
#ExpectedOutput1: A list of results, each with a url and a title

#Task2: Fetch the first result
#Tool2: fetch
#Args2: {"url": "<step_1[0].url>"}
#Dependency2: #S1
#ExpectedOutput2: The first result's page, with its title

#Task3: Answer with the page's title
#Tool3: none
#Args3: {"page": "<step_2>"}
#Dependency3: #S2
#ExpectedOutput3: The title of the page"""

JSON_PLAN_GRAMMAR = """\
Write the plan as JSON: an object {"steps": [...]} with one object per step, numbered in \
order starting at {{first_id}}:
- "id": the step's number
- "task": what this step does, in one sentence
- "tool": the tool's exact name from the list, or null for a step that only reasons over \
earlier results
- "args": the arguments as a JSON object ({} when there are none)
- "depends_on": the ids of the steps it needs ([] when none)
- "expected_output": what the step should return

Rules:
- Use only the tools listed above, with their argument names; give every required \
argument (arguments marked ? are optional).
- To use an earlier step's result, write a reference as a JSON string: "<step_1>" for the \
whole result, or "<step_2.items[0].id>" for a part of it. Never invent a value that an \
earlier step can look up.
- A reference inside longer text is filled in as text: "sensors of <step_1.name>".
- Write only the plan, one plan only."""
"""The plan format taught when the plan is asked for as JSON (the json dialect)."""

JSON_EXAMPLE = """\
Example (the tools search(query: str) and fetch(url: str) are illustrative only; use \
the tools listed above):
Question: What is the title of the first search result for "solar inverter"?
{"steps": [
 {"id": 1, "task": "Search for \\"solar inverter\\"", "tool": "search", \
"args": {"query": "solar inverter"}, "depends_on": [], \
"expected_output": "A list of results, each with a url and a title"},
 {"id": 2, "task": "Fetch the first result", "tool": "fetch", \
"args": {"url": "<step_1[0].url>"}, "depends_on": [1], \
"expected_output": "The first result's page, with its title"},
 {"id": 3, "task": "Answer with the page's title", "tool": null, \
"args": {"page": "<step_2>"}, "depends_on": [2], "expected_output": "The title of the page"}
]}"""

SYSTEM_TEMPLATE = """\
You are the planner of a plan-and-execute agent. Break the user's question into a short \
sequence of steps. Each step calls one of the tools below, or reasons over earlier results.

## Tools
{{tools}}

## Plan format
{{grammar}}

## {{example}}{{instructions}}"""

OUTPUT_SCHEMA_TEMPLATE = """\
## Final result
End your plan with a final step #Tool{{n}}: {{tool}} whose #Args{{n}} is a JSON object \
that fills these fields from earlier steps' results (use references, as in any step):
{{fields}}"""

OUTPUT_SCHEMA_JSON_TEMPLATE = """\
## Final result
End your plan with a final step whose "tool" is "{{tool}}" and whose "args" is a JSON \
object that fills these fields from earlier steps' results (use references, as in any step):
{{fields}}"""

REPLAN_TEMPLATE = """\
## This is a re-plan (plan {{version}})
Why: {{reason}}{{cut}}

Previous plan:
{{previous}}

Steps that succeeded (their results are kept: do NOT repeat them; reference them as \
<step_N>):
{{succeeded}}

Steps that failed:
{{failed}}

Lessons so far:
{{lessons}}
{{decompose}}
Write a new plan that reaches the answer, avoiding the failures above. Number the new \
steps from {{first_id}}."""

DESTRUCTIVE_NOTE = (
    " -- DESTRUCTIVE tool: this call may have taken effect before it failed. Do not "
    "repeat it with the same arguments (an exact repeat is refused and not run); check "
    "with a read-only step whether it took effect, or make a different call."
)

DECOMPOSE = (
    "\nThe evaluator judged the job too complicated for these steps: decompose it "
    "further, into smaller steps that each do one simple thing.\n"
)

CUT_NOTE = (
    "\nThe previous reply was cut off: {{where}}. Write the rest of the plan: the steps "
    "that are still missing (the steps that succeeded are kept)."
)
"""Added to the re-plan's reason when the previous reply was cut off (`CutOff`)."""

CUT_OFF_CODES = (
    "TRUNCATED_STEP_DROPPED",
    "STEP_INCOMPLETE",
    "ARGS_TRUNCATED",
    "STEP_TRUNCATED",
)
"""Diagnostic codes saying that the reply ends inside a step (docs/plan-language.md)."""

_UNRUNNABLE_CODES = ("STEP_INCOMPLETE", "ARGS_TRUNCATED")
"""Of those, the codes of a step that must not run as written (an error on the step)."""


@dataclass(frozen=True)
class CutOff:
    """Where a plan's reply was cut off: the plan is *incomplete* (its end is missing).

    Read from the plan's diagnostics by their codes (`CUT_OFF_CODES`), never from their
    messages: `cut_off` builds it.
    """

    code: str
    """The diagnostic's code (``TRUNCATED_STEP_DROPPED``, ``ARGS_TRUNCATED``, ...)."""
    step: int | None
    """The step the reply ends in (a dropped step is not in the plan)."""
    line: int | None
    """The line of the plan text where the cut step is."""
    unrunnable: tuple[int, ...] = ()
    """Steps of the plan cut off inside, that must not run as written."""

    def describe(self) -> str:
        """Where the reply was cut, in words (for people and the re-plan prompt)."""
        at = f" (line {self.line})" if self.line is not None else ""
        sid = self.step if self.step is not None else "?"
        what = {
            "TRUNCATED_STEP_DROPPED": f"right after the start of step {sid}{at}, so step "
            f"{sid} was dropped",
            "STEP_INCOMPLETE": f"inside step {sid}{at}, before its tool or arguments, so "
            f"step {sid} was not run",
            "ARGS_TRUNCATED": f"inside the arguments of step {sid}{at}, so step {sid} "
            "was not run",
        }.get(self.code, f"at the end of step {sid}{at}; later steps are missing")
        return f"the planner's reply ends {what}"


def cut_off(plan: Plan) -> CutOff | None:
    """Whether ``plan``'s reply was cut off inside its last step, and where.

    A reply that ends inside a step (an empty last block, ``#Args`` cut mid-JSON, a step
    cut before its tool) leaves the plan incomplete: its later steps are missing. Read
    from the diagnostics' codes (`CUT_OFF_CODES`) on the plan's last step (or a dropped
    step after it). ``ARGS_TRUNCATED`` counts only where the reply ends: a hashstep step
    says so (`planexec.plan.Step.cut_off`; ``#Args`` that only look unterminated, with
    more fields after them, are an error of that step, not a cut); rewoo and
    llmcompiler report it only at the end of the reply.
    """
    last = max(plan.ids, default=0)

    def counts(d: Diagnostic) -> bool:
        if d.code not in CUT_OFF_CODES or (d.step is not None and d.step < last):
            return False
        if d.code != "ARGS_TRUNCATED" or plan.dialect != "hashstep":
            return True
        return d.step is not None and d.step in plan.ids and plan.step(d.step).cut_off

    found = [d for d in plan.diagnostics if counts(d)]
    if not found:
        return None
    first = min(found, key=lambda d: CUT_OFF_CODES.index(d.code))
    unrunnable = sorted(
        {
            d.step
            for d in found
            if d.code in _UNRUNNABLE_CODES and d.step is not None and d.step in plan.ids
        }
    )
    return CutOff(first.code, first.step, first.line, tuple(unrunnable))


REPROMPT_TEMPLATE = """\
Your plan cannot be used as written:
{{problems}}

Write the whole plan again, fixing these problems. Use only the tools listed, with their \
argument names, and the plan format given."""


@dataclass(frozen=True)
class ReplanContext:
    """What a re-plan prompt shows the planner."""

    reason: str
    """Why a new plan is needed (the failure or the evaluator's verdict)."""
    version: int = 2
    """The version of the plan to write."""
    previous_plan: Plan | None = None
    """The plan that was run."""
    previous_text: str = ""
    """The planner's previous reply."""
    kept: Mapping[int, tuple[Step, StepResult]] = field(default_factory=dict)
    """Succeeded steps (with their results) that the new plan may reference."""
    failed: Sequence[StepResult] = ()
    """Results of the steps that failed, were blocked or cancelled."""
    lessons: Sequence[str] = ()
    """Lessons so far (from failures and the evaluator)."""
    decompose: bool = False
    """Ask for a finer decomposition (``JOB_TOO_COMPLICATED``)."""
    cut: CutOff | None = None
    """Where the previous reply was cut off, when it was (the prompt asks for the rest)."""

    @property
    def first_id(self) -> int:
        """The first free step number (after the kept steps and the previous plan)."""
        ids = list(self.kept) + [r.step_id for r in self.failed]
        if self.previous_plan is not None:
            ids += list(self.previous_plan.ids)
        return max(ids, default=0) + 1


@dataclass(frozen=True)
class PlannerOutcome:
    """What the planner produced."""

    plan: Plan | None
    """The checked plan (kept steps merged in), or None when no reply held a plan."""
    text: str
    """The last reply."""
    prior: dict[int, StepResult] = field(default_factory=dict)
    """Results of kept steps to reuse (pass them to the executor as ``prior``)."""
    replies: tuple[str, ...] = ()
    """Every reply, in order (the first prompt and each re-prompt)."""
    error: str | None = None
    """Why the plan is missing or still has problems after the re-prompts."""
    drafts: tuple[dict[str, Any], ...] = ()
    """The replies answered with a re-prompt, in order: ``{"text": ..., "problems": [...]}``."""
    mode: str = "text"
    """How the last reply was asked for: ``structured`` (a JSON plan through structured
    output; `text` is its JSON) or ``text``."""

    @property
    def reprompts(self) -> int:
        """How many re-prompts were made."""
        return max(0, len(self.replies) - 1)


def _json_type(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _json_type(defs.get(name, {}), defs) if name in defs else name
    if "anyOf" in schema:
        return " | ".join(_json_type(s, defs) for s in schema["anyOf"])
    typ = schema.get("type")
    if typ == "array":
        return f"list[{_json_type(schema.get('items', {}), defs)}]"
    if typ == "object" and "properties" in schema:
        inner = ", ".join(f"{k}: {_json_type(v, defs)}" for k, v in schema["properties"].items())
        return "{" + inner + "}"
    names = {
        "string": "str",
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "object": "dict",
        "null": "None",
    }
    if isinstance(typ, str):
        return names.get(typ, typ)
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    return "any"


def schema_fields(schema: Mapping[str, Any]) -> list[str]:
    """Describe the fields of a JSON schema, one line each: ``- name: type (required) — ...``."""
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    lines = []
    for name, prop in schema.get("properties", {}).items():
        need = "required" if name in required else "optional"
        desc = prop.get("description") or prop.get("title") or ""
        lines.append(
            f"- {name}: {_json_type(prop, defs)} ({need})" + (f" — {desc}" if desc else "")
        )
    return lines


def _tools_section(catalog: ToolCatalog) -> str:
    lines = []
    for spec in catalog.specs():
        sig = spec.signature()
        if spec.server:
            sig = f"{spec.server}.{sig}"
        desc = " ".join((spec.description or "").split())
        lines.append(f"- {sig}: {desc}" if desc else f"- {sig}")
    return "\n".join(lines) if lines else "(no tools: use reasoning steps only)"


def supports_structured_output(model: Any) -> bool:
    """Whether a chat model has native structured output (``with_structured_output``).

    Args:
        model: A langchain chat model.

    Returns:
        False when ``with_structured_output`` raises (`NotImplementedError` for a
        text-only model, or any error for a schema the model cannot take).
    """
    from planexec.parsing import plan_schema

    try:
        model.with_structured_output(plan_schema(), include_raw=True)
    except (NotImplementedError, ValueError, TypeError):  # text-only, or the schema refused
        return False
    return True


def same_call(a: Step, b: Step) -> bool:
    """Whether two steps make the same call: same tool, server and arguments (as written)."""
    return (
        a.tool == b.tool
        and a.server == b.server
        and to_jsonable(a.args) == to_jsonable(b.args)
        and to_jsonable(list(a.positional)) == to_jsonable(list(b.positional))
    )


class Planner:
    """Asks a chat model for a plan and checks it against the tool catalog.

    Args:
        model: The planner's chat model or `ModelClient` (calls have purpose ``plan``).
        catalog: The tools plans may call.
        dialect: The dialect to parse text replies in (``auto`` detects it).
        mode: ``auto`` (structured output where the model has it, else text),
            ``text`` or ``structured`` (see `PLANNER_MODES`).
        draft_policy: Which draft to keep when a reply holds several.
        max_reprompts: Re-prompts with diagnostics, per plan.
        output_budget: Characters of each kept step's output shown in a re-plan prompt.
        instructions: Extra instructions for the system prompt.

    Raises:
        ValueError: ``mode`` is not one of `PLANNER_MODES`.
        ConfigError: ``mode="structured"`` with a model that has no structured output.
    """

    def __init__(
        self,
        model: BaseChatModel | ModelClient,
        catalog: ToolCatalog,
        *,
        dialect: str = "auto",
        mode: str = "auto",
        draft_policy: str = "last_complete",
        max_reprompts: int = 2,
        output_budget: int = 1500,
        instructions: str | None = None,
    ) -> None:
        client = as_client(model)
        assert client is not None
        if mode not in PLANNER_MODES:
            raise ValueError(f"unknown planner mode {mode!r}; expected one of {PLANNER_MODES}")
        self.client = client
        self.catalog = catalog
        self.dialect = dialect
        self.mode = mode
        """``auto``, ``text`` or ``structured``."""
        self._structured: dict[int, bool] = {}
        if mode == "structured" and not self._has_structured(client.model):
            raise ConfigError(
                "planner.mode = 'structured' but the planner's model has no structured "
                "output (with_structured_output); use mode 'auto' or 'text'"
            )
        self.draft_policy = draft_policy
        self.max_reprompts = max_reprompts
        self.output_budget = output_budget
        self.instructions = instructions

    # -- prompt -------------------------------------------------------------------------

    def _has_structured(self, model: Any) -> bool:
        key = id(model)
        if key not in self._structured:
            self._structured[key] = supports_structured_output(model)
        return self._structured[key]

    def system_prompt(self, *, first_id: int = 1, json_format: bool = False) -> str:
        """The system prompt: tools, grammar, one worked example, extra instructions.

        Args:
            first_id: The number of the first step to write.
            json_format: Teach the json dialect (structured mode) instead of hashstep.
        """
        return fill(
            SYSTEM_TEMPLATE,
            tools=_tools_section(self.catalog),
            grammar=fill(JSON_PLAN_GRAMMAR if json_format else PLAN_GRAMMAR,
                         first_id=str(first_id)),
            example=JSON_EXAMPLE if json_format else EXAMPLE,
            instructions=f"\n\n## Instructions\n{self.instructions}" if self.instructions else "",
        )

    def _destructive_call(self, result: StepResult) -> bool:
        """Whether ``result`` is a failed call of a destructive tool that was started."""
        if result.tool is None or result.attempts == 0:
            return False
        try:
            spec = self.catalog.lookup(result.tool, result.server) or self.catalog.lookup(
                result.tool
            )
        except KeyError:
            return False
        return spec is not None and bool(spec.hints.destructive)

    def _replan_section(self, ctx: ReplanContext) -> str:
        previous = ctx.previous_text.strip() or (
            "\n".join(
                f"#Task{s.id}: {s.task} [tool {s.tool or 'none'}]" for s in ctx.previous_plan.steps
            )
            if ctx.previous_plan is not None
            else "(none)"
        )
        succeeded = [
            f"- <step_{sid}> ({step.tool or 'reasoning'}: {step.task or 'no task text'}) "
            f"args {json.dumps(to_jsonable(step.args), ensure_ascii=False)} → output: "
            f"{cut(result.output, self.output_budget)}"
            for sid, (step, result) in sorted(ctx.kept.items())
        ]
        failed = [
            f"- step {r.step_id} ({r.tool or 'reasoning'}) {r.status}"
            + (f" {r.error_kind}" if r.error_kind else "")
            + f": {r.error or r.note or 'no message'}"
            + (DESTRUCTIVE_NOTE if self._destructive_call(r) else "")
            for r in sorted(ctx.failed, key=lambda r: r.step_id)
        ]
        return fill(
            REPLAN_TEMPLATE,
            version=str(ctx.version),
            reason=ctx.reason,
            cut=fill(CUT_NOTE, where=ctx.cut.describe()) if ctx.cut is not None else "",
            previous=previous,
            succeeded="\n".join(succeeded) or "(none)",
            failed="\n".join(failed) or "(none)",
            lessons="\n".join(f"- {x}" for x in ctx.lessons) or "(none)",
            decompose=DECOMPOSE if ctx.decompose else "",
            first_id=str(ctx.first_id),
        )

    def messages(
        self,
        question: str,
        *,
        context: ReplanContext | None = None,
        output_schema: Mapping[str, Any] | None = None,
        json_format: bool = False,
    ) -> list[BaseMessage]:
        """The messages of the first prompt for ``question`` (a re-plan with ``context``).

        With ``json_format`` the prompt teaches the json dialect (structured mode).
        """
        first_id = context.first_id if context is not None else 1
        parts = [fill("Question: {{question}}", question=question)]
        if output_schema is not None:
            parts.append(
                fill(
                    OUTPUT_SCHEMA_JSON_TEMPLATE if json_format else OUTPUT_SCHEMA_TEMPLATE,
                    n="N",
                    tool=FINAL_STEP_TOOL,
                    fields="\n".join(schema_fields(output_schema)) or "(no fields)",
                )
            )
        if context is not None:
            parts.append(self._replan_section(context))
        return [
            SystemMessage(content=self.system_prompt(first_id=first_id, json_format=json_format)),
            HumanMessage(content="\n\n".join(parts)),
        ]

    # -- parse and check ----------------------------------------------------------------

    def _parse(
        self, text: str, dialect: str | None = None, catalog: ToolCatalog | None = None
    ) -> tuple[Plan | None, str | None]:
        from planexec.parsing import parse_plan

        try:
            plan = parse_plan(
                text,
                dialect or self.dialect,
                draft_policy=self.draft_policy,
                catalog=catalog or self.catalog,
            )
        except PlanParseError as exc:
            return None, str(exc)
        if not plan.steps:
            return None, "the reply holds no steps"
        return plan, None

    def _merge(
        self, plan: Plan, kept: Mapping[int, tuple[Step, StepResult]], run_id: str
    ) -> tuple[Plan, dict[int, StepResult], list[Diagnostic]]:
        prior: dict[int, StepResult] = {}
        extra: list[Diagnostic] = []
        new_ids = set(plan.ids)
        carried: list[Step] = []
        for sid, (step, result) in sorted(kept.items()):
            if sid not in new_ids:
                carried.append(step)
                prior[sid] = result
                continue
            if same_call(plan.step(sid), step):
                prior[sid] = result
                continue
            message = (
                f"step {sid} was rewritten by the new plan; the kept result of the earlier "
                f"step {sid} ({step.tool or 'reasoning'}) is not reused"
            )
            run_log(run_id, step_id=sid).warning(message)
            extra.append(Diagnostic(None, Severity.WARNING, "KEPT_STEP_REPLACED", message, sid))
        if carried:
            steps = tuple(sorted((*carried, *plan.steps), key=lambda s: s.id))
            # The structural checks of parse_plan ran without the kept steps; drop their
            # missing-step findings (check_plan runs again on the merged plan and keeps
            # those that still hold).
            diagnostics = tuple(d for d in plan.diagnostics if d.code not in _MISSING_CODES)
            plan = replace(plan, steps=steps, diagnostics=diagnostics)
        return plan, prior, extra

    def _check(self, plan: Plan, catalog: ToolCatalog) -> Plan:
        from planexec.parsing import check_plan

        return check_plan(plan, catalog)

    def problems(self, plan: Plan, catalog: ToolCatalog | None = None) -> list[str]:
        """Why ``plan`` needs a re-prompt: its error diagnostics and its unknown tools."""
        catalog = catalog or self.catalog
        out = [str(d) for d in plan.errors]
        for step in plan.steps:
            if step.tool is None:
                continue
            if not catalog.has(step.tool, step.server):
                if any(d.step == step.id and "TOOL" in d.code for d in plan.errors):
                    continue
                close = catalog.suggest(step.tool)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                out.append(f"step {step.id}: unknown tool {step.tool!r}{hint}")
        return out

    # -- the call -----------------------------------------------------------------------

    async def plan(
        self,
        question: str,
        *,
        context: ReplanContext | None = None,
        output_schema: Mapping[str, Any] | None = None,
        client: ModelClient | None = None,
        run_id: str = "-",
        bus: EventBus | None = None,
        catalog: ToolCatalog | None = None,
        sink: ReplySink | None = None,
    ) -> PlannerOutcome:
        """Ask for a plan, re-prompting with the diagnostics within ``max_reprompts``.

        Args:
            question: The user's question.
            context: For a re-plan: what happened so far.
            output_schema: A JSON schema the final step's args must fill (typed output).
            client: The run-bound client to call (defaults to the planner's own).
            run_id: For logs and events.
            bus: Where `FallbackUsed` events for re-prompts go.
            catalog: The catalog to check against (default: the planner's; the agent
                passes one that also holds the ``final_answer`` tool of a typed output).
            sink: Takes each reply as it streams (`planexec.streaming.PlanStream`): a
                text reply, or a structured one's JSON text
                (`ModelClient.complete_structured`).

        Raises:
            ModelError: the model call failed after its retries.
            CircuitOpenError: the model's breaker is open.
        """
        client = client or self.client
        catalog = catalog or self.catalog
        kept = dict(context.kept) if context is not None else {}
        structured = await self._start_structured(client, run_id, bus)

        def first_messages(json_format: bool) -> list[BaseMessage]:
            return self.messages(
                question, context=context, output_schema=output_schema, json_format=json_format
            )

        messages = first_messages(structured or self.dialect == "json")
        replies: list[str] = []
        drafts: list[dict[str, Any]] = []
        best: tuple[Plan | None, dict[int, StepResult], str | None] = (None, {}, None)
        for round_ in range(self.max_reprompts + 1):
            reply: str | None = None
            if structured:
                reply = await self._structured_reply(client, messages, run_id, bus, sink)
                if reply is None:  # the structured call failed: ask for text from here on
                    structured = False
                    messages = first_messages(self.dialect == "json")
            text = (
                reply
                if reply is not None
                else await client.complete(messages, purpose="plan", sink=sink)
            )
            replies.append(text)
            plan, error = self._parse(text, "json" if structured else None, catalog)
            problems: list[str]
            prior: dict[int, StepResult] = {}
            if plan is None:
                problems = [error or "no plan found"]
            else:
                plan, prior, extra = self._merge(plan, kept, run_id)
                plan = self._check(plan, catalog)
                if extra:
                    plan = plan.with_diagnostics(extra)
                problems = self.problems(plan, catalog)
            if plan is not None:
                best = (plan, prior, "; ".join(problems) or None)
            elif best[0] is None:
                best = (None, {}, "; ".join(problems))
            if not problems:
                break
            if round_ == self.max_reprompts:
                break
            drafts.append({"text": text, "problems": list(problems)})
            message = (
                f"plan reply {round_ + 1} has problems; re-prompting with the diagnostics: "
                + "; ".join(problems)[:500]
            )
            run_log(run_id).warning(message)
            if bus is not None:
                await bus.emit(
                    FallbackUsed(run_id=run_id, step_id=None, code="PLAN_REPROMPT", message=message)
                )
            messages = [
                *messages,
                AIMessage(content=text),
                HumanMessage(
                    content=fill(REPROMPT_TEMPLATE, problems="\n".join(f"- {p}" for p in problems))
                ),
            ]
        plan, prior, error = best
        if plan is not None and error is not None:
            message = (
                f"the plan still has problems after {len(replies) - 1} re-prompt(s) "
                f"(planner.max_reprompts={self.max_reprompts}); going on with it, the "
                "executor reports each remaining problem at its step: " + error[:500]
            )
            run_log(run_id).warning(message)
            if bus is not None:
                await bus.emit(
                    FallbackUsed(
                        run_id=run_id, step_id=None, code="PLAN_PROBLEMS_REMAIN", message=message
                    )
                )
        return PlannerOutcome(
            plan,
            replies[-1],
            prior,
            tuple(replies),
            error,
            tuple(drafts),
            "structured" if structured else "text",
        )

    async def _mode_fallback(
        self, run_id: str, bus: EventBus | None, why: str, *, failed: bool = True
    ) -> None:
        """Say that the text prompt is used, as an event and a log line.

        A warning when a structured call failed; an info line when the model simply has
        no structured output (nothing went wrong).
        """
        message = f"planner.mode={self.mode}: {why}; asking for a text plan instead"
        if failed:
            run_log(run_id).warning(message)
        else:
            run_log(run_id).info(message)
        if bus is not None:
            await bus.emit(
                FallbackUsed(run_id=run_id, step_id=None, code="PLANNER_MODE", message=message)
            )

    async def _start_structured(
        self, client: ModelClient, run_id: str, bus: EventBus | None
    ) -> bool:
        """Whether to ask for a structured plan (a `FallbackUsed` event when not possible)."""
        if self.mode == "text":
            return False
        if self._has_structured(client.model):
            run_log(run_id).info(
                "planner.mode={}: asking for the plan through structured output", self.mode
            )
            return True
        await self._mode_fallback(
            run_id,
            bus,
            "the model has no structured output (with_structured_output)",
            failed=False,
        )
        return False

    async def _structured_reply(
        self,
        client: ModelClient,
        messages: Sequence[BaseMessage],
        run_id: str,
        bus: EventBus | None,
        sink: ReplySink | None = None,
    ) -> str | None:
        """The structured plan as JSON text, or None when the structured call failed.

        With ``sink``, the value's JSON text streams into it as the model writes it.
        """
        from planexec.parsing import plan_schema

        try:
            value = await client.complete_structured(
                messages, plan_schema(), purpose="plan", sink=sink
            )
        except (NotImplementedError, ModelError) as exc:
            await self._mode_fallback(run_id, bus, f"the structured plan call failed ({exc})")
            return None
        return json.dumps(value, ensure_ascii=False)
