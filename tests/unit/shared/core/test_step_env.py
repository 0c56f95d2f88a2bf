"""shared/core/step_env.py and its checks in shared/core/validation.py: parameters, static env, the
variables a step gets, and the slot a manual run names (shared/cron_plan.named_slot)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest
from heddle.services.gateway.handlers.run_inputs import body_problems, trigger_inputs
from heddle.services.runner_agent.step_environment import step_env
from heddle.shared.core.cron_plan import named_slot
from heddle.shared.core.step_env import (
    MAX_VARIABLES_BYTES,
    output_env,
    param_env,
    passes,
    resolve,
    step_variables,
)
from heddle.shared.core.validation import Limits, parse_run_request, parse_workflow, submit_problems
from heddle.shared.wire.contracts import ParamSpec, SubmitRun, WorkflowSpec
from heddle.shared.wire.errors import InvalidWorkflow

STEPS = [{"id": "a", "command": "echo $HEDDLE_PARAM_REGION"}]


def problems_of(doc: object, inline: bool = False) -> list[tuple[str, str]]:
    with pytest.raises(InvalidWorkflow) as err:
        if inline:
            parse_run_request(doc, Limits())
        else:
            parse_workflow(doc, Limits())
    return [(p.path, p.message) for p in err.value.problems]


def test_variable_names() -> None:
    assert param_env("region") == "HEDDLE_PARAM_REGION"
    assert param_env("start-date") == "HEDDLE_PARAM_START_DATE"
    assert param_env("a.b c") == "HEDDLE_PARAM_A_B_C"
    assert output_env("build-1", "image-tag") == "HEDDLE_OUT_BUILD_1_IMAGE_TAG"


def test_a_workflow_declares_params_and_env() -> None:
    spec = parse_workflow(
        {
            "name": "etl",
            "params": [
                {"name": "region", "default": "eu", "description": "where"},
                {"name": "day"},
            ],
            "env": {"LANG": "C", "_X1": ""},
            "steps": [{"id": "a", "command": "true", "env": {"LANG": "fr"}}],
        },
        Limits(),
    )
    assert spec.params == [
        ParamSpec(name="region", default="eu", description="where"),
        ParamSpec(name="day"),
    ]
    assert (spec.env, spec.steps[0].env) == ({"LANG": "C", "_X1": ""}, {"LANG": "fr"})


def test_every_problem_of_params_and_env_is_listed() -> None:
    doc = {
        "name": "etl",
        "params": [
            {"name": "a-b"},
            {"name": "a_b", "default": 3},
            {"name": "bad name!", "kind": "x"},
            {"description": 1},
            "x",
        ],
        "env": {"HEDDLE_X": "1", "": "2", "1A": "3", "OK": 4, "NUL": "a\x00b"},
        "steps": [{"id": "a", "command": "true", "env": {"A-B": "1", "HEDDLE_RUN_ID": "x"}}],
    }
    found = problems_of(doc)
    expected = [
        ("params[1].name", "parameter 'a_b' and 'a-b' are both HEDDLE_PARAM_A_B"),
        ("params[1].default", "default must be a string"),
        ("params[2].kind", "unknown field 'kind'"),
        ("params[2].name", "must match"),
        ("params[3].name", "missing required field"),
        ("params[3].description", "description must be a string"),
        ("params[4]", "a parameter must be an object"),
        ("env.HEDDLE_X", "names starting with HEDDLE_ are Heddle's"),
        ('env[""]', "needs a name"),
        ("env.1A", "is not a variable name"),
        ("env.OK", "the value must be a string"),
        ("env.NUL", "NUL byte"),
        ("steps[0].env.A-B", "is not a variable name"),
        ("steps[0].env.HEDDLE_RUN_ID", "Heddle's"),
    ]
    for path, words in expected:
        assert any(p == path and words in m for p, m in found), (path, words, found)
    assert len(found) == len(expected), found


def test_resolve_lists_unknown_and_missing_together() -> None:
    declared = [ParamSpec(name="region", default="eu"), ParamSpec(name="day")]
    assert resolve(declared, {"day": "mon"}) == ({"region": "eu", "day": "mon"}, [])
    assert resolve(declared, {"day": "mon", "region": "us"})[0] == {"region": "us", "day": "mon"}
    values, problems = resolve(declared, {"colour": "red", "size": "xl", "region": 3})
    assert values == {}
    assert [(p.path, p.message) for p in problems] == [
        ("params.colour", "unknown parameter 'colour' (declared: day, region)"),
        ("params.size", "unknown parameter 'size' (declared: day, region)"),
        ("params.region", "the value must be a string"),
        ("params.day", "missing required parameter 'day'"),
    ]
    assert resolve([], None) == ({}, [])
    assert resolve([], []) == ({}, [resolve([], "x")[1][0]])  # not an object


def test_inline_runs_take_values_or_declarations_with_defaults() -> None:
    req = parse_run_request({"steps": STEPS, "params": {"region": "eu"}}, Limits())
    assert req.params == {"region": "eu"}
    req = parse_run_request(
        {"steps": STEPS, "params": [{"name": "region", "default": "us"}]}, Limits()
    )
    assert req.params == [ParamSpec(name="region", default="us")]
    found = problems_of(
        {"steps": STEPS, "params": {"a-b": "1", "a_b": "2", "x": 1, "bad!": "y"}}, inline=True
    )
    assert [p for p, _ in found] == ["params.a_b", "params.x", "params.bad!"]
    found = problems_of({"steps": STEPS, "params": [{"name": "day"}]}, inline=True)
    assert found[0][0] == "params[0]" and "missing required parameter 'day'" in found[0][1]


def test_a_direct_submit_is_checked_as_the_api_checks() -> None:
    cmd = msgspec.convert(
        {
            "runId": "r1",
            "steps": [{"id": "a", "command": "true", "env": {"HEDDLE_X": "1"}}],
            "submittedAt": "2025-01-01T00:00:00Z",
            "params": {"a!": "1"},
            "env": {"": "x"},
        },
        SubmitRun,
    )
    paths = [p.path for p in submit_problems(cmd, Limits())]
    assert paths == ['env[""]', "steps[0].env.HEDDLE_X", "params.a!"]


def test_step_variables_and_what_a_runner_lets_through() -> None:
    env = step_variables(
        params={"region": "eu", "start-date": "$(touch /tmp/x)"},
        scheduled_for="2025-01-01T06:00:00.000Z",
        scheduled_tz="Europe/Paris",
        run_env={"A": "run", "B": "run"},
        step_env={"B": "step"},
        outputs=[("build", {"tag": "v1"}), ("test", {"n": "3"})],
    )
    assert env == {
        "A": "run",
        "B": "step",  # the step's own wins
        "HEDDLE_PARAM_REGION": "eu",
        "HEDDLE_PARAM_START_DATE": "$(touch /tmp/x)",
        "HEDDLE_SCHEDULED_FOR": "2025-01-01T06:00:00.000Z",
        "HEDDLE_SCHEDULED_TZ": "Europe/Paris",
        "HEDDLE_OUT_BUILD_TAG": "v1",
        "HEDDLE_OUT_TEST_N": "3",
    }
    assert "HEDDLE_SCHEDULED_FOR" not in step_variables(params={"a": "1"})
    # The runner sets only these from a ready message: never its own settings, nor the
    # run, step and attempt it sets itself.
    got = step_env(
        {"PATH": "/bin"},
        "r",
        "s",
        2,
        {**env, "HEDDLE_NATS_PASSWORD": "x", "HEDDLE_RUN_ID": "forged", "1BAD": "x"},
    )
    assert got == {**env, "PATH": "/bin", "HEDDLE_RUN_ID": "r", "HEDDLE_STEP_ID": "s",
                   "HEDDLE_ATTEMPT": "2"}  # fmt: skip
    assert not passes("HEDDLE_OUTPUTS") and passes("HEDDLE_OUT_A_B") and passes("X")


NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_a_manual_run_names_a_slot_of_the_schedule() -> None:
    daily = ("0 6 * * *", "Europe/Paris")  # 05:00 UTC in winter
    assert named_slot("2025-02-01T05:00:00Z", *daily, NOW) == datetime(2025, 2, 1, 5, tzinfo=UTC)
    assert named_slot("2025-02-01T06:00+01:00", *daily, NOW) == datetime(2025, 2, 1, 5, tzinfo=UTC)
    assert named_slot("2025-02-01T06:07:00Z", None, None, NOW).minute == 7  # no schedule: any
    for text, words in [
        ("2025-02-01T06:00:00Z", "not a slot of the schedule '0 6 * * *' (Europe/Paris)"),
        ("2025-02-01T05:00:30Z", "not a whole minute"),
        ("2025-02-01T05:00:00", "has no offset"),
        ("2025-04-01T05:00:00Z", "in the future"),
        ("yesterday", "not an ISO 8601 time"),
        (20250201, "must be an ISO 8601 time string"),
        ("0001-01-01T00:00:00+14:00", "out of range in UTC"),
        ("9999-12-31T23:59:00-01:00", "out of range in UTC"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            named_slot(text, *daily, NOW)


def test_a_trigger_body_lists_every_problem() -> None:
    assert [p.path for p in body_problems({"params": {}, "paramz": 1, "x": 2})] == ["paramz", "x"]
    assert body_problems([]) and not body_problems({})
    spec = WorkflowSpec(
        steps=[], schedule="0 * * * *", params=[ParamSpec(name="day"), ParamSpec(name="n")]
    )
    got = trigger_inputs(
        {"params": {"day": "mon", "nope": "1"}, "scheduledFor": "2025-02-01T05:30Z"},
        "key-1",
        spec,
        NOW,
    )
    assert [p.path for p in got.problems] == [
        "params.nope",
        "params.n",
        "scheduledFor",
        "idempotencyKey",
    ]
    body = {"params": {"day": "mon", "n": "1"}, "scheduledFor": "2025-02-01T05:00Z"}
    got = trigger_inputs(body, None, spec, NOW)
    assert not got.problems and got.params == {"day": "mon", "n": "1"}
    assert got.scheduled_for == "2025-02-01T05:00:00.000Z"
    assert trigger_inputs({"idempotencyKey": ""}, None, WorkflowSpec(steps=[]), NOW).problems
    spec = WorkflowSpec(steps=[])
    both = trigger_inputs({"idempotencyKey": "a"}, "b", spec, NOW)
    assert [p.message for p in both.problems] == [
        "the Idempotency-Key header and the body's idempotencyKey differ: give one"
    ]
    same = trigger_inputs({"idempotencyKey": "a"}, "a", spec, NOW)
    assert (same.problems, same.key) == ([], "a")


def test_a_scheduled_workflow_gives_every_parameter_a_default() -> None:
    doc = {"name": "n", "schedule": "0 6 * * *", "steps": STEPS, "params": [{"name": "day"}]}
    assert problems_of(doc) == [
        ("params[0]", "parameter 'day' needs a default: a scheduled run gives no values")
    ]
    doc["params"] = [{"name": "day", "default": "mon"}]
    assert parse_workflow(doc, Limits()).params == [ParamSpec(name="day", default="mon")]
    # Listed with the list's other problems, not only once those are fixed.
    doc["params"] = [{"name": "a"}, 5]
    assert problems_of(doc) == [
        ("params[1]", "a parameter must be an object"),
        ("params[0]", "parameter 'a' needs a default: a scheduled run gives no values"),
    ]


def test_variables_are_bounded_as_a_whole_so_every_record_fits_a_message() -> None:
    """Each value within its own limit, twenty of them past the whole's: every map that a
    record or a ready message holds is refused, with its size, where it is."""
    big = {f"V{i}": "v" * 60_000 for i in range(20)}  # 1.2 MB, each value 60 KB
    half = MAX_VARIABLES_BYTES // 2 - 1  # two names of a byte, two values within their limit
    at_limit = {"A": "a" * half, "B": "b" * half}
    limit = f"the limit is {MAX_VARIABLES_BYTES}"
    found = problems_of({"steps": [{**STEPS[0], "env": big}], "env": big}, inline=True)
    assert [p for p, _ in found] == ["env", "steps[0].env"]
    assert all("1200050 bytes in all" in m and limit in m for _, m in found)
    assert problems_of({"steps": STEPS, "params": big}, inline=True)[0][0] == "params"
    defaults = [{"name": f"p{i}", "default": "d" * 60_000} for i in range(3)]
    found = problems_of({"name": "w", "steps": STEPS, "params": defaults})
    assert found == [("params", f"the parameters' defaults are 180006 bytes in all; {limit}")]
    declared = [ParamSpec(name=f"p{i}") for i in range(3)]
    values, problems = resolve(declared, {f"p{i}": "v" * 60_000 for i in range(3)})
    assert values == {} and [p.path for p in problems] == ["params"]
    body = {"params": {f"p{i}": "v" * 60_000 for i in range(3)}}
    got = trigger_inputs(body, None, WorkflowSpec(steps=[], params=declared), NOW)
    assert [p.path for p in got.problems] == ["params"]  # a registered workflow's trigger
    # At the limit, names included, it passes.
    assert parse_run_request({"steps": STEPS, "env": at_limit, "params": at_limit}, Limits())
    assert resolve([ParamSpec(name="A"), ParamSpec(name="B")], at_limit) == (at_limit, [])
    assert problems_of({"steps": STEPS, "env": {**at_limit, "C": ""}}, inline=True)
