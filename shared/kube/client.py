"""The Kubernetes API, through the ``kubernetes`` client: the one module that talks to a
cluster. The orchestrator's pod watch (services/orchestrator/pod_watch.py) uses it to list
and watch the runner pods by label, and to look up a node; the dispatcher's autoscaling
(services/dispatcher/autoscaling.py) to read and set a StatefulSet's replicas through its
scale subresource (``Scales``).

The client is synchronous, so the list and the watch run in a thread of their own, which hands
what it sees to the event loop as ``Listed`` (a list: the pods as they are, and the point the
watch goes on from), ``Changed`` (one watch event: ADDED, MODIFIED or DELETED with the pod
object as the API sent it, a plain dict) and ``Broken`` (the API could not be reached or
answered with an error; the thread tries again, backing off). A watch that the server ends
(its ``timeoutSeconds``) goes on from the last resource version seen; one whose version has
expired (410 Gone) starts again from a fresh list. The client is the ``k8s`` extra: it is
imported only when a watch or the autoscaling starts, in a thread (``open_api``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from urllib3 import HTTPResponse

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True, slots=True)
class Listed:
    pods: list[dict[str, Any]]
    resource_version: str


ChangeKind = Literal["ADDED", "MODIFIED", "DELETED"]  # a watch event's type


@dataclass(frozen=True, slots=True)
class Changed:
    kind: ChangeKind
    pod: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Broken:
    error: str


Item = Listed | Changed | Broken


class KubeError(Exception):
    """The API could not be asked, or refused: never a fact about a pod."""


def _body(resp: object) -> dict[str, Any]:
    """The JSON object of an answer asked for with ``_preload_content=False``: the client
    then returns urllib3's response as it came, not the model object its annotations name."""
    body: dict[str, Any] = json.loads(cast("HTTPResponse", resp).data)
    return body


def in_cluster(env: dict[str, str] | None = None) -> bool:
    """Whether this process runs in a pod with a service-account token mounted."""
    env = dict(os.environ) if env is None else env
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT_DIR / "token").exists()


def connect(kubeconfig: str = "") -> tuple[Any, str]:
    """An API client and its default namespace: from the kubeconfig file if one is given, else
    from the pod's in-cluster service account."""
    try:
        from kubernetes import client, config
    except ImportError as exc:  # the image installs it (the k8s extra)
        raise KubeError("the kubernetes client is missing: pip install 'heddle[k8s]'") from exc
    cfg = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
            _, active = config.list_kube_config_contexts(config_file=kubeconfig)
            namespace = (active or {}).get("context", {}).get("namespace") or "default"
        else:
            config.load_incluster_config(client_configuration=cfg)
            namespace = (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or "default"
    except Exception as exc:  # the client's, urllib3's and the file's errors: one KubeError
        raise KubeError(f"no Kubernetes configuration: {exc}") from exc
    return client.ApiClient(cfg), namespace


async def open_api(kubeconfig: str = "") -> tuple[Any, str]:
    """``connect`` in a thread: the client's import and the configuration's load (a
    credential plugin it runs, too) take a second or more on a busy machine, and a service's
    loop that stood still as long would let go of the messages it holds
    (shared/runtime/stalls.py)."""
    return await asyncio.to_thread(connect, kubeconfig)


class PodSource:
    """The pods of one namespace that match a label selector: listed, then watched, in a
    thread; ``next()`` gives what it saw, in order."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        selector: str,
        watch_timeout: float = 300.0,
        request_timeout: float = 10.0,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.selector = selector
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.backoff = backoff
        self._api = client.CoreV1Api(api_client)
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = threading.Event()
        self._watch: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # A daemon thread: a watch blocked in a read never holds the process up at exit.
        self._thread = threading.Thread(target=self._run, name="kube-pods", daemon=True)
        self._thread.start()

    async def next(self) -> Item:
        return await self._queue.get()

    async def stop(self) -> None:
        self._stopped.set()
        thread = self._thread
        deadline = time.monotonic() + self.request_timeout
        # The current watch is stopped again until the thread ends: one started just as
        # this was called would otherwise block its read until the watch times out.
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            watch = self._watch
            if watch is not None:
                watch.stop()  # shuts the socket down: a read blocked in the thread returns
            await asyncio.to_thread(thread.join, 0.2)

    async def node(self, name: str) -> dict[str, Any]:
        """The node as the API has it now."""
        return await asyncio.to_thread(self._read_node, name)

    # ---- the thread ----

    def _read_node(self, name: str) -> dict[str, Any]:
        try:
            resp = self._api.read_node(
                name, _preload_content=False, _request_timeout=self.request_timeout
            )
            return _body(resp)
        except Exception as exc:  # the client's, urllib3's and the socket's: one KubeError
            raise KubeError(f"reading node {name}: {_describe(exc)}") from exc

    def _emit(self, item: Item) -> None:
        loop = self._loop
        if loop is None or self._stopped.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed
            loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        delay = self.backoff[0]
        while not self._stopped.is_set():
            try:
                version = self._list()
                delay = self.backoff[0]
                while not self._stopped.is_set():
                    version = self._follow(version)
            except _Gone:
                continue  # list again, at once
            except Exception as exc:  # the watch thread must outlive any failure: it lists again
                if self._stopped.is_set():
                    return
                self._emit(Broken(_describe(exc)))
                self._stopped.wait(delay)
                delay = min(delay * 2, self.backoff[1])

    def _list(self) -> str:
        resp = self._api.list_namespaced_pod(
            self.namespace,
            label_selector=self.selector,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )
        body = _body(resp)
        version = str(body.get("metadata", {}).get("resourceVersion", ""))
        self._emit(Listed(list(body.get("items") or []), version))
        return version

    def _follow(self, version: str) -> str:
        """One watch request from ``version``, until the server ends it; the last version
        seen (bookmarks included)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        api, namespace = self._api, self.namespace

        # No docstring, so the client hands back each event as the API sent it (a dict under
        # raw_object), without building its model objects.
        def pods(**kwargs: Any) -> Any:
            return api.list_namespaced_pod(namespace, **kwargs)

        w = watch.Watch()
        self._watch = w
        if self._stopped.is_set():  # stop() may have missed this watch
            return version
        try:
            for event in w.stream(
                pods,
                label_selector=self.selector,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=int(self.watch_timeout),
                _request_timeout=(self.request_timeout, self.watch_timeout + 30),
            ):
                if self._stopped.is_set():
                    break
                if not isinstance(event, dict):
                    continue
                kind = event.get("type")
                obj = event.get("raw_object") or event.get("object") or {}
                version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._emit(Changed(kind, obj))
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone from exc
            raise
        finally:
            self._watch = None
        return version


class Scales:
    """The scale subresource of the StatefulSets of one namespace: ``get`` reads a
    StatefulSet's wanted replicas, ``set`` patches them. The calls block, so each runs in a
    thread; a failure is a ``KubeError``."""

    def __init__(self, api_client: Any, namespace: str, request_timeout: float = 10.0) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.request_timeout = request_timeout
        self._api = client.AppsV1Api(api_client)

    async def get(self, name: str) -> int:
        return await asyncio.to_thread(self._get, name)

    async def set(self, name: str, replicas: int) -> int:
        """Patch ``spec.replicas``; the replicas the API then has."""
        return await asyncio.to_thread(self._set, name, replicas)

    def _get(self, name: str) -> int:
        try:
            resp = self._api.read_namespaced_stateful_set_scale(
                name,
                self.namespace,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
            return int(_body(resp).get("spec", {}).get("replicas") or 0)
        except Exception as exc:  # the client's, urllib3's and the socket's: one KubeError
            raise KubeError(f"reading the scale of statefulset {name}: {_describe(exc)}") from exc

    def _set(self, name: str, replicas: int) -> int:
        try:
            resp = self._api.patch_namespaced_stateful_set_scale(
                name,
                self.namespace,
                {"spec": {"replicas": replicas}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
            return int(_body(resp).get("spec", {}).get("replicas") or 0)
        except Exception as exc:  # the client's, urllib3's and the socket's: one KubeError
            raise KubeError(f"scaling statefulset {name} to {replicas}: {_describe(exc)}") from exc


class _Gone(Exception):
    """The watch's resource version is too old: list again."""


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"
