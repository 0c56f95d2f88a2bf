"""Namespaces for tests: a namespace's record written to heddle-namespaces as the gateway's
namespace routes would (the record is what makes a namespace exist), tokens granted in
namespaces, made through the API, and runs submitted in a namespace with their records read
straight from heddle-runs under the run's qualified id (docs/namespaces.md)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from heddle.shared.core.namespaces import qualified
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    NamespaceRecord,
    RunRecord,
    StepRecord,
    encode,
    run_record_decoder,
    step_record_decoder,
)
from heddle.shared.wire.timefmt import epoch_of, now_rfc3339
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, NoKeysError
from nats.js.kv import KeyValue

from tests.support.stack import Stack, StackFactory

Answer = tuple[int, str, bytes]  # status, content type, body: compared byte for byte


async def create_namespaces(nc: Client, *namespaces: str) -> None:
    kv = await nc.jetstream().key_value(names.NAMESPACES_BUCKET)
    for ns in namespaces:
        await kv.put(ns, encode(NamespaceRecord(name=ns, created_at=now_rfc3339())))


async def answer(base: str, token: str, method: str, path: str, **kwargs: Any) -> Answer:
    """One request's answer, whole, as sent."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, base + path, headers=headers, **kwargs) as resp,
    ):
        return resp.status, resp.content_type, await resp.read()


async def granted_token(base: str, admin: str, name: str, grants: dict[str, str]) -> str:
    """A new token with these grants (namespace -> role), made by ``admin``."""
    body = {"name": name, "namespaces": grants}
    status, _, raw = await answer(base, admin, "POST", "/api/tokens", json=body)
    assert status == 201, raw
    token: str = json.loads(raw)["token"]
    return token


async def set_quotas(s: Stack, namespace: str, **quotas: int | None) -> dict[str, Any]:
    status, body = await s.request("PUT", f"/api/namespaces/{namespace}", json=quotas)
    assert status == 200, body
    return body


async def stack_of_teams(stack: StackFactory) -> Stack:
    """A stack of two runners with namespaces team-a and team-b made (no quota)."""
    s = await stack(runners=2)
    for ns in ("team-a", "team-b"):
        await set_quotas(s, ns)
    return s


async def submit_in(s: Stack, namespace: str, run: str, doc: dict[str, Any]) -> str:
    """The run ``run`` of ``doc`` submitted in ``namespace`` through the API; its qualified
    id, under which its records are stored."""
    answered = await s.submit({**doc, "runId": run, "namespace": namespace})
    assert answered == run
    return qualified(namespace, run)


async def records(s: Stack, run_id: str) -> tuple[RunRecord | None, list[StepRecord]]:
    """The run's record (None until stored) and its steps', as stored. The run is read
    first: the orchestrator stores a step's record before the run's, so steps read after a
    run seen ended are its last (read before, the run could end in between)."""
    nc = await s.connect()
    try:
        kv = await nc.jetstream().key_value(names.RUNS_BUCKET)
        try:
            run: RunRecord | None = run_record_decoder.decode(
                (await kv.get(names.run_key(run_id))).value or b""
            )
        except KeyNotFoundError:  # not stored yet
            run = None
        keys = [k for k in await _keys(kv) if k.startswith(f"step.{run_id}.")]
        steps = [step_record_decoder.decode((await kv.get(k)).value or b"") for k in keys]
        return run, steps
    finally:
        await nc.close()


async def _keys(kv: KeyValue) -> list[str]:
    """The bucket's keys. Its watch may end before its first entry on a loaded machine, and
    the client then says it has none: asked again, a few times, before that is believed."""
    for _ in range(20):
        try:
            return await kv.keys()
        except NoKeysError:
            await asyncio.sleep(0.05)
    return []


async def wait_ended(s: Stack, run_id: str, timeout: float = 60.0) -> list[StepRecord]:
    """The steps of the run once it has ended."""
    deadline = time.monotonic() + timeout
    while True:
        run, steps = await records(s, run_id)
        if run is not None and run.status in TERMINAL_RUN:
            assert run.status == "succeeded", (run, steps)
            return steps
        assert time.monotonic() < deadline, f"run {run_id} did not end: {run}"
        await asyncio.sleep(0.1)


def intervals(steps: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The steps of a run document, each from its start to its end."""
    return [(st["startedAt"], st["finishedAt"]) for st in steps]


def most_at_once(spans: list[tuple[str | None, str | None]]) -> int:
    """The most of these steps' (startedAt, finishedAt) running at once."""
    edges = sorted(
        [(epoch_of(start or "", 0), 1) for start, _ in spans]
        + [(epoch_of(end or "", 0), -1) for _, end in spans],
        key=lambda e: (e[0], e[1]),  # an end before a start at the same instant
    )
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak
