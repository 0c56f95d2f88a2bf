"""The dispatcher's pool and leases, pure."""

from __future__ import annotations

import msgspec
from heddle.services.dispatcher.pool import Pool
from heddle.shared.wire.contracts import RunnerInfo


def info(name: str, status: str = "idle", jobs: int = 0, run: str | None = None) -> RunnerInfo:
    return RunnerInfo(
        name=name,
        status=status,
        pid=1,
        version="t",
        started_at="",  # type: ignore[arg-type]
        seen_at="",
        jobs=jobs,
        run_id=run,
        step_id="s" if run else None,
        attempt=1 if run else None,
    )


def test_reserve_round_robin_and_never_twice() -> None:
    pool = Pool()
    for n in ("a", "b"):
        pool.update(info(n))
    first = pool.reserve(now=0)
    second = pool.reserve(now=0)
    assert {first, second} == {"a", "b"}
    assert pool.reserve(now=0) is None  # both reserved
    pool.accepted(first, "r", "s", 1, jobs=1)  # type: ignore[arg-type]
    assert pool.free(now=0) == []


def test_a_chain_placed_step_by_step_goes_round_the_pool() -> None:
    """Each step readied once the last one's runner is free again: the least recently used
    runner takes it, not the one just freed."""
    pool = Pool()
    for n in ("a", "b", "c"):
        pool.update(info(n))
    placed = []
    for i in range(6):
        name = pool.reserve(now=0)
        assert name is not None
        pool.accepted(name, "r", f"s{i}", 1, jobs=i + 1)
        assert pool.release(name, "r", f"s{i}", 1)
        placed.append(name)
    assert placed == ["a", "b", "c", "a", "b", "c"]


def test_lease_ends_on_finished_event_or_on_newer_idle_registry() -> None:
    pool = Pool()
    pool.update(info("a", jobs=3))
    assert pool.reserve(now=0) == "a"
    pool.accepted("a", "r", "s", 1, jobs=4)
    pool.update(info("a", status="idle", jobs=3))  # stale entry, from before the lease
    assert pool.free(now=0) == []
    assert not pool.release("a", "r", "s", 2)  # another attempt's event: not this lease
    assert pool.release("a", "r", "s", 1)
    assert pool.free(now=0) == ["a"]
    assert pool.reserve(now=0) == "a"
    pool.accepted("a", "r", "t", 1, jobs=5)
    pool.update(info("a", status="idle", jobs=5))  # the event was lost; the registry tells
    assert pool.free(now=0) == ["a"]


def test_refusals_set_a_runner_aside() -> None:
    pool = Pool(suspect_for=5.0)
    pool.update(info("a"))
    assert pool.reserve(now=0) == "a"
    pool.refused("a", silent=True, now=0)
    assert pool.free(now=4.9) == [] and pool.free(now=5.1) == ["a"]
    assert pool.reserve(now=6) == "a"
    pool.refused("a", silent=False, now=6)
    assert pool.free(now=6.1) == [] and pool.free(now=6.3) == ["a"]


def test_a_runner_that_did_not_answer_is_reserved_again_while_it_is_in_the_pool() -> None:
    """It may hold the attempt it gave no answer about: asked again, set aside or not,
    until it leaves the pool; no other step is given it meanwhile."""
    pool = Pool(suspect_for=5.0)
    pool.update(info("a"))
    assert pool.reserve(now=0) == "a"
    pool.refused("a", silent=True, now=0)
    assert pool.reserve_again("a")
    assert pool.busy("a") and pool.reserve(now=10) is None
    pool.accepted("a", "r", "s", 1, jobs=1)
    assert pool.leases["a"].step_id == "s"
    pool.remove("a")
    assert not pool.reserve_again("a") and not pool.busy("a")


def test_a_set_aside_runner_is_counted_out_of_the_free_once() -> None:
    """The free count (the pulls' credit) leaves out a runner set aside while it is idle, and
    not again once it is busy or gone: it is out of the idle ones then."""
    pool = Pool(suspect_for=5.0)
    for name in "abc":
        pool.update(info(name))
    assert pool.reserve(now=0) == "a"
    pool.refused("a", silent=True, now=0)
    assert pool.free_by_key(now=1) == {"": 2}
    assert pool.reserve_again("a")  # busy and set aside: counted out once
    assert pool.free_by_key(now=1) == {"": 2}
    assert pool.reserve(now=1) == "b"
    pool.refused("b", silent=True, now=1)
    pool.remove("b")
    assert pool.free_by_key(now=2) == {"": 1} == {"": len(pool.free(now=2))}


def test_leaving_drops_the_lease_and_busy_runners_are_leased_on_sight() -> None:
    pool = Pool()
    pool.update(info("a", status="busy", jobs=2, run="r"))  # busy before we started
    assert pool.free(now=0) == [] and pool.leases["a"].run_id == "r"
    lease = pool.remove("a")
    assert lease is not None and lease.run_id == "r"
    assert pool.free(now=0) == [] and "a" not in pool.runners


def test_finish_that_overtakes_the_acceptance_leaves_no_lease() -> None:
    pool = Pool()
    pool.update(info("a", jobs=0))
    assert pool.reserve(now=0) == "a"
    assert not pool.release("a", "r", "s", 1)  # the finished event came first
    pool.accepted("a", "r", "s", 1, jobs=1)
    assert pool.leases == {} and pool.free(now=0) == ["a"]
    # A late registry entry saying busy with that job does not bring the lease back.
    pool.update(info("a", status="busy", jobs=1, run="r"))
    assert pool.free(now=0) == ["a"]


def test_a_restarted_process_under_the_same_name_drops_the_old_lease() -> None:
    pool = Pool()
    pool.update(info("runner-0", jobs=0))
    assert pool.reserve(now=0) == "runner-0"
    pool.accepted("runner-0", "r", "s", 1, jobs=1)  # then the pod dies mid-step
    reborn = info("runner-0", jobs=0)
    reborn.pid, reborn.started_at = 2, "later"
    pool.update(reborn)
    assert pool.leases == {} and pool.free(now=0) == ["runner-0"]


def test_packed_pool_fills_the_lowest_ordinals_first() -> None:
    pool = Pool(pack=lambda name: int(name.rsplit("-", 1)[1]))
    for n in ("runner-3", "runner-1", "runner-0", "runner-2"):
        pool.update(info(n))
    assert pool.reserve(now=5) == "runner-0"
    pool.accepted("runner-0", "r", "s", 1, jobs=1)
    assert pool.reserve(now=6) == "runner-1"
    pool.refused("runner-1", silent=False, now=6)
    assert pool.reserve(now=7) == "runner-1"  # round robin would have taken runner-2
    assert pool.busy("runner-1") and pool.busy("runner-0") and not pool.busy("runner-2")
    assert pool.reserved_at == {"runner-0": 5, "runner-1": 7}
    pool.remove("runner-1")
    assert "runner-1" not in pool.reserved_at


def test_a_runner_set_aside_is_given_no_step() -> None:
    pool = Pool()
    for n in ("a", "b"):
        pool.update(info(n))
    pool.set_aside = {"a"}
    assert pool.free(now=0) == ["b"]
    assert pool.reserve(now=0) == "b"
    assert pool.reserve(now=0) is None  # "a" is free, but drained
    pool.set_aside = set()
    assert pool.reserve(now=0) == "a"


def test_two_dispatchers_pools_share_a_runner_without_leasing_it_twice() -> None:
    """Two dispatchers, one runner: both may see it free, but only the one whose offer the
    runner accepted holds a lease; the other's offer is refused (the runner is busy), sets
    it aside, and its pool leases it on sight of the busy registry entry until the
    attempt's finished event or the idle entry, also when those come in the other order."""
    a, b = Pool(), Pool()
    for pool in (a, b):
        pool.update(info("r0", jobs=0))
    assert a.reserve(now=0) == "r0" and b.reserve(now=0) == "r0"  # both views stale
    a.accepted("r0", "run", "s", 1, jobs=1)
    b.refused("r0", silent=False, now=0)  # the runner answered "busy"
    assert b.leases == {} and b.free(now=0.1) == []
    b.update(info("r0", status="busy", jobs=1, run="run"))
    assert b.leases["r0"].jobs == 1 and b.free(now=1) == []
    for pool in (a, b):  # the finished event reaches every dispatcher
        assert pool.release("r0", "run", "s", 1)
        pool.update(info("r0", status="busy", jobs=1, run="run"))  # a stale entry: no lease
        assert pool.free(now=1) == ["r0"]
    # The other order: the event first (nothing to release yet), then the busy entry.
    assert a.reserve(now=2) == "r0"
    a.accepted("r0", "run", "t", 1, jobs=2)
    assert not b.release("r0", "run", "t", 1)
    b.update(info("r0", status="busy", jobs=2, run="run"))
    assert b.free(now=2) == []
    b.update(info("r0", status="idle", jobs=2))
    assert b.free(now=2) == ["r0"]


def test_an_outcome_that_says_its_count_outdates_the_busy_entries_before_it() -> None:
    """An outcome carries the runner's count of the attempt: a registry entry written while
    it ran, arriving after it, leases nothing, in the dispatcher that placed the step (its
    outcome came before its acceptance was read) and in one that did not."""
    a, b = Pool(), Pool()
    for pool in (a, b):
        pool.update(info("r0", jobs=0))
    assert a.reserve(now=0) == "r0"
    for pool in (a, b):
        assert not pool.release("r0", "run", "s", 1, jobs=1)  # a: before the acceptance
        pool.update(info("r0", status="busy", jobs=1, run="run"))  # written while it ran
    a.accepted("r0", "run", "s", 1, jobs=1)
    assert a.leases == {} and b.leases == {}
    assert a.free(now=1) == ["r0"] and b.free(now=1) == ["r0"]
    # A later attempt's entry still leases it.
    b.update(info("r0", status="busy", jobs=2, run="run"))
    assert b.free(now=1) == []


def test_a_runner_that_went_on_to_a_continuation_stays_busy() -> None:
    """An outcome naming a continuation (docs/latency.md, "Continuing a chain"): the
    runner holds that attempt now, leased or not, set aside or not."""
    pool = Pool()
    pool.update(info("a", jobs=3))
    assert pool.reserve(now=0) == "a"
    pool.accepted("a", "r", "s", 1, jobs=4)
    assert not pool.release("a", "r", "s", 1, continued="t")
    assert pool.busy("a") and pool.free(now=0) == []
    pool.update(info("a", status="idle", jobs=4))  # older than the continuation: still busy
    assert pool.busy("a")
    assert pool.release("a", "r", "t", 1)  # its outcome ends it
    assert pool.free(now=0) == ["a"]
    # A runner set aside by a refusal (it was busy with a step handed to it) stays aside.
    pool.refused("a", silent=False, now=0)
    assert not pool.release("a", "r", "u", 1, continued="v")
    assert pool.free(now=0.1) == []


def test_a_continuation_named_by_an_outcome_that_overtook_the_acceptance_holds_the_runner() -> None:
    """A step placed by a dispatcher carries its continuation (docs/latency.md): its
    runner's outcome, naming the continuation it went on to, can come before its acceptance."""
    pool = Pool()
    pool.update(info("a", jobs=3))
    assert pool.reserve(now=0) == "a"
    assert not pool.release("a", "r", "s", 1, continued="t")  # before the acceptance
    pool.accepted("a", "r", "s", 1, jobs=4)
    assert pool.busy("a") and pool.free(now=0) == []
    pool.update(info("a", status="idle", jobs=4))  # older than the continuation: still busy
    assert pool.busy("a")
    assert pool.release("a", "r", "t", 1)  # its outcome ends it
    assert pool.free(now=0) == ["a"]


def labelled(name: str, pool: str, labels: list[str]) -> RunnerInfo:
    return RunnerInfo(
        name=name, status="idle", pid=1, version="t", started_at="", seen_at="", pool=pool,
        labels=labels,
    )  # fmt: skip


def test_a_runner_is_reserved_only_for_the_label_keys_it_serves() -> None:
    pool = Pool()
    pool.update(info("cpu"))  # an older runner: no pool or labels written, the default pool
    pool.update(labelled("gpu", "gpu", ["a100", "gpu"]))
    # "default" alone is the default pool's lane, "": no lane of its own.
    assert pool.served() == {"", "gpu", "a100", "a100+gpu"}
    assert pool.free_by_key(now=0) == {"": 1, "gpu": 1, "a100": 1, "a100+gpu": 1}
    assert pool.reserve(now=0, key="") == "cpu"
    assert pool.reserve(now=0, key="") is None  # the GPU runner takes no default step
    assert pool.reserve(now=0, key="tpu") is None
    assert pool.reserve(now=0, key="a100+gpu") == "gpu"
    assert pool.free_by_key(now=0) == {}


def test_the_generation_counts_changes_to_what_runners_serve() -> None:
    pool = Pool()
    pool.update(labelled("g", "gpu", ["gpu"]))
    first = pool.generation
    pool.update(labelled("g", "gpu", ["gpu"]))  # a refresh: nothing new to serve
    assert pool.generation == first
    pool.update(labelled("g", "gpu", ["fast", "gpu"]))
    assert pool.generation == first + 1 and "fast+gpu" in pool.served()
    pool.remove("g")
    assert pool.generation == first + 2 and pool.served() == frozenset()


def restricted(name: str, pool: str, *namespaces: str) -> RunnerInfo:
    return msgspec.structs.replace(labelled(name, pool, [pool]), namespaces=list(namespaces))


def test_a_runner_restricted_to_namespaces_is_free_for_their_steps_alone() -> None:
    pool = Pool()
    pool.update(restricted("gpu-a", "gpu", "team-a"))
    pool.update(labelled("gpu-any", "gpu", ["gpu"]))
    assert pool.free(now=0, key="gpu") == ["gpu-a", "gpu-any"]  # no namespace: any
    # A step of team-a takes the runner restricted to it first: the other is kept for
    # the namespaces it alone serves.
    assert pool.free(now=0, key="gpu", namespace="team-a") == ["gpu-a", "gpu-any"]
    assert pool.free(now=0, key="gpu", namespace="team-b") == ["gpu-any"]
    assert pool.serving("gpu") == [frozenset({"team-a"}), None]
    assert pool.reserve(now=0, key="gpu", namespace="team-b") == "gpu-any"
    assert not pool.any_free("gpu", now=0, namespace="team-b")
    assert pool.any_free("gpu", now=0, namespace="team-a")
    assert pool.serves_any("gpu", "team-b") and not pool.serves_any("tpu", "team-a")
    pool.remove("gpu-any")
    assert not pool.serves_any("gpu", "team-b") and pool.serves_any("gpu", "team-a")


def test_without_restricted_runners_the_namespace_asks_nothing() -> None:
    pool = Pool()
    pool.update(info("a"))
    assert pool.serving("") is None
    assert pool.free(now=0, namespace="team-b") == ["a"]
    pool.update(restricted("a", "default", "team-a"))
    assert pool.free(now=0, namespace="team-b") == []
    pool.update(info("a"))  # its restriction lifted
    assert pool.namespaces == {} and pool.free(now=0, namespace="team-b") == ["a"]
