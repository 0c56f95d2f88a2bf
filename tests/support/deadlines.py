"""What the run deadline tests share (tests/integration/test_deadline.py and
tests/fault/test_deadline_faults.py): a run that would outlive its deadline, and what a run
stopped at its deadline looks like."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from heddle.shared.wire.timefmt import parse

from tests.support.stack import step_of, until


def outliving(timeout: float, pid_file: Path, **top: Any) -> dict[str, Any]:
    """A run whose step ``slow`` sleeps 30 s (the sleep's pid in ``pid_file``), with a step
    ``after`` waiting for it, and a deadline ``timeout`` seconds after its creation."""
    return {
        **top,
        "timeoutSeconds": timeout,
        "steps": [
            {"id": "slow", "command": f"sleep 30 & echo $! > {pid_file}; wait"},
            {"id": "after", "command": "true", "dependsOn": ["slow"]},
        ],
    }


def alive(pid: int) -> bool:
    """Whether a process lives (a zombie, dead but not yet reaped by whoever inherited it,
    does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def stopped_at_deadline(run: dict[str, Any], timeout: float) -> str:
    """The run failed at its deadline, ``timeout`` seconds after its creation: its reason."""
    reason = run["reason"]
    assert run["status"] == "failed" and reason and reason.startswith("deadline"), run
    assert f"({timeout:g} s)" in reason, reason
    assert run["timeoutSeconds"] == timeout
    assert parse(run["deadlineAt"]) - parse(run["createdAt"]) == timedelta(seconds=timeout)
    return reason


async def outlived(run: dict[str, Any], timeout: float, pid_file: Path) -> None:
    """An ``outliving`` run was stopped at its deadline: ``slow`` killed (its shell and its
    sleep gone) and cancelled, ``after`` cancelled without an attempt, both with the
    reason."""
    reason = stopped_at_deadline(run, timeout)
    slow, after = step_of(run, "slow"), step_of(run, "after")
    assert (slow["status"], slow["reason"]) == ("cancelled", reason), slow
    assert (after["status"], after["reason"], after["attempt"]) == ("cancelled", reason, 0)
    pids = [slow["attempts"][0]["pid"], int(pid_file.read_text())]
    await until(lambda: not any(alive(p) for p in pids), 20, f"the step's processes {pids}")
