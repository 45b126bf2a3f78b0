"""pytest plugin: collects ``*.scenario.yaml`` files as test items."""

from __future__ import annotations
