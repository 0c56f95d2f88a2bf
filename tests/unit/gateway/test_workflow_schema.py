"""The JSON Schema of a workflow file (services/gateway/openapi/workflow_schema.py): it takes
every example workflow of the docs, refuses what the validator refuses for its type or shape,
names the fields the validator knows, and the copy in docs/ is the generated one. Served at
GET /schema/workflow.json: tests/integration/test_workflow_schema.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
import yaml
from heddle.services.gateway.openapi.workflow_schema import (
    COPY,
    REGENERATE,
    schema_text,
    workflow_schema,
)
from heddle.shared.core.step_checks import STEP_FIELDS
from heddle.shared.core.step_env import PARAM_FIELDS
from heddle.shared.core.validation import (
    REGISTERED_FIELDS,
    RUN_FIELDS,
    Limits,
    parse_run_request,
    parse_workflow,
)
from heddle.shared.wire.contracts import WorkflowSpec
from heddle.shared.wire.errors import InvalidWorkflow

from tests.support.stack import REPO

VALIDATOR = jsonschema.Draft202012Validator(workflow_schema())
YAML_FENCE = re.compile(r"^ {0,3}```ya?ml[ \t]*\n(.*?)^ {0,3}```", re.M | re.S)
STEP = {"id": "a", "command": "true"}


def example_workflows() -> dict[str, Any]:
    """The example files, and every YAML block of the README and docs/ that is a workflow
    (an object with ``steps``), by where they are."""
    found = {str(p.relative_to(REPO)): yaml.safe_load(p.read_text()) for p in examples()}
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for i, block in enumerate(YAML_FENCE.findall(page.read_text())):
            doc = yaml.safe_load(block)
            if isinstance(doc, dict) and "steps" in doc:
                found[f"{page.relative_to(REPO)} (YAML block {i + 1})"] = doc
    return found


def examples() -> list[Path]:
    return sorted((REPO / "docs" / "examples").glob("*.yaml"))


def refused_by_schema(doc: object) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(doc)]


def test_the_committed_copy_is_the_generated_schema() -> None:
    assert (REPO / COPY).read_bytes() == schema_text(), (
        f"{COPY} is stale: run `{REGENERATE}` (python -m "
        f"heddle.services.gateway.openapi.workflow_schema > {COPY}) and commit it"
    )


def test_it_is_a_draft_2020_12_schema_of_the_validators_fields() -> None:
    schema = workflow_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # The run request's fields: every one a workflow document has, and runId and workflowId.
    assert set(schema["properties"]) == RUN_FIELDS | REGISTERED_FIELDS
    fields = {f.encode_name for f in msgspec.structs.fields(WorkflowSpec)}
    assert fields < set(schema["properties"])
    assert set(schema["$defs"]["StepSpec"]["properties"]) == STEP_FIELDS
    assert set(schema["$defs"]["ParamSpec"]["properties"]) == PARAM_FIELDS
    described = [schema["properties"], *(d["properties"] for d in schema["$defs"].values())]
    assert all(p.get("description") for props in described for p in props.values())


def test_every_example_workflow_in_the_docs_passes() -> None:
    found = example_workflows()
    assert len(found) >= len(examples()) + 5, sorted(found)  # the finder found the blocks
    for where, doc in found.items():
        assert not refused_by_schema(doc), (where, refused_by_schema(doc))
        # and they are workflows the commands take: register's with a name, submit's else
        if "name" in doc:
            parse_workflow(doc, Limits(), name_required=True)
        else:
            parse_run_request(doc, Limits())


def test_the_example_files_name_the_schema() -> None:
    for path in examples():
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../workflow.schema.json", path


# Each refused by the validator for its type or its shape, and so by the schema.
REFUSED: dict[str, Any] = {
    "a list": [STEP],
    "no steps": {"name": "x"},
    "no step at all": {"steps": []},
    "a step without an id": {"steps": [{"command": "true"}]},
    "a step without a command": {"steps": [{"id": "a"}]},
    "a blank command": {"steps": [{"id": "a", "command": "  "}]},
    "an unknown field": {"steps": [STEP], "stpes": []},
    "an unknown step field": {"steps": [{**STEP, "retry": 3}]},
    "a step id with a space": {"steps": [{"id": "a b", "command": "true"}]},
    "a step id of 65 characters": {"steps": [{"id": "a" * 65, "command": "true"}]},
    "retries as a string": {"steps": [{**STEP, "retries": "3"}]},
    "retries over the limit": {"steps": [{**STEP, "retries": 101}]},
    "negative retries": {"steps": [{**STEP, "retries": -1}]},
    "retries true": {"steps": [{**STEP, "retries": True}]},
    "a zero timeout": {"steps": [{**STEP, "timeoutSeconds": 0}]},
    "a timeout over a week": {"steps": [{**STEP, "timeoutSeconds": 7 * 86400 + 1}]},
    "a timeout as a string": {"steps": [{**STEP, "timeoutSeconds": "60"}]},
    "when as a number": {"steps": [{**STEP, "when": 5}]},
    "when as a bool": {"steps": [{**STEP, "when": True}]},
    "allowFailure as a string": {"steps": [{**STEP, "allowFailure": "yes"}]},
    "dependsOn a string": {"steps": [{**STEP, "dependsOn": "b"}]},
    "a dependency as a number": {"steps": [{**STEP, "dependsOn": [1]}]},
    "a bad workflow name": {"name": "a/b", "steps": [STEP]},
    "catchup as a string": {"steps": [STEP], "catchup": "yes"},
    "a null description": {"steps": [STEP], "description": None},
    "a numeric env value": {"steps": [STEP], "env": {"A": 1}},
    "an env name of Heddle's": {"steps": [{**STEP, "env": {"HEDDLE_X": "1"}}]},
    "an env name that is no variable": {"steps": [STEP], "env": {"1A": "x"}},
    "a parameter without a name": {"steps": [STEP], "params": [{"default": "x"}]},
    "a null default": {"steps": [STEP], "params": [{"name": "p", "default": None}]},
    "an unknown parameter field": {"steps": [STEP], "params": [{"name": "p", "type": "s"}]},
    "a numeric parameter value": {"steps": [STEP], "params": {"p": 1}},
    "a bad parameter name": {"steps": [STEP], "params": {"a b": "x"}},
    "params as a string": {"steps": [STEP], "params": "p=1"},
    "a bad run id": {"steps": [STEP], "runId": "a.b"},
}


@pytest.mark.parametrize("doc", REFUSED.values(), ids=REFUSED.keys())
def test_what_the_validator_refuses_for_its_type_the_schema_refuses(doc: Any) -> None:
    with pytest.raises(InvalidWorkflow):
        parse_run_request(doc, Limits())
    assert refused_by_schema(doc)


# Taken by both: the optional fields left null, a run's values, a run id, every field.
TAKEN: dict[str, Any] = {
    "one step": {"steps": [STEP]},
    "nulls where a field may be null": {
        "name": None,
        "schedule": None,
        "timezone": None,
        "steps": [{**STEP, "timeoutSeconds": None, "when": None}],
    },
    "a run's values and id": {"steps": [STEP], "params": {"p-1": "x"}, "runId": "r-1"},
    "the older run id": {"steps": [STEP], "workflowId": "r-1"},
    "every field": {
        "name": "nightly",
        "description": "d",
        "schedule": "0 6 * * *",
        "timezone": "Europe/Paris",
        "catchup": False,
        "params": [{"name": "region", "default": "eu", "description": "where"}],
        "env": {"LANG": "C.UTF-8", "_X": ""},
        "steps": [
            STEP,
            {
                "id": "b",
                "command": "echo b",
                "dependsOn": ["a"],
                "retries": 100,
                "timeoutSeconds": 0.5,
                "env": {"B": "1"},
                "when": "steps.a.status == 'failed'",
                "allowFailure": True,
            },
        ],
    },
}


@pytest.mark.parametrize("doc", TAKEN.values(), ids=TAKEN.keys())
def test_what_the_validator_takes_the_schema_takes(doc: Any) -> None:
    parse_run_request(doc, Limits())
    assert not refused_by_schema(doc)
