"""Each runner runs its steps as a uid of its own (HEDDLE_STEP_UIDS, runner-N the N-th), without
I/O: the range read from the setting, the uid each runner name gets, the step user a runner
takes, and the runners `heddle up` refuses for sharing one. The lock that keeps a uid one
runner's, and two runners' steps: tests/integration/test_step_uids.py."""

from __future__ import annotations

import pytest
from heddle.services.runner_agent.isolation import (
    NO_HOME,
    StepUserError,
    runner_step_user,
    step_uid_for,
    step_uids_problem,
)
from heddle.shared.runtime.settings import Settings, step_uid_range
from heddle.shared.wire.errors import SettingsError

DEFAULT = range(60600, 61100)


@pytest.mark.parametrize(
    ("text", "uids"),
    [
        ("60600-61099", range(60600, 61100)),
        ("70000", range(70000, 70001)),
        (" 5 - 9 ", range(5, 10)),
        ("1-65533", range(1, 65534)),
        ("65536-2147483647", range(65536, 2147483648)),
    ],
)
def test_step_uids_are_a_range_of_uids(text: str, uids: range) -> None:
    assert step_uid_range(text) == uids


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "must be FIRST-LAST"),
        ("abc", "must be FIRST-LAST"),
        ("60600-", "must be FIRST-LAST"),
        ("\u0663-\u0665", "must be FIRST-LAST"),  # digits, but not ASCII ones
        ("0-10", "0 is root"),
        ("61099-60600", "FIRST is above LAST"),
        ("1-2147483648", "uids go up to 2147483647"),
        ("60000-70000", "65534 or 65535"),
        ("65535", "65534 or 65535"),
    ],
)
def test_bad_step_uids_are_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        step_uid_range(text)


def test_a_runner_with_bad_step_uids_does_not_start() -> None:
    assert Settings.from_env({}).step_uids == "60600-61099"
    with pytest.raises(SettingsError, match="HEDDLE_STEP_UIDS='61099-60600': FIRST is above"):
        Settings.from_env({"HEDDLE_STEP_UIDS": "61099-60600"})


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        ("runner-0", 60600),
        ("runner-2", 60602),
        ("runner-499", 61099),
        ("blue-runner-7", 60607),  # the chart's, with a namePrefix
        ("gpu-box-12", 60612),
        ("runner-007", 60607),
    ],
)
def test_runner_n_gets_the_n_th_uid(name: str, uid: int) -> None:
    assert step_uid_for(DEFAULT, name) == uid


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "it has no name"),
        ("gateway", "its name 'gateway' ends in no number"),
        ("runner-500", "holds 500, for runner-0 to runner-499"),
        ("runner-12345678901", "has no step uid"),
    ],
)
def test_a_runner_whose_uid_cannot_be_told_is_refused(name: str, why: str) -> None:
    with pytest.raises(StepUserError, match=why):
        step_uid_for(DEFAULT, name)


def user_of(env: dict[str, str], euid: int = 0) -> tuple[str, int, int, str, bool] | None:
    user = runner_step_user(Settings.from_env(env), euid=euid)
    return None if user is None else (user.name, user.uid, user.gid, user.home, user.own)


@pytest.mark.parametrize(
    ("env", "euid", "expected"),
    [
        # Its own uid, from its name; its gid the same number; no passwd entry needed.
        ({"HEDDLE_RUNNER_NAME": "runner-3"}, 0, ("60603", 60603, 60603, NO_HOME, True)),
        ({"POD_NAME": "runner-1"}, 0, ("60601", 60601, 60601, NO_HOME, True)),
        (
            {"POD_NAME": "r-1", "HEDDLE_STEP_UIDS": "70000-70009"},
            0,
            ("70001", 70001, 70001, NO_HOME, True),
        ),
        # Not root: steps run as the runner, whatever is set.
        ({"HEDDLE_RUNNER_NAME": "runner-3"}, 1000, None),
        ({"HEDDLE_STEP_USER": "nobody"}, 1000, None),
        # HEDDLE_STEP_USER set wins, as before; its own only within HEDDLE_STEP_UIDS.
        ({"HEDDLE_STEP_USER": "none", "HEDDLE_RUNNER_NAME": "runner-3"}, 0, None),
        ({"HEDDLE_STEP_USER": "nobody"}, 0, ("nobody", 65534, 65534, "/nonexistent", False)),
        ({"HEDDLE_STEP_USER": "70000"}, 0, ("70000", 70000, 70000, NO_HOME, False)),
        ({"HEDDLE_STEP_USER": "60650"}, 0, ("60650", 60650, 60650, NO_HOME, True)),
    ],
)
def test_the_step_user_a_runner_takes(
    env: dict[str, str], euid: int, expected: tuple[str, int, int, str, bool] | None
) -> None:
    assert user_of(env, euid) == expected


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({}, "cannot tell this runner's step uid"),  # <host>-<pid> is no name to count on
        ({"HEDDLE_RUNNER_NAME": "runner-500"}, "has no step uid"),
        ({"HEDDLE_STEP_USER": "root"}, "is root"),
        ({"HEDDLE_STEP_USER": "no-such-user-here"}, "no such user"),
        ({"HEDDLE_STEP_USER": "4294967295"}, "uids go up to 2147483647"),  # -1: no change
    ],
)
def test_a_runner_as_root_that_cannot_know_its_step_user_is_refused(
    env: dict[str, str], why: str
) -> None:
    with pytest.raises(StepUserError, match=why):
        user_of(env)


@pytest.mark.parametrize(
    ("env", "runners", "why"),
    [
        ({"HEDDLE_STEP_UIDS": "60600-60601"}, 3, "'runner-2' has no step uid"),
        ({"HEDDLE_STEP_USER": "60600"}, 2, "runner-0 and runner-1 would share step uid 60600"),
    ],
)
def test_heddle_up_refuses_runners_that_would_share_a_step_uid(
    env: dict[str, str], runners: int, why: str
) -> None:
    names = [f"runner-{i}" for i in range(runners)]
    assert why in (step_uids_problem(Settings.from_env(env), names, euid=0) or "")
    assert step_uids_problem(Settings.from_env(env), names, euid=1000) is None  # not root
