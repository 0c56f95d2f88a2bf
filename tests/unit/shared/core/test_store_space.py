"""The store's room (shared/core/store_space.py): which refusals mean a full store, when a
new run may take room, how much of the logs gives way, and the dropped lines' note."""

from __future__ import annotations

import pytest
from heddle.shared.core.store_space import (
    StoreUse,
    admits_new_run,
    dropped_note,
    full_message,
    is_store_full,
    limit_of,
    log_bytes_to_free,
    log_messages_to_keep,
    refusal,
)

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("code", "description"),
    [
        (10002, "resource limits exceeded for account"),
        (10023, "insufficient resources"),
        (10047, "insufficient storage resources available"),
        (10077, "maximum bytes exceeded"),
    ],
)
def test_the_servers_refusals_for_room_are_a_full_store(code: int, description: str) -> None:
    assert is_store_full(code, description)


@pytest.mark.parametrize(
    ("code", "description"),
    [
        (10071, "wrong last sequence: 3"),  # a compare-and-set lost
        (10077, "message size exceeds maximum allowed"),  # too large, not out of room
        (10077, None),
        (None, "maximum bytes exceeded"),
        (10059, "stream not found"),
    ],
)
def test_other_refusals_are_not(code: int | None, description: str | None) -> None:
    assert not is_store_full(code, description)


def test_the_message_names_the_store_and_the_servers_words() -> None:
    message = full_message("insufficient resources")
    assert message.startswith("the store is full")
    assert "(insufficient resources)" in message


def test_the_accounts_limit_else_the_setting() -> None:
    assert limit_of(-1, 0) == 0  # neither: none known
    assert limit_of(8 * MIB, 0) == 8 * MIB
    assert limit_of(8 * MIB, 4 * MIB) == 8 * MIB  # raised by a reload: the server's word
    assert limit_of(-1, 4 * MIB) == 4 * MIB  # a server's whole store, the account unlimited


def test_a_store_with_no_known_limit_always_admits() -> None:
    use = StoreUse(used=10**12, reserved=0, limit=0)
    assert use.free is None
    assert admits_new_run(use, reserve=MIB)
    assert log_bytes_to_free(use, reserve=MIB) == 0


def test_a_new_run_is_admitted_only_past_the_reserve() -> None:
    reserve = MIB
    assert admits_new_run(StoreUse(used=2 * MIB, reserved=0, limit=4 * MIB), reserve)
    assert not admits_new_run(StoreUse(used=3 * MIB, reserved=0, limit=4 * MIB), reserve)
    assert not admits_new_run(StoreUse(used=5 * MIB, reserved=0, limit=4 * MIB), reserve)
    # No reserve: refused only when nothing at all is free.
    assert admits_new_run(StoreUse(used=4 * MIB - 1, reserved=0, limit=4 * MIB), 0)
    assert not admits_new_run(StoreUse(used=4 * MIB, reserved=0, limit=4 * MIB), 0)


def test_the_refusal_says_how_full_and_what_is_kept() -> None:
    text = refusal(StoreUse(used=3 * MIB, reserved=0, limit=4 * MIB), MIB)
    assert text.startswith("the store is full")
    assert f"{3 * MIB} of {4 * MIB} bytes used" in text
    assert f"the last {MIB} are kept for the runs under way" in text


def test_logs_give_way_by_what_the_reserve_lacks() -> None:
    limit, reserve = 4 * MIB, MIB
    assert log_bytes_to_free(StoreUse(used=2 * MIB, reserved=0, limit=limit), reserve) == 0
    assert log_bytes_to_free(StoreUse(used=3 * MIB, reserved=0, limit=limit), reserve) == 0
    lacking = StoreUse(used=3 * MIB + 100, reserved=0, limit=limit)
    assert log_bytes_to_free(lacking, reserve) == 100
    over = StoreUse(used=5 * MIB, reserved=0, limit=limit)  # filled by another past its limit
    assert log_bytes_to_free(over, reserve) == reserve


def test_the_oldest_logs_purged_at_their_average_size() -> None:
    # 1000 messages of 100 bytes: 250 bytes to free are three messages.
    assert log_messages_to_keep(1000, 100_000, 250) == 997
    assert log_messages_to_keep(1000, 100_000, 0) == 1000
    assert log_messages_to_keep(1000, 100_000, 10**9) == 0  # every log, and no fewer
    assert log_messages_to_keep(0, 0, 500) == 0


def test_the_note_counts_the_lines() -> None:
    assert dropped_note(1) == "1 line dropped: the store was full"
    assert dropped_note(20) == "20 lines dropped: the store was full"
