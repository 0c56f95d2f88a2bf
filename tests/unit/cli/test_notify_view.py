"""`heddle status` shows a line per notify target (services/cli/render.py)."""

from __future__ import annotations

from heddle.services.cli import render


def test_each_target_s_delivery_is_a_line_of_the_run_view() -> None:
    run = {
        "runId": "r1",
        "status": "failed",
        "createdAt": "2026-01-01T00:00:00.000Z",
        "finishedAt": "2026-01-01T00:00:04.000Z",
        "counts": {"failed": 1},
        "steps": [],
        "notifications": [
            {
                "index": 0,
                "url": "https://a.example/",
                "state": "delivered",
                "attempts": [
                    {"at": "t", "status": 500, "error": "answered 500"},
                    {"at": "t", "status": 200, "error": None},
                ],
            },
            {
                "index": 1,
                "url": "https://b.example/",
                "state": "pending",
                "attempts": [
                    {"at": "t", "status": None, "error": "connection refused"},
                ],
            },
            {"index": 2, "url": "https://c.example/", "state": None, "attempts": []},
        ],
    }
    shown = render.run_view(run).splitlines()
    assert "notify https://a.example/: delivered (2 attempts)" in shown
    assert "notify https://b.example/: pending (1 attempt), last: connection refused" in shown
    assert "notify https://c.example/: not sent" in shown
    assert not any(
        line.startswith("notify")
        for line in render.run_view({**run, "notifications": []}).splitlines()
    )
