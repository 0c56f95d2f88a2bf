"""Plain-text views of the API's answers: aligned tables for people, one fact per line for
logs and scripts. Pure: documents in, strings out (``--json`` bypasses all of this)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from heddle.shared.wire.timefmt import parse

# The order states are counted in, from not started to done.
STEP_STATES = (
    "pending",
    "queued",
    "running",
    "retrying",
    "waiting",
    "succeeded",
    "failed",
    "skipped",
    "cancelled",
)


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell; the last column is left ragged."""
    cells = [[str(c) for c in header]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in cells
    )


def seconds_between(
    start: str | None, end: str | None, now: datetime | None = None
) -> float | None:
    """Seconds from ``start`` to ``end`` (or to ``now`` when it has not ended)."""
    if not start:
        return None
    finish = parse(end) if end else (now or datetime.now(UTC))
    return max((finish - parse(start)).total_seconds(), 0.0)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def counts_text(counts: dict[str, int] | None) -> str:
    if not counts:
        return "-"
    known = [s for s in STEP_STATES if counts.get(s)]
    other = sorted(s for s in counts if s not in STEP_STATES and counts[s])
    return " ".join(f"{s}={counts[s]}" for s in known + other)


def step_counts(run: dict[str, Any]) -> dict[str, int]:
    """By state: the steps' own (kept current by events), or the document's counts where it
    carries no steps (a run of more steps than a document holds)."""
    if not run.get("stepsIncluded", True):
        return {state: n for state, n in run["counts"].items() if n}
    counts: dict[str, int] = {}
    for step in run["steps"]:
        counts[step["status"]] = counts.get(step["status"], 0) + 1
    return counts


def run_state(run: dict[str, Any]) -> str:
    """The run's status, whether it waits for its turn (HEDDLE_MAX_RUNS_UNDER_WAY), and its
    priority unless it is the default, 0."""
    parts = [run["status"]]
    if run.get("waiting"):
        parts.append("waiting")
    if run.get("priority"):
        parts.append(f"priority {run['priority']}")
    return ", ".join(parts)


def run_view(run: dict[str, Any]) -> str:
    """`heddle status`: the run's line, then a line per step."""
    took = duration(seconds_between(run["createdAt"], run.get("finishedAt")))
    head = [f"run {run['runId']}: {run_state(run)} ({took})"]
    if run.get("workflowName"):
        head.append(f"workflow {run['workflowName']} v{run.get('version')}, {run.get('trigger')}")
    if run.get("deadlineAt"):
        head.append(f"deadline {run['deadlineAt']} (timeoutSeconds {run.get('timeoutSeconds')})")
    if run.get("reason"):
        head.append(f"reason: {run['reason']}")
    if run.get("waitingFor"):
        head.append(f"waiting: {run['waitingFor']['sentence']}")
    head.append(f"steps: {counts_text(step_counts(run))}")
    if not run.get("stepsIncluded", True):
        shown = run.get("steps") or []
        head.append(
            f"{run['stepCount']} steps, more than a document lists; "
            + (
                f"listed: the first {len(shown)} failed, timed out, running or retrying"
                if shown
                else "none failed, timed out, running or retrying"
            )
        )
        if not shown:
            return "\n".join(head)
    steps = table(("STEP", "STATE", "ATTEMPT", "RUNNER", "EXIT", "TIME", "REASON"), step_rows(run))
    return "\n".join(head) + "\n\n" + steps + waiting_lines(run["steps"])


def waiting_lines(steps: list[dict[str, Any]]) -> str:
    """Under the table, why each waiting step waits (the document's ``waitingFor``)."""
    lines = [f"  {s['id']}: {s['waitingFor']['sentence']}" for s in steps if s.get("waitingFor")]
    return "\n\nwaiting:\n" + "\n".join(lines) if lines else ""


INSTANCES_LISTED = 10  # a forEach step's instances listed one a line; more: counted


def step_rows(run: dict[str, Any]) -> list[tuple[object, ...]]:
    """A row per step; a forEach step's instances under it, indented, or, more than
    ``INSTANCES_LISTED`` of them, one line that counts them by state (and those that
    failed, listed)."""
    listed = {s["id"] for s in run["steps"]}
    instances: dict[str, list[dict[str, Any]]] = {}
    for s in run["steps"]:
        if s.get("parent") in listed:
            instances.setdefault(s["parent"], []).append(s)
    rows: list[tuple[object, ...]] = []
    for s in run["steps"]:
        if s.get("parent") in listed:
            continue
        rows.append(_row(s))
        found = sorted(instances.get(s["id"], []), key=lambda i: i.get("itemIndex", 0))
        if len(found) <= INSTANCES_LISTED:
            rows.extend(_row(i, "  ") for i in found)
            continue
        counts: dict[str, int] = {}
        for i in found:
            counts[i["status"]] = counts.get(i["status"], 0) + 1
        summary = f"{len(found)} instances: {counts_text(counts)}"
        rows.append((f"  {s['id']}[*]", summary, None, None, None, "-", ""))
        failed = [i for i in found if i["status"] == "failed"]
        rows.extend(_row(i, "  ") for i in failed[:INSTANCES_LISTED])
    return rows


def _row(s: dict[str, Any], indent: str = "") -> tuple[object, ...]:
    return (
        indent + s["id"],
        s["status"],
        s["attempt"],
        s.get("runner"),
        s.get("exitCode"),
        duration(seconds_between(s.get("startedAt"), s.get("finishedAt"))),
        s.get("reason") or "",
    )


def runs_view(runs: list[dict[str, Any]]) -> str:
    rows = [
        (
            r["runId"],
            run_state(r),
            r.get("workflowName") or "-",
            r.get("createdAt"),
            duration(seconds_between(r.get("createdAt"), r.get("finishedAt"))),
            counts_text(r.get("counts")) if r.get("counts") else r.get("stepCount", "-"),
        )
        for r in runs
    ]
    return table(("RUN", "STATUS", "WORKFLOW", "CREATED", "TIME", "STEPS"), rows)


def workflows_view(workflows: list[dict[str, Any]]) -> str:
    rows = []
    for w in workflows:
        schedule = w.get("schedule") or "-"
        if w.get("schedule") and w.get("paused"):
            schedule += " (paused)"
        last = w.get("lastRun") or {}
        rows.append(
            (
                w["name"],
                w["version"],
                w["stepCount"],
                schedule,
                f"{last['runId']} {last['status']}" if last else "-",
            )
        )
    return table(("NAME", "VERSION", "STEPS", "SCHEDULE", "LAST RUN"), rows)


def runners_view(pool: dict[str, Any]) -> str:
    rows = [
        (
            r["name"],
            r.get("pool", "default"),
            ",".join(r.get("labels", [])) or "-",
            ",".join(r.get("namespaces", [])) or "*",
            r["status"],
            f"{r['runId']}/{r['stepId']}" if r.get("runId") else "-",
            r.get("node") or "-",
            r.get("lastSeenAt"),
        )
        for r in pool["runners"]
    ]
    head = f"{pool['total']} runners, {pool['available']} available, {len(pool['leased'])} busy"
    return (
        head
        + "\n\n"
        + table(
            ("RUNNER", "POOL", "LABELS", "NAMESPACES", "STATUS", "STEP", "NODE", "LAST SEEN"), rows
        )
    )


def semaphores_view(sems: list[dict[str, Any]]) -> str:
    """One row a semaphore: its size, how many hold and wait, and who holds it."""
    rows = [
        (
            s["name"],
            str(s["size"]),
            str(len(s["holders"])),
            str(len(s["waiting"])),
            ", ".join(f"{h['runId']}/{h['stepId']}" for h in s["holders"]) or "-",
        )
        for s in sems
    ]
    if not rows:
        return "no semaphores (an unknown one has size 1)"
    return table(("SEMAPHORE", "SIZE", "HELD", "WAITING", "HOLDERS"), rows)


def log_line(line: dict[str, Any]) -> str:
    """A log line as the command wrote it; Heddle's own notes set apart."""
    if line.get("stream") == "heddle":
        return f"[heddle] {line['text']}"
    return str(line.get("text", ""))


def step_change(step: dict[str, Any]) -> str:
    """One line for a step that changed state (the plain form of `heddle watch`)."""
    status = step["status"]
    text = f"step {step['id']} {status}"
    if status in ("queued", "running", "retrying") and step.get("attempt"):
        text += f" (attempt {step['attempt']})"
    if status == "running" and step.get("runner"):
        text += f" on {step['runner']}"
    if status in ("succeeded", "failed"):
        took = seconds_between(step.get("startedAt"), step.get("finishedAt"))
        if took is not None:
            text += f" in {duration(took)}"
    if status in ("failed", "retrying", "cancelled", "skipped") and step.get("reason"):
        text += f": {step['reason']}"
    return text


def run_end(run: dict[str, Any]) -> str:
    """The run's last line, with why it was stopped if it was (its deadline)."""
    took = duration(seconds_between(run["createdAt"], run.get("finishedAt")))
    why = f": {run['reason']}" if run.get("reason") else ""
    return f"run {run['runId']} {run['status']} in {took} ({counts_text(step_counts(run))}){why}"
