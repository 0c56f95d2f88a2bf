"""The soak's ledger check (pure): was any run lost, and did Heddle run any step twice?

Lost: a submitted run that did not end ``succeeded`` (it failed, or no end was seen), or a
cron slot whose run did not. Run twice: the soak kills orchestrators and dispatchers, never a
runner or a step, and its steps do not fail, so each step should run exactly once, as attempt
1. An attempt number that appears twice in the ledger for a step is one attempt started
twice (a ready step handed out again while it ran); an attempt above 1 is a new attempt
Heddle started for a step that had not failed. Both count as run twice by Heddle's doing.
A cron run in the ledger for a slot that was not due (before the workflow was registered,
or a stamp the scheduler should not have made) counts as a doubled slot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class LedgerRow:
    run: str
    step: str
    attempt: int
    pid: int

    @property
    def key(self) -> str:
        return f"{self.run}/{self.step}.{self.attempt}"


def parse_ledger(text: str) -> tuple[list[LedgerRow], int]:
    """The rows, and how many lines were not a row (a torn append would show here)."""
    rows, bad = [], 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4 or not (parts[2].isdigit() and parts[3].isdigit()):
            bad += 1
            continue
        rows.append(LedgerRow(parts[0], parts[1], int(parts[2]), int(parts[3])))
    return rows, bad


@dataclass(slots=True)
class Expected:
    """What should have run: each run's step ids, submitted runs and due cron slots apart
    (a cron slot is its run id, ``<workflow>-<stamp>``)."""

    submitted: dict[str, list[str]] = field(default_factory=dict)
    cron: dict[str, list[str]] = field(default_factory=dict)
    cron_prefix: str = ""  # the cron workflow's run ids start with it
    cron_last: str = ""  # run id of the last slot due while the load ran; later ones ignored
    refused: int = 0  # submits not accepted (not lost: the client was told)


def _twice(rows: list[LedgerRow]) -> tuple[list[str], list[str]]:
    counts = Counter(r.key for r in rows)
    duplicates = sorted(k for k, n in counts.items() if n > 1)
    extra = sorted({r.key for r in rows if r.attempt > 1})
    return duplicates, extra


def verdict(
    expected: Expected, ended: Mapping[str, str], rows: list[LedgerRow], torn: int = 0
) -> dict[str, Any]:
    """``ended``: run id -> the status its end event told (absent: no end seen)."""
    never = sorted(r for r in expected.submitted if r not in ended)
    failed = sorted(r for r in expected.submitted if ended.get(r, "succeeded") != "succeeded")
    cron_missed = sorted(r for r in expected.cron if ended.get(r) != "succeeded")
    wanted = {**expected.submitted, **expected.cron}
    ran: dict[str, set[str]] = {}
    for r in rows:
        ran.setdefault(r.run, set()).add(r.step)
    not_run = sorted(
        f"{run}/{step}"
        for run, steps in wanted.items()
        if ended.get(run) == "succeeded"
        for step in steps
        if step not in ran.get(run, set())
    )
    cron_rows = [r for r in rows if r.run.startswith(expected.cron_prefix)]
    unexpected = sorted(
        {r.run for r in cron_rows if r.run not in expected.cron and r.run <= expected.cron_last}
    )
    duplicates, extra = _twice([r for r in rows if r.run in wanted])
    twice_runs = {k.split("/", 1)[0] for k in duplicates + extra}
    cron_doubled = sorted((twice_runs & set(expected.cron)) | set(unexpected))
    out: dict[str, Any] = {
        "runs_submitted": len(expected.submitted),
        "runs_refused": expected.refused,
        "runs_succeeded": sum(1 for r in expected.submitted if ended.get(r) == "succeeded"),
        "runs_failed": failed,
        "runs_never_ended": never,
        "cron_slots_due": len(expected.cron),
        "cron_slots_succeeded": len(expected.cron) - len(cron_missed),
        "cron_missed": cron_missed,
        "cron_doubled": cron_doubled,
        "steps_not_in_ledger": not_run,
        "attempts_run_twice": duplicates,
        "attempts_beyond_first": extra,
        "ledger_rows": len(rows),
        "ledger_torn_lines": torn,
    }
    out["lost"] = len(failed) + len(never) + len(cron_missed)
    out["run_twice"] = len(duplicates) + len(extra) + len(unexpected)
    out["ok"] = (
        out["lost"] == 0
        and out["run_twice"] == 0
        and not not_run
        and not cron_doubled
        and expected.refused == 0
        and torn == 0
    )
    return out
