"""bench/workloads.py: a loop's workload counts the steps its run makes, and its baseline
runs the same fan-out written out. The workloads through a real stack:
tests/integration/test_bench_smoke.py."""

from __future__ import annotations

from bench.workloads import fanout, make


def test_a_loop_workload_counts_the_instances_it_makes() -> None:
    w = make("foreach-3")
    assert [s["id"] for s in w.runs[0]] == ["root", "each", "join"]
    assert w.runs[0][1]["forEach"] == "steps.root.outputs.items"
    assert w.steps == 6 and w.documented() == [6]
    assert w.baseline == [fanout(3)]
    assert "seq -s, 0 2" in str(w.runs[0][0]["command"])


def test_other_workloads_document_the_steps_they_list() -> None:
    w = make("diamonds-2")
    assert w.steps == 8 and w.documented() == [4, 4] and w.baseline is None
    assert make("chain-5:accept").accept_only
