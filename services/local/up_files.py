"""What `heddle up` keeps in its data dir (.heddle by default): the admin token, the gateway's
address (``url``, where the command line finds it), the NATS users and configuration, the
NATS log and store. All of it the owner's alone, files 0600 in 0700 directories: the files
are the keys to everything, and the store holds every run's commands."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from heddle.services.local.nats_users import (
    CONFIG_FILE,
    CONTEXT_FILE,
    PASSWORDS_FILE,
    write_private,
)
from heddle.shared.core.tokens import new_token

ADMIN_TOKEN_FILE = "admin-token"
URL_FILE = "url"  # shared/api/config.py reads it from .heddle/url
NATS_STORE, NATS_LOG = "nats", "nats.log"
NATS_SERVER_CONF = "nats-server.conf"  # services/local/embedded_nats.py's, beside CONFIG_FILE
# Every file Heddle writes in the data dir, but the store's (under NATS_STORE).
KEPT_FILES: tuple[str, ...]
KEPT_FILES = (ADMIN_TOKEN_FILE, URL_FILE, PASSWORDS_FILE, CONFIG_FILE, CONTEXT_FILE)
KEPT_FILES += (NATS_SERVER_CONF, NATS_LOG)
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def make_private(data_dir: Path) -> None:
    """The data dir and what Heddle keeps in it the owner's alone: an older Heddle made its
    log, server configuration and store under the user's umask. Nothing else there is
    touched: --data-dir may name a folder that holds more than Heddle's files."""
    data_dir.chmod(PRIVATE_DIR)
    for name in KEPT_FILES:
        path = data_dir / name
        if path.is_file() and not path.is_symlink():
            path.chmod(PRIVATE_FILE)
    store = data_dir / NATS_STORE
    if store.is_dir() and not store.is_symlink():
        make_private_tree(store)


def make_private_tree(folder: Path) -> None:
    """``folder`` and everything in it, all the way down, the owner's alone."""
    folder.chmod(PRIVATE_DIR)
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_symlink():
                continue  # chmod would change what it points at, outside the data dir
            if entry.is_dir():
                make_private_tree(Path(entry.path))
            else:
                os.chmod(entry.path, PRIVATE_FILE)


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Files and directories made meanwhile, by this process and the children it starts then,
    are the owner's alone: services/local/embedded_nats.py makes the store's folder, the log and the
    server's configuration under the umask it finds, and nats-server the store's files."""
    before = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(before)


def admin_token(data_dir: Path) -> tuple[Path, str]:
    """The data dir's admin token: made on the first start (0600), the same one after."""
    path = data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        return path, path.read_text().strip()
    token = new_token()
    write_private(path, token + "\n")
    return path, token


def local_address(host: str, port: int) -> str:
    """The gateway's address from this machine: loopback where it listens everywhere."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    netloc = f"[{host}]" if ":" in host else host
    return f"http://{netloc}:{port}"


def write_url(data_dir: Path, url: str) -> Path:
    """The gateway's address for the command line run here, beside the token it sends."""
    path = data_dir / URL_FILE
    write_private(path, url + "\n")
    return path
