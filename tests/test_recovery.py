from __future__ import annotations

import pytest

from planexec.errors import ErrorKind
from planexec.plan import Step
from planexec.recovery import (
    DEFAULT_POLICY,
    Action,
    Failure,
    Limits,
    RecoveryPolicy,
    RecoveryState,
    combine_decisions,
)
from planexec.results import StepError, StepResult, StepStatus


def fail(kind: ErrorKind, step: int = 2, *, tool: str = "history", safe: bool = True,
         message: str | None = None, version: int = 1, cause: Failure | None = None) -> Failure:
    return Failure(kind, message or f"step {step}: {kind}", step, tool, (), safe, version, cause)


def invalid(message: str, *args: str, tool: str = "history") -> StepResult:
    """A failed step result whose `StepError` names ``args``."""
    return StepResult(2, tool, StepStatus.FAILED,
                      failure=StepError(ErrorKind.ARGS_INVALID, message, args=args))


EXPECTED = {
    ErrorKind.PLAN_PARSE: Action.REPLAN,
    ErrorKind.UNKNOWN_TOOL: Action.REPLAN,
    ErrorKind.ARGS_SYNTAX: Action.REPLAN,
    ErrorKind.MISSING_REFERENCE: Action.REPLAN,
    ErrorKind.RESOLUTION_FAILED: Action.RERESOLVE,
    ErrorKind.ARGS_INVALID: Action.RERESOLVE,
    ErrorKind.TOOL_ERROR: Action.RETRY_STEP,
    ErrorKind.TOOL_TIMEOUT: Action.RETRY_STEP,
    ErrorKind.EMPTY_OUTPUT: Action.RETRY_STEP,
    ErrorKind.LIMIT_EXCEEDED: Action.STOP,
    ErrorKind.CANCELLED: Action.STOP,
}


@pytest.mark.parametrize(("kind", "action"), list(EXPECTED.items()))
def test_each_row_of_the_default_table_gives_its_action(kind: ErrorKind, action: Action) -> None:
    policy = RecoveryPolicy()
    decision = policy.decide(fail(kind), RecoveryState())
    assert decision.action is action
    assert str(kind) in decision.reason


def test_every_error_kind_has_a_default_action() -> None:
    assert set(DEFAULT_POLICY) == set(ErrorKind)


def test_upstream_failed_follows_its_cause() -> None:
    policy = RecoveryPolicy()
    cause = fail(ErrorKind.TOOL_ERROR, 1, safe=True)
    decision = policy.decide(fail(ErrorKind.UPSTREAM_FAILED, 3, cause=cause), RecoveryState())
    assert decision.action is Action.RETRY_STEP
    assert "follows its cause" in decision.reason
    cause = fail(ErrorKind.UNKNOWN_TOOL, 1)
    decision = policy.decide(fail(ErrorKind.UPSTREAM_FAILED, 3, cause=cause), RecoveryState())
    assert decision.action is Action.REPLAN


def test_upstream_failed_without_a_known_cause_replans() -> None:
    decision = RecoveryPolicy().decide(fail(ErrorKind.UPSTREAM_FAILED), RecoveryState())
    assert decision.action is Action.REPLAN


def test_an_unsafe_tool_is_never_retried() -> None:
    policy = RecoveryPolicy(max_retries_per_step=5)
    for kind in (ErrorKind.TOOL_ERROR, ErrorKind.TOOL_TIMEOUT, ErrorKind.EMPTY_OUTPUT):
        decision = policy.decide(fail(kind, safe=False, tool="delete_order"), RecoveryState())
        assert decision.action is Action.REPLAN
        assert "never retried" in decision.reason


def test_the_retry_budget_is_per_step_and_escalates_to_replan() -> None:
    policy = RecoveryPolicy(max_retries_per_step=2)
    state = RecoveryState()
    actions = [policy.decide(fail(ErrorKind.TOOL_ERROR), state).action for _ in range(3)]
    assert actions == [Action.RETRY_STEP, Action.RETRY_STEP, Action.REPLAN]
    assert "retry budget (2 per step) spent" in state.decisions[-1].reason
    # another step has its own budget; a new plan version too
    assert policy.decide(fail(ErrorKind.TOOL_ERROR, 5), state).action is Action.RETRY_STEP
    assert policy.decide(fail(ErrorKind.TOOL_ERROR, version=2), state).action is Action.RETRY_STEP


def test_an_empty_output_is_retried_once_at_most() -> None:
    policy = RecoveryPolicy(max_retries_per_step=3)
    state = RecoveryState()
    actions = [policy.decide(fail(ErrorKind.EMPTY_OUTPUT), state).action for _ in range(2)]
    assert actions == [Action.RETRY_STEP, Action.REPLAN]


@pytest.mark.parametrize(
    "kind", [ErrorKind.TOOL_ERROR, ErrorKind.TOOL_TIMEOUT, ErrorKind.EMPTY_OUTPUT]
)
def test_a_call_the_executor_already_retried_in_the_step_is_replanned_not_retried(
    kind: ErrorKind,
) -> None:
    policy = RecoveryPolicy(max_retries_per_step=3)
    state = RecoveryState()
    retried = Failure(kind, f"step 2: {kind}", 2, "history", safe=True, attempts=2)
    decision = policy.decide(retried, state)
    assert decision.action is Action.REPLAN
    assert "already ran the call 2 times within the step" in decision.reason
    assert state.retries[(1, 2)] == 0
    once = Failure(kind, f"step 3: {kind}", 3, "history", safe=True, attempts=1)
    assert policy.decide(once, state).action is Action.RETRY_STEP


def test_a_failure_from_a_result_carries_the_executor_attempts() -> None:
    result = StepResult(step_id=2, tool="history", status=StepStatus.FAILED,
                        error_kind=ErrorKind.TOOL_ERROR, error="boom", attempts=3)
    assert Failure.from_result(result, safe=True).attempts == 3


def test_the_reresolution_budget_escalates_to_replan() -> None:
    policy = RecoveryPolicy(max_reresolutions_per_step=2, early_replan=False)
    state = RecoveryState()
    actions = [
        policy.decide(fail(ErrorKind.ARGS_INVALID, message=f"bad value {i}"), state).action
        for i in range(3)
    ]
    assert actions == [Action.RERESOLVE, Action.RERESOLVE, Action.REPLAN]
    assert "re-resolution budget" in state.decisions[-1].reason


def test_the_same_argument_failing_the_same_way_twice_replans_early() -> None:
    policy = RecoveryPolicy(max_reresolutions_per_step=5)
    state = RecoveryState()
    r1 = invalid("step 2 (history): argument 'start' Input should be a valid date "
                 "(got 'yesterday')", "start")
    r2 = invalid("step 2 (history): argument 'start' Input should be a valid date "
                 "(got 'last week')", "start")
    first = policy.decide(Failure.from_result(r1), state)
    second = policy.decide(Failure.from_result(r2), state)
    assert first.action is Action.RERESOLVE
    assert second.action is Action.REPLAN
    assert "start failed the same way 2 times" in second.reason
    assert state.reresolutions[(1, 2)] == 1  # the rest of the budget was not spent


def test_the_early_replan_counts_per_plan_so_a_new_plan_reresolves_first() -> None:
    policy = RecoveryPolicy(max_reresolutions_per_step=5)
    state = RecoveryState()
    r = invalid("step 2 (history): argument 'start' Input should be a valid date", "start")
    actions = [policy.decide(Failure.from_result(r, plan_version=v), state).action
               for v in (1, 1, 2, 2)]
    assert actions == [Action.RERESOLVE, Action.REPLAN, Action.RERESOLVE, Action.REPLAN]
    assert "start failed the same way 2 times" in state.decisions[-1].reason


def test_without_replanning_the_stop_says_why() -> None:
    decision = RecoveryPolicy().decide(fail(ErrorKind.UNKNOWN_TOOL), RecoveryState(),
                                       can_replan=False)
    assert decision.action is Action.STOP
    assert "execute_plan" in decision.reason


def test_a_different_argument_does_not_trigger_the_early_replan() -> None:
    policy = RecoveryPolicy()
    state = RecoveryState()
    a = Failure.from_result(invalid("argument 'a' bad", "a", tool="h"))
    b = Failure.from_result(invalid("argument 'b' bad", "b", tool="h"))
    assert a.args == ("a",) and b.args == ("b",)
    assert policy.decide(a, state).action is Action.RERESOLVE
    assert policy.decide(b, state).action is Action.RERESOLVE


def test_the_arguments_of_a_failure_come_from_its_step_error_never_from_its_message() -> None:
    message = "argument 'a' bad; arguments 'b', 'c' and `d` are fine; schema {'type': 'x'}"
    failure = Failure.from_result(
        StepResult(2, "h", StepStatus.FAILED, error=message, error_kind=ErrorKind.ARGS_INVALID)
    )
    assert failure.args == ()
    assert Failure.from_result(invalid(message, "b", tool="h")).args == ("b",)


def test_a_failing_literal_from_the_plan_replans_at_once_instead_of_reresolving() -> None:
    result = StepResult(2, "h", StepStatus.FAILED, failure=StepError(
        ErrorKind.ARGS_INVALID, "step 2: bad", args=("site", "limit"), literal_args=("limit",)))
    decision = RecoveryPolicy().decide(Failure.from_result(result), RecoveryState())
    assert decision.action is Action.REPLAN
    assert "'limit'" in decision.reason


def test_a_failure_of_arguments_taken_from_references_is_reresolved() -> None:
    result = StepResult(2, "h", StepStatus.FAILED, failure=StepError(
        ErrorKind.RESOLUTION_FAILED, "step 2: bad", args=("site",)))
    decision = RecoveryPolicy().decide(Failure.from_result(result), RecoveryState())
    assert decision.action is Action.RERESOLVE


def test_the_replan_budget_turns_replan_into_stop() -> None:
    policy = RecoveryPolicy(max_replans=1)
    state = RecoveryState()
    assert policy.decide(fail(ErrorKind.UNKNOWN_TOOL), state).action is Action.REPLAN
    state.note_replan()
    decision = policy.decide(fail(ErrorKind.UNKNOWN_TOOL), state)
    assert decision.action is Action.STOP
    assert "re-plan budget (1) spent" in decision.reason


def test_without_a_planner_replan_becomes_stop() -> None:
    decision = RecoveryPolicy().decide(fail(ErrorKind.UNKNOWN_TOOL), RecoveryState(),
                                       can_replan=False)
    assert decision.action is Action.STOP
    assert "no planner" in decision.reason


def test_the_table_can_be_overridden_or_replaced_but_cancel_always_stops() -> None:
    policy = RecoveryPolicy(overrides={"TOOL_ERROR": "REPLAN", "CANCELLED": "RETRY_STEP"})
    assert policy.action_for(ErrorKind.TOOL_ERROR) is Action.REPLAN
    assert policy.action_for(ErrorKind.CANCELLED) is Action.STOP
    replaced = RecoveryPolicy({ErrorKind.UNKNOWN_TOOL: Action.STOP})
    assert replaced.decide(fail(ErrorKind.UNKNOWN_TOOL), RecoveryState()).action is Action.STOP
    assert replaced.action_for(ErrorKind.ARGS_INVALID) is Action.RERESOLVE


def test_a_round_takes_the_most_severe_action() -> None:
    policy = RecoveryPolicy()
    state = RecoveryState()
    d1 = policy.decide(fail(ErrorKind.TOOL_ERROR, 1), state)
    d2 = policy.decide(fail(ErrorKind.UNKNOWN_TOOL, 2), state)
    d3 = policy.decide(fail(ErrorKind.LIMIT_EXCEEDED, 3), state)
    assert combine_decisions([d1]) is Action.RETRY_STEP
    assert combine_decisions([d1, d2]) is Action.REPLAN
    assert combine_decisions([d1, d2, d3]) is Action.STOP
    assert combine_decisions([]) is None


def test_a_reasoning_step_counts_as_safe() -> None:
    r = StepResult(4, None, StepStatus.FAILED, error="model failed",
                   error_kind=ErrorKind.MODEL_ERROR)
    assert Failure.from_result(r).safe
    assert RecoveryPolicy().decide(Failure.from_result(r), RecoveryState()).action is (
        Action.RETRY_STEP
    )


# ---------------------------------------------------------------- limits


def step(tool: str | None) -> Step:
    return Step(id=1, tool=tool)


def test_max_steps_refuses_the_step_after_the_limit() -> None:
    limits = Limits(max_steps=2)
    assert limits.guard(step("a"), "a") is None
    assert limits.guard(step("b"), "b") is None
    message = limits.guard(step("c"), "c")
    assert message is not None and "max_steps=2" in message
    assert limits.steps == 2


def test_a_per_tool_limit_names_the_tool() -> None:
    limits = Limits(per_tool_limits={"search": 2})
    assert limits.guard(step("search"), "search") is None
    assert limits.guard(step("fetch"), "fetch") is None
    assert limits.guard(step("search"), "search") is None
    message = limits.guard(step("search"), "search")
    assert message is not None and "per_tool_limits['search']=2" in message
    assert limits.guard(step("fetch"), "fetch") is None


def test_a_repeated_sequence_limit_counts_the_pattern_in_the_calls() -> None:
    limits = Limits(sequence_limits=[(("search", "fetch"), 2)])
    calls = ["search", "fetch", "other", "search", "fetch", "search"]
    for tool in calls:
        assert limits.guard(step(tool), tool) is None
    message = limits.guard(step("fetch"), "fetch")
    assert message is not None
    assert "sequence_limits[search → fetch]=2" in message and "3 times" in message


def test_pattern_counting_does_not_overlap() -> None:
    assert Limits.count_pattern(["a", "a", "a", "a"], ["a", "a"]) == 2
    assert Limits.count_pattern(["a", "b", "a", "b", "a"], ["a", "b", "a"]) == 1
    assert Limits.count_pattern([], ["a"]) == 0


def test_the_guard_takes_the_tool_from_the_step_when_not_given() -> None:
    limits = Limits(per_tool_limits={"a": 0})
    assert limits.guard(step("a")) is not None
    assert limits.hit is not None


def test_a_limit_matches_a_tool_by_name_or_by_server_and_name() -> None:
    limits = Limits(per_tool_limits={"iot.sites": 1, "history": 1},
                    sequence_limits=[(("iot.sites", "history"), 0)])
    remote = Step(id=1, tool="sites", server="iot")
    assert limits.guard(step("sites"), "sites") is None  # a local 'sites' is another tool
    assert limits.guard(remote, "sites") is None
    message = limits.guard(remote, "sites")
    assert message is not None and "per_tool_limits['iot.sites']=1" in message
    seq = Limits(sequence_limits=[(("iot.sites", "history"), 0)])
    assert seq.guard(Step(id=1, tool="sites"), "sites", server="iot") is None
    message = seq.guard(step("history"), "history")
    assert message is not None and "sequence_limits[iot.sites → history]=0" in message
    assert Limits(per_tool_limits={"sites": 0}).guard(remote, "sites") is not None


# ------------------------------------------------------------------ StepError.retryable


def _tool_failed(kind: ErrorKind, retryable: bool | None, **methods: str) -> StepResult:
    from planexec.results import ResolutionMethod

    return StepResult(
        2, "history", StepStatus.FAILED, attempts=1,
        resolution={n: ResolutionMethod(m) for n, m in methods.items()},
        failure=StepError(kind, f"step 2: {kind}", retryable=retryable),
    )


@pytest.mark.parametrize("kind", [ErrorKind.TOOL_ERROR, ErrorKind.TOOL_TIMEOUT,
                                  ErrorKind.EMPTY_OUTPUT])
def test_a_failure_the_executor_judged_not_retryable_is_not_retried_by_the_agent(
    kind: ErrorKind,
) -> None:
    policy = RecoveryPolicy()
    no = Failure.from_result(_tool_failed(kind, False, sku="literal"), safe=True)
    assert policy.decide(no, RecoveryState()).action is Action.REPLAN
    for judged in (True, None):  # may help, or not judged (a record from before the field)
        maybe = Failure.from_result(_tool_failed(kind, judged, sku="literal"), safe=True)
        assert policy.decide(maybe, RecoveryState()).action is Action.RETRY_STEP


def test_refused_arguments_are_re_resolved_only_when_a_re_resolution_can_change_one() -> None:
    policy = RecoveryPolicy()
    decide = lambda result: policy.decide(Failure.from_result(result, safe=True),  # noqa: E731
                                          RecoveryState()).action
    kind = ErrorKind.ARGS_INVALID
    # every argument written in the plan (or edited by a person): the same call again
    assert decide(_tool_failed(kind, False, sku="literal")) is Action.REPLAN
    assert decide(_tool_failed(kind, False, sku="literal", n="edited")) is Action.REPLAN
    assert decide(_tool_failed(kind, False)) is Action.REPLAN  # no argument at all
    # an argument taken from a reference may come out otherwise
    assert decide(_tool_failed(kind, False, sku="literal", n="reference")) is Action.RERESOLVE
    # not judged at the call (the resolver's own validation, an old record): as before
    assert decide(_tool_failed(kind, None, sku="literal")) is Action.RERESOLVE


def test_retryable_round_trips_and_an_old_record_without_it_reads_as_unknown() -> None:
    for value in (True, False, None):
        error = StepError(ErrorKind.TOOL_ERROR, "m", retryable=value)
        assert StepError.from_dict(error.to_dict()) == error
    old = {"kind": "TOOL_ERROR", "message": "m", "args": [], "literal_args": [],
           "cause": None, "upstream": None}
    assert StepError.from_dict(old).retryable is None
