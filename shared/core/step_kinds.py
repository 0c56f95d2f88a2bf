"""What a step is: a shell ``command``, an approval gate (``approval``) or a call of a
registered workflow (``workflow``), exactly one of them, each checked as a user wrote it.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from heddle.shared.wire.errors import Problem
from heddle.shared.wire.names import ID_PATTERN

KINDS = ("command", "approval", "workflow")
# What a gate or a call cannot be combined with: it runs on no runner, and once.
RUNNER_ONLY = ("forEach", "maxParallel", "runsOn", "semaphores")
MAX_MESSAGE = 4096  # characters of an approval's message
APPROVAL_FIELDS = {"message", "timeoutSeconds"}
CALL_FIELDS = {"name", "version", "params"}


def kind_of(step: dict[str, Any]) -> str | None:
    """The step's kind, if it names exactly one."""
    named = [k for k in KINDS if step.get(k) is not None]
    return named[0] if len(named) == 1 else None


def kind_problems(step: dict[str, Any], path: str) -> list[Problem]:
    """Exactly one kind, and what a gate or a call may not have. The command itself is
    step_checks.command_problem's; a gate's and a call's fields are checked below."""
    named = [k for k in KINDS if step.get(k) is not None]
    if not named:
        return [Problem(f"{path}.command", "missing required field (or approval, or workflow)")]
    if len(named) > 1:
        both = " and ".join(named)
        return [Problem(path, f"a step has one of command, approval and workflow, not {both}")]
    if named[0] == "command":
        return []
    problems = [
        Problem(f"{path}.{field}", f"a step with {named[0]} runs on no runner: no {field}")
        for field in RUNNER_ONLY
        if field in step
    ]
    if named[0] == "approval":
        problems.extend(approval_problems(step["approval"], f"{path}.approval"))
    else:
        problems.extend(call_problems(step["workflow"], f"{path}.workflow"))
    return problems


def _unknown(value: dict[str, Any], allowed: set[str], path: str) -> list[Problem]:
    return [Problem(f"{path}.{k}", "unknown field") for k in sorted(set(value) - allowed)]


def approval_problems(value: object, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, "approval must be an object with a message")]
    problems = _unknown(value, APPROVAL_FIELDS, path)
    message = value.get("message")
    if not isinstance(message, str) or not message.strip():
        problems.append(Problem(f"{path}.message", "message must be a non-empty string"))
    elif len(message) > MAX_MESSAGE:
        problems.append(
            Problem(
                f"{path}.message", f"message is {len(message)} characters; at most {MAX_MESSAGE}"
            )
        )
    timeout = value.get("timeoutSeconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        problems.append(Problem(f"{path}.timeoutSeconds", "timeoutSeconds must be a number > 0"))
    return problems


def call_problems(value: object, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, "workflow must be an object with the name of a workflow")]
    problems = _unknown(value, CALL_FIELDS, path)
    name = value.get("name")
    if not isinstance(name, str) or not ID_PATTERN.match(name):
        problems.append(Problem(f"{path}.name", "name must be a registered workflow's name"))
    version = value.get("version")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 1
    ):
        problems.append(Problem(f"{path}.version", "version must be an integer >= 1"))
    params = value.get("params", {})
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in params.items()
    ):
        problems.append(Problem(f"{path}.params", "params must map names to string values"))
    return problems
