"""Runners' events in HEDDLE_EVENTS against a real nats-server: a re-sent event is stored
once, and two runners' events about the same attempt (an assignment redelivered after a
crash) are both kept, for the state machine to choose from."""

from __future__ import annotations

from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, encode
from nats.aio.client import Client


def finished(runner: str) -> StepFinished:
    return StepFinished(
        run_id="r1",
        step_id="s",
        attempt=1,
        runner=runner,
        outcome="succeeded",
        finished_at="2026-11-30T09:00:00.000Z",
        exit_code=0,
    )


async def test_resent_once_and_two_runners_both_kept(heddle_nc: Client) -> None:
    js = heddle_nc.jetstream()
    for runner in ("runner-a", "runner-a", "runner-b", "runner-a"):
        ev = finished(runner)
        msg_id = names.event_msg_id("finished", ev.run_id, ev.step_id, ev.attempt, runner)
        subject = names.evt("r1", "s", "finished", runner)
        await js.publish(subject, encode(ev), headers={"Nats-Msg-Id": msg_id})
    info = await js.stream_info(names.EVENTS_STREAM)
    assert info.state.messages == 2
    last = await js.get_last_msg(names.EVENTS_STREAM, names.evt_step_kind("r1", "s", "finished"))
    assert b'"runner":"runner-b"' in last.data
