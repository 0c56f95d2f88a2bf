"""Typed keys for what the gateway keeps on its aiohttp application."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from heddle.services.gateway.http.metrics import Metrics
from heddle.services.gateway.reads.finished import FinishedStates, FinishedSteps
from heddle.services.gateway.reads.run_index import RunIndex
from heddle.services.gateway.reads.token_index import TokenIndex
from heddle.shared.broker.buckets import Bucket
from heddle.shared.broker.nats_types import Client
from heddle.shared.core.delivery_rate import DeliveryRate
from heddle.shared.core.tokens import TokenRecord
from heddle.shared.runtime.settings import Settings

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import JetStreamContext


@dataclass(frozen=True, slots=True)
class GatewayResources:
    js: JetStreamContext
    runs: Bucket  # replayed and followed as well as read
    heartbeats: Bucket
    runners: Bucket
    workflows: Bucket
    tokens: Bucket
    pods: Bucket  # heddle-pods: the runner pods (in a cluster)
    semaphores: Bucket  # heddle-semaphores: sizes and holders
    concurrency: Bucket  # heddle-concurrency: each key's holders and queue
    namespaces: Bucket  # heddle-namespaces: each namespace's record and quotas
    secrets: Bucket  # heddle-secrets: webhooks' and notify targets' (the gateway's alone)
    notifications: Bucket  # heddle-notifications: the deliveries of run ends
    approvals: Bucket  # heddle-approvals: the approval gates waiting (docs/approvals.md)


SETTINGS = web.AppKey("settings", Settings)
NATS = web.AppKey("nats", Client)
RESOURCES = web.AppKey("resources", GatewayResources)
METRICS = web.AppKey("metrics", Metrics)
RUN_INDEX = web.AppKey("run_index", RunIndex)
TOKENS = web.AppKey("tokens", TokenIndex)
HOOK_RATE = web.AppKey("hook_rate", DeliveryRate)  # each webhook's deliveries, this gateway's
# Finished runs' step records and states, for the steps in pages and the grid.
FINISHED_STEPS = web.AppKey("finished_steps", FinishedSteps)
FINISHED_STATES = web.AppKey("finished_states", FinishedStates)
# The token a request came with, once the auth middleware accepted it (absent when open).
CALLER = web.RequestKey("caller", TokenRecord)
# The least role of the request's route (auth.py), which its namespace's role must reach too.
NEEDS = web.RequestKey("needs", str)
