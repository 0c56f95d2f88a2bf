"""The orchestrator's pod watch: the runner pods, followed through the Kubernetes API when the
orchestrator runs in a cluster (``HEDDLE_POD_WATCH=auto`` with an in-cluster service account,
or ``HEDDLE_KUBECONFIG``).

The API talk is shared/kube/client.py's and the judging pods.py's (pure); this module holds
the I/O between them: each pod's record goes to ``heddle-pods`` (the gateway's
``GET /api/runners`` shows it), and each verdict goes to the liveness path
(``Liveness.runner_lost``), which fails the attempt the runner holds exactly as the watchdog
fails a silent runner's, retries included. An API that cannot be reached gives no verdict: it
is logged once, the watch tries again, and the heartbeat watchdog stays the backstop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, assert_never

from heddle.services.orchestrator.pods import PodJudge, PodVerdict
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_types import NatsError
from heddle.shared.kube import client as kube
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.contracts import RunnerPod, encode
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.services.orchestrator.liveness import Liveness
    from heddle.shared.broker.buckets import Bucket

log = logging.getLogger("heddle.orchestrator")


def wanted(settings: Settings) -> bool:
    """Whether this orchestrator watches pods: in a cluster, or given a kubeconfig."""
    if settings.pod_watch == "off":
        return False
    return bool(settings.kubeconfig) or kube.in_cluster()


class PodWatch:
    def __init__(self, settings: Settings, pods_kv: Bucket, liveness: Liveness) -> None:
        self.settings = settings
        self.pods_kv = pods_kv
        self.liveness = liveness  # fails the attempts a runner whose pod is gone holds
        self.judge = PodJudge()
        self.source: kube.PodSource | None = None
        self._task: asyncio.Task[None] | None = None
        self._checks: dict[str, asyncio.Task[None]] = {}  # node lookups under way
        self._broken: str | None = None

    async def start(self) -> None:
        api, namespace = await kube.open_api(self.settings.kubeconfig)
        namespace = self.settings.kube_namespace or namespace
        self.source = kube.PodSource(api, namespace, self.settings.runner_pod_selector)
        self.source.start()
        self._task = asyncio.create_task(self._follow(), name="pod watch")
        event(
            log,
            "pod watch started",
            namespace=namespace,
            selector=self.settings.runner_pod_selector,
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        for task in list(self._checks.values()):
            await cancel_and_wait(task)
        if self.source is not None:
            await self.source.stop()

    async def _follow(self) -> None:
        assert self.source is not None
        while True:
            item = await self.source.next()
            try:
                await self._handle(item)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad event must not end the watch
                log.exception("pod watch: handling %s failed", type(item).__name__)

    async def _handle(self, item: kube.Item) -> None:
        stamp = from_epoch(time.time())
        match item:
            case kube.Broken(error=error):
                if error != self._broken:
                    log.warning(
                        "pod watch: the Kubernetes API is not answering (%s); no verdict "
                        "until it does, the heartbeat watchdog judges meanwhile",
                        error,
                    )
                self._broken = error
            case kube.Listed(pods=pods):
                if self._broken is not None:
                    event(log, "pod watch resumed", pods=len(pods))
                self._broken = None
                await self._sync(self.judge.listed(pods, stamp))
            case kube.Changed(kind=kind, pod=pod):
                judgement = self.judge.event(kind, pod, stamp)
                if judgement.record is not None:
                    await self._put(judgement.record)
                elif judgement.gone:
                    await self._delete(pod.get("metadata", {}).get("name", ""))
                for verdict in judgement.verdicts:
                    await self._verdict(verdict)
                node = judgement.check_node
                if node and node not in self._checks:
                    self._checks[node] = asyncio.create_task(self._check_node(node))
            case _:
                assert_never(item)

    async def _verdict(self, verdict: PodVerdict) -> None:
        event(
            log, "runner pod verdict", runner=verdict.runner, pod=verdict.pod, reason=verdict.reason
        )
        await self.liveness.runner_lost(verdict.runner, verdict.reason)

    async def _check_node(self, name: str) -> None:
        assert self.source is not None
        try:
            node = await self.source.node(name)
        except kube.KubeError as exc:
            log.warning("pod watch: node %s not read (%s); no verdict", name, exc)
            return
        finally:
            self._checks.pop(name, None)
        for verdict in self.judge.node_state(name, node):
            await self._verdict(verdict)

    # ---- heddle-pods ----

    async def _put(self, rec: RunnerPod) -> None:
        try:
            await self.pods_kv.put(rec.name, encode(rec))
        except Exception as exc:  # the next change or list writes it again
            log.warning("pod watch: storing pod %s failed: %s", rec.name, exc)

    async def _delete(self, name: str) -> None:
        if not name:
            return
        try:
            await self.pods_kv.delete(name)
        except NatsError as exc:
            log.warning("pod watch: dropping pod %s failed: %s", name, exc)

    async def _sync(self, records: list[RunnerPod]) -> None:
        """After a list: every pod's record written, and the records of pods no longer
        there dropped (also those an earlier orchestrator left)."""
        for rec in records:
            await self._put(rec)
        try:
            stored = {e.key for e in await read_current(self.pods_kv, ">")}
        except (NatsError, TimeoutError) as exc:
            log.warning("pod watch: reading heddle-pods failed: %s", exc)
            return
        for name in sorted(stored - {r.name for r in records}):
            await self._delete(name)
