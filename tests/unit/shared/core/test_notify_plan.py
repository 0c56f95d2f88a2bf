"""When a notification is due, its claim, and its record after each attempt
(shared/core/notify_plan.py), and the summary a target is sent (notify_summary.py)."""

from __future__ import annotations

import json

from heddle.shared.core.notify_plan import (
    BACKOFF_CAP,
    Policy,
    after_attempt,
    answer_error,
    claimed,
    due_at,
    due_notifications,
    owed,
)
from heddle.shared.core.notify_summary import run_page, summary_body
from heddle.shared.wire.contracts import (
    Notification,
    Notify,
    NotifyAttempt,
    RunRecord,
    StepRecord,
)
from heddle.shared.wire.timefmt import epoch_of, from_epoch

T0 = 1_700_000_000.0
POLICY = Policy(timeout=10.0, backoff_base=5.0, retry_for=3600.0)
PENDING = Notification(
    run_id="r1", index=0, url="http://a.example/", run_status="failed", finished_at=from_epoch(T0)
)


def failed_at(at: float) -> NotifyAttempt:
    return NotifyAttempt(at=from_epoch(at), error="connection refused")


def test_a_new_delivery_is_due_at_once_and_a_settled_one_never() -> None:
    assert due_at(PENDING, T0 + 1) == T0 + 1
    for state in ("delivered", "gave-up"):
        settled = Notification(run_id="r1", index=0, url="u", run_status="failed", state=state)
        assert due_at(settled, T0) is None


def test_a_claimed_delivery_is_due_when_its_claim_runs_out() -> None:
    held = claimed(PENDING, T0, POLICY)
    assert epoch_of(held.claimed_until or "", 0) > T0 + POLICY.timeout
    assert due_at(held, T0 + 1) == epoch_of(held.claimed_until or "", 0)
    assert held.attempts == [] and held.state == "pending"


def test_a_2xx_delivers_it_and_clears_its_claim() -> None:
    done = after_attempt(
        claimed(PENDING, T0, POLICY), NotifyAttempt(at="t", status=204), T0 + 1, POLICY
    )
    assert (done.state, done.claimed_until, done.next_at) == ("delivered", None, None)
    assert [a.status for a in done.attempts] == [204]


def test_a_failure_waits_a_growing_backoff_before_the_next_attempt() -> None:
    first = after_attempt(claimed(PENDING, T0, POLICY), failed_at(T0), T0, POLICY, lambda: 1.0)
    assert first.state == "pending" and first.claimed_until is None
    assert epoch_of(first.next_at or "", 0) == T0 + POLICY.backoff_base
    assert due_at(first, T0) == T0 + POLICY.backoff_base
    second = after_attempt(first, failed_at(T0 + 5), T0 + 5, POLICY, lambda: 1.0)
    assert epoch_of(second.next_at or "", 0) == T0 + 5 + 2 * POLICY.backoff_base
    assert len(second.attempts) == 2


def test_a_redirect_or_an_error_answer_is_a_failure() -> None:
    moved = NotifyAttempt(at="t", status=302, error=answer_error(302))
    after = after_attempt(PENDING, moved, T0, POLICY)
    assert after.state == "pending"
    assert "redirects are not followed" in answer_error(302)
    assert answer_error(500) == "answered 500"


def test_it_gives_up_once_the_next_attempt_would_come_past_retry_for() -> None:
    late = T0 + POLICY.retry_for - 1
    gone = after_attempt(PENDING, failed_at(late), late, POLICY, lambda: 0.0)
    assert (gone.state, gone.next_at, due_at(gone, late)) == ("gave-up", None, None)
    early = after_attempt(PENDING, failed_at(T0), T0, POLICY, lambda: 1.0)
    assert early.state == "pending"
    assert BACKOFF_CAP < POLICY.retry_for  # a long retry_for is many attempts, not one wait


def run_record(status: str, notify: list[Notify]) -> RunRecord:
    return RunRecord(
        run_id="team-a=r1",
        status=status,  # type: ignore[arg-type]
        created_at=from_epoch(T0),
        finished_at=from_epoch(T0 + 9),
        step_count=2,
        workflow_name="team-a=build",
        version=3,
        trigger="schedule",
        notify=notify,
    )


def test_only_an_ended_run_makes_deliveries() -> None:
    notify = [Notify(url="http://a.example/", on=["failed", "succeeded"])]
    assert due_notifications(run_record("running", notify)) == []
    [n] = due_notifications(run_record("succeeded", notify))
    assert (n.run_id, n.index, n.run_status) == ("team-a=r1", 0, "succeeded")


def test_the_summary_names_the_run_in_its_namespace_with_its_failed_steps() -> None:
    run = run_record("failed", [])
    steps = [
        StepRecord(id="ok", status="succeeded", exit_code=0),
        StepRecord(id="bad", status="failed", exit_code=2, reason="exit code 2"),
    ]
    body = json.loads(summary_body(run, steps, "https://heddle.example.org/"))
    assert body == {
        "runId": "r1",
        "namespace": "team-a",
        "workflow": "build",
        "version": 3,
        "status": "failed",
        "trigger": "schedule",
        "createdAt": run.created_at,
        "finishedAt": run.finished_at,
        "reason": None,
        "failedSteps": [{"id": "bad", "reason": "exit code 2", "exitCode": 2}],
        "url": "https://heddle.example.org/#/runs/r1",
    }
    assert run_page("", "r1") is None


def test_the_sweep_owes_the_deliveries_of_runs_ended_lately_and_no_actor_s() -> None:
    notify = [Notify(url="http://a.example/", on=["failed"])]
    ended = run_record("failed", notify)  # finished at T0 + 9
    running = run_record("running", notify)
    quiet = run_record("failed", [])
    assert [n.run_id for n in owed([ended, running, quiet], T0 + 100, 120, lambda r: False)] == [
        "team-a=r1"
    ]
    assert owed([ended], T0 + 200, 120, lambda r: False) == []  # ended too long ago
    assert owed([ended], T0 + 100, 120, lambda r: True) == []  # its actor stores its own
