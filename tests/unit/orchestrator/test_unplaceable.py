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
