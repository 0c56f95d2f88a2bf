"""Which queued steps no runner can take, and when they fail (unplaceable.py)."""

from __future__ import annotations

from heddle.services.orchestrator.unplaceable import Runner, Unplaceable, Waiting

GPU = Waiting("r", "train", 1, ("gpu",))
CPU = Runner("default", ["default"])


def test_a_step_no_runner_can_take_fails_after_the_timeout() -> None:
    look = Unplaceable(timeout=10)
    assert look.verdicts([GPU], [CPU], [], now=100) == []
    assert look.verdicts([GPU], [CPU], [], now=109.9) == []
    [(step, reason)] = look.verdicts([GPU], [CPU], [], now=110)
    assert step == GPU and "no runner has the labels gpu" in reason


def test_a_runner_with_the_labels_starts_the_count_again() -> None:
    look = Unplaceable(timeout=10)
    look.verdicts([GPU], [], [], now=0)
    assert look.verdicts([GPU], [Runner("gpu", ["a100", "gpu"])], [], now=5) == []
    assert look.verdicts([GPU], [], [], now=12) == []  # counted from 12, not from 0
    assert len(look.verdicts([GPU], [], [], now=22)) == 1


def test_a_pool_autoscaling_may_grow_keeps_the_step_waiting() -> None:
    look = Unplaceable(timeout=1)
    gpus, tpus = [Runner("gpu", ["gpu", "a100"])], [Runner("tpu", ["tpu"])]  # pools to grow
    look.verdicts([GPU], [], gpus, now=0)
    assert look.verdicts([GPU], [], gpus, now=100) == []
    assert len(look.verdicts([GPU], [], tpus, now=100)) == 0  # first seen now
    assert len(look.verdicts([GPU], [], tpus, now=101)) == 1


def test_an_attempt_that_ended_is_forgotten() -> None:
    look = Unplaceable(timeout=10)
    look.verdicts([GPU], [], [], now=0)
    look.verdicts([], [], [], now=5)
    assert look.since == {}
    retried = Waiting("r", "train", 2, ("gpu",))
    assert look.verdicts([retried], [], [], now=11) == []


def test_a_step_whose_pool_serves_other_namespaces_fails_naming_them() -> None:
    look = Unplaceable(timeout=10)
    gpu_a = Runner("gpu", ["gpu"], ["team-a"])
    theirs = Waiting("team-b=r", "train", 1, ("gpu",))
    ours = Waiting("team-a=r", "train", 1, ("gpu",))
    assert look.verdicts([theirs, ours], [CPU, gpu_a], [], now=0) == []
    [(step, reason)] = look.verdicts([theirs, ours], [CPU, gpu_a], [], now=10)
    assert step == theirs
    assert reason.startswith(
        "pool gpu serves namespace team-a only; this run is in namespace team-b: "
    )
    assert "HEDDLE_NO_RUNNER_TIMEOUT" in reason


def test_a_runner_serving_the_namespace_or_a_pool_to_grow_keeps_it_waiting() -> None:
    look = Unplaceable(timeout=1)
    theirs = Waiting("team-b=r", "train", 1, ("gpu",))
    gpu_a, gpu_b = Runner("gpu", ["gpu"], ["team-a"]), Runner("gpu", ["gpu"], ["team-b"])
    look.verdicts([theirs], [gpu_a], [], now=0)
    assert look.verdicts([theirs], [gpu_a, gpu_b], [], now=5) == []
    assert look.verdicts([theirs], [gpu_a], [gpu_b], now=50) == []
    assert look.verdicts([theirs], [gpu_a], [Runner("gpu", ["gpu"])], now=50) == []


def test_a_default_step_of_a_namespace_the_default_pool_does_not_serve_fails() -> None:
    look = Unplaceable(timeout=1)
    plain = Waiting("team-b=r", "report", 1, ())
    only_a = Runner("default", ["default"], ["team-a"])
    look.verdicts([plain], [only_a], [], now=0)
    [(_, reason)] = look.verdicts([plain], [only_a], [], now=1)
    assert "pool default serves namespace team-a only" in reason
