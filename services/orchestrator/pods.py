"""What a runner pod's changes say about the runner inside it. Pure: no I/O, no clock.

The orchestrator's pod watch (``pod_watch.py``) hands each pod object the Kubernetes API lists
or streams (a plain dict, as the API sends it) to a ``PodJudge``. The judge answers with the
pod as it now is (a ``RunnerPod`` record, for ``GET /api/runners``) and, when the runner in it
is gone, a ``PodVerdict``: the attempt that runner holds fails now, as a silent runner's does,
instead of after the heartbeat silence limit. A verdict is given for what is seen to happen
while watching:

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

from heddle.shared.wire.contracts import RunnerPod

if TYPE_CHECKING:
    from heddle.shared.kube.client import ChangeKind

RUNNER_LABEL = "heddle/runner"  # the runner a pod runs (the chart sets it)
RUNNER_CONTAINER = "runner"

# A DisruptionTarget condition's reason (the API says why it deletes a pod) -> what happened.
DISRUPTIONS = {
    "EvictionByEvictionAPI": "evicted",
    "PreemptionByScheduler": "preempted",
    "DeletionByTaintManager": "deleted by the taint manager",
    "DeletionByPodGC": "deleted by the pod garbage collector",
    "TerminationByKubelet": "terminated by the kubelet",
}

Pod = dict[str, Any]


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


# ---- reading a pod object ---------------------------------------------------------------------


def _meta(pod: Pod) -> dict[str, Any]:
    return pod.get("metadata") or {}


def _status(pod: Pod) -> dict[str, Any]:
    return pod.get("status") or {}


def pod_name(pod: Pod) -> str:
    return str(_meta(pod).get("name") or "")


def runner_of(pod: Pod) -> str:
    """The runner a pod runs: its heddle/runner label, else its name (a runner's default
    name is its pod's)."""
    return str((_meta(pod).get("labels") or {}).get(RUNNER_LABEL) or pod_name(pod))


def is_ready(pod: Pod) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in _status(pod).get("conditions") or []
    )


def _containers(pod: Pod) -> list[dict[str, Any]]:
    return list(_status(pod).get("containerStatuses") or [])


@dataclass(frozen=True, slots=True)
class Termination:
    key: str  # one container run: its container id
    container: str
    reason: str
    exit_code: int | None
    finished_at: str

    @property
    def text(self) -> str:
        return self.reason if self.exit_code is None else f"{self.reason} (exit {self.exit_code})"


def terminations(pod: Pod) -> list[Termination]:
    """Every container run of the pod that has ended, as its status shows them (the current
    state and the last one), oldest first."""
    out: dict[str, Termination] = {}
    for cs in _containers(pod):
        name = str(cs.get("name") or "")
        for where in ("lastState", "state"):
            t = (cs.get(where) or {}).get("terminated")
            if not t:
                continue
            key = t.get("containerID") or f"{name}@{t.get('finishedAt') or cs.get('restartCount')}"
            code = t.get("exitCode")
            reason = t.get("reason") or ("Completed" if code == 0 else "Error")
            out[f"{name}/{key}"] = Termination(
                f"{name}/{key}",
                name,
                str(reason),
                code if isinstance(code, int) else None,
                str(t.get("finishedAt") or ""),
            )
    return sorted(out.values(), key=lambda t: t.finished_at)


def is_evicted(pod: Pod) -> bool:
    s = _status(pod)
    return s.get("phase") == "Failed" and s.get("reason") == "Evicted"


def _disruption(pod: Pod) -> str | None:
    for c in _status(pod).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            reason = str(c.get("reason") or "")
            return DISRUPTIONS.get(reason, f"deleted ({reason})" if reason else "deleted")
    return None


def deleted_reason(pod: Pod) -> str:
    name = pod_name(pod)
    if is_evicted(pod):
        return _evicted_reason(pod)
    return f"runner pod {name} {_disruption(pod) or 'deleted'}"


def _evicted_reason(pod: Pod) -> str:
    message = str(_status(pod).get("message") or "").strip()
    return f"runner pod {pod_name(pod)} evicted" + (f": {message}" if message else "")


def _display_reason(pod: Pod) -> str | None:
    """Why the pod is not running as it should, in the API's own word."""
    if _meta(pod).get("deletionTimestamp"):
        return "Terminating"
    s = _status(pod)
    if s.get("reason"):
        return str(s["reason"])
    for cs in _containers(pod):
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            reason = (state.get(kind) or {}).get("reason")
            if reason:
                return str(reason)
    for c in s.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason"):
            return str(c["reason"])
    return None


def record(pod: Pod, seen_at: str = "") -> RunnerPod:
    """The pod as ``GET /api/runners`` shows it."""
    s = _status(pod)
    ends = [t for t in terminations(pod) if t.container == RUNNER_CONTAINER] or terminations(pod)
    return RunnerPod(
        name=pod_name(pod),
        runner=runner_of(pod),
        uid=str(_meta(pod).get("uid") or ""),
        phase=str(s.get("phase") or "Unknown"),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        ready=is_ready(pod),
        restarts=sum(int(cs.get("restartCount") or 0) for cs in _containers(pod)),
        reason=_display_reason(pod),
        last_termination=ends[-1].text if ends else None,
        seen_at=seen_at,
    )


def node_not_ready(node: dict[str, Any]) -> str | None:
    """Why a node is not Ready (its Ready condition's message or reason), or None if it is."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return None
            return str(c.get("message") or c.get("reason") or f"Ready is {c.get('status')}")
    return "it reports no Ready condition"


# ---- the judge --------------------------------------------------------------------------------


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
        uid = str(_meta(pod).get("uid") or "")
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
            verdicts.append(PodVerdict(known.runner, name, _evicted_reason(pod)))
        elif ended:
            verdicts.append(PodVerdict(known.runner, name, f"runner pod {name} {ended[-1].text}"))
        ready = is_ready(pod)
        check = None
        if (
            known.ready
            and not ready
            and now.node
            and not verdicts
            and not _meta(pod).get("deletionTimestamp")
        ):
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
        uid=str(_meta(pod).get("uid") or ""),
        runner=runner_of(pod),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        ready=is_ready(pod),
        terminations={t.key for t in terminations(pod)},
        evicted=is_evicted(pod),
    )
