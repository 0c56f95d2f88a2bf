"""Which runs are under way (pure): at most ``bound`` of an orchestrator's runs at once, the
others waiting their turn, the highest priority first, then the first come (0: no bound).

Runs under way share the pool: with every run of a burst open at once, each freed runner
finds some run's next step, and every run ends near the end of the burst. Bounded, the
runs begun end first and the later ones wait their turn, stored (``RunRecord.waiting``)
with every step pending, so a client is answered at once and may cancel a waiting run
(docs/bursts.md, "Runs under way, bounded").
"""

from __future__ import annotations

import heapq
import itertools

from heddle.shared.core.priority import line_key


class Admission:
    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.under_way: set[str] = set()
        self.waiting: dict[str, tuple[int, int]] = {}  # run -> its place (line_key)
        # The same places in a heap; an entry whose run left the line is skipped when met.
        self._line: list[tuple[int, int, str]] = []
        self._arrivals = itertools.count()

    def arrive(self, run_id: str, priority: int = 0, past_bound: bool = False) -> bool:
        """A new run: under way now (True), or waiting for its turn (False); ``past_bound``
        (a call's child run, whose parent holds a place), under way whatever the bound."""
        if past_bound or self.bound <= 0 or (len(self.under_way) < self.bound and not self.waiting):
            self.under_way.add(run_id)
            return True
        self._wait(run_id, priority)
        return False

    def recovered(self, run_id: str, waiting: bool, priority: int = 0) -> None:
        """A live run taken over (rebuilt from its records, oldest first): one under way stays
        so, even past the bound; a waiting one takes its place in the line by its priority,
        behind those of its priority already waiting."""
        if waiting:
            self._wait(run_id, priority)
        else:
            self.under_way.add(run_id)

    def gone(self, run_id: str) -> None:
        """The run ended, was never made, or is not this orchestrator's any more: its place
        is free (``due`` says whose turn it is)."""
        self.under_way.discard(run_id)
        if (
            self.waiting.pop(run_id, None) is not None
            and len(self._line) > 2 * len(self.waiting) + 64
        ):  # mostly runs gone while waiting (cancelled): the heap made again
            self._line = [(*place, r) for r, place in self.waiting.items()]
            heapq.heapify(self._line)

    def due(self) -> list[str]:
        """The waiting runs that fit under the bound now, in their turn; under way from now."""
        admitted: list[str] = []
        while self.waiting and (self.bound <= 0 or len(self.under_way) < self.bound):
            run_id = self._next()
            del self.waiting[run_id]
            self.under_way.add(run_id)
            admitted.append(run_id)
        return admitted

    def line(self) -> list[str]:
        """The waiting runs in the order they will be admitted."""
        return sorted(self.waiting, key=self.waiting.__getitem__)

    def _wait(self, run_id: str, priority: int) -> None:
        place = line_key(priority, next(self._arrivals))
        self.waiting[run_id] = place
        heapq.heappush(self._line, (*place, run_id))

    def _next(self) -> str:
        """The first run of the line (there is one): entries of runs gone are dropped."""
        while True:
            key, arrival, run_id = heapq.heappop(self._line)
            if self.waiting.get(run_id) == (key, arrival):
                return run_id
