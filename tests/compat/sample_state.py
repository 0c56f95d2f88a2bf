"""The golden samples of the runtime state (tests/compat/make_samples.py writes them): the
runners' and orchestrators' KV values, semaphores and keys, gates, notifications, tokens,
log messages, and the run document the gateway answers and the client decodes, each with
every optional field set to a value other than its default."""

from __future__ import annotations

from heddle.services.gateway.reads.notifications import shown
from heddle.services.gateway.reads.runs import run_facts, step_document
from heddle.services.orchestrator.lease_view import Lease
from heddle.shared.api.answers import Edge, RunDocument, WaitingFor
from heddle.shared.core.tokens import TokenRecord
from heddle.shared.wire.contracts import (
    ApprovalGate,
    ConcurrencyKey,
    Heartbeat,
    KeyCancel,
    LogLine,
    NamespaceRecord,
    Notification,
    NotifyAttempt,
    RunnerInfo,
    RunnerPod,
    Semaphore,
    SemaphoreHolder,
)
from heddle.shared.wire.names import LOG_SEQ_HEADER, LOG_STREAM_HEADER

from tests.compat.sample_messages import LATER, RUN, TICKET, T
from tests.compat.sample_records import DECISION, plain_step, run_records, variant_steps


def runners() -> dict[str, object]:
    return {
        "heartbeat": Heartbeat(
            runner="runner-0",
            run_id=RUN,
            step_id="build",
            attempt=1,
            seq=12,
            pid=4242,
            ticket=TICKET,
        ),
        "runner-info": RunnerInfo(
            name="runner-0",
            status="busy",
            pid=17,
            version="0.2.0",
            started_at=T,
            seen_at=LATER,
            pod="runner-0",
            node="node-a",
            run_id=RUN,
            step_id="build",
            attempt=1,
            jobs=9,
            pool="gpu",
            labels=["cuda", "gpu"],
            namespaces=["team-a"],
        ),
        "runner-pod": RunnerPod(
            name="runner-0",
            runner="runner-0",
            uid="8d1e-77",
            phase="Failed",
            node="node-a",
            ready=True,
            restarts=2,
            reason="Evicted",
            last_termination="OOMKilled (exit 137)",
            seen_at=LATER,
        ),
        "lease": Lease(name="orchestrator-5f9c", life="a1b2c3"),
    }


def shared_state() -> dict[str, object]:
    """Namespaces, semaphores, concurrency keys, gates, notifications and tokens."""
    holder = SemaphoreHolder(run_id=RUN, step_id="build", attempt=1, since=T)
    return {
        "namespace-record": NamespaceRecord(
            name="team-a", created_at=T, max_runs_under_way=10, max_running_steps=20
        ),
        "semaphore": Semaphore(
            size=3,
            holders=[holder],
            waiting=[SemaphoreHolder(run_id=RUN, step_id="test", since=LATER)],
        ),
        "concurrency-key": ConcurrencyKey(
            key="release-prod",
            limit=2,
            holders=[RUN],
            queue=["team-a=release-43"],
            cancels=[KeyCancel(run_id="team-a=release-40", by=RUN)],
        ),
        "approval-gate": ApprovalGate(
            run_id=RUN,
            step_id="approve",
            attempt=1,
            message="Ship it?",
            since=T,
            deadline_at=LATER,
            workflow_name="team-a=release",
            decision=DECISION,
        ),
        "notification": Notification(
            run_id=RUN,
            index=0,
            url="https://hooks.example.org/heddle",
            run_status="failed",
            state="gave-up",
            attempts=[NotifyAttempt(at=T, status=503, error="503 Service Unavailable")],
            finished_at=T,
            next_at=LATER,
            claimed_until=LATER,
        ),
        "token-record": TokenRecord(
            name="deployer",
            role="operator",
            hash="ef" * 32,
            created_at=T,
            revoked=True,
            revoked_at=LATER,
            namespaces={"team-a": "operator", "team-b": "viewer"},
        ),
    }


def logs() -> dict[str, object]:
    """A note of the orchestrator's, several lines of one, and a chunk of a command's output
    (raw lines; its stream and first line's number in headers: a file of its own shape)."""
    chunk = {
        "headers": {LOG_STREAM_HEADER: "stderr", LOG_SEQ_HEADER: "41"},
        "body": "warning: old cache\nbuilding amd64\nbuilding arm64",
    }
    return {
        "log-line": LogLine(stream="heddle", seq=3, lines=["queued", "started on runner-0"]),
        "log-line-single": LogLine(stream="heddle", seq=0, text="run cancelled"),
        "log-chunk": chunk,
    }


def run_document() -> RunDocument:
    """``GET /api/runs/{run}`` as the gateway builds it (services/gateway/reads/runs.py),
    every field and every reason's fact set."""
    records = run_records()
    run = records["run-record"]
    run.notify = records["run-record-notify"].notify
    run.parent_run, run.parent_step, run.call_depth = "team-a=ship-7", "release", 1
    why = WaitingFor(
        reason="semaphore",
        sentence="waits for a slot of semaphore builders (3 of 3 held)",
        pool="gpu",
        busy=2,
        total=3,
        labels=["cuda"],
        semaphore="builders",
        holders=[f"{RUN}/build"],
        key="release-prod",
        held_by="team-a=release-40",
        until=LATER,
        ahead=1,
        namespace="team-a",
        quota=20,
        message="Ship it?",
    )
    steps = [plain_step(), *variant_steps().values()]
    notification = shared_state()["notification"]
    assert isinstance(notification, Notification)
    return RunDocument(
        **run_facts(run),
        params=run.params,
        env=run.env,
        retry_of="release-41",
        retried_by="release-43",
        timeout_seconds=run.timeout_seconds,
        deadline_at=run.deadline_at,
        reason=run.reason,
        concurrency_key=run.concurrency_key,
        concurrency_limit=run.concurrency_limit,
        counts={"succeeded": 3, "waiting": 1},
        step_count=len(steps),
        steps_included=True,
        steps=[step_document(s, 1_767_323_045.0, why) for s in steps],
        edges=[Edge(from_="fetch", to="build")],
        parent_run="ship-7",
        parent_step=run.parent_step,
        call_depth=run.call_depth,
        notifications=shown(run, {0: notification}),
        waiting_for=why,
    )


def state() -> dict[str, object]:
    """Every runtime state kind's samples, by file name."""
    return {**runners(), **shared_state(), **logs(), "run-document": run_document()}
