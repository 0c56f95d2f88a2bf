"""The attempts a runner took last, so that one offered again is answered, not run again.

An offer can come twice for one attempt: a dispatcher can be given a ready message again
after another one placed it. The runner that took the attempt answers "accepted" again: it
holds the attempt, or ran it and its outcome is on its way (re-sent until stored). Only
under the same ticket: the same attempt queued again under a new one (a run rebuilt after
its queued record was lost, docs/latency.md, "Handing off") is another offer, since
the outcome under the old ticket does not count.
"""

from __future__ import annotations

from collections import OrderedDict

# Run, step, attempt and its ticket: the same attempt offered under another ticket (handed
# off afresh after a refusal) is another offer, not this one again.
TakenKey = tuple[str, str, int, str]
KEPT = 64  # far more than the offers that can be in flight for one runner


class Taken:
    """The last ``kept`` attempts taken, oldest forgotten first."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._keys: OrderedDict[TakenKey, None] = OrderedDict()

    def add(self, key: TakenKey) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.kept:
            self._keys.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)
