"""The live API fuzzed against its own OpenAPI document with Schemathesis.

A whole stack (no runners: no generated command is ever run) serves /openapi.json; the
Schemathesis CLI derives requests from it, valid and invalid, follows its links (submit, then
read, cancel and retry the run; register, then read, pause and trigger the workflow), and
fails on any 5xx, any answer the document does not describe, or any undocumented status.
Examples per operation are bounded so that this stays within about two minutes.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.support.stack import Stack, StackFactory

MAX_EXAMPLES = 25  # per operation and phase
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    )
)
# Schemathesis learns token names from GET /api/tokens and revokes them, its own included:
# revocation is fuzzed last, on its own, so that it does not lock the rest out.
LAST = ("revokeToken",)
# A run's events stream ends with the run, and no run of this stack (no runners) ends: each
# request for a stored run would hold until the request timeout.
# tests/integration/test_run_events.py covers it, its 400 and 404 included.
STREAMS = ("runEvents",)


async def schemathesis(s: Stack, token: str, workdir: Path, *only: str) -> tuple[int, str]:
    select = [f"--include-operation-id={o}" for o in only] or [
        f"--exclude-operation-id={o}" for o in (*LAST, *STREAMS)
    ]
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("st")),
        "run",
        f"{s.base}/openapi.json",
        f"--checks={CHECKS}",
        f"--max-examples={MAX_EXAMPLES}",
        f"--phases=examples,coverage,fuzzing{'' if only else ',stateful'}",  # links need two
        f"--header=Authorization: Bearer {token}",
        "--request-timeout=20",
        "--workers=1",  # hypothesis describes strategies with ast, which threads can upset
        f"--report-dir={workdir / 'report'}",
        "--no-color",
        *select,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=workdir,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    text = out.decode(errors="replace")
    summary = text[text.find("Stateful (") :] if "Stateful (" in text else text[-4000:]
    print(summary)  # the operations and examples, for the CI log
    assert proc.returncode is not None
    return proc.returncode, text


# 20-50 s, sharing the machine with the other test worker: a hang guard, not a bound.
@pytest.mark.timeout(300)
async def test_the_api_answers_as_its_document_says(stack: StackFactory, tmp_path: Path) -> None:
    s = await stack(runners=0)
    status, made = await s.request("POST", "/api/tokens", json={"name": "fuzz", "role": "admin"})
    assert status == 201, made
    for only in ((), LAST):
        code, text = await schemathesis(s, made["token"], tmp_path, *only)
        assert code == 0, text[-12000:]
        assert "Tested:" in text and " passed" in text and "Authentication failed" not in text
