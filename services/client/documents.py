"""Workflow files read and checked before anything is sent: JSON or YAML, a path or ``-`` for
standard input, validated by the same code the gateway runs (shared/validation.py), so a
broken file gets the API's list of problems without a round trip and without a half-made
run.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

from shared.errors import InvalidWorkflow, Problem
from shared.validation import Limits, parse_run_request, parse_workflow

# The step count and a command's size are the gateway's settings (HEDDLE_MAX_STEPS,
# HEDDLE_MAX_COMMAND_BYTES), unknown here: the gateway checks them, the file the rest.
GATEWAY_LIMITS = Limits(max_steps=sys.maxsize, max_command_bytes=sys.maxsize)


class BadDocument(Exception):
    """A workflow file that cannot be sent: unreadable, not JSON or YAML, or with problems."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s)")

    def lines(self) -> list[str]:
        return [f"{p.path or '(document)'}: {p.message}" for p in self.problems]


def read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadDocument(path, [Problem("", f"cannot read the file: {exc}")]) from exc


def decode(text: str, source: str) -> Any:
    """JSON first (exact numbers and messages), then YAML, which most JSON also is."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise BadDocument(source, [Problem(where, f"neither JSON nor YAML: {problem}")]) from exc


def load(path: str) -> Any:
    return decode(read_source(path), "standard input" if path == "-" else path)


def run_request(
    path: str, run_id: str | None = None, limits: Limits | None = None
) -> dict[str, Any]:
    """A document for ``POST /api/runs`` (with ``runId`` set if given), checked as the
    gateway checks it."""
    doc = load(path)
    if run_id is not None and isinstance(doc, dict):
        doc["runId"] = run_id
    try:
        parse_run_request(doc, limits or GATEWAY_LIMITS)
    except InvalidWorkflow as exc:
        raise BadDocument(path, exc.problems) from exc
    return doc


def workflow(path: str, limits: Limits | None = None) -> dict[str, Any]:
    """A document for ``POST /api/workflows`` (a name is required), checked likewise."""
    doc = load(path)
    try:
        parse_workflow(doc, limits or GATEWAY_LIMITS, name_required=True)
    except InvalidWorkflow as exc:
        raise BadDocument(path, exc.problems) from exc
    return doc
