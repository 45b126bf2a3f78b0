"""The streaming parser: whatever the chunking, it ends with exactly `parse_plan`'s plan.

Two oracles, neither the streaming parser itself:

- `parse_plan` on the whole text (the corpus of real replies, the demo plans and
  generated plans, cut into chunks every possible way hypothesis finds): the plan at the
  end, and replaying the updates, must give its steps and diagnostics;
- the generator of the plan texts, which knows each step's tool and arguments: a step is
  reported as soon as the next step's first line is complete, before the reply ends.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planexec.errors import PlanParseError
from planexec.parsing import parse_plan
from planexec.parsing.streaming import StreamEnd, StreamingPlanParser, StreamUpdate
from planexec.plan import Step, to_jsonable

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("PLANEXEC_CORPUS", ROOT.parent / "shared" / "corpus" / "real_plans"))
CORPUS_FILES = sorted(CORPUS.glob("*.txt")) if CORPUS.is_dir() else []
DEMO_FILES = sorted((ROOT / "planexec" / "examples" / "plans").glob("*.txt"))
needs_corpus = pytest.mark.skipif(not CORPUS_FILES, reason=f"no plan corpus at {CORPUS}")


@dataclass(frozen=True)
class GenStep:
    tool: str
    args: dict[str, str]
    ref: int | None  # the earlier step whose whole result is the argument "source"


def render(dialect: str, steps: list[GenStep]) -> str:
    """Write generated steps in a dialect (the oracle knows what each step is)."""
    out: list[str] = []
    for i, s in enumerate(steps, 1):
        args: dict[str, str] = dict(s.args)
        if dialect == "hashstep":
            if s.ref is not None:
                args["source"] = f"<step_{s.ref}>"
            out += [f"#Task{i}: call {s.tool}", f"#Tool{i}: {s.tool}",
                    f"#Args{i}: {json.dumps(args)}",
                    f"#Dependency{i}: " + (f"#S{s.ref}" if s.ref else "None"),
                    f"#ExpectedOutput{i}: the output of {s.tool}", ""]
        elif dialect == "rewoo":
            out += [f"Plan: call {s.tool}.", f"#E{i} = {s.tool}[{rewoo_input(s)}]"]
        elif dialect == "llmcompiler":
            kw = [f"{k}={json.dumps(v)}" for k, v in s.args.items()]
            if s.ref is not None:
                kw.append(f"source=${s.ref}")
            out.append(f"{i}. {s.tool}({', '.join(kw)})")
        else:
            if s.ref is not None:
                args["source"] = f"<step_{s.ref}>"
            out.append(json.dumps({"id": i, "tool": s.tool, "args": args}))
    if dialect == "llmcompiler":
        out.append(f"{len(steps) + 1}. join()")
    if dialect == "json":
        return '{"steps": [\n' + ",\n".join(out) + "\n]}\n"
    return "\n".join(out) + "\n"


def rewoo_input(s: GenStep) -> str:
    """A rewoo step's one input: the reference, else its first argument's value."""
    return f"#E{s.ref}" if s.ref is not None else next(iter(s.args.values()), "x")


def expected_call(dialect: str, s: GenStep) -> tuple[dict[str, str], list[str]]:
    """The keyword and positional arguments the generator wrote, references canonical."""
    if dialect == "rewoo":
        one = f"<step_{s.ref}>" if s.ref is not None else rewoo_input(s)
        return {}, [one]
    args = dict(s.args)
    if s.ref is not None:
        args["source"] = f"<step_{s.ref}>"
    return args, []


_word = st.text(alphabet="abcdefgh", min_size=1, max_size=6)


@st.composite
def gen_plans(draw: st.DrawFn) -> list[GenStep]:
    n = draw(st.integers(1, 6))
    steps = []
    for i in range(1, n + 1):
        tool = draw(st.sampled_from(["sites", "assets", "history", "work_orders"]))
        args = draw(st.dictionaries(st.sampled_from(["site", "asset", "day"]), _word,
                                    max_size=2))
        ref = draw(st.none() | st.integers(1, i - 1)) if i > 1 else None
        steps.append(GenStep(tool, args, ref))
    return steps


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


def replay(parser: StreamingPlanParser, chunks: list[str]) -> tuple[dict[int, Step], StreamEnd]:
    """Feed the chunks, apply every update to a map of live steps; return it and the end."""
    live: dict[int, Step] = {}

    def apply(u: StreamUpdate) -> None:
        for sid in u.withdrawn:
            assert sid in live, f"withdrew step {sid}, which was never reported"
            del live[sid]
        for s in u.arrived:
            assert s.id not in live, f"step {s.id} arrived twice without a withdrawal"
            live[s.id] = s

    for c in chunks:
        apply(parser.feed(c))
    assert live == {s.id: s for s in parser.steps}
    end = parser.finish()
    apply(end.update)
    return live, end


def check_against_parse_plan(text: str, chunks: list[str], dialect: str) -> None:
    try:
        want = parse_plan(text, dialect)
        want_error = None
    except PlanParseError as exc:
        want, want_error = None, str(exc)
    parser = StreamingPlanParser(dialect)
    live, end = replay(parser, chunks)
    assert end.plan == want  # steps, diagnostics, dialect and source
    assert (str(end.error) if end.error else None) == want_error
    assert live == ({s.id: s for s in want.steps} if want is not None else {})
    # the steps reported before the end depend on the text only, not on the chunking
    whole = StreamingPlanParser(dialect)
    whole.feed(text[: text.rfind("\n") + 1])
    whole.feed(text[text.rfind("\n") + 1 :])
    cut = StreamingPlanParser(dialect)
    for c in chunks:
        cut.feed(c)
    assert cut.steps == whole.steps


REAL_TEXTS = [p.read_text(encoding="utf-8") for p in CORPUS_FILES + DEMO_FILES]


@pytest.mark.skipif(not REAL_TEXTS, reason="no plan texts")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cuts=st.lists(st.integers(0, 10**6), max_size=40))
def test_any_chunking_of_a_real_reply_ends_with_parse_plans_plan(
    data: st.DataObject, cuts: list[int]
) -> None:
    text = data.draw(st.sampled_from(REAL_TEXTS))
    text = text.replace("\n", data.draw(st.sampled_from(["\n", "\r\n", "\r\r\n"])))
    check_against_parse_plan(text, chunked(text, cuts), "auto")


_BLOCKS = "".join(f"#Task{n}: a\n#Tool{n}: sites\n#Args{n}: {{}}\n#Dependency{n}: None\n\n"
                  for n in range(1, 40))


@pytest.mark.parametrize(
    "text",
    [_BLOCKS.replace("a\n", "a\r"), _BLOCKS.replace("\n", "\r\r\n"), _BLOCKS.replace("\n", "\r")],
    ids=["a lone CR in each block", "CR CR LF", "CR only"],
)
def test_a_reply_whose_lines_also_end_with_a_lone_carriage_return_streams_to_its_plan(
    text: str,
) -> None:
    for chunks in ([text], text.splitlines(keepends=True), list(text)):
        check_against_parse_plan(text, chunks, "auto")


@needs_corpus
@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.name for p in CORPUS_FILES])
def test_every_corpus_reply_fed_line_by_line_and_char_by_char(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    check_against_parse_plan(text, text.splitlines(keepends=True), "auto")
    check_against_parse_plan(text, list(text), "auto")


@pytest.mark.parametrize("dialect", ["hashstep", "rewoo", "llmcompiler", "json"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=gen_plans(), cuts=st.lists(st.integers(0, 10**6), max_size=30))
def test_any_chunking_of_a_generated_plan_ends_with_parse_plans_plan(
    dialect: str, steps: list[GenStep], cuts: list[int]
) -> None:
    text = render(dialect, steps)
    check_against_parse_plan(text, chunked(text, cuts), dialect)
    check_against_parse_plan(text, chunked(text, cuts), "auto")


@pytest.mark.parametrize("dialect", ["hashstep", "rewoo", "llmcompiler", "json"])
@settings(max_examples=40, deadline=None)
@given(steps=gen_plans())
def test_each_step_arrives_as_soon_as_the_next_one_begins(
    dialect: str, steps: list[GenStep]
) -> None:
    text = render(dialect, steps)
    lines = text.splitlines(keepends=True)
    parser = StreamingPlanParser(dialect)
    seen: dict[int, Step] = {}
    for n, line in enumerate(lines):
        for s in parser.feed(line).arrived:
            seen[s.id] = s
        # the first line of step k+1 is complete: step k (and all before it) arrived
        # (json: step k's object closes at the end of line k + 1)
        for k in range(1, len(steps) + 1):
            if dialect == "json":
                due = n >= k
            else:
                due = len("".join(lines[: n + 1])) > len(render(dialect, steps[:k]))
            if due:
                assert k in seen, f"step {k} not reported after line {n + 1}"
    end = parser.finish()
    assert end.plan is not None
    for s in end.update.arrived:
        seen[s.id] = s
    for k, gen in enumerate(steps, 1):
        got = seen[k]
        assert got.tool == gen.tool
        got_call = (to_jsonable(got.args), to_jsonable(list(got.positional)))
        assert got_call == expected_call(dialect, gen)
        if k < len(steps):  # every step but the last arrived before the end
            assert got not in end.update.arrived
    assert len(end.plan.steps) == len(steps)


def test_a_restarting_draft_withdraws_the_steps_it_drops() -> None:
    first = (
        "#Task1: sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
        "#Task2: delete\n#Tool2: assets\n#Args2: {\"site\": \"MAIN\"}\n#Dependency2: None\n"
    )
    revised = (
        "Revised plan:\n#Task1: sites\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
        "#Task2: other\n#Tool2: history\n#Args2: {\"site\": \"X\"}\n#Dependency2: None\n"
    )
    p = StreamingPlanParser()
    arrived: list[Step] = []
    withdrawn: list[int] = []
    for line in (first + revised).splitlines(keepends=True):
        u = p.feed(line)
        arrived += u.arrived
        withdrawn += u.withdrawn
    end = p.finish()
    withdrawn += end.update.withdrawn
    assert [s.tool for s in arrived][:2] == ["sites", "assets"]
    assert 2 in withdrawn  # the first draft's step 2 (assets) no longer holds
    assert end.plan is not None
    assert [s.tool for s in end.plan.steps] == ["sites", "history"]
    assert {s.id: s.tool for s in p.steps} == {1: "sites", 2: "history"}


def test_finish_twice_or_feed_after_finish_is_a_bug() -> None:
    p = StreamingPlanParser()
    p.finish("")
    with pytest.raises(RuntimeError):
        p.feed("x")
    with pytest.raises(ValueError, match="dialect"):
        StreamingPlanParser("yaml")


# -- issue 25, defect 13: the block-alone fast path against the whole-prefix parse -------


def _prefix_steps(text: str, dialect: str) -> dict[int, Step]:
    """The general path: `parse_plan` of the completed prefix, as the parser used to."""
    from planexec.parsing.streaming import _BLOCK_START_RE

    lines = text.splitlines(keepends=True)
    complete = [i for i, line in enumerate(lines) if line.endswith("\n")]
    starts = [i for i in complete if _BLOCK_START_RE.match(lines[i])]
    if not starts:
        return {}
    prefix = "".join(lines[: starts[-1]])
    try:
        return {s.id: s for s in parse_plan(prefix, dialect).steps}
    except PlanParseError:
        return {}


@pytest.mark.parametrize("dialect", ["hashstep", "rewoo", "llmcompiler"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=gen_plans(), prose=st.booleans())
def test_what_is_reported_line_by_line_is_the_whole_prefix_parse(
    dialect: str, steps: list[GenStep], prose: bool
) -> None:
    # a plan long enough for whole parses and blocks parsed alone to take turns
    text = ("Here is the plan:\n" if prose else "") + render(dialect, steps * 8)
    parser = StreamingPlanParser(dialect)
    fed = ""
    for line in text.splitlines(keepends=True):
        parser.feed(line)
        fed += line
        assert {s.id: s for s in parser.steps} == _prefix_steps(fed, dialect)
