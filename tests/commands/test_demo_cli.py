import json

import pytest

from planexec.cli import main
from planexec.examples.questions import DEMO_QUESTIONS


def test_the_demo_answers_every_question_with_recorded_replies_and_says_so(capsys, monkeypatch):
    monkeypatch.delenv("PLANEXEC_MODEL", raising=False)
    code = main(["demo", "--no-store", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "recorded replies" in out
    assert out.count("answer:") == len(DEMO_QUESTIONS)
    assert "SUCCEEDED" in out


def test_the_demo_json_holds_one_succeeded_run_per_question(capsys, monkeypatch):
    monkeypatch.delenv("PLANEXEC_MODEL", raising=False)
    code = main(["demo", "--no-store", "--quiet", "--json"])
    captured = capsys.readouterr()
    runs = json.loads(captured.out)
    assert code == 0
    assert [r["question"] for r in runs] == [q["question"] for q in DEMO_QUESTIONS]
    assert all(r["status"] == "SUCCEEDED" and r["answer"] for r in runs)
    assert all(r["usage"]["llm_calls"]["plan"] == 1 for r in runs)
    assert "recorded replies" in captured.err


def test_the_demo_records_its_runs_in_the_store(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("PLANEXEC_MODEL", raising=False)
    store = tmp_path / "runs.sqlite3"
    assert main(["demo", "--question", "1", "--quiet", "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["runs", "list", "--store", str(store)]) == 0
    assert "SUCCEEDED" in capsys.readouterr().out


@pytest.mark.parametrize("n", ["0", "99"])
def test_the_demo_refuses_a_question_number_out_of_range(capsys, n):
    assert main(["demo", "--question", n, "--no-store"]) == 2
