"""Fixtures of the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger


@pytest.fixture(autouse=True)
def _planexec_logs_on() -> Iterator[None]:
    """planexec's log records are on in tests, as a program turns them on (enable_logging).

    planexec is quiet as a library (its records are disabled at import); the tests that
    check a warning add a sink of their own and need the records. tests/test_logging.py
    checks the quiet default in a fresh process.
    """
    logger.enable("planexec")
    yield
