"""The streaming parser does work linear in the reply's length (issue 25, defect 13).

It used to parse the whole completed prefix again at every new block: 4x the text cost
12-20x the work. Here the *work* (Python line and call events, ``sys.settrace``) of
streaming a plan of n steps and of 2n steps is compared, for several chunkings: doubling
the reply must at most about double it. No timing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from planexec.parsing import parse_plan
from planexec.parsing.streaming import StreamingPlanParser


def work(fn: Callable[[], object]) -> int:
    """Python line and call events while ``fn`` runs."""
    events = [0]

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        events[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return events[0]


def hashstep(n: int) -> str:
    return "".join(
        f"#Task{i}: call sites\n#Tool{i}: sites\n#Args{i}: {{\"site\": \"S{i}\"}}\n"
        f"#Dependency{i}: " + (f"#S{i - 1}" if i > 1 else "None") + "\n\n"
        for i in range(1, n + 1)
    )


def rewoo(n: int) -> str:
    return "".join(f"Plan: call sites.\n#E{i} = sites[S{i}]\n" for i in range(1, n + 1))


def llmcompiler(n: int) -> str:
    return "".join(f'{i}. sites(site="S{i}")\n' for i in range(1, n + 1)) + f"{n + 1}. join()\n"


def json_plan(n: int) -> str:
    items = ",\n".join(f'{{"id": {i}, "tool": "sites", "args": {{}}}}' for i in range(1, n + 1))
    return '{"steps": [\n' + items + "\n]}\n"


PLANS: dict[str, Callable[[int], str]] = {
    "hashstep": hashstep, "rewoo": rewoo, "llmcompiler": llmcompiler, "json": json_plan,
}
CHUNKINGS: dict[str, Callable[[str], list[str]]] = {
    "lines": lambda t: t.splitlines(keepends=True),
    "40 chars": lambda t: [t[i : i + 40] for i in range(0, len(t), 40)],
    "chars": list,
}


def stream(chunks: list[str]) -> None:
    parser = StreamingPlanParser()
    for c in chunks:
        parser.feed(c)
    parser.finish()


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("dialect", list(PLANS))
def test_doubling_a_streamed_reply_at_most_doubles_the_work(dialect: str, chunking: str) -> None:
    n = 60 if chunking == "chars" else 120
    make, cut = PLANS[dialect], CHUNKINGS[chunking]
    small, large = make(n), make(2 * n)
    assert len(parse_plan(large).steps) == 2 * n
    w1 = work(lambda: stream(cut(small)))
    w2 = work(lambda: stream(cut(large)))
    assert w2 / w1 <= 2.6, (dialect, chunking, w1, w2)
