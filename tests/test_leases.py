"""The leases adapter (services/orchestrator/leases.py) on a real server: orchestrators
share the partitions, a graceful stop hands them over at once, a silent one loses them after
the lease's time, and one that was judged silent and comes back drops what it held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import nats

from services.embedded_nats import EmbeddedNats
from services.orchestrator.leases import Leases
from shared import names
from shared.nats_io import close
from shared.resources import ensure_resources
from shared.settings import Settings
from tests.stack import until

TTL = 1.5
PARTITIONS = 6


class Member:
    """One orchestrator's view: the partitions its callbacks were told it holds."""

    def __init__(self, kv, name: str) -> None:
        self.parts: set[int] = set()
        self.lost: set[int] = set()
        settings = Settings(lease_ttl=TTL, partitions=PARTITIONS)
        self.leases = Leases(kv, settings, name, self.take, self.give)

    async def take(self, parts: set[int]) -> None:
        assert not parts & self.parts, parts
        self.parts |= parts

    async def give(self, parts: set[int], lost: bool) -> None:
        self.parts -= parts
        if lost:
            self.lost |= parts


def split(members: list[Member]) -> bool:
    """Every partition held by exactly one member, evenly."""
    held = [m.parts for m in members]
    whole = sorted(p for parts in held for p in parts) == list(range(PARTITIONS))
    return whole and max(map(len, held)) - min(map(len, held)) <= 1


@asynccontextmanager
async def two_sharing(nats_server: EmbeddedNats) -> AsyncIterator[tuple[Member, Member]]:
    """Members a and b, started, the partitions shared out between them; both stopped after."""
    nc = await nats.connect(nats_server.url)
    try:
        res = await ensure_resources(nc, Settings(partitions=PARTITIONS))
        kv = res.kv[names.LEASES_BUCKET]
        a, b = Member(kv, "a"), Member(kv, "b")
        await a.leases.start()
        await b.leases.start()
        await until(lambda: split([a, b]), 5, "not shared out")
        yield a, b
        await a.leases.stop()
        await b.leases.stop()
    finally:
        await close(nc)


async def test_orchestrators_share_hand_over_and_take_from_the_silent(
    nats_server: EmbeddedNats,
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        res = await ensure_resources(nc, Settings(partitions=PARTITIONS))
        kv = res.kv[names.LEASES_BUCKET]
        a, b, c = Member(kv, "a"), Member(kv, "b"), Member(kv, "c")
        await a.leases.start()
        assert a.parts == set(range(PARTITIONS))  # alone: everything, at once
        await b.leases.start()
        await c.leases.start()
        await until(lambda: split([a, b, c]), 5, "not shared out")
        assert a.lost == b.lost == c.lost == set()
        # A graceful stop: its partitions go to the others without waiting for the lease.
        stopped_at = time.monotonic()
        await c.leases.stop()
        await until(lambda: split([a, b]), 5, "not handed over")
        assert time.monotonic() - stopped_at < TTL
        # b falls silent (its tasks stop, as in a process frozen or killed): after the lease's
        # time a takes everything; b, back, finds itself judged gone and drops what it held.
        b_held = set(b.parts)
        await b.leases.halt()
        silent_at = time.monotonic()
        await until(lambda: a.parts == set(range(PARTITIONS)), 5, "a did not take over")
        # Silence counts from the last renewal a saw, at most a third of the lease before.
        assert time.monotonic() - silent_at >= TTL * 2 / 3 * 0.9
        assert not b.leases.fresh()  # it may not act on what it believed it held
        await b.leases.step()
        assert b.lost == b_held and b.parts == set()
        await a.leases.stop()
    finally:
        await close(nc)


async def test_a_writer_waiting_on_a_stale_lease_wakes_after_what_was_lost_is_dropped(
    nats_server: EmbeddedNats,
) -> None:
    """A holder that stood still past its lease: its writes (services/orchestrator/effects.py)
    wait, and wake once it is renewed, by which time the partitions taken from it are gone
    from it (their runs dropped), so nothing it decided before the pause is written."""
    async with two_sharing(nats_server) as (a, b):
        b_held = set(b.parts)
        await b.leases.halt()
        await until(lambda: a.parts == set(range(PARTITIONS)), 5, "a did not take over")
        woke: list[set[int]] = []

        async def writer() -> None:
            await b.leases.until_fresh()
            woke.append(set(b.lost))

        waiting = asyncio.create_task(writer())
        await asyncio.sleep(0.3)
        assert not waiting.done()  # stale: no write goes out
        await b.leases.step()  # back: judged silent, it drops what it held, joins again
        await asyncio.wait_for(waiting, 5)
        assert woke == [b_held]
        assert b.leases.fresh()


async def test_a_take_decided_on_an_older_view_leaves_a_live_members_partition_alone(
    nats_server: EmbeddedNats,
) -> None:
    """Moves are decided on the view of the moment, and the watch may move it before the
    take: a partition a live member holds by then is not taken from it, although its key's
    revision (all a compare-and-set checks) is the one this member has seen."""
    async with two_sharing(nats_server) as (a, b):
        [p, *_] = sorted(a.parts)
        await b.leases._take({p})  # as if decided when p was free
        assert p in a.parts and p not in b.parts
        await a.leases.step()
        assert a.lost == set() and p in a.parts  # a still holds its key
