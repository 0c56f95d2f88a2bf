"""A loop through an orchestrator's death (docs/workflows.md, "Loops"): the orchestrator is
SIGKILLed while a forEach step's instances run, and started again; the rebuilt run carries
the loop on, and every instance runs exactly once, on its first attempt (each writes its id
and attempt to a ledger)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.support.stack import StackFactory, until

ITEMS = 60


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


async def test_an_orchestrator_killed_mid_loop_runs_every_instance_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=4)
    ledger = tmp_path / "ledger"
    run_id = await s.submit(
        {
            "steps": [
                {"id": "list", "command": f'echo "n=[$(seq -s, 1 {ITEMS})]" >> "$HEDDLE_OUTPUTS"'},
                {
                    "id": "each",
                    "command": f'sleep 0.1; echo "$HEDDLE_STEP_ID.$HEDDLE_ATTEMPT" >> {ledger}',
                    "dependsOn": ["list"],
                    "forEach": "steps.list.outputs.n",
                    "maxParallel": 4,
                },
            ]
        }
    )
    await until(lambda: len(ledger_lines(ledger)) >= ITEMS // 4, 60, "the loop did not start")
    s.kill("orchestrator")
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=120)
    not_done = [
        (st["id"], st["status"], st["reason"]) for st in run["steps"] if st["status"] != "succeeded"
    ]
    assert run["status"] == "succeeded", not_done[:5]
    ran = Counter(ledger_lines(ledger))
    assert ran == Counter(f"each[{k}].1" for k in range(ITEMS))
    instances = [st for st in run["steps"] if st.get("parent") == "each"]
    assert [st["attempt"] for st in instances] == [1] * ITEMS


async def test_an_orchestrator_dead_mid_expansion_expands_again_to_the_same_instances(
    stack: StackFactory, tmp_path: Path
) -> None:
    """The orchestrator dies with the instances' records stored and neither the run's nor
    the step's: the one started again finds the step pending, expands it again to the same
    ids (writing over the records), and each instance runs once."""
    s = await stack(runners=3, services=("dispatcher", "gateway"), wait=False)
    dying = s.start("orchestrator", HEDDLE_FAILPOINTS="orchestrator.mid_expansion=exit")
    await s.wait_ready(3)
    ledger = tmp_path / "ledger"
    run_id = await s.submit(
        {
            "steps": [
                {"id": "list", "command": "true"},
                {
                    "id": "each",
                    "command": f'echo "$HEDDLE_STEP_ID.$HEDDLE_ATTEMPT" >> {ledger}',
                    "dependsOn": ["list"],
                    "forEach": "['a', 'b', 'c', 'd', 'e']",
                    "maxParallel": 2,
                },
            ]
        }
    )
    await until(lambda: not dying.alive(), 30, "the orchestrator did not reach the failpoint")
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded", run
    assert Counter(ledger_lines(ledger)) == Counter(f"each[{k}].1" for k in range(5))
    assert run["stepCount"] == 7
