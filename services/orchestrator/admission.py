"""Which runs are under way (pure): at most ``bound`` of an orchestrator's runs at once, the
others waiting in the order they came (0: no bound).

Runs under way share the pool: with every run of a burst open at once, each freed runner
finds some run's next step, and every run ends near the end of the burst. Bounded, the
runs begun end first and the later ones wait their turn, stored (``RunRecord.waiting``)
with every step pending, so a client is answered at once and may cancel a waiting run
(docs/bursts.md, "Runs under way, bounded").
"""

from __future__ import annotations


class Admission:
    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.under_way: set[str] = set()
        self.waiting: dict[str, None] = {}  # in the order they came

    def arrive(self, run_id: str) -> bool:
        """A new run: under way now (True), or waiting for its turn (False)."""
        if self.bound <= 0 or (len(self.under_way) < self.bound and not self.waiting):
            self.under_way.add(run_id)
            return True
        self.waiting[run_id] = None
        return False

    def recovered(self, run_id: str, waiting: bool) -> None:
        """A live run taken over (rebuilt from its records, oldest first): one under way stays
        so, even past the bound; a waiting one waits behind those already waiting."""
        if waiting:
            self.waiting[run_id] = None
        else:
            self.under_way.add(run_id)

    def gone(self, run_id: str) -> None:
        """The run ended, was never made, or is not this orchestrator's any more: its place
        is free (``due`` says whose turn it is)."""
        self.under_way.discard(run_id)
        self.waiting.pop(run_id, None)

    def due(self) -> list[str]:
        """The waiting runs that fit under the bound now, oldest first; under way from now."""
        admitted: list[str] = []
        while self.waiting and (self.bound <= 0 or len(self.under_way) < self.bound):
            run_id = next(iter(self.waiting))
            del self.waiting[run_id]
            self.under_way.add(run_id)
            admitted.append(run_id)
        return admitted
