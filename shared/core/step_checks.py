"""One step of a workflow document as a user wrote it, checked: its id, command, dependencies,
retries, timeout, env and condition, every problem under its path. The document around the
steps is shared/core/validation.py's. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heddle.shared.core.conditions import condition_problems
from heddle.shared.core.labels import MAX_RUNS_ON, label_problems
from heddle.shared.core.semaphores import name_problem
from heddle.shared.core.step_env import env_problems
from heddle.shared.core.step_kinds import kind_of, kind_problems
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.names import ID_PATTERN

STEP_FIELDS = {
    "id",
    "command",
    "dependsOn",
    "retries",
    "timeoutSeconds",
    "env",
    "when",
    "allowFailure",
    "forEach",
    "maxParallel",
    "runsOn",
    "semaphores",
    "approval",
    "workflow",
}
MAX_RETRIES = 100
MAX_TIMEOUT = 7 * 86400


@dataclass(frozen=True, slots=True)
class Limits:
    max_steps: int = 10_000
    max_command_bytes: int = 16 * 1024


def check_id(value: object, path: str, what: str, problems: list[Problem]) -> bool:
    if not isinstance(value, str):
        problems.append(Problem(path, f"{what} must be a string"))
        return False
    if not ID_PATTERN.match(value):
        problems.append(Problem(path, f"{what} {value!r} must match {ID_PATTERN.pattern}"))
        return False
    return True


def unknown_fields(
    obj: dict[str, Any], allowed: set[str], path: str, problems: list[Problem]
) -> None:
    for key in obj:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            problems.append(Problem(where, f"unknown field {key!r}"))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_PLAIN_FIELDS = frozenset({"id", "command", "dependsOn"})


def plain_step(step: object, limits: Limits) -> tuple[str, list[str]] | None:
    """A step with an id, a short command and string dependencies, nothing else, all of them
    right: the bulk of a big workflow, passed without building a path or a problem list.
    None for anything else, which ``check_step`` then checks in full."""
    if type(step) is not dict or not step.keys() <= _PLAIN_FIELDS:
        return None
    step_id, command = step.get("id"), step.get("command")
    deps = step.get("dependsOn", [])
    if (
        type(step_id) is str
        and ID_PATTERN.match(step_id)
        and type(command) is str
        and len(command) <= limits.max_command_bytes // 4  # a character: at most 4 bytes
        and command.strip()
        and "\x00" not in command
        and type(deps) is list
        and all(type(d) is str for d in deps)
    ):
        return step_id, deps
    return None


def command_problem(command: object, limits: Limits) -> str | None:
    """What is wrong with a step's command, if anything."""
    if command is None:
        return "missing required field"
    if not isinstance(command, str):
        return "command must be a string"
    if not command.strip():
        return "command is empty"
    if "\x00" in command:  # no exec argument can hold one: it would fail only at run time
        return "command holds a NUL byte (\\u0000)"
    if len(command.encode()) > limits.max_command_bytes:
        return f"command is {len(command.encode())} bytes; the limit is {limits.max_command_bytes}"
    return None


def check_step(
    step: object, path: str, limits: Limits, problems: list[Problem]
) -> tuple[str, list[str]] | None:
    """Every problem of one step at ``path``; its id and dependencies if it has an id."""
    if not isinstance(step, dict):
        problems.append(Problem(path, "a step must be an object"))
        return None
    unknown_fields(step, STEP_FIELDS, path, problems)
    step_id = step.get("id")
    if step_id is None:
        problems.append(Problem(f"{path}.id", "missing required field"))
    else:
        check_id(step_id, f"{path}.id", "step id", problems)
    problems.extend(kind_problems(step, path))
    if kind_of(step) == "command":
        command = command_problem(step.get("command"), limits)
        if command is not None:
            problems.append(Problem(f"{path}.command", command))
    deps = step.get("dependsOn", [])
    dep_ids: list[str] = []
    if not isinstance(deps, list):
        problems.append(Problem(f"{path}.dependsOn", "dependsOn must be a list of step ids"))
    else:
        for j, dep in enumerate(deps):
            if isinstance(dep, str):
                dep_ids.append(dep)
            else:
                problems.append(
                    Problem(f"{path}.dependsOn[{j}]", "a dependency must be a step id string")
                )
    retries = step.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= MAX_RETRIES:
        problems.append(
            Problem(f"{path}.retries", f"retries must be an integer from 0 to {MAX_RETRIES}")
        )
    check_timeout(step.get("timeoutSeconds"), f"{path}.timeoutSeconds", problems)
    if "env" in step:
        problems.extend(env_problems(step["env"], f"{path}.env"))
    problems.extend(condition_problems(step, path))
    if "runsOn" in step:
        problems.extend(runs_on_problems(step["runsOn"], f"{path}.runsOn"))
    if "semaphores" in step:
        problems.extend(semaphores_problems(step["semaphores"], f"{path}.semaphores"))
    if isinstance(step_id, str):
        return step_id, dep_ids
    return None


def runs_on_problems(runs_on: object, path: str) -> list[Problem]:
    """A step's ``runsOn``: a list of runner labels (shared/core/labels.py)."""
    if not isinstance(runs_on, list) or not all(isinstance(x, str) for x in runs_on):
        return [Problem(path, "runsOn must be a list of runner labels")]
    return [Problem(path, text) for text in label_problems(runs_on, MAX_RUNS_ON)]


def semaphores_problems(value: object, path: str) -> list[Problem]:
    """A step's ``semaphores``: a list of distinct semaphore names."""
    if not isinstance(value, list):
        return [Problem(path, "semaphores must be a list of semaphore names")]
    problems = [
        Problem(f"{path}[{j}]", why)
        for j, name in enumerate(value)
        if (why := name_problem(name)) is not None
    ]
    seen: set[str] = set()
    for j, name in enumerate(value):
        if isinstance(name, str) and name in seen:
            problems.append(Problem(f"{path}[{j}]", f"semaphore {name!r} is named twice"))
        seen.add(name if isinstance(name, str) else "")
    return problems


def check_timeout(timeout: Any, path: str, problems: list[Problem]) -> None:
    """A step's ``timeoutSeconds``, or a workflow's (its runs' deadline): absent, or a number
    above 0 and at most MAX_TIMEOUT."""
    if timeout is not None and (not _is_number(timeout) or not 0 < timeout <= MAX_TIMEOUT):
        problems.append(
            Problem(path, f"timeoutSeconds must be a number above 0 and at most {MAX_TIMEOUT}")
        )


def steps_deps(
    steps: list[Any], limits: Limits, problems: list[Problem], prefix: str = "steps"
) -> list[tuple[str, list[str]]]:
    """Each step's id and dependencies, its problems added to ``problems``. A step without a
    usable id keeps its place (so paths stay right) under a name no dependency can spell."""
    deps: list[tuple[str, list[str]]] = []
    for i, step in enumerate(steps):
        checked = plain_step(step, limits) or check_step(step, f"{prefix}[{i}]", limits, problems)
        deps.append(checked if checked is not None else (f"\x00{prefix}{i}", []))
    return deps
