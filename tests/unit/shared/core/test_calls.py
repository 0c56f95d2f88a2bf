"""Calls of workflows, pure (shared/core/calls.py) and as a step's kind is checked
(shared/core/step_kinds.py): what a call names, cycles, a child's id, parameters and
outputs."""

from __future__ import annotations

import pytest
from heddle.shared.core.calls import (
    call_attempt,
    called_names,
    callee_problems,
    calls_of,
    child_params,
    child_run_id,
    cycle_problem,
    find_cycle,
    gathered_outputs,
    missing_reason,
)
from heddle.shared.core.namespaces import namespace_of
from heddle.shared.core.step_env import output_env
from heddle.shared.core.step_kinds import kind_problems
from heddle.shared.wire.contracts import ParamSpec, StepSpec, WorkflowCall
from heddle.shared.wire.names import ID_PATTERN

DECLARED = [ParamSpec(name="who"), ParamSpec(name="greeting", default="hi")]


def call(step: str, name: str, **fields: object) -> StepSpec:
    return StepSpec(id=step, workflow=WorkflowCall(name=name, **fields))  # type: ignore[arg-type]


def test_the_calls_of_a_document_are_found_with_their_paths() -> None:
    steps = [StepSpec(id="a", command="true"), call("b", "x")]
    on_exit = [call("c", "y")]
    assert [p for p, _ in calls_of(steps, on_exit)] == ["steps[1].workflow", "onExit[0].workflow"]
    assert called_names(steps, on_exit) == {"x", "y"}


def test_what_a_call_names_is_checked_against_the_registry() -> None:
    calls = calls_of(
        [
            call("a", "child", params={"who": "ann"}),
            call("b", "nobody"),
            call("c", "child", version=9),
            call("d", "child", version=1, params={"colour": "red"}),
        ]
    )
    found = callee_problems(calls, {"child": 2}, {("child", 2): DECLARED, ("child", 1): []}, "ns")
    assert [(p.path, p.message) for p in found] == [
        ("steps[1].workflow.name", "workflow 'nobody' is not registered in namespace 'ns'"),
        ("steps[2].workflow.version", "workflow 'child' has no version 9"),
        (
            "steps[3].workflow.params.colour",
            "workflow 'child' version 1 declares no parameter 'colour'",
        ),
    ]
    missing = callee_problems(
        calls_of([call("a", "child")]), {"child": 2}, {("child", 2): DECLARED}, "ns"
    )
    assert [p.message for p in missing] == [
        "parameter 'who' of workflow 'child' has no default: give it"
    ]


def test_a_cycle_is_found_shortest_first_and_named() -> None:
    assert find_cycle("a", {"a": ["b"], "b": ["c"], "c": []}) is None
    assert find_cycle("a", {"a": ["a"]}) == ["a", "a"]
    assert find_cycle("b", {"b": ["a"], "a": ["b"]}) == ["b", "a", "b"]
    long_and_short = {"a": ["b", "c"], "b": ["d"], "d": ["a"], "c": ["a"]}
    assert find_cycle("a", long_and_short) == ["a", "c", "a"]
    assert find_cycle("a", {"a": ["b"], "b": ["c"], "c": ["b"]}) is None  # not through a
    assert cycle_problem(["a", "a"]).message == "workflow 'a' would call itself"
    assert cycle_problem(["b", "a", "b"]).message == "workflow 'b' would call itself: b -> a -> b"


@pytest.mark.parametrize("parent", ["r1", "team-a=" + "x" * 64, "y" * 64])
def test_a_child_run_id_is_the_same_each_time_valid_and_in_the_parents_namespace(
    parent: str,
) -> None:
    child = child_run_id(parent, "s" * 64, 12)
    assert child == child_run_id(parent, "s" * 64, 12)
    assert child != child_run_id(parent, "s" * 64, 13)
    assert namespace_of(child) == namespace_of(parent)
    assert ID_PATTERN.match(child.rpartition("=")[2])
    assert call_attempt(child) == 12


def test_a_child_takes_the_defaults_it_is_not_given_and_gathers_its_outputs() -> None:
    given = WorkflowCall(name="child", params={"who": "ann"})
    assert child_params(given, DECLARED) == {"who": "ann", "greeting": "hi"}
    outputs = gathered_outputs([("make", {"word": "w"}), ("none", {}), ("b-2", {"k": "v"})])
    assert outputs == {"make_word": "w", "b-2_k": "v"}
    # A step after the call step ``call`` reads them as HEDDLE_OUT_CALL_<STEP>_<KEY>.
    assert output_env("call", "make_word") == "HEDDLE_OUT_CALL_MAKE_WORD"


def test_a_call_step_is_checked_as_a_kind() -> None:
    def found(step: dict[str, object]) -> list[tuple[str, str]]:
        return [(p.path, p.message) for p in kind_problems(step, "steps[0]")]

    assert found({"id": "a", "workflow": {"name": "x", "params": {"p": "1"}}}) == []
    assert found({"id": "a", "workflow": {"name": "x"}, "command": "true"}) == [
        ("steps[0]", "a step has one of command, approval and workflow, not command and workflow")
    ]
    assert found({"id": "a", "workflow": {"name": "x"}, "runsOn": ["gpu"]}) == [
        ("steps[0].runsOn", "a step with workflow runs on no runner: no runsOn")
    ]
    bad = {"name": "no spaces", "version": 0, "params": {"p": 1}, "extra": True}
    assert found({"id": "a", "workflow": bad}) == [
        ("steps[0].workflow.extra", "unknown field"),
        ("steps[0].workflow.name", "name must be a registered workflow's name"),
        ("steps[0].workflow.version", "version must be an integer >= 1"),
        ("steps[0].workflow.params", "params must map names to string values"),
    ]
    assert found({"id": "a", "workflow": "x"}) == [
        ("steps[0].workflow", "workflow must be an object with the name of a workflow")
    ]


def test_a_parameter_made_required_since_the_check_stops_the_child() -> None:
    given = WorkflowCall(name="child", params={"who": "ann"})
    assert missing_reason(given, DECLARED, 2) is None
    needs = [*DECLARED, ParamSpec(name="when"), ParamSpec(name="where")]
    assert missing_reason(given, needs, 3) == (
        "workflow 'child' version 3 needs 'when', 'where', which the call does not give"
    )
