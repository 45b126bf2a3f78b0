"""The call gate: approval holds on every side path (issue 25, defects 1, 2, 5, 6, 7).

Each test reproduces one defect an adversarial probe found on main, where a destructive
tool ran without the decision that allows it. Oracles: the fake tools' own call logs
(what each tool really received, how often) and the store's records.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from planexec.agent import PlanExecuteAgent
from planexec.approval import ApprovalDecision, ApprovalRequest
from planexec.config import AgentConfig
from planexec.errors import ApprovalError
from planexec.events import Event, FallbackUsed
from planexec.results import RunStatus, StepStatus
from planexec.runs import decide_step, request_key, resume_run, waiting_steps
from planexec.store import MemoryRunStore
from planexec.testing import FunctionModel, ModelCall, StreamingModel, fake_tool
from planexec.tools import ToolCatalog

BOUND = 20.0  # seconds: a bound on waits, never asserted on
READ = {"read_only": True}
DESTRUCTIVE = {"destructive": True}


def calls(tool: BaseTool) -> list[dict[str, Any]]:
    return [dict(c) for c in tool.metadata["calls"].calls]  # type: ignore[index]


def on(server: str, tool: BaseTool, **hints: bool) -> BaseTool:
    tool.metadata = {**(tool.metadata or {}), "planexec": {**hints, "server": server}}
    return tool


# -- defect 1: a step that selects its tool ----------------------------------------------------


def bank() -> dict[str, BaseTool]:
    return {
        "pay": on("bank", fake_tool("pay", {"paid": True}, args={"amount": int, "to": str}),
                  destructive=True),
        "close_account": on("bank", fake_tool("close_account", {"closed": True},
                                              args={"to": str}), destructive=True),
    }


AGENT_ONLY = "#Task1: pay bob 5\n#Agent1: bank\n#Dependency1: None\n"


class Selector:
    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)

    def __call__(self, call: ModelCall, messages: list[BaseMessage]) -> str:
        if call.purpose == "answer":
            return "done"
        assert call.purpose == "select", call.purpose
        return json.dumps(self.replies.pop(0))


def selecting_agent(model: FunctionModel, tools: dict[str, BaseTool], store: Any) -> Any:
    cfg = AgentConfig.from_dict({"model": {"retry": {"attempts": 1}},
                                 "approval": {"enabled": True}})
    return PlanExecuteAgent(model, list(tools.values()), config=cfg, store=store)


def pay_then_close(tools: dict[str, BaseTool], store: Any) -> Any:
    """An agent whose selector picks ``pay`` first and ``close_account`` when asked again."""
    selector = Selector([
        {"tool": "pay", "args": {"amount": 5, "to": "bob"}},
        {"tool": "close_account", "args": {"to": "bob"}},
    ])
    return selecting_agent(FunctionModel(function=selector), tools, store)


async def test_an_approval_of_one_selected_tool_never_lets_another_run() -> None:
    """Defect 1: approve ``pay``; on resume the selector picks ``close_account``."""
    tools = bank()
    store = MemoryRunStore()
    agent = pay_then_close(tools, store)
    run = await asyncio.wait_for(agent.execute_plan(AGENT_ONLY, run_id="r1"), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    [request] = waiting_steps(store, "r1")
    assert (request.tool, request.args) == ("pay", {"amount": 5, "to": "bob"})
    await decide_step(store, "r1", 1, ApprovalDecision.approve(by="ann"))

    resumed = await asyncio.wait_for(resume_run(agent, store, "r1"), BOUND)
    assert calls(tools["close_account"]) == []  # never asked for: never called
    assert calls(tools["pay"]) == []
    assert resumed.status is RunStatus.WAITING_APPROVAL  # the step asks again
    [again] = waiting_steps(store, "r1")
    assert (again.tool, again.args) == ("close_account", {"to": "bob"})


# -- defect 2: a streamed draft's request --------------------------------------------------


def block(n: int, tool: str, args: str, dep: str = "None") -> str:
    return (f"#Task{n}: call {tool}\n#Tool{n}: {tool}\n#Args{n}: {args}\n"
            f"#Dependency{n}: {dep}\n#ExpectedOutput{n}: its output\n")


async def test_a_withdrawn_drafts_request_allows_nothing() -> None:
    """Defect 2: a request opened for a draft's step stays pending after the draft is gone."""
    asked = asyncio.Event()
    tools = {
        "sites": fake_tool("sites", ["MAIN"], hints=READ),
        "assets": fake_tool("assets", ["CH-6"], args={"site_name": str}, hints=READ),
        "delete_site": fake_tool("delete_site", "deleted", args={"site_name": str},
                                 hints=DESTRUCTIVE),
    }
    draft_1 = (block(1, "sites", "{}") + block(2, "assets", '{"site_name": "MAIN"}')
               + block(3, "sites", "{}"))
    draft_2 = ("\nRevised plan:\n" + block(1, "sites", "{}")
               + block(2, "delete_site", '{"site_name": "<step_3[0]>"}', "#S3")
               + block(3, "assets", '{"site_name": "WEST"}'))

    async def gate(index: int, sent: str) -> None:
        if "Revised plan:" in sent and not asked.is_set():
            await asyncio.wait_for(asked.wait(), BOUND)  # draft 1's step 2 asked first

    def answer(call: ModelCall, messages: list[Any]) -> str:
        return draft_1 + draft_2 if call.purpose == "plan" else "the answer"

    def seen(event: Event) -> None:
        if type(event).__name__ == "ApprovalRequested":
            asked.set()

    store = MemoryRunStore()
    cfg = AgentConfig.model_validate({"recovery": {"max_replans": 0},
                                      "approval": {"tools": ["assets"], "enabled": True}})
    agent = PlanExecuteAgent(StreamingModel(function=answer, chars_per_token=8, gate=gate),
                             list(tools.values()), config=cfg, store=store,
                             event_handlers=[seen])
    run = await asyncio.wait_for(agent.run("clean up MAIN", run_id="r2"), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    waiting = {r.step_id: r.tool for r in waiting_steps(store, "r2")}
    assert waiting == {3: "assets"}  # draft 1's request for step 2 was withdrawn
    with pytest.raises(ApprovalError):
        await decide_step(store, "r2", 2, ApprovalDecision.approve(by="mallory"))
    await decide_step(store, "r2", 3, ApprovalDecision.approve(by="ann"))
    resumed = await asyncio.wait_for(resume_run(agent, store, "r2"), BOUND)
    assert calls(tools["delete_site"]) == []  # never requested: never called
    assert resumed.status is RunStatus.WAITING_APPROVAL
    assert {r.step_id: r.tool for r in waiting_steps(store, "r2")} == {2: "delete_site"}


# -- defect 5: a callback whose answer is not a decision ---------------------------------------

PLAN = """#Task1: find the asset
#Tool1: assets
#Args1: {}
#Dependency1: None
#Task2: open a work order for it
#Tool2: open_order
#Args2: {"asset": "<step_1[0]>", "priority": "high"}
#Dependency2: #S1
"""


def order_tools() -> dict[str, BaseTool]:
    return {
        "assets": fake_tool("assets", ["CH-6"], hints=READ),
        "find_asset": fake_tool("find_asset", "CH-6", args={"site": str}, hints=READ),
        "retire": fake_tool("retire", "retired", args={"asset": str}, hints=DESTRUCTIVE),
        "open_order": fake_tool("open_order", function=lambda asset, priority: {"id": "WO-1"},
                                args={"asset": str, "priority": str}, hints=DESTRUCTIVE),
    }


@pytest.mark.parametrize("answer", [None, True, "approve", {"action": "approve"}, 1])
async def test_a_callback_answer_that_is_not_a_decision_makes_the_step_wait(answer: Any) -> None:
    """Defect 5: ``None``, ``True``, ``"approve"`` crashed the run with AttributeError."""
    tools = order_tools()
    events: list[Event] = []

    async def approver(request: ApprovalRequest) -> Any:
        return answer

    agent = PlanExecuteAgent(None, list(tools.values()), approver=approver,
                             event_handlers=[events.append])
    run = await asyncio.wait_for(agent.execute_plan(PLAN), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(tools["open_order"]) == []
    result = {r.step_id: r for r in run.results}[2]
    assert result.status is StepStatus.WAITING_APPROVAL
    warned = [e.code for e in events if isinstance(e, FallbackUsed)]
    assert "APPROVAL_CALLBACK_FAILED" in warned


async def test_a_raising_callback_never_lets_the_tool_run() -> None:
    tools = order_tools()

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        raise RuntimeError("the approval service is down")

    agent = PlanExecuteAgent(None, list(tools.values()), approver=approver)
    run = await asyncio.wait_for(agent.execute_plan(PLAN), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    assert calls(tools["open_order"]) == []


# -- defect 6: an open request is honoured whatever config resumes the run ----------------------


async def test_resume_without_an_approval_config_honours_the_open_request() -> None:
    """Defect 6: paused by an in-process callback, resumed by an agent with no gate."""
    tools = order_tools()
    store = MemoryRunStore()

    async def later(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.defer("ask the manager")

    first = PlanExecuteAgent(None, list(tools.values()), approver=later, store=store)
    run = await asyncio.wait_for(first.execute_plan(PLAN, run_id="r6"), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    # `planexec runs resume` builds an agent from the recorded config: no approval section
    second = PlanExecuteAgent(None, list(tools.values()), store=store)
    resumed = await asyncio.wait_for(resume_run(second, store, "r6"), BOUND)
    assert calls(tools["open_order"]) == []
    assert resumed.status is RunStatus.WAITING_APPROVAL
    await decide_step(store, "r6", 2, ApprovalDecision.approve(by="ann"))
    done = await asyncio.wait_for(resume_run(second, store, "r6"), BOUND)
    assert done.status is RunStatus.SUCCEEDED
    assert calls(tools["open_order"]) == [{"asset": "CH-6", "priority": "high"}]


# -- defect 7: an edit is checked in the plan's dialect, at the gate ---------------------------

REWOO = """Plan: find the asset.
#E1 = find_asset[MAIN]
Plan: retire it.
#E2 = retire[#E1]
"""


async def test_an_edit_holding_a_rewoo_reference_never_reaches_the_tool() -> None:
    """Defect 7: in a ReWOO plan an edit ``asset="#E1"`` was accepted; the tool got ``#E1``."""
    tools = order_tools()
    asked: list[ApprovalRequest] = []
    answers = [ApprovalDecision.edit({"asset": "#E1"}, by="ann"),
               ApprovalDecision.edit({"asset": "CH-7"}, by="ann")]

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return answers.pop(0)

    agent = PlanExecuteAgent(None, list(tools.values()), approver=approver)
    run = await asyncio.wait_for(agent.execute_plan(REWOO), BOUND)
    assert calls(tools["retire"]) == [{"asset": "CH-7"}]
    assert run.status is RunStatus.SUCCEEDED
    assert len(asked) == 2 and asked[1].problems  # refused, asked again with the problem
    assert any("asset" in p for p in asked[1].problems)


async def test_a_recorded_edit_holding_a_rewoo_reference_is_refused() -> None:
    tools = order_tools()
    store = MemoryRunStore()
    agent = PlanExecuteAgent(None, list(tools.values()), store=store,
                             config=AgentConfig.model_validate({"approval": {"enabled": True}}))
    run = await asyncio.wait_for(agent.execute_plan(REWOO, run_id="r7"), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    with pytest.raises(ApprovalError) as info:
        await decide_step(store, "r7", 2, ApprovalDecision.edit({"asset": "#E1"}),
                          catalog=ToolCatalog(list(tools.values())))
    assert info.value.problems
    assert calls(tools["retire"]) == []


# -- a decision names its tool's server too ----------------------------------------------------


async def test_an_approval_of_one_servers_tool_never_lets_the_same_name_on_another_run() -> None:
    """Approve ``bank_a.pay``; on resume the selector picks ``bank_b.pay``, same arguments.

    Two servers may offer a tool of one name; the decision was made for one of them.
    """
    pay_a = on("bank_a", fake_tool("pay", {"paid": "a"}, args={"amount": int, "to": str}),
               destructive=True)
    pay_b = on("bank_b", fake_tool("pay", {"paid": "b"}, args={"amount": int, "to": str}),
               destructive=True)
    store = MemoryRunStore()
    selector = Selector([
        {"tool": "bank_a.pay", "args": {"amount": 5, "to": "bob"}},
        {"tool": "bank_b.pay", "args": {"amount": 5, "to": "bob"}},
    ])
    agent = selecting_agent(FunctionModel(function=selector), {"a": pay_a, "b": pay_b}, store)
    plan = "#Task1: pay bob 5\n#Agent1: payments\n#Dependency1: None\n"
    run = await asyncio.wait_for(agent.execute_plan(plan, run_id="r8"), BOUND)
    assert run.status is RunStatus.WAITING_APPROVAL
    [request] = waiting_steps(store, "r8")
    assert (request.server, request.tool) == ("bank_a", "pay")
    await decide_step(store, "r8", 1, ApprovalDecision.approve(by="ann"))

    resumed = await asyncio.wait_for(resume_run(agent, store, "r8"), BOUND)
    assert calls(pay_b) == []  # approved on bank_a: never on bank_b
    assert calls(pay_a) == []
    assert resumed.status is RunStatus.WAITING_APPROVAL  # the step asks again
    [again] = waiting_steps(store, "r8")
    assert (again.server, again.tool) == ("bank_b", "pay")


# -- a decision allows one call: no retry of a tool that is not safe ---------------------------


async def test_an_approved_call_of_a_tool_that_is_not_safe_is_made_once_even_with_retry_unsafe(
) -> None:
    """``executor.retry_unsafe`` retried an approved call of a tool of unknown safety.

    One decision, two calls: the first failed (transiently), the retry ran on the same
    claim. The retry of a call that is not safe to repeat needs its own decision.
    """
    transfer = fake_tool("transfer", {"ok": True}, args={"amount": int},
                         error="503 try again", fail_times=1)
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision.approve(by="ann")

    cfg = AgentConfig.model_validate({
        "approval": {"enabled": True, "require": ["unknown"]},
        "recovery": {"max_replans": 0},
        "executor": {"retry_unsafe": True,
                     "tool_retry": {"base_delay": 0, "max_delay": 0, "jitter": 0}},
    })
    agent = PlanExecuteAgent(None, [transfer], approver=approver, config=cfg)
    plan = ("#Task1: transfer 5\n#Tool1: transfer\n#Args1: {\"amount\": 5}\n"
            "#Dependency1: None\n")
    run = await asyncio.wait_for(agent.execute_plan(plan), BOUND)
    assert len(calls(transfer)) == len(asked) == 1  # one decision, one call
    [result] = run.results
    assert result.status is StepStatus.FAILED


# -- a callback's approval is recorded with the run ------------------------------------------


class Killed(BaseException):
    """The process dies (nothing of ours catches it)."""


async def test_a_run_killed_before_asking_resumes_from_its_record_still_needing_a_decision(
    tmp_path: Any,
) -> None:
    """An approver callback turns approval on; the recorded config said it was off.

    Killed before its destructive step asked, the run was resumed (as ``planexec runs
    resume`` does: an agent built from the recorded config, no callback) and the
    destructive tool ran without any decision.
    """
    from planexec.store import SQLiteRunStore

    alive = [False]

    def read() -> list[str]:
        if not alive[0]:
            raise Killed
        return ["MAIN"]

    tools = {"read": fake_tool("read", function=read, hints=READ),
             "wipe": fake_tool("wipe", "wiped", args={"site": str}, hints=DESTRUCTIVE)}
    plan = block(1, "read", "{}") + block(2, "wipe", '{"site": "MAIN"}', "#S1")

    async def later(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision.defer("ask ops")

    store = SQLiteRunStore(tmp_path / "runs.db")
    first = PlanExecuteAgent(None, list(tools.values()), approver=later, store=store)
    with pytest.raises(Killed):
        await asyncio.wait_for(first.execute_plan(plan, run_id="r9"), BOUND)
    alive[0] = True
    recorded = AgentConfig.model_validate(store.get_run("r9").config)
    second = PlanExecuteAgent(None, list(tools.values()), config=recorded, store=store)
    resumed = await asyncio.wait_for(resume_run(second, store, "r9", allow_running=True), BOUND)
    assert calls(tools["wipe"]) == []
    assert resumed.status is RunStatus.WAITING_APPROVAL
    assert [r.tool for r in waiting_steps(store, "r9")] == ["wipe"]
    store.close()


# -- a decision lands only on the request the person saw ---------------------------------------


async def test_a_decision_about_a_request_the_step_replaced_is_not_recorded() -> None:
    """Ann saw step 1 ask to ``pay``; before she answered, a resume re-asked it as
    ``close_account``. Her approval (of what she saw) must not approve the new call."""
    tools = bank()
    store = MemoryRunStore()
    agent = pay_then_close(tools, store)
    await asyncio.wait_for(agent.execute_plan(AGENT_ONLY, run_id="r10"), BOUND)
    [shown] = waiting_steps(store, "r10")  # what ann looks at: pay 5 to bob
    await asyncio.wait_for(resume_run(agent, store, "r10"), BOUND)  # re-asked meanwhile
    with pytest.raises(ApprovalError):
        await decide_step(store, "r10", 1, ApprovalDecision.approve(by="ann"), seen=shown)
    [now] = waiting_steps(store, "r10")  # nothing recorded: still waiting
    assert now.tool == "close_account"
    assert await decide_step(store, "r10", 1, ApprovalDecision.reject("no", by="ann"),
                             seen=now) is not None  # what she saw now: recorded
    assert waiting_steps(store, "r10") == []
    assert calls(tools["close_account"]) == [] and calls(tools["pay"]) == []


async def test_a_decision_by_the_key_of_a_request_the_step_replaced_is_not_recorded() -> None:
    """Ann read the key of step 1's request to pay bob 5 (``runs show``, a page, an MCP
    client); a resume re-asked it to pay bob 500. Her approval, sent with the key she
    read, must not approve the 500: nothing is recorded; with the new key it is."""
    tools = bank()
    store = MemoryRunStore()
    agent = selecting_agent(FunctionModel(function=Selector([
        {"tool": "pay", "args": {"amount": 5, "to": "bob"}},
        {"tool": "pay", "args": {"amount": 500, "to": "bob"}},
    ])), tools, store)
    await asyncio.wait_for(agent.execute_plan(AGENT_ONLY, run_id="r11"), BOUND)
    [shown] = waiting_steps(store, "r11")
    seen = request_key(shown)
    assert seen == request_key(shown) and isinstance(seen, str)  # stable, opaque text
    await asyncio.wait_for(resume_run(agent, store, "r11"), BOUND)  # re-asked meanwhile
    with pytest.raises(ApprovalError):
        await decide_step(store, "r11", 1, ApprovalDecision.approve(by="ann"), seen=seen)
    [now] = waiting_steps(store, "r11")  # nothing recorded: the new request still open
    assert (now.tool, now.args["amount"]) == ("pay", 500) and request_key(now) != seen
    assert not [e for e in store.events("r11") if e["type"] == "ApprovalDecided"]
    decided = await decide_step(store, "r11", 1, ApprovalDecision.reject("too much", by="ann"),
                                seen=request_key(now))
    assert decided.reason == "too much" and waiting_steps(store, "r11") == []
    assert calls(tools["pay"]) == []


def test_a_request_key_changes_with_what_a_decision_must_match_and_only_with_that() -> None:
    import dataclasses

    base = ApprovalRequest(run_id="r", plan_version=1, step_id=1, tool="pay",
                           args={"amount": 5, "to": "bob"}, server="bank", reason="destructive")
    same = [
        dataclasses.replace(base, args={"to": "bob", "amount": 5}),  # key order: same call
        dataclasses.replace(base, reason="another rule", requested_at=0.0),
    ]
    other = [
        dataclasses.replace(base, plan_version=2),
        dataclasses.replace(base, tool="close_account"),
        dataclasses.replace(base, server="other-bank"),
        dataclasses.replace(base, server=None),
        dataclasses.replace(base, args={"amount": 500, "to": "bob"}),
        dataclasses.replace(base, args={"amount": "5", "to": "bob"}),
    ]
    assert {request_key(r) for r in same} == {request_key(base)}
    assert len({request_key(r) for r in [base, *other]}) == 1 + len(other)
