"""The fast paths' switch (private): on, unless ``PLANEXEC_FAST_PATHS=0`` at import.

Every fast path of the hot path lives inside the one method it speeds up and gives what
its general path gives; `tests/test_fast_paths.py` runs random plans both ways and
compares results, events and stored records. ``ON`` is read by each fast path when it
decides (the executor once per run): a test flips it to force the general paths. The
table of fast paths is in ``docs/performance.md``.
"""

from __future__ import annotations

import os

__all__ = ["ON"]

ON: bool = os.environ.get("PLANEXEC_FAST_PATHS", "1").strip() != "0"
"""Whether the fast paths are taken (False: every one takes its general path)."""
