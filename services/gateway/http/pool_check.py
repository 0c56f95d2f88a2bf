"""At submit: a run with a step that no registered runner may take because of its namespace
(every runner with the step's labels serves other namespaces only) is refused with a 400
naming the step, the pool and the namespace (shared/core/pool_namespaces.py decides;
docs/namespaces.md, "Runner pools for namespaces").

The registry is read at most once a REGISTRY_FRESH_FOR, not once a submit: a burst of
submits costs one read, and a runner that registered a moment ago may not be seen yet (a
step let through so fails after HEDDLE_NO_RUNNER_TIMEOUT instead, as one that got past
before the runner left).
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

from aiohttp import web
from heddle.services.gateway.http import answers
from heddle.services.gateway.http.keys import RESOURCES
from heddle.services.gateway.reads.wait_facts import read_registry
from heddle.shared.core.pool_namespaces import submit_refusals
from heddle.shared.wire.contracts import RunnerInfo, SubmitRun

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket

REGISTRY_FRESH_FOR = 1.0  # seconds

# By registry bucket (one per gateway): when its entries were read, and them.
_read: weakref.WeakKeyDictionary[Bucket, tuple[float, list[RunnerInfo]]] = (
    weakref.WeakKeyDictionary()
)


async def namespace_refused(request: web.Request, cmd: SubmitRun) -> web.Response | None:
    """The 400 of a run some step of which no registered runner may take for its namespace;
    None if every step may go."""
    problems = submit_refusals(await _runners(request.app[RESOURCES].runners), cmd)
    if not problems:
        return None
    return answers.error(400, "no runner may take these steps in this namespace", problems)


async def _runners(bucket: Bucket) -> list[RunnerInfo]:
    now = time.monotonic()
    read = _read.get(bucket)
    if read is None or now - read[0] >= REGISTRY_FRESH_FOR:
        read = _read[bucket] = (now, await read_registry(bucket))
    return read[1]
