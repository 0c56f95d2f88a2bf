"""The OpenAPI document: built from the routes the gateway declares (each once, beside its
handler), it describes every route the gateway serves and nothing else, and every operation
says who may call it. Served at /openapi.json and /docs: tests/integration/test_openapi.py;
the live API fuzzed against it: tests/integration/test_api_fuzz.py."""

from __future__ import annotations

from typing import Any

import msgspec
from heddle.services.gateway.app import ROUTES, create_app
from heddle.services.gateway.openapi.document import document
from heddle.shared.core.tokens import parse_token_request
from heddle.shared.core.validation import Limits, parse_run_request, parse_workflow
from heddle.shared.runtime.settings import Settings

METHODS = {"get", "post", "patch", "put", "delete"}
ROLES = {(r.method, r.path): r.role for r in ROUTES}


def served_routes() -> set[tuple[str, str]]:
    app = create_app(Settings())
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


def described(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m.upper(), path) for path, ops in doc["paths"].items() for m in ops if m in METHODS}


def test_every_route_is_described_and_nothing_else() -> None:
    doc = document(ROUTES)
    assert described(doc) == served_routes()
    assert len(ROLES) == len(ROUTES)  # no route declared twice


def test_each_operation_names_its_auth_and_every_answer() -> None:
    doc = document(ROUTES)
    assert doc["openapi"] == "3.1.0"
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            role = ROLES[method.upper(), path]
            assert op["security"] == ([] if role is None else [{"bearer": []}]), path
            answers = op["responses"]
            if role is not None:
                assert {"401", "403"} <= set(answers), (method, path)
            if "requestBody" in op:
                assert {"400", "413", "415", "408"} <= set(answers), (method, path)
            for status, answer in answers.items():
                if int(status) >= 400:  # every error has the one error shape
                    ref = answer.get("$ref") or answer["content"]["application/json"]["schema"]
                    assert "ErrorDoc" in str(ref) or "E" + status in str(ref), (path, status)


def test_schemas_come_from_the_types_the_gateway_decodes() -> None:
    schemas = document(ROUTES)["components"]["schemas"]
    step = schemas["StepSpec"]
    assert step["required"] == ["id"]  # and one of command, approval and workflow
    assert set(step["properties"]) >= {"id", "command", "approval", "workflow", "dependsOn"}
    assert step["properties"]["dependsOn"]["items"]["type"] == "string"  # with the id's pattern
    run = schemas["RunDocument"]
    # Every field in every answer, but why it waits: only on what waits.
    assert set(run["required"]) == set(run["properties"]) - {"waitingFor"}
    # Every $ref points at a schema that exists.
    prefix = "#/components/schemas/"
    refs = {r.rsplit("/", 1)[-1] for r in _refs(document(ROUTES)) if r.startswith(prefix)}
    assert refs <= set(schemas)


def test_a_json_answer_without_a_type_is_an_object() -> None:
    answer = document(ROUTES)["paths"]["/openapi.json"]["get"]["responses"]["200"]
    assert answer["content"] == {"application/json": {"schema": {"type": "object"}}}


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_example_body_is_one_the_gateway_accepts() -> None:
    examples = {op.operation_id: op for op in ROUTES if op.example is not None}
    assert {"createRun", "registerWorkflow", "createToken"} <= set(examples)
    for op in examples.values():
        assert op.body is not None
        msgspec.convert(op.example, op.body)  # raises if it does not fit the schema's type
    parse_run_request(examples["createRun"].example, Limits())
    parse_workflow(examples["registerWorkflow"].example, Limits(), name_required=True)
    assert isinstance(parse_token_request(examples["createToken"].example), tuple)
