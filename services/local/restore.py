"""`heddle restore DIR --data-dir NEW`: a data dir that `heddle up --data-dir NEW` starts from,
made from a backup (services/local/backup.py).

Every file of the backup is checked against its manifest's sha256 before anything is made.
Then a temporary nats-server runs on NEW's store, with NEW's NATS users (new passwords: the
backup holds none) and, for this while alone, the ``restore`` user, which makes each stream
again from its snapshot through the server (shared/broker/snapshots.py). The server stops,
the restore user is removed, and the admin token is copied from the backup, so the token
the backed-up Heddle gave still works, for its CLI as before. A restore that fails leaves
nothing in NEW.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from heddle.services.local.backup import Refused, claim_target, file_digest, forget_target
from heddle.services.local.embedded_nats import EmbeddedNats, free_port
from heddle.services.local.nats_users import NatsUsers
from heddle.services.local.up_files import NATS_LOG, NATS_STORE, PRIVATE_FILE, private_umask
from heddle.shared.broker import nats_io
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.broker.snapshots import CHUNK, restore_snapshot
from heddle.shared.core import backups
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.errors import HeddleError

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client


def checked_backup(source: Path) -> backups.Manifest:
    """The backup's manifest, once every file it lists is there with its sha256."""
    try:
        data = (source / backups.MANIFEST_FILE).read_bytes()
    except OSError as exc:
        what = f"{source / backups.MANIFEST_FILE}: {exc.strerror}"
        raise Refused(f"{source} holds no backup ({what})") from None
    try:
        manifest = backups.decode_manifest(data)
    except backups.BackupRefused as exc:
        raise Refused(problem_lines(source, exc.problems)) from None
    digests = {
        path: file_digest(source / path) if (source / path).is_file() else None
        for path in manifest.files
    }
    if problems := backups.hash_problems(manifest, digests):
        raise Refused(problem_lines(source, problems))
    return manifest


def problem_lines(source: Path, problems: list[str]) -> str:
    return f"{source} is not a backup to restore as it is:\n" + "\n".join(
        f"  {problem}" for problem in problems
    )


async def restore_stream(
    nc: Client, source: Path, entry: backups.StreamEntry, timeout: float
) -> None:
    stream = entry.name
    meta = (source / backups.meta_path(stream)).read_bytes()
    with open(source / backups.data_path(stream), "rb") as data:
        chunks = iter(lambda: data.read(CHUNK), b"")
        state = await restore_snapshot(nc, stream, meta, chunks, timeout)
    # Never below the backup's (nothing of it lost); above it is the server's own writes,
    # such as the delete markers of bucket entries whose time ran out meanwhile.
    last = int(state.get("last_seq", 0))
    if last < entry.last_seq:
        raise Refused(
            f"stream {stream} was made up to sequence {last}, the backup's is {entry.last_seq}"
        )


async def restore_streams(source: Path, manifest: backups.Manifest, settings: Settings) -> None:
    entries = {entry.name: entry for entry in manifest.streams}
    nc = await nats_io.connect_once(settings, "heddle-restore")
    try:
        for stream in backups.restore_order(manifest):
            await restore_stream(nc, source, entries[stream], settings.nats_timeout)
    finally:
        await nc.close()


def restore_into(source: Path, manifest: backups.Manifest, data_dir: Path) -> None:
    """Make the store and the users in ``data_dir`` (empty), then the admin token."""
    data_dir = data_dir.resolve()  # the server's configuration names its store
    with private_umask():
        users = NatsUsers.load(data_dir)
        users.ensure(perms.RESTORE)
        users.save()
        nats = EmbeddedNats(
            data_dir / NATS_STORE,
            port=free_port(),
            log_file=data_dir / NATS_LOG,
            config=users.config_path,
        )
        nats.start()
    try:
        settings = Settings(
            nats_url=nats.url,
            nats_user=perms.RESTORE,
            nats_password=users.passwords[perms.RESTORE],
        )
        asyncio.run(restore_streams(source, manifest, settings))
    finally:
        nats.stop()
        del users.passwords[perms.RESTORE]  # no Heddle that runs has it
        users.save()
    if backups.ADMIN_TOKEN_FILE in manifest.files:
        token = data_dir / backups.ADMIN_TOKEN_FILE
        shutil.copyfile(source / backups.ADMIN_TOKEN_FILE, token)
        os.chmod(token, PRIVATE_FILE)


def main_restore(source: Path, data_dir: Path) -> int:
    """Exit 0 with ``data_dir`` made; 1, with nothing made, if refused."""
    try:
        manifest = checked_backup(source)
        made = claim_target(data_dir, "a restore makes a new data dir")
    except (Refused, OSError) as exc:
        print(f"heddle restore: {exc}", file=sys.stderr)
        return 1
    try:
        restore_into(source, manifest, data_dir)
    except (HeddleError, OSError, KeyboardInterrupt) as exc:
        forget_target(data_dir, made)
        print(f"heddle restore: {exc or 'interrupted'}; nothing was kept", file=sys.stderr)
        return 1
    total = sum(entry.messages for entry in manifest.streams)
    print(
        f"restored {len(manifest.streams)} streams ({total} messages) from a backup of "
        f"{manifest.created_at} into {data_dir}; start it with: heddle up --data-dir {data_dir}"
    )
    return 0
