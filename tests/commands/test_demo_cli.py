import json

import pytest

from planexec.cli import main
from planexec.commands.demo import ALL_QUESTIONS


def test_the_demo_answers_every_question_with_recorded_replies_and_says_so(capsys, monkeypatch):
    monkeypatch.delenv("PLANEXEC_MODEL", raising=False)
    code = main(["demo", "--no-store", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "recorded replies" in out
    assert sum(line.startswith("answer:") for line in out.splitlines()) == len(ALL_QUESTIONS)
    assert "SUCCEEDED" in out


def test_the_demo_json_holds_one_succeeded_run_per_question(capsys, monkeypatch):
    monkeypatch.delenv("PLANEXEC_MODEL", raising=False)
    code = main(["demo", "--no-store", "--quiet", "--json"])
    captured = capsys.readouterr()
    runs = json.loads(captured.out)
    assert code == 0
    assert [r["question"] for r in runs] == [q["question"] for q in ALL_QUESTIONS]
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


def test_the_demo_answers_one_question_as_a_typed_model(capsys, monkeypatch):
    monkeypatch.delenv("PLANEXEC_MODEL", raising=False)
    typed = next(i for i, q in enumerate(ALL_QUESTIONS, 1) if "output_type" in q)
    assert main(["demo", "--question", str(typed), "--no-store", "--quiet", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["output"]["asset_id"] == "CWC04006"
    assert run["output"]["readings"] == 168
    assert run["answer"]
