"""shared/core/dag.py: structural problems, cycles, deterministic order, ready set, downstream."""

from __future__ import annotations

import graphlib
import random

import pytest
from heddle.shared.core.dag import (
    Graph,
    Readiness,
    acyclic,
    doomed,
    find_cycle,
    structural_problems,
    topological_order,
)
from heddle.shared.wire.errors import Problem

Deps = list[tuple[str, list[str]]]


def chain(n: int) -> Deps:
    return [(f"s{i}", [f"s{i - 1}"] if i else []) for i in range(n)]


def fan(width: int) -> Deps:
    mids = [f"m{i}" for i in range(width)]
    return [("root", []), *[(m, ["root"]) for m in mids], ("join", mids)]


# ---- one problem of each kind ----------------------------------------------------------

PROBLEM_CASES = [
    pytest.param(
        [("a", []), ("b", []), ("a", [])],
        "steps[2].id",
        ["duplicate", "'a'", "steps[0]"],
        id="duplicate-id",
    ),
    pytest.param(
        [("a", []), ("b", ["a", "ghost"])],
        "steps[1].dependsOn[1]",
        ["unknown", "'ghost'"],
        id="unknown-dependency",
    ),
    pytest.param(
        [("a", []), ("b", ["a", "b"])],
        "steps[1].dependsOn[1]",
        ["itself", "'b'"],
        id="self-dependency",
    ),
    pytest.param(
        [("a", []), ("b", ["a", "a"])],
        "steps[1].dependsOn[1]",
        ["twice", "'a'"],
        id="repeated-dependency",
    ),
    pytest.param(
        [("a", ["c"]), ("b", ["a"]), ("c", ["b"])],
        "steps[0].dependsOn",
        ["cycle", "a", "b", "c"],
        id="cycle-of-three",
    ),
    pytest.param(
        [("x", ["y"]), ("y", ["x"])], "steps[0].dependsOn", ["cycle", "x", "y"], id="cycle-of-two"
    ),
]


@pytest.mark.parametrize(("deps", "path", "words"), PROBLEM_CASES)
def test_each_problem_kind_is_located_and_named(deps: Deps, path: str, words: list[str]) -> None:
    problems = structural_problems(deps)
    assert len(problems) == 1, problems
    assert problems[0].path == path
    for word in words:
        assert word in problems[0].message


def test_cycle_message_names_exactly_the_steps_in_the_cycle() -> None:
    deps = [("root", []), ("p", ["root", "r"]), ("q", ["p"]), ("r", ["q"]), ("leaf", ["r"])]
    [problem] = structural_problems(deps)
    loop = problem.message.removeprefix("cycle: ").split(" -> ")
    assert loop[0] == loop[-1]
    assert set(loop) == {"p", "q", "r"}
    assert problem.path == f"steps[{[d[0] for d in deps].index(loop[0])}].dependsOn"


def test_several_structural_problems_are_all_reported() -> None:
    deps = [
        ("a", []),
        ("a", []),  # duplicate
        ("b", ["ghost"]),  # unknown
        ("c", ["c"]),  # self
        ("d", ["a", "a"]),  # repeated
    ]
    assert structural_problems(deps) == [
        Problem("steps[1].id", "duplicate step id 'a' (first at steps[0])"),
        Problem("steps[2].dependsOn[0]", "unknown step 'ghost'"),
        Problem("steps[3].dependsOn[0]", "step 'c' depends on itself"),
        Problem("steps[4].dependsOn[1]", "dependency 'a' listed twice"),
    ]


def test_a_dependency_listed_many_times_is_two_problems_at_most() -> None:
    deps = [("a", ["ghost"] * 10_000 + ["a"] * 3), ("b", ["a", "a", "a"])]
    assert structural_problems(deps) == [
        Problem("steps[0].dependsOn[0]", "unknown step 'ghost'"),
        Problem("steps[0].dependsOn[1]", "dependency 'ghost' listed twice"),
        Problem("steps[0].dependsOn[10000]", "step 'a' depends on itself"),
        Problem("steps[0].dependsOn[10001]", "dependency 'a' listed twice"),
        Problem("steps[1].dependsOn[1]", "dependency 'a' listed twice"),
    ]


def test_cycle_is_reported_alongside_an_unknown_dependency() -> None:
    # A cycle among x and y is a problem of its own: fixing the unknown id in z does not
    # fix it, so the user should hear about both at once.
    deps = [("x", ["y"]), ("y", ["x"]), ("z", ["ghost"])]
    problems = structural_problems(deps)
    assert Problem("steps[2].dependsOn[0]", "unknown step 'ghost'") in problems
    cycles = [p for p in problems if "cycle" in p.message]
    assert len(cycles) == 1, problems
    assert cycles[0].path in ("steps[0].dependsOn", "steps[1].dependsOn")
    assert "x" in cycles[0].message and "y" in cycles[0].message


def test_prefix_is_used_in_paths() -> None:
    [problem] = structural_problems([("a", ["nope"])], prefix="workflow.steps")
    assert problem.path == "workflow.steps[0].dependsOn[0]"


# ---- find_cycle -------------------------------------------------------------------------


@pytest.mark.parametrize("deps", [chain(5), fan(4), [("a", []), ("b", [])], [("a", [])]])
def test_find_cycle_is_none_for_a_dag(deps: Deps) -> None:
    assert find_cycle(Graph(deps)) is None


@pytest.mark.parametrize(
    ("deps", "members"),
    [
        ([("a", ["b"]), ("b", ["a"])], {"a", "b"}),
        ([("r", []), ("a", ["r", "c"]), ("b", ["a"]), ("c", ["b"])], {"a", "b", "c"}),
        (
            [("ok1", []), ("ok2", ["ok1"]), ("u", ["w"]), ("v", ["u"]), ("w", ["v"])],
            {"u", "v", "w"},
        ),
    ],
)
def test_find_cycle_returns_the_cycle_in_dependency_order(deps: Deps, members: set[str]) -> None:
    graph = Graph(deps)
    cycle = find_cycle(graph)
    assert cycle is not None
    assert set(cycle) == members and len(cycle) == len(members)
    for parent, child in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        assert parent in graph.parents[child]


def test_find_cycle_on_a_50000_step_ring() -> None:
    deps = chain(50_000)
    deps[0] = ("s0", ["s49999"])
    cycle = find_cycle(Graph(deps))
    assert cycle is not None and len(cycle) == 50_000


# ---- topological order ------------------------------------------------------------------

ORDER_CASES = [
    pytest.param([("c", []), ("a", []), ("b", [])], ["c", "a", "b"], id="no-edges-input-order"),
    pytest.param([("x", ["z"]), ("y", []), ("z", [])], ["y", "z", "x"], id="child-written-first"),
    pytest.param(
        [("d", ["b", "c"]), ("c", ["a"]), ("b", ["a"]), ("a", [])],
        ["a", "c", "b", "d"],
        id="diamond-written-backwards",
    ),
    pytest.param([("b", ["a"]), ("a", []), ("c", [])], ["a", "b", "c"], id="earliest-ready-wins"),
    pytest.param(chain(4)[::-1], ["s0", "s1", "s2", "s3"], id="reversed-chain"),
]


@pytest.mark.parametrize(("deps", "expected"), ORDER_CASES)
def test_topological_order_breaks_ties_by_input_order(deps: Deps, expected: list[str]) -> None:
    assert topological_order(Graph(deps)) == expected


def reference_order(deps: Deps) -> list[str]:
    """Quadratic reference: repeatedly take the earliest-written step whose parents are done."""
    done: set[str] = set()
    order: list[str] = []
    while len(order) < len(deps):
        step = next(s for s, ps in deps if s not in done and all(p in done for p in ps))
        done.add(step)
        order.append(step)
    return order


@pytest.mark.parametrize("seed", range(20))
def test_topological_order_matches_reference_on_random_dags(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    names = [f"n{i}" for i in range(n)]
    deps = [(names[i], rng.sample(names[:i], rng.randint(0, min(i, 3)))) for i in range(n)]
    rng.shuffle(deps)  # written in any order; edges still form a DAG
    graph = Graph(deps)
    order = topological_order(graph)
    assert order == reference_order(deps)
    assert order == topological_order(Graph(list(deps)))


def test_topological_order_raises_on_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        topological_order(Graph([("a", []), ("b", ["c"]), ("c", ["b"])]))


# ---- large graphs -----------------------------------------------------------------------


def test_50000_step_chain_is_clean_and_ordered() -> None:
    deps = chain(50_000)
    assert structural_problems(deps) == []
    graph = Graph(deps)
    order = topological_order(graph)
    assert order == [s for s, _ in deps]
    assert topological_order(graph) == order
    reached = doomed(graph, "s0", ())
    assert len(reached) == 49_999 and reached[-1] == ("s49999", "s49998")


def test_5000_wide_fan_out_and_join_is_clean_and_ordered() -> None:
    deps = fan(5000)
    assert structural_problems(deps) == []
    graph = Graph(deps)
    order = topological_order(graph)
    assert order == [s for s, _ in deps]
    assert order == topological_order(graph) == topological_order(Graph(fan(5000)))
    assert graph.roots() == ["root"]
    readiness = Readiness(graph, ["root"])
    assert [readiness.succeed(f"m{i}") for i in range(4999)] == [[]] * 4999
    assert readiness.waiting("join") == 1
    assert readiness.succeed("m4999") == ["join"]


# ---- ready set and what a failure dooms ----------------------------------------------

DIAMOND = [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"]), ("e", [])]


def test_readiness_releases_a_child_when_its_last_parent_succeeds() -> None:
    readiness = Readiness(Graph(DIAMOND))
    assert [readiness.waiting(s) for s in "abcde"] == [0, 1, 1, 2, 0]
    assert readiness.succeed("a") == ["b", "c"]
    assert readiness.succeed("c") == []
    assert readiness.waiting("d") == 1
    assert readiness.succeed("b") == ["d"]
    assert readiness.succeed("e") == []
    assert readiness.succeed("d") == []


@pytest.mark.parametrize(
    ("succeeded", "waiting"),
    [
        ([], [0, 1, 1, 2, 0]),
        (["a"], [0, 0, 0, 2, 0]),
        (["a", "b"], [0, 0, 0, 1, 0]),
        (["a", "b", "c", "e"], [0, 0, 0, 0, 0]),
    ],
)
def test_readiness_resumes_from_the_steps_already_succeeded(
    succeeded: list[str], waiting: list[int]
) -> None:
    readiness = Readiness(Graph(DIAMOND), succeeded)
    assert [readiness.waiting(s) for s in "abcde"] == waiting


def test_doomed_is_breadth_first_with_the_parent_reached_from() -> None:
    deps = [
        ("a", []),
        ("b", ["a"]),
        ("c", ["a"]),
        ("d", ["b"]),
        ("e", ["c"]),
        ("f", ["d"]),
        ("g", ["c", "f"]),
        ("other", []),
    ]
    # Depth-first would give b, d, f, g, c, e.
    assert doomed(Graph(deps), "a", ()) == [
        ("b", "a"),
        ("c", "a"),
        ("d", "b"),
        ("e", "c"),
        ("g", "c"),
        ("f", "d"),
    ]


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ("a", [("b", "a"), ("c", "a"), ("d", "b")]),
        ("c", [("d", "c")]),
        ("d", []),
        ("e", []),
    ],
)
def test_doomed_of_each_diamond_step(origin: str, expected: list[tuple[str, str]]) -> None:
    assert doomed(Graph(DIAMOND), origin, ()) == expected


@pytest.mark.parametrize(
    ("conditional", "expected"),
    [
        ({"b"}, [("c", "a"), ("d", "c")]),  # d is still doomed through c
        ({"b", "c"}, []),  # a conditional step stops the doom; d waits for b and c
        ({"d"}, [("b", "a"), ("c", "a")]),
    ],
)
def test_a_conditional_step_is_not_doomed_nor_passed_through(
    conditional: set[str], expected: list[tuple[str, str]]
) -> None:
    assert doomed(Graph(DIAMOND), "a", conditional) == expected


def test_a_conditional_child_is_due_once_every_parent_has_ended_however() -> None:
    readiness = Readiness(Graph(DIAMOND), conditional={"d"})
    assert readiness.unsettled("d") == 2 and readiness.unsettled("b") is None
    assert readiness.succeed("a") == ["b", "c"]
    assert readiness.end("b") == []  # b failed: d still waits for c
    assert readiness.unsettled("d") == 1
    assert readiness.succeed("c") == ["d"]  # not ready by success alone: its parents ended


def test_a_conditional_child_is_due_when_its_last_parent_fails() -> None:
    readiness = Readiness(Graph(DIAMOND), conditional={"d"})
    readiness.succeed("a")
    assert readiness.succeed("b") == []
    assert readiness.end("c") == ["d"]


def test_ending_a_step_releases_no_plain_child() -> None:
    readiness = Readiness(Graph(DIAMOND), conditional={"d"})
    assert readiness.end("a") == []  # b and c are doomed instead (``doomed``)
    assert readiness.waiting("b") == 1


@pytest.mark.parametrize(
    ("succeeded", "ended", "unsettled"),
    [([], [], 2), (["a", "b"], [], 1), (["a"], ["b"], 1), (["a"], ["b", "c"], 0)],
)
def test_readiness_resumes_the_conditional_steps_from_those_ended(
    succeeded: list[str], ended: list[str], unsettled: int
) -> None:
    readiness = Readiness(Graph(DIAMOND), succeeded, ended, conditional={"d"})
    assert readiness.unsettled("d") == unsettled


def test_graph_indexes_roots_edges_and_children() -> None:
    graph = Graph(DIAMOND)
    assert graph.roots() == ["a", "e"]
    assert graph.edges() == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    assert graph.children["a"] == ["b", "c"]
    assert graph.index == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}


def test_acyclic_agrees_with_the_standard_librarys_topological_sorter() -> None:
    """Every graph on four nodes (each of the 12 possible edges in or out)."""

    nodes = ["a", "b", "c", "d"]
    pairs = [(p, c) for p in nodes for c in nodes if p != c]
    for mask in range(1 << len(pairs)):
        parents: dict[str, list[str]] = {n: [] for n in nodes}
        for bit, (p, c) in enumerate(pairs):
            if mask >> bit & 1:
                parents[c].append(p)
        try:
            tuple(graphlib.TopologicalSorter(parents).static_order())
            expected = True
        except graphlib.CycleError:
            expected = False
        graph = Graph(list(parents.items()))
        assert acyclic(graph) is expected, parents
        assert (find_cycle(graph) is None) is expected, parents
