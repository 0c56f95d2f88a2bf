"""The sync client, on the standard library alone (urllib): a script, or a command that reads
a run, needs no event loop and no aiohttp. Its one-call methods are methods.py's; here are
the transport, and what reads a stream: ``events``, ``follow`` and ``wait``.

    client = Client()  # HEDDLE_URL, HEDDLE_TOKEN, HEDDLE_NAMESPACE, else .heddle's files
    run = client.wait(client.submit("flow.yaml").run_id, timeout=600)
"""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import heddle.shared.api.calls as calls
import heddle.shared.api.request as request
from heddle.shared.api.answers import RunDocument, RunEnd
from heddle.shared.api.errors import ClientError, Refused, Unreachable
from heddle.shared.api.events import EventLines, LogEvent, RunEvent, Tracked
from heddle.shared.api.methods import Api, SyncSender
from heddle.shared.api.request import EVENTS, JSON, Call, Stream
from heddle.shared.api.waiting import Patience, is_over

T = TypeVar("T")
E = TypeVar("E")
OnChange = Callable[[RunDocument], None]


class Client(Api, SyncSender):
    """A gateway's HTTP API, configured as methods.Api says. Every error is a ClientError:
    Usage, BadDocument, Refused, Unreachable, TimedOut."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # urllib keeps no connection open between calls

    def send(self, call: Call[T]) -> T:
        """Make ``call``: its 2xx answer as its type, else Refused or Unreachable."""
        with self._open(call.method, call.path, call.body, JSON) as resp:
            raw = self._read(resp.read)
        return request.answer_of(call, self.url, raw)

    def stream(self, stream: Stream[E], timeout: float | None = None) -> Iterator[E]:
        """The events of ``stream`` until the gateway ends it."""
        parser = EventLines()
        with self._open("GET", stream.path, None, EVENTS, timeout) as resp:
            lines = iter(resp)
            while (raw := self._read(lambda: next(lines, None))) is not None:
                event = parser.feed(raw.decode("utf-8", errors="replace"))
                found = None if event is None else request.event_of(stream, self.url, event)
                if found is not None:
                    yield found

    def events(self, run_id: str, steps: str | None = None) -> Iterator[RunEvent]:
        """The run's state (a ``run`` event, a ``step`` event per step), then each change
        as it is stored, then its ``end``: StepChange, RunChange and a last RunEnd."""
        return self.stream(calls.run_events(run_id, steps))

    def follow(self, run_id: str, step_id: str, after: int | None = None) -> Iterator[LogEvent]:
        """A step's lines (LineDoc) as they are written, its state changes (LogStatus) and a
        last LogEnd once it is over and its last line was sent."""
        return self.stream(calls.follow(run_id, step_id, after))

    def wait(
        self, run_id: str, timeout: float | None = None, on_change: OnChange | None = None
    ) -> RunDocument:
        """The run once it is over (TimedOut after ``timeout`` seconds), told by its events,
        else read every ``poll_interval``; ``on_change`` is given the run each time it
        changes. A run not stored yet, or a gateway restarting, is waited out a while."""
        patience = Patience(run_id, timeout, time.monotonic())
        run = self._read_run(run_id, patience, on_change, until_seen=True)
        if not is_over(run):
            with contextlib.suppress(Refused, Unreachable):  # no stream, or it broke
                run = self._told(run_id, run, patience, on_change)
        if not is_over(run):
            run = self._read_run(run_id, patience, on_change)
        return run

    def _told(
        self, run_id: str, run: RunDocument, patience: Patience, on_change: OnChange | None
    ) -> RunDocument:
        tracked = Tracked(run)
        for event in self.stream(calls.run_events(run_id), patience.left(time.monotonic())):
            if isinstance(event, RunEnd):
                return self._read_run(run_id, patience, on_change, until_seen=True)
            if tracked.apply(event) and on_change is not None:
                on_change(tracked.run)
            patience.left(time.monotonic())
        return tracked.run

    def _read_run(
        self, run_id: str, patience: Patience, on_change: OnChange | None, until_seen: bool = False
    ) -> RunDocument:
        """Read the run until it is over (or, ``until_seen``, until it is read at all)."""
        while True:
            try:
                run = self.run(run_id)
            except ClientError as exc:
                patience.bear(exc, time.monotonic())
            else:
                patience.answered(run, time.monotonic())
                if on_change is not None:
                    on_change(run)
                if until_seen or is_over(run):
                    return run
            time.sleep(patience.pause(self.poll_interval, time.monotonic()))

    def _open(
        self, method: str, path: str, body: Any, accept: str, timeout: float | None = None
    ) -> Any:
        wire = request.prepare(self.connection, method, path, body, accept)
        sent = urllib.request.Request(wire.url, wire.data, wire.headers, method=wire.method)
        wait = self.connection.timeout if timeout is None else min(timeout, self.connection.timeout)
        try:
            return urllib.request.urlopen(sent, timeout=wait)
        except urllib.error.HTTPError as exc:
            raise request.refusal(exc.code, self._read(exc.read)) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise Unreachable(self.url, getattr(exc, "reason", exc)) from None

    def _read(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except (OSError, ValueError) as exc:  # a reset, a timeout, a broken chunk
            raise Unreachable(self.url, exc) from None
