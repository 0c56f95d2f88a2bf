"""The history grid's finished run states (services/gateway/reads/finished.py), without I/O: kept by
steps, the least recently used first. What the page's workflow views read from a real stack:
tests/integration/test_workflow_views.py."""

from __future__ import annotations

from heddle.services.gateway.reads.finished import FinishedStates


def test_finished_states_are_kept_by_steps_least_recently_used_first() -> None:
    kept = FinishedStates(cells=5)
    kept.put(("a", "t1"), {"x": "succeeded", "y": "failed"})
    kept.put(("b", "t1"), {"x": "succeeded", "y": "succeeded"})
    assert kept.get(("a", "t1")) == {"x": "succeeded", "y": "failed"}  # a is now the newest
    kept.put(("c", "t1"), {"x": "skipped", "y": "skipped"})  # 6 steps: b goes
    assert kept.get(("b", "t1")) is None
    assert kept.get(("a", "t1")) is not None and kept.get(("c", "t1")) is not None
    assert kept.get(("a", "t2")) is None  # the same id, created again: another run
    kept.put(("huge", "t1"), {str(i): "succeeded" for i in range(6)})  # more than it holds
    assert kept.get(("huge", "t1")) is None and kept.get(("c", "t1")) is not None
