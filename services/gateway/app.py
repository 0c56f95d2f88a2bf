"""The gateway: Heddle's HTTP API. ``create_app(settings)`` builds it: its state, its
middleware and every declared route (``ROUTES``); the NATS connection lives in a cleanup
context (connected before serving, drained after). ``Gateway`` starts and stops it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web
from heddle.services.gateway.handlers import (
    approvals,
    history,
    hook_deliveries,
    hook_secrets,
    logs,
    namespaces,
    operations,
    run_control,
    run_events,
    run_steps,
    runners,
    runs,
    semaphores,
    tokens,
    triggers,
    workflows,
)
from heddle.services.gateway.http import auth, slow_clients
from heddle.services.gateway.http.errors import errors_and_metrics
from heddle.services.gateway.http.keys import (
    FINISHED_STATES,
    FINISHED_STEPS,
    HOOK_RATE,
    METRICS,
    NATS,
    RESOURCES,
    RUN_INDEX,
    SETTINGS,
    TOKENS,
    GatewayResources,
)
from heddle.services.gateway.http.metrics import Metrics
from heddle.services.gateway.http.protocol import GatewayRunner
from heddle.services.gateway.notify.notifier import Notifier
from heddle.services.gateway.openapi import page as api_page
from heddle.services.gateway.openapi.page import PUBLISHED, Published
from heddle.services.gateway.openapi.route import Route, register
from heddle.services.gateway.page import web as page
from heddle.services.gateway.page.web import SITE, Site
from heddle.services.gateway.reads.finished import FinishedStates, FinishedSteps
from heddle.services.gateway.reads.run_index import RunIndex
from heddle.services.gateway.reads.token_index import TokenIndex, read_token_file, seed_admin
from heddle.shared.broker.nats_io import close, connect_until_ready
from heddle.shared.broker.nats_types import Client
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.delivery_rate import DeliveryRate
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

log = logging.getLogger("heddle.gateway")


# Every route the gateway serves: each declared once, in its handler's module, with its role
# and what the OpenAPI document says of it (openapi/route.py). The document lists them by
# tag, in this order within each.
ROUTES: tuple[Route, ...] = (
    *runs.ROUTES,
    *run_steps.ROUTES,
    *run_events.ROUTES,
    *run_control.ROUTES,
    *approvals.ROUTES,
    *logs.ROUTES,
    *runners.ROUTES,
    *workflows.ROUTES,
    *triggers.ROUTES,
    *hook_secrets.ROUTES,
    *hook_deliveries.ROUTES,
    *history.ROUTES,
    *semaphores.ROUTES,
    *namespaces.ROUTES,
    *tokens.ROUTES,
    *operations.ROUTES,
    *api_page.ROUTES,
    *page.ROUTES,
)
PUBLISHED_API = Published.of(ROUTES)  # /openapi.json and /docs, made once


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
        semaphores=res.kv[names.SEMAPHORES_BUCKET],
        concurrency=res.kv[names.CONCURRENCY_BUCKET],
        namespaces=res.kv[names.NAMESPACES_BUCKET],
        secrets=res.kv[names.SECRETS_BUCKET],
        notifications=res.kv[names.NOTIFICATIONS_BUCKET],
        approvals=res.kv[names.APPROVALS_BUCKET],
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
    notifier = Notifier(
        settings,
        res.kv[names.NOTIFICATIONS_BUCKET],
        res.kv[names.RUNS_BUCKET],
        res.kv[names.SECRETS_BUCKET],
    )
    notifier.start()
    yield
    await notifier.stop()
    await index.stop()
    await token_index.stop()
    await close(nc)


def create_app(settings: Settings) -> web.Application:
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[errors_and_metrics, auth.auth_middleware(settings, ROUTES)],
    )
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app[TOKENS] = TokenIndex()
    app[HOOK_RATE] = DeliveryRate(settings.webhook_rate)
    app[FINISHED_STEPS] = FinishedSteps()  # for GET /api/runs/{run}/steps
    app[FINISHED_STATES] = FinishedStates()  # for GET /api/workflows/{name}/grid
    app[PUBLISHED] = PUBLISHED_API
    app[SITE] = Site()
    app.on_response_prepare.append(slow_clients.close_unauthenticated)
    auth.warn_if_open(settings)
    register(app, ROUTES)
    app.cleanup_ctx.append(nats_context)
    return app


class Gateway:
    """The gateway as a service: ``start`` binds the port, ``stop`` finishes open requests
    within the shutdown grace."""

    name = "gateway"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runner: web.AppRunner | None = None

    @property
    def nc(self) -> Client | None:
        """The app's NATS connection once it is up: the readiness probe asks whether it is."""
        return self.runner.app.get(NATS) if self.runner is not None else None

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
