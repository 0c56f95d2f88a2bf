"""The HTTP API as an OpenAPI 3.1 document (``GET /openapi.json``).

Bodies and answers are the msgspec types the gateway decodes (``shared/wire/contracts.py``) and
answers with (``shared/api/answers.py``, ``shared/api/registry_answers.py``), turned into JSON
Schema by ``msgspec.json.schema_components``; the operations, and who may call each, are the
routes the app serves, as their handlers' modules declare them (route.py): ``document`` is given
them. tests/unit/gateway/test_openapi.py checks the document against the app's routes, and CI
fuzzes the running API against it (Schemathesis, tests/integration/test_api_fuzz.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

import msgspec
from heddle.services.gateway.openapi.route import Param, Route, Tag
from heddle.shared.api.answers import ID_SCHEMA_PATTERN, ErrorDoc
from heddle.shared.core.step_checks import MAX_RETRIES, MAX_TIMEOUT
from heddle.shared.wire.json_depth import MAX_JSON_DEPTH
from heddle.shared.wire.version import VERSION

REF = "#/components/schemas/{name}"
ERROR_MEANINGS = {
    400: "A bad parameter or body: `error` says what, `problems` lists each one",
    401: "No token, or a token that is unknown or revoked",
    403: "The token's role is below the one this operation needs (`needs`)",
    404: "No such run, step, workflow, version, token or route",
    408: "The request body did not arrive in time (HEDDLE_BODY_TIMEOUT)",
    409: "The request conflicts with the current state",
    413: "The body is over HEDDLE_MAX_BODY_BYTES, or the document over the NATS payload limit",
    415: "The body is not application/json",
    421: "The Host header names a host this gateway does not answer to (HEDDLE_ALLOWED_HOSTS)",
    503: "NATS is unreachable or too slow to answer; try again (Retry-After)",
    507: "The store is full: nothing was written; try again once space is freed (Retry-After)",
}
BODY_ERRORS = (400, 408, 413, 415)
TAGS: tuple[Tag, ...] = get_args(Tag)


# One server-sent event, as a client's parser hands it over; ``data`` holds JSON.
SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def _content(kind: type | str, schemas: dict[type, Any]) -> dict[str, Any]:
    if kind == "text/event-stream":
        return {kind: {"schema": SSE_EVENT}}
    if isinstance(kind, str):  # JSON with no type of its own here: this document, a schema
        json_like = kind == "application/json" or kind.endswith("+json")
        return {kind: {"schema": {"type": "object" if json_like else "string"}}}
    return {"application/json": {"schema": schemas[kind]}}


def _media(kind: Any, schemas: dict[type, Any]) -> dict[str, Any]:
    """The content of an answer: one kind, or a tuple of kinds (JSON, or a stream)."""
    if kind is None:
        return {}
    content: dict[str, Any] = {}
    for one in kind if isinstance(kind, tuple) else (kind,):
        content |= _content(one, schemas)
    return {"content": content}


def _param(p: Param) -> dict[str, Any]:
    return {
        "name": p.name,
        "in": p.where,
        "required": p.where == "path",
        "description": p.description,
        "schema": p.schema,
    }


def error_statuses(op: Route) -> set[int]:
    """Every error status ``op`` may answer with, besides those its declaration names."""
    found = set(op.errors) | {503}  # NATS may be slow for anything but the page and probes
    if not op.host_free:
        found.add(421)
    if op.role is not None:
        found |= {401, 403}
    if op.method in ("POST", "PATCH"):
        found.add(415)  # a form content type is refused even without a body
    if op.body is not None:
        found |= set(BODY_ERRORS)
    if op.params:
        found.add(400)
    if any(p.where == "path" for p in op.params):
        found.add(404)
    if op.method != "GET" and not op.offline:
        found.add(507)  # a write the full store refuses (docs/storage.md)
    if op.offline:
        found.discard(503)
    return found


def _operation(op: Route, schemas: dict[type, Any]) -> dict[str, Any]:
    role = op.role
    doc: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "security": [] if role is None else [{"bearer": []}],
    }
    notes = [op.description] if op.description else []
    notes.append("Open to anyone." if role is None else f"Needs a token with role {role}.")
    doc["description"] = " ".join(notes)
    if op.deprecated:
        doc["deprecated"] = True
    if op.params:
        doc["parameters"] = [_param(p) for p in op.params]
    if op.body is not None:
        doc["requestBody"] = {"required": op.body_required, **_media(op.body, schemas)}
        if op.example is not None:
            doc["requestBody"]["content"]["application/json"]["example"] = op.example
    answers: dict[str, Any] = {}
    for status, (kind, meaning) in sorted(op.answers.items()):
        answers[str(status)] = {"description": meaning, **_media(kind, schemas)}
        if status in op.links:
            answers[str(status)]["links"] = op.links[status]
    for status in sorted(error_statuses(op)):
        if status in op.errors:  # this operation's own meaning, in the one error shape
            answers[str(status)] = {"description": op.errors[status], **_media(ErrorDoc, schemas)}
        else:
            answers[str(status)] = {"$ref": f"#/components/responses/E{status}"}
    doc["responses"] = answers
    return doc


def document(routes: Iterable[Route]) -> dict[str, Any]:
    """The whole OpenAPI document of ``routes`` (pure: the same every time, for one version).
    Operations are grouped by tag, in ``TAGS`` order, and in the order given within each."""
    ordered_routes = sorted(routes, key=lambda op: TAGS.index(op.tag))
    kinds = {k for op in ordered_routes for k in _types(op)} | {ErrorDoc}
    ordered = sorted(kinds, key=lambda t: t.__name__)
    refs, components = msgspec.json.schema_components(ordered, ref_template=REF)
    refine(components)
    schemas = dict(zip(ordered, refs, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in ordered_routes:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schemas)
    error = {"content": {"application/json": {"schema": schemas[ErrorDoc]}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Heddle",
            "version": VERSION,
            "description": (
                "Heddle runs DAGs of shell commands. Every error answers JSON in one shape "
                f"(ErrorDoc). JSON bodies may nest at most {MAX_JSON_DEPTH} levels deep."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": {
                f"E{status}": {"description": meaning, **error}
                for status, meaning in ERROR_MEANINGS.items()
            },
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API token (`heddle token create`); roles viewer < "
                    "operator < admin",
                }
            },
        },
    }


ID = {"pattern": ID_SCHEMA_PATTERN}
# What shared/core/validation.py checks of a workflow document, stated in its schema as well. The
# wire structs stay unconstrained, so that the orchestrator can list every problem of a
# submit that skipped the gateway rather than fail on the first.
RULES: dict[str, dict[str, dict[str, Any]]] = {
    "StepSpec": {
        "id": ID,
        "command": {"minLength": 1},
        "dependsOn": {"items": {"type": "string", **ID}},
        "retries": {"minimum": 0, "maximum": MAX_RETRIES},
        "timeoutSeconds": {"exclusiveMinimum": 0, "maximum": MAX_TIMEOUT},
        "maxParallel": {"minimum": 1},
    },
    **{
        name: {
            "steps": {"minItems": 1},
            "name": ID,
            "runId": ID,
            "workflowId": ID,
            "timeoutSeconds": {"exclusiveMinimum": 0, "maximum": MAX_TIMEOUT},
        }
        for name in ("WorkflowSpec", "RunRequest", "RegisterRequest")
    },
}


def refine(components: dict[str, Any]) -> None:
    """Add ``RULES`` to the generated schemas; for a nullable field, to its non-null type."""
    for name, fields in RULES.items():
        properties = components.get(name, {}).get("properties", {})
        for field_name, rule in fields.items():
            schema = properties.get(field_name)
            if schema is None:
                continue
            for option in schema.get("anyOf", [schema]):
                if option.get("type") != "null":
                    option.update(rule)


def _types(op: Route) -> list[type]:
    found = [op.body] if isinstance(op.body, type) else []
    for kind, _ in op.answers.values():
        found += [k for k in (kind if isinstance(kind, tuple) else (kind,)) if isinstance(k, type)]
    return found
