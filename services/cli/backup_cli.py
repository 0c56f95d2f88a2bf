"""`heddle backup DIR` and `heddle restore DIR --data-dir NEW` (docs/backup.md). Exit codes:
0 done, 1 refused (a target that is not empty, a backup whose files do not match their
manifest, a server that refuses or fails), 2 bad usage or settings."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from heddle.shared.runtime.settings import Settings
from heddle.shared.wire.errors import SettingsError

DATA_DIR = ".heddle"


# Each command: what it does, its DIR, and its --data-dir's options.
COMMANDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "backup": (
        "back up every stream and bucket of a running Heddle into DIR (made, or empty)",
        "where the backup goes: a new or empty directory",
        {
            "default": None,
            "help": f"the `heddle up` data dir of the Heddle to back up (default {DATA_DIR}; "
            "with HEDDLE_NATS_URL set and no --data-dir, that server, as HEDDLE_NATS_USER)",
        },
    ),
    "restore": (
        "make a new data dir from a backup, for `heddle up --data-dir NEW`",
        "a backup made by `heddle backup`",
        {"required": True, "metavar": "NEW", "help": "the data dir to make: missing or empty"},
    ),
}


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, (what, folder, data_dir) in COMMANDS.items():
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument("dir", metavar="DIR", help=folder)
        p.add_argument("--data-dir", **data_dir)


def run(args: argparse.Namespace) -> int:
    if args.command == "restore":
        from heddle.services.local.restore import main_restore

        return main_restore(Path(args.dir), Path(args.data_dir))
    from heddle.services.local.backup import Refused, Source, main_backup, source_of_data_dir

    if args.data_dir is None and os.environ.get("HEDDLE_NATS_URL"):
        try:
            source = Source(Settings.from_env(), None)
        except SettingsError as exc:
            print(f"heddle backup: {exc}", file=sys.stderr)
            return 2
    else:
        try:
            source = source_of_data_dir(Path(args.data_dir or DATA_DIR))
        except Refused as exc:
            print(f"heddle backup: {exc}", file=sys.stderr)
            return 1
    return main_backup(Path(args.dir), source)
