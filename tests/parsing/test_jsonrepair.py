from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.parsing.jsonrepair import (
    JSONReader,
    RepairResult,
    extract_json_object,
    repair_json,
)


def test_strict_json_needs_no_repair() -> None:
    assert repair_json('{"site_name": "MAIN", "n": [1, 2.5, null, true]}') == RepairResult(
        {"site_name": "MAIN", "n": [1, 2.5, None, True]}, (), None, False
    )


@pytest.mark.parametrize(
    ("text", "value", "repair"),
    [
        ("{'a': 'x'}", {"a": "x"}, "single quotes"),
        ("""'{"Overheating": "Temperature Sensor"}'""", {"Overheating": "Temperature Sensor"},
         "single quotes"),
        ('{"a": None, "b": True, "c": False}', {"a": None, "b": True, "c": False},
         "python literals"),
        ('{"a": [1, 2,],}', {"a": [1, 2]}, "trailing comma"),
        ('`{"a": 1}`', {"a": 1}, "backticks"),
        ('```json\n{"a": 1}\n```', {"a": 1}, "backticks"),
        ('{"tonnage": {step_4}}', {"tonnage": "{step_4}"}, "unquoted placeholder {step_4}"),
        ('{"a": {{step_1}}}', {"a": "{{step_1}}"}, "unquoted placeholder {{step_1}}"),
        ('{"a": <step_2.x>}', {"a": "<step_2.x>"}, "unquoted placeholder <step_2.x>"),
        ("{\"id\": {step_1.find(name='X').id}}", {"id": "{step_1.find(name='X').id}"},
         "unquoted placeholder {step_1.find(name='X').id}"),
        ('"{\\"a\\": 1}"', {"a": 1}, "escaped JSON string"),
        ('"{step_1}"', "{step_1}", "bare placeholder string"),
        ("None", {}, "None means no arguments"),
        ("none", {}, "None means no arguments"),
        ('{site_name: "MAIN"}', {"site_name": "MAIN"}, "unquoted keys"),
    ],
)
def test_each_repair_is_applied_and_named(text: str, value: Any, repair: str) -> None:
    result = repair_json(text)
    assert result.error is None, result
    assert result.value == value
    assert repair in result.repairs


def test_backtick_wrapped_escaped_json_string_is_unwrapped() -> None:
    result = repair_json('`"[{\\"t\\": 1}, {\\"t\\": 2}]" `')
    assert result.value == [{"t": 1}, {"t": 2}]
    assert result.repairs == ("backticks", "escaped JSON string")


def test_a_whole_escaped_json_string_with_an_ellipsis_is_an_error() -> None:
    result = repair_json('`"[{\\"t\\": 1}, ...]"`')
    assert result.value is None
    assert result.error
    assert result.elided
    assert not result.truncated


def test_a_plain_string_with_an_ellipsis_is_just_a_string() -> None:
    result = repair_json('"wait..."')
    assert result.value == "wait..."
    assert not result.elided


@pytest.mark.parametrize("text", ['{"a": [1, 2, ...]}', '{"a": 1, ...}', "[1, \u2026]"])
def test_an_ellipsis_is_elided_data_and_is_not_repaired(text: str) -> None:
    result = repair_json(text)
    assert result.value is None
    assert result.error
    assert result.elided
    assert not result.truncated


@pytest.mark.parametrize("text", ['{"a": 1', '{"a" 1}', "hello", '{"a": 1}'])
def test_only_an_ellipsis_marks_a_result_elided(text: str) -> None:
    assert not repair_json(text).elided


@pytest.mark.parametrize(
    "text",
    ['{"site_name": "MAIN_', '{"a": 1', '{"a": 1,', '{"a"', '{"a":', "[1, 2", "tru",
     '{"site_name": "MAIN", "asset_id": "{step_4}", "start": "2020-01-01", "final'],
)
def test_truncated_json_is_an_error_marked_truncated(text: str) -> None:
    result = repair_json(text)
    assert result.value is None
    assert result.error
    assert result.truncated


@pytest.mark.parametrize("text", ['{"a": 1}}', "{'a': MAIN}", '{"a" 1}', "hello", "{1: 2}"])
def test_unrepairable_json_is_an_error_not_truncated(text: str) -> None:
    result = repair_json(text)
    assert result.value is None
    assert result.error
    assert not result.truncated


CORPUS = Path(__file__).parents[2] / ".." / "shared" / "corpus" / "real_plans"


@pytest.mark.parametrize(
    ("name", "n", "value_type", "repairs", "truncated"),
    [
        ("hashstep_hpml26gemini_9.txt", 2, None, (), True),
        ("hashstep_hpml26llama8b_6.txt", 6, None, (), True),
        ("hashstep_hpml26gemma3n_3.txt", 5, dict, ("single quotes",), False),
        ("hashstep_hpml26gemma3n_4.txt", 3, dict, ("None means no arguments",), False),
        ("hashstep_hpml26gemma3n_5.txt", 2, str, ("bare placeholder string",), False),
        ("hashstep_hpml26gemma3n_7.txt", 5, None, ("backticks",), False),
        ("hashstep_hpml26gemma3n_8.txt", 2, dict, ("single quotes",), False),
        ("hashstep_hpml26gemma3n_6.txt", 6, dict, (), False),
        ("hashstep_hpml26gemini_3.txt", 2, dict, (), False),
    ],
)
def test_corpus_args_lines_are_read_or_rejected_as_labelled(
    name: str, n: int, value_type: type | None, repairs: tuple[str, ...], truncated: bool
) -> None:
    path = CORPUS / name
    if not path.exists():
        pytest.skip("the shared corpus is not available")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines()
             if ln.startswith(f"#Args{n}:")]
    result = repair_json(lines[0].split(":", 1)[1])
    assert result.repairs == repairs
    assert result.truncated == truncated
    if value_type is None:
        assert result.value is None and result.error
    else:
        assert isinstance(result.value, value_type) and result.error is None


def test_empty_text_is_an_error() -> None:
    assert repair_json("  ").error == "the text is empty"


def test_json_null_is_strict_json() -> None:
    assert repair_json("null") == RepairResult(None, (), None, False)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    result = repair_json("[" * 5000)
    assert result.value is None and result.error


def test_a_nested_escaped_json_string_value_is_left_a_string() -> None:
    text = '{"json_string": "[{\\"tonnage\\": {step_4}}, ...]"}'
    result = repair_json(text)
    assert result.repairs == ()
    assert result.value == {"json_string": '[{"tonnage": {step_4}}, ...]'}


def test_corpus_style_args_lines() -> None:
    assert repair_json(
        '{"site_name": "MAIN", "asset_id": "{step_1.find(name=\'CWC04009\').id}"}'
    ).value == {"site_name": "MAIN", "asset_id": "{step_1.find(name='CWC04009').id}"}
    single = repair_json("""'{"forecasting_supported": "{step_2}", "models": "{step_4}"}'""")
    assert single.value == {"forecasting_supported": "{step_2}", "models": "{step_4}"}


# --- extract_json_object ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Sure:\n```json{"a":1}```\nDone.', {"a": 1}),
        ('Here you go: ```{"a": [1, 2]}``` thanks', {"a": [1, 2]}),
        ('The arguments are {"site_name": "MAIN"} as asked.', {"site_name": "MAIN"}),
        ("I think {'site_name': 'MAIN', 'x': None} works", {"site_name": "MAIN", "x": None}),
        ("List: [1, 2, 3]", [1, 2, 3]),
        ('first [1] then {"a": 2}', {"a": 2}),
    ],
)
def test_extract_json_object_finds_the_object_in_a_reply(reply: str, value: Any) -> None:
    assert extract_json_object(reply) == value


@pytest.mark.parametrize("reply", ["", "no json here", "{oops", "```\nnot json\n```", "42"])
def test_extract_json_object_returns_none_when_there_is_none(reply: str) -> None:
    assert extract_json_object(reply) is None


# --- properties -------------------------------------------------------------------------

_JSONISH = st.text(alphabet='{}[]"\':,. \n\\`0123456789abeNTFnulrsp_-$<>()#E…', max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=80), _JSONISH))
def test_repair_json_and_extract_never_raise(text: str) -> None:
    result = repair_json(text)
    assert isinstance(result, RepairResult)
    assert (result.error is None) or (result.value is None)
    extract_json_object(text)


def test_a_bug_in_the_reader_propagates_instead_of_becoming_an_error_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: JSONReader) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(JSONReader, "skip_ws", broken)
    with pytest.raises(KeyError):
        repair_json("{'a': 1}")
    with pytest.raises(KeyError):
        extract_json_object("The answer is {'a': 1}.")


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.text(max_size=5)
    return st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    _containers,
    max_leaves=15,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _JSON, max_size=5))
def test_any_strict_json_object_reads_back_unchanged(value: dict[str, Any]) -> None:
    result = repair_json(json.dumps(value))
    assert result == RepairResult(value, (), None, False)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _JSON, max_size=5))
def test_any_truncated_json_object_is_an_error(value: dict[str, Any]) -> None:
    text = json.dumps(value)
    if len(text) > 2:
        cut = text[: len(text) // 2 + 1]
        result = repair_json(cut)
        assert result.value is None and result.error
