"""A registered workflow's ``webhooks`` as a user wrote them, checked (docs/webhooks.md).
Pure: no I/O."""

from __future__ import annotations

from heddle.shared.wire.errors import Problem
from heddle.shared.wire.names import ID_PATTERN

MAX_WEBHOOKS = 20
WEBHOOK_FIELDS = {"name", "params"}


def webhook_problems(value: object) -> list[Problem]:
    """Every problem of ``webhooks``: a list of ``{name, params}`` with unique names whose
    params map parameter names to expressions."""
    if not isinstance(value, list):
        return [Problem("webhooks", "webhooks must be a list")]
    if len(value) > MAX_WEBHOOKS:
        return [Problem("webhooks", f"{len(value)} webhooks; the limit is {MAX_WEBHOOKS}")]
    problems: list[Problem] = []
    seen: set[str] = set()
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
    return problems
