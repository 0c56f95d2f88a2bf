"""A run's end in the state machine makes its notifications (docs/notifications.md): one
per target whose ``on`` names how it ended, right after the record of its end, however it
ends (decisions.giving_back); nothing while it runs."""

from __future__ import annotations

from heddle.services.orchestrator.decisions import CreateNotifications, PersistRun, giving_back
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import Notify, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import RUN, T0, cancel, finish_step, made, spec

TARGETS = [
    Notify(url="http://a.example/hook", on=["failed"]),
    Notify(url="http://b.example/hook", on=["succeeded", "failed"]),
    Notify(url="http://c.example/hook", on=["cancelled"]),
]


def notified() -> RunState:
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=[spec("a")], notify=TARGETS)
    state, effects = made(cmd)
    assert not [e for e in giving_back(effects) if isinstance(e, CreateNotifications)]
    return state


def created(effects: list) -> list[CreateNotifications]:
    return [e for e in giving_back(effects) if isinstance(e, CreateNotifications)]


def test_a_failed_run_notifies_the_targets_on_failed_after_its_end_is_stored() -> None:
    state = notified()
    effects = giving_back(finish_step(state, "a", "failed"))
    [made_] = [e for e in effects if isinstance(e, CreateNotifications)]
    end = next(i for i, e in enumerate(effects) if isinstance(e, PersistRun))
    assert effects.index(made_) > end
    assert [(n.index, n.url, n.run_status, n.state) for n in made_.records] == [
        (0, "http://a.example/hook", "failed", "pending"),
        (1, "http://b.example/hook", "failed", "pending"),
    ]
    assert {n.finished_at for n in made_.records} == {state.run.finished_at}
    assert {n.run_id for n in made_.records} == {RUN}


def test_a_succeeded_run_notifies_only_the_targets_on_succeeded() -> None:
    state = notified()
    [made_] = created(finish_step(state, "a"))
    assert [n.index for n in made_.records] == [1]


def test_a_cancelled_run_notifies_the_targets_on_cancelled() -> None:
    state = notified()
    [made_] = created(cancel(state))
    assert [(n.index, n.run_status) for n in made_.records] == [(2, "cancelled")]


def test_a_run_whose_end_no_target_is_on_makes_none() -> None:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("a")],
        notify=[Notify(url="http://a.example/hook", on=["failed"])],
    )
    state, _ = made(cmd)
    assert created(finish_step(state, "a")) == []
