"""The per-step budget's rows (bench/budget.py): the messages every service sent per step
against the workload kind's budget, and a fan-out's CPU per step over its repetitions."""

from __future__ import annotations

from typing import Any

from bench.budget import CPU_MS_PER_FANOUT_STEP, MESSAGES_SENT, budget_rows


def counted(sent_by_service: dict[str, float]) -> dict[str, dict[str, float]]:
    return {service: {"sent": sent, "received": 9.0} for service, sent in sent_by_service.items()}


def fanout(name: str, cpu_by_rep: list[dict[str, float]], sent: dict[str, float]) -> dict[str, Any]:
    return {
        "workload": name,
        "kind": "fanout",
        "mode": "run",
        "steps": 1000,
        "reps": [{"cpu_s": cpu} for cpu in cpu_by_rep],
        "messages_per_step": counted(sent),
    }


def test_the_messages_every_service_sent_are_held_to_the_kinds_budget() -> None:
    within = {"orchestrator": 5.0, "dispatcher": 2.3, "runners": 2.2, "gateway": 0.05}
    over = {**within, "runners": 3.2}  # one message more per step
    (held, _) = budget_rows(fanout("fanout-1000", [{"runner-0": 1.0}], within))
    (broken, _) = budget_rows(fanout("fanout-1000", [{"runner-0": 1.0}], over))
    assert held.heddle is not None and round(held.heddle.median, 2) == 9.55
    assert (held.target, held.holds) == (f"<= {MESSAGES_SENT['fanout']:g}", True)
    assert broken.holds is False


def test_the_fanouts_cpu_is_every_process_of_the_stack_per_step_over_its_reps() -> None:
    reps = [
        {"orchestrator": 0.2, "runner-0": 0.6, "launcher-runner-0": 0.2, "nats-server": 0.4},
        {"orchestrator": 0.3, "runner-0": 0.9, "launcher-runner-0": 0.3, "nats-server": 0.5},
        {"orchestrator": 0.2, "runner-0": 0.7, "launcher-runner-0": 0.2, "nats-server": 0.4},
    ]
    (_, cpu) = budget_rows(fanout("fanout-1000", reps, {"runners": 2.0}))
    assert cpu.heddle is not None
    assert (round(cpu.heddle.median, 3), round(cpu.heddle.max, 3)) == (1.5, 2.0)
    assert (cpu.target, cpu.holds) == (f"<= {CPU_MS_PER_FANOUT_STEP} ms", True)


def test_other_sizes_are_shown_without_a_target() -> None:
    rows = budget_rows(fanout("fanout-50", [{"runner-0": 1.0}], {"runners": 20.0}))
    assert [r.target for r in rows] == ["", ""] and {r.holds for r in rows} == {None}
    chain = {
        "workload": "chain-100",
        "kind": "chain",
        "messages_per_step": counted({"runners": 2.1, "orchestrator": 6.2}),
    }
    (row,) = budget_rows(chain)
    assert row.holds is True and "chain-100 messages sent per step" in row.figure
