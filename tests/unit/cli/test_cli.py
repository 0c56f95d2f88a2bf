"""The command line's parts without I/O (services/client): workflow files read and checked,
the plain and live views of a run, and every command line of the README parsed. The commands
against a real stack: tests/integration/test_cli.py."""

from __future__ import annotations

import io
import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from heddle.services.cli import render, watch
from heddle.services.cli.commands import COMMANDS
from heddle.services.cli.main import parser
from heddle.shared.api import documents
from rich.console import Console

from tests.support.stack import REPO
from tests.support.workflows import DEMO_YAML, FAILING


def test_documents(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(DEMO_YAML)
    doc = documents.run_request(str(path), run_id="r1")
    assert doc["runId"] == "r1" and [st["id"] for st in doc["steps"]] == ["A", "B", "C", "D"]
    path.write_text(json.dumps({"workflowId": "old", "steps": FAILING["steps"]}))
    assert documents.run_request(str(path), run_id="r2")["runId"] == "r2"  # the older name too
    path.write_text(json.dumps(FAILING))
    assert documents.run_request(str(path)) == FAILING
    path.write_text("steps: [\n")
    with pytest.raises(documents.BadDocument) as bad:
        documents.run_request(str(path))
    assert bad.value.lines()[0].startswith("line 2, column 1: neither JSON nor YAML")
    # YAML's own types are caught as the API would: a step id that is a number.
    path.write_text("steps: [{id: 7, command: true}]\n")
    with pytest.raises(documents.BadDocument) as bad:
        documents.run_request(str(path))
    assert bad.value.lines() == [
        "steps[0].id: step id must be a string",
        "steps[0].command: command must be a string",
    ]
    with pytest.raises(documents.BadDocument) as bad:
        documents.run_request(str(tmp_path / "missing.yaml"))
    assert "cannot read the file" in bad.value.lines()[0]


def _run(status: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runId": "r1",
        "status": status,
        "createdAt": "2026-01-01T00:00:00.000Z",
        "finishedAt": "2026-01-01T00:00:04.000Z" if status != "running" else None,
        "steps": steps,
    }


def _step(sid: str, status: str, attempt: int = 1, **more: Any) -> dict[str, Any]:
    return {"id": sid, "status": status, "attempt": attempt, **more}


def test_plain_watch_lines_and_live_view() -> None:
    out = io.StringIO()
    sink = watch.PlainSink(out)
    sink.update(_run("running", [_step("a", "pending", 0), _step("b", "pending", 0)]))
    started = "2026-01-01T00:00:01.000Z"
    sink.update(
        _run(
            "running",
            [_step("a", "running", runner="r-0", startedAt=started), _step("b", "pending", 0)],
        )
    )
    sink.update(_run("running", [_step("a", "running"), _step("b", "pending", 0)]))  # no change
    done = [
        _step(
            "a",
            "failed",
            reason="exit code 3",
            startedAt=started,
            finishedAt="2026-01-01T00:00:03.000Z",
        ),
        _step("b", "skipped", 0, reason="step a failed"),
    ]
    sink.update(_run("failed", done))
    assert out.getvalue().splitlines() == [
        "run r1 running: 2 steps",
        "step a running (attempt 1) on r-0",
        "step a failed in 2.0s: exit code 3",
        "step b skipped: step a failed",
        "run r1 failed in 4.0s (failed=1 skipped=1)",
    ]
    assert [watch.exit_code(_run(st, [])) for st in ("succeeded", "failed", "cancelled")] == [
        0,
        1,
        3,
    ]

    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    now = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    view = watch.live_view(
        _run(
            "running",
            [_step("a", "succeeded"), _step("b", "running", runner="r-1", startedAt=started)],
        ),
        now,
    )
    console.print(view)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "run r1  running  5.0s" in text and "1/2" in text
    assert "succeeded 1" in text and "running 1" in text
    assert "b" in text and "r-1" in text and "4.0s" in text


def test_examples_and_readme_commands() -> None:
    """The example files pass the checks, and every `heddle` line of the README's Command
    line section parses."""
    assert len(documents.run_request(str(REPO / "docs/examples/demo.yaml"))["steps"]) == 4
    assert documents.workflow(str(REPO / "docs/examples/etl.yaml"))["name"] == "etl"
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Command line\n", 1)[1].split("\n## ", 1)[0]
    lines = [
        cmd.strip()
        for line in section.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
        for cmd in line.split("#", 1)[0].split(";")
        if cmd.strip()
    ]
    assert len(lines) >= 12
    top = parser()
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "heddle"
        assert top.parse_args(words[1:]).command in COMMANDS, line


def test_a_workflow_s_timeout_is_checked_before_it_is_sent_and_its_deadline_shown(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text("name: wf\ntimeoutSeconds: 0\nsteps: [{id: a, command: 'sleep 30'}]\n")
    for read in (documents.run_request, documents.workflow):
        with pytest.raises(documents.BadDocument) as bad:
            read(str(path))
        assert bad.value.lines() == [
            "timeoutSeconds: timeoutSeconds must be a number above 0 and at most 604800"
        ]
    path.write_text("name: wf\ntimeoutSeconds: 600\nsteps: [{id: a, command: 'sleep 30'}]\n")
    assert documents.workflow(str(path))["timeoutSeconds"] == 600
    reason = "deadline: the run passed its timeoutSeconds (2 s)"
    run = {
        **_run("failed", [_step("a", "cancelled", reason=reason)]),
        "timeoutSeconds": 2,
        "deadlineAt": "2026-01-01T00:00:02.000Z",
        "reason": reason,
    }
    shown = render.run_view(run).splitlines()
    assert "deadline 2026-01-01T00:00:02.000Z (timeoutSeconds 2)" in shown
    assert f"reason: {reason}" in shown
    assert render.run_end(run) == f"run r1 failed in 4.0s (cancelled=1): {reason}"


def test_a_file_is_not_held_to_limits_the_gateway_sets(tmp_path: Path) -> None:
    """The step count and a command's size are the gateway's settings: a file past their
    defaults is the gateway's to refuse, and its structure is still checked here."""
    big = tmp_path / "big.json"
    steps = [{"id": f"s{i}", "command": "true"} for i in range(12_000)]
    steps[0]["command"] = "x" * 20_000
    big.write_text(json.dumps({"steps": steps}))
    assert len(documents.run_request(str(big))["steps"]) == 12_000
    steps[1]["dependsOn"] = ["nope"]
    big.write_text(json.dumps({"name": "big", "steps": steps}))
    with pytest.raises(documents.BadDocument) as err:
        documents.workflow(str(big))
    assert err.value.lines() == ["steps[1].dependsOn[0]: unknown step 'nope'"]


def test_a_run_too_big_for_one_document_is_shown_by_its_counts() -> None:
    """The summary of a run of more steps than a document holds has no steps, only counts:
    `status`, `watch` and the live view read those, and `status` lists the steps it was
    given (the first that did not succeed, read as a page)."""
    summary = {
        **_run("cancelled", []),
        "stepsIncluded": False,
        "stepCount": 12_000,
        "counts": {"succeeded": 2048, "cancelled": 9951, "failed": 1, "pending": 0},
    }
    assert render.step_counts(summary) == {"succeeded": 2048, "cancelled": 9951, "failed": 1}
    assert render.run_end(summary) == (
        "run r1 cancelled in 4.0s (succeeded=2048 failed=1 cancelled=9951)"
    )
    out = io.StringIO()
    watch.PlainSink(out).update(summary)
    assert out.getvalue().splitlines()[0] == "run r1 cancelled: 12000 steps"
    text = render.run_view(summary)
    assert "none failed, timed out, running or retrying" in text
    failed = _step("s7", "failed", reason="exit code 1")
    text = render.run_view({**summary, "steps": [failed]})
    assert "12000 steps, more than a document lists; listed: the first 1 failed," in text
    assert "exit code 1" in text.splitlines()[-1]
    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    console.print(watch.live_view({**summary, "status": "running"}))
    assert "12000/12000" in console.file.getvalue()  # type: ignore[attr-defined]


def test_a_key_given_twice_in_a_file_is_a_problem(tmp_path: Path) -> None:
    """JSON and YAML readers keep the last of two keys silently: a file that gives `steps`
    twice would run only the second list."""
    files = {
        "twice.json": '{"steps": [{"id": "a", "command": "x"}], "steps": []}',
        "twice.yaml": "steps:\n  - id: a\n    command: x\n    id: b\n",
    }
    found = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(documents.BadDocument) as err:
            documents.run_request(str(tmp_path / name))
        found += err.value.lines()
    assert found == [
        "(document): key 'steps' is given twice in one object; give it once",
        "line 4, column 5: key 'id' is given twice in one object; give it once",
    ]


def _instances(parent: str, statuses: list[str]) -> list[dict[str, Any]]:
    return [
        _step(f"{parent}[{k}]", status, parent=parent, itemIndex=k)
        for k, status in enumerate(statuses)
    ]


def test_status_lists_a_loop_s_instances_under_their_step() -> None:
    steps = [_step("each", "succeeded", 0, forEach="['a', 'b']"), _step("after", "succeeded")]
    steps += _instances("each", ["succeeded", "succeeded"])
    lines = render.run_view(_run("succeeded", steps)).splitlines()
    ids = [line.split()[0] for line in lines[lines.index("") + 2 :]]
    assert ids == ["each", "each[0]", "each[1]", "after"]
    assert lines[lines.index("") + 3].startswith("  each[0]")


def test_status_counts_a_long_loop_s_instances_on_one_line() -> None:
    statuses = ["succeeded"] * 11 + ["failed", "running"]
    steps = [_step("each", "failed", 0), *_instances("each", statuses)]
    text = render.run_view(_run("failed", steps))
    [line] = [line for line in text.splitlines() if line.startswith("  each[*]")]
    assert "13 instances: running=1 succeeded=11 failed=1" in line
    assert "  each[11]" in text  # the failed one, listed
    assert "each[0]" not in text


def test_status_says_why_the_run_and_its_steps_wait() -> None:
    busy = {"reason": "runners-busy", "sentence": "Every runner of pool default is busy (1 of 1)."}
    run = {
        **_run("running", [_step("a", "succeeded"), _step("b", "queued", waitingFor=busy)]),
        "waitingFor": {**busy, "sentence": f"Step b: {busy['sentence']}"},
    }
    lines = render.run_view(run).splitlines()
    assert "waiting: Step b: Every runner of pool default is busy (1 of 1)." in lines
    assert lines[-2:] == ["waiting:", "  b: Every runner of pool default is busy (1 of 1)."]
    assert "waiting" not in render.run_view(_run("running", [_step("a", "running")]))
