"""A registered workflow's webhooks checked at registration, and what a delivery gives its
run (shared/core/webhooks.py)."""

from __future__ import annotations

import pytest
from heddle.shared.core.step_checks import Limits
from heddle.shared.core.validation import workflow_problems
from heddle.shared.core.webhooks import (
    delivery_params,
    delivery_run_id,
    header_map,
    webhook_problems,
)
from heddle.shared.wire.contracts import Webhook
from heddle.shared.wire.names import ID_PATTERN

PARAMS = [{"name": "ref"}, {"name": "sha"}, {"name": "env", "default": "prod"}]
PUSH = {"name": "push", "params": {"ref": "body.ref", "sha": "body.after"}}


def problems(hooks: object, params: object = PARAMS) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in webhook_problems(hooks, params)]


def test_a_webhook_giving_every_parameter_without_a_default_passes() -> None:
    assert problems([PUSH]) == []
    # The headers are a map of strings, the strings extension is on.
    hook = {
        "name": "h",
        "params": {
            "ref": 'headers["x-github-event"] + ":" + body.ref.lowerAscii()',
            "sha": "string(body.size)",
        },
    }
    assert problems([hook]) == []


def test_every_bad_parameter_is_named() -> None:
    hook = {
        "name": "push",
        "params": {"ref": "body.ref +", "colour": "body.c", "env": "headers.x + 1"},
    }
    found = problems([hook])
    assert [path for path, _ in found] == [
        "webhooks[0].params.ref",
        "webhooks[0].params.colour",
        "webhooks[0].params.env",
        "webhooks[0].params",
    ]
    assert found[0][1].startswith("does not compile: column")
    assert found[1][1] == "unknown parameter 'colour' (declared: env, ref, sha)"
    assert "no matching overload" in found[2][1]
    assert found[3][1] == "parameter 'sha' has no default: the webhook must give it"


def test_a_variable_other_than_body_and_headers_is_refused() -> None:
    found = problems([{"name": "push", "params": {"ref": "params.ref", "sha": "run.id"}}])
    assert [p for p, _ in found] == ["webhooks[0].params.ref", "webhooks[0].params.sha"]
    assert all("undeclared reference" in m for _, m in found)


def test_shapes_and_names() -> None:
    assert problems({}) == [("webhooks", "webhooks must be a list")]
    assert problems([PUSH, PUSH, {"name": "a b"}, 3, {"name": "x", "params": [1], "y": 1}]) == [
        ("webhooks[1].name", "webhook 'push' is named twice"),
        ("webhooks[2].name", "name must be an id (letters, digits, - and _)"),
        ("webhooks[2].params", "parameter 'ref' has no default: the webhook must give it"),
        ("webhooks[2].params", "parameter 'sha' has no default: the webhook must give it"),
        ("webhooks[3]", "a webhook must be an object with a name"),
        ("webhooks[4].y", "unknown field"),
        ("webhooks[4].params", "params must map names to expressions"),
    ]


def test_a_workflow_without_params_takes_none_from_a_webhook() -> None:
    assert problems([{"name": "ping"}], None) == []
    found = problems([PUSH], None)
    assert found[0] == ("webhooks[0].params.ref", "unknown parameter 'ref' (declared: none)")


def test_malformed_params_are_reported_once_under_params() -> None:
    """The declarations' own problems are theirs: the webhook's names are not checked
    against a list that is no list."""
    doc = {"name": "w", "params": "x", "webhooks": [PUSH], "steps": [{"id": "a", "command": "x"}]}
    found = [p.path for p in workflow_problems(doc, Limits(), allowed={*doc})]
    assert found == ["params"]


def test_registration_checks_the_webhooks_against_the_declared_params() -> None:
    doc = {
        "name": "w",
        "params": [{"name": "ref"}],
        "webhooks": [{"name": "push", "params": {"sha": "body.after"}}],
        "steps": [{"id": "a", "command": "x"}],
    }
    found = [(p.path, p.message) for p in workflow_problems(doc, Limits(), allowed={*doc})]
    assert found == [
        ("webhooks[0].params.sha", "unknown parameter 'sha' (declared: ref)"),
        ("webhooks[0].params", "parameter 'ref' has no default: the webhook must give it"),
    ]


GITHUB_PUSH = {
    "ref": "refs/heads/main",
    "after": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
    "forced": False,
    "size": 3,
    "repository": {"full_name": "octo/hello", "stargazers_count": 80, "score": 1.5},
    "pusher": {"name": "octocat", "email": None},
    "commits": [{"id": "a"}, {"id": "b"}],
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("body.ref", "refs/heads/main"),
        ("body.repository.full_name", "octo/hello"),
        ("body.repository.stargazers_count", "80"),
        ("body.repository.score", "1.5"),
        ("body.forced", "false"),
        ("size(body.commits)", "2"),
        ('body.ref.split("/")[2]', "main"),
        ('headers["x-github-event"]', "push"),
        ('has(body.base_ref) ? body.base_ref : "none"', "none"),
    ],
)
def test_a_delivery_gives_each_value_as_text(text: str, value: str) -> None:
    hook = Webhook(name="push", params={"p": text})
    headers = header_map([("X-GitHub-Event", "push")])
    assert delivery_params(hook, GITHUB_PUSH, headers) == ({"p": value}, [])


def test_what_fails_on_a_delivery_is_named_by_parameter() -> None:
    hook = Webhook(
        name="push",
        params={
            "ok": "body.ref",
            "gone": "body.missing",
            "map": "body.pusher",
            "null": "body.pusher.email",
        },
    )
    values, found = delivery_params(hook, GITHUB_PUSH, {})
    assert values == {"ok": "refs/heads/main"}
    assert [p.path for p in found] == ["params.gone", "params.map", "params.null"]
    assert "missing" in found[0].message
    assert found[1].message.startswith("gives map")
    assert found[2].message == "gives null, not a string, a number or a bool"
    # A body that is no object: the same, a problem and not an exception.
    assert delivery_params(hook, [1, 2], {})[1][0].path == "params.ok"


def test_headers_are_lower_case_and_repeated_ones_joined() -> None:
    assert header_map([("X-A", "1"), ("x-a", "2"), ("Content-Type", "application/json")]) == {
        "x-a": "1, 2",
        "content-type": "application/json",
    }


def test_a_delivery_id_names_one_run_per_workflow_and_hook() -> None:
    run = delivery_run_id("deploy", "push", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert run == delivery_run_id("deploy", "push", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert ID_PATTERN.match(run)
    others = {
        delivery_run_id("deploy", "push", "other"),
        delivery_run_id("deploy", "tag", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        delivery_run_id("build", "push", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    }
    assert run not in others and len(others) == 3
    # In the workflow's namespace, and an id there however long the workflow's name.
    assert delivery_run_id("team-a=deploy", "push", "1").startswith("team-a=deploy-h")
    long = delivery_run_id("w" * 63, "push", "1")
    assert ID_PATTERN.match(long)
