"""A backup's manifest and the checks a restore makes before it touches anything
(shared/core/backups.py)."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.core import backups
from heddle.shared.wire import names

STREAMS = list(backups.SNAPSHOT_ORDER)


def manifest(streams: list[str] = STREAMS, token: bool = True, **files: str) -> backups.Manifest:
    listed = {
        p: hashlib.sha256(p.encode()).hexdigest() for p in backups.expected_files(streams, token)
    }
    return backups.Manifest(
        format=backups.FORMAT,
        heddle="0.1.0",
        created_at="2026-01-01T00:00:00Z",
        streams=[backups.stream_entry(s, {"messages": 3, "last_seq": 5}) for s in streams],
        files={**listed, **files},
    )


def test_every_stream_and_bucket_is_taken_once() -> None:
    assert sorted(STREAMS) == sorted(perms.ALL_STREAMS)
    assert len(set(STREAMS)) == len(STREAMS)


def test_commands_and_events_are_taken_before_the_records_made_from_them() -> None:
    """A record must never be ahead of the command that made it: what was taken and not
    recorded is delivered again on restore, as after a crash."""
    runs = STREAMS.index(names.kv_stream(names.RUNS_BUCKET))
    for first in (names.CMD_STREAM, names.EVENTS_STREAM, names.STEPS_STREAM):
        assert STREAMS.index(first) < runs
    # A submit's document after its command: purged only once its run is stored.
    assert STREAMS.index(names.CMD_STREAM) < STREAMS.index(names.DOCS_STREAM) < runs


def test_a_manifest_reads_back_as_written() -> None:
    written = manifest()
    assert backups.decode_manifest(backups.encode_manifest(written)) == written
    entry = written.streams[0]
    assert (entry.messages, entry.last_seq, entry.first_seq) == (3, 5, 0)


def test_the_files_are_the_layout_nats_stream_backup_writes() -> None:
    stream = names.kv_stream(names.TOKENS_BUCKET)
    assert backups.meta_path(stream) == "streams/KV_heddle-tokens/backup.json"
    assert backups.data_path(stream) == "streams/KV_heddle-tokens/stream.tar.s2"
    assert backups.ADMIN_TOKEN_FILE not in backups.expected_files(STREAMS, admin_token=False)


def test_a_manifest_that_is_not_one_is_refused() -> None:
    with pytest.raises(backups.BackupRefused) as refused:
        backups.decode_manifest(b"{not json")
    assert "manifest.json is not a Heddle backup manifest" in refused.value.problems[0]


def test_every_problem_of_a_manifest_is_named() -> None:
    lacking = [s for s in STREAMS if s != names.LOGS_STREAM]
    odd = msgspec.structs.replace(
        manifest(lacking, **{"../../etc/passwd": "0" * 64}),
        format=99,
        streams=[
            *manifest(lacking).streams,
            backups.stream_entry("OTHER", {}),
            backups.stream_entry(names.CMD_STREAM, {}),
        ],
    )
    problems = backups.manifest_problems(odd)
    assert problems == [
        "manifest.json: format 99, this Heddle reads 1",
        "manifest.json: streams missing: HEDDLE_LOGS",
        "manifest.json: streams unknown: OTHER",
        "manifest.json: streams listed twice: HEDDLE_CMD",
        "manifest.json: files no backup holds: ../../etc/passwd",
        "manifest.json: files not listed: streams/OTHER/backup.json, streams/OTHER/stream.tar.s2",
    ]
    with pytest.raises(backups.BackupRefused) as refused:
        backups.decode_manifest(backups.encode_manifest(odd))
    assert refused.value.problems == problems


def test_a_file_changed_or_missing_is_named_by_its_hash() -> None:
    good = manifest()
    digests: dict[str, str | None] = dict(good.files)
    assert backups.hash_problems(good, digests) == []
    changed, gone = backups.data_path(names.CMD_STREAM), backups.ADMIN_TOKEN_FILE
    digests[changed], digests[gone] = "f" * 64, None
    assert backups.hash_problems(good, digests) == [
        f"{gone}: missing",
        f"{changed}: sha256 {'f' * 64}, the manifest says {good.files[changed]}",
    ]


def test_the_streams_are_restored_in_the_order_they_were_taken() -> None:
    shuffled = msgspec.structs.replace(manifest(), streams=list(reversed(manifest().streams)))
    assert backups.restore_order(shuffled) == STREAMS


def test_the_backup_user_reads_every_stream_and_writes_none() -> None:
    """Snapshots and their acknowledgements only: no bucket write, no command, no consumer."""
    allowed = perms.backup().publish
    for stream in perms.ALL_STREAMS:
        assert f"$JS.API.STREAM.SNAPSHOT.{stream}" in allowed
        assert f"$JS.API.STREAM.RESTORE.{stream}" in perms.restore().publish
    assert not [s for s in allowed if not s.startswith(("$JS.API.", "$JS.SNAPSHOT.ACK."))]
    assert not [s for s in allowed if any(w in s for w in ("CONSUMER", "CREATE", "DELETE"))]
    assert not [s for s in allowed if "RESTORE" in s or "PURGE" in s or "UPDATE" in s]
