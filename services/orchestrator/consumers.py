"""The durable consumers of the partitions an orchestrator holds: for each partition one on
HEDDLE_CMD and one on HEDDLE_EVENTS, filtered on the partition's stored subjects, each read
by a continuous pull (shared/broker/pull.py)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from heddle.shared.broker.jetstream_api import reset_consumer
from heddle.shared.broker.nats_types import AckPolicy, ConsumerConfig, DeliverPolicy
from heddle.shared.broker.pull import ContinuousPull, Handler
from heddle.shared.broker.streams import ensure_consumer
from heddle.shared.wire import names

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, JetStreamContext

# How many messages each partition's pulls ask for ahead, and how many the server lets be
# unacknowledged: a partition may carry one huge fan-out alone.
CMD_CREDIT, EVENTS_CREDIT = 512, 1024
CMD_PENDING, EVENTS_PENDING = 20_000, 50_000


class PartitionConsumers:
    def __init__(
        self, nc: Client, js: JetStreamContext, on_command: Handler, on_event: Handler
    ) -> None:
        self.nc, self.js = nc, js
        self.on_command, self.on_event = on_command, on_event
        self._pulls: dict[int, list[ContinuousPull]] = {}

    def holds(self, partition: int) -> bool:
        return partition in self._pulls

    async def bind(self, parts: set[int]) -> None:
        """Make the partitions' consumers, and have them deliver again at once whatever an
        earlier holder took and did not acknowledge (a holder that died)."""
        pairs = [
            (stream, durable, subjects, pending)
            for p in parts
            for stream, durable, subjects, pending in (
                (
                    names.CMD_STREAM,
                    names.orch_cmd_durable(p),
                    names.cmd_of_partition(p),
                    CMD_PENDING,
                ),
                (
                    names.EVENTS_STREAM,
                    names.orch_events_durable(p),
                    names.evt_of_partition(p),
                    EVENTS_PENDING,
                ),
            )
        ]
        await asyncio.gather(
            *(ensure_consumer(self.js, s, _durable(d, f, n)) for s, d, f, n in pairs)
        )
        await asyncio.gather(*(reset_consumer(self.nc, s, d) for s, d, _, _ in pairs))

    async def start(self, parts: set[int]) -> None:
        for p in parts:
            self._pulls[p] = [
                ContinuousPull(
                    self.nc,
                    names.CMD_STREAM,
                    names.orch_cmd_durable(p),
                    self.on_command,
                    credit=CMD_CREDIT,
                ),
                ContinuousPull(
                    self.nc,
                    names.EVENTS_STREAM,
                    names.orch_events_durable(p),
                    self.on_event,
                    credit=EVENTS_CREDIT,
                ),
            ]
            for pull in self._pulls[p]:
                await pull.start()

    async def pause(self, parts: set[int]) -> None:
        """Ask for nothing more on these partitions; deliveries already on their way come."""
        for p in parts:
            for pull in self._pulls.get(p, ()):
                await pull.pause()

    async def stop(self, parts: set[int]) -> None:
        for p in parts:
            for pull in self._pulls.pop(p, ()):
                await pull.stop()

    @property
    def held(self) -> set[int]:
        return set(self._pulls)

    async def reconnected(self) -> None:
        """The server may have forgotten the outstanding requests: ask afresh."""
        for pulls in list(self._pulls.values()):
            for pull in pulls:
                pull.reset()
                await pull.top_up()


def _durable(name: str, subjects: str, max_ack_pending: int) -> ConsumerConfig:
    """An orchestrator consumer: every message from the first, each acknowledged once the
    effects it caused are stored."""
    return ConsumerConfig(
        durable_name=name,
        filter_subject=subjects,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=60,
        max_ack_pending=max_ack_pending,
        deliver_policy=DeliverPolicy.ALL,
    )
