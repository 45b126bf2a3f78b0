"""A runnable demo domain: industrial assets, sensors, failure modes and work orders.

- `planexec.examples.tools`: the tools (`TOOLS`, `demo_tools()`, `tools_for_server()`).
- `planexec.examples.data`: the small deterministic dataset they read.
- ``planexec/examples/plans/*.txt``: demo plans; ``replies/*.json``: recorded model
  replies for them; `planexec.examples.questions`: demo questions for the agent loop.

Run a demo plan with::

    planexec run planexec/examples/plans/chiller_sensors.txt --tools planexec.examples.tools:TOOLS
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["example_path"]


def example_path(relative: str) -> Path:
    """Return the path of a file shipped with the demo, e.g. ``"plans/fanout_history.txt"``.

    Raises:
        FileNotFoundError: no such file in the package.
    """
    path = Path(str(resources.files("planexec.examples").joinpath(relative)))
    if not path.is_file():
        raise FileNotFoundError(f"no demo file {relative!r} in planexec.examples")
    return path
