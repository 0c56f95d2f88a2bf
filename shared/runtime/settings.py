"""Every setting Heddle reads, in one place.

Each field maps to one environment variable (``HEDDLE_`` + the field name in upper case,
except the Kubernetes-provided ``POD_NAME`` and ``NODE_NAME``). Durations are seconds and
may be fractional, so tests can shorten intervals without sleeping for the defaults.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, TypeVar, cast, get_args

from heddle.shared.core.hosts import DEFAULT_ALLOWED_HOSTS, host_patterns
from heddle.shared.core.labels import MAX_RUNNER_LABELS, label_problems, parse_labels
from heddle.shared.core.pool_namespaces import parse_namespaces, pool_namespaces_problems
from heddle.shared.core.runner_pools import parse_pools
from heddle.shared.wire.errors import SettingsError
from heddle.shared.wire.names import MAX_PARTITIONS


@dataclass(frozen=True, slots=True)
class Setting:
    env: str
    help: str


T = TypeVar("T")


def _s(default: T, env: str, help: str) -> T:
    return field(default=default, metadata={"setting": Setting(env, help)})


def _setting(f: Field[Any]) -> Setting:
    setting: Setting = f.metadata["setting"]
    return setting


# The settings that name one of a few choices; each one's accepted values, in the order the
# error message lists them (Settings._choice_problems).
OnOff = Literal["on", "off"]
Storage = Literal["file", "memory"]
AuthMode = Literal["tokens", "none"]
MetricsAuth = Literal["open", "token"]
PodWatchMode = Literal["auto", "off"]
EventLoop = Literal["uvloop", "asyncio"]


# Settings that must be above zero (seconds, rates), and counts that must be at least one.
POSITIVE = (
    "no_runner_timeout",
    "heartbeat_interval",
    "heartbeat_grace",
    "watchdog_scan",
    "registry_interval",
    "assign_timeout",
    "ready_ack_wait",
    "retry_base",
    "retry_cap",
    "kill_grace",
    "default_timeout",
    "body_timeout",
    "nats_timeout",
    "autoscale_up_after",
    "autoscale_idle_after",
    "autoscale_interval",
    "autoscale_start_timeout",
    "cron_tick",
    "cron_time_scale",
    "retention_interval",
    "store_check_interval",
    "lease_ttl",
    "header_timeout",
    "notify_timeout",
    "notify_backoff",
)
AT_LEAST_ONE = (
    "replicas",
    "max_steps",
    "max_items",
    "max_call_depth",
    "max_command_bytes",
    "max_body_bytes",
    "output_tail_bytes",
    "outputs_max_bytes",
    "log_line_max_bytes",
    "partitions",
    "max_unauthenticated",
    "webhook_max_body",
    "webhook_rate",
)
# Step uids: 32-bit signed, as Kubernetes' runAsUser and the launcher's records have them
# ((uid_t)-1 would mean "unchanged" to setresuid); 65534 is nobody, 65535 -1 in 16 bits.
MAX_UID = 2**31 - 1
NOBODY_UID = 65534


@dataclass(frozen=True, slots=True)
class Settings:
    nats_url: str = _s(
        "nats://127.0.0.1:4222", "HEDDLE_NATS_URL", "NATS server URL(s), comma separated"
    )
    storage: Storage = _s(
        "file", "HEDDLE_STORAGE", "JetStream storage for streams and buckets: file or memory"
    )
    replicas: int = _s(1, "HEDDLE_REPLICAS", "replicas of every stream and bucket (clustered NATS)")
    nats_user: str = _s(
        "",
        "HEDDLE_NATS_USER",
        "this service's NATS user (gateway, orchestrator, dispatcher, runner-<name>); empty "
        "connects anonymously, which a server with users refuses",
    )
    nats_password: str = _s(
        "", "HEDDLE_NATS_PASSWORD", "the NATS user's password (never passed on to a step)"
    )
    nats_password_file: str = _s(
        "",
        "HEDDLE_NATS_PASSWORD_FILE",
        "a file holding the NATS user's password (a mounted Secret), read at each connect; "
        "instead of HEDDLE_NATS_PASSWORD",
    )
    gateway_host: str = _s("127.0.0.1", "HEDDLE_GATEWAY_HOST", "address the gateway listens on")
    gateway_port: int = _s(8080, "HEDDLE_GATEWAY_PORT", "port the gateway listens on")
    max_body_bytes: int = _s(
        16 * 1024 * 1024, "HEDDLE_MAX_BODY_BYTES", "largest accepted HTTP request body"
    )
    webhook_max_body: int = _s(
        1024 * 1024,
        "HEDDLE_WEBHOOK_MAX_BODY",
        "largest webhook delivery body accepted (POST /hooks/...); a larger one gets 413",
    )
    webhook_rate: int = _s(
        60,
        "HEDDLE_WEBHOOK_RATE",
        "webhook deliveries a minute each hook takes, per gateway; more get 429",
    )
    body_timeout: float = _s(
        30.0,
        "HEDDLE_BODY_TIMEOUT",
        "seconds a request body may take to arrive; a slower one is cut with 408",
    )
    auth: AuthMode = _s(
        "tokens",
        "HEDDLE_AUTH",
        "tokens (every API request needs a token with a role, see Tokens and roles) or none (no "
        "authentication, logged as a warning: only for a gateway no one else can reach)",
    )
    admin_token_file: str = _s(
        "",
        "HEDDLE_ADMIN_TOKEN_FILE",
        "a file holding the first admin token: at start the gateway stores its hash as the token "
        "named admin, unless a token of that name exists (a revoked one stays revoked)",
    )
    metrics_auth: MetricsAuth = _s(
        "open", "HEDDLE_METRICS_AUTH", "open (GET /metrics needs no token) or token (a viewer's)"
    )
    metrics_port: int = _s(
        0,
        "HEDDLE_METRICS_PORT",
        "port of this service's own Prometheus endpoint (GET /metrics); 0 serves none (the "
        "gateway still serves /metrics on its HTTP port)",
    )
    metrics_host: str = _s(
        "127.0.0.1", "HEDDLE_METRICS_HOST", "address the metrics endpoint listens on"
    )
    allowed_hosts: str = _s(
        DEFAULT_ALLOWED_HOSTS,
        "HEDDLE_ALLOWED_HOSTS",
        "host names the gateway answers to (the Host header, port ignored), comma separated; "
        "`*` stands for any part of one label, `*` alone for any host; the listen address is "
        "added when it is not 0.0.0.0 or ::",
    )
    submit_confirm_timeout: float = _s(
        3.0,
        "HEDDLE_SUBMIT_CONFIRM_TIMEOUT",
        "how long POST /api/runs waits for the orchestrator before answering 202",
    )
    public_url: str = _s(
        "",
        "HEDDLE_PUBLIC_URL",
        "the gateway's address as its users reach it (https://heddle.example.org): the run's "
        'page link in a notification; "" sends none',
    )
    notify_timeout: float = _s(
        10.0,
        "HEDDLE_NOTIFY_TIMEOUT",
        "how long the gateway waits for a notify target's answer before counting the attempt "
        "failed",
    )
    notify_backoff: float = _s(
        5.0, "HEDDLE_NOTIFY_BACKOFF", "wait after a notification's first failed attempt"
    )
    notify_retry_for: float = _s(
        3600.0,
        "HEDDLE_NOTIFY_RETRY_FOR",
        "a notification that keeps failing is given up this long after its run ended",
    )
    max_steps: int = _s(100_000, "HEDDLE_MAX_STEPS", "most steps in one workflow")
    max_items: int = _s(
        10_000, "HEDDLE_MAX_ITEMS", "most items a step's forEach may give (its instances)"
    )
    max_call_depth: int = _s(
        10,
        "HEDDLE_MAX_CALL_DEPTH",
        "deepest that calls of workflows may nest: a call step whose child run would be "
        "deeper fails (docs/sub-workflows.md)",
    )
    max_command_bytes: int = _s(
        16 * 1024, "HEDDLE_MAX_COMMAND_BYTES", "longest step command, in UTF-8 bytes"
    )
    default_timeout: float = _s(
        3600.0, "HEDDLE_DEFAULT_TIMEOUT", "timeoutSeconds of a step that sets none"
    )
    heartbeat_interval: float = _s(
        10.0, "HEDDLE_HEARTBEAT_INTERVAL", "how often a runner writes a running step's heartbeat"
    )
    heartbeat_grace: float = _s(
        3.0,
        "HEDDLE_HEARTBEAT_GRACE",
        "missed heartbeat intervals before a runner is declared silent",
    )
    watchdog_scan: float = _s(
        2.0,
        "HEDDLE_WATCHDOG_SCAN",
        "how often the orchestrator's watchdog looks for silent runners",
    )
    started_report_delay: float = _s(
        0.1,
        "HEDDLE_STARTED_REPORT_DELAY",
        "a step still running this long after its command started is reported running (its "
        "started event and first log note); one that ends sooner is reported once, by its "
        "outcome, and writes no heartbeat (0 reports every start at once, each attempt's "
        "heartbeat stored before its command starts)",
    )
    registry_interval: float = _s(
        5.0, "HEDDLE_REGISTRY_INTERVAL", "how often a runner refreshes its registry entry"
    )
    registry_ttl: float = _s(
        15.0,
        "HEDDLE_REGISTRY_TTL",
        "a runner that has not refreshed for this long leaves the pool (whole seconds, >= 1)",
    )
    assign_timeout: float = _s(
        2.0,
        "HEDDLE_ASSIGN_TIMEOUT",
        "how long the dispatcher waits for a runner to accept an assignment (a runner answers "
        "within a quarter of it)",
    )
    handoff: OnOff = _s(
        "on",
        "HEDDLE_HANDOFF",
        "a step readied by a success is handed by the orchestrator to the runner that just "
        "succeeded, rather than through the dispatchers (which take it if that runner does not): "
        "on or off (off with autoscaling, which drains runners the orchestrator knows nothing of)",
    )
    continue_chains: OnOff = _s(
        "on",
        "HEDDLE_CONTINUE",
        "a step handed to a runner takes along the next steps of its chain (one placed by a "
        "dispatcher, the next one), each started by that runner the moment the one before "
        "succeeds without outputs, the orchestrator told by the outcome: on or off; nothing "
        "without HEDDLE_HANDOFF",
    )
    nats_timeout: float = _s(
        10.0,
        "HEDDLE_NATS_TIMEOUT",
        "seconds a request through a service's JetStream context (stream and KV reads, the "
        "gateway's stored submits and cancels) may wait for its answer; the gateway answers "
        "503 after it",
    )
    ready_ack_wait: float = _s(
        4.0,
        "HEDDLE_READY_ACK_WAIT",
        "how long after a dispatcher last touched a ready step in its hand the others may take "
        "it (a dispatcher that died); at least twice HEDDLE_ASSIGN_TIMEOUT is used",
    )
    retry_base: float = _s(1.0, "HEDDLE_RETRY_BASE", "backoff after the first failed attempt")
    retry_cap: float = _s(300.0, "HEDDLE_RETRY_CAP", "longest backoff between attempts")
    kill_grace: float = _s(
        5.0, "HEDDLE_KILL_GRACE", "time between SIGTERM and SIGKILL of a step's process group"
    )
    output_tail_bytes: int = _s(
        64 * 1024,
        "HEDDLE_OUTPUT_TAIL_BYTES",
        "how much of stdout and stderr a finished event carries",
    )
    outputs_max_bytes: int = _s(
        64 * 1024,
        "HEDDLE_OUTPUTS_MAX_BYTES",
        "largest $HEDDLE_OUTPUTS file a step may write (its outputs in all); a larger one "
        "fails the attempt",
    )
    log_max_age: float = _s(7 * 86400.0, "HEDDLE_LOG_MAX_AGE", "how long HEDDLE_LOGS keeps a line")
    log_max_bytes: int = _s(1024**3, "HEDDLE_LOG_MAX_BYTES", "total size HEDDLE_LOGS keeps")
    store_max_bytes: int = _s(
        0,
        "HEDDLE_STORE_MAX_BYTES",
        "the JetStream store's size for Heddle: `heddle up` makes it its account's max_file; "
        "the store's metrics and admission measure against the account's limit, or this when "
        "the account has none (a server's whole store); 0: none (docs/storage.md)",
    )
    nats_gomaxprocs: int = _s(
        0,
        "HEDDLE_NATS_GOMAXPROCS",
        "threads the embedded nats-server of `heddle up` runs its goroutines on (its "
        "GOMAXPROCS); 0: a quarter of this machine's CPUs, at least one, unless GOMAXPROCS "
        'is set (docs/performance.md, "The embedded server\'s threads")',
    )
    store_reserve_bytes: int = _s(
        16 * 1024**2,
        "HEDDLE_STORE_RESERVE_BYTES",
        "room kept free in the store for the runs under way: a submit or a register that "
        "would leave less is refused (507), and older logs are purged to keep it",
    )
    store_check_interval: float = _s(
        5.0,
        "HEDDLE_STORE_CHECK_INTERVAL",
        "how often the orchestrator reads the store's use (metrics, logs purged for room) and "
        "how long the gateway trusts its last reading",
    )
    log_line_max_bytes: int = _s(
        16 * 1024,
        "HEDDLE_LOG_LINE_MAX_BYTES",
        "a longer output line is split into pieces of this size",
    )
    shutdown_grace: float = _s(
        10.0,
        "HEDDLE_SHUTDOWN_GRACE",
        "how long SIGTERM waits for in-flight work before cancelling it",
    )
    cron_tick: float = _s(
        1.0, "HEDDLE_CRON_TICK", "how often the orchestrator's scheduler looks for due cron slots"
    )
    cron_backfill: int = _s(
        1000,
        "HEDDLE_CRON_BACKFILL",
        "most missed slots of one workflow the scheduler runs per tick (the rest on later ticks)",
    )
    cron_time_scale: float = _s(
        1.0,
        "HEDDLE_CRON_TIME_SCALE",
        "test hook: the scheduler's clock runs this many times as fast as real time from the "
        "orchestrator's start (60 makes an every-minute schedule fire every second); keep 1",
    )
    retention_runs: int = _s(
        1000,
        "HEDDLE_RETENTION_RUNS",
        "finished runs kept per workflow, newest first; older ones are deleted with their "
        "steps, heartbeats and logs (0 keeps every run)",
    )
    retention_age: float = _s(
        30 * 86400.0,
        "HEDDLE_RETENTION_AGE",
        "finished runs (named or not) are deleted this long after they finished (0 keeps any age)",
    )
    retention_interval: float = _s(
        600.0, "HEDDLE_RETENTION_INTERVAL", "how often the orchestrator applies the retention"
    )
    runner_name: str = _s(
        "", "HEDDLE_RUNNER_NAME", "this runner's name; default POD_NAME, else <host>-<pid>"
    )
    runner_pool: str = _s(
        "default",
        "HEDDLE_RUNNER_POOL",
        "the pool this runner belongs to: its name is one of the runner's labels, and a runner "
        "outside the default pool takes only steps whose runsOn asks for its labels",
    )
    runner_labels: str = _s(
        "",
        "HEDDLE_RUNNER_LABELS",
        "this runner's labels beside its pool's name, comma-separated (a step's runsOn names "
        "labels a runner must all have)",
    )
    pool_namespaces: str = _s(
        "",
        "HEDDLE_POOL_NAMESPACES",
        'the namespaces whose steps this runner takes, comma-separated; "" = every namespace '
        "(docs/namespaces.md)",
    )
    no_runner_timeout: float = _s(
        600.0,
        "HEDDLE_NO_RUNNER_TIMEOUT",
        "a step that no registered runner can take (none has every label its runsOn asks for) "
        "fails after waiting this long, unless autoscaling is growing a pool with those labels",
    )
    run_window: int = _s(
        0,
        "HEDDLE_RUN_WINDOW",
        "the most steps of one run queued or running at once; its other ready steps wait their "
        "turn in the orchestrator, so that a big run leaves room for small ones (0: eight times "
        "the registered runners, at least 8)",
    )
    dispatcher_name: str = _s(
        "",
        "HEDDLE_DISPATCHER_NAME",
        "this dispatcher's name in its logs and NATS connection, when several run; default "
        "POD_NAME, else dispatcher",
    )
    orchestrator_name: str = _s(
        "",
        "HEDDLE_ORCHESTRATOR_NAME",
        "this orchestrator's name among several (unique to each; a process that finds its own "
        "name's lease from before takes it over at once); default POD_NAME, else <host>-<pid>",
    )
    partitions: int = _s(
        12,
        "HEDDLE_PARTITIONS",
        "how many partitions the runs are spread over, each owned by one orchestrator at a "
        "time; fixed when the streams are first made (at most 64)",
    )
    max_runs_under_way: int = _s(
        32,
        "HEDDLE_MAX_RUNS_UNDER_WAY",
        "the most runs an orchestrator has under way at once; later runs are stored and wait "
        "their turn, highest priority then oldest first, every step pending (0: no bound). "
        "Under a burst the runs begun end first: near the pool's size the median run ends "
        "soonest, while runs that wait on long steps or retries hold places and need room "
        "above it",
    )
    lease_ttl: float = _s(
        3.0,
        "HEDDLE_LEASE_TTL",
        "an orchestrator silent this long loses its partitions to the others (it renews "
        "every third of it, and acts on nothing while its last renewal is older)",
    )
    step_user: str = _s(
        "",
        "HEDDLE_STEP_USER",
        "the user a runner started as root runs its steps as (a name or uid; none keeps "
        "the runner's own; empty: a uid of its own, from HEDDLE_STEP_UIDS); a runner that is "
        "not root runs them as itself",
    )
    step_uids: str = _s(
        "60600-61099",
        "HEDDLE_STEP_UIDS",
        "uids FIRST-LAST that nothing else on the machine uses, one per runner: a runner "
        "started as root without HEDDLE_STEP_USER runs its steps as FIRST+N, N the number its "
        "name ends in (HEDDLE_RUNNER_NAME or POD_NAME), and refuses to start if another runner "
        "holds that uid; every process a step leaves is killed, by uid, when it ends",
    )
    pod_name: str = _s("", "POD_NAME", "set by Kubernetes: the runner pod's name")
    node_name: str = _s("", "NODE_NAME", "set by Kubernetes: the node the pod runs on")
    pod_watch: PodWatchMode = _s(
        "auto",
        "HEDDLE_POD_WATCH",
        "the orchestrator watches the runner pods through the Kubernetes API and fails the "
        "attempt of a runner whose pod is deleted, evicted, OOMKilled or on a NotReady node at "
        "once: auto (when it runs in a cluster, or HEDDLE_KUBECONFIG is set) or off",
    )
    kubeconfig: str = _s(
        "",
        "HEDDLE_KUBECONFIG",
        "a kubeconfig file for the pod watch and autoscaling, instead of the pod's in-cluster "
        "service account",
    )
    kube_namespace: str = _s(
        "",
        "HEDDLE_KUBE_NAMESPACE",
        "the runner pods' namespace; empty: the orchestrator pod's own (or the kubeconfig "
        "context's)",
    )
    runner_pod_selector: str = _s(
        "app.kubernetes.io/component=runner",
        "HEDDLE_RUNNER_POD_SELECTOR",
        "the label selector of the runner pods the pod watch follows; a pod's runner is its "
        "heddle/runner label, else its name",
    )
    autoscale: OnOff = _s(
        "off",
        "HEDDLE_AUTOSCALE",
        "the dispatcher scales the runner StatefulSets through their scale subresource, between "
        "HEDDLE_AUTOSCALE_MIN and HEDDLE_AUTOSCALE_MAX: on or off",
    )
    autoscale_min: int = _s(1, "HEDDLE_AUTOSCALE_MIN", "the fewest runners autoscaling keeps")
    autoscale_max: int = _s(4, "HEDDLE_AUTOSCALE_MAX", "the most runners autoscaling asks for")
    autoscale_up_after: float = _s(
        30.0,
        "HEDDLE_AUTOSCALE_UP_AFTER",
        "seconds a ready step waits, every runner busy, before the pool grows",
    )
    autoscale_idle_after: float = _s(
        300.0,
        "HEDDLE_AUTOSCALE_IDLE_AFTER",
        "seconds a runner is idle before the pool shrinks (from its highest ordinals)",
    )
    autoscale_interval: float = _s(
        2.0, "HEDDLE_AUTOSCALE_INTERVAL", "seconds between two looks at the pool"
    )
    autoscale_start_timeout: float = _s(
        180.0,
        "HEDDLE_AUTOSCALE_START_TIMEOUT",
        "seconds a runner asked for counts as coming before it registers",
    )
    runner_statefulset_prefix: str = _s(
        "runner-",
        "HEDDLE_RUNNER_STATEFULSET_PREFIX",
        "the runner StatefulSets autoscaling scales are <prefix>0 ... <prefix><max-1>, one "
        "single-replica StatefulSet per runner, its runner named after it",
    )
    runner_pools: str = _s(
        "",
        "HEDDLE_RUNNER_POOLS",
        "the runner pools, a JSON list of {name, labels, statefulset, minReplicas, maxReplicas, "
        'autoscaling}: the dispatcher scales each pool with autoscaling on its own; "" = the '
        "default pool alone, as HEDDLE_AUTOSCALE_* and HEDDLE_RUNNER_STATEFULSET_PREFIX say",
    )
    log_level: str = _s("info", "HEDDLE_LOG_LEVEL", "debug, info, warning or error")
    event_loop: EventLoop = _s(
        "uvloop",
        "HEDDLE_EVENT_LOOP",
        "uvloop (faster: fewer CPU cycles per message) or asyncio (the standard library's)",
    )
    header_timeout: float = _s(
        10.0,
        "HEDDLE_HEADER_TIMEOUT",
        "seconds a new gateway connection may take to send its first request's line and "
        "headers; a slower one is closed without an answer",
    )
    max_unauthenticated: int = _s(
        256,
        "HEDDLE_MAX_UNAUTHENTICATED",
        "most gateway connections open at once that have not yet sent a valid token (with "
        "HEDDLE_AUTH=none: a request the gateway let through); one more closes the oldest of "
        "them. Such a connection is also closed after its first answer",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read every setting from ``env`` (default ``os.environ``); bad values raise one error
        that lists every problem."""
        env = os.environ if env is None else env
        # Each value's type is as its field's default; its meaning is checked by problems().
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in fields(cls):
            meta = _setting(f)
            raw = env.get(meta.env)
            if raw is None or raw == "":
                continue
            # Every setting has a default (_s), a str, an int or a float: its type parses it.
            kind = cast("type[str | int | float]", type(f.default))
            try:
                values[f.name] = kind(raw)
            except ValueError:
                problems.append(f"{meta.env}={raw!r} is not a valid {kind.__name__}")
        values.update(overrides)
        settings = cls(**values)
        problems.extend(settings.problems())
        if problems:
            raise SettingsError(problems)
        return settings

    def problems(self) -> list[str]:
        """Values that parse but make no sense (every one, not the first)."""
        return [*self._choice_problems(), *self._range_problems(), *self._label_problems()]

    def _label_problems(self) -> list[str]:
        """The runner's pool name, labels and namespaces (shared/core/labels.py,
        pool_namespaces.py)."""
        pool = [f"HEDDLE_RUNNER_POOL: {p}" for p in label_problems([self.runner_pool], 1)]
        extra = parse_labels(self.runner_labels)
        namespaces = parse_namespaces(self.pool_namespaces)
        return [
            *pool,
            *(f"HEDDLE_RUNNER_LABELS: {p}" for p in label_problems(extra, MAX_RUNNER_LABELS - 1)),
            *(f"HEDDLE_POOL_NAMESPACES: {p}" for p in pool_namespaces_problems(namespaces)),
        ]

    def _choice_problems(self) -> list[str]:
        """Settings that name one of a few choices, or a pattern."""
        choices: dict[str, tuple[str, ...]] = {
            "event_loop": get_args(EventLoop),
            "pod_watch": get_args(PodWatchMode),
            "autoscale": get_args(OnOff),
            "handoff": get_args(OnOff),
            "continue_chains": get_args(OnOff),
            "storage": get_args(Storage),
            "auth": get_args(AuthMode),
            "metrics_auth": get_args(MetricsAuth),
        }
        problems = [
            f"{env_name(name)} must be {' or '.join(allowed)}, not {getattr(self, name)!r}"
            for name, allowed in choices.items()
            if getattr(self, name) not in allowed
        ]
        if not 0 <= self.autoscale_min <= self.autoscale_max or self.autoscale_max < 1:
            problems.append(
                "HEDDLE_AUTOSCALE_MIN and HEDDLE_AUTOSCALE_MAX need 0 <= min <= max and max >= 1"
            )
        if not self.runner_statefulset_prefix:
            problems.append("HEDDLE_RUNNER_STATEFULSET_PREFIX must not be empty")
        problems.extend(f"HEDDLE_ALLOWED_HOSTS: {p}" for p in host_patterns(self.allowed_hosts)[1])
        for check, text in ((step_uid_range, self.step_uids), (parse_pools, self.runner_pools)):
            try:
                check(text)
            except ValueError as exc:
                problems.append(str(exc))
        return problems

    def _range_problems(self) -> list[str]:
        """Numbers outside what they can mean."""
        # `not x > 0` rather than `x <= 0`: NaN is refused too.
        problems = [
            f"{env_name(name)} must be positive" for name in POSITIVE if not getattr(self, name) > 0
        ]
        problems += [
            f"{env_name(name)} must be at least 1"
            for name in AT_LEAST_ONE
            if getattr(self, name) < 1
        ]
        bounds = [
            (
                self.partitions <= MAX_PARTITIONS,
                f"HEDDLE_PARTITIONS must be at most {MAX_PARTITIONS}",
            ),
            (self.cron_backfill >= 1, "HEDDLE_CRON_BACKFILL must be at least 1"),
            (self.retention_runs >= 0, "HEDDLE_RETENTION_RUNS must be 0 (keep all) or more"),
            (
                self.max_runs_under_way >= 0,
                "HEDDLE_MAX_RUNS_UNDER_WAY must be 0 (no bound) or more",
            ),
            (
                self.started_report_delay >= 0,
                "HEDDLE_STARTED_REPORT_DELAY must be 0 (at once) or more",
            ),
            (self.retention_age >= 0, "HEDDLE_RETENTION_AGE must be 0 (keep all) or more"),
            (self.store_max_bytes >= 0, "HEDDLE_STORE_MAX_BYTES must be 0 (the account's) or more"),
            (self.store_reserve_bytes >= 0, "HEDDLE_STORE_RESERVE_BYTES must be 0 or more"),
            (self.nats_gomaxprocs >= 0, "HEDDLE_NATS_GOMAXPROCS must be 0 (a quarter) or more"),
            (
                self.store_max_bytes == 0
                or self.log_max_bytes + self.store_reserve_bytes < self.store_max_bytes,
                "HEDDLE_LOG_MAX_BYTES plus HEDDLE_STORE_RESERVE_BYTES must be below "
                "HEDDLE_STORE_MAX_BYTES (the logs' limit is reserved in the store)",
            ),
            (self.registry_ttl >= 1, "HEDDLE_REGISTRY_TTL must be at least 1 second"),
            (self.run_window >= 0, "HEDDLE_RUN_WINDOW must be 0 (eight times the runners) or more"),
            (
                0 <= self.metrics_port <= 65535,
                "HEDDLE_METRICS_PORT must be between 0 (none) and 65535",
            ),
            (
                0 <= self.gateway_port <= 65535,
                "HEDDLE_GATEWAY_PORT must be between 0 (any free port) and 65535",
            ),
        ]
        return problems + [message for holds, message in bounds if not holds]

    @property
    def silence_limit(self) -> float:
        """Seconds without a heartbeat after which a runner is declared silent."""
        return self.heartbeat_interval * self.heartbeat_grace

    def to_env(self) -> dict[str, str]:
        """The settings as environment variables, for starting child services."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                out[_setting(f).env] = str(value)
        return out


def step_uid_range(text: str) -> range:
    """HEDDLE_STEP_UIDS as uids: ``FIRST-LAST`` (both in it) or one uid. Raises ValueError
    saying what is wrong: root is never in it, nor nobody, whom other programs run as."""
    match = re.fullmatch(r"\s*([0-9]{1,10})\s*(?:-\s*([0-9]{1,10})\s*)?", text)
    if match is None:
        raise ValueError(f"HEDDLE_STEP_UIDS must be FIRST-LAST (e.g. 60600-61099), not {text!r}")
    first, last = int(match[1]), int(match[2] or match[1])
    wrong = [
        message
        for holds, message in (
            (first > last, "FIRST is above LAST"),
            (first == 0, "0 is root"),
            (last > MAX_UID, f"uids go up to {MAX_UID}"),
            (
                first <= NOBODY_UID + 1 and last >= NOBODY_UID,
                "it holds 65534 or 65535 (nobody, whom other programs run as, and -1 in 16 bits)",
            ),
        )
        if holds
    ]
    if wrong:
        raise ValueError(f"HEDDLE_STEP_UIDS={text!r}: {wrong[0]}")
    return range(first, last + 1)


def env_name(field_name: str) -> str:
    for f in fields(Settings):
        if f.name == field_name:
            return _setting(f).env
    raise KeyError(field_name)


def settings_table() -> str:
    """The settings as a Markdown table (the README's copy is generated from this)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for f in fields(Settings):
        meta = _setting(f)
        rows.append(f"| `{meta.env}` | `{f.default}` | {meta.help} |")
    return "\n".join(rows)
