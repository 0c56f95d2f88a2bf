"""Failpoints: named places where a test can make a real process fail on purpose.

``HEDDLE_FAILPOINTS="runner.after_accept=exit"`` makes a runner exit abruptly right after it
accepted an assignment, before it starts the command: a death no signal can time precisely.
``runner.answer_lost`` makes it run what it accepted without answering, as if the answer had
been lost with a broker that died. ``runner.after_going_on=exit`` ends a runner once it
started a continuation's command, before the outcome of the step it follows is sent.
``runner.after_report=exit`` (or ``=stop``, SIGSTOP: frozen, still connected) ends or freezes
a runner once its outcome is stored, before anything more is offered to it.
``orchestrator.before_writes=stop-once`` freezes an orchestrator once, with a run's
decisions made and not yet written. ``orchestrator.mid_expansion=exit`` ends an orchestrator
once a forEach step's instances are stored, before the run's record and the step's are.
``orchestrator.before_key_given_back=exit`` ends an orchestrator once a run's end is stored,
before its concurrency key is given back.
Unset in production; each failpoint is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_ACTIVE: dict[str, str] = {}


def load(spec: str | None = None) -> None:
    spec = os.environ.get("HEDDLE_FAILPOINTS", "") if spec is None else spec
    _ACTIVE.clear()
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = item.partition("=")
        _ACTIVE[name] = action or "exit"


def active(name: str) -> bool:
    return name in _ACTIVE


def hit(name: str) -> None:
    action = _ACTIVE.get(name)
    if action == "exit":
        os._exit(137)  # as abrupt as SIGKILL: no cleanup, no last words
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "stop-once":
        del _ACTIVE[name]
        os.kill(os.getpid(), signal.SIGSTOP)


load()
