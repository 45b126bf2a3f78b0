"""The console in a real browser: Debian's Chromium driven by Playwright (no browser download).

A person lists the runs, opens the failed one and reads its error, approves a payment
with an edit the schema first refuses, rejects a closing, and resumes both runs; the
decisions are the ones ``planexec runs show`` reads. Each page is kept as a screenshot in
``tests/artifacts/console/`` (and, with ``PLANEXEC_DOCS_SCREENSHOTS=1``, in
``docs/console/``, which ``docs/console.md`` shows).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(
        f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)", allow_module_level=True
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the test extra)")
pytest.importorskip("starlette", reason="the console needs planexec[mcp] (starlette)")

from console_fixtures import HERE, Recorded, cli  # noqa: E402

from planexec.store import SQLiteRunStore  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
DOCS = ROOT / "docs" / "console"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def console(recorded: Recorded, tmp_path: Path) -> Iterator[str]:
    """``planexec console`` on a free loopback port; its address.

    Its stderr goes to a file (read for the address), so nothing it writes later can
    fill a pipe and stall it.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    log = tmp_path / "console.log"
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from planexec.cli import main; sys.exit(main())",
                "console",
                "--store",
                str(recorded.store),
                "--port",
                "0",
            ],
            stderr=err,
            stdout=subprocess.DEVNULL,
            env=env,
            cwd=recorded.store.parent,
        )
    try:
        address = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not address:
            for line in log.read_text(encoding="utf-8").splitlines():
                if line.startswith("planexec console: "):
                    address = line.split(": ", 1)[1].strip()
            if not address and proc.poll() is not None:
                pytest.fail(f"planexec console exited with {proc.returncode}: {log.read_text()}")
            time.sleep(0.1)
        assert address, f"the console did not say where it listens within 90 s: {log.read_text()}"
        yield address.rstrip("/")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("PLANEXEC_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS / path.name)


def wait_for_status(page: Any, status: str) -> None:
    """The run page follows the store live: wait (bounded) for the run's status badge."""
    page.locator("h1 .status", has_text=status).wait_for(timeout=90_000)


def test_a_person_reads_a_failure_then_edits_rejects_and_resumes_in_the_browser(
    console: str, recorded: Recorded
) -> None:
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)

            page.goto(console + "/")
            rows = page.locator("#runs tr[data-run]")
            assert rows.count() == 3
            assert rows.nth(0).get_attribute("data-status") == "WAITING_APPROVAL"
            shot(page, "runs")

            page.click(f'a[href="/runs/{recorded.failed}"]')
            assert "[TOOL_ERROR]" in page.locator("h1").inner_text()
            assert "ledger of MAIN is offline" in page.locator(".step-error").inner_text()
            shot(page, "run-failed")

            page.goto(f"{console}/runs/{recorded.pay}")
            page.click(f'a.decide[href="/runs/{recorded.pay}/steps/2"]')
            shot(page, "approval")
            page.fill("#edit-args", '{"amount": 5000}')
            page.click("#edit")
            assert "amount" in page.locator("#problems").inner_text()
            shot(page, "edit-refused")
            page.fill("#edit-args", '{"amount": 250}')
            page.click("#edit")
            page.locator("#flash").wait_for()
            assert "edit by console" in page.locator("#decisions").inner_text()
            page.click("#resume")
            wait_for_status(page, "SUCCEEDED")
            shot(page, "resumed")

            page.goto(f"{console}/runs/{recorded.close}/steps/1")
            page.fill("#reason", "wrong account")
            page.click("#reject")
            page.locator("#flash").wait_for()
            page.click("#resume")
            wait_for_status(page, "FAILED")
            assert "REJECTED" in page.locator(".step-error").inner_text()
            shot(page, "rejected")
        finally:
            browser.close()

    store = SQLiteRunStore(recorded.store)
    try:
        events = store.events(recorded.pay)
        paid = [e for e in events if e["type"] == "ToolCallStarted" and e.get("step_id") == 2]
        assert [e["args"]["amount"] for e in paid] == [250]  # once, with the decided amount
    finally:
        store.close()
    shown = cli(
        "runs",
        "show",
        recorded.close,
        "--store",
        str(recorded.store),
        "--json",
        cwd=recorded.store.parent,
    )
    decisions = json.loads(shown.stdout)["approvals"]["decisions"]
    assert [(d["action"], d["by"], d["reason"]) for d in decisions] == [
        ("reject", "console", "wrong account")
    ]
