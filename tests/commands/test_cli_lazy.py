"""The CLI imports only the module of the command it runs.

``planexec --help`` lists every command from `planexec.cli.COMMANDS` without importing
the command modules, and ``planexec parse`` needs neither langchain nor langsmith. The
load-proof is ``sys.modules`` after the command ran, in a fresh interpreter (no timing
here: the wall times are in ``benchmarks/cli.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from planexec.cli import COMMANDS, build_parser, command_word, main

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("langchain_core", "langsmith", "langgraph", "mcp", "ray")

PLAN = """\
#Task1: List the sites.
#Tool1: sites
#Args1: {}
#Dependency1: None
#Task2: List the assets of the first site.
#Tool2: assets
#Args2: {"site_name": "{step_1[0]}"}
#Dependency2: #S1
"""


def loaded_after_cli(argv: list[str]) -> tuple[int, list[str]]:
    """Run ``planexec ARGV`` in a fresh interpreter; its exit code and the heavy modules loaded."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from planexec.cli import main
        try:
            code = main({argv!r})
        except SystemExit as exc:
            code = exc.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        sys.__stdout__.write("\\n" + json.dumps({{"code": code, "heavy": heavy}}) + "\\n")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return int(found["code"] or 0), found["heavy"]


def test_help_loads_no_command_module_library() -> None:
    code, heavy = loaded_after_cli(["--help"])
    assert (code, heavy) == (0, [])


def test_parsing_a_plan_loads_neither_langchain_nor_langsmith(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(PLAN, encoding="utf-8")
    code, heavy = loaded_after_cli(["parse", str(plan)])
    assert (code, heavy) == (0, [])
    code, heavy = loaded_after_cli(["parse", str(plan), "--json"])
    assert (code, heavy) == (0, [])


def test_a_command_that_needs_langchain_still_gets_it() -> None:
    """The probe can fail: ``run --help`` imports the run command, which loads langchain."""
    code, heavy = loaded_after_cli(["run", "--help"])
    assert code == 0 and "langchain_core" in heavy


def subcommand_help(parser: object) -> dict[str, str | None]:
    """The subcommands a parser lists, with their one-line help, in listed order."""
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {a.dest: a.help for a in sub._choices_actions}


def test_the_command_table_matches_what_the_modules_register() -> None:
    full = subcommand_help(build_parser())
    assert full == {name: help_text for name, (_, help_text) in COMMANDS.items()}


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_the_lazy_parser_lists_every_command_in_order(command: str | None) -> None:
    assert list(subcommand_help(build_parser(command, lazy=True)).items()) == list(
        subcommand_help(build_parser()).items()
    )


def test_the_lazy_parser_parses_the_command_it_was_built_for(tmp_path: Path) -> None:
    args = build_parser("parse", lazy=True).parse_args(["-v", "parse", "x.txt", "--json"])
    assert (args.command, args.file, args.json, args.verbose) == ("parse", "x.txt", True, 1)


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["parse", "f"], "parse"),
        (["-v", "-v", "runs", "list"], "runs"),
        (["--verbose", "run", "p.txt"], "run"),
        (["--version"], None),
        ([], None),
        (["--", "parse"], None),
    ],
)
def test_command_word(argv: list[str], word: str | None) -> None:
    assert command_word(argv) == word


def test_an_unknown_command_is_an_error_that_lists_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nonsense"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonsense'" in err and "'parse'" in err and "'runs'" in err


def test_version_goes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    out = capsys.readouterr()
    assert exc.value.code == 0 and out.out.startswith("planexec ") and out.err == ""
