"""The real planner outputs in ``shared/corpus/real_plans`` (see its SOURCES.md).

Every file must parse or fail with `PlanParseError`. A sample, labelled by reading the
files (not by running the parser), pins the number of steps, each step's tool, which
steps have valid args, and the set of diagnostic codes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planexec.errors import PlanParseError
from planexec.parsing import parse_plan
from planexec.plan import Ref

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real_plans"
FILES = sorted(CORPUS.glob("*.txt")) if CORPUS.is_dir() else []

needs_corpus = pytest.mark.skipif(not FILES, reason=f"no plan corpus at {CORPUS}")


def read(name: str) -> str:
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"{name} is not in the corpus")
    return path.read_text(encoding="utf-8")


@needs_corpus
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_corpus_file_parses_or_fails_with_plan_parse_error(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        plan = parse_plan(text)
    except PlanParseError as exc:
        assert str(exc)
        return
    assert plan.steps
    for step in plan.steps:
        if not step.args_valid:
            assert any(d.step == step.id and d.severity == "error" for d in plan.diagnostics)


N = None  # a reasoning step (no tool)
T, F = True, False
AGENTS4 = [N, N, N, N]

# file: (steps, tools, args valid, diagnostic codes) -- labelled by reading each file.
PINNED: dict[str, tuple[int, list[str | None], list[bool], set[str]]] = {
    # --- hashstep, hpml-2026 prompt (#Task/#Agent/#Tool/#Args/#Dependency/#ExpectedOutput)
    "hashstep_hpml26gemini_1.txt": (2, ["assets", N], [T, T], set()),
    "hashstep_hpml26gemini_2.txt": (4, ["sites", "assets", N, "history"], [T] * 4, set()),
    "hashstep_hpml26gemini_3.txt": (2, ["assets", "history"], [T, T], {"REF_HINTED"}),
    "hashstep_hpml26gemini_7.txt": (
        8,
        ["sites", "assets", "sensors", "current_date_time", "history", "run_integrated_tsad",
         "get_failure_modes", "get_failure_mode_sensor_mapping"],
        [T] * 8,
        {"REF_HINTED"},
    ),
    "hashstep_hpml26gemini_8.txt": (
        3, ["sites", "assets", "sensors"], [T] * 3, {"STEP_TRUNCATED", "REF_HINTED"}
    ),
    "hashstep_hpml26gemini_9.txt": (2, ["sites", "assets"], [T, F], {"ARGS_TRUNCATED"}),
    "hashstep_hpml26gemini_10.txt": (2, ["sites", "assets"], [T, T], {"TRUNCATED_STEP_DROPPED"}),
    "hashstep_hpml26gemma3n_1.txt": (
        4, ["assets", "json_reader", "sensors", "history"], [T] * 4,
        {"FIELD_NUMBER_MISMATCH", "DEPENDENCY_ADDED"},
    ),
    "hashstep_hpml26gemma3n_3.txt": (
        5, ["assets", "assets", "get_failure_modes", "get_failure_mode_sensor_mapping",
            "json_reader"], [T] * 5, {"ARGS_REPAIRED"},
    ),
    "hashstep_hpml26gemma3n_4.txt": (
        7, ["sensors", "json_reader", N, "current_date_time", "run_integrated_tsad",
            "get_failure_modes", "get_failure_mode_sensor_mapping"], [T] * 7, {"ARGS_NONE"},
    ),
    "hashstep_hpml26gemma3n_5.txt": (
        6, ["sites", "json_reader", "assets", "json_reader", "get_failure_modes",
            "get_failure_mode_sensor_mapping"], [T] * 6, {"ARGS_REPAIRED", "ARGS_POSITIONAL"},
    ),
    "hashstep_hpml26gemma3n_6.txt": (
        6, ["assets", "sensors", "sensors", "history", "history", "json_reader"], [T] * 6, set()
    ),
    # #Args5/#Args6 are backticked JSON strings of example data elided with "...":
    # not a complete value, so not runnable.
    "hashstep_hpml26gemma3n_7.txt": (
        6, ["sites", "assets", "sensors", "history", "json_reader", N], [T] * 4 + [F, F],
        {"ARGS_SYNTAX"},
    ),
    "hashstep_hpml26gemma3n_8.txt": (
        5, ["get_ai_tasks", "json_reader", "get_tsfm_models", "json_reader", "json_reader"],
        [T] * 5, {"ARGS_REPAIRED", "FIELD_NUMBER_MISMATCH"},
    ),
    "hashstep_hpml26llama8b_1.txt": (
        3, ["sites", "assets", "sensors"], [T] * 3,
        {"PROSE_IGNORED", "TOOL_NAME_NORMALIZED", "DEPENDENCY_ADDED"},
    ),
    "hashstep_hpml26llama8b_3.txt": (
        5, ["sites", "assets", "assets", "sensors", "history"], [T] * 5,
        {"PROSE_IGNORED", "TOOL_NAME_NORMALIZED", "PLACEHOLDER_UNRECOGNIZED"},
    ),
    "hashstep_hpml26llama8b_4.txt": (
        3, ["sites", "assets", "sensors"], [T] * 3, {"PROSE_IGNORED", "TOOL_NAME_NORMALIZED"}
    ),
    "hashstep_hpml26llama8b_6.txt": (
        6, ["sites", "sites", "assets", "assets", "sensors", "history"], [T] * 5 + [F],
        {"PROSE_IGNORED", "TOOL_NAME_NORMALIZED", "ARGS_TRUNCATED"},
    ),
    "hashstep_hpml26llama8b_7.txt": (
        4, ["sites", "assets", N, "assets"], [T] * 4, {"PROSE_IGNORED", "TOOL_NAME_NORMALIZED"}
    ),
    # --- hashstep, CODS track-1 prompt (#Task/#Agent/#Dependency/#ExpectedOutput, no tool)
    "hashstep_cods12_1.txt": (1, [N], [T], {"PROSE_IGNORED", "DRAFTS_FOUND"}),
    "hashstep_cods12_2.txt": (4, AGENTS4, [T] * 4, {"CODE_FENCE", "PROSE_IGNORED",
                                                     "SPECIAL_TOKEN"}),
    "hashstep_cods12_3.txt": (1, [N], [T], {"PROSE_IGNORED", "BOXED_ANSWER", "DRAFTS_FOUND"}),
    "hashstep_cods16_1.txt": (3, [N] * 3, [T] * 3, {"PROSE_IGNORED", "DRAFTS_FOUND"}),
    "hashstep_cods16_4.txt": (4, AGENTS4, [T] * 4, {"PROSE_IGNORED", "DRAFTS_FOUND"}),
    "hashstep_cods16_6.txt": (2, [N, N], [T, T], {"DUPLICATE_FIELD", "PROSE_IGNORED"}),
    "hashstep_cods19_2.txt": (
        5, [N] * 5, [T] * 5, {"FIELD_NUMBER_MISMATCH", "FIELD_KEY_MANGLED", "PROSE_IGNORED"}
    ),
    "hashstep_cods19_3.txt": (5, [N] * 5, [T] * 5, {"FIELD_NUMBER_MISMATCH", "PROSE_IGNORED"}),
    "hashstep_cods20_1.txt": (1, [N], [T], {"REASONING_DROPPED"}),
    "hashstep_cods20_2.txt": (
        3, [N] * 3, [T] * 3, {"REASONING_DROPPED", "PROSE_IGNORED", "MULTILINE_VALUE"}
    ),
    "hashstep_cods22_1.txt": (4, AGENTS4, [T] * 4, set()),
    "hashstep_codsrt_1.txt": (3, [N] * 3, [T] * 3, set()),
    "hashstep_ibmaob_3.txt": (3, [N] * 3, [T] * 3, {"PROSE_IGNORED", "DRAFTS_FOUND"}),
    "hashstep_ibmaob_4.txt": (2, [N, N], [T, T], {"CODE_FENCE"}),
    # --- rewoo
    "rewoo_lgpy_1.txt": (4, ["Google", "LLM", "Google", "LLM"], [T] * 4, set()),
    "rewoo_lgpy_4.txt": (3, ["Google", "LLM", "Google"], [T] * 3, {"REWOO_SAME_LINE"}),
    "rewoo_lgjs_1.txt": (2, ["Google", "Google"], [T, T], {"REWOO_QUOTED_INPUT"}),
    "rewoo_lgjs_2.txt": (
        2, ["Google", "Google"], [T, T],
        {"REWOO_PLAN_LABEL", "REWOO_SAME_LINE", "REWOO_QUOTED_INPUT", "REF_HINTED",
         "PROSE_IGNORED"},
    ),
    # --- llmcompiler
    "llmcompiler_llamahub_1.txt": (2, ["multiply", "add"], [T, T], {"LLMC_THOUGHT", "LLMC_JOIN"}),
    "llmcompiler_llamahub_3.txt": (
        2, ["vector_tool_Chicago", "vector_tool_Seattle"], [T, T], {"LLMC_JOIN"}
    ),
    "llmcompiler_llamaindex_3.txt": (
        2, ["vector_tool_Chicago", "vector_tool_Seattle"], [T, T], {"LLMC_JOIN"}
    ),
    # --- json: a LangGraph plan-and-execute planner's {"steps": ["...", ...]}
    "other_lgjspe_1.txt": (3, [N, N, N], [T, T, T], {"JSON_SHAPE", "JSON_NO_TOOL"}),
}

NO_PLAN = {
    "hashstep_hpml26gemini_11.txt": "prose without any step: 'I cannot fulfill",
    "hashstep_hpml26gemma4_3.txt": "empty reply",
    "rewoo_lgjs_3.txt": "no rewoo step",
}


@needs_corpus
@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_labelled_corpus_file_parses_as_read_by_hand(name: str) -> None:
    n_steps, tools, valid, expected_codes = PINNED[name]
    plan = parse_plan(read(name))
    assert len(plan.steps) == n_steps
    assert [s.tool for s in plan.steps] == tools
    assert [s.args_valid for s in plan.steps] == valid
    assert {d.code for d in plan.diagnostics} == expected_codes


@needs_corpus
@pytest.mark.parametrize("name", sorted(NO_PLAN))
def test_a_corpus_file_without_a_plan_says_what_it_holds(name: str) -> None:
    with pytest.raises(PlanParseError) as info:
        parse_plan(read(name))
    assert str(info.value).startswith(NO_PLAN[name])


@needs_corpus
def test_the_sample_covers_at_least_twenty_files_of_every_style() -> None:
    labelled = set(PINNED) | set(NO_PLAN)
    assert len(labelled) >= 20
    for prefix in ("hashstep_hpml26", "hashstep_cods", "rewoo_", "llmcompiler_"):
        assert any(n.startswith(prefix) for n in labelled)


@needs_corpus
def test_corpus_details_read_by_hand() -> None:
    plan = parse_plan(read("hashstep_hpml26gemini_2.txt"))
    ref = plan.step(2).args["site_name"]
    assert isinstance(ref, Ref) and (ref.step, ref.path) == (1, (0,))
    assert plan.step(4).depends_on == (1, 3)

    plan = parse_plan(read("hashstep_hpml26gemma3n_5.txt"))
    (pos,) = plan.step(2).positional
    assert isinstance(pos, Ref) and pos.step == 1

    plan = parse_plan(read("hashstep_cods20_2.txt"))
    assert plan.step(3).task.count("\n") == 7
    assert plan.step(2).explicit_deps == (1,)

    plan = parse_plan(read("hashstep_cods16_6.txt"))
    assert plan.step(2).server == "Time Series Analytics and Forecasting"

    plan = parse_plan(read("hashstep_cods19_2.txt"))
    assert plan.step(5).explicit_deps == (2, 4)

    plan = parse_plan(read("hashstep_cods12_3.txt"))
    assert plan.step(1).task == "Retrieve metadata for Chiller 6 at the MAIN site"
    assert plan.step(1).expected_output == "Metadata for Chiller 6"

    plan = parse_plan(read("hashstep_hpml26gemini_4.txt"))
    ref = plan.step(6).args["target_columns"]
    assert isinstance(ref, Ref) and ref.path == ("fm_to_sensors", "excess_purge")


def _cut_and_insert(text: str, data: st.DataObject) -> str:
    cut_at = data.draw(st.integers(0, len(text)))
    start = data.draw(st.integers(0, cut_at))
    insert = data.draw(
        st.sampled_from(["", "\n", "#Task1: ", "#Args2: {", "```\n", "\"", "{step_9}", "}$",
                         "<|eot_id|>", "#Dependency3: #S3", "assistantfinal"])
    )
    return text[start:cut_at] + insert + text[cut_at:] if data.draw(st.booleans()) else (
        text[:cut_at] + insert
    )


@needs_corpus
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cut_or_spliced_corpus_texts_raise_nothing_but_plan_parse_error(
    data: st.DataObject,
) -> None:
    path = data.draw(st.sampled_from(FILES))
    text = _cut_and_insert(path.read_text(encoding="utf-8"), data)
    try:
        plan = parse_plan(text)
    except PlanParseError:
        return
    assert plan.steps


# -- the same plans written differently: no argument lost, no reference left as text -------
#
# The oracle reads each plan of the corpus whose blocks are simple (one ``#ArgsN`` per
# ``#TaskN``/``#StepN``, each a JSON object on its line) with `json.loads` alone; the
# changes below are ones the parser claims to read (line endings, a byte order mark at
# the start, markdown around keys, fences, arguments below their line or over several lines,
# repairable JSON). Each step must then hold exactly the argument names the oracle read,
# and a string the oracle sees holding ``{step_N}``/``<step_N>`` must not stay plain text,
# unless an error on that step says the arguments cannot be used.

_ORACLE_REF = re.compile(r"\{\{?\s*step_?\d+[^{}]*\}\}?|<\s*step_?\d+[^<>]*>", re.IGNORECASE)
_ARGS_LINE = re.compile(r"^(#Args\d+:[ \t]*)(\{.*\})[ \t]*$", re.MULTILINE)


def _oracle_args(text: str) -> dict[int, dict[str, Any]] | None:
    tasks = re.findall(r"^#(?:Task|Step)(\d+):", text, re.MULTILINE)
    found = re.findall(r"^#Args(\d+):[ \t]*(.*?)[ \t]*$", text, re.MULTILINE)
    if not tasks or len(set(tasks)) != len(tasks) or sorted(n for n, _ in found) != sorted(tasks):
        return None
    out: dict[int, dict[str, Any]] = {}
    for n, raw in found:
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        out[int(n)] = value
    return out


_SIMPLE = {p.name: a for p in FILES if (a := _oracle_args(p.read_text(encoding="utf-8")))}


def _keys_prefixed(prefix: str) -> Callable[[str], str]:
    return lambda t: re.sub(r"^#", lambda _: prefix + "#", t, flags=re.MULTILINE)


_REWRITES: dict[str, Callable[[str], str]] = {
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "cr": lambda t: t.replace("\n", "\r"),
    "tab after the colon": lambda t: re.sub(r"^(#\w+?\d+):[ ]", "\\1:\t", t, flags=re.MULTILINE),
    "bold keys": lambda t: re.sub(r"^(#\w+?\d+):", r"**\1:**", t, flags=re.MULTILINE),
    "code keys": lambda t: re.sub(r"^(#\w+?\d+):", r"`\1`:", t, flags=re.MULTILINE),
    "bullets": _keys_prefixed("- "),
    "numbered": _keys_prefixed("1. "),
    "blockquote": _keys_prefixed("> "),
    "indented": _keys_prefixed("   "),
    "space before the number": lambda t: re.sub(
        r"^#(Task|Step|Agent|Tool|Args|Dependency|ExpectedOutput)(\d+):", r"#\1 \2:", t,
        flags=re.MULTILINE,
    ),
    "fenced plan": lambda t: "Here is the plan:\n```\n" + t + "\n```\nDone.",
    "args below": lambda t: _ARGS_LINE.sub(lambda m: m[1].rstrip() + "\n" + m[2], t),
    "args fenced below": lambda t: _ARGS_LINE.sub(
        lambda m: m[1].rstrip() + "\n```json\n" + m[2] + "\n```", t
    ),
    "args over lines": lambda t: _ARGS_LINE.sub(
        lambda m: m[1] + m[2].replace('", "', '",\n  "'), t
    ),
    "args in backticks": lambda t: _ARGS_LINE.sub(lambda m: m[1] + "`" + m[2] + "`", t),
    "trailing commas": lambda t: _ARGS_LINE.sub(
        lambda m: m[1] + (m[2][:-1] + ",}" if m[2] != "{}" else m[2]), t
    ),
}


@pytest.mark.skipif(not _SIMPLE, reason=f"no simple plans in the corpus at {CORPUS}")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(_SIMPLE)),
    rewrites=st.lists(st.sampled_from(sorted(_REWRITES)), min_size=1, max_size=3, unique=True),
    byte_order_mark=st.booleans(),
)
def test_a_simple_plan_written_differently_keeps_every_argument_and_reference(
    name: str, rewrites: list[str], byte_order_mark: bool
) -> None:
    text = (CORPUS / name).read_text(encoding="utf-8")
    for rewrite in rewrites:
        text = _REWRITES[rewrite](text)
    plan = parse_plan("\ufeff" + text if byte_order_mark else text)
    assert set(_SIMPLE[name]) <= {s.id for s in plan.steps}
    for sid, want in _SIMPLE[name].items():
        step = plan.step(sid)
        if any(d.step == sid and d.severity == "error" for d in plan.diagnostics):
            assert not step.args_valid
            continue
        assert set(step.args) == set(want), (sid, step.args)
        for key, value in want.items():
            if isinstance(value, str) and _ORACLE_REF.search(value):
                assert not isinstance(step.args[key], str), (sid, key, step.args[key])
