"""Log subjects: the namespace and the writer as tokens of their own, after the attempt, so
one filter takes both forms (the one from before them too), and which lines a reader shows."""

from __future__ import annotations

from heddle.services.gateway.reads.log_lines import attempt_runners, shown
from heddle.shared.broker import nats_accounts
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AttemptRecord, StepRecord


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest (one token or more)."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or token not in ("*", s[i]):
            return False
    return len(p) == len(s)


def test_log_subjects_and_their_filters() -> None:
    new = names.log("team-a=r1", "build[3]", 2, "team-a", "runner-0")
    assert new == "heddle.log.team-a=r1.build=3.2.team-a.runner-0"
    old = names.legacy_log("r1", "s", 2)
    assert old == "heddle.log.r1.s.2"
    assert names.log_writer(new) == (2, "runner-0")
    assert names.log_writer(old) == (2, None)
    assert names.log_writer("heddle.log.r1.s.x") == (-1, None)
    default = names.log("r1", "s", 2, "default", names.NOTES_WRITER)
    for subject in (old, default):  # the step's and the run's filters take both forms
        assert matches(names.log_step_filter("r1", "s"), subject)
        assert matches(names.log_run_filter("r1"), subject)
    assert matches(names.log_attempt_filter("r1", "s", 2), default)
    assert not matches(names.log_attempt_filter("r1", "s", 2), old)
    assert not matches(names.log_attempt_filter("r1", "s", 2), names.legacy_log("r1", "s", 20))
    assert not matches(names.log_step_filter("r1", "s"), names.legacy_log("r1", "s2", 1))
    assert matches(names.namespace_logs("team-a"), new)
    assert not matches(names.namespace_logs("team-b"), new)
    assert not matches(names.namespace_logs("default"), old)  # written before namespaces
    assert matches(names.runner_logs("runner-0"), new)
    assert not matches(names.runner_logs("runner-1"), new)


def test_no_runner_name_is_the_notes_writer() -> None:
    assert not names.ID_PATTERN.match(names.NOTES_WRITER)
    assert not matches(names.runner_logs("*"), names.legacy_log("r1", "s", 1))


def test_an_attempt_shows_its_own_runners_lines_the_notes_and_old_logs() -> None:
    step = StepRecord(
        id="s",
        command="true",
        attempt=3,
        runner="runner-2",
        attempts=[AttemptRecord(attempt=1, runner="runner-0"), AttemptRecord(attempt=2)],
    )
    runners = attempt_runners(step)
    assert runners == {1: "runner-0", 3: "runner-2"}
    assert shown(names.log("r1", "s", 1, "default", "runner-0"), runners) is True
    assert shown(names.log("r1", "s", 1, "default", "runner-2"), runners) is False
    assert shown(names.log("r1", "s", 3, "default", "runner-2"), runners) is True
    assert shown(names.log("r1", "s", 2, "default", "runner-0"), runners) is None  # not yet
    assert shown(names.log("r1", "s", 2, "default", names.NOTES_WRITER), runners) is True
    assert shown(names.legacy_log("r1", "s", 1), runners) is True


def test_a_runner_publishes_only_its_own_logs_and_an_inspector_reads_one_namespace() -> None:
    runner = perms.permissions_for(perms.runner_user("runner-0"))
    logs = [p for p in runner.publish if p.startswith("heddle.log.")]
    assert logs == [names.runner_logs("runner-0")]
    inspector = perms.permissions_for(perms.namespace_inspector_user("team-a"))
    assert set(inspector.subscribe) == {
        names.namespace_logs("team-a"),
        perms.inbox_prefix("inspector-team-a") + ".>",
    }
    assert inspector.publish == (f"{perms.API}.INFO",)  # no stream read, no consumer
    assert nats_accounts.account_of("inspector-team-a") == nats_accounts.INSPECT
    assert nats_accounts.account_of("inspector") == nats_accounts.INSPECT
