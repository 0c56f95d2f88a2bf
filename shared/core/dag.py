"""Pure DAG logic: structural checks, deterministic topological order, ready set and the
breadth-first set of steps a failure makes impossible. No I/O."""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Iterator, Sequence

from heddle.shared.wire.errors import Problem


class Graph:
    """Steps and their edges, indexed once. Order of ``ids`` is the order the user wrote."""

    __slots__ = ("children", "ids", "index", "parents")

    def __init__(self, deps: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.ids: list[str] = [step_id for step_id, _ in deps]
        self.index: dict[str, int] = {step_id: i for i, step_id in enumerate(self.ids)}
        self.parents: dict[str, tuple[str, ...]] = {s: tuple(d) for s, d in deps}
        self.children: dict[str, list[str]] = {s: [] for s in self.ids}
        for step_id, parents in deps:
            for parent in parents:
                if parent in self.children:
                    self.children[parent].append(step_id)

    def roots(self) -> list[str]:
        return [s for s in self.ids if not self.parents[s]]

    def edges(self) -> list[tuple[str, str]]:
        return [(p, s) for s in self.ids for p in self.parents[s]]


def structural_problems(
    deps: Sequence[tuple[str, Sequence[str]]], prefix: str = "steps"
) -> list[Problem]:
    """Duplicate ids, unknown and self dependencies, repeated dependencies, and cycles.

    Every problem is reported, each located at the step (and dependency) that shows it.
    """
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, (step_id, _) in enumerate(deps):
        if step_id in seen:
            problems.append(
                Problem(
                    f"{prefix}[{i}].id",
                    f"duplicate step id {step_id!r} (first at {prefix}[{seen[step_id]}])",
                )
            )
        else:
            seen[step_id] = i
    known = set(seen)
    for i, (step_id, parents) in enumerate(deps):
        listed: set[str] = set()
        repeated: set[str] = set()  # a dependency listed many times is one problem, not many
        for j, parent in enumerate(parents):
            if parent in listed:
                if parent in repeated:
                    continue
                repeated.add(parent)
                problem = f"dependency {parent!r} listed twice"
            elif parent == step_id:
                problem = f"step {step_id!r} depends on itself"
            elif parent not in known:
                problem = f"unknown step {parent!r}"
            else:
                listed.add(parent)
                continue  # the path is built for a problem alone: a big workflow has none
            problems.append(Problem(f"{prefix}[{i}].dependsOn[{j}]", problem))
            listed.add(parent)
    # A cycle is still well defined with unknown dependencies (they are left out of the
    # graph), but not with duplicate ids.
    if len(seen) != len(deps):
        return problems
    # Self-dependencies were reported above; leave them out of the cycle search.
    cycle = find_cycle(Graph([(s, [p for p in d if p != s]) for s, d in deps]))
    if cycle:
        loop = " -> ".join([*cycle, cycle[0]])
        problems.append(Problem(f"{prefix}[{seen[cycle[0]]}].dependsOn", f"cycle: {loop}"))
    return problems


def acyclic(graph: Graph) -> bool:
    """Whether every step can be ordered (Kahn's algorithm): about three times as fast as the
    search for a cycle, which is left for the workflows that have one."""
    children = graph.children
    indegree = dict.fromkeys(graph.ids, 0)
    for kids in children.values():
        for kid in kids:
            indegree[kid] += 1
    ready = [s for s, d in indegree.items() if d == 0]
    ordered = 0
    while ready:
        ordered += 1
        for kid in children[ready.pop()]:
            indegree[kid] -= 1
            if indegree[kid] == 0:
                ready.append(kid)
    return ordered == len(indegree)


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle's steps in dependency order, or None. Iterative, so 50,000-step chains are fine."""
    if acyclic(graph):
        return None
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph.ids, white)
    for start in graph.ids:
        if colour[start] != white:
            continue
        path: list[str] = []
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(graph.children[start]))]
        colour[start] = grey
        path.append(start)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = black
                stack.pop()
                path.pop()
            elif colour[nxt] == grey:
                return path[path.index(nxt) :]
            elif colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append((nxt, iter(graph.children[nxt])))
    return None


def topological_order(graph: Graph) -> list[str]:
    """Kahn's algorithm, ties broken by the order the user wrote: deterministic between runs."""
    import heapq

    indegree = {s: len(graph.parents[s]) for s in graph.ids}
    heap = [graph.index[s] for s in graph.ids if indegree[s] == 0]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        step = graph.ids[heapq.heappop(heap)]
        order.append(step)
        for child in graph.children[step]:
            indegree[child] -= 1
            if indegree[child] == 0:
                heapq.heappush(heap, graph.index[child])
    if len(order) != len(graph.ids):
        raise ValueError("graph has a cycle")
    return order


class Readiness:
    """How many parents of each step have yet to succeed, and of each conditional step (one
    with a ``when``) how many have yet to end at all. A parent's end makes its children
    ready in O(children), where checking every parent of every child would make a
    1,000-wide join cost a million checks."""

    __slots__ = ("_children", "_unsettled", "_waiting")

    def __init__(
        self,
        graph: Graph,
        succeeded: Iterable[str] = (),
        ended: Iterable[str] = (),
        conditional: Iterable[str] = (),
    ) -> None:
        done = set(succeeded)
        over = set(ended) | done
        self._children = graph.children
        self._waiting = {s: sum(1 for p in graph.parents[s] if p not in done) for s in graph.ids}
        self._unsettled = {
            s: sum(1 for p in graph.parents[s] if p not in over) for s in conditional
        }

    def waiting(self, step: str) -> int:
        """Parents of ``step`` that have not succeeded."""
        return self._waiting[step]

    def unsettled(self, step: str) -> int | None:
        """Parents of a conditional ``step`` that have not ended; None for another step."""
        return self._unsettled.get(step)

    def succeed(self, step: str) -> list[str]:
        """Record that ``step`` succeeded (call it once per step): the children now due, in
        the order the user wrote them: a plain child once every parent has succeeded, a
        conditional one once every parent has ended."""
        ready = []
        waiting, unsettled = self._waiting, self._unsettled
        for child in self._children[step]:
            waiting[child] -= 1
            if unsettled and child in unsettled:
                unsettled[child] -= 1
                if unsettled[child] == 0:
                    ready.append(child)
            elif waiting[child] == 0:
                ready.append(child)
        return ready

    def end(self, step: str) -> list[str]:
        """Record that ``step`` ended without succeeding (once per step): the conditional
        children whose every parent has now ended. A plain child is doomed instead."""
        due = []
        unsettled = self._unsettled
        for child in self._children[step]:
            if child in unsettled:
                unsettled[child] -= 1
                if unsettled[child] == 0:
                    due.append(child)
        return due


def doomed(graph: Graph, origin: str, conditional: Container[str]) -> list[tuple[str, str]]:
    """The steps a failure or skip of ``origin`` dooms, breadth-first, each with the parent it
    was reached from: every step downstream that is reached without passing a conditional
    one, which decides for itself once its parents have ended."""
    seen = {origin}
    out: list[tuple[str, str]] = []
    queue = deque([origin])
    while queue:
        node = queue.popleft()
        for child in graph.children[node]:
            if child not in seen and child not in conditional:
                seen.add(child)
                out.append((child, node))
                queue.append(child)
    return out
