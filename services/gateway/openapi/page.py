"""``GET /openapi.json`` and ``GET /docs``: the API document, and the same as a plain page;
``GET /schema/workflow.json``: the JSON Schema of a workflow file, for editors.

The app publishes the document of the routes it serves (``Published.of``, once per process);
the page is rendered here from the document: no script, and nothing fetched from elsewhere.
The workflow schema is made once, at import (workflow_schema.py), as docs/workflow.schema.json
holds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

import msgspec
from aiohttp import web
from heddle.services.gateway.openapi.document import ERROR_MEANINGS, document
from heddle.services.gateway.openapi.route import OPEN, Route
from heddle.services.gateway.openapi.workflow_schema import schema_text

STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "h2{font-size:1.05rem;margin-top:2rem}code,pre{font:13px ui-monospace,monospace}"
    "pre{background:#f4f4f4;padding:.5rem;overflow-x:auto}td,th{padding:0 .6rem 0 0;"
    "text-align:left;vertical-align:top}.m{font-weight:700}"
)
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'"


def _ref_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else msgspec.json.encode(schema).decode()


def _operation_html(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [
        f'<h2 id="{escape(op["operationId"])}"><span class="m">{method.upper()}</span> '
        f"<code>{escape(path)}</code>: {escape(op['summary'])}</h2>",
        f"<p>{escape(op.get('description', ''))}</p>",
    ]
    params = op.get("parameters", [])
    if params:
        out.append("<table><tr><th>parameter</th><th>in</th><th>schema</th><th></th></tr>")
        for p in params:
            out.append(
                f"<tr><td><code>{escape(p['name'])}</code></td><td>{p['in']}</td>"
                f"<td><code>{escape(_ref_name(p['schema']))}</code></td>"
                f"<td>{escape(p['description'])}</td></tr>"
            )
        out.append("</table>")
    body = op.get("requestBody")
    if body is not None:
        schema = body["content"]["application/json"]["schema"]
        out.append(f'<p>Body: <a href="#schema-{_ref_name(schema)}">{_ref_name(schema)}</a></p>')
    out.append("<table>")
    for status, answer in op["responses"].items():
        meaning = answer.get("description") or status_meaning(answer)
        out.append(f"<tr><td>{status}</td><td>{escape(meaning)}</td></tr>")
    out.append("</table>")
    return out


def status_meaning(answer: dict[str, Any]) -> str:
    return ERROR_MEANINGS[int(_ref_name(answer).lstrip("E"))]


def render(doc: dict[str, Any]) -> str:
    parts = [
        "<!doctype html><html lang=en><meta charset=utf-8>",
        f"<title>Heddle API {escape(doc['info']['version'])}</title><style>{STYLE}</style>",
        f"<h1>Heddle API {escape(doc['info']['version'])}</h1>",
        f"<p>{escape(doc['info']['description'])} The machine-readable document is "
        '<a href="/openapi.json">/openapi.json</a>.</p>',
    ]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            parts += _operation_html(method, path, op)
    parts.append("<h1>Schemas</h1>")
    for name, schema in doc["components"]["schemas"].items():
        shown = msgspec.json.format(msgspec.json.encode(schema), indent=2).decode()
        parts.append(
            f'<h2 id="schema-{escape(name)}">{escape(name)}</h2><pre>{escape(shown)}</pre>'
        )
    return "\n".join(parts)


@dataclass(frozen=True)
class Published:
    """The document of an app's routes, as served: JSON, and the page."""

    json: bytes
    page: bytes

    @classmethod
    def of(cls, routes: Iterable[Route]) -> Published:
        doc = document(routes)
        return cls(msgspec.json.encode(doc), render(doc).encode())


PUBLISHED = web.AppKey("published_api", Published)


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=request.app[PUBLISHED].json, content_type="application/json")


WORKFLOW_SCHEMA = schema_text()
SCHEMA_TYPE = "application/schema+json"


async def workflow_schema_json(request: web.Request) -> web.Response:
    return web.Response(body=WORKFLOW_SCHEMA, content_type=SCHEMA_TYPE)


async def docs_page(request: web.Request) -> web.Response:
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
    body = request.app[PUBLISHED].page
    return web.Response(body=body, content_type="text/html", charset="utf-8", headers=headers)


ROUTES = (
    Route(
        "GET",
        "/openapi.json",
        openapi_json,
        operation_id="openapi",
        summary="This document",
        tag="operations",
        role=OPEN,  # the API's shape, the same for every deployment
        answers={200: ("application/json", "OpenAPI 3.1")},
        offline=True,
    ),
    Route(
        "GET",
        "/docs",
        docs_page,
        operation_id="apiDocs",
        summary="This document as a page",
        tag="operations",
        role=OPEN,
        answers={200: ("text/html", "The operations, their parameters and answers")},
        offline=True,
    ),
    Route(
        "GET",
        "/schema/workflow.json",
        workflow_schema_json,
        operation_id="workflowSchema",
        summary="The JSON Schema of a workflow file",
        description="For editors: a workflow file's first line "
        "`# yaml-language-server: $schema=<this URL>` checks it as it is written.",
        tag="operations",
        role=OPEN,  # the same for every deployment, as the API's document
        answers={
            200: (
                SCHEMA_TYPE,
                "JSON Schema (draft 2020-12) of `heddle register` and `heddle submit` files",
            )
        },
        offline=True,
    ),
)
