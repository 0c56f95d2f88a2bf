"""Reading a runner pod object as the Kubernetes API lists or streams it (a plain dict, as the
API sends it): who runs in it, whether it is ready, which of its containers ended and why,
and the record ``GET /api/runners`` shows (``RunnerPod``). Pure: no I/O, no clock. What the
changes of a pod say about its runner is pods.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from heddle.shared.wire.contracts import RunnerPod

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


def _meta(pod: Pod) -> dict[str, Any]:
    return pod.get("metadata") or {}


def _status(pod: Pod) -> dict[str, Any]:
    return pod.get("status") or {}


def pod_name(pod: Pod) -> str:
    return str(_meta(pod).get("name") or "")


def uid_of(pod: Pod) -> str:
    """The pod's uid: a new pod of the same name (a StatefulSet's replacement) has another."""
    return str(_meta(pod).get("uid") or "")


def node_of(pod: Pod) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def is_terminating(pod: Pod) -> bool:
    """Deleted, gracefully: its runner drains its step and reports it itself."""
    return bool(_meta(pod).get("deletionTimestamp"))


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
        return evicted_reason(pod)
    return f"runner pod {name} {_disruption(pod) or 'deleted'}"


def evicted_reason(pod: Pod) -> str:
    message = str(_status(pod).get("message") or "").strip()
    return f"runner pod {pod_name(pod)} evicted" + (f": {message}" if message else "")


def _display_reason(pod: Pod) -> str | None:
    """Why the pod is not running as it should, in the API's own word."""
    if is_terminating(pod):
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
        uid=uid_of(pod),
        phase=str(s.get("phase") or "Unknown"),
        node=node_of(pod),
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
