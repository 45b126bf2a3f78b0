from __future__ import annotations

import pytest

from planexec.errors import PlanParseError
from planexec.parsing.hashstep import parse_hashstep
from planexec.parsing.refs import NO_STEP
from planexec.plan import Plan, Ref, Severity, Template


def codes(plan: Plan) -> set[str]:
    return {d.code for d in plan.diagnostics}


def diag(plan: Plan, code: str):
    found = [d for d in plan.diagnostics if d.code == code]
    assert found, f"no {code} in {[str(d) for d in plan.diagnostics]}"
    return found[0]


CLEAN = """\
#Task1: List the sites.
#Agent1: IoTAgent
#Tool1: sites
#Args1: {}
#Dependency1: None
#ExpectedOutput1: A list of site names.

#Task2: List the assets of the first site.
#Agent2: IoTAgent
#Tool2: assets
#Args2: {"site_name": "{step_1[0]}"}
#Dependency2: #S1
#ExpectedOutput2: A list of assets.
"""


def test_a_clean_plan_gives_its_steps_and_no_diagnostics() -> None:
    plan = parse_hashstep(CLEAN)
    assert plan.dialect == "hashstep"
    assert plan.ids == (1, 2)
    first, second = plan.steps
    assert (first.task, first.server, first.tool, first.args) == (
        "List the sites.",
        "IoTAgent",
        "sites",
        {},
    )
    assert first.expected_output == "A list of site names."
    assert first.depends_on == ()
    assert first.lines == (1, 6)
    ref = second.args["site_name"]
    assert isinstance(ref, Ref)
    assert (ref.step, ref.path, ref.whole_value, ref.location) == (
        1,
        (0,),
        True,
        "args.site_name",
    )
    assert second.explicit_deps == (1,)
    assert second.depends_on == (1,)
    assert plan.diagnostics == ()


def test_keys_are_case_insensitive_and_step_and_server_are_accepted() -> None:
    plan = parse_hashstep(
        "#STEP1: a\n#server1: iot\n#TOOL1: sites\n#args1: {}\n#DEPENDENCY1: none\n"
        "#expected_output1: x\n"
    )
    step = plan.steps[0]
    assert (step.task, step.server, step.tool, step.expected_output) == ("a", "iot", "sites", "x")


def test_angle_bracket_numbers_are_read() -> None:
    plan = parse_hashstep("#Task<1>: a\n#Agent<1>: X\n#Dependency<1>: None\n#Task<2>: b\n"
                          "#Agent<2>: Y\n#Dependency<2>: #S1\n")
    assert plan.ids == (1, 2)
    assert plan.steps[1].depends_on == (1,)
    assert plan.diagnostics == ()


@pytest.mark.parametrize(
    "line",
    [
        "* #Tool1: sites",
        "- #Tool1: sites",
        "**#Tool1:** sites",
        "**#Tool1**: sites",
        "## #Tool1: sites",
        "> #Tool1: sites",
        "1. #Tool1: sites",
        "**#Tool1: sites**",
    ],
)
def test_markdown_around_field_lines_is_ignored(line: str) -> None:
    plan = parse_hashstep(f"#Task1: a\n{line}\n#Args1: {{}}\n")
    assert plan.steps[0].tool == "sites"


def test_prose_before_between_and_after_is_reported_not_read() -> None:
    text = "Here is the plan:\n\n" + CLEAN.replace(
        "\n#Task2", "\n**Step 2: assets**\n\n#Task2"
    ) + "\nNote: done.\n"
    plan = parse_hashstep(text)
    assert plan.ids == (1, 2)
    prose = [d for d in plan.diagnostics if d.code == "PROSE_IGNORED"]
    assert [d.line for d in prose] == [1, 10, 19]
    assert all(d.severity is Severity.INFO for d in prose)
    assert "Here is the plan" in prose[0].message


def test_code_fences_are_ignored_with_a_diagnostic() -> None:
    plan = parse_hashstep("```markdown\n" + CLEAN + "```\n")
    assert plan.ids == (1, 2)
    assert diag(plan, "CODE_FENCE").line == 1


def test_special_tokens_are_removed() -> None:
    plan = parse_hashstep(CLEAN.rstrip("\n") + "<|eom_id|>")
    assert plan.steps[1].expected_output == "A list of assets."
    assert "<|eom_id|>" in diag(plan, "SPECIAL_TOKEN").message


def test_a_leaked_reasoning_channel_before_assistantfinal_is_dropped() -> None:
    text = (
        "We need a plan.\n#Task1: draft step\n#Agent1: A\n#Dependency1: None\n"
        "That's it.assistantfinal#Task1: final step  \n#Agent1: B  \n#Dependency1: None  \n"
    )
    plan = parse_hashstep(text)
    assert [(s.task, s.server) for s in plan.steps] == [("final step", "B")]
    assert "DRAFTS_FOUND" not in codes(plan)
    assert diag(plan, "REASONING_DROPPED").severity is Severity.INFO


def test_think_tags_are_dropped() -> None:
    plan = parse_hashstep("<think>\n#Task1: no\n</think>\n#Task1: yes\n#Tool1: none\n")
    assert plan.steps[0].task == "yes"
    assert "REASONING_DROPPED" in codes(plan)


def test_a_boxed_final_answer_is_read() -> None:
    text = (
        "#Task1: old\n#Agent1: A\n#Dependency1: None\n\n"
        "The final answer is: $\\boxed{#Task1: new\n#Agent1: B\n#Dependency1: None}$\n"
    )
    plan = parse_hashstep(text)
    assert [(s.task, s.server, s.explicit_deps) for s in plan.steps] == [("new", "B", ())]
    assert {"BOXED_ANSWER", "DRAFTS_FOUND"} <= codes(plan)


DRAFTS = """\
#Task1: first draft
#Tool1: a
#Args1: {}

However, here is a better plan:

#Task1: second draft
#Tool1: b
#Args1: {}
#Task2: second draft, step 2
#Tool2: c
#Args2: {"x": 1}

And the final one:
#Task1: third draft
#Tool1: d
#Args1: {"x": "tr"""


@pytest.mark.parametrize(
    ("policy", "tools", "chosen"),
    [
        ("last_complete", ["b", "c"], "draft 2, the last complete one"),
        ("first", ["a"], "draft 1, the first one"),
        ("last", ["d"], "draft 3, the last one"),
    ],
)
def test_the_draft_policy_chooses_among_drafts_and_says_which(
    policy: str, tools: list[str], chosen: str
) -> None:
    plan = parse_hashstep(DRAFTS, draft_policy=policy)
    assert [s.tool for s in plan.steps] == tools
    found = diag(plan, "DRAFTS_FOUND")
    assert "found 3 drafts" in found.message
    assert chosen in found.message


def test_diagnostics_of_drafts_not_chosen_are_dropped_with_them() -> None:
    plan = parse_hashstep(DRAFTS)
    assert "ARGS_TRUNCATED" not in codes(plan)
    plan = parse_hashstep(DRAFTS, draft_policy="last")
    assert diag(plan, "ARGS_TRUNCATED").severity is Severity.ERROR


def test_a_truncated_last_draft_is_passed_over_for_the_last_complete_one() -> None:
    text = "#Task1: a\n#Tool1: t\n#Args1: {}\n\n#Task1: b\n#Tool1: t\n#Args1: {\"q\": "
    plan = parse_hashstep(text)
    assert plan.steps[0].task == "a"
    assert not plan.has_errors


def test_an_unknown_draft_policy_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="draft policy"):
        parse_hashstep(CLEAN, draft_policy="best")


def test_field_numbers_that_disagree_attach_to_the_enclosing_task() -> None:
    text = (
        "#Task1: a\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
        "#Task2: b\n#Agent1: IoT\n#Tool1: assets\n#Args1: {\"site_name\": \"{step_1}\"}\n"
        "#Dependency2: #S1\n"
    )
    plan = parse_hashstep(text)
    second = plan.step(2)
    assert (second.tool, second.server) == ("assets", "IoT")
    assert isinstance(second.args["site_name"], Ref)
    mismatch = diag(plan, "FIELD_NUMBER_MISMATCH")
    assert mismatch.step == 2 and mismatch.severity is Severity.WARNING
    assert "#Agent1 (line 6)" in mismatch.message and "#Tool1 (line 7)" in mismatch.message


def test_a_mangled_key_is_read_with_a_warning() -> None:
    plan = parse_hashstep("#Task<1>: a\n#Task<2>: b\n#Dependency<2>, <S4>: #S1, #S4\n")
    assert plan.step(2).explicit_deps == (1, 4)
    assert "FIELD_KEY_MANGLED" in codes(plan)


def test_a_duplicated_field_keeps_the_first_value() -> None:
    text = "#Task1: a\n#Agent1: Expert\n#Agent1: is the same as #Agent0\n#Dependency1: None\n"
    plan = parse_hashstep(text)
    assert plan.steps[0].server == "Expert"
    dup = diag(plan, "DUPLICATE_FIELD")
    assert dup.line == 3 and "kept the first value" in dup.message


@pytest.mark.parametrize(
    ("first", "again"),
    [("#Args1: {\"a\": 1}", "#Args1: {\"b\": 2}"), ("#Tool1: sites", "#Tool1: assets")],
)
def test_arguments_or_a_tool_written_twice_differently_are_an_error_never_a_guess(
    first: str, again: str
) -> None:
    plan = parse_hashstep(f"#Task1: a\n#Tool1: sites\n{first}\n{again}\n#Dependency1: None\n"
                          .replace("#Tool1: sites\n#Tool1", "#Tool1"))
    assert not plan.steps[0].args_valid
    assert diag(plan, "DUPLICATE_FIELD").severity is Severity.ERROR


def test_arguments_written_twice_the_same_way_are_a_repeat() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: t\n#Args1: {"a": 1}\n#Args1: {"a":1}\n')
    assert plan.steps[0].args == {"a": 1} and plan.steps[0].args_valid
    assert diag(plan, "DUPLICATE_FIELD").severity is Severity.WARNING


def test_an_identical_duplicate_is_reported_as_a_repeat() -> None:
    plan = parse_hashstep("#Task1: a\n#Agent1: X\n#Agent1: X\n")
    assert "same value" in diag(plan, "DUPLICATE_FIELD").message


def test_a_duplicated_step_keeps_the_first() -> None:
    plan = parse_hashstep("#Task1: a\n#Task2: b\n#Task2: c\n")
    assert [s.task for s in plan.steps] == ["a", "b"]
    assert diag(plan, "DUPLICATE_STEP").line == 3


def test_a_step_without_a_number_is_numbered_after_the_previous_one() -> None:
    plan = parse_hashstep("#Task1: a\n#Task: b\n")
    assert plan.ids == (1, 2)
    assert diag(plan, "STEP_NUMBER_MISSING").step == 2


@pytest.mark.parametrize(
    ("written", "tool", "server", "code"),
    [
        ("sites()", "sites", None, "TOOL_NAME_NORMALIZED"),
        ("`sites`", "sites", None, None),
        ("iot.sites", "sites", "iot", "TOOL_NAME_NORMALIZED"),
        ("none", None, None, None),
        ("None", None, None, None),
        ("null", None, None, None),
    ],
)
def test_tool_names_are_normalized(
    written: str, tool: str | None, server: str | None, code: str | None
) -> None:
    plan = parse_hashstep(f"#Task1: a\n#Tool1: {written}\n#Args1: {{}}\n")
    step = plan.steps[0]
    assert (step.tool, step.server) == (tool, server)
    assert step.is_reasoning == (tool is None)
    if code:
        assert code in codes(plan)


def test_a_server_prefix_does_not_override_the_agent_field() -> None:
    plan = parse_hashstep("#Task1: a\n#Agent1: IoTAgent\n#Tool1: iot.sites\n#Args1: {}\n")
    assert (plan.steps[0].server, plan.steps[0].tool) == ("IoTAgent", "sites")
    assert "kept the server 'IoTAgent'" in diag(plan, "TOOL_NAME_NORMALIZED").message


def test_arguments_inside_tool_parentheses_are_read() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: assets(site='MAIN')\n#Args1: {}\n")
    step = plan.steps[0]
    assert (step.tool, step.args, step.args_valid) == ("assets", {"site": "MAIN"}, True)
    assert "read from the parentheses" in diag(plan, "TOOL_NAME_NORMALIZED").message


def test_a_signature_inside_tool_parentheses_gives_no_values() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: sensors(site_name, asset_id)\n#Args1: {}\n")
    found = [d for d in plan.diagnostics if d.code == "TOOL_NAME_NORMALIZED"]
    assert plan.steps[0].args == {} and plan.steps[0].args_valid
    assert any(d.severity is Severity.WARNING and "site_name, asset_id" in d.message
               for d in found)


def test_multi_line_field_values_are_joined() -> None:
    text = (
        "#Task1: Do this:  \n1. first\n2. second\n#Agent1: A\n"
        "#Args1: {\n  \"x\": [1,\n  2]\n}\n#Dependency1: None\n#ExpectedOutput1:\n- a\n- b\n\n---\n"
    )
    plan = parse_hashstep(text)
    step = plan.steps[0]
    assert step.task == "Do this:\n1. first\n2. second"
    assert step.args == {"x": [1, 2]}
    assert step.expected_output == "- a\n- b"
    assert "MULTILINE_VALUE" in codes(plan)


def test_text_after_complete_args_is_not_glued_to_them() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: t\n#Args1: {\"x\": 1}\nThat is all.\n")
    assert plan.steps[0].args == {"x": 1}
    assert "PROSE_IGNORED" in codes(plan)


@pytest.mark.parametrize(
    "deps, expected",
    [
        ("None", ()),
        ("none", ()),
        ("#S1", (1,)),
        ("#S1, #S2", (1, 2)),
        ("#Task1", (1,)),
        ("#Step1", (1,)),
        ("**#S1**, #S3", (1, 3)),
        ("#S1 and #S2", (1, 2)),
        ("#S<1>", (1,)),
    ],
)
def test_dependencies_are_read_in_every_form(deps: str, expected: tuple[int, ...]) -> None:
    plan = parse_hashstep(f"#Task1: a\n#Task2: b\n#Task3: c\n#Task4: d\n#Dependency4: {deps}\n")
    assert plan.step(4).explicit_deps == expected


def test_unreadable_dependency_words_are_reported() -> None:
    plan = parse_hashstep("#Task1: a\n#Task2: b\n#Dependency2: #S1 and the previous output\n")
    assert plan.step(2).explicit_deps == (1,)
    assert "DEPENDENCY_UNREADABLE" in codes(plan)


def test_dependencies_are_explicit_ones_and_referenced_ones() -> None:
    text = (
        "#Task1: a\n#Task2: b\n#Task3: c\n#Tool3: t\n"
        "#Args3: {\"x\": \"{step_1}\", \"y\": \"see <step_2.id> here\"}\n#Dependency3: #S1\n"
    )
    plan = parse_hashstep(text)
    step = plan.step(3)
    assert step.explicit_deps == (1,)
    assert step.depends_on == (1, 2)
    assert isinstance(step.args["y"], Template)
    assert "step(s) 2" in diag(plan, "DEPENDENCY_ADDED").message


def test_args_repairs_are_warnings_that_name_the_repair() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: t\n#Args1: {'site': 'MAIN', 'n': None,}\n")
    assert plan.steps[0].args == {"site": "MAIN", "n": None}
    repairs = [d for d in plan.diagnostics if d.code == "ARGS_REPAIRED"]
    assert repairs and all(d.severity is Severity.WARNING for d in repairs)
    text = " ".join(d.message for d in repairs)
    assert "single quotes" in text and "trailing comma" in text


def test_unreadable_args_are_an_error_and_never_a_silent_empty_dict() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: t\n#Args1: {\"x\": what}\n#Dependency1: None\n")
    step = plan.steps[0]
    assert step.args_valid is False
    assert step.args_text == '{"x": what}'
    found = diag(plan, "ARGS_SYNTAX")
    assert found.severity is Severity.ERROR and found.step == 1


def test_truncated_args_are_an_error_and_make_args_invalid() -> None:
    plan = parse_hashstep(CLEAN + '\n#Task3: c\n#Tool3: history\n#Args3: {"site_name": "MAIN", "st')
    step = plan.step(3)
    assert step.args_valid is False
    assert diag(plan, "ARGS_TRUNCATED").severity is Severity.ERROR


def test_args_none_is_no_arguments_with_a_warning() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: t\n#Args1: None\n#Dependency1: None\n")
    assert (plan.steps[0].args, plan.steps[0].args_valid) == ({}, True)
    assert diag(plan, "ARGS_NONE").severity is Severity.WARNING


def test_a_bare_reference_string_as_args_is_bound_as_the_single_positional_argument() -> None:
    plan = parse_hashstep(
        "#Task1: a\n#Tool1: sites\n#Args1: {}\n"
        "#Task2: b\n#Tool2: json_reader\n#Args2: \"{step_1}\"\n#Dependency2: #S1\n"
    )
    step = plan.step(2)
    assert step.args == {}
    assert len(step.positional) == 1 and isinstance(step.positional[0], Ref)
    assert step.positional[0].step == 1
    assert step.args_valid and step.depends_on == (1,)
    assert diag(plan, "ARGS_POSITIONAL").severity is Severity.WARNING


def test_a_placeholder_that_names_no_step_is_reported() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: t\n#Args1: {"start": "{current_date_time()}"}\n')
    found = diag(plan, "PLACEHOLDER_UNRECOGNIZED")
    assert "args.start" in found.message


def test_hinted_references_keep_their_step_and_words() -> None:
    plan = parse_hashstep(
        "#Task1: a\n#Task2: b\n#Tool2: t\n#Args2: {\"site_name\": \"{step_1_selected_site}\"}\n"
    )
    ref = plan.step(2).args["site_name"]
    assert isinstance(ref, Ref) and ref.step == 1 and ref.hint is not None
    assert plan.step(2).depends_on == (1,)


def test_a_step_cut_after_its_task_line_is_dropped_with_a_warning() -> None:
    plan = parse_hashstep(CLEAN + "\n#Task3:")
    assert plan.ids == (1, 2)
    found = diag(plan, "TRUNCATED_STEP_DROPPED")
    assert found.step == 3 and found.line == 15


def test_a_step_cut_in_its_expected_output_is_kept_with_a_warning() -> None:
    plan = parse_hashstep(CLEAN + '\n#Task3: c\n#Agent3: A\n#Tool3: t\n#Args3: {}\n'
                          '#Dependency3: None\n#ExpectedOutput3: [{"id": "a"},')
    assert plan.ids == (1, 2, 3)
    assert plan.step(3).args_valid
    assert diag(plan, "STEP_TRUNCATED").severity is Severity.WARNING


def test_a_step_cut_before_its_tool_must_not_run() -> None:
    plan = parse_hashstep(CLEAN + "\n#Task3: c\n#Agent3: IoTAgent")
    step = plan.step(3)
    assert step.tool is None and step.args_valid is False
    assert diag(plan, "STEP_INCOMPLETE").severity is Severity.ERROR


def test_a_last_step_followed_by_prose_is_not_truncated() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: t\n#Args1: {}\n#Task2: b\n\nThe end.")
    assert plan.ids == (1, 2)
    assert not plan.has_errors


def test_fields_before_any_task_are_reported() -> None:
    plan = parse_hashstep("#Tool1: t\n#Task1: a\n")
    assert diag(plan, "FIELD_OUTSIDE_STEP").line == 1


@pytest.mark.parametrize("text", ["", "   \n\n  "])
def test_an_empty_reply_is_a_parse_error_saying_so(text: str) -> None:
    with pytest.raises(PlanParseError, match="empty reply"):
        parse_hashstep(text)


def test_a_refusal_is_a_parse_error_quoting_the_prose() -> None:
    with pytest.raises(PlanParseError) as info:
        parse_hashstep("I cannot fulfill this request with the available tools.")
    assert str(info.value).startswith("prose without any step: 'I cannot fulfill")


def test_a_reply_whose_only_step_is_cut_off_is_a_parse_error() -> None:
    with pytest.raises(PlanParseError, match="cut off"):
        parse_hashstep("Here is the plan:\n#Task1:")


def test_diagnostics_are_in_line_order() -> None:
    plan = parse_hashstep(DRAFTS, draft_policy="last")
    lines = [d.line or 0 for d in plan.diagnostics]
    assert lines == sorted(lines)


def test_crlf_line_endings_are_read() -> None:
    plan = parse_hashstep(CLEAN.replace("\n", "\r\n"))
    assert plan.ids == (1, 2) and plan.diagnostics == ()


def test_a_heading_right_after_a_field_is_prose_not_part_of_the_value() -> None:
    plan = parse_hashstep(
        "#Task1: a\n#ExpectedOutput1: x\n### Task 2: header\n#Task2: b\n"
        "#ExpectedOutput2: y\n**Step 3: bold**\n#Task3: c\n"
    )
    assert [s.expected_output for s in plan.steps] == ["x", "y", None]
    assert [d.line for d in plan.diagnostics if d.code == "PROSE_IGNORED"] == [3, 6]


def test_path_like_text_after_a_closed_reference_is_kept_as_text_with_a_warning() -> None:
    plan = parse_hashstep(
        "#Task1: a\n#Agent1: X\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n"
        "#ExpectedOutput1: x\n"
        '#Task2: b\n#Agent2: X\n#Tool2: assets\n#Args2: {"site_name": "{step_1}.name"}\n'
        "#Dependency2: #S1\n#ExpectedOutput2: y\n"
    )
    value = plan.step(2).args["site_name"]
    assert isinstance(value, Template) and value.canonical == "<step_1>.name"
    [diag] = [d for d in plan.diagnostics if d.code == "REF_SUFFIX_TEXT"]
    assert diag.severity is Severity.WARNING and diag.step == 2
    assert "<step_1.name>" in diag.message


# -- #Args written below its line, fields on one line, reasoning steps ----------------


@pytest.mark.parametrize(
    "below",
    [
        '{"site_name": "MAIN"}',
        '{\n  "site_name": "MAIN"\n}',
        '```json\n{"site_name": "MAIN"}\n```',
        '```\n{\n  "site_name": "MAIN"\n}\n```',
        '\n{"site_name": "MAIN"}',
    ],
)
def test_args_left_empty_on_their_line_take_the_json_written_below(below: str) -> None:
    plan = parse_hashstep(
        f"#Task1: a\n#Tool1: assets\n#Args1:\n{below}\n#Dependency1: None\n"
        "#ExpectedOutput1: assets\n"
    )
    step = plan.steps[0]
    assert step.args == {"site_name": "MAIN"} and step.args_valid
    assert {"ARGS_NONE", "PROSE_IGNORED"}.isdisjoint(codes(plan))
    assert step.expected_output == "assets"


def test_args_opening_a_fence_on_their_line_take_the_fenced_json() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: assets\n#Args1: ```json\n{"site_name": "MAIN"}\n```\n'
        "#Dependency1: None\n"
    )
    assert plan.steps[0].args == {"site_name": "MAIN"} and plan.steps[0].args_valid
    assert "ARGS_NONE" not in codes(plan)


def test_empty_args_with_nothing_below_are_a_warning_saying_no_arguments_were_given() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: sites\n#Args1:\n#Dependency1: None\n")
    d = diag(plan, "ARGS_NONE")
    assert d.severity is Severity.WARNING and "no arguments given" in d.message
    assert plan.steps[0].args == {}


def test_empty_args_then_prose_keep_the_prose_out_of_the_arguments() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: sites\n#Args1:\nThis step needs no input.\n")
    assert plan.steps[0].args == {}
    assert {"ARGS_NONE", "PROSE_IGNORED"} <= codes(plan)


@pytest.mark.parametrize(
    "below",
    [
        "site_name: MAIN",
        "- site_name: MAIN",
        '  site_name="MAIN"',
        '(site_name="MAIN")',
        '> {"site_name": "MAIN"}',
        '* {"site_name": "MAIN"}',
        '1. {"site_name": "MAIN"}',
        '> ```json\n> {"site_name": "MAIN"}\n> ```',
        "```yaml\nsite_name: MAIN\n```",
        "\nsite_name: MAIN",
    ],
)
def test_arguments_below_empty_args_that_are_not_json_are_an_error_never_no_arguments(
    below: str,
) -> None:
    plan = parse_hashstep(
        f"#Task1: a\n#Tool1: assets\n#Args1:\n{below}\n#Dependency1: None\n"
    )
    step = plan.steps[0]
    if step.args_valid:  # read after all: then it is the argument written there
        assert step.args == {"site_name": "MAIN"}
        assert "ARGS_REPAIRED" in codes(plan)
    else:
        assert {d.code for d in plan.diagnostics if d.severity is Severity.ERROR} & {
            "ARGS_SYNTAX", "ARGS_TRUNCATED"
        }
    assert "ARGS_NONE" not in codes(plan)


@pytest.mark.parametrize("written", ["{step-1}", "{step_ 1}", "{#S1}", "{{#S1}}", "<#S1>"])
def test_a_step_named_loosely_in_brackets_inside_text_is_never_plain_text_silently(
    written: str,
) -> None:
    plan = parse_hashstep(
        "#Task1: a\n#Tool1: sites\n#Args1: {}\n#Dependency1: None\n\n"
        f'#Task2: b\n#Tool2: assets\n#Args2: {{"q": "sites of {written} only"}}\n'
        "#Dependency2: #S1\n"
    )
    q = plan.step(2).args["q"]
    assert not isinstance(q, str) or "PLACEHOLDER_UNRECOGNIZED" in codes(plan)


def test_a_fence_closing_the_plan_after_empty_args_is_not_read_as_arguments() -> None:
    plan = parse_hashstep("```\n#Task1: a\n#Tool1: sites\n#Args1:\n```\nThat is the plan.\n")
    assert plan.steps[0].args == {} and "ARGS_NONE" in codes(plan)
    assert "PROSE_IGNORED" in codes(plan)


def test_an_unclosed_fence_of_args_at_the_end_is_cut_off() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: assets\n#Args1:\n```json\n{"site_name": "MA')
    assert not plan.steps[0].args_valid
    assert diag(plan, "ARGS_TRUNCATED").severity is Severity.ERROR


def test_several_fields_on_one_line_are_split_with_a_warning() -> None:
    plan = parse_hashstep(
        '#Task1: list sites #Tool1: sites #Args1: {"limit": 2}\n'
        "#Task2: b\n#Tool2: assets\n#Args2: {}\n"
    )
    first = plan.steps[0]
    assert (first.task, first.tool, first.args) == ("list sites", "sites", {"limit": 2})
    assert "#Tool1" in diag(plan, "FIELDS_ON_ONE_LINE").message


def test_field_like_text_inside_json_strings_is_not_split() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: note\n#Args1: {"text": "see #Tool2: x"}\n')
    assert plan.steps[0].args == {"text": "see #Tool2: x"}
    assert "FIELDS_ON_ONE_LINE" not in codes(plan)


def test_args_without_a_tool_are_kept_and_reported() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: sites\n#Task2: b\n#Args2: {"site": "MAIN"}\n')
    step = plan.steps[1]
    assert step.tool is None and step.args == {"site": "MAIN"}
    d = diag(plan, "ARGS_WITHOUT_TOOL")
    assert d.severity is Severity.WARNING and d.step == 2 and "no #Tool" in d.message


def test_a_reasoning_step_naming_its_inputs_in_args_is_not_reported() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: sites\n#Task2: b\n#Tool2: none\n#Args2: {"sites": "{step_1}"}\n'
    )
    assert "ARGS_WITHOUT_TOOL" not in codes(plan)
    assert plan.steps[1].depends_on == (1,)


def test_references_in_a_reasoning_steps_task_become_dependencies() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: assets\n#Args1: {"site_name": "MAIN"}\n#Dependency1: None\n'
        "#Task2: Pick the chiller id from {step_1} and <step_1.items>\n#Tool2: none\n"
        "#Dependency2: None\n"
    )
    assert plan.steps[1].depends_on == (1,) and plan.steps[1].explicit_deps == ()
    d = diag(plan, "DEPENDENCY_ADDED")
    assert d.severity is Severity.INFO and d.step == 2 and "#Task" in d.message


def test_references_in_a_tool_steps_task_add_no_dependency() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: sites\n#Task2: use {step_1}\n#Tool2: sites\n")
    assert plan.steps[1].depends_on == ()


def test_a_reference_in_a_dict_key_is_an_error_and_the_step_must_not_run() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: sites\n#Task2: b\n#Tool2: sensors\n'
        '#Args2: {"asset_id": "A1", "tags": {"{step_1}": 1}}\n'
    )
    assert not plan.steps[1].args_valid
    d = diag(plan, "REF_IN_KEY")
    assert d.severity is Severity.ERROR and "'{step_1}'" in d.message and "args.tags" in d.message


def test_a_placeholder_looking_dict_key_is_a_warning() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: t\n#Args1: {"tags": {"{name}": 1}}\n')
    assert plan.steps[0].args_valid
    assert "key '{name}'" in diag(plan, "PLACEHOLDER_UNRECOGNIZED").message


@pytest.mark.parametrize(
    "value", ["{step_1[{step_1.site}]}", "<step_1.a<step_1>>", "{{step_1.x[{step_1.i}]}}"]
)
def test_a_reference_nested_in_another_placeholder_is_reported(value: str) -> None:
    plan = parse_hashstep(
        f'#Task1: a\n#Tool1: sites\n#Task2: b\n#Tool2: t\n#Args2: {{"a": "{value}"}}\n'
    )
    d = diag(plan, "REF_NESTED")
    assert d.severity is Severity.WARNING and d.step == 2


def test_ordinary_text_around_references_is_not_reported_as_nested() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: sites\n#Task2: b\n#Tool2: t\n'
        '#Args2: {"q": "sites <step_1> and more", "r": "[{step_1}]"}\n'
    )
    assert "REF_NESTED" not in codes(plan)


def test_placeholder_text_naming_a_step_becomes_a_hinted_reference() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: assets\n#Task2: b\n#Tool2: t\n'
        '#Args2: {"site_name": "[site from step 1]", "asset_id": "ASSET_ID_FROM_STEP_1"}\n'
    )
    args = plan.steps[1].args
    for name in ("site_name", "asset_id"):
        ref = args[name]
        assert isinstance(ref, Ref) and ref.step == 1 and ref.is_hinted, name
    assert plan.steps[1].depends_on == (1,)


def test_an_angle_placeholder_naming_no_step_is_reported_and_ordinary_text_is_not() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: t\n#Args1: {"site_name": "<site_name>", "a": "Chiller 6", '
        '"b": "a <b> tag", "c": "SOP_STEP_3", "d": "step 1 of the procedure"}\n'
    )
    # a free-text placeholder: a hinted reference; no dependency, so a missing one
    found = [d for d in plan.diagnostics if d.code == "REF_HINTED"]
    assert len(found) == 1 and "'<site_name>'" in found[0].message
    assert "missing reference" in found[0].message
    assert not [d for d in plan.diagnostics if d.code == "PLACEHOLDER_UNRECOGNIZED"]
    ref = plan.steps[0].args["site_name"]
    assert isinstance(ref, Ref) and ref.is_hinted and ref.step == NO_STEP
    assert plan.steps[0].args["b"] == "a <b> tag"
    assert plan.steps[0].args["a"] == "Chiller 6" and plan.steps[0].args["c"] == "SOP_STEP_3"
