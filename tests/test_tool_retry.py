"""Tool failures are retried by class: only what another attempt can fix.

`classify_tool_failure` is the one decision the executor asks for (kind and retry);
these tests hold its default (`default_tool_retry_on`), a tool's own ``retry_on``, and
the executor's use of it (how many times the tool is really called).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langchain_core.tools import ToolException
from pydantic import BaseModel, ValidationError

from planexec.config import ExecutorSettings, RetrySettings
from planexec.errors import ConfigError, ErrorKind, RetryableToolError, ToolArgumentsError
from planexec.executor import Executor
from planexec.parsing import parse_plan
from planexec.resilience import classify_tool_failure, default_tool_retry_on
from planexec.results import StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog

FAST = ExecutorSettings(tool_retry=RetrySettings(attempts=3, base_delay=0, max_delay=0, jitter=0))
SAFE = {"read_only": True}


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        raise outer from cause
    except BaseException as exc:  # noqa: BLE001 - built to be inspected
        return exc


def _status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://tool.invalid/x")
    response = httpx.Response(status, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


def _validation_error() -> ValidationError:
    class M(BaseModel):
        n: int

    try:
        M.model_validate({"n": "x"})
    except ValidationError as exc:
        return exc
    raise AssertionError("unreachable")


RETRIED: list[BaseException] = [
    TimeoutError("slow"),
    ConnectionResetError("reset"),
    ConnectionError("refused"),
    RetryableToolError("busy, try later"),
    httpx.ConnectError("no route"),
    httpx.ReadTimeout("read"),
    _status_error(503),
    _status_error(500),
    _status_error(429),
    _chained(ToolException("call failed"), ConnectionResetError("reset")),
    _chained(RuntimeError("wrapped"), _status_error(502)),
]
NOT_RETRIED: list[BaseException] = [
    KeyError("sku"),
    LookupError("no such asset"),
    IndexError("list index out of range"),
    TypeError("unexpected keyword"),
    ValueError("bad value"),
    AttributeError("no attribute"),
    ZeroDivisionError("division by zero"),
    NotImplementedError(),
    _validation_error(),
    ToolArgumentsError("x must be prime"),
    RuntimeError("something"),
    ToolException("asset not found"),
    FileNotFoundError("missing.csv"),
    _status_error(400),
    _status_error(404),
    _status_error(422),
    # a validation or programming error is not retried whatever caused it
    _chained(ToolArgumentsError("refused"), ConnectionError("reset")),
    _chained(KeyError("k"), TimeoutError()),
    _chained(ToolException("call failed"), KeyError("k")),
]


@pytest.mark.parametrize("exc", RETRIED, ids=lambda e: type(e).__name__)
def test_what_a_retry_can_fix_is_retried_by_default(exc: BaseException) -> None:
    assert default_tool_retry_on(exc) is True
    assert classify_tool_failure(exc).retry is True


@pytest.mark.parametrize("exc", NOT_RETRIED, ids=lambda e: type(e).__name__)
def test_validation_and_programming_errors_are_never_retried_by_default(
    exc: BaseException,
) -> None:
    assert default_tool_retry_on(exc) is False
    assert classify_tool_failure(exc).retry is False


def test_the_kind_follows_the_class() -> None:
    assert classify_tool_failure(ToolArgumentsError("no")).kind is ErrorKind.ARGS_INVALID
    assert classify_tool_failure(_validation_error()).kind is ErrorKind.ARGS_INVALID
    assert classify_tool_failure(TimeoutError()).kind is ErrorKind.TOOL_TIMEOUT
    assert classify_tool_failure(KeyError("k")).kind is ErrorKind.TOOL_ERROR
    assert classify_tool_failure(ConnectionError()).kind is ErrorKind.TOOL_ERROR


def test_a_tools_retry_on_replaces_the_default_but_never_retries_refused_arguments() -> None:
    by_class = fake_tool("t", retry_on=(KeyError,))
    assert classify_tool_failure(KeyError("k"), by_class).retry is True
    assert classify_tool_failure(ConnectionError(), by_class).retry is False
    one_class = fake_tool("t", retry_on=LookupError)
    assert classify_tool_failure(IndexError(), one_class).retry is True
    predicate = fake_tool("t", retry_on=lambda exc: "again" in str(exc))
    assert classify_tool_failure(RuntimeError("try again"), predicate).retry is True
    assert classify_tool_failure(TimeoutError("slow"), predicate).retry is False
    everything = fake_tool("t", retry_on=(Exception,))
    refused = classify_tool_failure(ToolArgumentsError("no"), everything)
    assert (refused.kind, refused.retry) == (ErrorKind.ARGS_INVALID, False)


def test_an_unusable_retry_on_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="retry_on"):
        classify_tool_failure(KeyError("k"), fake_tool("t", retry_on=42))  # type: ignore[arg-type]


def _plan(tool: str) -> Any:
    return parse_plan(f"#Task1: go\n#Tool1: {tool}\n#Args1: {json.dumps({})}\n#Dependency1: None\n")


def _calls(tool: Any) -> int:
    return int(tool.metadata["calls"].count)


async def _run(tool: Any) -> Any:
    [result] = await Executor(ToolCatalog([tool]), config=FAST).run(_plan(tool.name))
    return result


@pytest.mark.parametrize("error", [KeyError("sku"), TypeError("bad"), RuntimeError("no")])
async def test_a_safe_tool_failing_with_a_programming_error_is_called_once(
    error: BaseException,
) -> None:
    tool = fake_tool("lookup", "ok", error=error, fail_times=1, hints=SAFE)
    result = await _run(tool)
    assert result.status is StepStatus.FAILED and result.error_kind is ErrorKind.TOOL_ERROR
    assert _calls(tool) == 1


@pytest.mark.parametrize("error", [ConnectionResetError("reset"), _status_error(503)])
async def test_a_safe_tool_failing_with_a_transient_error_is_retried(error: BaseException) -> None:
    tool = fake_tool("lookup", "ok", error=error, fail_times=1, hints=SAFE)
    result = await _run(tool)
    assert result.status is StepStatus.SUCCEEDED and result.output == "ok"
    assert _calls(tool) == 2


async def test_a_tools_retry_on_makes_its_own_error_retried() -> None:
    tool = fake_tool("lookup", "ok", error=KeyError("late"), fail_times=1, hints=SAFE,
                     retry_on=(KeyError,))
    result = await _run(tool)
    assert result.status is StepStatus.SUCCEEDED and _calls(tool) == 2


async def test_a_tool_refusing_its_arguments_is_args_invalid_and_called_once() -> None:
    tool = fake_tool("lookup", "ok", error=ToolArgumentsError("x must be prime"), hints=SAFE)
    result = await _run(tool)
    assert result.error_kind is ErrorKind.ARGS_INVALID
    assert "x must be prime" in (result.error or "")
    assert _calls(tool) == 1


# ------------------------------------------------------------------ through the whole agent
# The executor's judgement travels as `StepError.retryable`, and the agent's recovery reads
# it: a failure a retry cannot fix is not re-run by RETRY_STEP (nor re-resolved into the
# same call) after the executor declined to retry it. A plan falls back on `backup`.


def _agent_plan(tool: str, args: dict[str, Any]) -> str:
    return f"#Task1: go\n#Tool1: {tool}\n#Args1: {json.dumps(args)}\n#Dependency1: None\n"


async def _agent_run(lookup: Any, *, attempts: int = 3) -> tuple[Any, Any, Any]:
    from planexec import PlanExecuteAgent
    from planexec.config import AgentConfig
    from planexec.testing import ScriptedChatModel

    backup = fake_tool("backup", "found", hints=SAFE)
    model = ScriptedChatModel(
        replies=[_agent_plan("lookup", {"sku": "A-1"}), _agent_plan("backup", {}), "found"]
    )
    retry = RetrySettings(attempts=attempts, base_delay=0, max_delay=0, jitter=0)
    config = AgentConfig(executor=ExecutorSettings(tool_retry=retry))
    run = await PlanExecuteAgent(model, [lookup, backup], config=config).run("find A-1")
    return run, lookup, backup


@pytest.mark.parametrize(
    "error",
    [KeyError("sku"), ToolArgumentsError("sku must be upper case"), ValueError("bad sku")],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("attempts", [3, 1])
async def test_through_the_agent_a_failure_no_retry_can_fix_is_called_once(
    error: BaseException, attempts: int
) -> None:
    lookup = fake_tool("lookup", "ok", args={"sku": str}, error=error, hints=SAFE)
    run, lookup, backup = await _agent_run(lookup, attempts=attempts)
    assert _calls(lookup) == 1  # not by the executor, not by RETRY_STEP, not re-resolved
    assert _calls(backup) == 1 and run.answer == "found"
    [failed] = [r for r in run.attempts[0].results if r.tool == "lookup"]
    assert failed.failure is not None and failed.failure.retryable is False


@pytest.mark.parametrize(
    "error", [RetryableToolError("busy"), TimeoutError("slow")], ids=lambda e: type(e).__name__
)
async def test_through_the_agent_a_transient_failure_still_gets_its_retries(
    error: BaseException,
) -> None:
    lookup = fake_tool("lookup", "ok", args={"sku": str}, error=error, hints=SAFE)
    run, lookup, backup = await _agent_run(lookup)
    assert _calls(lookup) == 3  # the executor's attempts; then a re-plan (no retry on top)
    assert _calls(backup) == 1
    [failed] = [r for r in run.attempts[0].results if r.tool == "lookup"]
    assert failed.failure is not None and failed.failure.retryable is True
    # one attempt in the step: the agent's RETRY_STEP re-runs it once
    lookup = fake_tool("lookup", "ok", args={"sku": str}, error=error, hints=SAFE)
    run, lookup, backup = await _agent_run(lookup, attempts=1)
    assert _calls(lookup) == 2 and _calls(backup) == 1
