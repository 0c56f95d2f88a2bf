"""The gateway's answers: JSON documents, and errors in the one shape (``ErrorDoc``)."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web
from heddle.shared.api.answers import ErrorDoc, ProblemDoc
from heddle.shared.wire.contracts import encode
from heddle.shared.wire.errors import DocumentTooLarge, Problem


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(body), status=status, content_type="application/json"
    )


# An answer lists this many problems at most: a small document can hold millions of them.
MAX_LISTED_PROBLEMS = 1000


def error_body(message: str, problems: list[Problem] | None = None, **extra: Any) -> bytes:
    """The one shape of every error answer (``ErrorDoc``): ``error``, then ``problems``
    (the first MAX_LISTED_PROBLEMS; ``problemsNotListed`` counts the rest)."""
    listed: list[ProblemDoc] | msgspec.UnsetType = msgspec.UNSET
    if problems is not None:
        shown = problems[:MAX_LISTED_PROBLEMS]
        listed = [ProblemDoc(path=p.path, message=p.message) for p in shown]
        if len(problems) > MAX_LISTED_PROBLEMS:
            extra["problems_not_listed"] = len(problems) - MAX_LISTED_PROBLEMS
    return encode(ErrorDoc(error=message, problems=listed, **extra))


def error(
    http_status: int, message: str, problems: list[Problem] | None = None, **extra: Any
) -> web.Response:
    return web.Response(
        body=error_body(message, problems, **extra),
        status=http_status,
        content_type="application/json",
    )


def bad_request(message: str, problems: list[Problem] | None = None) -> web.HTTPBadRequest:
    """The 400 as an exception, for helpers that cannot return an answer."""
    text = error_body(message, problems).decode()
    return web.HTTPBadRequest(text=text, content_type="application/json")


def too_large(exc: DocumentTooLarge) -> web.Response:
    return error(413, str(exc), [Problem(exc.path, "too large")])
