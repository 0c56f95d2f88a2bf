"""Python's cyclic garbage collector paused around one big, synchronous piece of work.

Decoding and checking a 100,000-step workflow allocates a few million objects, none of them
garbage in a cycle; the collector, triggered every 700 allocations, then walks the growing
heap again and again and takes most of the time (three quarters of a 100,000-step check on
the benchmark machine). Nothing else runs during such work (it holds the event loop), so
pausing the collector for its length changes nothing else; it runs as usual afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
