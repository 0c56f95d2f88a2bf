"""Concurrency keys runs hold (docs/pools.md, "Concurrency limits"): a workflow's
``concurrency`` checked, its key evaluated for a run, and every change to one key's document
(``ConcurrencyKey`` in heddle-concurrency), decided here and written by compare-and-set.

A key is a line of ``limit`` slots (slot_lines.py) whose entries are runs: a run holds the
key from its turn until it ends, and waits in line, in the order runs came, while ``limit``
runs hold it. What a run does at the limit is its ``onLimit``: ``queue`` waits; ``refuse``
takes nothing and fails; ``cancelRunning`` has the oldest holder cancelled and goes ahead of
the runs queued without cancelling one, to take that slot. When every holder is being
cancelled already, it is the run queued to take a slot so freed that is cancelled: the
newest run wins, as with GitHub Actions' ``cancel-in-progress``. Doing a change again (a
write retried after its answer was lost) changes nothing. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

import msgspec
from heddle.shared.core import slot_lines
from heddle.shared.core.expressions import (
    ExpressionError,
    compile_key,
    evaluate_key,
    expression_problem,
)
from heddle.shared.core.slot_lines import Line
from heddle.shared.wire.contracts import (
    MAX_CONCURRENCY_LIMIT,
    Concurrency,
    ConcurrencyKey,
    KeyCancel,
    OnLimit,
)
from heddle.shared.wire.errors import Problem

FIELDS = {"key", "limit", "onLimit"}
ON_LIMIT: tuple[str, ...] = get_args(OnLimit)
MAX_KEY_CHARS = 512  # a key's text, evaluated


# ---- a workflow's concurrency, checked and evaluated ----------------------------------------


def spec_problems(value: object, path: str = "concurrency") -> list[Problem]:
    """Every problem of a document's ``concurrency``: an object of ``key`` (a CEL
    expression that compiles), ``limit`` (1 to MAX_CONCURRENCY_LIMIT) and ``onLimit``;
    null is none."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [Problem(path, "concurrency must be an object with a key")]
    problems = [Problem(f"{path}.{name}", "unknown field") for name in value if name not in FIELDS]
    key = value.get("key")
    if key is None:
        problems.append(Problem(f"{path}.key", "missing required field"))
    elif not isinstance(key, str):
        problems.append(Problem(f"{path}.key", "key must be a CEL expression (a string)"))
    elif (why := expression_problem(key, "key")) is not None:
        problems.append(Problem(f"{path}.key", why))
    limit = value.get("limit", 1)
    if isinstance(limit, bool) or not isinstance(limit, int):
        problems.append(Problem(f"{path}.limit", f"limit must be an integer, not {limit!r}"))
    elif not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        problems.append(
            Problem(
                f"{path}.limit", f"limit must be from 1 to {MAX_CONCURRENCY_LIMIT}, not {limit}"
            )
        )
    on_limit = value.get("onLimit", "queue")
    if on_limit not in ON_LIMIT:
        problems.append(
            Problem(
                f"{path}.onLimit", f"onLimit must be one of {', '.join(ON_LIMIT)}, not {on_limit!r}"
            )
        )
    return problems


def run_key(spec: Concurrency, params: Mapping[str, str], workflow: str | None) -> str:
    """The key of a run given ``params`` (its values, defaults applied) of ``workflow``;
    ``ExpressionError`` if it fails, or gives an empty or too long text."""
    text = evaluate_key(compile_key(spec.key), params, workflow or "")
    if not text:
        raise ExpressionError(spec.key, "gives an empty key")
    if len(text) > MAX_KEY_CHARS:
        raise ExpressionError(
            spec.key, f"gives a key of {len(text)} characters; the limit is {MAX_KEY_CHARS}"
        )
    return text


def submit_fields(
    spec: Concurrency | None, params: Mapping[str, str], workflow: str | None
) -> dict[str, Any]:
    """A run's ``SubmitRun`` fields for its workflow's ``concurrency`` (none without one):
    the key evaluated for ``params`` of ``workflow``, the limit, what a run does at it.
    ``ExpressionError`` if the key cannot be evaluated."""
    if spec is None:
        return {}
    return {
        "concurrency_key": run_key(spec, params, workflow),
        "concurrency_limit": spec.limit,
        "on_limit": spec.on_limit,
    }


def key_problem(
    spec: Concurrency, params: Mapping[str, str], workflow: str | None
) -> Problem | None:
    """Why the key cannot be evaluated for these values, as a 400's problem, if it cannot."""
    try:
        run_key(spec, params, workflow)
    except ExpressionError as exc:
        return Problem("concurrency.key", exc.problem)
    return None


def submit_problems(key: str | None, limit: int, on_limit: Any) -> list[Problem]:
    """A submit command's concurrency fields, checked as the gateway makes them."""
    if key is None:
        return []
    problems = []
    if not key or len(key) > MAX_KEY_CHARS:
        problems.append(Problem("concurrencyKey", f"must be 1 to {MAX_KEY_CHARS} characters"))
    if isinstance(limit, bool) or not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        problems.append(Problem("concurrencyLimit", f"must be from 1 to {MAX_CONCURRENCY_LIMIT}"))
    if on_limit not in ON_LIMIT:
        problems.append(Problem("onLimit", f"must be one of {', '.join(ON_LIMIT)}"))
    return problems


def document_name(key: str) -> str:
    """The key's document in heddle-concurrency: a key may hold any character, a KV key not."""
    return hashlib.sha256(key.encode()).hexdigest()


# ---- one key's document ------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What taking a key came to: held, or not (``holder`` is a run holding it); ``refused``
    for a run that does not wait; ``cancel``, the runs cancelled to make room for it."""

    holds: bool
    holder: str | None = None
    refused: bool = False
    cancel: tuple[str, ...] = ()


def _same(run: str) -> str:
    return run


def _line(doc: ConcurrencyKey) -> Line[str]:
    return Line(doc.limit, doc.holders, doc.queue)


def _of(doc: ConcurrencyKey, line: Line[str]) -> ConcurrencyKey:
    return msgspec.structs.replace(doc, holders=line.holders, queue=line.waiting)


def holder_of(doc: ConcurrencyKey) -> str | None:
    """The run to name as holding the key: its oldest holder, else the first queued."""
    return next(iter([*doc.holders, *doc.queue]), None)


def due(doc: ConcurrencyKey) -> list[str]:
    """The queued runs whose turn it is: the first ones, as many as there are free slots."""
    return slot_lines.due(_line(doc))


def would_hold(doc: ConcurrencyKey, run_id: str, limit: int) -> bool:
    """Whether ``run_id`` would hold the key if it took it now (the gateway's look before a
    run that refuses to wait is sent)."""
    sized = msgspec.structs.replace(doc, limit=limit)
    return slot_lines.take(_line(sized), run_id, _same)[1]


def take(
    doc: ConcurrencyKey, run_id: str, key: str, limit: int, on_limit: OnLimit
) -> tuple[ConcurrencyKey, Verdict]:
    """``run_id`` takes the key ``key`` of ``limit`` slots, or does what ``on_limit`` says.
    The document keeps the limit of the last run that took it or queued."""
    sized = msgspec.structs.replace(doc, key=key, limit=limit)
    line, holds = slot_lines.take(_line(sized), run_id, _same)
    if holds:
        return _of(sized, line), Verdict(True)
    if on_limit == "refuse" and run_id not in doc.queue:
        return doc, Verdict(False, holder_of(doc), refused=True)
    new = _of(sized, line)
    if on_limit == "cancelRunning":
        new = _make_room(new, run_id)
    cancel = tuple(c.run_id for c in new.cancels if c.by == run_id)
    return new, Verdict(False, holder_of(new), cancel=cancel)


def _make_room(doc: ConcurrencyKey, run_id: str) -> ConcurrencyKey:
    """``run_id`` (queued) has a run cancelled, once, and goes ahead of the runs queued
    without having one cancelled: the oldest holder not being cancelled yet, else the
    first run queued ahead of it to take a slot so freed. Nothing to cancel: it waits."""
    if any(c.by == run_id for c in doc.cancels):
        return doc
    cancelled = {c.run_id for c in doc.cancels}
    makers = {c.by for c in doc.cancels}
    victim = next((h for h in doc.holders if h not in cancelled), None)
    if victim is None:
        victim = next(
            (q for q in doc.queue if q in makers and q not in cancelled and q != run_id), None
        )
    if victim is None:
        return doc
    queue = [q for q in doc.queue if q != run_id]
    at = max((i + 1 for i, q in enumerate(queue) if q in makers), default=0)
    queue.insert(at, run_id)
    cancels = [*doc.cancels, KeyCancel(run_id=victim, by=run_id)]
    return msgspec.structs.replace(doc, queue=queue, cancels=cancels)


def resized(doc: ConcurrencyKey, key: str, limit: int) -> ConcurrencyKey:
    """The key of ``limit`` slots from now (a namespace's quota set anew): a lower one
    stops no holder, a higher one lets the runs queued go (``due``)."""
    return msgspec.structs.replace(doc, key=key, limit=limit)


def give_back(doc: ConcurrencyKey, run_id: str) -> ConcurrencyKey:
    """The run holds the key no more and waits for it no more (it ended): its slot, if any,
    is free, and no cancel names it any more."""
    line = slot_lines.give_back(_line(doc), run_id, _same)
    cancels = [c for c in doc.cancels if run_id not in (c.run_id, c.by)]
    return msgspec.structs.replace(_of(doc, line), cancels=cancels)


def reconcile(
    doc: ConcurrencyKey,
    owned: Callable[[str], bool],
    holding: set[str],
    queued: set[str],
    must_hold: Iterable[str],
) -> ConcurrencyKey:
    """The key as the runs an orchestrator has just rebuilt say it is. Of the runs ``owned``
    only: a holder is kept if it is in ``holding`` (live, holding it by its record), a queued
    run if it is in ``queued`` (live, waiting for it), the others have ended and are given
    back; each run of ``must_hold`` not holding it takes a slot, whatever the limit (it runs
    already). A cancel is kept while both its runs are in the document."""
    line = slot_lines.reconcile(_line(doc), _same, owned, holding, queued, must_hold)
    fixed = _of(doc, line)
    present = {*fixed.holders, *fixed.queue}
    cancels = [c for c in doc.cancels if c.run_id in present and c.by in present]
    return msgspec.structs.replace(fixed, cancels=cancels)
