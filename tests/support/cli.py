"""The `heddle` command line as a subprocess, against a stack."""

from __future__ import annotations

import asyncio
import sys

from tests.support.stack import REPO, Stack


async def heddle(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "heddle.services.cli",
        *args,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def env_of(s: Stack, token: str | None = None) -> dict[str, str]:
    return {"HEDDLE_URL": s.base, "HEDDLE_TOKEN": token or s.admin_token}
