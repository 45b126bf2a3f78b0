"""A failure at the head of a long chain: each blocked step names the root cause once.

Each blocked step's message used to quote the whole message of the step before it, so a
chain of n blocked steps wrote n² characters (and the store encoded them all).
"""

from __future__ import annotations

from planexec.errors import ErrorKind
from planexec.executor import Executor
from planexec.parsing import parse_plan
from planexec.resolver import ArgResolver
from planexec.results import StepStatus
from planexec.testing import fake_tool
from planexec.tools import ToolCatalog


def chain(n: int) -> str:
    blocks = ['#Step1: s\n#Tool1: broken\n#Args1: {}\n#Dependency1: None\n']
    for i in range(2, n + 1):
        blocks.append(
            f'#Step{i}: s\n#Tool{i}: echo\n#Args{i}: {{"v": "{{step_{i - 1}.v}}"}}\n'
            f"#Dependency{i}: #S{i - 1}\n"
        )
    return "\n".join(blocks)


async def test_a_blocked_chain_names_its_root_cause_in_bounded_text() -> None:
    tools = [
        fake_tool("broken", error=LookupError("the backend is down")),
        fake_tool("echo", {"v": 1}, args={"v": int}),
    ]
    n = 400
    results = await Executor(ToolCatalog(tools), ArgResolver(None)).run(parse_plan(chain(n)))
    by_id = {r.step_id: r for r in results}
    root = by_id[1]
    assert root.status is StepStatus.FAILED and root.error_kind is ErrorKind.TOOL_ERROR
    for sid in range(2, n + 1):
        r = by_id[sid]
        assert r.status is StepStatus.BLOCKED and r.failure is not None
        assert r.failure.kind is ErrorKind.UPSTREAM_FAILED
        assert r.failure.upstream == sid - 1  # the step it follows, not the root
        assert r.failure.cause == root.error  # the root's words, as data
        assert r.error is not None and len(r.error) < 3 * len(root.error or "") + 200
