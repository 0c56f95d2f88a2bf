"""Validation of workflow documents as users write them: every problem, not just the first.

Works on the decoded JSON (plain dicts and lists) so that a wrong type in step 3 and an
unknown dependency in step 7 are reported together; only a clean document becomes a
``WorkflowSpec``. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec
from heddle.shared.core import concurrency
from heddle.shared.core.conditions import reference_problems
from heddle.shared.core.dag import structural_problems
from heddle.shared.core.exit_handlers import exit_problems
from heddle.shared.core.namespaces import namespace_problems, stored_name_problems
from heddle.shared.core.notify import notify_problems
from heddle.shared.core.priority import priority_problems
from heddle.shared.core.step_checks import (
    Limits,
    check_id,
    check_timeout,
    steps_deps,
    unknown_fields,
)
from heddle.shared.core.step_env import (
    declaration_problems,
    env_problems,
    inline_problems,
    values_problems,
)
from heddle.shared.core.webhooks import webhook_problems
from heddle.shared.wire.contracts import Concurrency, RunRequest, SubmitRun, WorkflowSpec
from heddle.shared.wire.errors import InvalidWorkflow, Problem

WORKFLOW_FIELDS = {
    "name",
    "steps",
    "schedule",
    "timezone",
    "catchup",
    "description",
    "params",
    "env",
    "onExit",
    "timeoutSeconds",
    "priority",
    "concurrency",
    "namespace",
    "notify",
}
RUN_FIELDS = WORKFLOW_FIELDS | {"runId", "workflowId"}
REGISTERED_FIELDS = WORKFLOW_FIELDS | {"webhooks"}  # a registered workflow's alone


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


def _concurrency_problems(doc: dict[str, Any]) -> list[Problem]:
    """The document's ``concurrency``; for a scheduled workflow, whose runs take the
    parameters' defaults, its key evaluated with them too, so that no scheduled run fails
    to get one."""
    problems = concurrency.spec_problems(doc["concurrency"])
    params = doc.get("params", [])
    if problems or doc["concurrency"] is None or doc.get("schedule") is None:
        return problems
    if not isinstance(params, list):
        return problems
    spec = msgspec.convert(doc["concurrency"], Concurrency)
    defaults = {
        p["name"]: p["default"]
        for p in params
        if isinstance(p, dict)
        and isinstance(p.get("name"), str)
        and isinstance(p.get("default"), str)
    }
    name = doc.get("name")
    found = concurrency.key_problem(spec, defaults, name if isinstance(name, str) else None)
    return [] if found is None else [found]


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
    unknown_fields(doc, allowed, "", problems)
    name = doc.get("name")
    if name is None:
        if name_required:
            problems.append(Problem("name", "missing required field"))
    else:
        check_id(name, "name", "workflow name", problems)
    if "namespace" in doc:
        problems.extend(namespace_problems(doc["namespace"]))
    if "description" in doc and not isinstance(doc["description"], str):
        problems.append(Problem("description", "description must be a string"))
    check_schedule(doc, problems)
    if "params" in doc:
        _check_params(doc, inline, problems)
    if "env" in doc:
        problems.extend(env_problems(doc["env"], "env"))
    check_timeout(doc.get("timeoutSeconds"), "timeoutSeconds", problems)
    if "priority" in doc:
        problems.extend(priority_problems(doc["priority"]))
    if "concurrency" in doc:
        problems.extend(_concurrency_problems(doc))
    if "notify" in doc:
        problems.extend(notify_problems(doc["notify"], inline=inline))
    if "webhooks" in doc and "webhooks" in allowed:  # elsewhere an unknown field, no more
        problems.extend(webhook_problems(doc["webhooks"], doc.get("params")))
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
    deps = steps_deps(steps, limits, problems)
    problems.extend(structural_problems(deps))
    problems.extend(reference_problems(steps, deps))
    if "onExit" in doc:
        problems.extend(exit_problems(doc["onExit"], deps, limits))
    return problems


def parse_workflow(doc: object, limits: Limits, *, name_required: bool = True) -> WorkflowSpec:
    problems = workflow_problems(
        doc, limits, allowed=REGISTERED_FIELDS, name_required=name_required
    )
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
    problems.extend(stored_name_problems(cmd.run_id, "runId", "run id"))
    if cmd.workflow_name is not None:
        problems.extend(stored_name_problems(cmd.workflow_name, "workflowName", "workflow name"))
    doc = {"steps": msgspec.to_builtins(cmd.steps)}
    if cmd.on_exit:
        doc["onExit"] = msgspec.to_builtins(cmd.on_exit)
    if cmd.env:
        doc["env"] = cmd.env
    if cmd.timeout_seconds is not None:
        doc["timeoutSeconds"] = cmd.timeout_seconds
    problems.extend(workflow_problems(doc, limits))
    problems.extend(priority_problems(cmd.priority))
    problems.extend(
        concurrency.submit_problems(cmd.concurrency_key, cmd.concurrency_limit, cmd.on_limit)
    )
    problems.extend(values_problems(cmd.params))
    if cmd.retry_of is not None:
        problems.extend(stored_name_problems(cmd.retry_of, "retryOf", "run id"))
    ids = {s.id for s in cmd.steps}
    for step_id in cmd.carried:
        if step_id not in ids:
            problems.append(Problem(f"carried.{step_id}", f"unknown step {step_id!r}"))
    return problems
