"""Reading a recorded run back as a `Run` (pure reading: nothing is driven or written)."""

from __future__ import annotations

from planexec.errors import ErrorKind
from planexec.results import PlanAttempt, Run, StepResult, Usage
from planexec.store.base import RunStore

__all__ = ["run_from_store"]


def run_from_store(store: RunStore, run_id: str) -> Run:
    """Rebuild a `Run` from its record: attempts, results, status, usage.

    Raises:
        RunNotFoundError: no such run.
    """
    record = store.get_run(run_id)
    results: dict[int, list[StepResult]] = {}
    for rs in store.step_results(run_id):
        results.setdefault(rs.plan_version, []).append(rs.result)
    attempts = [
        PlanAttempt(version=p.version, plan=p.plan, text=p.text, reason=p.reason,
                    results=results.get(p.version, []), error=p.error,
                    drafts=[dict(d) for d in p.drafts])
        for p in store.plans(run_id)
    ]
    known = {a.version for a in attempts}
    for version in sorted(set(results) - known):  # results recorded without a PlanCreated
        attempts.append(PlanAttempt(version=version, plan=None, results=results[version]))
    usage = Usage()
    for ev in store.events(run_id):
        if ev.get("type") == "LLMCalled":
            usage.add_llm_call(str(ev.get("purpose", "")))
        elif ev.get("type") == "ToolCallStarted":
            usage.tool_calls += 1
    if record.created_at is not None:
        usage.wall_time = (record.finished_at or record.updated_at or 0.0) - record.created_at
    kind = record.error_kind
    return Run(
        run_id=run_id,
        question=record.question,
        attempts=attempts,
        status=record.status,
        answer=record.answer,
        error=record.error,
        error_kind=ErrorKind(kind) if kind and kind in ErrorKind.__members__ else None,
        usage=usage,
    )
