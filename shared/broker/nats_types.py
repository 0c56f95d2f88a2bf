"""The nats-py names the services use: errors they catch, and the types of the connection,
buckets, messages and consumer settings they hold.

Services import them from here, never from nats-py, so that nats-py is a dependency of the
NATS edge in shared/ alone (``nats_io``, ``buckets``, ``consume``, ``jetstream_api``,
``kv_reads``, ``acked``, ``pull``): an upgrade that moves a name is mended in this file.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import (
    ConnectionClosedError,
    ConnectionReconnectingError,
    MaxPayloadError,
    NoRespondersError,
    OutboundBufferLimitError,
    StaleConnectionError,
)
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, RawStreamMsg
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

__all__ = [
    "APIError",
    "AckPolicy",
    "Client",
    "ConnectionClosedError",
    "ConnectionReconnectingError",
    "ConsumerConfig",
    "ConsumerInfo",
    "DeliverPolicy",
    "JetStreamContext",
    "KeyNotFoundError",
    "KeyValue",
    "KeyWrongLastSequenceError",
    "MaxPayloadError",
    "Msg",
    "NatsError",
    "NatsTimeout",
    "NoRespondersError",
    "NoStreamResponseError",
    "NotFoundError",
    "OutboundBufferLimitError",
    "RawStreamMsg",
    "ServiceUnavailableError",
    "StaleConnectionError",
]
