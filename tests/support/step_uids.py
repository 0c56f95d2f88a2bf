"""Step uids for a test's runners: each xdist worker's own block, and a directory every step
uid may write to."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="steps change uid only under root")


def own_step_uids() -> str:
    """HEDDLE_STEP_UIDS for a test's runners: ten uids per xdist worker, above the default
    range and below systemd's dynamic users (61184-65519), so no other process has them."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 61100 + 10 * (int(worker) if worker.isdigit() else 0)
    assert first + 9 < 61184, "more xdist workers than test step uids"
    return f"{first}-{first + 9}"


def shared_dir() -> Path:
    """A directory every step uid may write to (sticky: none removes another's files)."""
    path = Path("/tmp") / f"heddle-test-{uuid.uuid4().hex}"
    path.mkdir()
    path.chmod(0o1777)
    return path
