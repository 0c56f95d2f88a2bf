"""The HTTP API as its users see it: the documents it answers with (answers.py,
registry_answers.py) and a typed client of it, sync (``Client``, the standard library alone)
and async (``AsyncClient``, on aiohttp), with their errors and events (docs/client.md).

The client is imported when it is first named: the gateway imports the answer types alone,
and a sync script never imports aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from heddle.shared.api.async_client import AsyncClient
    from heddle.shared.api.client import Client
    from heddle.shared.api.errors import (
        BadDocument,
        ClientError,
        Refused,
        TimedOut,
        Unreachable,
        Usage,
    )
    from heddle.shared.api.events import LogEnd, LogEvent, LogStatus, RunEvent

# Each name exported, and the module that holds it.
EXPORTS = {
    "Client": "client",
    "AsyncClient": "async_client",
    **dict.fromkeys(
        ("BadDocument", "ClientError", "Refused", "TimedOut", "Unreachable", "Usage"), "errors"
    ),
    **dict.fromkeys(("LogEnd", "LogEvent", "LogStatus", "RunEvent"), "events"),
}
__all__ = [
    "AsyncClient",
    "BadDocument",
    "Client",
    "ClientError",
    "LogEnd",
    "LogEvent",
    "LogStatus",
    "Refused",
    "RunEvent",
    "TimedOut",
    "Unreachable",
    "Usage",
]


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
