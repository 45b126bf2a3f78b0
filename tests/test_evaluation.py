from __future__ import annotations

import pytest

from planexec.errors import ErrorKind
from planexec.evaluation import (
    CombinedEvaluator,
    EvalCase,
    EvalStatus,
    FunctionEvaluator,
    LLMJudge,
    Verdict,
    combine_verdicts,
    format_results,
)
from planexec.events import EventBus, FallbackUsed
from planexec.results import StepResult, StepStatus, Usage
from planexec.testing import ScriptedChatModel, messages_text

OK = StepResult(1, "sites", StepStatus.SUCCEEDED, output=["MAIN"])
BAD = StepResult(2, "assets", StepStatus.FAILED, error="step 2: boom",
                 error_kind=ErrorKind.TOOL_ERROR)


def case(**kw: object) -> EvalCase:
    return EvalCase(question="Which assets?", results=(OK, BAD), answer="CH-6", **kw)  # type: ignore[arg-type]


def test_the_most_severe_status_wins_success_lowest() -> None:
    order = [EvalStatus.EXECUTION_ERROR, EvalStatus.INPUT_DATA_ERROR,
             EvalStatus.JOB_TOO_COMPLICATED, EvalStatus.SUCCESS]
    for i, top in enumerate(order):
        verdicts = [Verdict(s, f"says {s}", f"lesson {s}") for s in reversed(order[i:])]
        combined = combine_verdicts(verdicts)
        assert combined.status is top
        assert combined.lesson == f"lesson {top}"


def test_no_verdicts_combine_to_success() -> None:
    assert combine_verdicts([]).ok


async def test_a_function_evaluator_accepts_bools_statuses_tuples_and_verdicts() -> None:
    assert (await FunctionEvaluator(lambda c: True).evaluate(case())).ok
    assert (await FunctionEvaluator(lambda c: False).evaluate(case())).status is (
        EvalStatus.EXECUTION_ERROR
    )
    v = await FunctionEvaluator(
        lambda c: ("INPUT_DATA_ERROR", "site list empty", "check step 1")
    ).evaluate(case())
    assert (v.status, v.evaluation, v.lesson) == (
        EvalStatus.INPUT_DATA_ERROR, "site list empty", "check step 1")

    async def judge(c: EvalCase) -> Verdict:
        return Verdict(EvalStatus.JOB_TOO_COMPLICATED, "too much", "split it")

    assert (await FunctionEvaluator(judge).evaluate(case())).status is (
        EvalStatus.JOB_TOO_COMPLICATED
    )


async def test_combined_evaluators_cannot_turn_a_failure_into_a_success() -> None:
    both = CombinedEvaluator([FunctionEvaluator(lambda c: True),
                              FunctionEvaluator(lambda c: EvalStatus.INPUT_DATA_ERROR)])
    assert (await both.evaluate(case())).status is EvalStatus.INPUT_DATA_ERROR


async def test_the_llm_judge_reads_a_json_verdict_and_counts_its_call() -> None:
    model = ScriptedChatModel(replies=[
        '```json\n{"status": "EXECUTION_ERROR", "evaluation": "step 2 failed", '
        '"lesson": "use another tool"}\n```'
    ])
    usage = Usage()
    verdict = await LLMJudge(model).evaluate(case(usage=usage))
    assert verdict.status is EvalStatus.EXECUTION_ERROR
    assert verdict.lesson == "use another tool"
    assert usage.llm_calls == {"evaluate": 1}
    prompt = messages_text(model.requests[0])
    assert "step 2 (assets) FAILED TOOL_ERROR" in prompt and "NOT evidence" in prompt


async def test_the_judge_picks_the_most_severe_of_several_statuses() -> None:
    model = ScriptedChatModel(replies=[
        '{"status": ["SUCCESS", "INPUT_DATA_ERROR", "JOB_TOO_COMPLICATED_ERROR"], '
        '"evaluation": "", "lesson": ""}'
    ])
    assert (await LLMJudge(model).evaluate(case())).status is EvalStatus.INPUT_DATA_ERROR


async def test_a_judge_reply_that_is_not_json_is_retried_once_with_a_reminder() -> None:
    model = ScriptedChatModel(replies=[
        "Looks good to me!",
        '{"status": "SUCCESS", "evaluation": "complete", "lesson": ""}',
    ])
    bus = EventBus()
    seen: list[object] = []
    bus.subscribe(seen.append)
    verdict = await LLMJudge(model).evaluate(case(usage=Usage(), bus=bus))
    assert verdict.ok
    assert model.calls == 2
    assert "not a valid JSON object" in messages_text(model.requests[1])
    assert any(isinstance(e, FallbackUsed) and e.code == "JUDGE_REPROMPT" for e in seen)


async def test_a_judge_that_never_replies_json_gives_an_execution_error_with_its_replies() -> None:
    model = ScriptedChatModel(replies=["fine", "still fine"])
    verdict = await LLMJudge(model).evaluate(case())
    assert verdict.status is EvalStatus.EXECUTION_ERROR
    assert verdict.judge_error is not None
    assert "'fine'" in verdict.evaluation and "'still fine'" in verdict.evaluation
    assert model.calls == 2


async def test_an_unknown_status_counts_as_not_json() -> None:
    model = ScriptedChatModel(replies=['{"status": "GREAT"}', '{"status": "success"}'])
    assert (await LLMJudge(model).evaluate(case())).ok


def test_results_are_described_with_failures_never_as_evidence() -> None:
    text = format_results([BAD, OK], budget=100)
    assert text.index("step 1") < text.index("step 2")
    assert 'Output: ["MAIN"]' in text
    assert "FAILED TOOL_ERROR: step 2: boom" in text


def test_long_outputs_are_cut_to_the_budget() -> None:
    big = StepResult(1, "dump", StepStatus.SUCCEEDED, output="x" * 500)
    text = format_results([big], budget=100)
    assert "[cut: 100 of 500 characters shown]" in text


async def test_a_judge_on_a_plain_model_uses_the_runs_client_with_its_timeout() -> None:
    from planexec.errors import ModelTimeoutError
    from planexec.resilience import ResilientModelClient, RetryPolicy

    model = ScriptedChatModel(replies=['{"status": "SUCCESS"}'], delay=2.0)
    made: list[ResilientModelClient] = []

    def client_for(m: object) -> ResilientModelClient:
        client = ResilientModelClient(m, timeout=0.05, retry=RetryPolicy.none())  # type: ignore[arg-type]
        made.append(client)
        return client

    with pytest.raises(ModelTimeoutError):
        await LLMJudge(model).evaluate(case(usage=Usage(), client_for=client_for))
    assert len(made) == 1 and made[0].model is model


async def test_a_judge_given_its_own_client_keeps_it() -> None:
    from planexec.resilience import ResilientModelClient

    model = ScriptedChatModel(replies=['{"status": "SUCCESS"}'])
    usage = Usage()
    judge = LLMJudge(ResilientModelClient(model))

    def client_for(m: object) -> ResilientModelClient:
        raise AssertionError("not used for a judge with its own client")

    verdict = await judge.evaluate(case(usage=usage, client_for=client_for))
    assert verdict.ok and usage.llm_calls == {"evaluate": 1}
