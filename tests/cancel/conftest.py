"""Cancel test fixtures: this folder on ``sys.path`` (for the subprocesses too)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
