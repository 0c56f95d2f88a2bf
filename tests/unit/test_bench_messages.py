"""The message budget's counting (bench/messages.py) and its table (bench/message_table.py):
each message put to the service that sent it and to its kind, the idle window taken off."""

from __future__ import annotations

from collections import Counter

from bench.message_table import messages_table
from bench.messages import OTHER, count, less, per_step


def counted(*messages: tuple[str, str]) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for subject, reply in messages:
        count(counts, subject, reply)
    return counts


def test_each_message_goes_to_its_sender_and_kind() -> None:
    counts = counted(
        ("heddle.evt.r1.a.finished.runner-0", "_INBOX_runner-0.x1"),  # a stream publish, acked
        ("$KV.heddle-runs.step.r1.a", "_INBOX_orchestrator.x2"),  # a KV write, acked
        ("$KV.heddle-runs.step.r1.b", ""),  # one of a batch, unawaited: only it writes runs
        ("$KV.heddle-heartbeats.r1.a", ""),  # a KV write, not awaited: only runners write it
        ("heddle.log.r1.a.x", "_R_.abc"),  # a reply the server mapped: awaited all the same
        ("heddle.runner.runner-1.cancel", ""),  # not awaited, and its sender not told
        ("$JS.ACK.HEDDLE_EVENTS.orchestrator-events-0.1.2.3.4.5.6", ""),  # an ack
        ("$JS.ACK.HEDDLE_STEPS.dispatcher.1.2.3.4.5.6", "_INBOX_dispatcher.x3"),  # awaited ack
        ("$JS.API.CONSUMER.MSG.NEXT.HEDDLE_STEPS.dispatcher", "_INBOX_dispatcher.x4"),
        ("heddle.runner.runner-1.assign", "_INBOX_dispatcher.x5"),  # a core request
        ("_INBOX_dispatcher.x5", ""),  # its answer: a service's reply, sender not told
        ("_INBOX_orchestrator.x2", ""),  # the server's reply: sent by no service
        ("_INBOX_dispatcher.x4", "$JS.ACK.HEDDLE_STEPS.dispatcher.1.2.3.4.5.6"),  # a delivery
        ("heddle.cmd.submit.r1", "_INBOX_gateway.x6"),
    )
    assert counts == Counter(
        {
            ("runners", "stream publish"): 2,
            ("runners", "KV write"): 1,
            ("runners", "awaited"): 2,
            ("orchestrator", "KV write"): 2,
            ("orchestrator", "ack"): 1,
            ("orchestrator", "awaited"): 1,
            ("dispatcher", "ack"): 1,
            ("dispatcher", "API request"): 1,
            ("dispatcher", "core"): 1,
            ("dispatcher", "awaited"): 3,
            ("gateway", "stream publish"): 1,
            ("gateway", "awaited"): 1,
        }
    )


def test_the_idle_window_is_taken_off_and_never_below_zero() -> None:
    busy = Counter({("runners", "KV write"): 10, ("orchestrator", "ack"): 2})
    idle = Counter({("runners", "KV write"): 3, ("orchestrator", "ack"): 5, ("gateway", "ack"): 1})
    assert less(busy, idle) == Counter({("runners", "KV write"): 7})


def test_per_step_puts_what_the_tap_cannot_tell_under_other() -> None:
    counts = Counter(
        {
            ("runners", "stream publish"): 20,
            ("runners", "KV write"): 10,
            ("runners", "sent"): 40,  # the server's count: 10 replies besides
            ("runners", "received"): 30,
        }
    )
    runners = per_step(counts, steps=10)["runners"]
    assert runners["stream publish"] == 2 and runners["KV write"] == 1
    assert runners[OTHER] == 1 and runners["sent"] == 4 and runners["received"] == 3


def test_the_table_has_a_row_per_service_and_their_sum() -> None:
    counted = {
        "runners": {"stream publish": 2.0, "sent": 3.0, OTHER: 1.0, "received": 4.0},
        "orchestrator": {"KV write": 3.0, "sent": 3.0, "received": 2.5},
    }
    text = messages_table(
        [{"workload": "chain-50", "messages_per_step": counted}, {"workload": "x"}]
    )
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()[3:]}
    assert set(rows) == {"gateway", "orchestrator", "dispatcher", "runners", "all"}
    cells = [c.strip() for c in rows["all"].split("|")]
    head = [c.strip() for c in text.splitlines()[1].split("|")]
    assert dict(zip(head, cells, strict=True))["sent"] == "6.00"
    assert dict(zip(head, cells, strict=True))["received"] == "6.50"
    assert messages_table([{"workload": "x"}]) == ""
