"""The run document's ``notifications`` (services/gateway/reads/notifications.py): one per
target, in order, with its delivery's state and attempts, null while none is made."""

from __future__ import annotations

from heddle.services.gateway.reads.notifications import shown
from heddle.shared.wire.contracts import Notification, Notify, NotifyAttempt, RunRecord


def test_each_target_is_shown_with_its_delivery_or_none() -> None:
    run = RunRecord(
        run_id="r1",
        status="failed",
        created_at="t0",
        step_count=1,
        notify=[
            Notify(url="http://a.example/", on=["failed"]),
            Notify(url="http://b.example/", on=["succeeded"]),
        ],
    )
    sent = Notification(
        run_id="r1",
        index=0,
        url="http://a.example/",
        run_status="failed",
        state="delivered",
        attempts=[
            NotifyAttempt(at="t1", error="answered 500", status=500),
            NotifyAttempt(at="t2", status=200),
        ],
    )
    first, second = shown(run, {0: sent})
    assert (first.index, first.url, first.on, first.state) == (
        0,
        "http://a.example/",
        ["failed"],
        "delivered",
    )
    assert [(a.at, a.status, a.error) for a in first.attempts] == [
        ("t1", 500, "answered 500"),
        ("t2", 200, None),
    ]
    assert (second.index, second.on, second.state, second.attempts) == (1, ["succeeded"], None, [])
