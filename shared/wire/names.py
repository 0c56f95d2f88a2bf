"""Every NATS subject, stream, bucket and durable name Heddle uses, and their builders.

No other module spells a subject literally, so `nats sub` users and the code agree.
"""

from __future__ import annotations

import re

# Ids that appear inside subjects or keys: run, step, runner and workflow names.
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # \Z: no trailing newline
# A forEach step's instance: its step's id and its index, ``build[3]``.
INSTANCE_PATTERN = re.compile(r"^([A-Za-z0-9_-]{1,64})\[(0|[1-9][0-9]{0,8})\]\Z")


def instance_id(step: str, index: int) -> str:
    return f"{step}[{index}]"


def is_step_id(value: str) -> bool:
    """A step's id as a workflow writes it, or a forEach instance's."""
    return bool(ID_PATTERN.match(value) or INSTANCE_PATTERN.match(value))


def step_token(step: str) -> str:
    """A step id as one token of a subject, a KV key or a message id: as it is, but for an
    instance's brackets, which neither allows: ``build[3]`` is ``build=3``. No id a workflow
    writes holds ``=``, so none is taken for another."""
    if "[" not in step:
        return step
    return step.replace("[", "=").removesuffix("]")


# Streams
CMD_STREAM = "HEDDLE_CMD"
STEPS_STREAM = "HEDDLE_STEPS"
EVENTS_STREAM = "HEDDLE_EVENTS"
LOGS_STREAM = "HEDDLE_LOGS"
# Documents too large to travel in their command (a big run's submit), in chunks.
DOCS_STREAM = "HEDDLE_DOCS"

# KV buckets
WORKFLOWS_BUCKET = "heddle-workflows"
RUNS_BUCKET = "heddle-runs"
HEARTBEATS_BUCKET = "heddle-heartbeats"
RUNNERS_BUCKET = "heddle-runners"
CRON_BUCKET = "heddle-cron"
TOKENS_BUCKET = "heddle-tokens"  # API token records by name: hashes, never tokens
# The runner pods as the orchestrator's pod watch last saw them, by pod name (in a cluster).
PODS_BUCKET = "heddle-pods"
# The orchestrators' membership and who owns each partition of the runs (orchestrator/leases.py).
LEASES_BUCKET = "heddle-leases"
# Each semaphore's size and the steps holding its slots, by name (shared/core/semaphores.py).
SEMAPHORES_BUCKET = "heddle-semaphores"
# Each concurrency key's holders and queue, by the sha256 of the key (shared/core/concurrency.py).
CONCURRENCY_BUCKET = "heddle-concurrency"
# Each namespace's record: its quotas (contracts.NamespaceRecord), by name.
NAMESPACES_BUCKET = "heddle-namespaces"
# The approval gates waiting or answered, by ``<run>.<step>`` (contracts.ApprovalGate).
APPROVALS_BUCKET = "heddle-approvals"
# The secrets of webhooks and signed notifications: the gateway's alone (docs/webhooks.md).
SECRETS_BUCKET = "heddle-secrets"
# Each run end's delivery to a notify target, by ``<run>.<index>`` (contracts.Notification).
NOTIFICATIONS_BUCKET = "heddle-notifications"


def secret_key(workflow: str, kind: str, name: str) -> str:
    """The key in heddle-secrets of a workflow's secret (its stored, qualified name): a
    webhook's (``hook``, the hook's name) or a notify target's (``notify``, its index)."""
    return f"{workflow}.{kind}.{name}"


def notification_key(run: str, index: int) -> str:
    """A run's delivery to its workflow's ``notify[index]`` in heddle-notifications."""
    return f"{run}.{index}"


def notifications_of_run(run: str) -> str:
    return f"{run}.*"


ALL_STREAMS = (CMD_STREAM, STEPS_STREAM, EVENTS_STREAM, LOGS_STREAM, DOCS_STREAM)
ALL_BUCKETS = (
    WORKFLOWS_BUCKET,
    RUNS_BUCKET,
    HEARTBEATS_BUCKET,
    RUNNERS_BUCKET,
    CRON_BUCKET,
    TOKENS_BUCKET,
    PODS_BUCKET,
    LEASES_BUCKET,
    SEMAPHORES_BUCKET,
    CONCURRENCY_BUCKET,
    NAMESPACES_BUCKET,
    APPROVALS_BUCKET,
    SECRETS_BUCKET,
    NOTIFICATIONS_BUCKET,
)

# Durable consumers
DISPATCHER_DURABLE = "dispatcher"
# The dispatchers' consumer of the steps that open a run (``step_ready(..., opens=True)``),
# served after those of runs under way (docs/bursts.md, "Runs under way first").
DISPATCHER_OPENING_DURABLE = "dispatcher-opening"
# The most partitions there may be (HEDDLE_PARTITIONS): each is two durable consumers and a
# share of every orchestrator's watch.
MAX_PARTITIONS = 64


def orch_cmd_durable(partition: int) -> str:
    return f"orchestrator-cmd-{partition}"


def orch_events_durable(partition: int) -> str:
    return f"orchestrator-events-{partition}"


# Subjects. Commands and events are published as heddle.cmd.<kind>.<run> and
# heddle.evt.<run>.<step>.<kind>.<runner>; their streams store each with the run's partition
# appended (a subject transform, ``partitioned``), so that one
# orchestrator's consumers take a partition's runs alone (docs/scaling.md, "Several
# orchestrators"). Filters on a run's stored events end in ``>`` for that reason.
CMD_ALL = "heddle.cmd.>"
CMD_PUBLISHED = "heddle.cmd.*.*"
CMD_SUBMIT_ALL = "heddle.cmd.submit.*"
CMD_CANCEL_ALL = "heddle.cmd.cancel.*"
CMD_APPROVAL_ALL = "heddle.cmd.approval.*"  # an approval gate's answer (DecideApproval)
# Retry timers: the schedule waits under heddle.sched.*, and fires into heddle.cmd.timer.*,
# so the orchestrator's consumers (filtered on heddle.cmd.*.*.<partition>) see only fired timers.
CMD_TIMER_ALL = "heddle.cmd.timer.*"
# Run deadlines, the same way: one schedule per run under heddle.sched.deadline.*, apart from
# its steps' retry timers, fired into heddle.cmd.deadline.*.
CMD_DEADLINE_ALL = "heddle.cmd.deadline.*"
# A child run's end, sent by its orchestrator to its parent run (docs/sub-workflows.md).
CMD_CHILD_ALL = "heddle.cmd.child.*"
SCHED_ALL = "heddle.sched.>"
STEP_READY_ALL = "heddle.step.ready.>"
# A step of a run under way, and a step that opens a run (no dependencies): disjoint, as
# the work queue's consumers must be.
STEP_READY_UNDER_WAY = "heddle.step.ready.*.*"
OPENS_SUFFIX = ".opens"
STEP_READY_OPENING = STEP_READY_UNDER_WAY + OPENS_SUFFIX
# A step with runsOn: under the key of the labels it asks for, one consumer per key.
ON_INFIX = ".on."
EVT_ALL = "heddle.evt.>"
EVT_PUBLISHED = "heddle.evt.*.*.*.*"
# Core subscribers see the subject as published, without the partition.
EVT_FINISHED_ALL = "heddle.evt.*.*.finished.*"


# Which of a published pattern's wildcards is the run: what its partition is computed from.
CMD_RUN_WILDCARD, EVT_RUN_WILDCARD, HEARTBEAT_RUN_WILDCARD = 2, 1, 1


def partitioned(published: str, partitions: int, run_wildcard: int) -> str:
    """A subject transform's destination: ``published`` as it was, the partition of its run
    appended (nats-server's ``{{partition(n, k)}}``, ``shared/core/partitions.py``)."""
    tokens, n = [], 0
    for token in published.split("."):
        if token == "*":
            n += 1
            token = f"{{{{wildcard({n})}}}}"
        tokens.append(token)
    return ".".join([*tokens, f"{{{{partition({partitions},{run_wildcard})}}}}"])


def of_partition(published: str, partition: int) -> str:
    """The stored subjects (or keys) of one partition: ``published`` with it appended."""
    return f"{published}.{partition}"


def cmd_of_partition(partition: int) -> str:
    return of_partition(CMD_PUBLISHED, partition)


def evt_of_partition(partition: int) -> str:
    return of_partition(EVT_PUBLISHED, partition)


def cmd_submit(run: str) -> str:
    return f"heddle.cmd.submit.{run}"


def cmd_cancel(run: str) -> str:
    return f"heddle.cmd.cancel.{run}"


def cmd_child(run: str) -> str:
    """Where the end of a child run of ``run`` is told to it (ChildEnded)."""
    return f"heddle.cmd.child.{run}"


def child_ended_msg_id(child: str) -> str:
    """A child run's end is told to its parent once, however often it is sent."""
    return f"child-ended.{child}"


def child_cancel_msg_id(child: str) -> str:
    """The cancel of a child run by its parent (its parent cancelled or past its deadline)."""
    return f"cancel.{child}.by.parent"


def key_cancel_msg_id(run: str, by: str) -> str:
    """The message id of ``run``'s cancel to make room for ``by`` under a concurrency key."""
    return f"cancel.{run}.for.{by}"


# On each log message of a runner: its number among the attempt's runner messages, so a
# reader counts the lines of chunks without reading them (services/gateway/reads/log_index.py).
LOG_MSG_HEADER = "Heddle-Msg"
# A chunk of a command's output (raw lines as written, not JSON) names its stream and its
# first line's number in these headers; notes (JSON) have neither (docs/logs.md).
LOG_STREAM_HEADER = "Heddle-Stream"
LOG_SEQ_HEADER = "Heddle-Seq"
LOG_ALL = "heddle.log.>"
RUNNER_ALL = "heddle.runner.>"
# An offer that takes the attempt's outcome as its answer carries this header: its runner
# sends no "accepted" for a step whose first report is its outcome (docs/latency.md,
# "Answered by the outcome").
ANSWER_HEADER = "Heddle-Answer"
ANSWER_BY_OUTCOME = "outcome"
DOC_ALL = "heddle.doc.>"


def command_run(subject: str) -> str:
    """The run a command's subject names (heddle.cmd.<kind>.<run>, stored or published)."""
    return subject.split(".")[3]


def cmd_timer(run: str) -> str:
    """Where a run's retry timers fire (the step is in the body, RetryDue)."""
    return f"heddle.cmd.timer.{run}"


def sched_timer(run: str, step: str) -> str:
    return f"heddle.sched.timer.{run}.{step_token(step)}"


def cmd_approval(run: str) -> str:
    """Where an approval gate's answer goes (DecideApproval; the step is in the body)."""
    return f"heddle.cmd.approval.{run}"


def approval_key(run: str, step: str) -> str:
    """An approval gate's key in heddle-approvals (contracts.ApprovalGate)."""
    return f"{run}.{step_token(step)}"


def cmd_deadline(run: str) -> str:
    """Where a run's deadline fires (DeadlineDue)."""
    return f"heddle.cmd.deadline.{run}"


def sched_deadline(run: str) -> str:
    """A run's deadline, waiting: one pending schedule per subject, so scheduling it again
    (after a restart) replaces it, and no step's retry timer does."""
    return f"heddle.sched.deadline.{run}"


def step_ready(run: str, step: str, opens: bool = False, key: str = "") -> str:
    """Where a step's ready message goes: ``opens`` for a step with no dependencies, which
    the dispatchers take after the steps of runs under way; a step with ``runsOn`` under
    the key of the labels it asks for (shared/core/labels.py), in a consumer of its own."""
    base = f"heddle.step.ready.{run}.{step_token(step)}"
    if key:
        return f"{base}{ON_INFIX}{key}"
    return f"{base}{OPENS_SUFFIX}" if opens else base


def ready_opens(subject: str) -> bool:
    """Whether a ready message is of a step that opens its run."""
    return subject.endswith(OPENS_SUFFIX)


def ready_key(subject: str) -> str:
    """The labels key of a ready message's subject; "" for the default pool's."""
    _, on, key = subject.partition(ON_INFIX)
    return key if on else ""


def ready_step_token(tail: str) -> str:
    """A ready subject's step token, from the part after ``step_ready(run, "")``."""
    return tail.partition(ON_INFIX)[0].removesuffix(OPENS_SUFFIX)


def step_ready_on(key: str) -> str:
    """The filter of the dispatchers' consumer of steps asking for the labels ``key``."""
    return f"{STEP_READY_UNDER_WAY}{ON_INFIX}{key}"


def dispatcher_on_durable(key: str) -> str:
    """That consumer's name: one per set of labels some runner has."""
    return f"{DISPATCHER_DURABLE}-on-{key}"


def evt(run: str, step: str, kind: str, runner: str) -> str:
    """A runner's event about a step: kind is ``started`` or ``finished``. The kind is in the
    subject so the dispatcher, which only needs outcomes, subscribes to those alone; the
    runner is, so the server's permissions let a runner speak for itself alone."""
    return f"heddle.evt.{run}.{step_token(step)}.{kind}.{runner}"


def stored_evt(run: str, step: str, kind: str, runner: str) -> str:
    """A runner's events of one kind about a step as HEDDLE_EVENTS stores them (a filter)."""
    return f"{evt(run, step, kind, runner)}.*"


def evt_step_kind(run: str, step: str, kind: str) -> str:
    """Every runner's stored events of one kind about a step (a filter on HEDDLE_EVENTS)."""
    return f"heddle.evt.{run}.{step_token(step)}.{kind}.>"


def evt_runner(subject: str) -> str:
    """The runner an event's subject names, as published or as stored (its sixth token)."""
    return subject.split(".")[5]


# Log subjects: heddle.log.<run>.<step>.<attempt>.<namespace>.<writer>, the writer a runner's
# name or NOTES_WRITER. The writer is a token of its own so the server lets a runner write
# under its own name alone, the namespace so a namespace's inspector may read its own alone;
# both come after the attempt, so one filter (``log_step_filter``, ``log_run_filter``) also
# takes the logs written before them, on heddle.log.<run>.<step>.<attempt> (``legacy_log``).
NOTES_WRITER = "=heddle"  # the orchestrator's notes: no runner's name holds "="
LOG_TOKENS = 7  # of a log subject; one from before namespaces has 5


def log(run: str, step: str, attempt: int, namespace: str, writer: str) -> str:
    """Where ``writer`` writes an attempt's log (``namespace``: the run's)."""
    return f"heddle.log.{run}.{step_token(step)}.{attempt}.{namespace}.{writer}"


def legacy_log(run: str, step: str, attempt: int) -> str:
    """An attempt's log as it was written before namespaces (the default namespace's)."""
    return f"heddle.log.{run}.{step_token(step)}.{attempt}"


def log_attempt_filter(run: str, step: str, attempt: int) -> str:
    """Every writer's log of an attempt (not one from before namespaces)."""
    return f"{legacy_log(run, step, attempt)}.>"


def log_step_filter(run: str, step: str) -> str:
    """Every log of a step, of every attempt and writer, of both forms."""
    return f"heddle.log.{run}.{step_token(step)}.>"


def runner_logs(runner: str) -> str:
    """What a runner may write: logs under its own name."""
    return f"heddle.log.*.*.*.*.{runner}"


def namespace_logs(namespace: str) -> str:
    """Every log of a namespace's runs (what its inspector may read)."""
    return f"heddle.log.*.*.*.{namespace}.*"


def log_writer(subject: str) -> tuple[int, str | None]:
    """The attempt and the writer a log subject names; the writer None for a log written
    before namespaces (whose subject names none), the attempt -1 if it is not a number."""
    tokens = subject.split(".")
    attempt = tokens[4] if len(tokens) > 4 else ""
    writer = tokens[6] if len(tokens) == LOG_TOKENS else None
    return (int(attempt) if attempt.isdigit() else -1), writer


def runner_assign(runner: str) -> str:
    return f"heddle.runner.{runner}.assign"


def runner_cancel(runner: str) -> str:
    return f"heddle.runner.{runner}.cancel"


def document(run: str, token: str) -> str:
    """The subject of one document carried beside a command about ``run``: its chunks."""
    return f"heddle.doc.{run}.{token}"


def run_stored(run: str) -> str:
    """Core subject the orchestrator announces a newly stored run on (gateway waits on it)."""
    return f"heddle.notify.run.{run}"


# Keys in heddle-runs
def run_key(run: str) -> str:
    return f"run.{run}"


def step_key(run: str, step: str) -> str:
    return f"step.{run}.{step_token(step)}"


def steps_of_run(run: str) -> str:
    return f"step.{run}.*"


def heartbeat_key(run: str, step: str, runner: str) -> str:
    """Each runner writes its own key, so the server's permissions confine it to its own.
    The bucket stores it with the run's partition appended (``partitioned``), so an
    orchestrator watches its partitions' heartbeats alone; read it as ``stored_heartbeat``."""
    return f"{run}.{step_token(step)}.{runner}"


HEARTBEAT_PUBLISHED = "*.*.*"


def stored_heartbeat(run: str, step: str, runner: str) -> str:
    """A runner's heartbeat key as the bucket stores it (a filter)."""
    return f"{heartbeat_key(run, step, runner)}.*"


def heartbeats_of_partition(partition: int) -> str:
    return of_partition(HEARTBEAT_PUBLISHED, partition)


def heartbeats_of_step(run: str, step: str) -> str:
    return f"{run}.{step_token(step)}.>"


def heartbeats_of_run(run: str) -> str:
    return f"{run}.>"


def kv_subject(bucket: str, key: str) -> str:
    return f"$KV.{bucket}.{key}"


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


# Keys in heddle-runs: the per-workflow run history index (see services/orchestrator/history.py)
def hist_key(workflow: str, run: str) -> str:
    return f"hist.{workflow}.{run}"


def hist_of_workflow(workflow: str) -> str:
    return f"hist.{workflow}.*"


HIST_ALL = "hist.*.*"


def last_run_key(workflow: str) -> str:
    return f"last.{workflow}"


LAST_RUN_ALL = "last.*"


# Keys in heddle-workflows
def workflow_version_key(workflow: str, version: int) -> str:
    return f"{workflow}.v{version}"


def workflow_latest_key(workflow: str) -> str:
    return f"{workflow}.latest"


WORKFLOW_LATEST_ALL = "*.latest"


# Keys in heddle-cron
def cron_slot_key(workflow: str, slot_stamp: str) -> str:
    return f"{workflow}.{slot_stamp}"


def cron_cursor_key(workflow: str) -> str:
    return f"{workflow}.cursor"


CRON_CURSOR_ALL = "*.cursor"


def log_run_filter(run: str) -> str:
    return f"heddle.log.{run}.>"


def evt_run_filter(run: str) -> str:
    return f"heddle.evt.{run}.>"


def cmd_run_filter(run: str) -> str:
    """A run's stored commands, of every kind (each with its partition appended)."""
    return f"heddle.cmd.*.{run}.>"


def sched_run_filters(run: str) -> tuple[str, str]:
    """A run's waiting timers: its steps' retries, and its deadline."""
    return f"heddle.sched.*.{run}.>", f"heddle.sched.*.{run}"


# Message ids (Nats-Msg-Id), so a re-sent command or event is stored once.
def submit_msg_id(run: str) -> str:
    return f"submit.{run}"


def event_msg_id(kind: str, run: str, step: str, attempt: int, runner: str) -> str:
    """A runner's event is stored once however often it is re-sent; two runners' events
    about the same attempt (a redelivered assignment) are both kept, and the state machine
    decides which one counts."""
    return f"{kind}.{run}.{step_token(step)}.{attempt}.{runner}"


def ready_msg_id(run: str, step: str, attempt: int, requeue: int = 0) -> str:
    """One ready message per attempt however often it is re-sent; an attempt queued again
    after its assignment was lost gets a new one (the old id may still be remembered)."""
    base = f"ready.{run}.{step_token(step)}.{attempt}"
    return f"{base}.r{requeue}" if requeue else base
