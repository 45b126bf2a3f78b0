"""Timelines keep a run's history: every attempt and pause, errors on failed bars, SVG."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from planexec.cli import main
from planexec.commands.runs import timeline_bars
from planexec.examples import example_path
from planexec.store import open_store

pytestmark = pytest.mark.timeout(120)

DEMO_TOOLS = "planexec.examples.tools:TOOLS"


def test_a_paused_then_resumed_step_draws_the_pause_and_the_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.sqlite3")
    (tmp_path / "agent.toml").write_text("[approval]\nenabled = true\n", encoding="utf-8")
    plan = str(example_path("plans/work_order.txt"))
    assert main(["run", plan, "--tools", DEMO_TOOLS, "--config", str(tmp_path / "agent.toml"),
                 "--store", store, "--json"]) == 3
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["runs", "approve", run_id, "3", "--store", store]) == 0
    assert main(["runs", "resume", run_id, "--store", store]) == 0
    opened = open_store(store)
    try:
        _, bars = timeline_bars(opened, run_id)
    finally:
        opened.close()
    step3 = [b for b in bars if "#3 create_work_order" in b.label]
    assert [b.status for b in step3] == ["WAITING_APPROVAL", "SUCCEEDED"]
    pause, call = step3
    assert pause.start + pause.duration <= call.start + 1e-6  # the pause ends by the call
    approved = next(b for b in bars if b.status == "APPROVED")
    assert abs(pause.start + pause.duration - approved.start) < 0.01  # ... at the decision
    assert sum(b.status == "REUSED" for b in bars) == 2  # steps 1 and 2, not run again
    svg = tmp_path / "t.svg"
    assert main(["runs", "timeline", run_id, "--out", str(svg), "--store", store]) == 0
    root = ET.fromstring(svg.read_text(encoding="utf-8"))  # a standalone SVG document
    assert root.tag.endswith("svg")
    assert len([e for e in root.iter() if e.get("class", "").startswith("bar ")]) == len(bars)


def test_a_failed_bar_carries_its_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "runs.sqlite3")
    plan = tmp_path / "plan.txt"
    plan.write_text('#Task1: assets\n#Tool1: assets\n#Args1: {"site_name": "NOWHERE"}\n',
                    encoding="utf-8")
    main(["run", str(plan), "--tools", DEMO_TOOLS, "--store", store, "--json"])
    data = json.loads(capsys.readouterr().out)
    [step] = data["steps"]
    assert step["status"] == "FAILED" and step["error"]
    out = tmp_path / "t.svg"
    assert main(["runs", "timeline", data["run_id"], "--out", str(out), "--store", store]) == 0
    notes = [e.text or "" for e in ET.fromstring(out.read_text("utf-8")).iter()
             if e.get("class") == "note"]
    assert any(step["error"][:40] in n for n in notes), notes
    pytest.importorskip("matplotlib")
    png = tmp_path / "t.png"
    assert main(["runs", "timeline", data["run_id"], "--out", str(png), "--store", store]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
