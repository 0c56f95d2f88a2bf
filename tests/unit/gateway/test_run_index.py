"""services/gateway/reads/run_index.py's RunList, the runs list's index, without I/O: newest first,
a record replaced only by a newer one, counts by status, removals. Kept by a real
nats-server's consumer (RunIndex): tests/integration/test_run_index.py."""

from __future__ import annotations

from heddle.services.gateway.reads.run_index import RunList
from heddle.shared.wire.contracts import RunRecord


def run(run_id: str, minute: int, status: str = "running") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        status=status,  # type: ignore[arg-type]
        created_at=f"2026-11-30T08:{minute:02d}:00.000Z",
        step_count=1,
    )


def ids(runs: list[RunRecord]) -> list[str]:
    return [r.run_id for r in runs]


def test_newest_first_by_creation_then_run_id() -> None:
    runs = RunList()
    for seq, rec in enumerate([run("b", 1), run("a", 1), run("c", 0), run("d", 2)], 1):
        runs.put(seq, rec)
    assert ids(runs.newest(10)) == ["d", "b", "a", "c"]
    assert ids(runs.newest(2)) == ["d", "b"]
    assert runs.total == 4 and runs.matching(None) == 4 and runs.matching("running") == 4


def test_a_record_replaces_an_older_one_only() -> None:
    runs = RunList()
    runs.put(5, run("a", 1))
    runs.put(9, run("a", 1, "succeeded"))
    runs.put(7, run("a", 1, "failed"))  # stored before the one held: ignored
    assert [r.status for r in runs.newest(10)] == ["succeeded"]
    assert (runs.total, runs.matching("succeeded"), runs.matching("failed")) == (1, 1, 0)
    assert runs.matching("running") == 0


def test_status_filter_counts_and_removal() -> None:
    runs = RunList()
    runs.put(1, run("a", 1, "succeeded"))
    runs.put(2, run("b", 2, "failed"))
    runs.put(3, run("c", 3, "succeeded"))
    assert ids(runs.newest(10, "succeeded")) == ["c", "a"]
    assert ids(runs.newest(1, "succeeded")) == ["c"]
    assert ids(runs.newest(10, "cancelled")) == []
    runs.remove("c", 2)  # a deletion older than the record held: ignored
    assert runs.total == 3
    runs.remove("c", 4)
    runs.remove("zzz", 5)  # unknown: nothing
    assert ids(runs.newest(10)) == ["b", "a"] and runs.matching("succeeded") == 1


def test_waiting_runs_of_higher_priority_are_counted_as_they_come_and_go() -> None:
    runs = RunList()
    mine = RunRecord(run_id="m", status="running", created_at="", step_count=1, waiting=True)
    for seq, (rid, prio, waiting) in enumerate(
        [("a", 5, True), ("b", 5, False), ("c", 0, True), ("d", 1, True)], 1
    ):
        runs.put(
            seq,
            RunRecord(
                run_id=rid,
                status="running",
                created_at="",
                step_count=1,
                priority=prio,
                waiting=waiting,
            ),
        )
    runs.put(5, mine)
    assert runs.higher_priority_ahead(mine) == 2  # a and d: b is under way, c is lower
    runs.put(6, RunRecord(run_id="a", status="running", created_at="", step_count=1, priority=5))
    runs.remove("d", 7)
    assert runs.higher_priority_ahead(mine) == 0  # a admitted, d removed


def test_runs_by_namespace() -> None:
    runs = RunList()
    stored = [("a", "running"), ("team-a=a", "running"), ("team-a=b", "succeeded")]
    for minute, (run_id, status) in enumerate([*stored, ("team-b=a", "failed")]):
        runs.put(minute + 1, run(run_id, minute, status))
    assert ids(runs.newest(10, namespaces={"team-a"})) == ["team-a=b", "team-a=a"]
    assert ids(runs.newest(10, "running", ["default", "team-a"])) == ["team-a=a", "a"]
    assert ids(runs.newest(10, namespaces=[])) == []
    assert runs.count(None, {"team-a"}) == 2 and runs.count("succeeded", {"team-a"}) == 1
    assert runs.count("failed", {"team-a", "team-b"}) == 1 and runs.count(None, {"nope"}) == 0
    assert runs.count(None, None) == 4
    runs.remove("team-a=b", 10)
    assert runs.count(None, {"team-a"}) == 1
