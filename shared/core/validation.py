"""Validation of workflow documents as users write them: every problem, not just the first.

Works on the decoded JSON (plain dicts and lists) so that a wrong type in step 3 and an
unknown dependency in step 7 are reported together; only a clean document becomes a
``WorkflowSpec``. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from heddle.shared.core.conditions import condition_problems, reference_problems
from heddle.shared.core.dag import structural_problems
from heddle.shared.core.step_env import (
    declaration_problems,
    env_problems,
    inline_problems,
    values_problems,
)
from heddle.shared.wire.contracts import RunRequest, SubmitRun, WorkflowSpec
from heddle.shared.wire.errors import InvalidWorkflow, Problem
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
}
WORKFLOW_FIELDS = {
    "name",
    "steps",
    "schedule",
    "timezone",
    "catchup",
    "description",
    "params",
    "env",
    "timeoutSeconds",
}
RUN_FIELDS = WORKFLOW_FIELDS | {"runId", "workflowId"}
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


def _unknown(obj: dict[str, Any], allowed: set[str], path: str, problems: list[Problem]) -> None:
    for key in obj:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            problems.append(Problem(where, f"unknown field {key!r}"))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_PLAIN_FIELDS = frozenset({"id", "command", "dependsOn"})


def _plain_step(step: object, limits: Limits) -> tuple[str, list[str]] | None:
    """A step with an id, a short command and string dependencies, nothing else, all of them
    right: the bulk of a big workflow, passed without building a path or a problem list.
    None for anything else, which ``_check_step`` then checks in full."""
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


def _command_problem(command: object, limits: Limits) -> str | None:
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


def _check_step(
    step: object, i: int, limits: Limits, problems: list[Problem]
) -> tuple[str, list[str]] | None:
    path = f"steps[{i}]"
    if not isinstance(step, dict):
        problems.append(Problem(path, "a step must be an object"))
        return None
    _unknown(step, STEP_FIELDS, path, problems)
    step_id = step.get("id")
    if step_id is None:
        problems.append(Problem(f"{path}.id", "missing required field"))
    else:
        check_id(step_id, f"{path}.id", "step id", problems)
    command_problem = _command_problem(step.get("command"), limits)
    if command_problem is not None:
        problems.append(Problem(f"{path}.command", command_problem))
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
    _check_timeout(step.get("timeoutSeconds"), f"{path}.timeoutSeconds", problems)
    if "env" in step:
        problems.extend(env_problems(step["env"], f"{path}.env"))
    problems.extend(condition_problems(step, path))
    if isinstance(step_id, str):
        return step_id, dep_ids
    return None


def _check_timeout(timeout: Any, path: str, problems: list[Problem]) -> None:
    """A step's ``timeoutSeconds``, or a workflow's (its runs' deadline): absent, or a number
    above 0 and at most MAX_TIMEOUT."""
    if timeout is not None and (not _is_number(timeout) or not 0 < timeout <= MAX_TIMEOUT):
        problems.append(
            Problem(path, f"timeoutSeconds must be a number above 0 and at most {MAX_TIMEOUT}")
        )


def check_schedule(doc: dict[str, Any], problems: list[Problem]) -> None:
    from heddle.shared.core.cron import schedule_problem, timezone_problem

    schedule = doc.get("schedule")
    if schedule is not None:
        msg = schedule_problem(schedule)
        if msg:
            problems.append(Problem("schedule", msg))
    tz = doc.get("timezone")
    if tz is not None:
        msg = timezone_problem(tz)
        if msg:
            problems.append(Problem("timezone", msg))
    if "catchup" in doc and not isinstance(doc["catchup"], bool):
        problems.append(Problem("catchup", "catchup must be true or false"))


def _check_params(doc: dict[str, Any], inline: bool, problems: list[Problem]) -> None:
    """A document's ``params``: declarations, or (``inline``) a run's values too; in a
    scheduled workflow, each named one without a default, whatever else is wrong with the
    list."""
    params = doc["params"]
    problems.extend(inline_problems(params) if inline else declaration_problems(params))
    if doc.get("schedule") is not None and isinstance(params, list):
        for i, decl in enumerate(params):
            named = isinstance(decl, dict) and isinstance(decl.get("name"), str)
            if named and "default" not in decl:
                problems.append(
                    Problem(
                        f"params[{i}]",
                        f"parameter {decl['name']!r} needs a default: a scheduled run "
                        "gives no values",
                    )
                )


def workflow_problems(
    doc: object,
    limits: Limits,
    *,
    allowed: set[str] = WORKFLOW_FIELDS,
    name_required: bool = False,
    inline: bool = False,
) -> list[Problem]:
    """Every problem of a workflow document. ``inline``: a run's document, whose ``params``
    may be the run's values (``shared/core/step_env.py``, ``inline_problems``)."""
    if not isinstance(doc, dict):
        return [Problem("", "the body must be a JSON object")]
    problems: list[Problem] = []
    _unknown(doc, allowed, "", problems)
    name = doc.get("name")
    if name is None:
        if name_required:
            problems.append(Problem("name", "missing required field"))
    else:
        check_id(name, "name", "workflow name", problems)
    if "description" in doc and not isinstance(doc["description"], str):
        problems.append(Problem("description", "description must be a string"))
    check_schedule(doc, problems)
    if "params" in doc:
        _check_params(doc, inline, problems)
    if "env" in doc:
        problems.extend(env_problems(doc["env"], "env"))
    _check_timeout(doc.get("timeoutSeconds"), "timeoutSeconds", problems)
    steps = doc.get("steps")
    if steps is None:
        problems.append(Problem("steps", "missing required field"))
        return problems
    if not isinstance(steps, list):
        problems.append(Problem("steps", "steps must be a list"))
        return problems
    if not steps:
        problems.append(Problem("steps", "a workflow needs at least one step"))
        return problems
    if len(steps) > limits.max_steps:
        problems.append(Problem("steps", f"{len(steps)} steps; the limit is {limits.max_steps}"))
        return problems
    deps: list[tuple[str, list[str]]] = []
    for i, step in enumerate(steps):
        checked = _plain_step(step, limits) or _check_step(step, i, limits, problems)
        # A step without a usable id keeps its place (so paths stay right) under a name no
        # dependency can spell.
        deps.append(checked if checked is not None else (f"\x00{i}", []))
    problems.extend(structural_problems(deps))
    problems.extend(reference_problems(steps, deps))
    return problems


def parse_workflow(doc: object, limits: Limits, *, name_required: bool = True) -> WorkflowSpec:
    problems = workflow_problems(doc, limits, name_required=name_required)
    if problems:
        raise InvalidWorkflow(problems)
    return msgspec.convert(doc, WorkflowSpec)


def parse_run_request(doc: object, limits: Limits) -> RunRequest:
    problems = workflow_problems(doc, limits, allowed=RUN_FIELDS, inline=True)
    if isinstance(doc, dict):
        for key in ("runId", "workflowId"):
            if key in doc:
                check_id(doc[key], key, "run id", problems)
        if "runId" in doc and "workflowId" in doc and doc["runId"] != doc["workflowId"]:
            problems.append(Problem("workflowId", "runId and workflowId differ; give one"))
    if problems:
        raise InvalidWorkflow(problems)
    return msgspec.convert(doc, RunRequest)


def submit_problems(cmd: SubmitRun, limits: Limits) -> list[Problem]:
    """A submit command checked as the gateway checks a run request: a command that reached
    the stream some other way gets no more trust than one that came through the API."""
    problems: list[Problem] = []
    check_id(cmd.run_id, "runId", "run id", problems)
    if cmd.workflow_name is not None:
        check_id(cmd.workflow_name, "workflowName", "workflow name", problems)
    doc = {"steps": msgspec.to_builtins(cmd.steps)}
    if cmd.env:
        doc["env"] = cmd.env
    if cmd.timeout_seconds is not None:
        doc["timeoutSeconds"] = cmd.timeout_seconds
    problems.extend(workflow_problems(doc, limits))
    problems.extend(values_problems(cmd.params))
    if cmd.retry_of is not None:
        check_id(cmd.retry_of, "retryOf", "run id", problems)
    ids = {s.id for s in cmd.steps}
    for step_id in cmd.carried:
        if step_id not in ids:
            problems.append(Problem(f"carried.{step_id}", f"unknown step {step_id!r}"))
    return problems
