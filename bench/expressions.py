"""``python -m bench.expressions``: what a step's ``when`` and ``forEach`` cost per call
(shared/core/expressions.py), in one process, no stack.

Each round times ``--calls`` calls of each figure: compiling a text (the cache bypassed, then
through it), building the scope of a run of ``--steps`` steps, evaluating a ``when`` and a
``forEach`` over a JSON-array output against it, and one decision as the orchestrator makes
it (a scope built, one ``when`` evaluated). The table gives microseconds per call, the median
and spread over ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from heddle.shared.core.expressions import (
    Scope,
    compile_expression,
    evaluate_condition,
    evaluate_items,
    make_scope,
)

from bench.report import Row, table
from bench.stats import Spread

WHEN = "steps.build.status == 'failed' && params.env == 'prod'"
FOR_EACH = "steps.list.outputs.files"


def per_call_us(fn: Callable[[int], object], calls: int) -> float:
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - t0) / calls * 1e6


def figures(steps: int, items: int) -> dict[str, Callable[[int], object]]:
    """Each figure's call, given its index (so that an uncached compile sees a new text)."""
    facts = {f"s{i}": ("succeeded", {"k": "v", "n": str(i)}) for i in range(steps)}
    facts["build"] = ("failed", {})
    facts["list"] = ("succeeded", {"files": json.dumps([f"f{i}.csv" for i in range(items)])})

    def scope() -> Scope:
        return make_scope(
            {"env": "prod", "region": "eu"},
            facts,
            run_id="run-1",
            trigger="api",
            scheduled_for=None,
            workflow="bench",
        )

    built = scope()
    when, for_each = compile_expression(WHEN), compile_expression(FOR_EACH)
    uncached = compile_expression.__wrapped__
    return {
        "compile a new text": lambda i: uncached(f"{WHEN} || params.n == '{i}'"),
        "compile a known text (cached)": lambda i: compile_expression(WHEN),
        f"scope of {steps} steps": lambda i: scope(),
        "evaluate a when": lambda i: evaluate_condition(when, built),
        f"evaluate a forEach of {items} items": lambda i: evaluate_items(
            for_each,
            built,
            items,
        ),
        "a decision: scope and when": lambda i: evaluate_condition(when, scope()),
    }


def measure(args: argparse.Namespace) -> list[Row]:
    calls = figures(args.steps, args.items)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            samples[name].append(per_call_us(fn, args.calls))
    return [Row(name, "µs/call", Spread.of(values)) for name, values in samples.items()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.expressions", description=__doc__)
    p.add_argument("--steps", type=int, default=100, help="steps in the run's scope")
    p.add_argument("--items", type=int, default=20, help="items of the forEach's JSON array")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every figure")
    p.add_argument("--calls", type=int, default=2000, help="calls timed per round")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = measure(args)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
