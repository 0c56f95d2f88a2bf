"""What a trigger of a registered workflow gives its run (``POST /api/workflows/{name}/runs``):
an idempotency key, parameter values, the slot it is for, a priority over the workflow's. Every
problem is collected, so one answer lists them all (docs/workflows.md, "Passing data")."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from heddle.services.gateway.http.params import sent_as_utf8
from heddle.shared.core.cron_plan import named_slot
from heddle.shared.core.priority import priority_problems
from heddle.shared.core.step_env import resolve
from heddle.shared.wire.contracts import WorkflowSpec
from heddle.shared.wire.errors import Problem
from heddle.shared.wire.timefmt import rfc3339

TRIGGER_FIELDS = ("idempotencyKey", "params", "scheduledFor", "priority")
MAX_KEY_CHARS = 256


@dataclass(slots=True)
class TriggerInputs:
    key: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    slot: datetime | None = None
    priority: int | None = None  # given: the run's, over the workflow's
    problems: list[Problem] = field(default_factory=list)

    @property
    def scheduled_for(self) -> str | None:
        return rfc3339(self.slot) if self.slot is not None else None


def body_problems(body: object) -> list[Problem]:
    """The trigger body's shape: an object of the known fields (before the workflow is read)."""
    if not isinstance(body, dict):
        return [Problem("", "the body must be a JSON object")]
    return [Problem(f, f"unknown field {f!r}") for f in body if f not in TRIGGER_FIELDS]


def trigger_inputs(
    body: dict, header_key: str | None, spec: WorkflowSpec, now: datetime | None = None
) -> TriggerInputs:
    """The inputs of a run of ``spec`` and every problem with them (the body's shape is
    checked by ``body_problems`` first)."""
    out = TriggerInputs()
    key = body.get("idempotencyKey", header_key)
    if header_key is not None and "idempotencyKey" in body and key != header_key:
        message = "the Idempotency-Key header and the body's idempotencyKey differ: give one"
        out.problems.append(Problem("idempotencyKey", message))
    elif key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS):
        out.problems.append(
            Problem("idempotencyKey", f"a string of 1 to {MAX_KEY_CHARS} characters")
        )
    elif key is not None and not sent_as_utf8(key):
        out.problems.append(Problem("idempotencyKey", "the Idempotency-Key header is not UTF-8"))
    else:
        out.key = key
    out.params, problems = resolve(spec.params, body.get("params"))
    out.problems += problems
    if "priority" in body:
        problems = priority_problems(body["priority"])
        out.problems += problems
        if not problems:
            out.priority = body["priority"]
    if "scheduledFor" in body:
        try:
            out.slot = named_slot(
                body["scheduledFor"], spec.schedule, spec.timezone, now or datetime.now(UTC)
            )
        except ValueError as exc:
            out.problems.append(Problem("scheduledFor", str(exc)))
        if key is not None:
            out.problems.append(
                Problem(
                    "idempotencyKey",
                    "a run with scheduledFor is named by its slot (one run per slot): "
                    "give no idempotency key",
                )
            )
    return out
