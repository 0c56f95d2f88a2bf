"""services/orchestrator/pods.py: what each pod event says about the runner in it (pure),
and pod_objects.py, what a pod object says. Every kind of event, on a pod known and unknown,
once and again."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from heddle.services.orchestrator import pod_objects as o
from heddle.services.orchestrator import pods as p

from tests.support import fake_kube as fk


def judge_with(*runners: str, node: str = "node-a") -> tuple[p.PodJudge, dict[str, o.Pod]]:
    judge = p.PodJudge()
    made = {f"{r}-0": fk.runner_pod(r, node=node) for r in runners}
    judge.listed([copy.deepcopy(x) for x in made.values()])
    return judge, made


def changed(pod: o.Pod, change: Callable[[o.Pod], None]) -> o.Pod:
    change(pod)
    return copy.deepcopy(pod)


# ---- reading a pod ------------------------------------------------------------------------------


def test_record_of_a_running_pod() -> None:
    pod = fk.runner_pod("runner-3", node="kind-worker")
    rec = o.record(pod, "2026-11-02T10:00:00Z")
    assert (rec.name, rec.runner, rec.phase, rec.node, rec.ready, rec.restarts) == (
        "runner-3-0",
        "runner-3",
        "Running",
        "kind-worker",
        True,
        0,
    )
    assert rec.reason is None and rec.last_termination is None
    assert rec.uid == pod["metadata"]["uid"] and rec.seen_at == "2026-11-02T10:00:00Z"


def test_the_runner_is_the_label_else_the_pod_name() -> None:
    pod = fk.runner_pod("runner-3")
    assert o.runner_of(pod) == "runner-3"
    del pod["metadata"]["labels"][o.RUNNER_LABEL]
    assert o.runner_of(pod) == "runner-3-0"


@pytest.mark.parametrize(
    ("change", "reason", "ready", "restarts", "last"),
    [
        (fk.crash_looping, "CrashLoopBackOff", False, 1, "Error (exit 1)"),
        (fk.oom_killed_and_restarted, None, True, 1, "OOMKilled (exit 137)"),
        (fk.terminate, "OOMKilled", False, 0, "OOMKilled (exit 137)"),
        (fk.evicted_by_kubelet, "Evicted", False, 0, "Error (exit 137)"),
        (fk.disruption, "Terminating", True, 0, None),
    ],
)
def test_record_says_why_a_pod_is_not_running(
    change: Callable[[o.Pod], None],
    reason: str | None,
    ready: bool,
    restarts: int,
    last: str | None,
) -> None:
    rec = o.record(changed(fk.runner_pod("runner-0"), change))
    assert (rec.reason, rec.ready, rec.restarts, rec.last_termination) == (
        reason,
        ready,
        restarts,
        last,
    )


def test_record_of_a_pod_not_scheduled() -> None:
    pod = fk.runner_pod("runner-0")
    pod["spec"].pop("nodeName")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
        ],
    }
    rec = o.record(pod)
    assert (rec.phase, rec.node, rec.ready, rec.reason) == ("Pending", None, False, "Unschedulable")


def test_a_bare_pod_object_reads_as_unknown() -> None:
    rec = o.record({"metadata": {"name": "x"}})
    assert (rec.name, rec.runner, rec.phase, rec.ready, rec.restarts) == (
        "x",
        "x",
        "Unknown",
        False,
        0,
    )


def test_terminations_are_keyed_by_container_run() -> None:
    pod = fk.runner_pod("runner-0")
    fk.terminate(pod)
    (ended,) = o.terminations(pod)
    fk.restart(pod)
    assert o.terminations(pod) == [ended]  # the same run, now as the last state
    fk.terminate(pod, "Error", 2)
    both = o.terminations(pod)
    assert [t.text for t in both] == ["OOMKilled (exit 137)", "Error (exit 2)"]


def test_a_termination_without_reason_or_id() -> None:
    pod = fk.runner_pod("runner-0")
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
    (t,) = o.terminations(pod)
    assert t.text == "Completed (exit 0)"
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 3}}
    assert o.terminations(pod)[0].text == "Error (exit 3)"


@pytest.mark.parametrize(
    ("conditions", "why"),
    [
        ([{"type": "Ready", "status": "True"}], None),
        (
            [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "message": "Kubelet stopped posting node status.",
                }
            ],
            "Kubelet stopped posting node status.",
        ),
        ([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}], "KubeletNotReady"),
        ([{"type": "Ready", "status": "False"}], "Ready is False"),
        ([], "it reports no Ready condition"),
    ],
)
def test_node_not_ready(conditions: list[dict[str, str]], why: str | None) -> None:
    assert o.node_not_ready({"status": {"conditions": conditions}}) == why


# ---- verdicts -----------------------------------------------------------------------------------


def test_a_list_gives_no_verdict_whatever_it_shows() -> None:
    judge = p.PodJudge()
    pods = [
        changed(fk.runner_pod("runner-0"), fk.oom_killed_and_restarted),
        changed(fk.runner_pod("runner-1"), fk.terminate),
        changed(fk.runner_pod("runner-2"), fk.evicted_by_kubelet),
        changed(fk.runner_pod("runner-3"), fk.crash_looping),
    ]
    records = judge.listed(pods)
    assert [r.name for r in records] == ["runner-0-0", "runner-1-0", "runner-2-0", "runner-3-0"]
    # Nothing new happened since: the same objects again give no verdict either.
    for pod in pods:
        assert judge.event("MODIFIED", copy.deepcopy(pod)).verdicts == []


def test_oom_killed_while_watched() -> None:
    judge, made = judge_with("runner-3")
    j = judge.event("MODIFIED", changed(made["runner-3-0"], fk.terminate))
    assert j.verdicts == [
        p.PodVerdict("runner-3", "runner-3-0", "runner pod runner-3-0 OOMKilled (exit 137)")
    ]
    assert j.record is not None and j.record.reason == "OOMKilled"
    assert j.check_node is None  # the termination is the verdict, not the readiness
    # The restart shows the same run as the last state: no second verdict.
    j = judge.event("MODIFIED", changed(made["runner-3-0"], fk.restart))
    assert j.verdicts == []
    # A second OOM kill is a new run: a new verdict.
    j = judge.event("MODIFIED", changed(made["runner-3-0"], fk.oom_killed_and_restarted))
    assert [v.reason for v in j.verdicts] == ["runner pod runner-3-0 OOMKilled (exit 137)"]


def test_killed_and_restarted_in_one_update() -> None:
    judge, made = judge_with("runner-0")
    j = judge.event("MODIFIED", changed(made["runner-0-0"], fk.oom_killed_and_restarted))
    assert [v.reason for v in j.verdicts] == ["runner pod runner-0-0 OOMKilled (exit 137)"]


def test_crash_loop_gives_one_verdict_per_crash() -> None:
    judge, made = judge_with("runner-0")
    j = judge.event("MODIFIED", changed(made["runner-0-0"], fk.crash_looping))
    assert [v.reason for v in j.verdicts] == ["runner pod runner-0-0 Error (exit 1)"]
    assert judge.event("MODIFIED", copy.deepcopy(made["runner-0-0"])).verdicts == []


def test_evicted_by_the_kubelet() -> None:
    judge, made = judge_with("runner-0")
    j = judge.event("MODIFIED", changed(made["runner-0-0"], fk.evicted_by_kubelet))
    assert [v.reason for v in j.verdicts] == [
        "runner pod runner-0-0 evicted: The node was low on resource: memory. "
        "Threshold quantity: 100Mi."
    ]
    assert judge.event("MODIFIED", copy.deepcopy(made["runner-0-0"])).verdicts == []
    # Its deletion afterwards is one more verdict; the attempt it held has failed already.
    j = judge.event("DELETED", copy.deepcopy(made["runner-0-0"]))
    assert j.gone and j.record is None
    assert [v.reason for v in j.verdicts] == [
        "runner pod runner-0-0 evicted: The node was low on resource: memory. "
        "Threshold quantity: 100Mi."
    ]


def test_terminating_is_not_a_verdict_deleted_is() -> None:
    judge, made = judge_with("runner-0")
    # Deletion starts: the runner drains its step and reports it itself.
    j = judge.event(
        "MODIFIED",
        changed(made["runner-0-0"], lambda x: x["metadata"].update(deletionTimestamp="t")),
    )
    assert j.verdicts == [] and j.check_node is None
    assert j.record is not None and j.record.reason == "Terminating"
    # Its containers stop (the runner exits 0 after draining): a termination, reported.
    j = judge.event(
        "MODIFIED", changed(made["runner-0-0"], lambda x: fk.terminate(x, "Completed", 0))
    )
    assert [v.reason for v in j.verdicts] == ["runner pod runner-0-0 Completed (exit 0)"]
    j = judge.event("DELETED", copy.deepcopy(made["runner-0-0"]))
    assert [v.reason for v in j.verdicts] == ["runner pod runner-0-0 deleted"]
    assert j.gone


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("EvictionByEvictionAPI", "evicted"),
        ("PreemptionByScheduler", "preempted"),
        ("DeletionByTaintManager", "deleted by the taint manager"),
        ("DeletionByPodGC", "deleted by the pod garbage collector"),
        ("TerminationByKubelet", "terminated by the kubelet"),
        ("SomethingNew", "deleted (SomethingNew)"),
        ("", "deleted"),
    ],
)
def test_deleted_for_a_disruption(reason: str, said: str) -> None:
    judge, made = judge_with("runner-0")
    pod = changed(made["runner-0-0"], lambda x: fk.disruption(x, reason))
    assert judge.event("MODIFIED", pod).verdicts == []
    j = judge.event("DELETED", pod)
    assert [v.reason for v in j.verdicts] == [f"runner pod runner-0-0 {said}"]


def test_force_deleted_at_once() -> None:
    judge, made = judge_with("runner-0")
    j = judge.event("DELETED", copy.deepcopy(made["runner-0-0"]))
    assert j.verdicts == [p.PodVerdict("runner-0", "runner-0-0", "runner pod runner-0-0 deleted")]


def test_a_pod_never_seen() -> None:
    judge, _ = judge_with()
    # Added while watched: known from now, no verdict even if it shows a past termination.
    new = changed(fk.runner_pod("runner-5"), fk.oom_killed_and_restarted)
    j = judge.event("ADDED", copy.deepcopy(new))
    assert j.verdicts == [] and j.record is not None and j.record.restarts == 1
    # Deleted without ever being seen: no verdict, its record (if any) dropped.
    j = judge.event("DELETED", fk.runner_pod("runner-6"))
    assert j.verdicts == [] and j.gone


def test_a_replacement_of_the_same_name_is_a_new_pod() -> None:
    judge, made = judge_with("runner-0")
    old = made["runner-0-0"]
    assert [v.reason for v in judge.event("DELETED", copy.deepcopy(old)).verdicts] == [
        "runner pod runner-0-0 deleted"
    ]
    new = fk.runner_pod("runner-0")  # the StatefulSet's new pod, a new uid
    assert judge.event("ADDED", copy.deepcopy(new)).verdicts == []
    # A late DELETED of the old pod says nothing about the new one, and keeps its record.
    j = judge.event("DELETED", copy.deepcopy(old))
    assert j.verdicts == [] and not j.gone
    # The new one is judged as itself.
    j = judge.event("MODIFIED", changed(new, fk.terminate))
    assert [v.reason for v in j.verdicts] == ["runner pod runner-0-0 OOMKilled (exit 137)"]


def test_a_modified_pod_with_a_new_uid_is_first_seen() -> None:
    judge, _ = judge_with("runner-0")
    new = changed(fk.runner_pod("runner-0"), fk.oom_killed_and_restarted)
    assert judge.event("MODIFIED", new).verdicts == []


def test_not_ready_asks_for_the_node_once_per_change() -> None:
    judge, made = judge_with("runner-0", "runner-1", node="node-a")
    j = judge.event("MODIFIED", changed(made["runner-0-0"], lambda x: fk.set_ready(x, False)))
    assert j.verdicts == [] and j.check_node == "node-a"
    # Still not ready: no new question.
    assert judge.event("MODIFIED", copy.deepcopy(made["runner-0-0"])).check_node is None
    # The node is Ready: a probe failed; the heartbeats judge.
    assert judge.node_state("node-a", fk.node("node-a", ready=True)) == []


def test_node_not_ready_fails_every_unready_pod_on_it_once() -> None:
    judge, made = judge_with("runner-0", "runner-1", "runner-2", node="node-a")
    judge.event(
        "MODIFIED", changed(made["runner-2-0"], lambda x: x["spec"].update(nodeName="node-b"))
    )
    for name in ("runner-0-0", "runner-1-0", "runner-2-0"):
        judge.event("MODIFIED", changed(made[name], lambda x: fk.set_ready(x, False)))
    verdicts = judge.node_state("node-a", fk.node("node-a", ready=False))
    assert verdicts == [
        p.PodVerdict(
            "runner-0",
            "runner-0-0",
            "runner pod runner-0-0: node node-a NotReady (Kubelet stopped posting node status.)",
        ),
        p.PodVerdict(
            "runner-1",
            "runner-1-0",
            "runner pod runner-1-0: node node-a NotReady (Kubelet stopped posting node status.)",
        ),
    ]
    # Asked again (another pod's question): nothing twice.
    assert judge.node_state("node-a", fk.node("node-a", ready=False)) == []
    # Ready again, then not: a new episode, a new verdict.
    judge.event("MODIFIED", changed(made["runner-0-0"], lambda x: fk.set_ready(x, True)))
    j = judge.event("MODIFIED", changed(made["runner-0-0"], lambda x: fk.set_ready(x, False)))
    assert j.check_node == "node-a"
    assert [v.pod for v in judge.node_state("node-a", fk.node("node-a", ready=False))] == [
        "runner-0-0"
    ]


def test_no_node_question_for_a_pod_without_a_node_or_being_deleted() -> None:
    judge, made = judge_with("runner-0", "runner-1")

    def unscheduled(x: o.Pod) -> None:
        x["spec"].pop("nodeName")
        fk.set_ready(x, False)

    assert judge.event("MODIFIED", changed(made["runner-0-0"], unscheduled)).check_node is None

    def deleting(x: o.Pod) -> None:
        x["metadata"]["deletionTimestamp"] = "t"
        fk.set_ready(x, False)

    assert judge.event("MODIFIED", changed(made["runner-1-0"], deleting)).check_node is None


def test_a_list_after_a_gap_forgets_what_went_meanwhile() -> None:
    judge, made = judge_with("runner-0", "runner-1")
    # runner-1-0 went while nobody watched: the new list has it no more, and a late event
    # about it gives no verdict.
    judge.listed([copy.deepcopy(made["runner-0-0"])])
    j = judge.event("DELETED", copy.deepcopy(made["runner-1-0"]))
    assert j.verdicts == [] and j.gone
