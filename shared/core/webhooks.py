"""A registered workflow's ``webhooks`` (docs/webhooks.md): checked as a user wrote them,
and what a delivery to one gives its run, its parameters and its id. Pure: no I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from heddle.shared.core.expressions import (
    ExpressionError,
    compile_hook,
    evaluate_hook,
    expression_problem,
)
from heddle.shared.core.namespaces import qualified, split_qualified
from heddle.shared.wire.contracts import Webhook
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.names import ID_PATTERN

MAX_WEBHOOKS = 20
WEBHOOK_FIELDS = {"name", "params"}


def webhook_problems(value: object, declared: object = None) -> list[Problem]:
    """Every problem of ``webhooks``: a list of ``{name, params}`` with unique names whose
    params map parameters the workflow declares (``declared``, its ``params`` as written)
    to CEL over a delivery, giving each one that has no default."""
    if not isinstance(value, list):
        return [Problem("webhooks", "webhooks must be a list")]
    if len(value) > MAX_WEBHOOKS:
        return [Problem("webhooks", f"{len(value)} webhooks; the limit is {MAX_WEBHOOKS}")]
    problems: list[Problem] = []
    seen: set[str] = set()
    defaults = _declared(declared)
    for i, hook in enumerate(value):
        path = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            problems.append(Problem(path, "a webhook must be an object with a name"))
            continue
        problems.extend(
            Problem(f"{path}.{k}", "unknown field") for k in sorted(set(hook) - WEBHOOK_FIELDS)
        )
        name = hook.get("name")
        if not isinstance(name, str) or not ID_PATTERN.match(name):
            problems.append(
                Problem(f"{path}.name", "name must be an id (letters, digits, - and _)")
            )
        elif name in seen:
            problems.append(Problem(f"{path}.name", f"webhook {name!r} is named twice"))
        else:
            seen.add(name)
        params = hook.get("params", {})
        if not isinstance(params, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in params.items()
        ):
            problems.append(Problem(f"{path}.params", "params must map names to expressions"))
            continue
        problems.extend(_params_problems(f"{path}.params", params, defaults))
    return problems


def _declared(params: object) -> dict[str, bool] | None:
    """Each declared parameter's name and whether it has a default; None if ``params`` is
    malformed (its own problems are reported under ``params``)."""
    if params is None:
        return {}
    if not isinstance(params, list):
        return None
    found: dict[str, bool] = {}
    for decl in params:
        if not isinstance(decl, dict) or not isinstance(decl.get("name"), str):
            return None
        found[decl["name"]] = decl.get("default") is not None
    return found


def _params_problems(
    path: str, params: Mapping[str, str], defaults: Mapping[str, bool] | None
) -> list[Problem]:
    problems: list[Problem] = []
    for name, text in params.items():
        if defaults is not None and name not in defaults:
            known = ", ".join(sorted(defaults)) or "none"
            problems.append(
                Problem(f"{path}.{name}", f"unknown parameter {name!r} (declared: {known})")
            )
        found = expression_problem(text, "hook")
        if found is not None:
            problems.append(Problem(f"{path}.{name}", found))
    for name, has_default in (defaults or {}).items():
        if not has_default and name not in params:
            problems.append(
                Problem(path, f"parameter {name!r} has no default: the webhook must give it")
            )
    return problems


def delivery_params(
    hook: Webhook, body: Any, headers: Mapping[str, str]
) -> tuple[dict[str, str], list[Problem]]:
    """The values a delivery gives its run: each of the hook's expressions evaluated over
    its decoded JSON ``body`` and its ``headers`` (names in lower case), and every problem,
    by parameter."""
    values: dict[str, str] = {}
    problems: list[Problem] = []
    for name, text in hook.params.items():
        try:
            values[name] = evaluate_hook(compile_hook(text), body, headers)
        except ExpressionError as exc:
            problems.append(Problem(f"params.{name}", exc.problem))
    return values, problems


def header_map(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A delivery's headers as its expressions see them: names in lower case, the values
    of a repeated one joined by ``, `` (as HTTP folds them)."""
    found: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        found[key] = f"{found[key]}, {value}" if key in found else value
    return found


def delivery_run_id(workflow: str, hook: str, delivery: str) -> str:
    """The run a delivery id names: a repeated delivery (a sender's retry, a replay) of the
    same workflow and hook names the same run, and so makes no second one."""
    namespace, own = split_qualified(workflow)
    digest = hashlib.sha256(f"{own}\x00{hook}\x00{delivery}".encode()).hexdigest()[:16]
    return qualified(namespace, f"{own[:40]}-h{digest}")
