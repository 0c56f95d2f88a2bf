"""What a runner pod's changes say about the runner inside it. Pure: no I/O, no clock.

The orchestrator's pod watch (``pod_watch.py``) hands each pod object the Kubernetes API lists
or streams (a plain dict, as the API sends it; ``pod_objects.py`` reads it) to a
``PodJudge``. The judge answers with the pod as it now is (a ``RunnerPod`` record, for
``GET /api/runners``) and, when the runner in it is gone, a ``PodVerdict``: the attempt that
runner holds fails now, as a silent runner's does, instead of after the heartbeat silence
limit. A verdict is given for what is seen to happen while watching:

- the pod is deleted (its DELETED event: its containers are gone), evicted or preempted
  ("runner pod runner-3-0 evicted");
- the kubelet evicts it (phase Failed, reason Evicted: "runner pod runner-3-0 evicted: The node
  was low on resource: memory.");
- one of its containers terminates, a termination not seen before (a new container id):
  "runner pod runner-3-0 OOMKilled (exit 137)";
- it stops being ready on a node that is not Ready: the judge asks for the node
  (``Judgement.check_node``) and ``node_state`` gives the verdicts.

Not a verdict: a pod that starts terminating (its runner drains its step and reports it
itself), a pod not ready on a Ready node (a failing probe: the heartbeats tell), and whatever a
list shows, at the start or after the watch broke: a termination or a deletion that happened
while nobody watched may be old, and the runner of that name may hold a new attempt by now.
The heartbeat watchdog is the backstop for those, as for an API that cannot be reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from heddle.services.orchestrator.pod_objects import (
    Pod,
    deleted_reason,
    evicted_reason,
    is_evicted,
    is_ready,
    is_terminating,
    node_not_ready,
    node_of,
    pod_name,
    record,
    runner_of,
    terminations,
    uid_of,
)
from heddle.shared.wire.contracts import RunnerPod

if TYPE_CHECKING:
    from heddle.shared.kube.client import ChangeKind


@dataclass(frozen=True, slots=True)
class PodVerdict:
    runner: str
    pod: str
    reason: str


@dataclass(slots=True)
class Judgement:
    record: RunnerPod | None  # the pod as it now is (None after DELETED)
    verdicts: list[PodVerdict] = field(default_factory=list)
    check_node: str | None = None  # look this node up, then call node_state
    gone: bool = False  # the pod is gone: drop its record


@dataclass(slots=True)
class _Known:
    uid: str
    runner: str
    node: str | None
    ready: bool
    terminations: set[str]
    evicted: bool
    node_judged: bool = False


class PodJudge:
    """Remembers each runner pod it has seen (by name, with its uid), so that one termination
    gives one verdict and a list gives none."""

    def __init__(self) -> None:
        self._pods: dict[str, _Known] = {}

    def listed(self, pods: list[Pod], seen_at: str = "") -> list[RunnerPod]:
        """A list (the watch's start, or its start again): the pods as they are, known from now
        on, with no verdict. A pod known before and missing now went while nobody watched."""
        self._pods = {pod_name(p): _known(p) for p in pods if pod_name(p)}
        return [record(p, seen_at) for p in pods if pod_name(p)]

    def event(self, kind: ChangeKind, pod: Pod, seen_at: str = "") -> Judgement:
        """One watch event: ADDED, MODIFIED or DELETED."""
        name = pod_name(pod)
        uid = uid_of(pod)
        known = self._pods.get(name)
        if known is not None and uid and known.uid and known.uid != uid:
            known = None  # a new pod of the same name (a StatefulSet's replacement)
        if kind == "DELETED":
            if known is None:
                # Never seen here: no verdict. If another pod of that name is known, its
                # record stays (the runner's attempts may be that pod's).
                return Judgement(None, gone=name not in self._pods)
            self._pods.pop(name, None)
            verdict = PodVerdict(known.runner, name, deleted_reason(pod))
            return Judgement(None, [verdict], gone=True)
        now = record(pod, seen_at)
        if known is None:
            self._pods[name] = _known(pod)
            return Judgement(now)
        verdicts: list[PodVerdict] = []
        ended = [t for t in terminations(pod) if t.key not in known.terminations]
        known.terminations.update(t.key for t in ended)
        if is_evicted(pod) and not known.evicted:
            known.evicted = True
            verdicts.append(PodVerdict(known.runner, name, evicted_reason(pod)))
        elif ended:
            verdicts.append(PodVerdict(known.runner, name, f"runner pod {name} {ended[-1].text}"))
        ready = is_ready(pod)
        check = None
        if known.ready and not ready and now.node and not verdicts and not is_terminating(pod):
            check = now.node
        if ready:
            known.node_judged = False
        known.ready, known.node = ready, now.node
        return Judgement(now, verdicts, check)

    def node_state(self, node_name: str, node: dict[str, Any]) -> list[PodVerdict]:
        """The node a pod stopped being ready on, as the API has it: if it is not Ready, a
        verdict on every known pod on it that is not ready, once per pod until it is ready
        again."""
        why = node_not_ready(node)
        if why is None:
            return []
        out = []
        for name, k in sorted(self._pods.items()):
            if k.node == node_name and not k.ready and not k.node_judged:
                k.node_judged = True
                out.append(
                    PodVerdict(
                        k.runner, name, f"runner pod {name}: node {node_name} NotReady ({why})"
                    )
                )
        return out


def _known(pod: Pod) -> _Known:
    return _Known(
        uid=uid_of(pod),
        runner=runner_of(pod),
        node=node_of(pod),
        ready=is_ready(pod),
        terminations={t.key for t in terminations(pod)},
        evicted=is_evicted(pod),
    )
