"""The compatibility promise (docs/upgrading.md), checked on the golden samples: every
message and record a past release wrote (tests/compat/samples/<version>/, frozen when it was
released) is read by today's decoders, the ones the services use, is written back without
losing a field, and does what it did where a receiver acts on it (sample_acts.py). The
samples today's code makes (make_samples.py, frozen at the next release) pass the same
checks, set every field, and have a check each."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from heddle.services.orchestrator.lease_view import Lease
from heddle.shared.api import calls
from heddle.shared.core.tokens import token_record_decoder
from heddle.shared.wire import contracts as c

from tests.compat import sample_acts as act
from tests.compat.make_samples import SAMPLES, main, sample_bytes, samples, write


@dataclass(frozen=True)
class Kind:
    """How a sample's file is read (the receiver's decoder) and what is checked of it."""

    decode: Callable[[bytes], Any]
    acts: act.Act = act.nothing


COMMAND, EVENT = c.command_decoder.decode, c.event_decoder.decode
STEP, RUN = c.step_record_decoder.decode, c.run_record_decoder.decode
KINDS: dict[str, Kind] = {
    "command-submit": Kind(COMMAND, act.makes_the_run),
    "command-submit-document": Kind(COMMAND, act.names_its_document),
    "command-cancel": Kind(COMMAND, act.cancels),
    "command-timer": Kind(COMMAND, act.retries),
    "command-deadline": Kind(COMMAND, act.stops_at_its_deadline),
    "command-approval": Kind(COMMAND, act.answers_the_gate),
    "command-child-ended": Kind(COMMAND, act.ends_the_call),
    "step-ready": Kind(c.step_ready_decoder.decode),
    "assign-reply": Kind(c.assign_reply_decoder.decode),
    "cancel-attempt": Kind(c.cancel_attempt_decoder.decode),
    "event-started": Kind(EVENT, act.starts),
    "event-finished": Kind(EVENT, act.finishes),
    "heartbeat": Kind(c.heartbeat_decoder.decode, act.is_heard),
    "runner-info": Kind(c.runner_info_decoder.decode),
    "runner-pod": Kind(c.runner_pod_decoder.decode),
    # The orchestrator reads leases with holder_of (the act), through a decoder of its own.
    "lease": Kind(msgspec.json.Decoder(Lease).decode, act.names_its_holder),
    "namespace-record": Kind(c.namespace_record_decoder.decode),
    "semaphore": Kind(c.semaphore_decoder.decode, act.holds_its_slots),
    "concurrency-key": Kind(c.concurrency_key_decoder.decode),
    "approval-gate": Kind(c.approval_gate_decoder.decode),
    "notification": Kind(c.notification_decoder.decode, act.is_delivered_as_shown),
    "token-record": Kind(token_record_decoder.decode, act.grants_its_namespaces),
    "log-line": Kind(c.log_line_decoder.decode, act.reads_as_lines),
    "log-line-single": Kind(c.log_line_decoder.decode, act.reads_as_lines),
    "log-chunk": Kind(act.chunk_of, act.reads_its_chunk),
    # Stored within a step record and a retry's submit, never alone.
    "attempt-record": Kind(msgspec.json.Decoder(c.AttemptRecord).decode),
    "step-record": Kind(STEP, act.shows_its_outputs),
    "step-record-gate": Kind(STEP, act.waits_for_approval),
    "step-record-gate-answered": Kind(STEP),
    "step-record-call": Kind(STEP),
    "step-record-loop": Kind(STEP, act.shows_its_outputs),
    "step-record-instance": Kind(STEP, act.is_an_instance),
    "run-record": Kind(RUN),
    "run-record-child": Kind(RUN, act.has_its_parent),
    "run-record-notify": Kind(RUN, act.has_its_notify),
    "workflow-version": Kind(c.workflow_version_decoder.decode),
    "workflow-latest": Kind(c.workflow_latest_decoder.decode),
    "cron-cursor": Kind(c.cron_cursor_decoder.decode),
    "cron-slot": Kind(c.cron_slot_decoder.decode),
    "run-summary": Kind(c.run_summary_decoder.decode),
    # The client's decoder of GET /api/runs/{run} (shared/api/calls.py).
    "run-document": Kind(calls.run("any").answer),
}
RELEASES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
# The struct each sample is, by today's code.
TYPES = {name: type(value) for name, value in samples().items()}
# Top-level fields a frozen sample holds that today's code no longer reads, by sample and
# field (its JSON name), each with the release that stopped reading it and why
# (docs/upgrading.md, "The compatibility promise"): none so far.
RETIRED: dict[tuple[str, str], str] = {}
# Fields today's samples leave at their defaults, and why.
LEFT_AT_DEFAULT = {
    ("WorkflowSpec", "namespace"): "a stored spec has none: its stored name holds it",
}
# The structs of contracts.py no sample holds, and why.
NOT_SAMPLED = {
    "Wire": "the base of the structs",
    "FrozenWire": "the base of the messages",
    "Command": "the base of the commands, each sampled",
    "StepEvent": "the base of the runners' events, each sampled",
    "_Workflow": "the base of the workflow documents",
    "RunRequest": "the body of POST /api/runs, read by the gateway alone and sent on as a submit",
}


def frozen() -> Iterator[Any]:
    for release in RELEASES:
        for path in sorted((SAMPLES / release).glob("*.json")):
            yield pytest.param(path.stem, path.read_bytes(), id=f"{release}/{path.stem}")


def current() -> Iterator[Any]:
    for name, value in samples().items():
        yield pytest.param(name, sample_bytes(value), id=f"today/{name}")


EVERY_SAMPLE = [*frozen(), *current()]


def test_a_release_is_frozen() -> None:
    assert RELEASES, "no release's samples in tests/compat/samples"


@pytest.mark.parametrize("release", RELEASES)
def test_every_sample_of_a_release_has_its_check(release: str) -> None:
    files = {p.stem for p in (SAMPLES / release).iterdir()}
    assert not files - KINDS.keys(), f"samples with no check in KINDS: {files - KINDS.keys()}"


def test_every_kind_today_has_a_sample_and_a_check() -> None:
    assert samples().keys() == KINDS.keys()


def test_every_struct_of_the_contracts_is_in_a_sample() -> None:
    """A struct added to contracts.py, a message or a record, gets its sample."""
    sampled = {type(s).__name__ for value in samples().values() for s in structs_in(value)}
    defined = {
        name
        for name, kind in vars(c).items()
        if isinstance(kind, type)
        and issubclass(kind, msgspec.Struct)
        and kind.__module__ == c.__name__
    }
    missing = sorted(defined - sampled - NOT_SAMPLED.keys())
    assert not missing, f"structs of contracts.py in no sample (sample_*.py): {missing}"


@pytest.mark.parametrize(("name", "raw"), EVERY_SAMPLE)
def test_a_sample_is_read_and_acted_on(name: str, raw: bytes) -> None:
    kind = KINDS[name]
    value = kind.decode(raw)
    kind.acts(value, raw)


@pytest.mark.parametrize(("name", "raw"), EVERY_SAMPLE)
def test_a_sample_written_back_keeps_every_field(name: str, raw: bytes) -> None:
    """Read and written again by today's code (as a record is, when a service changes it),
    a sample keeps every field and value: a field renamed or dropped would be lost."""
    value = KINDS[name].decode(raw)
    if not isinstance(value, msgspec.Struct):
        return  # a log chunk: raw lines, read by its act
    again = json.loads(c.encode(value))
    sent = {k: v for k, v in json.loads(raw).items() if (name, k) not in RETIRED}
    lost = sorted(set(paths(sent)) - set(paths(again)))
    assert not lost, f"{name}: fields lost on the way through today's code: {lost}"
    assert again == sent, f"{name}: a value changed on the way through today's code"


@pytest.mark.parametrize(("name", "raw"), EVERY_SAMPLE)
def test_a_sample_holds_every_field_today_requires(name: str, raw: bytes) -> None:
    """A field added without a default would make every older sender's message unreadable."""
    kind = TYPES[name]
    if not issubclass(kind, msgspec.Struct):
        return  # a log chunk
    required = {f.encode_name for f in msgspec.structs.fields(kind) if f.required}
    missing = sorted(required - json.loads(raw).keys())
    assert not missing, f"{kind.__name__} requires fields its {name} sample lacks: {missing}"


def test_todays_samples_set_every_field() -> None:
    """Each field of each struct sampled is set to a value other than its default in some
    sample, so that the next release's frozen samples catch its renaming or retyping."""
    unset: dict[type, set[str]] = {}
    for value in samples().values():
        for struct in structs_in(value):
            fields = msgspec.structs.fields(type(struct))
            left = {f.name for f in fields if not f.required and at_default(struct, f)}
            unset[type(struct)] = unset.get(type(struct), left) & left
    missing = sorted(
        (kind.__name__, name)
        for kind, names in unset.items()
        for name in names
        if (kind.__name__, name) not in LEFT_AT_DEFAULT
    )
    assert not missing, f"fields no sample sets: {missing}"


def test_the_generator_writes_a_release_once(tmp_path: Path) -> None:
    folder = write("9.9.9", into=tmp_path)
    assert {p.stem for p in folder.iterdir()} == KINDS.keys()
    with pytest.raises(FileExistsError):
        write("9.9.9", into=tmp_path)
    assert main([RELEASES[-1]]) == 1  # frozen: refused, nothing written
    assert main(["next"]) == main([]) == 2


# ---- helpers ----------------------------------------------------------------------------


def paths(doc: Any, path: str = "$") -> Iterator[str]:
    """Every object key's path in a JSON document (list items as ``[]``)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield f"{path}.{key}"
            yield from paths(value, f"{path}.{key}")
    elif isinstance(doc, list):
        for item in doc:
            yield from paths(item, f"{path}[]")


def structs_in(value: Any) -> Iterator[msgspec.Struct]:
    if isinstance(value, msgspec.Struct):
        yield value
        for field in msgspec.structs.fields(type(value)):
            yield from structs_in(getattr(value, field.name))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from structs_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from structs_in(item)


def at_default(struct: msgspec.Struct, field: msgspec.structs.FieldInfo) -> bool:
    made = field.default_factory
    default = field.default if made is msgspec.NODEFAULT else made()
    return bool(getattr(struct, field.name) == default)
