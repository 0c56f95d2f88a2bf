"""The gateway: Heddle's HTTP API. ``create_app(settings)`` builds it; the NATS connection
lives in a cleanup context (connected before serving, drained after)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from heddle.services.gateway import (
    api_page,
    auth,
    grid,
    logs,
    retry,
    run_events,
    run_steps,
    slow_clients,
    tokens,
    views,
    workflows,
)
from heddle.services.gateway import web as page
from heddle.services.gateway.keys import (
    METRICS,
    NATS,
    RESOURCES,
    RUN_INDEX,
    SETTINGS,
    TOKENS,
    GatewayResources,
)
from heddle.services.gateway.metrics import CONTENT_TYPE, Metrics
from heddle.services.gateway.protocol import GatewayRunner
from heddle.services.gateway.run_index import RunIndex
from heddle.services.gateway.token_index import TokenIndex, read_token_file, seed_admin
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.nats_types import (
    ConnectionClosedError,
    ConnectionReconnectingError,
    MaxPayloadError,
    NoRespondersError,
    OutboundBufferLimitError,
    ServiceUnavailableError,
    StaleConnectionError,
)
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

log = logging.getLogger("heddle.gateway")
# What NATS raises when it is too slow, reconnecting or without JetStream for a moment
# (nats.errors.TimeoutError is a TimeoutError): a 503 with Retry-After, never a 500.
NATS_UNAVAILABLE = (
    TimeoutError,
    ConnectionClosedError,
    ConnectionReconnectingError,
    NoRespondersError,
    OutboundBufferLimitError,
    StaleConnectionError,
    ServiceUnavailableError,
)
RETRY_AFTER = "1"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error answers JSON that names the problem; every request is counted."""
    t0 = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        if exc.status == 408:  # the rest of the body may still come: end the connection
            response = web.Response(status=408, body=exc.text, content_type="application/json")
            response.force_close()
            return response
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        message = exc.reason
        if exc.status == 413:
            message = (
                f"request body too large: the limit is {request.app[SETTINGS].max_body_bytes} bytes"
            )
        elif exc.status == 404:
            message = f"no route for {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        response = views.error(exc.status, message)
        for name in ("Allow", "Retry-After"):
            if name in exc.headers:
                response.headers[name] = exc.headers[name]
        return response
    except NATS_UNAVAILABLE as exc:  # slow or away: the client may try again
        status = 503
        log.warning("%s %s: NATS did not answer: %r", request.method, request.path, exc)
        response = views.error(503, "NATS did not answer in time; try again")
        response.headers["Retry-After"] = RETRY_AFTER
        return response
    except MaxPayloadError:  # a write no route measured first: too large, still not a 500
        status = 413
        limit = views.payload_limit(request)
        return views.error(413, f"the document is larger than NATS accepts ({limit} bytes)")
    except Exception:  # last resort: an unforeseen error is a JSON 500, logged with its trace
        log.exception("%s %s failed", request.method, request.path)
        return views.error(500, "internal error")
    finally:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        request.app[METRICS].observe(request.method, name, status, time.perf_counter() - t0)


async def metrics(request: web.Request) -> web.Response:
    body = await request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/runs", views.create_run)
    run_steps.setup_routes(app)  # /api/runs/{run}, .../steps (in pages), /workflow/{id}
    run_events.setup_routes(app)  # /api/runs/{run}/events
    logs.setup_routes(app)  # /api/runs/{run}/steps/{step} and .../logs
    r.add_post("/api/runs/{run}/cancel", views.cancel_run)
    retry.setup_routes(app)  # POST /api/runs/{run}/retry
    r.add_get("/api/runners", views.get_runners)
    r.add_get("/healthz", views.healthz)
    r.add_get("/readyz", views.readyz)
    r.add_get("/metrics", metrics)
    workflows.setup_routes(app)
    grid.setup_routes(app)  # GET /api/workflows/{name}/grid
    tokens.setup_routes(app)
    page.setup_routes(app)  # the web page, its assets, GET /api/runs
    api_page.setup_routes(app)  # /openapi.json and /docs
    # The route names older scripts use.
    r.add_post("/workflow", views.create_run)
    r.add_get("/pods", views.get_runners)


async def nats_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    # Read before connecting: a bad token file stops the gateway before it does anything.
    admin = read_token_file(settings.admin_token_file) if settings.admin_token_file else None
    token_index = app[TOKENS]
    nc = await connect_until_ready(settings, "heddle-gateway", on_reconnect=token_index.rewatch)
    res = await ensure_resources(nc, settings)
    app[NATS] = nc
    app[RESOURCES] = GatewayResources(
        js=res.js,
        runs=res.kv[names.RUNS_BUCKET],
        heartbeats=res.kv[names.HEARTBEATS_BUCKET],
        runners=res.kv[names.RUNNERS_BUCKET],
        workflows=res.kv[names.WORKFLOWS_BUCKET],
        tokens=res.kv[names.TOKENS_BUCKET],
        pods=res.kv[names.PODS_BUCKET],
    )
    if admin is not None:
        await seed_admin(res.kv[names.TOKENS_BUCKET], token_index, admin, settings.admin_token_file)
    await token_index.start(res.kv[names.TOKENS_BUCKET])
    if settings.auth == "tokens" and not len(token_index):
        log.warning(
            "no API token exists: every API request will be refused (401); set "
            "HEDDLE_ADMIN_TOKEN_FILE to seed the first"
        )
    index = app[RUN_INDEX] = RunIndex(res.js, res.kv[names.RUNS_BUCKET])
    index.start()
    yield
    await index.stop()
    await token_index.stop()
    await close(nc)


def create_app(settings: Settings) -> web.Application:
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[errors_and_metrics, auth.auth_middleware(settings)],
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[TOKENS] = TokenIndex()
    app.on_response_prepare.append(slow_clients.close_unauthenticated)
    auth.warn_if_open(settings)
    setup_routes(app)
    app.cleanup_ctx.append(nats_context)
    return app


class Gateway:
    """The gateway as a service: ``start`` binds the port, ``stop`` finishes open requests
    within the shutdown grace."""

    name = "gateway"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = create_app(self.settings)
        self.runner = GatewayRunner(
            app, shutdown_timeout=self.settings.shutdown_grace, access_log=None
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.settings.gateway_host, self.settings.gateway_port)
        await site.start()
        log.info(
            "listening on http://%s:%d", self.settings.gateway_host, self.settings.gateway_port
        )

    async def stop(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()
