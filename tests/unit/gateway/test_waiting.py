"""Why a step or a run waits (services/gateway/reads/waiting.py): each reason from the records
and the facts, and nothing where nothing waits."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from heddle.services.gateway.reads.waiting import (
    Semaphore,
    WaitFacts,
    needs_registry,
    run_waiting,
    semaphore_of,
    semaphores_waited,
    step_waiting,
    waits,
)
from heddle.shared.api.answers import WaitingFor
from heddle.shared.wire.contracts import (
    Approval,
    ConcurrencyKey,
    RunnerInfo,
    RunRecord,
    StepRecord,
    WorkflowCall,
)

UNTIL = "2026-01-01T00:00:05.000Z"


def runner(name: str, busy: bool = False, pool: str = "default", **more: Any) -> RunnerInfo:
    labels = sorted({pool, *more.pop("labels", [])})
    return RunnerInfo(
        name=name,
        status="busy" if busy else "idle",
        pid=1,
        version="t",
        started_at="",
        seen_at="",
        pool=pool,
        labels=labels,
        **more,
    )


def step(sid: str = "s", status: str = "queued", **more: Any) -> StepRecord:
    return StepRecord(id=sid, command="true", status=status, **more)  # type: ignore[arg-type]


def run(status: str = "running", **more: Any) -> RunRecord:
    return RunRecord(run_id="r", status=status, created_at="", step_count=1, **more)  # type: ignore[arg-type]


def as_json(w: WaitingFor | None) -> Any:
    return msgspec.json.decode(msgspec.json.encode(w))


# ---- runners-busy and no-runner ------------------------------------------------------------


def test_a_queued_step_with_every_runner_of_its_pool_busy_says_the_counts() -> None:
    facts = WaitFacts(
        runners=[runner("a", busy=True), runner("b", busy=True), runner("g", pool="gpu")]
    )
    assert as_json(step_waiting(step(attempt=1), facts)) == {
        "reason": "runners-busy",
        "sentence": "Every runner of pool default is busy (2 of 2).",
        "pool": "default",
        "busy": 2,
        "total": 2,
    }


def test_a_queued_step_with_a_free_runner_does_not_wait() -> None:
    facts = WaitFacts(runners=[runner("a", busy=True), runner("b")])
    assert step_waiting(step(attempt=1), facts) is None


def test_a_step_a_runner_holds_already_does_not_wait_for_one() -> None:
    holding = runner("a", busy=True, run_id="r", step_id="s", attempt=2)
    assert step_waiting(step(attempt=2), WaitFacts(runners=[holding])) is None
    # The same runner on the step's earlier attempt: the new one waits.
    assert step_waiting(step(attempt=3), WaitFacts(runners=[holding])) is not None


def test_a_step_handed_to_a_runner_directly_does_not_wait() -> None:
    facts = WaitFacts(runners=[runner("a", busy=True)])
    assert step_waiting(step(attempt=1, offered_to="a"), facts) is None


def test_a_step_with_labels_counts_only_the_runners_with_all_of_them() -> None:
    facts = WaitFacts(
        runners=[
            runner("g1", busy=True, pool="gpu", labels=["cuda"]),
            runner("g2", busy=True, pool="gpu", labels=["cuda", "big"]),
            runner("g3", pool="gpu"),  # no cuda: cannot take it
            runner("d", pool="default", labels=["cuda"]),  # the default pool's, with cuda
        ]
    )
    got = as_json(step_waiting(step(runs_on=["gpu", "cuda"]), facts))
    assert got == {
        "reason": "runners-busy",
        "sentence": "Every runner with labels cuda, gpu is busy (2 of 2).",
        "pool": "gpu",
        "busy": 2,
        "total": 2,
        "labels": ["cuda", "gpu"],
    }


def test_runners_of_several_pools_name_no_single_pool() -> None:
    facts = WaitFacts(
        runners=[
            runner("a", busy=True, pool="gpu", labels=["x"]),
            runner("b", busy=True, pool="cpu", labels=["x"]),
        ]
    )
    got = as_json(step_waiting(step(runs_on=["x"]), facts))
    assert (got["reason"], got["busy"], got["total"], "pool" in got) == (
        "runners-busy",
        2,
        2,
        False,
    )


def test_no_runner_with_the_labels() -> None:
    facts = WaitFacts(runners=[runner("a", pool="gpu")])
    assert as_json(step_waiting(step(runs_on=["arm64"]), facts)) == {
        "reason": "no-runner",
        "sentence": "No runner with labels arm64 is registered.",
        "labels": ["arm64"],
    }


def test_no_runner_of_the_default_pool() -> None:
    facts = WaitFacts(runners=[runner("a", pool="gpu")])
    assert as_json(step_waiting(step(), facts)) == {
        "reason": "no-runner",
        "sentence": "No runner of pool default is registered.",
        "pool": "default",
    }
    alone = step_waiting(step(), WaitFacts())
    assert alone is not None and alone.reason == "no-runner"


def test_a_step_whose_labels_runners_serve_other_namespaces_says_so() -> None:
    facts = WaitFacts(runners=[runner("d"), runner("g", pool="gpu", namespaces=["team-a"])])
    assert as_json(step_waiting(step(runs_on=["gpu"]), facts, "team-b=r")) == {
        "reason": "no-runner",
        "sentence": "No runner may take it: pool gpu serves namespace team-a only; this run "
        "is in namespace team-b.",
        "labels": ["gpu"],
    }
    mine = as_json(step_waiting(step(runs_on=["gpu"]), facts, "team-a=r"))
    assert mine is None  # its runner is free: it is on its way there
    theirs = msgspec.structs.replace(run(), run_id="team-b=r")
    both = as_json(waits(theirs, [step(runs_on=["gpu"])], facts).run)
    assert "Step s: No runner may take it: pool gpu serves namespace team-a" in both["sentence"]


def test_the_registry_is_needed_only_for_a_queued_step_not_offered() -> None:
    assert needs_registry([step(status="queued")])
    assert not needs_registry([step(status="queued", offered_to="a")])
    assert not needs_registry([step(status=s) for s in ("pending", "running", "retrying")])


# ---- semaphore ----------------------------------------------------------------------------


def test_a_step_waiting_for_a_full_semaphore_names_its_holders() -> None:
    facts = WaitFacts(semaphores={"db": Semaphore(2, ["r1/load", "r2/load"])})
    assert as_json(step_waiting(step(status="pending", semaphore_wait="db"), facts)) == {
        "reason": "semaphore",
        "sentence": "Semaphore db is full (all 2 slots), held by r1/load, r2/load.",
        "semaphore": "db",
        "holders": ["r1/load", "r2/load"],
    }


def test_a_semaphore_not_read_is_named_without_holders() -> None:
    got = as_json(step_waiting(step(status="pending", semaphore_wait="db"), WaitFacts()))
    assert got == {
        "reason": "semaphore",
        "sentence": "Semaphore db is full.",
        "semaphore": "db",
        "holders": [],
    }


def test_only_the_pending_steps_semaphores_are_read() -> None:
    steps = [
        step("a", status="pending", semaphore_wait="db"),
        step("b", status="pending", semaphore_wait="db"),
        step("c", status="pending", semaphore_wait="api"),
        step("d", status="running", semaphores=["x"]),
        step("e", status="pending"),
    ]
    assert semaphores_waited(steps) == ["api", "db"]


@pytest.mark.parametrize(
    ("raw", "size", "holders"),
    [
        (b'{"size": 2, "holders": ["r1/a", "r2/b"]}', 2, ["r1/a", "r2/b"]),
        (b'{"size": 1, "holders": [{"runId": "r1", "stepId": "a"}]}', 1, ["r1/a"]),
        (b'{"size": 1, "holders": [{"run_id": "r1", "step_id": "a"}]}', 1, ["r1/a"]),
        (b'{"size": 3, "holders": {"r1.a": 1, "r2.b": 1}}', 3, ["r1.a", "r2.b"]),
        (b'{"holders": null}', None, []),
        (b"[1]", None, []),
        (b"not json", None, []),
        (None, None, []),
    ],
)
def test_a_semaphore_document_is_read_leniently(
    raw: bytes | None, size: int | None, holders: list[str]
) -> None:
    assert semaphore_of(raw) == Semaphore(size, holders)


# ---- backoff ------------------------------------------------------------------------------


def test_a_retrying_step_waits_for_its_backoff_until_its_retry() -> None:
    s = step(status="retrying", attempt=1, retries=2, retry_at=UNTIL)
    assert as_json(step_waiting(s, WaitFacts())) == {
        "reason": "backoff",
        "sentence": f"Attempt 1 failed; attempt 2 of 3 starts after its backoff, at {UNTIL}.",
        "until": UNTIL,
    }


@pytest.mark.parametrize("status", ["pending", "running", "succeeded", "failed", "skipped"])
def test_steps_that_do_not_wait_have_no_reason(status: str) -> None:
    facts = WaitFacts(runners=[runner("a", busy=True)])
    assert step_waiting(step(status=status, attempt=1), facts) is None


# ---- the run -------------------------------------------------------------------------------


def test_a_run_at_the_limit_waits_for_its_turn() -> None:
    assert as_json(run_waiting(run(waiting=True), [], {}, 0)) == {
        "reason": "runs-at-limit",
        "sentence": "Waiting for its turn: the runs under way are at their limit.",
    }


@pytest.mark.parametrize(("ahead", "runs"), [(1, "run"), (3, "runs")])
def test_a_waiting_run_behind_runs_of_higher_priority_counts_them(ahead: int, runs: str) -> None:
    assert as_json(run_waiting(run(waiting=True, priority=1), [], {}, ahead)) == {
        "reason": "priority",
        "sentence": f"Behind {ahead} waiting {runs} of higher priority.",
        "ahead": ahead,
    }


def test_a_run_waiting_for_a_concurrency_key_names_its_holder() -> None:
    r = run(concurrency_wait="deploy-prod", concurrency_holder="r0", waiting=True)
    assert as_json(run_waiting(r, [], {}, 2)) == {
        "reason": "concurrency",
        "sentence": "Waits for concurrency key deploy-prod, held by run r0.",
        "key": "deploy-prod",
        "heldBy": "r0",
    }
    alone = as_json(run_waiting(run(concurrency_wait="k"), [], {}, 0))
    assert alone["sentence"] == "Waits for concurrency key k."


def test_a_run_waiting_for_its_namespaces_quota_names_it_and_its_runs_under_way() -> None:
    r = msgspec.structs.replace(
        run(waiting=True, runs_quota=True, quota_wait=True), run_id="team-a=r2"
    )
    doc = ConcurrencyKey(key="team-a==runs-under-way", limit=1, holders=["team-a=r1"])
    got = waits(r, [step("a")], WaitFacts(runs_quota=doc, priority_ahead=3))
    assert as_json(got.run) == {
        "reason": "quota",
        "sentence": "Namespace team-a is at its quota of 1 run under way, held by run r1.",
        "namespace": "team-a",
        "quota": 1,
        "holders": ["r1"],
    }
    unread = as_json(waits(r, [], WaitFacts()).run)  # its document not read yet
    assert unread["sentence"] == "Namespace team-a is at its quota of runs under way."
    keyed = msgspec.structs.replace(r, concurrency_wait="team-a=deploy")
    first = waits(keyed, [], WaitFacts(runs_quota=doc)).run  # its own key first
    assert first is not None and first.reason == "concurrency"


def test_a_run_none_of_whose_steps_runs_waits_for_its_first_waiting_step() -> None:
    steps = [
        step("done", status="succeeded"),
        step("b", status="retrying", attempt=1, retry_at=UNTIL),
        step("c", status="queued"),
    ]
    got = waits(run(), steps, WaitFacts(runners=[runner("a", busy=True)]))
    assert set(got.steps) == {"b", "c"}
    assert got.steps["c"].reason == "runners-busy"
    assert got.run is not None
    assert (got.run.reason, got.run.until) == ("backoff", UNTIL)
    assert got.run.sentence.startswith("Step b: Attempt 1 failed")


def test_a_run_with_a_running_step_does_not_wait() -> None:
    steps = [step("a", status="running"), step("c", status="queued")]
    got = waits(run(), steps, WaitFacts(runners=[runner("a", busy=True)]))
    assert set(got.steps) == {"c"}
    assert got.run is None


def test_a_finished_run_waits_for_nothing() -> None:
    steps = [step("c", status="queued")]
    got = waits(run(status="cancelled", waiting=True), steps, WaitFacts())
    assert (got.steps, got.run) == ({}, None)


def test_a_run_with_nothing_waiting_has_no_reason() -> None:
    steps = [step("a", status="succeeded"), step("b", status="pending", depends_on=["a"])]
    assert waits(run(), steps, WaitFacts()).run is None


def test_a_ready_step_held_back_by_its_runs_window_says_so() -> None:
    steps = [
        step("a", status="succeeded"),
        step("b", status="running", depends_on=["a"]),
        step("c", status="queued", depends_on=["a"]),
        step("d", status="pending", depends_on=["a"]),
        step("e", status="pending", depends_on=["d"]),  # its dependency has not run
        step("f", status="pending", depends_on=["a"], when="true"),  # decided, not held
    ]
    found = waits(
        RunRecord(run_id="r", status="running", created_at="", step_count=6), steps, WaitFacts()
    )
    assert {sid for sid, w in found.steps.items() if w.reason == "turn"} == {"d"}
    assert found.steps["d"].reason == "turn" and found.steps["d"].total == 2


def test_a_running_call_step_holds_no_place_in_its_runs_window() -> None:
    """A call step runs on no runner (docs/sub-workflows.md): it is not counted among the
    steps its run has queued or running."""
    calling = step("b", status="running", depends_on=["a"], workflow=WorkflowCall(name="child"))
    steps = [step("a", status="succeeded"), calling, step("c", status="queued", depends_on=["a"])]
    steps.append(step("d", status="pending", depends_on=["a"]))
    found = waits(
        RunRecord(run_id="r", status="running", created_at="", step_count=4), steps, WaitFacts()
    )
    assert found.steps["d"].total == 1


def test_a_waiting_gate_says_it_waits_for_an_answer_with_its_message() -> None:
    gate = StepRecord(
        id="ok", status="waiting", attempt=1, approval=Approval(message="ship?", timeout_seconds=60)
    )
    why = step_waiting(gate, WaitFacts())
    assert why is not None and (why.reason, why.message) == ("approval", "ship?")
    assert "60 s" in why.sentence
    run = RunRecord(run_id="r", status="running", created_at=UNTIL, step_count=1)
    found = waits(run, [gate], WaitFacts())
    assert found.steps["ok"] == why
    assert found.run is not None and found.run.sentence.startswith("Step ok: ")
    assert not needs_registry([gate])  # no runner asked for
