"""A workflow's concurrency checked and its key evaluated, and every change to a key's
document (shared/core/concurrency.py): taking, queueing, refusing, cancelRunning's order,
giving back, the turn, reconciling."""

from __future__ import annotations

import pytest
from heddle.shared.core.concurrency import (
    MAX_KEY_CHARS,
    Verdict,
    document_name,
    due,
    give_back,
    holder_of,
    reconcile,
    resized,
    run_key,
    spec_problems,
    submit_fields,
    submit_problems,
    take,
    would_hold,
)
from heddle.shared.core.expressions import ExpressionError
from heddle.shared.core.step_checks import Limits
from heddle.shared.core.validation import submit_problems as submit_command_problems
from heddle.shared.core.validation import workflow_problems
from heddle.shared.wire.contracts import (
    Concurrency,
    ConcurrencyKey,
    KeyCancel,
    OnLimit,
    StepSpec,
    SubmitRun,
)

KEY = "deploy/prod"


def taking(
    doc: ConcurrencyKey, *runs: str, limit: int = 1, on_limit: OnLimit = "queue"
) -> tuple[ConcurrencyKey, list[Verdict]]:
    verdicts = []
    for run in runs:
        doc, verdict = take(doc, run, KEY, limit, on_limit)
        verdicts.append(verdict)
    return doc, verdicts


# ---- checks and evaluation ---------------------------------------------------------------


def paths(value: object) -> list[str]:
    return sorted(p.path for p in spec_problems(value))


def test_a_concurrency_needs_a_key_that_compiles_and_names_every_problem() -> None:
    assert paths({"key": "params.env"}) == []
    assert paths(None) == []  # none, as if left out
    assert paths({"key": "workflow", "limit": 1000, "onLimit": "refuse"}) == []
    assert paths("deploy") == ["concurrency"]
    assert paths({}) == ["concurrency.key"]
    assert paths({"key": 3}) == ["concurrency.key"]
    assert paths({"key": "params.env +"}) == ["concurrency.key"]
    assert paths({"key": "[params.env]"}) == ["concurrency.key"]  # a list is no key
    assert paths({"key": "steps.a.status"}) == ["concurrency.key"]  # no step exists yet
    assert paths({"key": "x", "limit": 0, "onLimit": "wait", "group": "g"}) == [
        "concurrency.group",
        "concurrency.key",
        "concurrency.limit",
        "concurrency.onLimit",
    ]
    for limit in (True, 1.5, 1001, "2"):
        assert paths({"key": "workflow", "limit": limit}) == ["concurrency.limit"], limit


def test_a_workflow_document_lists_its_concurrency_problems() -> None:
    limits = Limits(100, 4096)
    doc = {"steps": [{"id": "a", "command": "true"}], "concurrency": {"key": "", "limit": -1}}
    found = sorted(p.path for p in workflow_problems(doc, limits))
    assert found == ["concurrency.key", "concurrency.limit"]
    scheduled = {
        "name": "nightly",
        "schedule": "0 3 * * *",
        "params": [{"name": "env", "default": "prod"}],
        "steps": [{"id": "a", "command": "true"}],
        "concurrency": {"key": "params.env + '/' + params.region"},
    }
    assert [p.path for p in workflow_problems(scheduled, limits)] == ["concurrency.key"]
    scheduled["concurrency"] = {"key": "workflow + '/' + params.env"}
    assert workflow_problems(scheduled, limits) == []
    scheduled["concurrency"] = None
    assert workflow_problems(scheduled, limits) == []


def test_the_key_is_evaluated_over_params_and_the_workflow_name() -> None:
    spec = Concurrency(key="workflow + '/' + params.env")
    assert run_key(spec, {"env": "prod"}, "deploy") == "deploy/prod"
    assert run_key(spec, {"env": "prod"}, None) == "/prod"  # an inline run with no name
    assert run_key(Concurrency(key="size(params.env) > 2"), {"env": "prod"}, "w") == "true"
    assert run_key(Concurrency(key="size(params.env)"), {"env": "prod"}, "w") == "4"
    assert submit_fields(None, {}, "w") == {}
    assert submit_fields(Concurrency(key="'k'", limit=3, on_limit="refuse"), {}, "w") == {
        "concurrency_key": "k",
        "concurrency_limit": 3,
        "on_limit": "refuse",
    }


@pytest.mark.parametrize(
    ("text", "params", "problem"),
    [
        ("params.env", {}, "failed"),
        ("params.env", {"env": ""}, "gives an empty key"),
        ("params.env", {"env": "x" * (MAX_KEY_CHARS + 1)}, "the limit is"),
    ],
)
def test_a_key_that_cannot_be_had_is_an_error(
    text: str, params: dict[str, str], problem: str
) -> None:
    with pytest.raises(ExpressionError) as caught:
        run_key(Concurrency(key=text), params, "w")
    assert problem in caught.value.problem


def test_a_submit_command_is_checked_as_the_gateway_makes_it() -> None:
    assert submit_problems(None, 0, "nonsense") == []
    assert submit_problems("k", 1, "queue") == []
    found = [p.path for p in submit_problems("", 1001, "wait")]
    assert found == ["concurrencyKey", "concurrencyLimit", "onLimit"]
    cmd = SubmitRun(
        run_id="r1",
        submitted_at="2026-01-01T00:00:00Z",
        steps=[StepSpec(id="a", command="true")],
        concurrency_key="k",
        concurrency_limit=0,
    )
    paths_found = [p.path for p in submit_command_problems(cmd, Limits(100, 4096))]
    assert paths_found == ["concurrencyLimit"]


def test_a_key_is_stored_under_its_hash() -> None:
    name = document_name("deploy/prod env.*>")
    assert len(name) == 64 and name.isalnum()
    assert name != document_name("deploy/prod")


# ---- one key's document ------------------------------------------------------------------


def test_runs_take_the_free_slots_then_queue_in_order() -> None:
    doc, verdicts = taking(ConcurrencyKey(), "a", "b", "c", "d", limit=2)
    assert [v.holds for v in verdicts] == [True, True, False, False]
    assert (doc.key, doc.limit) == (KEY, 2)
    assert (doc.holders, doc.queue) == (["a", "b"], ["c", "d"])
    assert verdicts[2] == Verdict(False, "a")  # queued behind the oldest holder
    assert due(doc) == []


def test_taking_again_changes_nothing() -> None:
    doc, _ = taking(ConcurrencyKey(), "a", "b")
    again, verdicts = taking(doc, "a", "b")
    assert again == doc
    assert [v.holds for v in verdicts] == [True, False]


def test_a_slot_freed_goes_to_the_first_queued() -> None:
    doc, _ = taking(ConcurrencyKey(), "a", "b", "c")
    doc = give_back(doc, "a")
    assert (doc.holders, doc.queue) == ([], ["b", "c"])
    assert due(doc) == ["b"]
    late, [verdict] = taking(doc, "d")  # a newcomer does not pass them
    assert not verdict.holds and late.queue == ["b", "c", "d"]
    skipped, [verdict] = taking(doc, "c")  # nor does the second in line
    assert not verdict.holds and skipped == doc
    doc, [verdict] = taking(doc, "b")
    assert verdict.holds and (doc.holders, doc.queue) == (["b"], ["c"])


def test_a_key_resized_stops_no_holder_and_raised_lets_the_queued_go() -> None:
    doc, _ = taking(ConcurrencyKey(), "a", "b", "c", limit=2)
    lower = resized(doc, "ns==runs-under-way", 1)
    assert (lower.key, lower.limit, lower.holders) == ("ns==runs-under-way", 1, ["a", "b"])
    assert due(give_back(lower, "a")) == []  # still at its limit
    assert due(resized(lower, "ns==runs-under-way", 3)) == ["c"]


def test_a_queued_run_that_ends_leaves_the_queue() -> None:
    doc, _ = taking(ConcurrencyKey(), "a", "b", "c")
    doc = give_back(doc, "b")
    assert (doc.holders, doc.queue) == (["a"], ["c"])
    assert give_back(doc, "zzz") == doc


def test_refuse_takes_a_free_slot_and_else_changes_nothing() -> None:
    doc, [verdict] = taking(ConcurrencyKey(), "a", on_limit="refuse")
    assert verdict.holds
    after, [verdict] = taking(doc, "b", on_limit="refuse")
    assert verdict == Verdict(False, "a", refused=True)
    assert after == doc
    assert would_hold(doc, "a", 1) and not would_hold(doc, "b", 1)
    assert would_hold(doc, "b", 2)  # a run of a larger limit fits


def test_cancel_running_cancels_the_oldest_holder_and_goes_first() -> None:
    doc, _ = taking(ConcurrencyKey(), "a", "b", "q1", limit=2)
    doc, [verdict] = taking(doc, "c", limit=2, on_limit="cancelRunning")
    assert verdict == Verdict(False, "a", cancel=("a",))
    assert (doc.holders, doc.queue) == (["a", "b"], ["c", "q1"])
    doc, [verdict] = taking(doc, "d", limit=2, on_limit="cancelRunning")
    assert verdict.cancel == ("b",)  # the next holder not being cancelled
    assert doc.queue == ["c", "d", "q1"]  # after c, ahead of the run that only queued
    again, [verdict] = taking(doc, "d", limit=2, on_limit="cancelRunning")
    assert again == doc and verdict.cancel == ("b",)  # asked again: the cancel again
    doc = give_back(doc, "a")
    assert due(doc) == ["c"]
    doc, [verdict] = taking(doc, "c", limit=2)
    assert verdict.holds and doc.cancels == [KeyCancel(run_id="b", by="d")]


def test_cancel_running_with_every_holder_cancelled_cancels_the_run_queued_to_replace_it() -> None:
    doc, _ = taking(ConcurrencyKey(), "a")
    doc, [by_b] = taking(doc, "b", on_limit="cancelRunning")
    doc, [by_c] = taking(doc, "c", on_limit="cancelRunning")
    assert (by_b.cancel, by_c.cancel) == (("a",), ("b",))  # the newest wins
    assert doc.queue == ["b", "c"]
    doc = give_back(doc, "b")  # b cancelled while it waited
    doc = give_back(doc, "a")
    assert (doc.holders, doc.queue, doc.cancels) == ([], ["c"], [])
    assert due(doc) == ["c"]


def test_a_holder_whose_canceller_left_is_cancelled_anew_for_the_next() -> None:
    doc, _ = taking(ConcurrencyKey(), "a")
    doc, _ = taking(doc, "b", on_limit="cancelRunning")
    doc = give_back(doc, "b")  # b cancelled while it waited: a's slot is no one's
    assert doc.cancels == []
    doc, _ = taking(doc, "q")  # queued without cancelling
    doc, [verdict] = taking(doc, "c", on_limit="cancelRunning")
    assert verdict.cancel == ("a",) and doc.queue == ["c", "q"]


def test_the_run_named_as_holder() -> None:
    assert holder_of(ConcurrencyKey()) is None
    assert holder_of(ConcurrencyKey(holders=["a", "b"], queue=["c"])) == "a"
    assert holder_of(ConcurrencyKey(queue=["c"])) == "c"


def test_reconcile_keeps_live_runs_and_drops_the_ended_ones_of_its_partitions() -> None:
    doc = ConcurrencyKey(
        key=KEY,
        limit=1,
        holders=["mine-ended", "theirs"],
        queue=["mine-waiting", "mine-gone", "theirs-waiting"],
        cancels=[KeyCancel(run_id="mine-ended", by="mine-waiting")],
    )

    def owned(run: str) -> bool:
        return run.startswith("mine")

    fixed = reconcile(doc, owned, {"mine-running"}, {"mine-waiting"}, ["mine-running"])
    assert fixed.holders == ["theirs", "mine-running"]  # runs already: held, past the limit
    assert fixed.queue == ["mine-waiting", "theirs-waiting"]
    assert fixed.cancels == []  # its cancelled run has ended
    assert reconcile(fixed, owned, {"mine-running"}, {"mine-waiting"}, ["mine-running"]) == fixed
