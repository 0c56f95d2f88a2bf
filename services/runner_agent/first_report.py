"""An attempt's first report, and what goes with it: the runner's answer to the dispatcher
and the started event.

A command still running ``HEDDLE_STARTED_REPORT_DELAY`` after it started is announced: the
log's first note ("started on runner X (pid N)") and the started event, which moves the step
to running. One that ends sooner is reported once, by its outcome, which carries the same
start time and pid. The runner's answer to an offer goes in the same write as the first
report, and at the latest after a quarter of the offerer's wait: a short step costs its
runner one write in all. An offer that takes the outcome as its answer gets none when the
outcome is the first report (docs/latency.md, "Reporting a start", "Answering with the
first report", "Answered by the outcome").

Its own module: when an attempt first speaks, and what it owes until then, is one decision
apart from running its command (attempt.py) and reporting its outcome (outcome_report.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from heddle.shared.broker.nats_types import NatsError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepReady, StepStarted, encode

if TYPE_CHECKING:
    from heddle.services.runner_agent.attempt_context import AttemptContext
    from heddle.services.runner_agent.heartbeats import Heartbeats
    from heddle.services.runner_agent.output import LogPublisher
    from heddle.shared.broker.nats_types import Msg

log = logging.getLogger("heddle.runner")


class FirstReport:
    """One attempt's answers owed until its first report, and the announcement of its
    command. A continuation (docs/latency.md, "Continuing a chain") sends nothing before
    the outcome of the attempt it follows is stored (``after_done``), and owes the word that
    it is known: the orchestrator waits for it as for an answer."""

    __slots__ = (
        "_after_done",
        "_announce_timer",
        "_answer_timer",
        "_answered",
        "_answering",
        "_answers",
        "_beats",
        "_ctx",
        "_logs",
        "_owes_known",
        "_pid",
        "_ready",
        "_started_at",
        "announcing",
    )

    def __init__(
        self,
        ctx: AttemptContext,
        ready: StepReady,
        beats: Heartbeats,
        after_done: asyncio.Event | None,
    ) -> None:
        self._ctx = ctx
        self._ready = ready
        self._beats = beats
        self._after_done = after_done
        self._owes_known = after_done is not None
        self._answers: list[tuple[Msg, bytes]] = []  # "accepted", not sent yet
        self._answered = False  # the first report is out: later offers are answered at once
        self._logs: LogPublisher | None = None  # the command's, once it started
        self._pid = 0
        self._started_at = ""
        self._announce_timer: asyncio.TimerHandle | None = None
        self.announcing: asyncio.Task | None = None  # under way: the outcome follows it
        self._answer_timer: asyncio.TimerHandle | None = None
        self._answering: asyncio.Task | None = None

    def owe(self, answer: tuple[Msg, bytes]) -> None:
        """An answer (the assignment and its "accepted") to leave with the first report."""
        self._answers.append(answer)

    async def answer_too(self, msg: Msg, accepted: bytes) -> None:
        """This attempt offered again (its offerer restarted before it heard the answer):
        accepted, with the first report as the first answer was, or at once if that is out."""
        if self._answered:
            await self._respond(msg, accepted)
        else:
            self._answers.append((msg, accepted))

    def announce_later(self, logs: LogPublisher, pid: int | None, started_at: str) -> bool:
        """The command started: its announcement set for once it has run for the report
        delay, or, for a continuation, for once the outcome before it is stored. False: it
        is to be made now (``announce``)."""
        self._logs, self._pid, self._started_at = logs, pid or 0, started_at
        settings = self._ctx.settings
        delay = settings.started_report_delay
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._announce_timer = loop.call_later(delay, self._announce_soon)
            # Well within the dispatcher's wait, whatever the report delay.
            answer_by = settings.assign_timeout / 4
            if answer_by < delay:
                self._answer_timer = loop.call_later(answer_by, self._answer_soon)
            return True
        if self._after_done is not None:
            # A continuation is announced once the outcome of the one before is stored,
            # which waits for this start to return: not awaited here.
            self.announcing = asyncio.create_task(self.announce())
            return True
        return False

    def cut_short(self) -> None:
        """The command ended: what was not due yet is not sent (the outcome tells it all,
        and the answers go with it)."""
        if self._announce_timer is not None:
            self._announce_timer.cancel()
            self._announce_timer = None
        if self._answer_timer is not None:
            self._answer_timer.cancel()
            self._answer_timer = None

    def _answer_soon(self) -> None:
        self._answer_timer = None
        if self._answers or self._owes_known:
            self._answering = asyncio.create_task(self._answer_alone())

    def _announce_soon(self) -> None:
        self._announce_timer = None
        self.announcing = asyncio.create_task(self.announce())

    async def announce(self) -> None:
        """The log's first note and the started event.

        The started event is a plain publish into the stream, with no acknowledgement to
        wait for or read: it only moves the step from queued to running for people to see,
        while the heartbeat already stored makes the attempt known to the watchdog, and the
        outcome (acknowledged, re-sent until it lands) tells the whole story if a started
        event is ever lost (docs/latency.md)."""
        ctx, ready, logs = self._ctx, self._ready, self._logs
        assert logs is not None and self._started_at
        started = StepStarted(
            run_id=ready.run_id,
            step_id=ready.step_id,
            attempt=ready.attempt,
            runner=ctx.runner,
            ticket=ready.ticket,
            pid=self._pid,
            started_at=self._started_at,
        )
        try:
            await self._answer_alone()
            await logs.release()
            await self.after_reported()  # a started event for a step still pending is fenced
            await ctx.nc.publish(
                names.evt(ready.run_id, ready.step_id, "started", ctx.runner),
                encode(started),
                headers={
                    "Nats-Msg-Id": names.event_msg_id(
                        "started", ready.run_id, ready.step_id, ready.attempt, ctx.runner
                    )
                },
            )
        except NatsError as exc:  # closed connection: the outcome is re-sent until it lands
            log.warning("started event of %s/%s not sent: %s", ready.run_id, ready.step_id, exc)

    async def _answer_alone(self) -> None:
        """An answer that does not travel with the outcome follows the first heartbeat, so
        the attempt can be found from the moment it is acknowledged. A continuation owes
        the same: the orchestrator waits for it as for an answer."""
        if self._answers or self._owes_known:
            self._owes_known = False
            await self._beats.first()
            await self.send_answers()

    async def after_reported(self) -> None:
        """Once the outcome of the attempt this continues is stored (it is re-sent until
        it is): before it, the orchestrator holds this step as pending."""
        if self._after_done is not None:
            await self._after_done.wait()

    async def send_answers(self, outcome_follows: bool = False) -> None:
        """The answers owed. ``outcome_follows``: the attempt's outcome is the next thing
        it sends, and an offer that takes the outcome as its answer gets no other
        (docs/latency.md, "Answered by the outcome")."""
        self._answered = True
        answers, self._answers = self._answers, []
        for msg, accepted in answers:
            if outcome_follows and _outcome_answers(msg):
                continue
            await self._respond(msg, accepted)

    @staticmethod
    async def _respond(msg: Msg, accepted: bytes) -> None:
        try:
            await msg.respond(accepted)
        except NatsError as exc:  # the offerer finds the attempt by its heartbeat or outcome
            log.warning("answer to %s not sent: %s", msg.subject, exc)


def _outcome_answers(msg: Msg) -> bool:
    """Whether the offer ``msg`` takes the attempt's outcome as its answer."""
    headers = msg.headers
    return headers is not None and headers.get(names.ANSWER_HEADER) == names.ANSWER_BY_OUTCOME
