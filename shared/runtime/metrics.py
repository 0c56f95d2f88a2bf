"""Every Heddle metric, defined once, and which service exposes which.

Each metric is made unregistered and added to the registry of the service that counts it
(``registry_for``), so a service shows only its own. Counting is a plain increment where
the service already decides something (a transition, a verdict, an outcome): no label
holds a run, step or runner name, so the series stay few however many runs there are.
``metrics_http.py`` serves a registry on HEDDLE_METRICS_PORT; the gateway also serves its
own on ``GET /metrics``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

M = TypeVar("M", bound=MetricWrapperBase)

# The *_created series double every counter's output and no dashboard here uses them.
disable_created_metrics()

# Steps run from well under a second to hours; the waits before them from milliseconds.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)  # as before 0.2

# ---- every service -------------------------------------------------------------------

NATS_RECONNECTS = Counter(
    "heddle_nats_reconnects",
    "Reconnections of this service's NATS connection after it was lost.",
    ["service"],
    registry=None,
)

# ---- gateway -------------------------------------------------------------------------

HTTP_REQUESTS = Counter(
    "heddle_http_requests",
    "HTTP requests by method, route and status.",
    ["method", "route", "status"],
    registry=None,
)
HTTP_SECONDS = Histogram(
    "heddle_http_request_seconds",
    "HTTP request latency by route.",
    ["route"],
    buckets=HTTP_BUCKETS,
    registry=None,
)

# ---- orchestrator --------------------------------------------------------------------

STEPS = Counter(
    "heddle_steps",
    "Step transitions by the state entered, counted where the orchestrator stores them "
    "(a step created enters pending, or queued if it has no dependency).",
    ["state"],
    registry=None,
)
RUNS = Counter(
    "heddle_runs",
    "Run transitions by the status entered (running counts runs created).",
    ["status"],
    registry=None,
)
STEP_SECONDS = Histogram(
    "heddle_step_duration_seconds",
    "How long attempts ran, command start to end, from their outcome's times.",
    ["outcome"],
    buckets=DURATION_BUCKETS,
    registry=None,
)
DISPATCH_SECONDS = Histogram(
    "heddle_dispatch_latency_seconds",
    "From an attempt queued (ready) to its command started, from the step's record, by the "
    "pool it asked for (its runsOn labels by key; default for none).",
    ["pool"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
RETRIES = Counter("heddle_retries", "Retries scheduled after a failed attempt.", registry=None)
REQUEUES = Counter(
    "heddle_requeues",
    "Attempts queued again because no runner held them and their ready message was gone.",
    registry=None,
)
HANDOFFS = Counter(
    "heddle_handoffs",
    "Steps handed by the orchestrator to the runner that just succeeded, by its answer: "
    "accepted, refused (busy, stopping or gone: the dispatchers place it) or unanswered (the "
    "dispatchers look for it, then place it).",
    ["answer"],
    registry=None,
)
CONTINUATIONS = Counter(
    "heddle_continuations",
    "Continuations of a chain: sent to the runner holding the step they follow, and started "
    "there at its success (a continuation not started is handed off when its step is ready).",
    ["fate"],
    registry=None,
)
VERDICTS = Counter(
    "heddle_watchdog_verdicts",
    "The watchdog's verdicts: silent (no heartbeat: the attempt fails), pod (the runner's pod "
    "was deleted, evicted, OOMKilled or on a NotReady node: the attempt fails) or withdrawn "
    "(its outcome was stored after all).",
    ["verdict"],
    registry=None,
)
CRON_SLOTS = Counter(
    "heddle_cron_slots",
    "Cron slots this scheduler claimed and submitted: fired (due since the last tick) or "
    "backfilled (missed: down, paused with catch-up, or past the per-tick limit).",
    ["kind"],
    registry=None,
)
CRON_HELD = Gauge(
    "heddle_cron_held",
    "1 while this scheduler makes no cron run because the store is within its reserve.",
    registry=None,
)
LIVE_RUNS = Gauge("heddle_live_runs", "Runs not yet finished, held in memory.", registry=None)
WAITING_RUNS = Gauge(
    "heddle_waiting_runs",
    "Live runs waiting for their turn to be under way (HEDDLE_MAX_RUNS_UNDER_WAY).",
    registry=None,
)
PARTITIONS_HELD = Gauge(
    "heddle_partitions_held", "Partitions of the runs this orchestrator owns.", registry=None
)
# The store's use as the server counts it (docs/storage.md), read when scraped.
STORE_USED = Gauge("heddle_store_used_bytes", "Bytes Heddle's account stores.", registry=None)
STORE_RESERVED = Gauge(
    "heddle_store_reserved_bytes", "Bytes the streams' own limits reserve.", registry=None
)
STORE_LIMIT = Gauge("heddle_store_limit_bytes", "The store's limit (0: none known).", registry=None)
STREAM_BYTES = Gauge("heddle_stream_bytes", "Bytes each stream stores.", ["stream"], registry=None)
STREAM_MAX_BYTES = Gauge(
    "heddle_stream_max_bytes", "Each stream's own limit (-1: none).", ["stream"], registry=None
)
LOGS_PURGED = Counter(
    "heddle_store_logs_purged",
    "Log messages purged to keep the store's reserve free.",
    registry=None,
)

# ---- orchestrator and dispatcher: why steps wait ------------------------------------
# ``pool``: the labels a step asks for by key (shared/core/labels.py), "default" for none;
# ``reason``: the orchestrator's turn, semaphore, quota, backoff and approval, the
# dispatcher's runners-busy and no-runner (docs/pools.md, "Waiting, measured"). No run or
# step in a label.

WAITING_STEPS = Gauge(
    "heddle_waiting_steps",
    "Steps waiting now, by the pool they wait for and why, counted when scraped.",
    ["pool", "reason"],
    registry=None,
)
WAITING_OLDEST = Gauge(
    "heddle_waiting_oldest_seconds",
    "How long the longest-waiting of those steps has waited so far, by pool and reason.",
    ["pool", "reason"],
    registry=None,
)
# ---- dispatcher ----------------------------------------------------------------------

RUNNERS = Gauge("heddle_runners", "Runners in the pool (the registry).", registry=None)
RUNNERS_BUSY = Gauge("heddle_runners_busy", "Runners holding a lease on an attempt.", registry=None)
READY_WAITING = Gauge(
    "heddle_ready_waiting",
    "Ready steps not yet given to a runner: in the stream and in the dispatcher's hands.",
    registry=None,
)

AUTOSCALE_DECISIONS = Counter(
    "heddle_autoscale_decisions",
    "Autoscaling's decisions: up, down (the scale changed), drain (runners given no new step, "
    "to be removed), undrain (taken back: steps wait), failed (the API refused or was away).",
    ["decision"],
    registry=None,
)
AUTOSCALE_REPLICAS = Gauge(
    "heddle_autoscale_replicas", "The runners autoscaling wants (0 with it off).", registry=None
)

NOTIFY_ATTEMPTS = Counter(
    "heddle_notify_attempts",
    "Attempts at delivering a run's end to a notify target, by outcome: delivered (a 2xx), "
    "failed (retried later) or gave_up (the last, past HEDDLE_NOTIFY_RETRY_FOR).",
    ["outcome"],
    registry=None,
)

# ---- runner agent --------------------------------------------------------------------

ATTEMPTS = Counter(
    "heddle_attempts",
    "Attempts this runner ran, by outcome (succeeded, failed, timed_out, cancelled).",
    ["outcome"],
    registry=None,
)

OWNED: dict[str, tuple[Collector, ...]] = {
    "gateway": (HTTP_REQUESTS, HTTP_SECONDS, NOTIFY_ATTEMPTS),
    "orchestrator": (
        STEPS,
        RUNS,
        STEP_SECONDS,
        DISPATCH_SECONDS,
        RETRIES,
        REQUEUES,
        HANDOFFS,
        CONTINUATIONS,
        VERDICTS,
        CRON_SLOTS,
        CRON_HELD,
        LIVE_RUNS,
        WAITING_RUNS,
        PARTITIONS_HELD,
        WAITING_STEPS,
        WAITING_OLDEST,
        STORE_USED,
        STORE_RESERVED,
        STORE_LIMIT,
        STREAM_BYTES,
        STREAM_MAX_BYTES,
        LOGS_PURGED,
    ),
    "dispatcher": (
        RUNNERS,
        RUNNERS_BUSY,
        READY_WAITING,
        AUTOSCALE_DECISIONS,
        AUTOSCALE_REPLICAS,
        WAITING_STEPS,
        WAITING_OLDEST,
    ),
    "runner": (ATTEMPTS,),
}

# Called before each scrape: a gauge read from the server (the stream's backlog) is fresh
# when it is looked at, and costs nothing when no one looks.
_before_scrape: list[Callable[[], Awaitable[None]]] = []


def child(metric: M, *labels: str) -> M:
    """``metric.labels(*labels)``, looked up once: the library's lookup takes a lock and
    costs four times the increment, which a per-step path would pay on every step."""
    found: M = _child(metric, labels)  # functools.cache keeps no type variable
    return found


@functools.cache
def _child(metric: M, labels: tuple[str, ...]) -> M:
    return metric.labels(*labels)


@functools.cache
def registry_for(service: str) -> CollectorRegistry:
    """The service's metrics, NATS reconnects, and the process's CPU, memory and GC."""
    registry = CollectorRegistry(auto_describe=True)
    for metric in (*OWNED.get(service, ()), NATS_RECONNECTS):
        registry.register(metric)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def before_scrape(refresh: Callable[[], Awaitable[None]]) -> None:
    _before_scrape.append(refresh)


def forget_before_scrape(refresh: Callable[[], Awaitable[None]]) -> None:
    """Undo ``before_scrape`` (a stopped service's connection is closed)."""
    if refresh in _before_scrape:
        _before_scrape.remove(refresh)


async def exposition(service: str) -> bytes:
    """The service's metrics in the Prometheus text format, refreshed first."""
    for refresh in list(_before_scrape):
        await refresh()
    return generate_latest(registry_for(service))


def service_of(connection_name: str) -> str:
    """The service of a NATS connection name: heddle-runner-runner-0 -> runner."""
    return connection_name.removeprefix("heddle-").split("-", 1)[0]
