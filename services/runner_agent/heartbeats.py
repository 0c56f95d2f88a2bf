"""One attempt's heartbeats in ``heddle-heartbeats``: what makes a running attempt known.

A short step writes none: its answer travels with its outcome, which tells everything a
heartbeat would. Any other answer (a step announced as running, an answer sent before the
step's first report, every answer when each start is reported at once) follows the first
heartbeat, so whoever looks for the attempt after the answer (the dispatcher after a lost
answer, the watchdog) finds it. Then one every ``HEDDLE_HEARTBEAT_INTERVAL`` until the
outcome is stored (docs/latency.md, "Making an attempt known").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from heddle.shared.broker.acked import NOT_STORED, AckedPublisher
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Heartbeat, StepReady, encode

log = logging.getLogger("heddle.runner")
ACK_TIMEOUT = 5.0  # seconds; a heartbeat unconfirmed by then has failed


class Heartbeats:
    def __init__(
        self,
        acked: AckedPublisher,
        runner: str,
        ready: StepReady,
        ttl: int,
        interval: float,
        pid: Callable[[], int | None],
    ) -> None:
        self._acked = acked
        self._runner = runner
        self._ready = ready
        self._ttl = str(ttl)
        self._interval = interval
        self._pid = pid
        self._seq = 0
        self.stored = False  # one of them is, so the attempt is known
        self._timer: asyncio.TimerHandle | None = None
        self._beating: asyncio.Task | None = None

    async def beat(self) -> None:
        """Store one heartbeat (acknowledged); raises if it is not stored."""
        ready = self._ready
        self._seq += 1
        hb = Heartbeat(
            runner=self._runner,
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            seq=self._seq,
            pid=self._pid(),
            ticket=ready.ticket,
        )
        stored = await self._acked.publish(
            names.kv_subject(
                names.HEARTBEATS_BUCKET,
                names.heartbeat_key(ready.run_id, ready.step_id, self._runner),
            ),
            encode(hb),
            headers={"Nats-TTL": self._ttl},
        )
        await asyncio.wait_for(stored, ACK_TIMEOUT)
        self.stored = True

    async def first(self) -> None:
        """The first heartbeat, unless one is stored already. A failure is logged, not
        raised: the command is running, and its outcome is re-sent until it lands."""
        if self.stored:
            return
        try:
            await self.beat()
        except NOT_STORED as exc:
            r = self._ready
            log.warning("first heartbeat of %s/%s not stored: %s", r.run_id, r.step_id, exc)

    def start(self) -> None:
        # A timer, not a task per attempt: most steps end long before their first beat.
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._interval, self._due)

    def _due(self) -> None:
        self._beating = asyncio.create_task(self._beat_once())
        self.start()

    async def _beat_once(self) -> None:
        try:
            await self.beat()
        except NOT_STORED as exc:
            log.warning("heartbeat failed: %s", exc)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._beating is not None:
            self._beating.cancel()
