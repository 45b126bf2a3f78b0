"""Mutation testing of the modules that keep planexec's promise (docs/mutation.md).

Each mutant in ``mutation/mutants.toml`` is a small text change to one module (a
comparison flipped, a branch removed, a constant moved): the runner applies it to a
copy of the project, runs the module's narrow test set against it (``-x``, a time budget
per mutant; the set's first file alone first) and records whether a test failed
(*killed*) or everything stayed green (*survived*). A survivor is a bug the tests
would let through, unless it is listed in ``mutation/equivalents.toml`` with a
one-line reason why it changes no behaviour.

A mutant is found by its text, not by a line number, so it survives edits around it:
``find`` must occur exactly once in the module's files (within ``function`` when given,
a function or ``Class.method`` name). When the code moved or changed and the text is no
longer there (or is there twice) the mutant is reported *stale*: the list needs an
update, and the run fails (exit status 1), as it does for a mutant that does not compile
or collects no test (*invalid*): a list that no longer applies must not pass unnoticed.
A survivor that is not on the equivalents list fails the run too.
``--check`` only checks that every mutant's text is found (no test runs: seconds).

Usage (from the project root)::

    python mutation/run.py                      # every mutant of every module
    python mutation/run.py --ci                 # the bounded sample .ci/run runs
    python mutation/run.py --module resolver    # one module
    python mutation/run.py --id approval-raise-runs --keep-going
    python mutation/run.py --list               # the mutants and where they apply
    python mutation/run.py --check              # fails when a mutant's text is not found

The report is written to ``mutation/report.json`` and ``mutation/report.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
COPIED = ("planexec", "tests", "examples", "pyproject.toml", "README.md", "docs")
FAILING = frozenset({"survived", "stale", "invalid"})
"""The outcomes that fail a run: a bug let through, or a mutant list that no longer applies."""


@dataclass
class Module:
    """A module under mutation: where its code is and which tests guard it."""

    name: str
    files: list[str]
    tests: list[str]
    ci: bool = False
    ci_sample: int | None = None
    """How many of its mutants (the first ones listed) the CI sample runs; None: all."""


@dataclass
class Mutant:
    """One text change: ``find`` (within ``function``, if given) becomes ``replace``."""

    id: str
    module: str
    find: str
    replace: str
    why: str
    function: str | None = None
    tests: list[str] | None = None


@dataclass
class Outcome:
    """What happened to one mutant."""

    id: str
    module: str
    status: str  # killed | survived | equivalent | stale | invalid | not-run
    why: str
    file: str | None = None
    line: int | None = None
    seconds: float = 0.0
    detail: str = ""
    failed_test: str | None = None


@dataclass
class Config:
    """The mutant list and the equivalents."""

    modules: dict[str, Module]
    mutants: list[Mutant]
    equivalents: dict[str, str] = field(default_factory=dict)


def load(mutants_path: Path, equivalents_path: Path) -> Config:
    """Read the mutant list and the equivalents file."""
    data = tomllib.loads(mutants_path.read_text())
    modules = {
        name: Module(name, list(m["files"]), list(m["tests"]), bool(m.get("ci", False)),
                     m.get("ci_sample"))
        for name, m in data["modules"].items()
    }
    mutants = []
    seen: set[str] = set()
    for m in data.get("mutant", []):
        if m["id"] in seen:
            raise SystemExit(f"mutant id {m['id']!r} is listed twice")
        if m["module"] not in modules:
            raise SystemExit(f"mutant {m['id']!r}: unknown module {m['module']!r}")
        seen.add(m["id"])
        mutants.append(
            Mutant(
                id=m["id"], module=m["module"], find=m["find"], replace=m["replace"],
                why=m["why"], function=m.get("function"), tests=m.get("tests"),
            )
        )
    equivalents: dict[str, str] = {}
    if equivalents_path.exists():
        for e in tomllib.loads(equivalents_path.read_text()).get("equivalent", []):
            if not str(e.get("why", "")).strip():
                raise SystemExit(f"equivalent {e['id']!r} has no reason")
            equivalents[e["id"]] = e["why"]
    return Config(modules, mutants, equivalents)


def _module_files(root: Path, module: Module) -> list[Path]:
    out: list[Path] = []
    for pattern in module.files:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and path not in out and "__pycache__" not in path.parts:
                out.append(path)
    return out


def _function_span(source: str, name: str) -> tuple[int, int] | None:
    """The character span of function ``name`` (``f`` or ``Class.f``) in ``source``."""
    tree = ast.parse(source)
    parts = name.split(".")
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef

    def search(body: list[ast.stmt], rest: list[str]) -> Def | None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name == rest[0]:
                    if len(rest) == 1:
                        return node
                    found = search(node.body, rest[1:])
                    if found is not None:
                        return found
        return None

    node = search(tree.body, parts)
    if node is None:
        return None
    start_line = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return offsets[start_line - 1], offsets[node.end_lineno or start_line]


def locate(root: Path, module: Module, mutant: Mutant) -> tuple[Path, int] | str:
    """Where ``mutant.find`` is (file, character offset), or why it cannot be applied."""
    hits: list[tuple[Path, int]] = []
    function_seen = mutant.function is None
    for path in _module_files(root, module):
        source = path.read_text()
        lo, hi = 0, len(source)
        if mutant.function is not None:
            try:
                span = _function_span(source, mutant.function)
            except SyntaxError:
                span = None
            if span is None:
                continue
            function_seen = True
            lo, hi = span
        start = lo
        while True:
            at = source.find(mutant.find, start, hi)
            if at < 0:
                break
            hits.append((path, at))
            start = at + 1
    if not _module_files(root, module):
        return f"no file matches {module.files}"
    if not function_seen:
        return f"function {mutant.function!r} not found in {module.files}"
    if not hits:
        where = f" in {mutant.function}" if mutant.function else ""
        return f"text not found{where}: {mutant.find!r}"
    if len(hits) > 1:
        places = ", ".join(f"{p.relative_to(root)}@{a}" for p, a in hits)
        return f"text found {len(hits)} times ({places}); give a longer find or a function"
    return hits[0]


def _drop_bytecode(path: Path) -> None:
    cached = Path(importlib.util.cache_from_source(str(path)))
    cached.unlink(missing_ok=True)


def _first_failure(output: str) -> str | None:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0].split(" ", 1)[1]
    return None


def run_tests(
    root: Path, tests: list[str], timeout: float, python: str
) -> tuple[int | None, str, float]:
    """Run ``tests`` in ``root``; (return code or None on timeout, output, seconds)."""
    env = dict(os.environ)
    env.update(RAY_AUTH_MODE="disabled", PYTHONPATH=str(root), PYTHONHASHSEED="0")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [
        python, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider",
        "--no-header", "-rfE", "--timeout", str(int(timeout)),
    ]
    began = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout + 30,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return None, out, time.monotonic() - began
    return done.returncode, done.stdout + done.stderr, time.monotonic() - began


def copy_project(dest: Path) -> None:
    """Copy what the tests need into ``dest`` (no bytecode, no caches)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)


def mutate_one(
    work: Path, config: Config, mutant: Mutant, timeout: float, python: str
) -> Outcome:
    """Apply ``mutant`` in ``work``, run its tests, restore the file."""
    module = config.modules[mutant.module]
    where = locate(work, module, mutant)
    if isinstance(where, str):
        return Outcome(mutant.id, mutant.module, "stale", mutant.why, detail=where)
    path, at = where
    original = path.read_text()
    mutated = original[:at] + mutant.replace + original[at + len(mutant.find):]
    rel = str(path.relative_to(work))
    line = original.count("\n", 0, at) + 1
    try:
        compile(mutated, rel, "exec")
    except SyntaxError as exc:
        return Outcome(mutant.id, mutant.module, "invalid", mutant.why, rel, line,
                       detail=f"the mutated module does not compile: {exc}")
    tests = mutant.tests or module.tests
    try:
        path.write_text(mutated)
        _drop_bytecode(path)
        # the first test file alone first (the module's kill tests: most mutants die
        # there, without collecting the rest), then the whole set if it survived that
        code, output, seconds = run_tests(work, tests[:1], timeout, python)
        if code == 0 and len(tests) > 1:
            code, output, more = run_tests(work, tests, timeout, python)
            seconds += more
    finally:
        path.write_text(original)
        _drop_bytecode(path)
    if code is None:
        status, detail = "killed", f"the tests ran over {timeout:.0f} s (timeout)"
    elif code == 0:
        status, detail = "survived", "every test passed"
    elif code == 5:
        status, detail = "invalid", "no test was collected"
    else:
        status, detail = "killed", f"pytest exit status {code}"
    failed = _first_failure(output) if status == "killed" else None
    if code is None:  # check such a kill: a loaded machine times out too
        failed = "(timeout)"
    if status == "survived" and mutant.id in config.equivalents:
        status, detail = "equivalent", config.equivalents[mutant.id]
    return Outcome(mutant.id, mutant.module, status, mutant.why, rel, line,
                   round(seconds, 1), detail, failed)


def summarize(outcomes: list[Outcome], config: Config) -> dict[str, Any]:
    """Scores per module: killed / (killed + survived); equivalents and stale apart."""
    per: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        row = per.setdefault(o.module, {"killed": 0, "survived": 0, "equivalent": 0,
                                        "stale": 0, "invalid": 0, "not-run": 0})
        row[o.status] += 1
    for row in per.values():
        scored = row["killed"] + row["survived"]
        row["score"] = round(row["killed"] / scored, 4) if scored else None
    killed_equivalents = [
        o.id for o in outcomes if o.status == "killed" and o.id in config.equivalents
    ]
    return {"modules": per, "killed_but_listed_equivalent": killed_equivalents}


def write_report(out: Path, outcomes: list[Outcome], config: Config, meta: dict[str, Any]) -> None:
    """Write ``report.json`` and ``report.md`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(outcomes, config)
    data = {"meta": meta, "summary": summary, "mutants": [asdict(o) for o in outcomes]}
    (out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    md = ["# Mutation report", "", f"Command: `{meta['command']}`  ",
          f"Commit: `{meta['commit']}`  ", f"Date: {meta.get('date', '?')}  ",
          f"Wall time: {meta['seconds']:.0f} s", "",
          "| module | killed | survived | equivalent | stale | invalid | not run | score |",
          "|---|---|---|---|---|---|---|---|"]
    for name, row in sorted(summary["modules"].items()):
        score = "n/a" if row["score"] is None else f"{100 * row['score']:.1f}%"
        md.append(f"| {name} | {row['killed']} | {row['survived']} | {row['equivalent']} | "
                  f"{row['stale']} | {row['invalid']} | {row['not-run']} | {score} |")
    md.append("")
    md.append("Score: killed / (killed + survived); equivalents (listed in "
              "`mutation/equivalents.toml` with a reason) and stale mutants are not scored.")
    for title, status in (("Survivors (bugs the tests let through)", "survived"),
                          ("Stale mutants (the list needs an update)", "stale"),
                          ("Invalid mutants", "invalid"),
                          ("Not run (over the time budget)", "not-run"),
                          ("Equivalent", "equivalent")):
        rows = [o for o in outcomes if o.status == status]
        if rows:
            md += ["", f"## {title}", ""]
            md += [f"- `{o.id}` ({o.file or o.module}:{o.line or '?'}): {o.why} — {o.detail}"
                   for o in rows]
    md += ["", "## Killed", ""]
    md += [f"- `{o.id}` ({o.file}:{o.line}, {o.seconds} s): {o.why} — by `{o.failed_test}`"
           for o in outcomes if o.status == "killed"]
    (out / "report.md").write_text("\n".join(md) + "\n")


def _commit() -> str:
    """HEAD, with ``+changes`` when the tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *COPIED], cwd=ROOT,
                               capture_output=True).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def merge(reports: list[Path], out: Path, config: Config) -> int:
    """Write one report from several runs' ``report.json``.

    Returns 1 if a survivor (or a stale or invalid mutant) is in it.
    """
    by_id: dict[str, Outcome] = {}
    commands, commits, dates, seconds = [], [], [], 0.0
    for path in reports:
        data = json.loads(path.read_text())
        commands.append(data["meta"]["command"])
        commits.append(data["meta"]["commit"])
        dates.append(data["meta"].get("date", "?"))
        seconds += data["meta"]["seconds"]
        for m in data["mutants"]:
            o = Outcome(**m)
            if o.status == "survived" and o.id in config.equivalents:  # listed since
                o.status, o.detail = "equivalent", config.equivalents[o.id]
            by_id[o.id] = o
    order = {m.id: i for i, m in enumerate(config.mutants)}
    outcomes = sorted(by_id.values(), key=lambda o: order.get(o.id, len(order)))
    meta = {"command": " && ".join(commands), "commit": ", ".join(dict.fromkeys(commits)),
            "date": ", ".join(dict.fromkeys(dates)), "seconds": seconds,
            "unknown_equivalents": []}
    write_report(out, outcomes, config, meta)
    print(f"report: {out / 'report.md'}")
    return 1 if any(o.status in FAILING for o in outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    """Run the selected mutants; 1 when one survives unlisted or is stale or invalid.

    2 when the unmutated tests fail (the baseline).
    """
    # a terminated run still restores the module and removes its copy (finally blocks)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mutants", type=Path, default=HERE / "mutants.toml")
    p.add_argument("--equivalents", type=Path, default=HERE / "equivalents.toml")
    p.add_argument("--module", action="append", help="only these modules (repeatable)")
    p.add_argument("--id", action="append", help="only these mutants (glob, repeatable)")
    p.add_argument("--ci", action="store_true", help="only the modules marked ci = true")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per mutant")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run: no mutant starts after it (not-run)")
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--list", action="store_true", help="list the mutants and where they apply")
    p.add_argument("--check", action="store_true",
                   help="only check that each mutant's text is found once (exit 1 if not)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the unmutated run of each module's tests")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--merge", nargs="+", type=Path, metavar="REPORT_JSON",
                   help="write one report from the report.json files of runs of disjoint "
                   "module sets (later files win for a mutant run twice); runs nothing")
    p.add_argument("--exclude-tests", action="append", default=[], metavar="PREFIX",
                   help="leave out the test files starting with PREFIX (e.g. to see which "
                   "mutants the suite killed before tests/mutation_kills; repeatable)")
    args = p.parse_args(argv)

    config = load(args.mutants, args.equivalents)
    if args.merge:
        return merge(args.merge, args.out, config)
    if args.exclude_tests:
        def keep(tests: list[str]) -> list[str]:
            return [t for t in tests if not t.startswith(tuple(args.exclude_tests))]

        for module in config.modules.values():
            module.tests = keep(module.tests)
        for m in config.mutants:
            m.tests = keep(m.tests) if m.tests else None
    chosen = [
        m for m in config.mutants
        if (not args.module or m.module in args.module)
        and (not args.ci or config.modules[m.module].ci)
        and (not args.id or any(fnmatch.fnmatch(m.id, pat) for pat in args.id))
    ]
    if args.ci:
        sampled: list[Mutant] = []
        for name, module in config.modules.items():
            mine = [m for m in chosen if m.module == name]
            sampled += mine if module.ci_sample is None else mine[: module.ci_sample]
        chosen = [m for m in chosen if m in sampled]
    unknown_eq = sorted(set(config.equivalents) - {m.id for m in config.mutants})
    if args.list or args.check:
        stale = 0
        for m in chosen:
            where = locate(ROOT, config.modules[m.module], m)
            stale += isinstance(where, str)
            shown = where if isinstance(where, str) else f"{where[0].relative_to(ROOT)}"
            if args.list or isinstance(where, str):
                print(f"{m.id:45} {shown}")
        if args.check:
            print(f"{len(chosen) - stale} of {len(chosen)} mutants found"
                  + (f"; {stale} STALE: update mutation/mutants.toml" if stale else ""))
        return 1 if args.check and stale else 0
    began = time.monotonic()
    commit = _commit()  # what was copied (the run may outlast a commit)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="planexec-mutation-") as tmp:
        work = Path(tmp)
        copy_project(work)
        if not args.no_baseline:
            for name in sorted({m.module for m in chosen}):
                tests = sorted({t for m in chosen if m.module == name
                                for t in (m.tests or config.modules[name].tests)})
                code, output, seconds = run_tests(work, tests, args.timeout * 2, args.python)
                print(f"baseline {name}: exit {code} in {seconds:.0f} s", flush=True)
                if code != 0:
                    print(output[-4000:], file=sys.stderr)
                    print(f"the unmutated tests of {name} fail: fix them first", file=sys.stderr)
                    return 2
        for i, mutant in enumerate(chosen, 1):
            if args.budget is not None and time.monotonic() - began > args.budget:
                outcome = Outcome(mutant.id, mutant.module, "not-run", mutant.why,
                                  detail=f"over the run's budget of {args.budget:.0f} s")
            else:
                outcome = mutate_one(work, config, mutant, args.timeout, args.python)
            outcomes.append(outcome)
            partial = {"command": "(partial) python mutation/run.py "
                       + " ".join(argv if argv is not None else sys.argv[1:]),
                       "commit": commit, "date": date, "seconds": time.monotonic() - began,
                       "unknown_equivalents": unknown_eq}
            write_report(args.out, outcomes, config, partial)  # kept if the run is stopped
            print(f"[{i}/{len(chosen)}] {outcome.status:10} {mutant.id} ({outcome.seconds} s)"
                  + (f": {outcome.detail}" if outcome.status in ("stale", "invalid") else ""),
                  flush=True)
    meta = {
        "command": "python mutation/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit,
        "date": date,
        "seconds": time.monotonic() - began,
        "unknown_equivalents": unknown_eq,
    }
    write_report(args.out, outcomes, config, meta)
    summary = summarize(outcomes, config)
    for name, row in sorted(summary["modules"].items()):
        print(f"{name:12} killed {row['killed']:3}  survived {row['survived']:3}  "
              f"equivalent {row['equivalent']:3}  stale {row['stale']:3}  score {row['score']}")
    survivors = [o for o in outcomes if o.status == "survived"]
    broken = [o for o in outcomes if o.status in FAILING - {"survived"}]
    for o in outcomes:
        if o.status == "not-run":
            print(f"warning: mutant {o.id} is {o.status}: {o.detail}", file=sys.stderr)
    for o in broken:
        print(f"{o.status.upper()} {o.id}: {o.detail}", file=sys.stderr)
    for eid in unknown_eq + summary["killed_but_listed_equivalent"]:
        print(f"warning: equivalents.toml lists {eid}, which is no longer a surviving mutant",
              file=sys.stderr)
    for o in survivors:
        print(f"SURVIVED {o.id} ({o.file}:{o.line}): {o.why}", file=sys.stderr)
    print(f"report: {args.out / 'report.md'}")
    return 1 if survivors or broken else 0


if __name__ == "__main__":
    sys.exit(main())
