"""The message budget: what a step costs on the wire, by service and by kind.

A count pass runs the workload once more with a tap: a bench-only NATS user subscribed to
``>``, which sees every message of the account, the server's own replies and deliveries
included. Each message is put to the service that sent it (``sender``), by the inbox its
reply goes to (each user has its own, ``_INBOX_<user>``), or for an acknowledgement without
one, by the consumer it acknowledges. Each service's totals, sent and delivered, come from
nats-server's monitoring endpoint (``/connz``), which counts every message. The same
window's length of the stack idle is counted after, and taken off: renewals and registry
heartbeats are not the step's.

The tap costs the server a delivery per message, so the count pass is never a timed one.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from heddle.shared.broker.nats_io import connect
from heddle.shared.runtime.metrics import service_of
from heddle.shared.runtime.settings import Settings

# What a service sends, in the report's order. "awaited" counts those of them that wait for
# an answer (a reply inbox): a stream publish's ack, a KV write's, an API call's.
SENT_KINDS = ("stream publish", "KV write", "ack", "API request", "core")
SENT, RECEIVED = "sent", "received"
AWAITED = "awaited"
OTHER = "reply or other"  # sent, of no kind above: a service's reply to another's request
INBOX = "_INBOX_"


def group(user: str) -> str:
    """The report's service for a NATS user, a consumer or a connection's service name."""
    if user.startswith("runner"):
        return "runners"
    if user.startswith(("heddle-bench", "bench")):  # a user's name, or a connection's service
        return "bench probe"
    for service in ("orchestrator", "dispatcher", "gateway"):
        if user.startswith(service):
            return service
    return "other"


def inbox_owner(subject: str) -> str | None:
    """The user whose inbox ``subject`` is (``_INBOX_<user>.<token>...``), or None."""
    if not subject.startswith(INBOX):
        return None
    return subject[len(INBOX) :].split(".", 1)[0] or None


# Heddle's subjects that no stream stores: a runner's requests, a stored run's announcement.
CORE_SUBJECTS = ("heddle.runner.", "heddle.notify.")


def sent_kind(subject: str) -> str:
    if subject.startswith("$JS.API."):
        return "API request"
    if subject.startswith("$KV."):
        return "KV write"
    if subject.startswith("$JS.ACK."):
        return "ack"
    if subject.startswith("heddle.") and not subject.startswith(CORE_SUBJECTS):
        return "stream publish"
    return "core"  # a core request, or a reply to another's inbox


# What only runners publish: their events, log lines, heartbeats and registry entries; and
# what only the orchestrator writes: run and step records (its batches go unawaited).
RUNNERS_ONLY = ("heddle.evt.", "heddle.log.", "$KV.heddle-heartbeats.", "$KV.heddle-runners.")
ORCHESTRATOR_ONLY = ("$KV.heddle-runs.",)


def sender(subject: str, reply: str) -> str | None:
    """The service that sent a message, where the message tells (None: the server, or a
    sender it does not name)."""
    owner = inbox_owner(reply)
    if owner is not None:
        return group(owner)
    if reply.startswith("$JS.ACK."):
        return None  # a delivery, by the server
    if subject.startswith("$JS.ACK."):  # $JS.ACK.<stream>.<consumer>.<...>
        tokens = subject.split(".")
        return group(tokens[3]) if len(tokens) > 3 else None
    if subject.startswith(RUNNERS_ONLY):  # sent bare, or with a reply the server mapped (_R_.)
        return "runners"
    if subject.startswith(ORCHESTRATOR_ONLY):
        return "orchestrator"
    return None


def count(counts: Counter[tuple[str, str]], subject: str, reply: str) -> None:
    """One message a service sent into ``counts``, keyed (service, kind); what it received
    is counted by the server (``connections``)."""
    who = sender(subject, reply)
    if who is None:
        return
    counts[(who, sent_kind(subject))] += 1
    if reply:  # a sender is told only for a reply other than a delivery's ($JS.ACK.)
        counts[(who, AWAITED)] += 1


def less(a: Counter[tuple[str, str]], b: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """``a`` with ``b`` taken off, never below 0."""
    return Counter({k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0) > 0})


def connections(monitor_url: str) -> Counter[tuple[str, str]]:
    """Messages each service's connections sent and were delivered so far, as nats-server
    counts them (keyed (service, "sent") and (service, "received"))."""
    with urllib.request.urlopen(f"{monitor_url}/connz?limit=4096", timeout=5) as resp:
        body: dict[str, Any] = json.load(resp)
    out: Counter[tuple[str, str]] = Counter()  # the tap's own fall under "other"
    for conn in body.get("connections") or []:
        service = group(service_of(conn.get("name") or ""))
        out[(service, SENT)] += int(conn.get("in_msgs", 0))
        out[(service, RECEIVED)] += int(conn.get("out_msgs", 0))
    return out


class Tap:
    """Every message of the account while it is open, counted by (service, kind)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    async def open(self, nc: Any) -> None:
        async def on_message(msg: Any) -> None:
            count(self.counts, msg.subject, msg.reply or "")

        self._sub = await nc.subscribe(">", cb=on_message, pending_msgs_limit=1_000_000)

    async def close(self, nc: Any) -> Counter[tuple[str, str]]:
        await nc.flush()
        await asyncio.sleep(0.2)  # the messages in flight at the end
        await self._sub.unsubscribe()
        return self.counts


def per_step(counts: Counter[tuple[str, str]], steps: int) -> dict[str, dict[str, float]]:
    """Counts per step, by service and kind; what a service sent of no kind the tap can
    tell (the server counts every message) under OTHER."""
    out: dict[str, dict[str, float]] = {}
    for (service, kind), n in counts.items():
        out.setdefault(service, {})[kind] = n / steps
    for kinds in out.values():
        told = sum(kinds.get(k, 0.0) for k in SENT_KINDS)
        kinds[OTHER] = max(kinds.get(SENT, 0.0) - told, 0.0)
    return out


async def _window(
    settings: Settings, monitor_url: str, work: Callable[[], Awaitable[None]]
) -> tuple[Counter[tuple[str, str]], float]:
    """What the services sent and were delivered while ``work`` ran, and for how long."""
    nc = await connect(settings, "heddle-benchtap")
    try:
        tap = Tap()
        await tap.open(nc)
        before = await asyncio.to_thread(connections, monitor_url)
        t0 = time.monotonic()
        await work()
        took = time.monotonic() - t0
        counts = await tap.close(nc)
        after = await asyncio.to_thread(connections, monitor_url)
    finally:
        await nc.close()
    counts.update(after - before)
    return counts, took


async def count_pass(
    settings: Settings, monitor_url: str, steps: int, run: Callable[[], Awaitable[None]]
) -> dict[str, dict[str, float]]:
    """The workload run once under the tap, less as long a window of the stack idle; per
    step, by service and kind."""
    busy, took = await _window(settings, monitor_url, run)
    idle, _ = await _window(settings, monitor_url, lambda: asyncio.sleep(took))
    return per_step(less(busy, idle), steps)
