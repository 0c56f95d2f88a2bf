"""`heddle backup DIR`: every stream and bucket of a running Heddle, each a snapshot the NATS
server takes of itself (shared/broker/snapshots.py), written with its configuration and a
manifest (shared/core/backups.py holds the layout, the order and the checks).

It connects as the ``backup`` NATS user (shared/broker/nats_permissions.py): from a data dir
as ``heddle up`` keeps it (the server's address from its nats-context.json, the user's
password from nats-users.json), or as HEDDLE_NATS_URL, HEDDLE_NATS_USER and its password
say. Every file it writes is the owner's alone: the backup holds every secret Heddle keeps
(docs/backup.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heddle.services.local.nats_users import CONTEXT_FILE, PASSWORDS_FILE, write_private
from heddle.services.local.up_files import PRIVATE_DIR, PRIVATE_FILE, private_umask
from heddle.shared.broker import nats_io
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.snapshots import take_snapshot
from heddle.shared.core import backups
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.errors import HeddleError
from heddle.shared.wire.timefmt import now_rfc3339

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client


class Refused(HeddleError):
    """What a backup or a restore will not do, said as it is (exit code 1)."""


@dataclass(frozen=True)
class Source:
    settings: Settings  # the server and the user to connect as
    data_dir: Path | None  # where the admin token is, for a `heddle up` data dir


def source_of_data_dir(data_dir: Path) -> Source:
    """The server and the backup user's password as `heddle up` left them in ``data_dir``."""
    try:
        url = json.loads((data_dir / CONTEXT_FILE).read_text())["url"]
        passwords = json.loads((data_dir / PASSWORDS_FILE).read_text())
    except (OSError, ValueError, KeyError) as exc:
        raise Refused(
            f"{data_dir} is not a data dir `heddle up` has started on ({exc}): give --data-dir, "
            "or set HEDDLE_NATS_URL and the credentials of a user allowed to back it up"
        ) from None
    if perms.BACKUP not in passwords:
        raise Refused(
            f"{data_dir / PASSWORDS_FILE} has no {perms.BACKUP} user: `heddle up` adds it when "
            "it starts; stop it and start it again on this data dir"
        )
    settings = Settings(nats_url=url, nats_user=perms.BACKUP, nats_password=passwords[perms.BACKUP])
    return Source(settings, data_dir)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def heddle_version() -> str:
    try:
        return metadata.version("heddle")
    except metadata.PackageNotFoundError:
        return "unknown"


def claim_target(target: Path, what: str) -> bool:
    """Make ``target`` (0700) if missing, or take it empty; Refused if it holds anything.
    Returns whether it was made here (``forget_target`` removes it then, else empties it)."""
    if target.exists() and not target.is_dir():
        raise Refused(f"{target} is not a directory")
    made = not target.exists()
    target.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if any(target.iterdir()):
        raise Refused(f"{target} is not empty: {what}")
    target.chmod(PRIVATE_DIR)
    return made


def forget_target(target: Path, made: bool) -> None:
    """What this command wrote in ``target``, which it made or found empty: nothing is left
    half-written."""
    if made:
        shutil.rmtree(target, ignore_errors=True)
        return
    for entry in target.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


async def write_stream(nc: Client, stream: str, target: Path, timeout: float) -> dict[str, Any]:
    """One stream's snapshot and its configuration, written under ``target``."""
    folder = target / backups.STREAMS_DIR / stream
    folder.mkdir(parents=True, mode=PRIVATE_DIR)
    fd = os.open(target / backups.data_path(stream), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    inbox = f"{perms.inbox_prefix(perms.BACKUP)}.snapshot.{stream}"
    with os.fdopen(fd, "wb") as data:
        meta = await take_snapshot(nc, stream, inbox, data.write, timeout)
    write_private(target / backups.meta_path(stream), json.dumps(meta, indent=2) + "\n")
    return meta


async def take_backup(source: Source, target: Path) -> backups.Manifest:
    """Every stream into ``target`` (empty), then the admin token, then the manifest."""
    settings, started = source.settings, now_rfc3339()
    nc = await nats_io.connect_once(settings, "heddle-backup")
    entries: list[backups.StreamEntry] = []
    try:
        for stream in backups.SNAPSHOT_ORDER:
            meta = await write_stream(nc, stream, target, settings.nats_timeout)
            entries.append(backups.stream_entry(stream, meta.get("state") or {}))
    finally:
        await nc.close()
    token = source.data_dir / backups.ADMIN_TOKEN_FILE if source.data_dir else None
    if token is not None and token.is_file():
        shutil.copyfile(token, target / backups.ADMIN_TOKEN_FILE)
        os.chmod(target / backups.ADMIN_TOKEN_FILE, PRIVATE_FILE)
    files = {
        path: file_digest(target / path)
        for path in backups.expected_files(list(backups.SNAPSHOT_ORDER), token is not None)
        if (target / path).is_file()
    }
    manifest = backups.Manifest(
        format=backups.FORMAT,
        heddle=heddle_version(),
        created_at=started,
        streams=entries,
        files=files,
    )
    write_private(target / backups.MANIFEST_FILE, backups.encode_manifest(manifest).decode())
    return manifest


def main_backup(target: Path, source: Source) -> int:
    """Exit 0 with the backup whole in ``target``; 1, with nothing left there, if refused."""
    try:
        made = claim_target(target, "a backup goes into an empty directory")
    except OSError as exc:
        print(f"heddle backup: cannot use {target}: {exc.strerror}", file=sys.stderr)
        return 1
    except Refused as exc:
        print(f"heddle backup: {exc}", file=sys.stderr)
        return 1
    try:
        with private_umask():  # every folder 0700, every file 0600
            manifest = asyncio.run(take_backup(source, target))
    except (HeddleError, OSError, KeyboardInterrupt) as exc:
        forget_target(target, made)
        print(f"heddle backup: {exc or 'interrupted'}; nothing was kept", file=sys.stderr)
        return 1
    total = sum(entry.messages for entry in manifest.streams)
    print(f"backed up {len(manifest.streams)} streams ({total} messages) to {target}")
    if backups.ADMIN_TOKEN_FILE in manifest.files:
        print(f"{target} holds the admin token and every secret Heddle keeps: keep it private")
    return 0
