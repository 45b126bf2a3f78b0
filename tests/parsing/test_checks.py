from __future__ import annotations

import difflib
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planexec.parsing import checks
from planexec.parsing.checks import CatalogLike, check_plan, find_cycles
from planexec.parsing.hashstep import parse_hashstep
from planexec.plan import Plan, Ref, Severity, Step


class FakeCatalog:
    """A catalog of (name -> (required args, all args)), optionally per server."""

    def __init__(self, tools: dict[str, tuple[list[str], list[str]]], server: str | None = None):
        self.tools = tools
        self.server = server

    def has(self, name: str, server: str | None = None) -> bool:
        return name in self.tools and (server is None or server == self.server)

    def suggest(self, name: str, n: int = 3) -> list[str]:
        return difflib.get_close_matches(name, list(self.tools), n=n, cutoff=0.5)

    def required_args(self, name: str, server: str | None = None) -> list[str]:
        return list(self.tools[name][0])

    def arg_names(self, name: str, server: str | None = None) -> list[str]:
        return list(self.tools[name][1])


CATALOG = FakeCatalog(
    {
        "sites": ([], []),
        "assets": (["site_name"], ["site_name"]),
        "history": (
            ["site_name", "asset_id", "start"],
            ["site_name", "asset_id", "start", "final"],
        ),
    },
    server="iot",
)


def step(sid: int, *deps: int, refs: tuple[int, ...] = (), tool: str | None = "t") -> Step:
    args = {f"a{r}": Ref(r, raw=f"<step_{r}>", location=f"args.a{r}") for r in refs}
    return Step(
        id=sid,
        tool=tool,
        args=args,
        explicit_deps=tuple(sorted(deps)),
        depends_on=tuple(sorted(set(deps) | set(refs))),
        lines=(sid, sid),
    )


def codes(plan: Plan) -> list[str]:
    return [d.code for d in plan.diagnostics]


def the(plan: Plan, code: str):
    found = [d for d in plan.diagnostics if d.code == code]
    assert len(found) == 1, [str(d) for d in plan.diagnostics]
    return found[0]


def test_the_fake_catalog_fits_the_protocol() -> None:
    assert isinstance(CATALOG, CatalogLike)


def test_a_sound_plan_gets_no_diagnostics() -> None:
    plan = Plan((step(1), step(2, 1, refs=(1,))))
    assert check_plan(plan) == plan


def test_a_reference_to_a_missing_step_is_an_error() -> None:
    plan = check_plan(Plan((step(1), step(2, refs=(7,)))))
    found = the(plan, "REF_MISSING")
    assert found.severity is Severity.ERROR and found.step == 2
    assert "step 7" in found.message and "args.a7" in found.message


def test_a_dependency_on_a_missing_step_is_an_error() -> None:
    found = the(check_plan(Plan((step(1), step(2, 5)))), "DEPENDENCY_MISSING")
    assert found.severity is Severity.ERROR and "step 5" in found.message


def test_self_references_and_self_dependencies_are_errors() -> None:
    assert the(check_plan(Plan((step(1, refs=(1,)),))), "REF_SELF").severity is Severity.ERROR
    assert the(check_plan(Plan((step(1, 1),))), "DEPENDENCY_SELF").step == 1


def test_forward_references_are_warnings() -> None:
    plan = check_plan(Plan((step(1, refs=(2,)), step(2))))
    assert the(plan, "REF_FORWARD").severity is Severity.WARNING
    plan = check_plan(Plan((step(1, 2), step(2))))
    assert the(plan, "DEPENDENCY_FORWARD").severity is Severity.WARNING


def test_a_cycle_is_an_error_that_names_it() -> None:
    plan = check_plan(Plan((step(1, 3), step(2, 1), step(3, 2))))
    found = the(plan, "CYCLE")
    assert found.severity is Severity.ERROR
    assert "1 \u2192 3 \u2192 2 \u2192 1" in found.message


def test_two_step_cycle_through_references_is_named() -> None:
    plan = check_plan(Plan((step(1, refs=(3,)), step(2), step(3, refs=(1,)))))
    assert "1 \u2192 3 \u2192 1" in the(plan, "CYCLE").message


def _has_cycle(edges: dict[int, tuple[int, ...]]) -> bool:
    """Kahn's algorithm: a graph has a cycle iff some step never loses its dependencies
    (self loops and steps not in the graph left out, as the check leaves them out)."""
    waiting = {n: {d for d in ds if d in edges and d != n} for n, ds in edges.items()}
    ready = [n for n, ds in waiting.items() if not ds]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m, ds in waiting.items():
            if n in ds:
                ds.discard(n)
                if not ds:
                    ready.append(m)
    return done < len(waiting)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.lists(st.integers(0, 7), max_size=3)),
                min_size=1, max_size=6))
def test_a_cycle_is_reported_exactly_when_the_dependencies_hold_one(
    drawn: list[tuple[int, list[int]]],
) -> None:
    # steps in any order (repeated numbers too), dependencies backward, forward, on
    # themselves or on no step
    plan = Plan(tuple(step(sid, *deps) for sid, deps in drawn))
    edges = {s.id: s.depends_on for s in plan.steps}
    cycles = [d for d in check_plan(plan).diagnostics if d.code == "CYCLE"]
    assert bool(cycles) == _has_cycle(edges), edges


def test_find_cycles_reports_each_cycle_once_and_handles_deep_chains() -> None:
    assert find_cycles({1: (2,), 2: (1,), 3: (3,)}) == [[1, 2]]
    chain = {i: (i - 1,) for i in range(1, 20_000)}
    chain[0] = (19_999,)
    (cycle,) = find_cycles(chain)
    assert len(cycle) == 20_000 and cycle[0] == 0


def test_hinted_references_are_reported() -> None:
    plan = parse_hashstep('#Task1: a\n#Task2: b\n#Tool2: t\n#Args2: {"x": "{step_1_site}"}\n')
    found = the(check_plan(plan), "REF_HINTED")
    assert found.step == 2 and "LLM fallback" in found.message


def test_checking_twice_adds_nothing() -> None:
    once = check_plan(Plan((step(1, refs=(9,)),)), CATALOG)
    assert check_plan(once, CATALOG) == once


def test_an_unknown_tool_is_an_error_with_close_names() -> None:
    plan = check_plan(Plan((step(1, tool="histroy"),)), CATALOG)
    found = the(plan, "TOOL_UNKNOWN")
    assert found.severity is Severity.ERROR and "'history'" in found.message


def test_reasoning_steps_are_not_checked_against_the_catalog() -> None:
    assert check_plan(Plan((step(1, tool=None),)), CATALOG).diagnostics == ()


def test_a_missing_required_argument_is_an_error() -> None:
    plan = parse_hashstep('#Task1: a\n#Agent1: iot\n#Tool1: history\n#Args1: {"site_name": "M"}\n')
    found = the(check_plan(plan, CATALOG), "ARGS_MISSING_REQUIRED")
    assert "'asset_id', 'start'" in found.message and found.step == 1


def test_a_referenced_required_argument_counts_as_given() -> None:
    plan = parse_hashstep(
        "#Task1: a\n#Tool1: sites\n#Args1: {}\n"
        '#Task2: b\n#Tool2: assets\n#Args2: {"site_name": "{step_1[0]}"}\n'
    )
    assert "ARGS_MISSING_REQUIRED" not in codes(check_plan(plan, CATALOG))


def test_positional_arguments_fill_the_first_parameters() -> None:
    s = Step(id=1, tool="history", positional=("MAIN", "A1"), lines=(1, 1))
    found = the(check_plan(Plan((s,)), CATALOG), "ARGS_MISSING_REQUIRED")
    assert "'start'" in found.message and "site_name" not in found.message


def test_an_argument_the_tool_does_not_take_is_a_warning() -> None:
    plan = parse_hashstep(
        '#Task1: a\n#Tool1: assets\n#Args1: {"site_name": "M", "asset_name": "C"}\n'
    )
    found = the(check_plan(plan, CATALOG), "ARGS_UNEXPECTED")
    assert found.severity is Severity.WARNING and "'asset_name'" in found.message


def test_a_tool_on_another_server_is_a_warning() -> None:
    plan = parse_hashstep("#Task1: a\n#Agent1: IoTAgent\n#Tool1: sites\n#Args1: {}\n")
    found = the(check_plan(plan, CATALOG), "TOOL_SERVER_MISMATCH")
    assert "IoTAgent" in found.message


def test_invalid_args_are_not_checked_again() -> None:
    plan = parse_hashstep('#Task1: a\n#Tool1: history\n#Args1: {"site_name": oops}\n')
    assert "ARGS_MISSING_REQUIRED" not in codes(check_plan(plan, CATALOG))


def test_a_dependency_added_from_task_text_must_name_an_earlier_step() -> None:
    plan = check_plan(
        parse_hashstep("#Task1: a\n#Tool1: sites\n#Task2: use {step_7} and {step_3}\n"
                       "#Tool2: none\n#Task3: c\n#Tool3: sites\n")
    )
    found = {(d.code, d.severity) for d in plan.diagnostics if d.step == 2}
    assert ("DEPENDENCY_MISSING", Severity.ERROR) in found
    assert ("DEPENDENCY_FORWARD", Severity.WARNING) in found


def test_dependencies_built_by_hand_are_checked_like_explicit_ones() -> None:
    plan = check_plan(Plan(steps=(Step(id=1, tool="t", depends_on=(4,)),)))
    assert [d.code for d in plan.diagnostics] == ["DEPENDENCY_MISSING"]


class AmbiguousCatalog(FakeCatalog):
    """A catalog holding ``sites`` on two servers: without a server it cannot tell."""

    def required_args(self, name: str, server: str | None = None) -> list[str]:
        if server is None:
            raise KeyError(f"{name!r} exists on several servers")
        return super().required_args(name, server)


def test_a_catalog_that_cannot_tell_which_tool_is_meant_gives_a_warning() -> None:
    plan = parse_hashstep("#Task1: a\n#Tool1: sites\n#Args1: {}\n")
    found = the(check_plan(plan, AmbiguousCatalog({"sites": ([], [])})), "TOOL_AMBIGUOUS")
    assert found.severity is Severity.WARNING and found.step == 1


def test_a_key_error_of_the_checks_own_code_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> NoReturn:
        raise KeyError("a bug")

    monkeypatch.setattr(checks, "_arg_checks", broken)
    plan = parse_hashstep("#Task1: a\n#Tool1: sites\n#Args1: {}\n")
    with pytest.raises(KeyError):
        check_plan(plan, CATALOG)
