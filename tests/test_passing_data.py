"""Passing data into and between steps, through all four services (docs/workflows.md,
"Passing data"): parameters, the cron slot, static env, step outputs."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from heddle.shared.core.cron_plan import scheduled_run_id
from heddle.shared.wire.timefmt import rfc3339

from tests.conftest import StackFactory
from tests.stack import step_of

SHOW = 'printf "%s|%s|%s|%s" "$HEDDLE_PARAM_REGION" "$HEDDLE_PARAM_START_DATE" "$GREETING" "$WHO"'


async def test_parameters_and_static_env_reach_the_command_as_variables_only(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    marker = tmp_path / "injected"
    doc = {
        "name": "params",
        "params": [
            {"name": "region", "default": "eu", "description": "where to run"},
            {"name": "start-date"},
        ],
        "env": {"GREETING": "hello", "WHO": "workflow"},
        "steps": [{"id": "show", "command": SHOW, "env": {"WHO": "step"}}],
    }
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == 201, body
    hostile = f"$(touch {marker}); `touch {marker}`"
    status, body = await s.request(
        "POST", "/api/workflows/params/runs", json={"params": {"start-date": hostile}}
    )
    assert status == 201, body
    run = await s.wait_run(body["runId"])
    assert run["status"] == "succeeded", run
    assert step_of(run, "show")["stdoutTail"] == f"eu|{hostile}|hello|step"
    assert not marker.exists()
    assert run["params"] == {"region": "eu", "start-date": hostile}
    # Unknown and missing parameters: one 400 that lists every problem.
    status, body = await s.request(
        "POST", "/api/workflows/params/runs", json={"params": {"colour": "red", "size": 1}}
    )
    assert status == 400, body
    assert [(p["path"], p["message"]) for p in body["problems"]] == [
        ("params.colour", "unknown parameter 'colour' (declared: region, start-date)"),
        ("params.size", "unknown parameter 'size' (declared: region, start-date)"),
        ("params.start-date", "missing required parameter 'start-date'"),
    ]
    # An inline run takes values as an object.
    run_id = await s.submit(
        {"steps": [{"id": "a", "command": 'echo "$HEDDLE_PARAM_X"'}], "params": {"x": hostile}}
    )
    run = await s.wait_run(run_id)
    assert (run["status"], step_of(run, "a")["stdoutTail"]) == ("succeeded", hostile)
    assert not marker.exists()
    status, body = await s.request(
        "POST", "/api/runs", json={"steps": doc["steps"], "env": {"HEDDLE_X": "1", "": "2"}}
    )
    assert status == 400 and [p["path"] for p in body["problems"]] == ["env.HEDDLE_X", 'env[""]']


OUTPUTS_RUN = {
    "steps": [
        {
            "id": "a",
            "command": "echo tag=v1 >> $HEDDLE_OUTPUTS; "
            "printf 'notes<<EOF\\nline 1\\nline 2\\nEOF\\n' >> $HEDDLE_OUTPUTS",
        },
        {"id": "b", "command": "true", "dependsOn": ["a"]},
        {
            "id": "c",
            "command": 'printf "%s|%s" "$HEDDLE_OUT_A_TAG" "$HEDDLE_OUT_A_NOTES"',
            "dependsOn": ["b"],
        },
        {
            "id": "flaky",
            "retries": 1,
            "command": 'if [ "$HEDDLE_ATTEMPT" = 1 ]; then echo leaked=yes >> $HEDDLE_OUTPUTS; '
            "exit 1; fi; echo second=yes >> $HEDDLE_OUTPUTS",
        },
        {
            "id": "after",
            "command": 'echo "[${HEDDLE_OUT_FLAKY_LEAKED-unset}][$HEDDLE_OUT_FLAKY_SECOND]"',
            "dependsOn": ["flaky"],
        },
        {"id": "malformed", "command": "echo 'no equals sign' >> $HEDDLE_OUTPUTS"},
        {
            "id": "huge",
            "command": "printf 'k=' >> $HEDDLE_OUTPUTS; "
            "head -c 70000 /dev/zero | tr '\\0' x >> $HEDDLE_OUTPUTS",
        },
    ]
}


async def test_outputs_pass_downstream_and_only_from_a_success(stack: StackFactory) -> None:
    s = await stack(runners=2)
    run = await s.wait_run(await s.submit(OUTPUTS_RUN), timeout=60)
    assert run["status"] == "failed"  # malformed and huge
    a = step_of(run, "a")
    assert a["outputs"] == {"tag": "v1", "notes": "line 1\nline 2"}
    assert a["attempts"][-1]["outputs"] == a["outputs"]
    # Read two levels down.
    assert step_of(run, "c")["stdoutTail"] == "v1|line 1\nline 2"
    # The first attempt wrote an output and failed: it is not passed on.
    flaky = step_of(run, "flaky")
    assert (flaky["status"], flaky["attempt"]) == ("succeeded", 2)
    assert flaky["outputs"] == {"second": "yes"} and "outputs" not in flaky["attempts"][0]
    assert step_of(run, "after")["stdoutTail"] == "[unset][yes]"
    bad = step_of(run, "malformed")
    assert bad["status"] == "failed" and bad["exitCode"] == 0
    assert bad["reason"] == (
        "bad outputs: line 1: neither key=value nor key<<DELIMITER: 'no equals sign'"
    )
    huge = step_of(run, "huge")
    assert huge["status"] == "failed"
    # Killed once the runner found the file past the limit: its size then, 70002 at most.
    too_large = re.fullmatch(
        r"bad outputs: the outputs file is (\d+) bytes; the limit is 65536 "
        r"\(HEDDLE_OUTPUTS_MAX_BYTES\)",
        huge["reason"],
    )
    assert too_large and 65536 < int(too_large[1]) <= 70002, huge["reason"]
    assert huge["outputs"] == {} and bad["outputs"] == {}


async def test_backfilled_slots_tell_their_steps_which_slot(stack: StackFactory) -> None:
    # The orchestrator starts after the registration: with its clock at 60x, the seconds in
    # between are minutes of missed slots, backfilled at its first tick.
    s = await stack(
        runners=2,
        services=("dispatcher", "gateway"),
        HEDDLE_CRON_TICK="0.1",
        HEDDLE_CRON_TIME_SCALE="60",
    )
    doc = {
        "name": "daily",
        "schedule": "* * * * *",
        "timezone": "Europe/Paris",
        "steps": [{"id": "slot", "command": 'echo "$HEDDLE_SCHEDULED_FOR $HEDDLE_SCHEDULED_TZ"'}],
    }
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == 201, body
    await asyncio.sleep(3.5)
    s.start("orchestrator")
    runs, _ = await s.wait_history("daily", 3, timeout=30)
    first = sorted(runs, key=lambda r: r["scheduledFor"])[:3]
    printed = []
    for entry in first:
        run = await s.wait_run(entry["runId"])
        assert run["trigger"] == "schedule"
        printed.append(step_of(run, "slot")["stdoutTail"])
        assert printed[-1] == f"{entry['scheduledFor']} Europe/Paris"
    assert len(set(printed)) == 3, printed

    # A person names a slot (one before the schedule began, which cron never runs): the
    # steps get it, and a second trigger of the same slot is the same run.
    slot = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
    status, body = await s.request(
        "POST", "/api/workflows/daily/runs", json={"scheduledFor": rfc3339(slot)}
    )
    assert status == 201, body
    assert body["runId"] == scheduled_run_id("daily", slot)
    run = await s.wait_run(body["runId"])
    assert step_of(run, "slot")["stdoutTail"] == f"{rfc3339(slot)} Europe/Paris"
    assert (run["trigger"], run["scheduledFor"]) == ("api", rfc3339(slot))
    again = slot.isoformat()  # the same slot, written another way
    status, body = await s.request(
        "POST", "/api/workflows/daily/runs", json={"scheduledFor": again}
    )
    assert (status, body["runId"], body["created"]) == (200, run["runId"], False)
    # Manual runs without a slot have neither variable.
    status, body = await s.request("POST", "/api/workflows/daily/runs")
    run = await s.wait_run(body["runId"])
    assert step_of(run, "slot")["stdoutTail"] == " "
