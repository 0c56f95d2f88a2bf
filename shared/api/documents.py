"""Workflows read and checked before anything is sent: a document, or a JSON or YAML file
(a path, or ``-`` for standard input), validated by the same code the gateway runs
(shared/core/validation.py), so a broken one gets the API's list of problems without a round
trip and without a half-made run.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import yaml
from heddle.shared.api.errors import BadDocument
from heddle.shared.core.validation import Limits, parse_run_request, parse_workflow
from heddle.shared.wire.errors import InvalidWorkflow, Problem

# The step count and a command's size are the gateway's settings (HEDDLE_MAX_STEPS,
# HEDDLE_MAX_COMMAND_BYTES), unknown here: the gateway checks them, the file the rest.
GATEWAY_LIMITS = Limits(max_steps=sys.maxsize, max_command_bytes=sys.maxsize)


# A workflow as the client takes it: the document itself, or the path of a JSON or YAML file.
Source = Mapping[str, Any] | str | os.PathLike[str]
IN_HAND = "the document"  # how a document given as an object is named in its problems


def read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadDocument(path, [Problem("", f"cannot read the file: {exc}")]) from exc


class DuplicateKey(Exception):
    """A key twice in one object or mapping: JSON and YAML readers keep the last silently."""

    def __init__(self, key: object, where: str = "") -> None:
        self.key, self.where = key, where


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise DuplicateKey(key)
        doc[key] = value
    return doc


class _UniqueKeysLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise DuplicateKey(key, f"line {mark.line + 1}, column {mark.column + 1}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def decode(text: str, source: str) -> Any:
    """JSON first (exact numbers and messages), then YAML, which most JSON also is. A key
    twice in one object is a problem, where both readers would keep the last one."""
    try:
        try:
            return json.loads(text, object_pairs_hook=_unique)
        except ValueError:
            pass
        return yaml.load(text, Loader=_UniqueKeysLoader)  # a SafeLoader: plain data only
    except DuplicateKey as exc:
        message = f"key {exc.key!r} is given twice in one object; give it once"
        raise BadDocument(source, [Problem(exc.where, message)]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise BadDocument(source, [Problem(where, f"neither JSON nor YAML: {problem}")]) from exc


def load(source: Source) -> tuple[Any, str]:
    """The document and what its problems are said to be in: a copy of a document given as
    an object (the caller's is left as it was), else the file's contents."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), IN_HAND
    path = os.fspath(source)
    return decode(read_source(path), "standard input" if path == "-" else path), path


def run_request(
    source: Source,
    run_id: str | None = None,
    priority: int | None = None,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """A document for ``POST /api/runs`` (with ``runId`` and ``priority`` set if given),
    checked as the gateway checks it."""
    doc, path = load(source)
    if run_id is not None and isinstance(doc, dict):
        doc.pop("workflowId", None)  # the older name of runId: --run-id wins over either
        doc["runId"] = run_id
    if priority is not None and isinstance(doc, dict):
        doc["priority"] = priority
    try:
        parse_run_request(doc, limits or GATEWAY_LIMITS)
    except InvalidWorkflow as exc:
        raise BadDocument(path, exc.problems) from exc
    checked: dict[str, Any] = doc  # an object: parse_run_request refuses anything else
    return checked


def workflow(source: Source, limits: Limits | None = None) -> dict[str, Any]:
    """A document for ``POST /api/workflows`` (a name is required), checked likewise."""
    doc, path = load(source)
    try:
        parse_workflow(doc, limits or GATEWAY_LIMITS, name_required=True)
    except InvalidWorkflow as exc:
        raise BadDocument(path, exc.problems) from exc
    checked: dict[str, Any] = doc  # an object: parse_workflow refuses anything else
    return checked
