"""What every Heddle service shares: structured logging and the process lifecycle.

A service is an object with ``start()`` (returns once it takes work) and ``stop()``
(idempotent: stop taking work, drain in-flight work for up to the shutdown grace, close).
Only ``run_service`` installs signal handlers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import Protocol

import msgspec
from heddle.shared.core.redact import may_hold_token, redact
from heddle.shared.runtime.health import Health
from heddle.shared.runtime.settings import Settings


class Service(Protocol):
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class JsonFormatter(logging.Formatter):
    """One JSON object per line: easy to grep, easy to ship to a log store. No token is ever
    in one (``json_line`` redacts): aiohttp logs a request it cannot parse with its bytes."""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return json_line(
            record.created,
            record.levelname.lower(),
            record.name,
            record.getMessage(),
            getattr(record, "fields", None),
            exc,
        )


_encoder = msgspec.json.Encoder(enc_hook=str)  # anything unusual in a field: its str()
_redacting = msgspec.json.Encoder(enc_hook=lambda value: redact(str(value)))
_second: tuple[int, str] = (-1, "")


def utc_stamp(epoch: float) -> str:
    """``2026-11-30T07:41:52.123Z``; the part to the second is formatted once a second."""
    global _second
    whole = int(epoch)
    if _second[0] != whole:
        _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{_second[1]}.{int((epoch - whole) * 1000):03d}Z"


def json_line(
    epoch: float,
    level: str,
    logger: str,
    msg: str,
    fields: dict[str, object] | None = None,
    exc: str | None = None,
) -> str:
    """The line, with every token in its text replaced by a mark (shared/core/redact.py): the
    message, the exception and each field's text, however deep. Most lines hold no word a
    token comes with and are encoded once (an event is logged on every step transition)."""
    out: dict[str, object] = {"ts": utc_stamp(epoch), "level": level, "logger": logger, "msg": msg}
    if fields:
        out.update(fields)
    if exc:
        out["exc"] = exc
    line = _encoder.encode(out).decode()
    if not may_hold_token(line):
        return line
    redacted = {key: _redacted(value) for key, value in out.items()}
    return _redacting.encode(redacted).decode()


def _redacted(value: object) -> object:
    """A field's value with the text in it redacted; numbers and the like as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


class _EventStream:
    """Where ``event`` writes directly once ``setup_logging`` has installed the one JSON
    handler: a state change is logged on every step transition, and the logging module's
    record, lock and formatter cost more than the line itself."""

    handler: logging.StreamHandler | None = None


def setup_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    _EventStream.handler = handler


def event(logger: logging.Logger, msg: str, **fields: object) -> None:
    """Log one structured line (a state change) with its fields."""
    handler = _EventStream.handler
    if handler is None or logging.getLogger().handlers != [handler]:
        logger.info(msg, extra={"fields": fields})  # someone else's logging set-up
    elif logger.isEnabledFor(logging.INFO):
        handler.stream.write(json_line(time.time(), "info", logger.name, msg, fields) + "\n")


async def serve(service: Service, settings: Settings | None = None) -> None:
    """Start ``service``, run until SIGTERM or SIGINT, then stop it gracefully. With
    HEDDLE_METRICS_PORT set, its metrics and probes are served from before it starts until it
    stopped."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    log = logging.getLogger(f"heddle.{service.name}")
    health = Health(service)
    metrics = None
    if settings is not None and settings.metrics_port:
        from heddle.shared.runtime.metrics_http import MetricsServer  # aiohttp only where it serves

        metrics = MetricsServer(service.name, settings.metrics_host, settings.metrics_port, health)
        await metrics.start()
    try:
        await service.start()
        health.started = True
        event(log, "started", service=service.name)
        await stopping.wait()
        health.stopping = True
        event(log, "stopping", service=service.name)
    finally:
        health.stopping = True
        reporter = asyncio.create_task(_report_slow_stop(log))
        try:
            await service.stop()
        finally:
            reporter.cancel()
            if metrics is not None:
                await metrics.stop()
        event(log, "stopped", service=service.name)


async def _report_slow_stop(log: logging.Logger, after: float = 5.0) -> None:
    """If stopping takes long, say what it waits on: the tasks still pending."""
    await asyncio.sleep(after)
    me = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is me:
            continue
        frames = task.get_stack(limit=6)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in frames)
        log.warning("stop waits on task %s at %s", task.get_name(), where)


def run_service(service: Service, settings: Settings) -> None:
    setup_logging(settings)
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings)) as runner:
            runner.run(serve(service, settings))
    except KeyboardInterrupt:
        pass


def loop_factory(settings: Settings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop unless told otherwise: the services spend most of their CPU moving small
    messages, where it needs about half the cycles per round trip (docs/performance.md)."""
    if settings.event_loop != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:  # a platform without it: the standard loop works the same
        logging.getLogger("heddle").warning("uvloop is not installed; using asyncio's loop")
        return None
    return uvloop.new_event_loop
