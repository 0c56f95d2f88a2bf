"""shared/core/validation.py: every problem in a workflow document, each located by its path."""

from __future__ import annotations

from typing import Any

import pytest
from heddle.shared.core.step_checks import MAX_RETRIES, MAX_TIMEOUT
from heddle.shared.core.validation import (
    Limits,
    parse_run_request,
    parse_workflow,
    submit_problems,
    workflow_problems,
)
from heddle.shared.wire.contracts import RunRequest, StepSpec, SubmitRun, WorkflowSpec
from heddle.shared.wire.errors import InvalidWorkflow, Problem

LIMITS = Limits()
SMALL = Limits(max_steps=3, max_command_bytes=10)


def step(step_id: object = "a", command: object = "true", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "command": command, **extra}


def doc(*steps: Any, **top: Any) -> dict[str, Any]:
    return {"name": "wf", "steps": list(steps) or [step()], **top}


def without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


# ---- one problem at a time --------------------------------------------------------------

SINGLE = [
    # (document, limits, path, words the message must contain)
    ([1, 2], LIMITS, "", ["JSON object"]),
    (doc(colour="blue"), LIMITS, "colour", ["unknown field", "'colour'"]),
    (doc(step(shell="bash")), LIMITS, "steps[0].shell", ["unknown field", "'shell'"]),
    (without(doc(), "steps"), LIMITS, "steps", ["missing"]),
    (doc(steps={"a": 1}), LIMITS, "steps", ["list"]),
    (doc(steps=[]), LIMITS, "steps", ["at least one"]),
    (doc(steps=[step(f"s{i}") for i in range(4)]), SMALL, "steps", ["4 steps", "limit is 3"]),
    (doc("echo hi"), LIMITS, "steps[0]", ["object"]),
    (doc(without(step(), "id")), LIMITS, "steps[0].id", ["missing"]),
    (doc(without(step(), "command")), LIMITS, "steps[0].command", ["missing"]),
    (doc(step(7)), LIMITS, "steps[0].id", ["string"]),
    (doc(step("has space")), LIMITS, "steps[0].id", ["'has space'", "[A-Za-z0-9_-]"]),
    (doc(step("")), LIMITS, "steps[0].id", ["''"]),
    (doc(step("x" * 65)), LIMITS, "steps[0].id", ["x" * 65]),
    (doc(step("dot.ted")), LIMITS, "steps[0].id", ["'dot.ted'"]),
    (doc(step(command=["ls"])), LIMITS, "steps[0].command", ["string"]),
    (doc(step(command="  \n")), LIMITS, "steps[0].command", ["empty"]),
    (doc(step(command="echo a\x00b")), LIMITS, "steps[0].command", ["NUL"]),
    (doc(step(command="x" * 11)), SMALL, "steps[0].command", ["11 bytes", "limit is 10"]),
    (doc(step(command="é" * 6)), SMALL, "steps[0].command", ["12 bytes", "limit is 10"]),
    (doc(step(dependsOn="a")), LIMITS, "steps[0].dependsOn", ["list"]),
    (
        doc(step("a"), step("b", dependsOn=["a", 3])),
        LIMITS,
        "steps[1].dependsOn[1]",
        ["step id string"],
    ),
    (doc(step(retries=-1)), LIMITS, "steps[0].retries", ["0 to 100"]),
    (doc(step(retries=MAX_RETRIES + 1)), LIMITS, "steps[0].retries", ["0 to 100"]),
    (doc(step(retries="3")), LIMITS, "steps[0].retries", ["integer"]),
    (doc(step(retries=True)), LIMITS, "steps[0].retries", ["integer"]),
    (doc(step(retries=1.5)), LIMITS, "steps[0].retries", ["integer"]),
    (doc(step(timeoutSeconds=0)), LIMITS, "steps[0].timeoutSeconds", ["above 0"]),
    (doc(step(timeoutSeconds=-5)), LIMITS, "steps[0].timeoutSeconds", ["above 0"]),
    (
        doc(step(timeoutSeconds=MAX_TIMEOUT + 1)),
        LIMITS,
        "steps[0].timeoutSeconds",
        [str(MAX_TIMEOUT)],
    ),
    (doc(step(timeoutSeconds="60")), LIMITS, "steps[0].timeoutSeconds", ["number"]),
    (doc(step(timeoutSeconds=True)), LIMITS, "steps[0].timeoutSeconds", ["number"]),
    # The workflow's own: its runs' deadline (docs/workflows.md, "Run deadlines").
    (doc(timeoutSeconds=0), LIMITS, "timeoutSeconds", ["above 0"]),
    (doc(timeoutSeconds=-1), LIMITS, "timeoutSeconds", ["above 0"]),
    (doc(timeoutSeconds=MAX_TIMEOUT + 1), LIMITS, "timeoutSeconds", [str(MAX_TIMEOUT)]),
    (doc(timeoutSeconds="600"), LIMITS, "timeoutSeconds", ["number"]),
    (doc(timeoutSeconds=False), LIMITS, "timeoutSeconds", ["number"]),
    (doc(timeoutSeconds=[600]), LIMITS, "timeoutSeconds", ["number"]),
    (doc(name="my workflow"), LIMITS, "name", ["'my workflow'"]),
    (doc(name=5), LIMITS, "name", ["string"]),
    (doc(description=5), LIMITS, "description", ["string"]),
    (doc(schedule="* * * * * *"), LIMITS, "schedule", ["5 fields"]),
    (doc(schedule="61 * * * *"), LIMITS, "schedule", ["not a valid cron"]),
    (doc(schedule=5), LIMITS, "schedule", ["string"]),
    (doc(timezone="Mars/Olympus"), LIMITS, "timezone", ["'Mars/Olympus'"]),
    (doc(catchup="yes"), LIMITS, "catchup", ["true or false"]),
    (doc(step("a"), step("a")), LIMITS, "steps[1].id", ["duplicate", "'a'"]),
    (
        doc(step("a"), step("b", dependsOn=["ghost"])),
        LIMITS,
        "steps[1].dependsOn[0]",
        ["unknown", "'ghost'"],
    ),
    (doc(step("a", dependsOn=["a"])), LIMITS, "steps[0].dependsOn[0]", ["itself"]),
    (doc(step("a"), step("b", dependsOn=["a", "a"])), LIMITS, "steps[1].dependsOn[1]", ["twice"]),
    (
        doc(step("a", dependsOn=["b"]), step("b", dependsOn=["a"])),
        LIMITS,
        "steps[0].dependsOn",
        ["cycle", "a -> b -> a"],
    ),
]


@pytest.mark.parametrize(
    ("document", "limits", "path", "words"),
    SINGLE,
    ids=[f"{i}-{c[2] or 'body'}" for i, c in enumerate(SINGLE)],
)
def test_each_problem_is_located_and_named(
    document: object, limits: Limits, path: str, words: list[str]
) -> None:
    problems = workflow_problems(document, limits)
    assert [p.path for p in problems] == [path], problems
    for word in words:
        assert word in problems[0].message


@pytest.mark.parametrize("bad_id", ["abc\n", "a\nb", "ab\r", "\u0430bc", "ab\t"])
def test_step_id_must_match_the_whole_pattern(bad_id: str) -> None:
    # Ids end up in NATS subjects and KV keys: a trailing newline must not slip through.
    problems = workflow_problems(doc(step(bad_id)), LIMITS)
    assert [p.path for p in problems] == ["steps[0].id"]


@pytest.mark.parametrize(
    "document",
    [
        doc(step(retries=0)),
        doc(step(retries=MAX_RETRIES)),
        doc(step(timeoutSeconds=0.5)),
        doc(step(timeoutSeconds=MAX_TIMEOUT)),
        doc(timeoutSeconds=0.5),
        doc(timeoutSeconds=MAX_TIMEOUT),
        doc(step("x" * 64)),
        doc(step("A-z_0-9")),
        doc(step(command="x" * 10)),
        doc(step(command="é" * 5)),
        doc(step(dependsOn=[])),
        doc(schedule="*/5 * * * 1-5", timezone="Europe/Paris", catchup=False, description="d"),
        doc(steps=[step("s0"), step("s1"), step("s2")]),
    ],
    ids=lambda d: str(d)[:60],
)
def test_boundary_values_are_accepted(document: dict[str, Any]) -> None:
    assert workflow_problems(document, SMALL) == []


def test_every_problem_in_one_document_is_reported() -> None:
    document = {
        "name": "bad name",
        "colour": "red",
        "schedule": "* * *",
        "timezone": "Nowhere/Land",
        "steps": [
            step("a", retries=500),
            step("b", command="", extra=1),
            step("c", dependsOn=["a", "ghost"], timeoutSeconds=-1),
            step("a", command="x" * 11),
        ],
    }
    limits = Limits(max_steps=4, max_command_bytes=10)
    problems = workflow_problems(document, limits)
    assert sorted(p.path for p in problems) == sorted(
        [
            "colour",
            "name",
            "schedule",
            "timezone",
            "steps[0].retries",
            "steps[1].extra",
            "steps[1].command",
            "steps[2].timeoutSeconds",
            "steps[3].command",
            "steps[2].dependsOn[1]",
            "steps[3].id",
        ]
    )
    with pytest.raises(InvalidWorkflow) as info:
        parse_workflow(document, limits)
    assert info.value.problems == problems


# ---- parse_workflow and parse_run_request -------------------------------------------------


def test_parse_workflow_builds_the_spec() -> None:
    spec = parse_workflow(
        doc(
            step("a", retries=2),
            step("b", "make", dependsOn=["a"], timeoutSeconds=30),
            schedule="0 9 * * *",
            timezone="UTC",
        ),
        LIMITS,
    )
    assert isinstance(spec, WorkflowSpec)
    assert spec.name == "wf" and spec.schedule == "0 9 * * *" and spec.timezone == "UTC"
    assert spec.steps == [
        StepSpec(id="a", command="true", retries=2),
        StepSpec(id="b", command="make", depends_on=["a"], timeout_seconds=30),
    ]


def test_parse_workflow_requires_a_name_unless_told_not_to() -> None:
    nameless = without(doc(), "name")
    with pytest.raises(InvalidWorkflow) as info:
        parse_workflow(nameless, LIMITS)
    assert info.value.problems == [Problem("name", "missing required field")]
    assert parse_workflow(nameless, LIMITS, name_required=False).name is None
    assert workflow_problems(nameless, LIMITS) == []


@pytest.mark.parametrize(
    ("extra", "paths"),
    [
        ({}, []),
        ({"runId": "run-1"}, []),
        ({"workflowId": "run-1"}, []),
        ({"runId": "run-1", "workflowId": "run-1"}, []),
        ({"runId": "run 1"}, ["runId"]),
        ({"workflowId": 12}, ["workflowId"]),
        ({"runId": "r1", "workflowId": "r2"}, ["workflowId"]),
        ({"runId": "bad id", "other": 1}, ["other", "runId"]),
    ],
)
def test_parse_run_request(extra: dict[str, Any], paths: list[str]) -> None:
    body = {"steps": [step()], **extra}
    if not paths:
        request = parse_run_request(body, LIMITS)
        assert isinstance(request, RunRequest)
        assert request.run_id == extra.get("runId")
        assert request.workflow_id == extra.get("workflowId")
        return
    with pytest.raises(InvalidWorkflow) as info:
        parse_run_request(body, LIMITS)
    assert sorted(p.path for p in info.value.problems) == paths


def test_run_request_still_reports_step_problems_with_its_own() -> None:
    body = {"runId": "r 1", "steps": [step("a", dependsOn=["ghost"])]}
    with pytest.raises(InvalidWorkflow) as info:
        parse_run_request(body, LIMITS)
    assert [p.path for p in info.value.problems] == ["steps[0].dependsOn[0]", "runId"]


def test_workflow_documents_do_not_accept_run_fields() -> None:
    assert [p.path for p in workflow_problems(doc(runId="r1"), LIMITS)] == ["runId"]


def test_a_direct_submit_with_a_nul_in_a_command_is_refused() -> None:
    # The orchestrator checks submits that did not come through the gateway the same way.
    steps = [StepSpec(id="a", command="true"), StepSpec(id="b", command="echo \x00")]
    cmd = SubmitRun(run_id="r1", steps=steps, submitted_at="2025-01-01T00:00:00.000Z")
    problems = submit_problems(cmd, LIMITS)
    assert [p.path for p in problems] == ["steps[1].command"] and "NUL" in problems[0].message


def test_a_workflow_s_timeout_reaches_its_spec_its_run_request_and_is_checked_in_submits() -> None:
    assert parse_workflow(doc(timeoutSeconds=600), LIMITS).timeout_seconds == 600
    assert parse_workflow(doc(), LIMITS).timeout_seconds is None
    body = {"steps": [step()], "timeoutSeconds": 2.5}
    assert parse_run_request(body, LIMITS).timeout_seconds == 2.5
    with pytest.raises(InvalidWorkflow) as info:
        parse_run_request({**body, "timeoutSeconds": 0}, LIMITS)
    assert [p.path for p in info.value.problems] == ["timeoutSeconds"]
    # A submit that did not come through the gateway is checked the same way.
    cmd = SubmitRun(
        run_id="r1",
        steps=[StepSpec(id="a", command="true")],
        submitted_at="2025-01-01T00:00:00.000Z",
        timeout_seconds=MAX_TIMEOUT * 2,
    )
    assert [p.path for p in submit_problems(cmd, LIMITS)] == ["timeoutSeconds"]


def test_invalid_workflow_message_summarises_the_problems() -> None:
    with pytest.raises(InvalidWorkflow, match=r"2 problem\(s\): colour: unknown field"):
        parse_workflow(doc(colour=1, size=2), LIMITS)


# ---- size --------------------------------------------------------------------------------


def test_50000_step_chain_validates() -> None:
    steps = [step(f"s{i}", dependsOn=[f"s{i - 1}"] if i else []) for i in range(50_000)]
    assert workflow_problems(doc(*steps), Limits(max_steps=50_000)) == []
    problems = workflow_problems(doc(*steps), LIMITS)
    assert problems == [Problem("steps", "50000 steps; the limit is 10000")]


def test_5000_wide_fan_out_validates() -> None:
    mids = [step(f"m{i}", dependsOn=["root"]) for i in range(5000)]
    join = step("join", dependsOn=[f"m{i}" for i in range(5000)])
    spec = parse_workflow(doc(step("root"), *mids, join), LIMITS)
    assert len(spec.steps) == 5002 and len(spec.steps[-1].depends_on) == 5000


def test_runs_on_is_a_list_of_labels_every_problem_named() -> None:
    from heddle.shared.core.step_checks import Limits
    from heddle.shared.core.validation import parse_run_request
    from heddle.shared.wire.errors import InvalidWorkflow

    doc = {
        "steps": [
            {"id": "a", "command": "x", "runsOn": ["gpu", "a.b", "gpu"]},
            {"id": "b", "command": "y", "runsOn": "gpu"},
            {"id": "c", "command": "z", "runsOn": ["gpu", "a100"]},
        ]
    }
    with pytest.raises(InvalidWorkflow) as exc:
        parse_run_request(doc, Limits())
    paths = [p.path for p in exc.value.problems]
    assert paths == ["steps[0].runsOn", "steps[0].runsOn", "steps[1].runsOn"]
    ok = parse_run_request({"steps": [doc["steps"][2]]}, Limits())
    assert ok.steps[0].runs_on == ["gpu", "a100"]
