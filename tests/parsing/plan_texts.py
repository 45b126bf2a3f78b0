"""Plan texts the parsing tests share."""

from __future__ import annotations


def chain_text(n: int) -> str:
    """The benchmark's chain (``benchmarks/userpath.py``): plain hashstep blocks, one whole
    reference a step (what the hashstep parser's fast path reads)."""
    return "\n".join(
        f"#Step{i}: step {i}\n#Tool{i}: work\n#Args{i}: "
        + ("{}" if i == 1 else f'{{"v": "<step_{i - 1}>"}}')
        + f"\n#Dependency{i}: " + ("None" if i == 1 else f"#S{i - 1}") + "\n"
        for i in range(1, n + 1)
    )
