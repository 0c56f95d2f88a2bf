"""The collector pause around a big synchronous piece of work (shared/runtime/gc_pause.py)."""

from __future__ import annotations

import gc

import pytest
from heddle.shared.runtime.gc_pause import gc_paused


def test_the_collector_is_off_inside_and_as_it_was_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # left off: whoever turned it off turns it on
    finally:
        gc.enable()
