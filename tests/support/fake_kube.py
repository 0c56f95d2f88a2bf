"""A small Kubernetes API server for tests, over real HTTP on 127.0.0.1: the few endpoints the
pod watch uses (shared/kube/client.py), answered as the API answers them.

- ``GET /api/v1/namespaces/<ns>/pods?labelSelector=...``: a PodList with its
  ``metadata.resourceVersion``;
- the same with ``watch=true&resourceVersion=N``: a chunked stream of JSON lines, one event
  each (``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": {...}}``), first
  the events after N, then each change as it is made, until ``timeoutSeconds``; a version older
  than ``expired_before`` gets the API's ERROR event with a 410 Status, as etcd's compaction
  makes it;
- ``GET /api/v1/nodes/<name>``;
- a StatefulSet's scale subresource, ``GET`` and ``PATCH`` (a merge or strategic-merge patch
  of ``spec.replicas``) of ``/apis/apps/v1/namespaces/<ns>/statefulsets/<name>/scale``: the
  StatefulSets are ``statefulsets`` (name -> replicas); every patch is kept in ``scaled``
  (monotonic time, name, replicas) and handed to ``on_scale``, where a test plays the
  StatefulSet controller (starting or stopping the runner process of that name).

Every request must carry the kubeconfig's bearer token. Pods are built by ``runner_pod`` as
the API shows a StatefulSet's runner pod, and changed with ``modify``/``delete`` (which bump
the resource version and stream the event to every open watch).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from heddle.shared.wire.version import VERSION

TOKEN = "fake-kube-token"
NAMESPACE = "heddle"
LABELS = {
    "app.kubernetes.io/name": "heddle",
    "app.kubernetes.io/instance": "heddle",
    "app.kubernetes.io/component": "runner",
}
SELECTOR = ",".join(f"{k}={v}" for k, v in LABELS.items())

Pod = dict[str, Any]


def _now() -> str:
    return "2026-11-02T10:00:00Z"


def slow_credential_plugin(seconds: float) -> dict[str, Any]:
    """A kubeconfig user's ``exec`` credential plugin that answers the token after ``seconds``."""
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": TOKEN},
    }
    return {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "sh",
        "args": ["-c", f"sleep {seconds}; echo '{json.dumps(credential)}'"],
        "interactiveMode": "Never",
    }


def container_id() -> str:
    return "containerd://" + uuid.uuid4().hex


def runner_pod(
    runner: str, node: str = "node-a", ready: bool = True, namespace: str = NAMESPACE
) -> Pod:
    """A running runner pod of the chart's StatefulSet ``runner`` (pod ``<runner>-0``)."""
    name = f"{runner}-0"
    ready_s = "True" if ready else "False"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": f"{runner}-",
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": _now(),
            "labels": {
                **LABELS,
                "heddle/runner": runner,
                "apps.kubernetes.io/pod-index": "0",
                "statefulset.kubernetes.io/pod-name": name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": runner,
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": "heddle-runner",
            "automountServiceAccountToken": False,
            "restartPolicy": "Always",
            "containers": [
                {"name": "runner", "image": f"heddle:{VERSION}", "args": ["heddle", "runner"]}
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "172.18.0.2",
            "podIP": "10.244.1.7",
            "startTime": _now(),
            "qosClass": "Burstable",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": ready_s},
                {"type": "ContainersReady", "status": ready_s},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "runner",
                    "image": f"docker.io/library/heddle:{VERSION}",
                    "imageID": "sha256:" + "0" * 64,
                    "containerID": container_id(),
                    "ready": ready,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": _now()}},
                    "lastState": {},
                }
            ],
        },
    }


def set_ready(pod: Pod, ready: bool) -> None:
    for c in pod["status"]["conditions"]:
        if c["type"] in ("Ready", "ContainersReady"):
            c["status"] = "True" if ready else "False"
    for cs in pod["status"]["containerStatuses"]:
        cs["ready"] = ready


def terminate(pod: Pod, reason: str = "OOMKilled", exit_code: int = 137) -> None:
    """The runner container ended: the state the kubelet reports before it restarts it."""
    cs = pod["status"]["containerStatuses"][0]
    cs["state"] = {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": _now(),
            "finishedAt": f"2026-11-02T10:00:{cs['restartCount'] + 1:02d}Z",
            "containerID": cs["containerID"],
        }
    }
    cs["started"] = False
    set_ready(pod, False)


def restart(pod: Pod) -> None:
    """The kubelet started the runner container again: the ended run is its lastState."""
    cs = pod["status"]["containerStatuses"][0]
    ended = cs["state"]["terminated"]
    cs["lastState"] = {"terminated": ended}
    cs["restartCount"] += 1
    cs["containerID"] = container_id()
    cs["state"] = {"running": {"startedAt": _now()}}
    cs["started"] = True
    set_ready(pod, True)


def oom_killed_and_restarted(pod: Pod) -> None:
    """Both at once, as one status update."""
    terminate(pod)
    restart(pod)


def crash_looping(pod: Pod) -> None:
    cs = pod["status"]["containerStatuses"][0]
    terminate(pod, "Error", 1)
    restart(pod)
    cs["state"] = {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 10s restarting failed container=runner",
        }
    }
    set_ready(pod, False)


def evicted_by_kubelet(pod: Pod) -> None:
    pod["status"].update(
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory. Threshold quantity: 100Mi.",
        }
    )
    terminate(pod, "Error", 137)


def disruption(pod: Pod, reason: str = "EvictionByEvictionAPI") -> None:
    """What the API writes on a pod it is about to delete for a disruption."""
    pod["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": "Eviction API: evicting",
            "lastTransitionTime": _now(),
        }
    )
    pod["metadata"]["deletionTimestamp"] = _now()
    pod["metadata"]["deletionGracePeriodSeconds"] = 30


def node(name: str, ready: bool = True) -> dict[str, Any]:
    cond = (
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is ready"}
        if ready
        else {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        }
    )
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "labels": {"kubernetes.io/os": "linux"},
        },
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                },
                cond,
            ]
        },
    }


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKube:
    def __init__(self, namespace: str = NAMESPACE) -> None:
        self.namespace = namespace
        self.pods: dict[str, Pod] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.version = 1000
        self.events: list[tuple[int, str, Pod]] = []
        self.expired_before = 0
        self.watches: list[asyncio.Queue[tuple[int, str, Pod] | None]] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.unauthorized = 0
        self.down = False  # answer every request with 503
        self.statefulsets: dict[str, int] = {}
        self.scaled: list[tuple[float, str, int]] = []
        self.on_scale: Callable[[str, int, int], Awaitable[None]] | None = None  # name, was, now
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ---- the server ----

    async def start(self) -> FakeKube:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods)
        app.router.add_get("/api/v1/nodes/{name}", self._node)
        scale = "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}/scale"
        app.router.add_get(scale, self._scale)
        app.router.add_patch(scale, self._scale)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the port bound, when asked for any (0)
        return self

    async def stop(self) -> None:
        self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, credential_delay: float = 0.0) -> Path:
        """A kubeconfig for this server; with ``credential_delay``, its token comes from a
        credential plugin that takes that many seconds, run as the configuration loads."""
        user: dict[str, Any] = {"token": TOKEN}
        if credential_delay:
            user = {"exec": slow_credential_plugin(credential_delay)}
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": user}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {
                                "cluster": "fake",
                                "user": "fake",
                                "namespace": self.namespace,
                            },
                        }
                    ],
                    "current-context": "fake",
                }
            )
        )
        return path

    def close_watches(self) -> None:
        """End every open watch, as the API does at its timeout."""
        for q in self.watches:
            q.put_nowait(None)

    def watch_count(self) -> int:
        return len(self.watches)

    # ---- changes ----

    def _bump(self, kind: str, pod: Pod) -> None:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        item = (self.version, kind, copy.deepcopy(pod))
        self.events.append(item)
        for q in self.watches:
            q.put_nowait(item)

    def add(self, pod: Pod) -> Pod:
        self.pods[pod["metadata"]["name"]] = pod
        self._bump("ADDED", pod)
        return pod

    def modify(self, name: str, change: Callable[[Pod], None]) -> Pod:
        pod = self.pods[name]
        change(pod)
        self._bump("MODIFIED", pod)
        return pod

    def delete(self, name: str) -> Pod:
        pod = self.pods.pop(name)
        self._bump("DELETED", pod)
        return pod

    def bookmark(self) -> None:
        self.version += 1
        item = (
            self.version,
            "BOOKMARK",
            {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.version)}},
        )
        for q in self.watches:
            q.put_nowait(item)

    # ---- handlers ----

    def _check(self, request: web.Request) -> web.Response | None:
        self.requests.append((request.path, dict(request.query)))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.unauthorized += 1
            return _status(401, "Unauthorized", "Unauthorized")
        if self.down:
            return _status(503, "ServiceUnavailable", "the API server is shutting down")
        return None

    async def _node(self, request: web.Request) -> web.StreamResponse:
        refused = self._check(request)
        if refused is not None:
            return refused
        found = self.nodes.get(request.match_info["name"])
        if found is None:
            return _status(404, "NotFound", f'nodes "{request.match_info["name"]}" not found')
        return web.json_response(found)

    async def _scale(self, request: web.Request) -> web.StreamResponse:
        refused = self._check(request)
        if refused is not None:
            return refused
        name, ns = request.match_info["name"], request.match_info["ns"]
        if ns != self.namespace or name not in self.statefulsets:
            return _status(404, "NotFound", f'statefulsets.apps "{name}" not found')
        if request.method == "PATCH":
            kind = request.content_type
            if kind not in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/json-patch+json",
            ):
                return _status(415, "UnsupportedMediaType", f"{kind} is unsupported")
            body = await request.json()
            if kind == "application/json-patch+json":
                replicas = next(op["value"] for op in body if op["path"] == "/spec/replicas")
            else:
                replicas = body["spec"]["replicas"]
            if not isinstance(replicas, int) or replicas < 0:
                return _status(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}")
            was = self.statefulsets[name]
            self.statefulsets[name] = replicas
            self.version += 1
            self.scaled.append((time.monotonic(), name, replicas))
            if self.on_scale is not None:
                await self.on_scale(name, was, replicas)
        replicas = self.statefulsets[name]
        return web.json_response(
            {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                    "resourceVersion": str(self.version),
                    "creationTimestamp": _now(),
                },
                "spec": {"replicas": replicas},
                "status": {
                    "replicas": replicas,
                    "selector": f"{SELECTOR},heddle/runner={name}",
                },
            }
        )

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        refused = self._check(request)
        if refused is not None:
            return refused
        if request.match_info["ns"] != self.namespace:
            return web.json_response(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.version)},
                    "items": [],
                }
            )
        selector = request.query.get("labelSelector", "")
        if request.query.get("watch") in ("true", "1"):
            return await self._watch(request, selector)
        items = [
            copy.deepcopy(p)
            for p in self.pods.values()
            if _matches(p["metadata"].get("labels", {}), selector)
        ]
        return web.json_response(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, selector: str) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.version)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if since < self.expired_before:
            await _send(
                resp,
                "ERROR",
                _status_body(410, "Expired", f"too old resource version: {since} ({self.version})"),
            )
            await resp.write_eof()
            return resp
        queue: asyncio.Queue[tuple[int, str, Pod] | None] = asyncio.Queue()
        for item in self.events:
            if item[0] > since:
                queue.put_nowait(item)
        self.watches.append(queue)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                if item is None:
                    break
                _, kind, obj = item
                if kind != "BOOKMARK" and not _matches(obj["metadata"].get("labels", {}), selector):
                    continue
                await _send(resp, kind, obj)
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self.watches.remove(queue)
        try:
            await resp.write_eof()
        except ConnectionResetError:
            pass
        return resp


async def _send(resp: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
    await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


def _status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(_status_body(code, reason, message), status=code)
