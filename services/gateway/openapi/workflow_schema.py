"""The workflow file as a JSON Schema (draft 2020-12), for editors: served at
``GET /schema/workflow.json`` (page.py) and kept as docs/workflow.schema.json.

Generated from the msgspec types the gateway decodes, as the OpenAPI document's schemas are
(document.py, whose ``RULES`` it states as well), with what else shared/core/validation.py
checks that a schema says simply, and a short description of each field. One schema for the
files of both ``heddle register`` and ``heddle submit``: a run request's (``RunRequest``),
which holds every field of a registered workflow's (``WorkflowSpec``) and also takes
``runId`` and ``params`` as values; ``heddle register`` needs a ``name`` as well, and says
so when it checks the file. Pure: the same document every time.

``make schema`` writes the copy (``python -m heddle.services.gateway.openapi.workflow_schema``
prints it); tests/unit/gateway/test_workflow_schema.py fails while it is stale.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec
from heddle.services.gateway.openapi.document import refine
from heddle.shared.api.answers import ID_SCHEMA_PATTERN
from heddle.shared.core.namespaces import NAMESPACE_PATTERN
from heddle.shared.core.step_env import ENV_NAME, RESERVED_PREFIX
from heddle.shared.core.step_kinds import KINDS
from heddle.shared.wire.contracts import RunRequest

DIALECT = "https://json-schema.org/draft/2020-12/schema"
REF = "#/$defs/{name}"
ROOT = "RunRequest"
REGENERATE = "make schema"
COPY = "docs/workflow.schema.json"

ID = {"pattern": ID_SCHEMA_PATTERN}
# A static env: variable names, none of them Heddle's own (shared/core/step_env.py).
ENV_NAMES = {
    "pattern": ENV_NAME.pattern.replace("\\Z", "$"),
    "not": {"pattern": f"^{RESERVED_PREFIX}"},
}
# The fields the validator refuses as null, though their type is optional: null in a
# document is not the same as leaving the field out for these.
NOT_NULL = {
    ROOT: ("description", "runId", "workflowId", "namespace"),
    "ParamSpec": ("default", "description"),
    "StepSpec": ("maxParallel",),
}

TITLE = "Heddle workflow"
DESCRIPTION = (
    "A workflow file, for `heddle register` (POST /api/workflows) or `heddle submit` "
    "(POST /api/runs). One schema takes both: `heddle register` also needs a `name`, and "
    "takes neither `runId` nor `params` as values."
)
TITLES = {
    "StepSpec": "Step",
    "ParamSpec": "Parameter",
    "Concurrency": "Concurrency limit",
    "Approval": "Approval gate",
    "WorkflowCall": "Workflow call",
    "Webhook": "Webhook trigger",
    "Notify": "Notification target",
}
DESCRIPTIONS: dict[str, dict[str, str]] = {
    ROOT: {
        "steps": "The steps, each a shell command; at least one.",
        "name": "The workflow's name: registered under it (needed to register).",
        "schedule": "A cron schedule: five fields, e.g. `0 6 * * *` (registered workflows).",
        "timezone": "The schedule's IANA time zone, e.g. `Europe/Paris`; UTC by default.",
        "catchup": "Whether the schedule runs the slots it missed (true), or the latest only.",
        "description": "What the workflow does, for people.",
        "params": (
            "Parameters the workflow declares (a list), or, for `heddle submit` alone, the "
            "run's values (an object). Steps get each as `HEDDLE_PARAM_<NAME>`."
        ),
        "env": "Static environment variables of every step.",
        "runId": "The run's id (`heddle submit` alone): submitted again, it makes no new run.",
        "workflowId": "The older name of `runId`.",
        "namespace": (
            "The namespace it is registered or run in (docs/namespaces.md): by default the "
            "token's own if it has one, else `default`. Its names are its own within it."
        ),
        "timeoutSeconds": (
            "The deadline of each run, in seconds from its creation: past it, its steps are "
            "stopped, its exit handlers run, and it fails."
        ),
        "onExit": (
            "Exit handlers: steps run once every other step has ended, however the run went; "
            "they depend only on each other."
        ),
        "priority": (
            "The run's priority, -1000 to 1000, 0 by default: higher goes first, a waiting "
            "run's turn and its steps among those ready; a trigger may give its own."
        ),
        "concurrency": (
            "At most `limit` runs with the same key at once; `onLimit` says what a run "
            "beyond does: waits its turn (`queue`), has the oldest holder cancelled "
            "(`cancelRunning`), or fails, its trigger answered 409 (`refuse`)."
        ),
        "notify": "Where each run's end is POSTed as JSON, for the ends each target names.",
        "webhooks": (
            "Webhook triggers (registered workflows alone): a signed delivery to "
            "`POST /hooks/<workflow>/<name>` starts a run."
        ),
    },
    "Approval": {
        "message": "What the approver is asked, shown with the waiting gate.",
        "timeoutSeconds": "How long the gate waits for an answer before it fails.",
    },
    "WorkflowCall": {
        "name": "The registered workflow the step runs as its child run.",
        "version": "Its version; the newest when the step starts, by default.",
        "params": "The child run's parameter values.",
    },
    "Webhook": {
        "name": "The hook's name, in its delivery address `/hooks/<workflow>/<name>`.",
        "params": (
            "The run's parameters: CEL expressions over the delivery's `body` (its JSON) and "
            "`headers`, e.g. `body.ref`."
        ),
    },
    "Notify": {
        "url": "The http(s) address the run's end is POSTed to.",
        "on": "The run ends that are sent: `succeeded`, `failed`, `cancelled`.",
        "secret": (
            "Whether the POST is signed (`X-Heddle-Signature-256`) with the secret made for "
            "this target."
        ),
    },
    "Concurrency": {
        "key": (
            "A CEL expression over `params` and `workflow` (the workflow's name), evaluated "
            "when a run is submitted, giving a string, a number or a bool, e.g. "
            "`workflow + '/' + params.env`."
        ),
        "limit": "How many runs may hold the key at once, 1 to 1000; 1 by default.",
        "onLimit": (
            "What a run does when the key is at its limit: `queue` (the default) waits, in "
            "order; `cancelRunning` cancels the oldest holder and starts next; `refuse` "
            "fails at once."
        ),
    },
    "StepSpec": {
        "id": "The step's id, unique in the workflow.",
        "command": "The shell command the step runs (or the step has approval, or workflow).",
        "approval": (
            "Instead of a command: a gate that waits, on no runner, until it is approved "
            "(it succeeds) or rejected or timed out (it fails)."
        ),
        "workflow": (
            "Instead of a command: a registered workflow run as the step's child; the step "
            "ends as the child ends, with the child's outputs as its own."
        ),
        "dependsOn": "The ids of the steps that must end first.",
        "retries": "How often a failed attempt is tried again, with backoff.",
        "timeoutSeconds": "How long an attempt may run before it is killed and fails.",
        "env": "Static environment variables of this step, over the workflow's.",
        "when": (
            "A CEL condition, decided once every dependency has ended, however it ended: "
            "false skips the step, e.g. `steps.build.status == 'failed'`."
        ),
        "allowFailure": "Whether the run may succeed though this step fails.",
        "forEach": (
            "A CEL expression giving a list, or a string holding a JSON array: the step runs "
            "once per item, as `<id>[0]`, `<id>[1]`..., each with `HEDDLE_ITEM` and "
            "`HEDDLE_ITEM_INDEX`, e.g. `steps.list.outputs.files`."
        ),
        "maxParallel": "With forEach: the most instances queued or running at once.",
        "runsOn": (
            "Runner labels: only a runner with every one takes the step. Without it, the "
            "default pool's runners do."
        ),
        "semaphores": (
            "Semaphores the step holds a slot of while it runs, each named by 1 to 64 "
            "letters, digits, `_` or `-`; an unknown one has size 1."
        ),
    },
    "ParamSpec": {
        "name": "The parameter's name; steps get it as `HEDDLE_PARAM_<NAME>`.",
        "default": "Its value when a run gives none; without one, each run must give it.",
        "description": "What it is, for people.",
    },
}


def _options(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in schema.get("anyOf", [schema]) if o.get("type") != "null"]


def _tighten(defs: dict[str, Any]) -> None:
    """What the validator checks beyond ``RULES`` (document.py), where a schema says it
    simply: parameter names, env names, a command with more than blanks, no null where the
    validator wants a value."""
    root, step, param = (defs[n]["properties"] for n in (ROOT, "StepSpec", "ParamSpec"))
    step["command"]["pattern"] = r"\S"
    # Exactly one of them (shared/core/step_kinds.py).
    defs["StepSpec"]["oneOf"] = [{"required": [kind]} for kind in KINDS]
    param["name"] |= ID
    root["namespace"] |= {"pattern": NAMESPACE_PATTERN.pattern.replace("\\Z", "$")}
    for option in _options(root["params"]):
        if option["type"] == "object":
            option["propertyNames"] = ID
    for env in (root["env"], step["env"]):
        env["propertyNames"] = ENV_NAMES
    for name, fields in NOT_NULL.items():
        properties = defs[name]["properties"]
        for field in fields:
            (kept,) = _options(properties[field])
            properties[field] = kept  # and no default: null is not one
    root["workflowId"]["deprecated"] = True


def _describe(defs: dict[str, Any]) -> None:
    for name, fields in DESCRIPTIONS.items():
        schema = defs[name]
        if name in TITLES:
            schema["title"] = TITLES[name]
            schema.pop("description", None)
        properties = schema["properties"]
        assert set(fields) == set(properties), (name, set(fields) ^ set(properties))
        for field, text in fields.items():
            properties[field] = {"description": text, **properties[field]}


def workflow_schema() -> dict[str, Any]:
    """The schema of a workflow file, the run request's fields at its root."""
    _, defs = msgspec.json.schema_components([RunRequest], ref_template=REF)
    refine(defs)
    _tighten(defs)
    _describe(defs)
    root = defs.pop(ROOT)
    del root["title"], root["description"]
    return {"$schema": DIALECT, "title": TITLE, "description": DESCRIPTION, **root, "$defs": defs}


def schema_text() -> bytes:
    """The schema as served and as committed: two-space indents, a final newline."""
    return msgspec.json.format(msgspec.json.encode(workflow_schema()), indent=2) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(schema_text())
