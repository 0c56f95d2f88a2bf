"""services/dispatcher/autoscale.py: when the runner pool grows and shrinks. Named cases, then
every pool of up to five runners in every state (registered or not, busy, idle long or not,
draining), with and without waiting steps, checked against the rules: a busy runner is never
removed, only the top ordinals go, the limits hold, the pool grows only when every runner is
busy and a step has waited long enough."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from heddle.services.dispatcher.autoscale import (
    Decision,
    Limits,
    Runner,
    Scaled,
    View,
    decide,
    leasable,
    ordinal_of,
    pack_key,
    pool_members,
    scaled_pools,
    waiting_of,
)
from heddle.shared.core.runner_pools import parse_pools

LIMITS = Limits(minimum=1, maximum=4, up_after=30.0, idle_after=300.0, start_timeout=120.0)
NOW = 10_000.0


def busy(o: int) -> Runner:
    return Runner(o, registered=True, busy=True, since=NOW)


def idle(o: int, for_: float = 1000.0) -> Runner:
    return Runner(o, registered=True, busy=False, since=NOW - for_)


def absent(o: int, for_: float) -> Runner:
    return Runner(o, registered=False, busy=False, since=NOW - for_)


def pool(*runners: Runner, **view: object) -> View:
    return View(replicas=len(runners), runners=runners, **view)  # type: ignore[arg-type]


# ---- up ----


def test_grows_by_the_steps_waiting_when_every_runner_is_busy() -> None:
    d = decide(pool(busy(0), busy(1), waits=(31.0, 5.0), waiting=2), LIMITS, NOW)
    assert (d.action, d.replicas) == ("up", 4)
    assert "2 ready step(s) waiting, the oldest 31.0 s" in d.reason


def test_never_past_the_maximum() -> None:
    d = decide(pool(busy(0), busy(1), waits=(40.0,), waiting=50), LIMITS, NOW)
    assert (d.action, d.replicas) == ("up", 4)
    d = decide(pool(*map(busy, range(4)), waits=(40.0,), waiting=50), LIMITS, NOW)
    assert d.action == "hold"


def test_not_before_a_step_has_waited_up_after() -> None:
    d = decide(pool(busy(0), waits=(29.9,), waiting=9), LIMITS, NOW)
    assert d.action == "hold"


def test_not_while_a_runner_is_free() -> None:
    d = decide(pool(busy(0), idle(1, 0.1), waits=(45.0,), waiting=1), LIMITS, NOW)
    assert d.action == "hold"


def test_runners_coming_count_until_their_start_timeout() -> None:
    asked = pool(busy(0), absent(1, 10.0), absent(2, 10.0), waits=(60.0,), waiting=2)
    assert decide(asked, LIMITS, NOW).action == "hold"  # two coming for two steps
    three = pool(busy(0), absent(1, 10.0), absent(2, 10.0), waits=(60.0,), waiting=3)
    assert decide(three, LIMITS, NOW).replicas == 4
    # A runner that never came (a crash loop, say) no longer counts after start_timeout.
    stuck = pool(busy(0), absent(1, 200.0), waits=(60.0,), waiting=1)
    assert (decide(stuck, LIMITS, NOW).action, decide(stuck, LIMITS, NOW).replicas) == ("up", 3)


def test_below_the_minimum_grows_at_once() -> None:
    limits = Limits(2, 4, 30.0, 300.0, 120.0)
    d = decide(View(replicas=0, runners=()), limits, NOW)
    assert (d.action, d.replicas) == ("up", 2)


def test_from_zero_runners_a_waiting_step_grows_the_pool() -> None:
    limits = Limits(0, 4, 1.0, 300.0, 120.0)
    d = decide(View(replicas=0, runners=(), waits=(1.5,), waiting=1), limits, NOW)
    assert (d.action, d.replicas) == ("up", 1)
    assert decide(View(replicas=0, runners=()), limits, NOW).action == "hold"


# ---- down ----


def test_idle_runners_go_from_the_top_at_once() -> None:
    d = decide(pool(idle(0), idle(1), idle(2), idle(3)), LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("down", 1, frozenset())
    assert "removing 1,2,3" in d.reason


def test_not_before_idle_after() -> None:
    d = decide(pool(idle(0, 299.0), idle(1, 299.0)), LIMITS, NOW)
    assert d.action == "hold"
    # One runner idle long enough is a runner too many: the top one goes, idle or not long.
    d = decide(pool(idle(0, 301.0), idle(1, 2.0)), LIMITS, NOW)
    assert (d.action, d.replicas) == ("down", 1)


def test_not_below_the_minimum() -> None:
    limits = Limits(2, 4, 30.0, 300.0, 120.0)
    d = decide(pool(idle(0), idle(1), idle(2)), limits, NOW)
    assert (d.action, d.replicas) == ("down", 2)
    assert decide(pool(idle(0), idle(1)), limits, NOW).action == "hold"


def test_a_busy_top_runner_is_drained_not_removed() -> None:
    # Runner 0 has been idle for long, but the top ordinal is the one a StatefulSet removes:
    # it is drained (no new step), and removed only once its step is done.
    d = decide(pool(idle(0), busy(1)), LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("drain", 2, frozenset({1}))
    again = pool(idle(0), busy(1), draining=d.draining)
    assert decide(again, LIMITS, NOW).action == "hold"
    done = pool(idle(0), idle(1, 0.5), draining=d.draining)
    d = decide(done, LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("down", 1, frozenset())


def test_idle_runners_below_a_busy_drained_one_wait_for_it() -> None:
    d = decide(pool(idle(0), idle(1), idle(2), busy(3)), LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("drain", 4, frozenset({1, 2, 3}))
    d = decide(pool(idle(0), idle(1), idle(2), idle(3, 1.0), draining=d.draining), LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("down", 1, frozenset())


def test_a_waiting_step_takes_the_draining_runners_back() -> None:
    view = pool(idle(0, 5.0), busy(1), draining=frozenset({1}), waits=(0.1,), waiting=1)
    d = decide(view, LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("undrain", 2, frozenset())


def test_not_while_steps_wait() -> None:
    d = decide(pool(idle(0), idle(1), waiting=1), LIMITS, NOW)
    assert d.action == "hold"


def test_runners_above_the_maximum_go_whatever_their_idle_time() -> None:
    view = pool(busy(0), idle(1, 1.0), idle(2, 1.0), idle(3, 1.0), busy(4), idle(5, 1.0))
    d = decide(view, LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("down", 5, frozenset({4}))
    assert "above the maximum of 4" in d.reason
    d = decide(pool(*view.runners[:4], idle(4, 0.2), draining=d.draining), LIMITS, NOW)
    assert (d.action, d.replicas, d.draining) == ("down", 4, frozenset())
    # ... even while steps wait: they are not kept as runners.
    waiting = pool(busy(0), busy(1), busy(2), busy(3), busy(4), waits=(99.0,), waiting=3)
    d = decide(waiting, LIMITS, NOW)
    assert (d.action, d.draining) == ("drain", frozenset({4}))


def test_a_runner_that_left_the_registry_goes_after_idle_after() -> None:
    d = decide(pool(idle(0), absent(1, 301.0)), LIMITS, NOW)
    assert (d.action, d.replicas) == ("down", 1)
    assert decide(pool(idle(0, 5.0), absent(1, 10.0)), LIMITS, NOW).action == "hold"


def test_a_runner_still_coming_is_not_idle() -> None:
    # Asked for 100 s ago (start_timeout 120 s), not registered yet: not taken for idle,
    # though idle_after is shorter. Past start_timeout, it is.
    limits = Limits(1, 4, 30.0, 60.0, 120.0)
    assert decide(pool(idle(0, 5.0), absent(1, 100.0)), limits, NOW).action == "hold"
    d = decide(pool(idle(0, 5.0), absent(1, 121.0)), limits, NOW)
    assert (d.action, d.replicas) == ("down", 1)


def test_a_drain_of_a_removed_ordinal_is_forgotten() -> None:
    d = decide(pool(busy(0), draining=frozenset({3})), LIMITS, NOW)
    assert (d.action, d.draining) == ("hold", frozenset())


# ---- names and leases ----


@pytest.mark.parametrize(
    ("name", "ordinal"),
    [
        ("runner-0", 0),
        ("runner-12", 12),
        ("runner-", None),
        ("runner-01", None),
        ("runner-x", None),
        ("blue-runner-3", None),
        ("laptop-1234", None),
    ],
)
def test_ordinal_of(name: str, ordinal: int | None) -> None:
    assert ordinal_of(name, "runner-") == ordinal


def test_ordinal_of_with_a_prefix() -> None:
    assert ordinal_of("blue-runner-3", "blue-runner-") == 3


def test_leasable() -> None:
    assert leasable(0, 2, frozenset())
    assert not leasable(1, 2, frozenset({1}))
    assert not leasable(2, 2, frozenset())  # its pod is on its way out


# ---- every small pool ----

STATES = ("busy", "idle long", "idle short", "absent long", "absent short")


def runner_in(o: int, state: str) -> Runner:
    return {
        "busy": busy(o),
        "idle long": idle(o, 400.0),
        "idle short": idle(o, 10.0),
        "absent long": absent(o, 400.0),
        "absent short": absent(o, 10.0),
    }[state]


def every_view() -> list[View]:
    views = []
    for n in range(6):
        for states in itertools.product(STATES, repeat=n):
            runners = tuple(runner_in(o, s) for o, s in enumerate(states))
            for waits, waiting in (((), 0), ((5.0,), 1), ((40.0, 31.0), 9)):
                for drained in range(n + 1):
                    draining = frozenset(range(n - drained, n))
                    views.append(View(n, runners, waits, waiting, draining))
    return views


@pytest.mark.parametrize("limits", [LIMITS, Limits(0, 3, 30.0, 300.0, 120.0)])
def test_every_small_pool_keeps_the_rules(limits: Limits) -> None:
    checked = 0
    for view in every_view():
        d = decide(view, limits, NOW)
        check(view, limits, d)
        checked += 1
    assert checked > 20_000


def check(view: View, limits: Limits, d: Decision) -> None:
    n = view.replicas
    by = {r.ordinal: r for r in view.runners}
    waiting = max(view.waiting, len(view.waits))
    what = f"{view} -> {d}"
    assert all(o < d.replicas for o in d.draining), what
    if d.action == "hold":
        assert (d.replicas, d.draining) == (n, view.draining & frozenset(range(n))), what
    if d.action == "up":
        assert d.replicas > n and d.replicas <= max(limits.maximum, limits.minimum), what
        if n >= limits.minimum:
            # Every runner there is busy (or draining), and a step waited long enough.
            assert max(view.waits) >= limits.up_after, what
            assert all(by[o].busy or not by[o].registered for o in range(n)), what
    if d.action == "down":
        assert d.replicas < n and d.replicas >= min(limits.minimum, n), what
        for o in range(d.replicas, n):
            # Never a busy runner; only idle ones (or ones past the maximum).
            assert not by[o].busy, what
            if o < limits.maximum:
                assert not waiting, what
                assert (
                    o in view.draining
                    or NOW - by[o].since >= limits.idle_after
                    or any(
                        NOW - by[x].since >= limits.idle_after and not by[x].busy for x in range(n)
                    )
                ), what
    if d.action == "drain":
        new = d.draining - view.draining
        assert new and d.replicas == n, what
        # The top ordinals: nothing above a newly drained one is left serving.
        assert all(o in d.draining for o in range(min(new), n)), what
    if d.action == "undrain":
        assert waiting and d.draining < view.draining, what
    if d.action in ("drain", "down") and waiting:
        # With steps waiting, only ordinals past the maximum are drained or removed.
        assert all(o >= limits.maximum for o in d.draining | set(range(d.replicas, n))), what


# ---- runner pools: each scaled on its own ---------------------------------------------------


def test_no_pools_listed_scale_the_default_pool_as_the_settings_say() -> None:
    (scaled,) = scaled_pools([], LIMITS, "runner-")
    assert scaled == Scaled("default", "runner-", LIMITS)


def test_each_pool_with_autoscaling_gets_its_own_bounds_and_the_shared_timings() -> None:
    pools = parse_pools(
        json.dumps(
            [
                {"name": "default", "statefulset": "runner-", "minReplicas": 2, "maxReplicas": 2},
                {
                    "name": "gpu",
                    "statefulset": "runner-gpu-",
                    "minReplicas": 0,
                    "maxReplicas": 3,
                    "autoscaling": True,
                },
                {
                    "name": "arm",
                    "statefulset": "runner-arm-",
                    "minReplicas": 1,
                    "maxReplicas": 9,
                    "autoscaling": True,
                },
            ]
        )
    )
    gpu, arm = scaled_pools(pools, LIMITS, "ignored-")
    assert gpu == Scaled("gpu", "runner-gpu-", replace(LIMITS, minimum=0, maximum=3))
    assert arm == Scaled("arm", "runner-arm-", replace(LIMITS, minimum=1, maximum=9))


def test_a_pool_counts_only_its_own_runners() -> None:
    names = ["runner-0", "runner-1", "runner-gpu-0", "runner-gpu-3", "runner-gpu2-1", "other"]
    assert pool_members(names, "runner-") == {0: "runner-0", 1: "runner-1"}
    assert pool_members(names, "runner-gpu-") == {0: "runner-gpu-0", 3: "runner-gpu-3"}
    assert pool_members(names, "runner-gpu2-") == {1: "runner-gpu2-1"}


def test_steps_go_to_the_lowest_ordinal_of_each_pool_a_runner_of_none_first() -> None:
    prefixes = ["runner-", "runner-gpu-"]
    names = ["runner-gpu-2", "runner-1", "stray", "runner-gpu-0", "runner-0"]
    keys = {n: pack_key(n, prefixes) for n in names}
    assert keys == {"runner-gpu-2": 2, "runner-1": 1, "stray": -1, "runner-gpu-0": 0, "runner-0": 0}


@pytest.mark.parametrize(
    ("waits", "pending", "waiting"),
    [((), None, 0), ((), 7, 0), ((1.0,), None, 1), ((1.0, 2.0), 5, 7), ((3.0,), 0, 1)],
)
def test_a_pool_s_backlog_counts_only_while_steps_in_hand_wait(
    waits: tuple[float, ...], pending: int | None, waiting: int
) -> None:
    assert waiting_of(waits, pending) == waiting


def test_one_pool_s_backlog_grows_it_while_the_other_shrinks() -> None:
    """The same look, two pools: each decided from its own runners and demand alone."""
    gpu_limits = replace(LIMITS, minimum=0, maximum=3)
    gpu = View(
        replicas=1,
        runners=(busy(0),),
        waits=(40.0, 35.0),
        waiting=waiting_of((40.0, 35.0), 3),
    )
    default = View(replicas=3, runners=(busy(0), idle(1), idle(2)), waiting=waiting_of((), 9))
    grown = decide(gpu, gpu_limits, NOW)
    assert (grown.action, grown.replicas) == ("up", 3)  # 5 waiting, capped at its maximum
    shrunk = decide(default, LIMITS, NOW)
    assert (shrunk.action, shrunk.replicas) == ("down", 1)
