"""The harness's side of the wire: HTTP to the gateway, and a read-only NATS connection that
notices runs ending and reads server timestamps.

Runs are submitted and read over the HTTP API only. To know *when* a run ended without
polling the gateway (polling a 10,000-step run would load the system being measured), the
probe either follows the run records the orchestrator stores (``ends="records"``: an
ordered consumer of ``$KV.heddle-runs.run.*``) and notes the moment a terminal one arrives,
or follows each run's events over HTTP as a client waiting for the end would
(``ends="events"``: ``GET /api/runs/{run}/events?steps=none``, opened once the submit is
answered, until its ``end``).
Server-side times (when NATS stored a step's queued record, or a runner's first heartbeat of
an attempt) come from JetStream message metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import nats
from heddle.shared.broker.nats_io import connect
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.contracts import TERMINAL_RUN
from heddle.shared.wire.names import (
    HEARTBEATS_BUCKET,
    LOG_SEQ_HEADER,
    LOGS_STREAM,
    RUNS_BUCKET,
    evt_step_kind,
)
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy


def new_run_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def server_time(msg: Msg) -> float:
    """When the server stored a JetStream message (epoch seconds, microseconds)."""
    return msg.metadata.timestamp.timestamp()


@dataclass(slots=True)
class Submitted:
    run_id: str
    status: int
    body: Any
    started: float  # monotonic, just before the request
    answered: float  # monotonic, once the response arrived

    @property
    def accept_s(self) -> float:
        return self.answered - self.started


class Probe:
    def __init__(
        self,
        base_url: str,
        nats_url: str,
        headers: dict[str, str] | None = None,
        nats_user: tuple[str, str] | None = None,
        ends: str = "events",
    ) -> None:
        self.base_url = base_url
        self.nats_url = nats_url
        self.headers = headers or {}
        self.nats_user = nats_user  # (user, password): its own (bench/stack.py)
        self.session: aiohttp.ClientSession | None = None
        self.nc: Client | None = None
        self._waiters: dict[str, asyncio.Future[float]] = {}
        self.ends = ends
        self._follows: set[asyncio.Task[None]] = set()
        self._sub = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession(
            headers=self.headers,
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=300),
        )
        user, password = self.nats_user or ("", "")
        settings = Settings(nats_url=self.nats_url, nats_user=user, nats_password=password)
        self.nc = await connect(settings, "heddle-bench")  # the services' one NATS edge
        if self.ends == "records":
            # Through the stream, not a core subscription: a core subscriber sees a record
            # as it is published, before the stream has stored it, and a document read at
            # that moment can still show the run's previous status.
            self._sub = await self.nc.jetstream().subscribe(
                f"$KV.{RUNS_BUCKET}.run.*",
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
                cb=self._on_run_record,
            )
        await self.nc.flush()

    async def close(self) -> None:
        for task in self._follows:
            task.cancel()
        if self.session is not None:
            await self.session.close()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()

    # ---- run ends ----

    async def _on_run_record(self, msg: Msg) -> None:
        now = time.monotonic()
        run_id = msg.subject.rsplit(".", 1)[1]
        fut = self._waiters.get(run_id)
        if fut is None or fut.done():
            return
        try:
            status = msgspec.json.decode(msg.data).get("status")
        except (msgspec.DecodeError, AttributeError):
            return
        if status in TERMINAL_RUN:
            fut.set_result(now)

    def expect(self, run_id: str) -> asyncio.Future[float]:
        """A future resolved with the monotonic time the run's terminal record was seen."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters[run_id] = fut
        return fut

    def forget(self, run_id: str) -> None:
        self._waiters.pop(run_id, None)

    async def _follow_events(self, run_id: str) -> None:
        """Resolve the run's waiter at its ``end`` event (``ends="events"``)."""
        assert self.session is not None
        url = f"{self.base_url}/api/runs/{run_id}/events?steps=none"  # the end is all it needs
        for _ in range(100):  # a run answered 202 is stored a moment later
            async with self.session.get(url) as resp:
                if resp.status == 404:
                    await asyncio.sleep(0.05)
                    continue
                async for line in resp.content:
                    if line.startswith(b"event: end"):
                        fut = self._waiters.get(run_id)
                        if fut is not None and not fut.done():
                            fut.set_result(time.monotonic())
                        return
            return

    # ---- HTTP ----

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        assert self.session is not None
        async with self.session.request(method, self.base_url + path, **kwargs) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def submit(self, run_id: str, steps: list[dict[str, Any]]) -> Submitted:
        body = msgspec.json.encode({"runId": run_id, "steps": steps})
        headers = {"Content-Type": "application/json"}
        t0 = time.monotonic()
        status, answer = await self.request("POST", "/api/runs", data=body, headers=headers)
        answered = time.monotonic()
        if self.ends == "events" and status in (200, 201, 202) and run_id in self._waiters:
            task = asyncio.create_task(self._follow_events(run_id))
            self._follows.add(task)
            task.add_done_callback(self._follows.discard)
        return Submitted(run_id, status, answer, t0, answered)

    async def run_document(self, run_id: str) -> dict[str, Any]:
        """The run document; for a run too big for one (``stepsIncluded`` false), its
        summary with the steps read in pages of 1,000."""
        status, body = await self.request("GET", f"/api/runs/{run_id}")
        if status != 200:
            raise RuntimeError(f"GET /api/runs/{run_id}: {status} {body}")
        offset = None if body.get("stepsIncluded", True) else 0
        while offset is not None:
            path = f"/api/runs/{run_id}/steps?offset={offset}&limit=1000"
            status, page = await self.request("GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path}: {status} {page}")
            body["steps"] += page["steps"]
            offset = page["next"]
        return body

    # ---- server-side times ----

    async def watch_steps(self, run_id: str) -> StepWatch:
        """Start recording when the server stores each of a run's step records, and the
        first heartbeat or the outcome of each attempt (before the run is submitted)."""
        assert self.nc is not None
        watch = StepWatch()
        js = self.nc.jetstream()
        for subject in (
            f"$KV.{RUNS_BUCKET}.step.{run_id}.*",
            f"$KV.{HEARTBEATS_BUCKET}.{run_id}.>",
            evt_step_kind(run_id, "*", "finished"),
        ):
            watch.subs.append(
                await js.subscribe(
                    subject,
                    ordered_consumer=True,
                    deliver_policy=DeliverPolicy.NEW,
                    cb=watch.on_msg,
                )
            )
        return watch

    async def log_span(self, run_id: str, step_id: str, attempt: int = 1) -> dict[str, Any]:
        """How many lines (and messages) an attempt's log subject holds, and when the server
        stored the first and the last message. A message holds one line (``text``) or a
        chunk of them (``lines``), so the lines are summed over a replay of the subject."""
        assert self.nc is not None
        js = self.nc.jetstream()
        subject = f"heddle.log.{run_id}.{step_id}.{attempt}.>"  # every writer's
        info = await js.stream_info(LOGS_STREAM, subjects_filter=subject)
        count = sum((info.state.subjects or {}).values())
        messages = lines = 0
        first = last = None
        last_seq = None
        if count:
            sub = await js.subscribe(subject, stream=LOGS_STREAM, ordered_consumer=True)
            try:
                while messages < count:
                    try:
                        msg = await sub.next_msg(timeout=5.0)
                    except (TimeoutError, nats.errors.TimeoutError):
                        break
                    chunk_seq = (msg.headers or {}).get(LOG_SEQ_HEADER)
                    if chunk_seq is not None:  # output: raw lines, newline-separated
                        n, seq = msg.data.count(b"\n") + 1, int(chunk_seq)
                    else:  # a note: JSON
                        body = msgspec.json.decode(msg.data)
                        n, seq = len(body["lines"]) if "lines" in body else 1, body.get("seq", 0)
                    messages += 1
                    lines += n
                    first = first if first is not None else server_time(msg)
                    last = server_time(msg)
                    last_seq = seq + n - 1
                    if msg.metadata.num_pending == 0:
                        break
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        return {
            "lines": lines,
            "messages": messages,
            "first": first or 0.0,
            "last": last or 0.0,
            "lastSeqInAttempt": last_seq,
        }


class StepWatch:
    """Server store times of a run's step records, by (step, attempt, status), and of each
    attempt's acceptance, by (step, attempt, "accepted"): its first heartbeat, or its
    outcome for a step that ended before it was announced, whichever was stored first.
    Either is stored just before the runner's answer leaves (with the outcome, for a short
    step: docs/latency.md, "Making an attempt known")."""

    def __init__(self) -> None:
        self.subs: list = []
        self.times: dict[tuple[str, int, str], float] = {}

    async def on_msg(self, msg: Msg) -> None:
        try:
            rec = msgspec.json.decode(msg.data)
        except msgspec.DecodeError:
            return
        if not isinstance(rec, dict):
            return
        if not msg.subject.startswith(f"$KV.{RUNS_BUCKET}."):  # a heartbeat or an outcome
            key = (rec.get("stepId", ""), rec.get("attempt", 0), "accepted")
        else:
            key = (rec.get("id", ""), rec.get("attempt", 0), rec.get("status", ""))
        self.times.setdefault(key, server_time(msg))

    async def stop(self) -> None:
        for sub in self.subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
