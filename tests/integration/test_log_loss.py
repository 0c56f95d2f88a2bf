"""A step's lines that the full store refuses are counted in a note, every one of them, also
when the store has room for the note and not for the lines after it
(services/runner_agent/output.py). A real nats-server whose logs stream holds a few KiB."""

from __future__ import annotations

import asyncio

import nats
from heddle.services.gateway.reads.log_index import attempt_messages
from heddle.services.gateway.reads.log_tail import read_attempt
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.runner_agent.output import CHECKPOINT_AGE, LogPublisher
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.core.store_space import dropped_note
from heddle.shared.wire import names
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StreamConfig
from nats.js.errors import APIError

RUNNER = "r"
LIMIT = 64 * 1024
FILLER = "heddle.log.filler"


async def fill(js: JetStreamContext) -> list[int]:
    """The stream written until it refuses even a byte; the sequences of the larger fillers."""
    large: list[int] = []
    for size in (1024, 64, 1):
        while True:
            try:
                ack = await js.publish(FILLER, b"f" * size)
            except APIError:
                break
            if size == 1024:
                large.append(ack.seq)
    return large


async def read_back(js: JetStreamContext) -> list[tuple[str, str]]:
    found = await attempt_messages(js, "run", "step", {1: RUNNER})
    whole = await read_attempt(js, "run", "step", 1, found[1], 10**6, {1: RUNNER})
    return [(line.stream, line.text) for line in whole.lines]


async def test_lines_refused_after_a_stored_note_are_counted_by_the_next(
    own_nats_server: EmbeddedNats,
) -> None:
    nc = await nats.connect(own_nats_server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(
            StreamConfig(
                name=names.LOGS_STREAM,
                subjects=["heddle.log.>"],
                max_bytes=LIMIT,
                discard=DiscardPolicy.NEW,
            )
        )
        acked = await AckedPublisher(nc).start()
        pub = LogPublisher(nc, acked, "run", "step", 1, 16384, RUNNER)
        large = await fill(js)
        await asyncio.sleep(CHECKPOINT_AGE)  # so the first line is a checkpoint, and heard
        await pub.write("stdout", b"first\n")  # refused: line 1 is lost
        await asyncio.sleep(0.2)  # the refusal heard
        # Room for a note and not for twenty lines of 200 bytes, as a purge of old logs
        # might leave: the note is stored, then the lines are refused.
        for seq in large[:2]:
            await js.delete_msg(names.LOGS_STREAM, seq)
        twenty = "".join(f"line-{i}-{'x' * 200}\n" for i in range(1, 21)).encode()
        await pub.write("stdout", twenty)
        await asyncio.sleep(0.2)  # whatever was sent is stored or refused by now
        await js.purge_stream(names.LOGS_STREAM, subject=FILLER)  # room again
        await pub.write("stdout", b"after\n")
        await pub.close("succeeded")
        await nc.flush()
        assert await read_back(js) == [
            ("heddle", dropped_note(1)),
            ("heddle", dropped_note(20)),
            ("stdout", "after"),
            ("heddle", "succeeded"),
        ]
    finally:
        await nc.close()
