"""A backup of Heddle's streams and buckets (``heddle backup``, docs/backup.md): what it
holds, in which order its snapshots are taken, its manifest, and the checks a restore makes
before it touches anything. Pure: the files are read and written by services/local/backup.py
and restore.py, the snapshots taken and sent back by shared/broker/snapshots.py.

A backup folder holds, per stream, ``streams/<stream>/backup.json`` (its configuration and
state as the server gave them: the body of a restore request) and ``streams/<stream>/
stream.tar.s2`` (the snapshot as the server delivered it): the layout ``nats stream backup``
writes, so each folder can also be restored with ``nats stream restore``. ``manifest.json``
lists every stream with its counts and every file with its sha256; ``admin-token`` is there
when the backup was taken from a ``heddle up`` data dir that has one.
"""

from __future__ import annotations

from typing import Any

import msgspec
from heddle.shared.wire import names

FORMAT = 1  # of the manifest; a restore refuses another
MANIFEST_FILE = "manifest.json"
ADMIN_TOKEN_FILE = "admin-token"
STREAMS_DIR = "streams"
META_FILE, DATA_FILE = "backup.json", "stream.tar.s2"

# Inputs before what is made from them: a command or an event is snapshotted (with the
# consumer positions that say whether it was taken) before the records it leads to, so a
# record is never ahead of the commands that made it; what was taken and not yet recorded is
# delivered again, as after a crash (docs/failures.md, "Restart"). A submit's document after
# its command and before the runs: a document is purged only once its run is stored. The
# logs last: they depend on nothing.
KV_STREAMS = tuple(names.kv_stream(b) for b in names.ALL_BUCKETS)
SNAPSHOT_ORDER: tuple[str, ...] = (
    names.CMD_STREAM,
    names.EVENTS_STREAM,
    names.STEPS_STREAM,
    names.DOCS_STREAM,
    *KV_STREAMS,
    names.LOGS_STREAM,
)


class StreamEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One stream as its snapshot found it."""

    name: str
    messages: int
    first_seq: int
    last_seq: int
    bytes: int
    consumers: int


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: int
    heddle: str  # the version that took it
    created_at: str
    streams: list[StreamEntry]
    files: dict[str, str]  # path in the backup -> sha256 hex


def meta_path(stream: str) -> str:
    return f"{STREAMS_DIR}/{stream}/{META_FILE}"


def data_path(stream: str) -> str:
    return f"{STREAMS_DIR}/{stream}/{DATA_FILE}"


def stream_entry(stream: str, state: dict[str, Any]) -> StreamEntry:
    """A stream's line in the manifest, from the state its snapshot answered with."""
    return StreamEntry(
        name=stream,
        messages=int(state.get("messages", 0)),
        first_seq=int(state.get("first_seq", 0)),
        last_seq=int(state.get("last_seq", 0)),
        bytes=int(state.get("bytes", 0)),
        consumers=int(state.get("consumer_count", 0)),
    )


def encode_manifest(manifest: Manifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n"


class BackupRefused(Exception):
    """A backup that cannot be restored as it is: every problem found, each a line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def decode_manifest(data: bytes) -> Manifest:
    """The manifest, or BackupRefused naming what is wrong with it."""
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.DecodeError as exc:
        raise BackupRefused([f"{MANIFEST_FILE} is not a Heddle backup manifest: {exc}"]) from None
    if problems := manifest_problems(manifest):
        raise BackupRefused(problems)
    return manifest


def expected_files(streams: list[str], admin_token: bool) -> set[str]:
    files = {path for s in streams for path in (meta_path(s), data_path(s))}
    return files | {ADMIN_TOKEN_FILE} if admin_token else files


def manifest_problems(manifest: Manifest) -> list[str]:
    """Every way the manifest differs from what a backup holds: the format, Heddle's
    streams each once, and exactly their files (no other path is ever read: a manifest
    cannot point a restore outside the backup)."""
    problems = []
    if manifest.format != FORMAT:
        problems.append(f"{MANIFEST_FILE}: format {manifest.format}, this Heddle reads {FORMAT}")
    listed = [entry.name for entry in manifest.streams]
    missing = [s for s in SNAPSHOT_ORDER if s not in listed]
    unknown = sorted({s for s in listed if s not in SNAPSHOT_ORDER})
    twice = sorted({s for s in listed if listed.count(s) > 1})
    for what, found in (("missing", missing), ("unknown", unknown), ("listed twice", twice)):
        if found:
            problems.append(f"{MANIFEST_FILE}: streams {what}: {', '.join(found)}")
    expected = expected_files(listed, ADMIN_TOKEN_FILE in manifest.files)
    if stray := sorted(set(manifest.files) - expected):
        problems.append(f"{MANIFEST_FILE}: files no backup holds: {', '.join(stray)}")
    if lacking := sorted(expected - set(manifest.files)):
        problems.append(f"{MANIFEST_FILE}: files not listed: {', '.join(lacking)}")
    return problems


def hash_problems(manifest: Manifest, digests: dict[str, str | None]) -> list[str]:
    """Every file whose sha256 (``digests``, None for a file that is not there) is not the
    manifest's."""
    problems = []
    for path, expected in sorted(manifest.files.items()):
        found = digests.get(path)
        if found is None:
            problems.append(f"{path}: missing")
        elif found != expected:
            problems.append(f"{path}: sha256 {found}, the manifest says {expected}")
    return problems


def restore_order(manifest: Manifest) -> list[str]:
    """The streams to restore, in the order they were taken."""
    listed = {entry.name for entry in manifest.streams}
    return [s for s in SNAPSHOT_ORDER if s in listed]
