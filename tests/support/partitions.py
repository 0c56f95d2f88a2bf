"""The partitions each orchestrator of a stack holds, read from its own log."""

from __future__ import annotations

import json

from tests.support.stack import Stack, until

PARTITIONS = 12


def held(s: Stack, name: str) -> set[int]:
    """The partitions ``name`` holds, by its own log (taken, less given or lost)."""
    parts: set[int] = set()
    for line in s.logs(name).splitlines():
        if '"msg":"partitions ' not in line:
            continue
        entry = json.loads(line)
        if entry["msg"] == "partitions taken":
            parts |= set(entry["partitions"])
        elif entry["msg"] in ("partitions given", "partitions lost"):
            parts -= set(entry["partitions"])
    return parts


async def balanced(s: Stack, live: tuple[str, ...]) -> None:
    """Until the live orchestrators hold every partition between them, evenly."""

    def even() -> bool:
        shares = [held(s, name) for name in live]
        whole = set().union(*shares) == set(range(PARTITIONS))
        return whole and max(map(len, shares)) - min(map(len, shares)) <= 1

    await until(even, 30, f"partitions not shared: { {n: held(s, n) for n in live} }")
