"""Who may publish and subscribe where on Heddle's NATS server: one user per service, one per
runner, and a read-only inspector. Pure: the table (the server configuration, which also puts
each user in its account, is built in shared/broker/nats_accounts.py); the passwords live with
whoever starts the server (services/local/nats_users.py for ``heddle up``, a Secret for the chart).

Each user gets inboxes of its own (``_INBOX_<user>``, see ``inbox_prefix``): a request's reply
and a JetStream acknowledgement reach only the user that asked, where a shared ``_INBOX.>``
would let anyone allowed it read every reply. A runner's user names the runner in the subjects
and keys it may write, so the server itself stops one runner speaking for another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.shared.wire import names

GATEWAY = "gateway"
ORCHESTRATOR = "orchestrator"
DISPATCHER = "dispatcher"
INSPECTOR = "inspector"
# Takes the snapshots of ``heddle backup``; the other makes streams from them again, on the
# temporary server of ``heddle restore`` alone (docs/backup.md).
BACKUP, RESTORE = "backup", "restore"
# A namespace's inspector is inspector-<namespace>: it reads that namespace's logs alone.
NAMESPACE_INSPECTOR_PREFIX = INSPECTOR + "-"
SERVICES = (GATEWAY, ORCHESTRATOR, DISPATCHER)
RUNNER_PREFIX = "runner-"  # a runner's user is runner-<runner name>

API = "$JS.API"
ALL_KV_STREAMS = tuple(map(names.kv_stream, names.ALL_BUCKETS))
ALL_STREAMS = (*names.ALL_STREAMS, *ALL_KV_STREAMS)
SECRETS_STREAM = names.kv_stream(names.SECRETS_BUCKET)


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    subscribe_deny: tuple[str, ...] = ()
    allow_responses: bool = False  # may answer a request it received (a runner's assignment)

    def to_config(self) -> dict[str, object]:
        out: dict[str, object] = {
            "publish": _rule(self.publish, self.publish_deny),
            "subscribe": _rule(self.subscribe, self.subscribe_deny),
        }
        if self.allow_responses:
            out["allow_responses"] = True
        return out


@dataclass(frozen=True)
class User:
    name: str
    password: str
    permissions: Permissions = field(compare=False)


def _rule(allow: tuple[str, ...], deny: tuple[str, ...]) -> dict[str, list[str]]:
    rule = {"allow": sorted(set(allow))}
    if deny:
        rule["deny"] = sorted(set(deny))
    return rule


def runner_user(runner: str) -> str:
    return RUNNER_PREFIX + runner


def inbox_prefix(user: str) -> str:
    return f"_INBOX_{user}"


def _inbox(user: str) -> str:
    return inbox_prefix(user) + ".>"


def info(*streams: str) -> tuple[str, ...]:
    """Check the server and look a stream up (every service does at start)."""
    return (
        f"{API}.INFO",
        f"{API}.STREAM.NAMES",  # which stream holds a subject (nats-py's subscribe asks)
        *(f"{API}.STREAM.INFO.{s}" for s in streams),
    )


def keeps(*streams: str) -> tuple[str, ...]:
    """Create a stream, or bring its configuration to the settings (shared/broker/resources.py)."""
    return tuple(f"{API}.STREAM.{op}.{s}" for s in streams for op in ("CREATE", "UPDATE"))


def reads(*streams: str) -> tuple[str, ...]:
    """Read a stream's messages: gets, KV watches and replays, and durable pull consumers
    (their acknowledgements and flow control included)."""
    out: list[str] = list(info(*streams))
    for s in streams:
        out += [
            *_value_reads(s),
            f"{API}.CONSUMER.INFO.{s}.>",
            f"{API}.CONSUMER.DELETE.{s}.>",
            f"{API}.CONSUMER.MSG.NEXT.{s}.>",
            f"$JS.ACK.{s}.>",
            f"$JS.FC.{s}.>",
        ]
    return tuple(out)


def _value_reads(s: str) -> tuple[str, ...]:
    """The calls that hand a stream's messages over: a get, or a consumer made."""
    return (
        f"{API}.DIRECT.GET.{s}",
        f"{API}.DIRECT.GET.{s}.>",
        f"{API}.STREAM.MSG.GET.{s}",
        f"{API}.CONSUMER.CREATE.{s}",
        f"{API}.CONSUMER.CREATE.{s}.>",
        f"{API}.CONSUMER.DURABLE.CREATE.{s}.>",
    )


def kv_write(bucket: str, key: str = ">") -> str:
    return names.kv_subject(bucket, key)


def secret_reads() -> tuple[str, ...]:
    """Every call that reads heddle-secrets' values (a get, a consumer, a snapshot): the
    gateway's alone, denied to any other user whose allowances would cover them."""
    return (*_value_reads(SECRETS_STREAM), f"{API}.STREAM.SNAPSHOT.{SECRETS_STREAM}")


def gateway() -> Permissions:
    return Permissions(
        publish=(
            names.CMD_SUBMIT_ALL,
            names.CMD_CANCEL_ALL,
            names.CMD_APPROVAL_ALL,  # an approval gate answered (docs/approvals.md)
            names.DOC_ALL,  # a submit too large for its command (shared/broker/documents.py)
            f"{API}.STREAM.PURGE.{names.DOCS_STREAM}",  # one whose submit was a duplicate
            kv_write(names.WORKFLOWS_BUCKET),
            kv_write(names.TOKENS_BUCKET),
            kv_write(names.SEMAPHORES_BUCKET),  # a semaphore's size (PUT /api/semaphores)
            kv_write(names.NAMESPACES_BUCKET),  # a namespace and its quotas
            kv_write(names.SECRETS_BUCKET),  # webhooks' and notify targets' (its alone)
            kv_write(names.NOTIFICATIONS_BUCKET),  # a delivery's claim and its attempts
            kv_write(names.APPROVALS_BUCKET),  # a gate's answer, by compare-and-set
            *keeps(*ALL_STREAMS),
            *info(*ALL_STREAMS),
            *reads(names.LOGS_STREAM, *ALL_KV_STREAMS),
        ),
        subscribe=(
            _inbox(GATEWAY),
            names.run_stored("*"),
            # A followed run's records as they are put (shared/broker/kv_changes.py).
            names.kv_subject(names.RUNS_BUCKET, names.run_key("*")),
            names.kv_subject(names.RUNS_BUCKET, names.steps_of_run("*")),
        ),
    )


def orchestrator() -> Permissions:
    """The owner of run state: every stream's keeper, the only writer of runs, cron and pods."""
    return Permissions(
        publish=(
            names.CMD_SUBMIT_ALL,  # the cron scheduler's runs, and the child runs of calls
            names.CMD_CANCEL_ALL,  # a run cancelled to free its key, or its parent's
            names.CMD_CHILD_ALL,  # a child run's end, told to its parent
            names.CMD_TIMER_ALL,
            names.CMD_DEADLINE_ALL,
            names.SCHED_ALL,
            names.STEP_READY_ALL,
            names.LOG_ALL,  # the orchestrator's notes in a step's log
            names.runner_cancel("*"),
            names.runner_assign("*"),  # a successor handed to the runner that freed up
            names.run_stored("*"),
            kv_write(names.RUNS_BUCKET),
            kv_write(names.CRON_BUCKET),
            kv_write(names.PODS_BUCKET),  # the runner pods, as its pod watch sees them
            kv_write(names.LEASES_BUCKET),  # orchestrators' membership and partitions
            kv_write(names.SEMAPHORES_BUCKET),  # the slots its runs' steps hold
            kv_write(names.CONCURRENCY_BUCKET),  # the concurrency keys its runs hold
            kv_write(names.NOTIFICATIONS_BUCKET),  # a run's end's deliveries, created
            kv_write(names.APPROVALS_BUCKET),  # its runs' approval gates, opened and closed
            f"{API}.>",
            "$JS.ACK.>",
            "$JS.FC.>",
        ),
        subscribe=(_inbox(ORCHESTRATOR),),
        publish_deny=secret_reads(),  # the webhooks' secrets are the gateway's alone
    )


def dispatcher() -> Permissions:
    buckets = (names.RUNNERS_BUCKET, names.HEARTBEATS_BUCKET, names.RUNS_BUCKET)
    streams = (names.STEPS_STREAM, names.EVENTS_STREAM, *map(names.kv_stream, buckets))
    return Permissions(
        publish=(names.runner_assign("*"), *keeps(*streams), *reads(*streams)),
        subscribe=(_inbox(DISPATCHER), names.EVT_FINISHED_ALL),
    )


def runner(name: str) -> Permissions:
    """One runner: its own events, heartbeats and registry entry, its own assignments. It
    reads no stream, so it never sees another attempt's ticket or command."""
    return Permissions(
        publish=(
            names.evt("*", "*", "started", name),
            names.evt("*", "*", "finished", name),
            names.runner_logs(name),
            kv_write(names.HEARTBEATS_BUCKET, names.heartbeat_key("*", "*", name)),
            kv_write(names.RUNNERS_BUCKET, name),
            *info(
                names.EVENTS_STREAM,
                names.LOGS_STREAM,
                names.kv_stream(names.HEARTBEATS_BUCKET),
                names.kv_stream(names.RUNNERS_BUCKET),
            ),
        ),
        subscribe=(_inbox(runner_user(name)), f"heddle.runner.{name}.>"),
        allow_responses=True,
    )


def inspector() -> Permissions:
    """Read-only, for people with the ``nats`` CLI: list streams and consumers, get stored
    messages (``nats stream get``, ``nats kv get``), subscribe to live subjects.

    It creates no consumer of any kind. A consumer create can only be limited by its
    subject, and the server takes the rest from the request's body: a legacy create names
    in its body the consumer it makes or *updates* (a service's durable too), a named one
    may be durable, and any of them may be a push consumer whose deliver subject the
    server then publishes the stream to, whatever the creator may publish or subscribe to
    (nats-server issue #8274). Subject permissions match whole tokens, so no name prefix
    can be set aside for it either."""
    return Permissions(
        publish=(
            f"{API}.INFO",
            f"{API}.STREAM.LIST",
            f"{API}.STREAM.NAMES",
            f"{API}.STREAM.INFO.*",
            f"{API}.CONSUMER.LIST.*",
            f"{API}.CONSUMER.NAMES.*",
            f"{API}.CONSUMER.INFO.*.*",
            f"{API}.DIRECT.GET.*",
            f"{API}.DIRECT.GET.*.>",  # the last message of a subject (a KV key)
            f"{API}.STREAM.MSG.GET.*",
        ),
        subscribe=("heddle.>", "$KV.>", "_INBOX.>", _inbox(INSPECTOR)),
        # The webhooks' secrets are the gateway's alone: not read, not watched as written.
        publish_deny=secret_reads(),
        subscribe_deny=(names.kv_subject(names.SECRETS_BUCKET, ">"),),
    )


def backup() -> Permissions:
    """Snapshots of every stream and bucket, with their chunks' acknowledgements
    (shared/broker/snapshots.py): it reads everything, the webhooks' secrets too, and
    changes nothing. It makes no consumer and deletes none."""
    return Permissions(
        publish=(
            *info(*ALL_STREAMS),
            *(f"{API}.STREAM.SNAPSHOT.{s}" for s in ALL_STREAMS),
            *(f"$JS.SNAPSHOT.ACK.{s}.>" for s in ALL_STREAMS),
        ),
        subscribe=(_inbox(BACKUP),),
    )


def restore() -> Permissions:
    """Heddle's streams made again from their snapshots, where none of that name exists
    (the server refuses the rest). Only ``heddle restore``'s temporary server has this
    user; it is gone from the data dir before ``heddle up`` starts on it."""
    return Permissions(
        publish=(
            f"{API}.INFO",
            *(f"{API}.STREAM.RESTORE.{s}" for s in ALL_STREAMS),
            *(f"$JS.SNAPSHOT.RESTORE.{s}.>" for s in ALL_STREAMS),
        ),
        subscribe=(_inbox(RESTORE),),
    )


def namespace_inspector_user(namespace: str) -> str:
    return NAMESPACE_INSPECTOR_PREFIX + namespace


def namespace_inspector(namespace: str) -> Permissions:
    """One namespace's inspector: it watches that namespace's logs live (``nats sub``) and
    nothing else. It reads no stream: no KV, no message by sequence, and no consumer, whose
    create request may name in its body a deliver subject the server then writes the
    stream's messages to, whatever the creator may publish (nats-server issue #8274); a
    step's output, which the namespace's users control, would land there."""
    return Permissions(
        publish=(f"{API}.INFO",),  # nothing it can change: the account's own limits
        subscribe=(names.namespace_logs(namespace), _inbox(namespace_inspector_user(namespace))),
    )


def permissions_for(user: str) -> Permissions:
    fixed = {
        GATEWAY: gateway,
        ORCHESTRATOR: orchestrator,
        DISPATCHER: dispatcher,
        INSPECTOR: inspector,
        BACKUP: backup,
        RESTORE: restore,
    }
    if user in fixed:
        return fixed[user]()
    if user.startswith(RUNNER_PREFIX):
        return runner(user[len(RUNNER_PREFIX) :])
    if user.startswith(NAMESPACE_INSPECTOR_PREFIX):
        return namespace_inspector(user[len(NAMESPACE_INSPECTOR_PREFIX) :])
    raise KeyError(f"no NATS role for user {user!r}")
