"""Reading the current values of a KV bucket's keys: a few in one batched direct get, more
in one replay whose end is counted by the server (not guessed from what the client has seen
so far)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.jetstream_api import request_next
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    RunRecord,
    StepRecord,
    run_record_decoder,
    step_record_decoder,
)
from heddle.shared.wire.timefmt import parse
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
)
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

    class Current(KeyValue.Entry):
        """A key's current value as the reads here return it: never a deleted key's, so
        its value is there (a KeyValue.Entry's may be None), and its revision. To the type
        checker alone: at run time the entries are KeyValue.Entry themselves."""

        value: bytes
        revision: int
else:
    Current = KeyValue.Entry

log = logging.getLogger("heddle.nats")

PULL_EXPIRES = 2.0  # seconds a replay's pull waits at most for keys deleted meanwhile
# A batched direct get answers for this many subjects at most (deleted keys count), then
# says 413: the read is replayed instead.
MULTI_LAST_MAX = 1024
END_OF_BATCH, NO_MATCH, TOO_MANY = "204", "404", "413"
_request = msgspec.json.Encoder().encode


class TooMany(Exception):
    """More keys match than one batched get answers for."""


async def _last_per_key_consumer(
    js: JetStreamContext, stream: str, filter_subject: str
) -> ConsumerInfo:
    """A short-lived pull consumer over the last message of each matching key; its
    ``num_pending`` at creation is the server's count of those keys. Callers delete it."""
    return await js.add_consumer(
        stream,
        ConsumerConfig(
            filter_subject=filter_subject,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=10.0,
            mem_storage=True,
            num_replicas=1,
        ),
    )


async def read_current(kv: Bucket, pattern: str, timeout: float | None = None) -> list[Current]:
    """Current values of every key matching ``pattern``, not a get per key: on a bucket
    of one replica that allows direct gets, up to ``MULTI_LAST_MAX`` keys in one batched get
    (``last_values``); otherwise, or for more keys, one replay of the bucket's stream (last
    message per key).

    A short-lived pull consumer is created on the server, which says at creation how many
    keys match (``num_pending``); exactly that many are pulled in one request, and
    the consumer is deleted. The end of the replay is thus the server's count, not a guess:
    nats-py's ``kv.watch`` judges it from what the client has processed so far, and under
    load reported runs with no steps. Its push consumers also linger after unsubscribing,
    which a gateway polling runs would pile up. Each message is waited for ``timeout`` at
    most (the bucket's, HEDDLE_NATS_TIMEOUT, by default): TimeoutError after that.
    """
    if kv.batched:  # a small set in one request; a large one replayed
        with contextlib.suppress(TooMany):
            wait = kv.timeout if timeout is None else timeout
            return await last_values(kv, pattern, timeout=wait)
    info = await _last_per_key_consumer(kv.js, kv.stream, f"{kv.prefix}{pattern}")
    try:
        expected = info.num_pending or 0
        if expected == 0:
            return []
        async with _inbox(kv) as (inbox, queue):
            return await _replay(kv, info.name, inbox, queue, expected, timeout)
    finally:
        with contextlib.suppress(Exception):
            await kv.js.delete_consumer(kv.stream, info.name)


async def last_values(kv: Bucket, *patterns: str, timeout: float) -> list[Current]:
    """Every key matching one of ``patterns`` that has a value, in one batched direct get
    (``multi_last``): the stream answers with the last message of each subject up to one
    sequence, then an end-of-batch status, and no consumer is made on the server. TooMany
    past ``MULTI_LAST_MAX``. The bucket must allow direct gets; any replica may answer."""
    pattern = ", ".join(patterns)
    async with _inbox(kv) as (inbox, queue):
        body = {"multi_last": [kv.prefix + p for p in patterns], "batch": MULTI_LAST_MAX}
        await kv.nc.publish(f"$JS.API.DIRECT.GET.{kv.stream}", _request(body), reply=inbox)
        entries: list[Current] = []
        while True:
            msg = await asyncio.wait_for(queue.get(), timeout)
            headers = msg.headers or {}
            status = headers.get("Status")
            if status is not None and not msg.data:
                if status in (END_OF_BATCH, NO_MATCH):
                    return entries
                if status == TOO_MANY:
                    raise TooMany(pattern)
                raise RuntimeError(f"batched get of {kv.stream} {pattern}: status {status}")
            if msg.data and not _removed(headers):
                entries.append(_got_entry(kv, headers, msg.data))


@contextlib.asynccontextmanager
async def _inbox(kv: Bucket) -> AsyncIterator[tuple[str, asyncio.Queue[Msg]]]:
    """An inbox subscribed for the length of one read, and the queue its messages go to."""
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = kv.nc.new_inbox()
    sub = await kv.nc.subscribe(inbox, cb=_into(queue))
    try:
        yield inbox, queue
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


def _into(queue: asyncio.Queue[Msg]) -> Callable[[Msg], Awaitable[None]]:
    async def collect(msg: Msg) -> None:
        queue.put_nowait(msg)

    return collect


def _removed(headers: dict[str, str]) -> bool:
    """A key's last message says it is deleted, purged or expired."""
    return headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers


async def _replay(
    kv: Bucket,
    consumer: str,
    inbox: str,
    queue: asyncio.Queue[Msg],
    expected: int,
    timeout: float | None = None,
) -> list[Current]:
    """Pull the ``expected`` last messages per key delivered to ``inbox``; the keys that
    still have a value, as entries. Each waited for ``timeout`` (default: the bucket's)."""
    wait = kv.timeout if timeout is None else timeout

    async def pull(batch: int) -> None:
        # Not no_wait: right after creation a consumer may answer "no messages" before it
        # has caught up with its own count. With an expiry, the request waits for the
        # messages and returns as soon as the batch is full; it only runs out when a key
        # was deleted meanwhile.
        await request_next(kv.nc, kv.stream, consumer, inbox, batch, PULL_EXPIRES)

    await pull(expected)
    latest: dict[str, Current] = {}
    seen = 0
    while seen < expected:
        msg = await asyncio.wait_for(queue.get(), wait)
        headers = msg.headers or {}
        if not msg.data and "Status" in headers:
            # The pull expired (408) before the batch was full: either keys were deleted
            # meanwhile (nothing left to deliver, so the read is complete) or the server
            # was slow, and the rest is asked for again. Stopping here on a slow server is
            # what once showed a run without its steps.
            if not (await kv.js.consumer_info(kv.stream, consumer)).num_pending:
                break
            await pull(expected - seen)
            continue
        seen += 1
        key = msg.subject[len(kv.prefix) :]
        if _removed(headers):
            latest.pop(key, None)
        elif msg.data:
            latest[key] = _entry(kv.bucket, key, msg)
        else:
            latest.pop(key, None)
    return list(latest.values())


def _got_entry(kv: Bucket, headers: dict[str, str], value: bytes) -> Current:
    """An entry from a direct get's answer, whose headers say what a consumer's metadata
    would."""
    stamp = headers.get("Nats-Time-Stamp")
    return Current(
        bucket=kv.bucket,
        key=headers["Nats-Subject"][len(kv.prefix) :],
        value=value,
        revision=int(headers["Nats-Sequence"]),
        delta=int(headers.get("Nats-Num-Pending", 0)),
        # nats-py annotates ``created`` as an int, yet sets it to a datetime itself (as
        # _entry does); stored_at reads either.
        created=parse(stamp).timestamp() if stamp else None,  # type: ignore[arg-type]
        operation=None,
    )


def _entry(bucket: str, key: str, msg: Msg) -> Current:
    meta = msg.metadata
    return Current(
        bucket=bucket,
        key=key,
        value=msg.data,
        revision=meta.sequence.stream,
        delta=meta.num_pending,
        created=meta.timestamp,  # type: ignore[arg-type]  # a datetime, as nats-py's own
        operation=None,
    )


async def read_steps(runs_kv: Bucket, run: RunRecord) -> list[StepRecord]:
    """Every step record of ``run``, in document order. Complete by construction: a new
    run's record is written only once every step record is stored (the orchestrator's
    effects), and the replay reads every key the server counted. Fewer only while
    retention deletes the run (steps first, the run record last)."""
    return _in_order(await read_current(runs_kv, names.steps_of_run(run.run_id)))


def _in_order(entries: list[Current]) -> list[StepRecord]:
    """Step records' entries decoded, in document order."""
    steps = [step_record_decoder.decode(e.value) for e in entries]
    steps.sort(key=lambda s: s.index)
    return steps


async def read_run_and_steps(
    runs_kv: Bucket, run_id: str
) -> tuple[RunRecord | None, list[StepRecord]]:
    """A run's record and every step record, as one snapshot: one batched direct get where
    the bucket allows it and the run has no more steps than a batch holds, else a get and
    ``read_steps``."""
    run_key = names.run_key(run_id)
    if runs_kv.batched:
        with contextlib.suppress(TooMany):
            entries = await last_values(
                runs_kv, run_key, names.steps_of_run(run_id), timeout=runs_kv.timeout
            )
            found = next((e for e in entries if e.key == run_key), None)
            run = run_record_decoder.decode(found.value) if found is not None else None
            return run, _in_order([e for e in entries if e is not found])
    value = await value_of(runs_kv, run_key)
    if value is None:
        return None, []
    run = run_record_decoder.decode(value)
    return run, await read_steps(runs_kv, run)


async def count_keys(js: JetStreamContext, bucket: str, pattern: str) -> int:
    """How many keys of ``bucket`` match ``pattern``, counted by the server: the pending
    count of a short-lived consumer that delivers the last message per key."""
    stream = names.kv_stream(bucket)
    info = await _last_per_key_consumer(js, stream, names.kv_subject(bucket, pattern))
    with contextlib.suppress(Exception):
        await js.delete_consumer(stream, info.name)
    return info.num_pending or 0


async def value_of(kv: KeyValue, key: str) -> bytes | None:
    """The current value of one key; None if it has none (never written, deleted, purged
    or expired)."""
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    return entry.value or None


async def last_value_matching(js: JetStreamContext, bucket: str, pattern: str) -> bytes | None:
    """The value last written to any key of ``bucket`` that ``pattern`` (wildcards allowed)
    matches; None if there is none or it was deleted."""
    try:
        msg = await js.get_last_msg(names.kv_stream(bucket), names.kv_subject(bucket, pattern))
    except NotFoundError:
        return None
    if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
        return None
    return msg.data or None


def stored_at(entry: KeyValue.Entry) -> float | None:
    """When the server stored a KV entry (epoch seconds), from a watch entry's metadata."""
    created = entry.created
    if created is None:
        return None
    if isinstance(created, int | float):
        return float(created)
    return created.timestamp()
