"""Which partitions an orchestrator takes, gives and frees (services/orchestrator/ownership.py),
checked directly, and over every small world, keys of earlier lives included: the moves always
lead to one holder per partition, the assignment spread evenly, and never to a partition taken
from a live holder."""

from __future__ import annotations

import itertools

import pytest
from heddle.services.orchestrator.ownership import Holder, assignment, moves
from heddle.shared.core.partitions import partition_of

A, B, C = Holder("a", "1"), Holder("b", "1"), Holder("c", "1")
# Keys of a name that no process of it acts on: an earlier life's, or a give's lost delete.
A0, B0 = Holder("a", "0"), Holder("b", "0")


def test_the_assignment_deals_the_partitions_in_turn_over_the_sorted_members() -> None:
    assert assignment(["b", "a"], 5) == {0: "a", 1: "b", 2: "a", 3: "b", 4: "a"}
    assert assignment([], 3) == {}
    counts = [list(assignment(["a", "b", "c"], 12).values()).count(m) for m in "abc"]
    assert counts == [4, 4, 4]


def test_alone_it_takes_every_free_partition() -> None:
    m = moves(A, [], {}, 4)
    assert (m.take, m.give) == ({0, 1, 2, 3}, set())


def test_it_never_takes_from_a_live_holder_and_gives_what_another_live_member_is_due() -> None:
    holders = {p: A for p in range(4)}
    # b joined: a gives b its share; b waits for it, taking nothing a holds.
    assert moves(A, ["a", "b"], holders, 4).give == {1, 3}
    assert moves(B, ["a", "b"], holders, 4).take == set()
    # Once given back (keys freed), b takes them.
    freed = {0: A, 2: A}
    assert moves(B, ["a", "b"], freed, 4).take == {1, 3}


def test_a_silent_holders_partitions_go_to_the_live_members() -> None:
    holders = {0: A, 1: B, 2: C, 3: A, 4: B, 5: C}
    # c fell silent: a and b share all six between them.
    take_a = moves(A, ["a", "b"], holders, 6).take
    take_b = moves(B, ["a", "b"], holders, 6).take
    assert take_a | take_b == {2, 5} and not take_a & take_b
    # b's own partition 4 is assigned to a now, but b is alive: a waits for b to give it.
    assert 4 not in take_a and 4 in moves(B, ["a", "b"], holders, 6).give


def test_an_earlier_life_of_the_same_name_is_gone_at_once() -> None:
    before = Holder("a", "old")
    m = moves(A, ["a"], {0: before, 1: before}, 2)
    assert m.take == {0, 1}


def test_a_key_of_its_name_it_does_not_act_on_is_freed_for_the_member_it_is_due() -> None:
    # b is due partition 1, whose key names a (a give whose delete was lost): b may not take
    # it from a live "a", so a frees it; one due to a is taken back instead.
    assert moves(B, ["a", "b"], {1: A0}, 2).take == set()
    m = moves(A, ["a", "b"], {0: A0, 1: A0}, 2)
    assert (m.take, m.give, m.free) == ({0}, set(), {1})
    # Nobody frees a key of another name, nor one it holds.
    assert moves(A, ["a", "b"], {1: B0}, 2).free == set()
    assert moves(A, ["a", "b"], {1: A}, 2).free == set()


def test_a_member_never_gives_when_no_other_is_alive() -> None:
    assert moves(A, [], {0: A, 1: A}, 2).give == set()
    # b holds 1 but is not alive: a takes it.
    assert moves(A, [], {0: A, 1: B}, 2).take == {1}


def _settle(members: list[Holder], alive: set[str], holders: dict[int, Holder], partitions: int):
    """Apply every live member's moves until nothing changes; give frees, take acquires
    only a free partition or one whose holder is not alive (as the compare-and-set does)."""
    for _ in range(20):
        changed = False
        for me in members:
            if me.name not in alive:
                continue
            m = moves(me, alive - {me.name}, holders, partitions)
            for p in m.give | m.free:
                holders.pop(p)
                changed = True
            for p in m.take:
                holder = holders.get(p)
                assert holder is None or holder.name not in alive or holder.name == me.name, (
                    "took from a live holder"
                )
                holders[p] = me
                changed = True
        if not changed:
            return holders
    raise AssertionError("the moves do not settle")


@pytest.mark.parametrize("partitions", [1, 2, 3, 5, 12])
def test_every_world_settles_on_one_live_holder_per_partition(partitions: int) -> None:
    members = [A, B, C]
    names = ["a", "b", "c"]
    for alive_count in (1, 2, 3):
        for alive in itertools.combinations(names, alive_count):
            for start in itertools.product([None, A, B, C, A0, B0], repeat=min(partitions, 3)):
                holders = {p: h for p, h in enumerate(start) if h is not None}
                settled = _settle(members, set(alive), holders, partitions)
                assert set(settled) == set(range(partitions))
                assert all(h.name in alive for h in settled.values())
                assert settled == {
                    p: Holder(n, "1") for p, n in assignment(alive, partitions).items()
                }


def test_the_partition_of_a_run_is_fnv1a_of_its_id() -> None:
    # The server's own transform is checked against this function in test_partitions.py.
    assert partition_of("", 12) == 0x811C9DC5 % 12
    spread = [partition_of(f"run-{i}", 12) for i in range(1200)]
    assert all(60 <= spread.count(p) <= 140 for p in range(12))
