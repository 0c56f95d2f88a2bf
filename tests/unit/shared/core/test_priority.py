"""A run's priority without I/O: its check in every document that gives one (shared/core/
priority.py, validation.py, the trigger's inputs), the value carried from the submit to the
run record, its ready messages and a retry, the count of waiting runs ahead of a run, and
how the command line takes and shows it. Through the services:
tests/integration/test_run_priority.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from heddle.services.cli import render
from heddle.services.cli.main import parser
from heddle.services.gateway.handlers.run_inputs import body_problems, trigger_inputs
from heddle.services.orchestrator.decisions import Enqueue
from heddle.shared.api import documents
from heddle.shared.core.priority import behind_reason, higher_priority_ahead, priority_problems
from heddle.shared.core.retries import retry_command
from heddle.shared.core.validation import (
    Limits,
    parse_run_request,
    parse_workflow,
    submit_problems,
)
from heddle.shared.wire.contracts import (
    RunRecord,
    RunRequest,
    StepReady,
    StepSpec,
    SubmitRun,
    WorkflowSpec,
    encode,
)
from heddle.shared.wire.errors import InvalidWorkflow
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import T0, made

STEPS = [{"id": "a", "command": "true"}]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# ---- the check ----


@pytest.mark.parametrize("value", [0, 1, -1, 1000, -1000, 37])
def test_an_integer_within_the_bounds_is_a_priority(value: int) -> None:
    assert priority_problems(value) == []
    assert parse_run_request({"steps": STEPS, "priority": value}, Limits()).priority == value
    assert parse_workflow({"name": "w", "steps": STEPS, "priority": value}, Limits()).priority == (
        value
    )


@pytest.mark.parametrize("value", [1001, -1001, 10**9, 1.5, 2.0, "5", None, True, False, [1]])
def test_anything_else_is_refused_naming_the_bounds(value: Any) -> None:
    (problem,) = priority_problems(value)
    assert problem.path == "priority"
    assert "-1000 to 1000" in problem.message and repr(value) in problem.message


def test_a_bad_priority_is_listed_with_every_other_problem() -> None:
    doc = {"steps": [{"id": "a b", "command": "true"}], "priority": 5000, "timeoutSeconds": -1}
    for parse in (parse_run_request, parse_workflow):
        with pytest.raises(InvalidWorkflow) as bad:
            parse({"name": "w", **doc}, Limits())
        assert {p.path for p in bad.value.problems} == {"priority", "timeoutSeconds", "steps[0].id"}


def test_a_submit_that_came_another_way_is_held_to_the_same_bounds() -> None:
    cmd = SubmitRun(run_id="r", steps=[StepSpec(id="a", command="true")], submitted_at="x")
    assert submit_problems(cmd, Limits()) == []
    high = msgspec.structs.replace(cmd, priority=1001)
    assert [p.path for p in submit_problems(high, Limits())] == ["priority"]


def test_a_trigger_gives_a_priority_over_the_workflows_or_none() -> None:
    spec = WorkflowSpec(steps=[], priority=3)
    assert body_problems({"priority": 1}) == []
    assert trigger_inputs({}, None, spec, NOW).priority is None  # the workflow's, then
    assert trigger_inputs({"priority": -7}, None, spec, NOW).priority == -7
    assert trigger_inputs({"priority": 0}, None, spec, NOW).priority == 0  # 0 given wins too
    bad = trigger_inputs({"priority": "high", "params": {"x": "1"}}, None, spec, NOW)
    assert bad.priority is None
    assert [p.path for p in bad.problems] == ["params.x", "priority"]


# ---- carried ----


def test_the_default_is_left_out_on_the_wire_and_a_priority_is_carried() -> None:
    assert b"priority" not in encode(RunRequest(steps=[]))
    assert b'"priority":4' in encode(RunRequest(steps=[], priority=4))
    cmd = SubmitRun(
        run_id="run-1",
        submitted_at=from_epoch(T0),
        steps=[StepSpec(id="a", command="true"), StepSpec(id="b", command="true")],
        priority=12,
    )
    state, effects = made(cmd)
    assert state.run.priority == 12 and b'"priority":12' in encode(state.run)
    ready = [e.ready for e in effects if isinstance(e, Enqueue)]
    assert [r.priority for r in ready] == [12, 12]
    plain, effects = made(msgspec.structs.replace(cmd, priority=0))
    assert plain.run.priority == 0 and b"priority" not in encode(plain.run)
    sent = [encode(e.ready) for e in effects if isinstance(e, Enqueue)]
    assert sent and all(b"priority" not in m for m in sent)
    assert msgspec.json.decode(sent[0], type=StepReady).priority == 0


def test_a_waiting_run_admitted_queues_its_steps_with_its_priority() -> None:
    cmd = SubmitRun(
        run_id="run-1",
        submitted_at=from_epoch(T0),
        steps=[StepSpec(id="a", command="true")],
        priority=-4,
    )
    state, effects = made(cmd, admitted=False)
    assert state.run.waiting and not [e for e in effects if isinstance(e, Enqueue)]
    (ready,) = [e.ready for e in state.admit(T0 + 1) if isinstance(e, Enqueue)]
    assert ready.priority == -4


def test_a_retry_keeps_its_runs_priority() -> None:
    run = RunRecord(run_id="r", status="failed", created_at=from_epoch(T0), step_count=0)
    run.priority = 9
    assert retry_command(run, [], from_epoch(T0 + 1)).priority == 9


# ---- runs ahead ----


def waiting(run_id: str, priority: int, **fields: Any) -> RunRecord:
    fields = {"waiting": True, "status": "running", **fields}
    return RunRecord(
        run_id=run_id, created_at=from_epoch(T0), step_count=1, priority=priority, **fields
    )


def test_a_waiting_run_is_behind_the_waiting_runs_of_higher_priority_alone() -> None:
    me = waiting("me", 5)
    others = [
        waiting("higher", 6),
        waiting("highest", 1000),
        waiting("same", 5),  # older or not: counted by the queue's order, not as higher
        waiting("lower", -2),
        waiting("under-way", 50, waiting=False),
        waiting("ended", 50, waiting=False, status="cancelled"),
        waiting("keyed", 50, concurrency_wait="deploy/prod"),  # in its key's line, not this
        waiting("quota", 50, quota_wait=True),  # in its namespace's quota's line, likewise
        me,
    ]
    assert higher_priority_ahead(me, others) == 2
    assert higher_priority_ahead(waiting("low", -1000), others) == 5  # "me" too
    assert higher_priority_ahead(waiting("top", 1000), others) == 0
    assert higher_priority_ahead(me, []) == 0


def test_the_reason_counts_the_runs_ahead() -> None:
    assert behind_reason(3) == "behind 3 runs of higher priority"
    assert behind_reason(1) == "behind 1 run of higher priority"


# ---- the command line ----


def test_the_command_line_takes_a_priority_and_checks_it_before_sending(tmp_path: Any) -> None:
    top = parser()
    assert top.parse_args(["submit", "f.yaml", "--priority", "-5"]).priority == -5
    assert top.parse_args(["run", "etl", "--priority", "10"]).priority == 10
    args = top.parse_args(["trigger", "etl", "--priority", "1000"])
    assert args.priority == 1000 and args.name == "etl"
    assert top.parse_args(["submit", "f.yaml"]).priority is None
    for bad in ("1001", "high", "1.5", ""):
        with pytest.raises(SystemExit) as exit_:
            top.parse_args(["submit", "f.yaml", "--priority", bad])
        assert exit_.value.code == 2
    path = tmp_path / "wf.json"
    path.write_text('{"steps": [{"id": "a", "command": "true"}], "priority": 3}')
    assert documents.run_request(str(path))["priority"] == 3
    assert documents.run_request(str(path), priority=-8)["priority"] == -8  # over the file's
    path.write_text('{"steps": [{"id": "a", "command": "true"}], "priority": 3000}')
    with pytest.raises(documents.BadDocument) as bad:
        documents.run_request(str(path))
    assert bad.value.lines() == [
        "priority: priority must be an integer from -1000 to 1000, not 3000"
    ]


def test_the_command_line_shows_a_priority_other_than_the_default() -> None:
    base = {"runId": "r1", "createdAt": from_epoch(T0), "status": "running", "steps": []}
    listed = [
        {**base, "priority": 10, "waiting": True},
        {**base, "priority": 0},
        {**base, "priority": -3, "status": "succeeded", "finishedAt": from_epoch(T0 + 1)},
    ]
    lines = render.runs_view(listed).splitlines()
    assert "running, waiting, priority 10" in lines[1]
    assert "priority" not in lines[2]
    assert "succeeded, priority -3" in lines[3]
    assert (
        render.run_view(listed[0])
        .splitlines()[0]
        .startswith("run r1: running, waiting, priority 10")
    )
    assert "priority" not in render.run_view(listed[1])
