"""The workflow registry in the heddle-workflows bucket: versions stored by compare-and-set.

``<name>.v<N>`` holds version N's definition; it is created with ``kv.create``, so exactly one
registration gets each version and a stored version never changes. ``<name>.latest`` is a
small summary of the newest version plus the workflow-wide state (paused, pause history),
moved forward only by ``kv.update(last=revision)``.

A registration that created ``v<N>`` but died before moving ``latest`` leaves ``latest``
behind; the next registration finds ``v<N>`` taken, moves ``latest`` to it on the dead one's
behalf, and tries ``N+1``. So ``latest`` never stays behind and no version is lost or shared.

Times are passed in (epoch seconds), so tests can register on a driven clock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from heddle.shared.broker.kv_reads import read_current, value_of
from heddle.shared.broker.nats_types import KeyNotFoundError, KeyWrongLastSequenceError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    Pause,
    WorkflowLatest,
    WorkflowSpec,
    WorkflowVersion,
    encode,
    workflow_latest_decoder,
    workflow_version_decoder,
)
from heddle.shared.wire.errors import DocumentTooLarge
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import KeyValue

KEEP_PAUSES = 10  # closed pause intervals remembered per workflow
MAX_TRIES = 50


class RegistryConflict(Exception):
    """Compare-and-set kept losing (only under an implausible storm of registrations)."""


@dataclass(frozen=True, slots=True)
class Registered:
    name: str
    version: int
    created: bool  # False: identical to the latest version, which is returned instead


def digest(spec: WorkflowSpec) -> str:
    """The canonical document's hash. msgspec encodes fields in declaration order and leaves
    defaults out, so key order, ``"dependsOn": []`` or ``"catchup": true`` change nothing."""
    return hashlib.sha256(encode(spec)).hexdigest()


async def get_latest(kv: KeyValue, name: str) -> tuple[WorkflowLatest, int] | None:
    try:
        entry = await kv.get(names.workflow_latest_key(name))
    except KeyNotFoundError:
        return None
    if not entry.value:
        return None
    # A get's entry always has its revision (the message's sequence in the stream).
    return workflow_latest_decoder.decode(entry.value), cast(int, entry.revision)


async def get_version(kv: KeyValue, name: str, version: int) -> WorkflowVersion | None:
    value = await value_of(kv, names.workflow_version_key(name, version))
    return workflow_version_decoder.decode(value) if value else None


async def list_latest(kv: Bucket) -> list[WorkflowLatest]:
    """Every workflow's latest summary: one filtered replay, never the definitions."""
    entries = await read_current(kv, names.WORKFLOW_LATEST_ALL)
    return sorted((workflow_latest_decoder.decode(e.value) for e in entries), key=lambda w: w.name)


def _summary(stored: WorkflowVersion, before: WorkflowLatest | None) -> WorkflowLatest:
    """``latest`` for a newly stored version: the version's fields, the workflow's state."""
    spec = stored.spec
    since = None
    if spec.schedule:
        # A schedule that goes on from the version before keeps its start; a new one starts
        # at this registration (no backfill of the time it did not exist).
        since = before.schedule_since if before and before.schedule else stored.registered_at
    return WorkflowLatest(
        name=stored.name,
        version=stored.version,
        registered_at=stored.registered_at,
        digest=stored.digest,
        step_count=len(spec.steps),
        schedule=spec.schedule,
        timezone=spec.timezone,
        catchup=spec.catchup,
        description=spec.description,
        schedule_since=since,
        paused=before.paused if before else False,
        paused_at=before.paused_at if before else None,
        pauses=list(before.pauses) if before else [],
    )


async def _put_latest(kv: KeyValue, latest: WorkflowLatest, revision: int | None) -> bool:
    """Compare-and-set ``latest``; False if someone else moved it first."""
    key = names.workflow_latest_key(latest.name)
    try:
        if revision is None:
            await kv.create(key, encode(latest))
        else:
            await kv.update(key, encode(latest), last=revision)
    except KeyWrongLastSequenceError:
        return False
    return True


async def register(
    kv: KeyValue, spec: WorkflowSpec, now: float, max_bytes: int | None = None
) -> Registered:
    """Store ``spec`` (already validated, with a name) as the next version of its workflow.
    A version that encodes to more than ``max_bytes`` raises DocumentTooLarge, unwritten."""
    assert spec.name is not None
    name = spec.name
    want = digest(spec)
    for _ in range(MAX_TRIES):
        current = await get_latest(kv, name)
        latest, revision = current if current else (None, None)
        if latest is not None and latest.digest == want:
            return Registered(name, latest.version, created=False)
        version = latest.version + 1 if latest else 1
        stored = WorkflowVersion(
            name=name, version=version, registered_at=from_epoch(now), digest=want, spec=spec
        )
        doc = encode(stored)
        if max_bytes is not None and len(doc) > max_bytes:
            raise DocumentTooLarge("workflow", len(doc), max_bytes)
        try:
            await kv.create(names.workflow_version_key(name, version), doc)
        except KeyWrongLastSequenceError:
            # Version taken by a concurrent (or dead) registration: help it finish, retry.
            taken = await get_version(kv, name, version)
            if taken is not None:
                await _put_latest(kv, _summary(taken, latest), revision)
            continue
        # Ours. If the CAS on latest loses, a helper already moved latest to our version.
        await _put_latest(kv, _summary(stored, latest), revision)
        return Registered(name, version, created=True)
    raise RegistryConflict(f"could not register {name!r}: too many concurrent registrations")


async def set_paused(kv: KeyValue, name: str, paused: bool, now: float) -> WorkflowLatest | None:
    """Pause or resume a workflow's schedule; None if the workflow does not exist. A resume
    closes the pause interval: the scheduler never runs slots inside it."""
    for _ in range(MAX_TRIES):
        current = await get_latest(kv, name)
        if current is None:
            return None
        latest, revision = current
        if latest.paused == paused:
            return latest
        stamp = from_epoch(now)
        if paused:
            latest.paused, latest.paused_at = True, stamp
        else:
            start = latest.paused_at or stamp
            latest.pauses = [*latest.pauses, Pause(start=start, end=stamp)][-KEEP_PAUSES:]
            latest.paused, latest.paused_at = False, None
        if await _put_latest(kv, latest, revision):
            return latest
    raise RegistryConflict(f"could not update {name!r}: too many concurrent updates")
