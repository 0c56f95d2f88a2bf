"""The steps of runs under way go before the steps that open a run (docs/bursts.md,
"Runs under way first"), through the real services: one runner, a run under way and a
second run whose opening steps were queued before the first one's next steps."""

from __future__ import annotations

import nats
from heddle.services.dispatcher.ready import ready_consumer
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.broker.streams import ensure_consumer
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.timefmt import parse
from nats.js.api import AckPolicy, ConsumerConfig

from tests.support.stack import StackFactory, step_of

FANOUT = 6


async def test_a_run_under_way_goes_before_a_later_run_queued_earlier(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    fanout = [{"id": f"b{i}", "command": "sleep 0.05", "dependsOn": ["a"]} for i in range(FANOUT)]
    first = await s.submit({"steps": [{"id": "a", "command": "sleep 0.6"}, *fanout]})
    await s.wait_step(first, "a", {"running"})
    # Queued while "a" runs: in the stream, and in the dispatcher's hand, before any "b".
    second = await s.submit({"steps": [{"id": f"r{i}", "command": "true"} for i in range(FANOUT)]})
    one, two = await s.wait_run(first), await s.wait_run(second)
    assert one["status"] == two["status"] == "succeeded"
    last_b = max(parse(step_of(one, f"b{i}")["startedAt"]) for i in range(FANOUT))
    roots = [parse(step_of(two, f"r{i}")["startedAt"]) for i in range(FANOUT)]
    # The runner that frees up after "a" may take an opening step before the "b" steps are
    # ready; from then on they go first. In arrival order the opening steps would.
    assert sum(r < last_b for r in roots) <= 1, (one, two)


async def test_a_dispatcher_consumer_made_before_the_two_kinds_is_narrowed_in_place(
    own_nats_server: EmbeddedNats,
) -> None:
    """A deployment whose ``dispatcher`` consumer took every ready step: a dispatcher that
    starts narrows it to the steps of runs under way and adds ``dispatcher-opening``; a ready
    message already in the stream stays with ``dispatcher``."""
    nc = await nats.connect(own_nats_server.url)
    try:
        settings = Settings.from_env({}, nats_url=own_nats_server.url)
        js = (await ensure_resources(nc, settings)).js
        before = ConsumerConfig(
            durable_name=names.DISPATCHER_DURABLE,
            filter_subject=names.STEP_READY_ALL,
            ack_policy=AckPolicy.EXPLICIT,
        )
        await ensure_consumer(js, names.STEPS_STREAM, before)
        await js.publish(names.step_ready("old", "s"), b"{}")
        for opening in (False, True):
            await ensure_consumer(js, names.STEPS_STREAM, ready_consumer(settings, opening))
        await js.publish(names.step_ready("new", "s", opens=True), b"{}")
        under_way = await js.consumer_info(names.STEPS_STREAM, names.DISPATCHER_DURABLE)
        opening = await js.consumer_info(names.STEPS_STREAM, names.DISPATCHER_OPENING_DURABLE)
        assert under_way.config.filter_subject == names.STEP_READY_UNDER_WAY
        assert (under_way.num_pending, opening.num_pending) == (1, 1)
    finally:
        await nc.close()
