"""The gateway's web page and the recent-runs list it shows.

- ``GET /`` is the page (``static/index.html``), ``GET /static/{name}`` its assets: a fixed set
  of files read once at start, each with its content type, an ETag, and a version (a digest of
  its content). The page refers to its assets by versioned URL (``/static/app.js?v=<digest>``),
  so a versioned asset may be cached for a year and a new build is fetched at once; the page
  itself is revalidated on every load (``no-cache`` with its ETag: a 304 while unchanged).
- ``GET /api/runs?limit=N&status=S``: recent runs, newest first by ``createdAt``, as
  summaries, from the gateway's index of run records (``run_index.py``: kept by a consumer
  of ``run.*``, caught up to each request), plus a get of the ``hist.<workflow>.<run>``
  entry of each listed run of a named workflow: the orchestrator keeps that run's step
  counts by state there (a run record has only its step count). No step is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from aiohttp import web
from heddle.services.gateway import views
from heddle.services.gateway.api_types import RunList, RunListEntry
from heddle.services.gateway.keys import RESOURCES, RUN_INDEX
from heddle.services.gateway.params import whole_number
from heddle.services.gateway.reads import run_facts
from heddle.shared.broker.kv_reads import value_of
from heddle.shared.broker.nats_types import KeyValue
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, RunStatus, RunSummary, run_summary_decoder
from heddle.shared.wire.errors import Problem

log = logging.getLogger("heddle.gateway")
STATIC_DIR = Path(__file__).with_name("static")
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Scripts, styles and requests only from the gateway itself: no inline script, no CDN.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
ASSET_REF = re.compile(r"\{\{asset:([A-Za-z0-9_.-]+)\}\}")


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    version: str  # a digest of the body

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


def _asset(body: bytes, suffix: str) -> Asset:
    return Asset(body, CONTENT_TYPES[suffix], hashlib.sha256(body).hexdigest()[:16])


def load_assets(directory: Path = STATIC_DIR) -> tuple[Asset, dict[str, Asset]]:
    """The page and its assets by name. ``{{asset:app.js}}`` in the page becomes the asset's
    versioned URL."""
    assets = {
        p.name: _asset(p.read_bytes(), p.suffix)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in CONTENT_TYPES and p.name != "index.html"
    }

    def ref(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in assets:
            raise ValueError(f"index.html refers to a missing asset {name!r}")
        return f"/static/{name}?v={assets[name].version}"

    page = ASSET_REF.sub(ref, (directory / "index.html").read_text("utf-8"))
    return _asset(page.encode(), ".html"), assets


def _serve(request: web.Request, asset: Asset, cache: str) -> web.Response:
    headers = {
        "Cache-Control": cache,
        "ETag": asset.etag,
        "X-Content-Type-Options": "nosniff",
    }
    if asset.content_type.startswith("text/html"):
        headers["Content-Security-Policy"] = CSP
        headers["Referrer-Policy"] = "same-origin"
    if asset.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    return web.Response(body=asset.body, headers=headers | {"Content-Type": asset.content_type})


class Site:
    def __init__(self, directory: Path = STATIC_DIR) -> None:
        self.page: Asset | None = None
        self.assets: dict[str, Asset] = {}
        if (directory / "index.html").is_file():
            self.page, self.assets = load_assets(directory)
        else:  # an install without the package's data files: the API still works
            log.warning("no web page: %s/index.html is missing", directory)

    async def index(self, request: web.Request) -> web.Response:
        if self.page is None:
            return views.error(404, "this gateway was installed without its web page")
        return _serve(request, self.page, REVALIDATE)

    async def static(self, request: web.Request) -> web.Response:
        asset = self.assets.get(request.match_info["name"])
        if asset is None:
            raise web.HTTPNotFound()
        versioned = request.query.get("v") == asset.version
        return _serve(request, asset, IMMUTABLE if versioned else REVALIDATE)


# ---- GET /api/runs -----------------------------------------------------------------------


def list_params(request: web.Request) -> tuple[int, str | None]:
    """``limit`` and ``status`` from the query, or a 400 naming every problem."""
    problems: list[Problem] = []
    limit = whole_number("limit", request.query.get("limit"), 1, MAX_LIMIT, problems)
    status = run_status(request, problems)
    if problems:
        raise views.bad_request(f"invalid {' and '.join(p.path for p in problems)}", problems)
    return limit or DEFAULT_LIMIT, status


def run_status(request: web.Request, problems: list[Problem]) -> str | None:
    """``?status=``: one run state, or None; a problem added if it is not one."""
    status = request.query.get("status")
    if status is not None and status not in RUN_STATUSES:
        message = f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}"
        problems.append(Problem("status", message))
    return status


def run_summary(run: RunRecord, counts: dict[str, int] | None) -> RunListEntry:
    return RunListEntry(**run_facts(run), step_count=run.step_count, counts=counts)


async def list_runs(request: web.Request) -> web.Response:
    limit, status = list_params(request)
    runs_kv = request.app[RESOURCES].runs
    runs = await request.app[RUN_INDEX].caught_up()
    shown = runs.newest(limit, status)
    # Only runs of registered workflows have counts kept, in the history index: one get per
    # shown run (at most ``limit``), not a replay of every workflow's history.
    named = [(r, r.registered_workflow) for r in shown if r.registered_workflow is not None]
    found = await asyncio.gather(*(_history_entry(runs_kv, wf, r.run_id) for r, wf in named))
    counts = {
        r.run_id: summary.counts for (r, _), summary in zip(named, found, strict=True) if summary
    }
    return views.json_response(
        RunList(
            runs=[run_summary(r, counts.get(r.run_id)) for r in shown],
            total=runs.total,
            matching=runs.matching(status),
            limit=limit,
        )
    )


async def _history_entry(kv: KeyValue, workflow: str, run_id: str) -> RunSummary | None:
    # None if not written yet: the orchestrator writes it shortly after the run.
    value = await value_of(kv, names.hist_key(workflow, run_id))
    return run_summary_decoder.decode(value) if value else None


def setup_routes(app: web.Application) -> None:
    site = Site()
    r = app.router
    r.add_get("/", site.index)
    r.add_get("/static/{name}", site.static)
    r.add_get("/api/runs", list_runs)
