"""The leases adapter (services/orchestrator/leases.py) on a real server: orchestrators
share the partitions, a graceful stop hands them over at once, a silent one loses them after
the lease's time, and one that was judged silent and comes back drops what it held. A take
that fails with any error is given back and the leases live on; a broker outage longer than
the lease's time (or than the request timeout) evicts nobody."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator import leases
from heddle.services.orchestrator.leases import Leases
from heddle.services.orchestrator.ownership import Holder, Moves
from heddle.shared.broker.jetstream_api import ConsumerResetFailed
from heddle.shared.broker.nats_io import close
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from nats.aio.client import Client

from tests.support.stack import until

TTL = 1.5
PARTITIONS = 6


class Member:
    """One orchestrator's view: the partitions its leases told it it holds (the leases'
    owner, as partitions.py is an orchestrator's)."""

    def __init__(self, kv, name: str) -> None:
        self.parts: set[int] = set()
        self.lost: set[int] = set()
        self.moves: list[tuple[str, set[int]]] = []  # every take, give and loss, in turn
        self.failing = 0  # how many takes to come fail, as a consumer reset refused would
        settings = Settings(lease_ttl=TTL, partitions=PARTITIONS)
        self.leases = Leases(kv, settings, name)

    async def take(self, parts: set[int]) -> None:
        assert not parts & self.parts, parts
        self.moves.append(("take", set(parts)))
        if self.failing:
            self.failing -= 1
            raise ConsumerResetFailed("HEDDLE_EVENTS", "orchestrator-events-1", {"code": 503})
        self.parts |= parts

    async def give(self, parts: set[int], lost: bool) -> None:
        self.moves.append(("lost" if lost else "give", set(parts)))
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
        await a.leases.start(a)
        await b.leases.start(b)
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
        await a.leases.start(a)
        assert a.parts == set(range(PARTITIONS))  # alone: everything, at once
        await b.leases.start(b)
        await c.leases.start(c)
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
    nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moves are decided on the view of the moment, and the watch may move it before the
    take: a partition a live member holds by then is not taken from it, although its key's
    revision (all a compare-and-set checks) is the one this member has seen."""
    async with two_sharing(nats_server) as (a, b):
        [p, *_] = sorted(a.parts)
        decide = leases.moves

        def decided_when_p_was_free(me: Holder, *view: Any) -> Moves:
            wanted = decide(me, *view)
            return Moves(wanted.take | {p}, wanted.give) if me.name == "b" else wanted

        with monkeypatch.context() as m:
            m.setattr(leases, "moves", decided_when_p_was_free)
            await b.leases.step()
        assert p in a.parts and p not in b.parts
        await a.leases.step()
        assert a.lost == set() and p in a.parts  # a still holds its key


async def test_a_take_that_fails_with_any_error_is_given_back_and_the_leases_live_on(
    nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture
) -> None:
    """A take may fail with something other than a NATS error (reset_consumer's
    ConsumerResetFailed, a rebuild's unexpected answer): the take failed, its partitions are
    given back, and the leases round goes on renewing and takes them again later."""
    caplog.set_level(logging.WARNING, logger="heddle.orchestrator")
    async with two_sharing(nats_server) as (a, b):
        b_held = set(b.parts)
        a.failing = 1
        await b.leases.stop()  # a takes what b gave back, and that take fails
        await until(lambda: a.parts == set(range(PARTITIONS)), 5, "a did not take them again")
        assert a.moves[-3:] == [("take", b_held), ("give", b_held), ("take", b_held)]
        failed = [r for r in caplog.records if "giving them back" in r.getMessage()]
        assert failed and failed[0].exc_info is not None  # with its traceback
        await asyncio.sleep(TTL * 1.5)
        assert a.leases.fresh()  # still renewing: the round survived the failure
        assert a.lost == set()


OUTAGE = TTL + 0.6  # seconds the broker is gone: longer than the lease's time


@asynccontextmanager
async def two_on_their_own_connections(
    server: EmbeddedNats, timeout: float, late: dict[str, float]
) -> AsyncIterator[tuple[Member, Member]]:
    """Members a and b sharing the partitions, each on a connection of its own whose
    disconnects and reconnects reach its leases as the orchestrator's app passes them on
    (``_disconnected``, ``_reconnected``); ``timeout`` is their requests' timeout. Each
    reconnects no sooner than ``late[name]`` (monotonic), for a member that comes back late."""
    await made_resources(server)
    members: list[Member] = []
    connections: list[Client] = []
    try:
        for name in ("a", "b"):
            nc = await connected(server, name, members, late)
            connections.append(nc)
            kv = await nc.jetstream(timeout=timeout).key_value(names.LEASES_BUCKET)
            members.append(Member(kv, name))
            await members[-1].leases.start(members[-1])
        a, b = members
        await until(lambda: split([a, b]), 5, "not shared out")
        yield a, b
        for member in members:
            await member.leases.stop()
    finally:
        for nc in connections:
            await close(nc)


async def made_resources(server: EmbeddedNats) -> None:
    """The streams and buckets, made on a connection of their own."""
    setup = await nats.connect(server.url)
    try:
        await ensure_resources(setup, Settings(partitions=PARTITIONS))
    finally:
        await close(setup)


async def connected(
    server: EmbeddedNats, name: str, members: list[Member], late: dict[str, float]
) -> Client:
    """The connection of the member about to be appended to ``members``."""
    index = len(members)

    async def disconnected() -> None:
        members[index].leases.disconnected()

    async def reconnected() -> None:
        members[index].leases.reconnected()

    def reconnect_to(servers: list, info: dict) -> tuple[None, float]:
        return None, max(0.05, late.get(name, 0.0) - time.monotonic())

    return await nats.connect(
        server.url,
        max_reconnect_attempts=-1,
        reconnect_to_server_handler=reconnect_to,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
    )


async def test_an_outage_longer_than_the_lease_evicts_nobody(own_nats_server: EmbeddedNats) -> None:
    """The broker is gone for longer than the lease's time (within the request timeout) and
    b comes back later than a. Judged by receipt alone, a would find b silent the moment it is
    back (neither the watch's replay nor a watch kept across the reconnect says when b last
    spoke) and take its partitions. An outage is not a death: silence counts from when a's
    view was whole again. A member that really stops renewing is still found silent."""
    server, late = own_nats_server, {}
    async with two_on_their_own_connections(server, timeout=5, late=late) as (a, b):
        held = (set(a.parts), set(b.parts))
        a.moves.clear()
        b.moves.clear()
        late["b"] = time.monotonic() + OUTAGE + 0.7  # b reconnects 0.7 s after a
        server.kill()
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(server.start)
        await asyncio.sleep(0.7 + TTL * 2)
        assert a.moves == b.moves == []  # nobody declared gone, nothing lost or taken
        assert (a.parts, b.parts) == held
        assert a.leases.fresh() and b.leases.fresh()
        # b falls silent for real: a takes its partitions after the lease's time, as ever.
        await b.leases.halt()
        silent_at = time.monotonic()
        await until(lambda: a.parts == set(range(PARTITIONS)), TTL * 2, "a did not take over")
        assert time.monotonic() - silent_at >= TTL * 2 / 3 * 0.9
        assert a.lost == set()


async def test_a_renewal_the_broker_died_with_holds_back_no_other(
    own_nats_server: EmbeddedNats,
) -> None:
    """The broker stands still with a renewal of each member sent and unanswered, then dies.
    Nobody will answer those: each is given up when its connection drops, and the next
    round renews at once. Waited out to their timeout (5 s here), they would hold back
    every renewal past the lease's time: neither member could act on its partitions, and
    each would then judge the other silent."""
    server = own_nats_server
    async with two_on_their_own_connections(server, timeout=5, late={}) as (a, b):
        held = (set(a.parts), set(b.parts))
        a.moves.clear()
        b.moves.clear()
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        await asyncio.sleep(TTL / 2)  # each member renews every third of it: sent, unanswered
        server.kill()
        await asyncio.to_thread(server.start)
        await asyncio.sleep(TTL * 2)
        assert a.moves == b.moves == []  # nobody declared gone, nothing lost or taken
        assert (a.parts, b.parts) == held
        assert a.leases.fresh() and b.leases.fresh()


async def test_a_renewal_applied_after_its_timeout_loses_nothing(
    own_nats_server: EmbeddedNats,
) -> None:
    """The broker is gone for longer than the request timeout: a renewal that timed out was
    kept by nats-py and is applied once it reconnects, so the next renewal's compare-and-set
    finds another revision than the one it expects. The key still names this life (nobody
    judged it): its revision is adopted, and nothing is lost, dropped or taken."""
    server = own_nats_server
    async with two_on_their_own_connections(server, timeout=0.5, late={}) as (a, b):
        held = (set(a.parts), set(b.parts))
        a.moves.clear()
        b.moves.clear()
        server.kill()
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(server.start)
        await asyncio.sleep(TTL * 2)
        assert a.moves == b.moves == []  # no "partitions lost ... judged silent"
        assert (a.parts, b.parts) == held
        assert a.leases.fresh() and b.leases.fresh()


class StopsTheBrokerOnGive(Member):
    """A member whose first give stops the broker once ``go`` is set, after its runs are let
    go and before its keys are freed: kills it, or with ``freeze`` makes it stand still (the
    deletes are then sent and never answered; the test kills it)."""

    def __init__(self, kv: Any, name: str, server: EmbeddedNats, freeze: bool) -> None:
        super().__init__(kv, name)
        self.server = server
        self.freeze = freeze
        self.go = asyncio.Event()
        self.stopped = False

    async def give(self, parts: set[int], lost: bool) -> None:
        await super().give(parts, lost)
        if not lost and not self.stopped:
            await self.go.wait()
            if self.freeze:
                assert self.server.proc is not None
                os.kill(self.server.proc.pid, signal.SIGSTOP)
            else:
                self.server.kill()
            self.stopped = True


@asynccontextmanager
async def a_gives_to_b(
    server: EmbeddedNats, freeze: bool, timeout: float
) -> AsyncIterator[tuple[StopsTheBrokerOnGive, Member]]:
    """a takes every partition, then b joins and a gives b its share, stopping the broker
    in the give; each on a connection of its own, with requests that time out after
    ``timeout``. Yields once the broker is stopped; both members stopped after."""
    await made_resources(server)
    members: list[Member] = []
    connections: list[Client] = []

    async def bucket(name: str) -> Any:
        """The leases bucket on a connection of the member about to be appended."""
        connections.append(await connected(server, name, members, {}))
        return await connections[-1].jetstream(timeout=timeout).key_value(names.LEASES_BUCKET)

    try:
        a = StopsTheBrokerOnGive(await bucket("a"), "a", server, freeze)
        members.append(a)
        await a.leases.start(a)
        await until(lambda: len(a.parts) == PARTITIONS, 5, "a took nothing")
        b = Member(await bucket("b"), "b")
        members.append(b)
        await b.leases.start(b)
        a.go.set()  # b's start is done: a's give may stop the broker now
        await until(lambda: a.stopped, 5, "a gave nothing")
        yield a, b
    finally:
        for member in members:
            await member.leases.stop()
        for nc in connections:
            await close(nc)


async def test_a_give_whose_keys_were_not_freed_is_freed_by_a_later_round(
    own_nats_server: EmbeddedNats,
) -> None:
    """a gives b its share: it lets their runs go, but the broker dies before their keys are
    deleted. The keys still name a, a live member, so b may not take them: a deletes them in
    a later round, and b takes them. Left as they were, no orchestrator would ever act on
    those partitions' runs again."""
    server = own_nats_server
    async with a_gives_to_b(server, freeze=False, timeout=1) as (a, b):
        await asyncio.to_thread(server.start)
        await until(lambda: split([a, b]), TTL * 6, f"not shared out: {a.moves} {b.moves}")
        assert {move for move, _ in b.moves} == {"take"}  # in one round or more
        assert set().union(*(parts for _, parts in b.moves)) == b.parts
        assert a.lost == b.lost == set()


async def test_a_give_the_broker_died_with_holds_back_no_renewal(
    own_nats_server: EmbeddedNats,
) -> None:
    """As a renewal (above), a give's deletes sent to a broker that stands still and then
    dies are answered by nobody: given up at the disconnect, the next round renews at once
    and frees the keys. Waited out to their timeout (5 s here), they would hold a's renewals
    back past the lease's time, and b would judge a silent and take every partition."""
    server = own_nats_server
    async with a_gives_to_b(server, freeze=True, timeout=5) as (a, b):
        await asyncio.sleep(0.3)  # the deletes are sent, unanswered
        server.kill()
        await asyncio.to_thread(server.start)
        await until(lambda: split([a, b]), TTL * 3, f"not shared out: {a.moves} {b.moves}")
        await asyncio.sleep(TTL * 2)
        assert a.lost == b.lost == set(), (a.moves, b.moves)
        assert {move for move, _ in b.moves} == {"take"}
        assert a.leases.fresh() and b.leases.fresh()
