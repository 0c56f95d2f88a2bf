"""An attempt's ticket (StepReady.ticket): drawn by the orchestrator when it queues the
attempt, given by the dispatcher to the one runner it assigns, and returned in that runner's
events and heartbeats, so no other runner can speak for the attempt (docs/security.md,
"Tickets"). Pure."""

from __future__ import annotations

import secrets


def new_ticket() -> str:
    """64 random bits, hex."""
    return secrets.token_hex(8)


def holds(expected: str, given: str) -> bool:
    """Whether ``given`` is the attempt's ticket. An attempt stored before tickets existed
    has none (``expected`` empty) and accepts any."""
    return not expected or secrets.compare_digest(given, expected)
