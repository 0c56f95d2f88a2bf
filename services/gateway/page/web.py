"""The gateway's web page: ``GET /`` is the page (``static/index.html``), ``GET /static/{name}``
its assets: a fixed set of files read once at start, each with its content type, an ETag, and
a version (a digest of its content). The page refers to its assets by versioned URL
(``/static/app.js?v=<digest>``), so a versioned asset may be cached for a year and a new build
is fetched at once; the page itself is revalidated on every load (``no-cache`` with its ETag:
a 304 while unchanged). What the page shows, it asks the API for (handlers/).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from heddle.services.gateway.http.answers import error
from heddle.services.gateway.openapi.route import OPEN, Param, Route

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
    """The page and its assets, read when the app is made."""

    def __init__(self, directory: Path = STATIC_DIR) -> None:
        self.page: Asset | None = None
        self.assets: dict[str, Asset] = {}
        if (directory / "index.html").is_file():
            self.page, self.assets = load_assets(directory)
        else:  # an install without the package's data files: the API still works
            log.warning("no web page: %s/index.html is missing", directory)


SITE = web.AppKey("site", Site)


async def index(request: web.Request) -> web.Response:
    page = request.app[SITE].page
    if page is None:
        return error(404, "this gateway was installed without its web page")
    return _serve(request, page, REVALIDATE)


async def static(request: web.Request) -> web.Response:
    asset = request.app[SITE].assets.get(request.match_info["name"])
    if asset is None:
        raise web.HTTPNotFound()
    versioned = request.query.get("v") == asset.version
    return _serve(request, asset, IMMUTABLE if versioned else REVALIDATE)


ROUTES = (
    Route(
        "GET",
        "/",
        index,
        operation_id="page",
        summary="The web page",
        tag="page",
        role=OPEN,  # the page holds no data; its API calls carry the token
        answers={200: ("text/html", "The page")},
        offline=True,
    ),
    Route(
        "GET",
        "/static/{name}",
        static,
        operation_id="asset",
        summary="The page's scripts and styles",
        tag="page",
        role=OPEN,
        answers={200: ("application/octet-stream", "The file")},
        params=(Param("name", "path", {"type": "string"}, "The file's name"),),
        errors={404: "No such file"},
        offline=True,
    ),
)
