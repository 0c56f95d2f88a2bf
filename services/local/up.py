"""`heddle up`: the whole system on one machine, each service its own process.

Starts the embedded NATS server (unless HEDDLE_NATS_URL points at one), the orchestrator,
one or more dispatchers, N runner agents and the gateway, prefixes each one's output with its name,
restarts a service that crashes, and on Ctrl-C or SIGTERM stops them all, leaving nothing
behind. What it keeps in its data dir is services/local/up_files.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from heddle.services.local.embedded_nats import (
    EmbeddedNats,
    NatsServerError,
    machine_go_threads,
    port_open,
)
from heddle.services.local.nats_users import CONTEXT_FILE, NatsUsers
from heddle.services.local.runner_pools import RunnerSpec, runner_specs, step_uids_of
from heddle.services.local.supervisor import Child, Supervisor
from heddle.services.local.up_files import (
    NATS_LOG,
    NATS_STORE,
    URL_FILE,
    admin_token,
    local_address,
    make_private,
    private_umask,
    write_url,
)
from heddle.services.runner_agent.isolation import step_uids_problem
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.runtime.settings import Settings, step_uid_range

# `up` is said once the gateway answers /readyz, so a submit sent on that line is taken.
READY_POLL = 0.1
SLOW_START = 30.0  # seconds before a gateway not yet ready is mentioned


def service_argv(service: str) -> list[str]:
    return [sys.executable, "-m", "heddle.services.cli", service]


Runners = int | Sequence[RunnerSpec]  # a count of the default pool's, or each runner


def runner_list(runners: Runners) -> list[RunnerSpec]:
    return runner_specs(runners, ()) if isinstance(runners, int) else list(runners)


def own_step_uids(settings: Settings, spec: RunnerSpec) -> str:
    """The HEDDLE_STEP_UIDS a runner of a named pool is given ("" for the others: theirs)."""
    return step_uids_of(step_uid_range(settings.step_uids), spec) if spec.uid_offset else ""


def runner_names(runners: Runners) -> list[str]:
    return [spec.name for spec in runner_list(runners)]


def orchestrator_names(orchestrators: int) -> list[str]:
    """``orchestrator``, then ``orchestrator-1`` ... for more (they share one NATS user)."""
    return ["orchestrator", *(f"orchestrator-{i}" for i in range(1, orchestrators))]


def dispatcher_names(dispatchers: int) -> list[str]:
    """``dispatcher``, then ``dispatcher-1`` ... for more (they share one NATS user)."""
    return ["dispatcher", *(f"dispatcher-{i}" for i in range(1, dispatchers))]


def plan(
    settings: Settings,
    runners: Runners,
    base_env: dict[str, str],
    users: NatsUsers | None = None,
    admin_token_file: Path | None = None,
    dispatchers: int = 1,
    orchestrators: int = 1,
) -> list[Child]:
    """The processes to start, in start order (the gateway last, once the rest is up). With
    ``users`` (the embedded server), each connects as its own NATS user; every dispatcher as
    the one dispatcher user, under a name of its own (HEDDLE_DISPATCHER_NAME)."""
    env = {
        **base_env,
        **settings.to_env(),
        "HEDDLE_NATS_URL": settings.nats_url,
        "PYTHONUNBUFFERED": "1",
    }

    def own(user: str) -> dict[str, str]:
        return {**env, **(users.env(user) if users else {})}

    children = [
        Child(name, service_argv("orchestrator"), {**own(perms.ORCHESTRATOR), **named})
        for name in orchestrator_names(orchestrators)
        for named in ({"HEDDLE_ORCHESTRATOR_NAME": name},)
    ]
    for name in dispatcher_names(dispatchers):
        env_d = {**own(perms.DISPATCHER), "HEDDLE_DISPATCHER_NAME": name}
        children.append(Child(name, service_argv("dispatcher"), env_d))
    for spec in runner_list(runners):
        name = spec.name
        runner_env = users.runner_env(name) if users else {"HEDDLE_RUNNER_NAME": name}
        runner_env = {**runner_env, **spec.env(own_step_uids(settings, spec))}
        children.append(Child(name, service_argv("runner"), {**env, **runner_env}))
    gateway_env = {**own(perms.GATEWAY), "HEDDLE_GATEWAY_PORT": str(settings.gateway_port)}
    if admin_token_file is not None:
        gateway_env["HEDDLE_ADMIN_TOKEN_FILE"] = str(admin_token_file)
    children.append(Child("gateway", service_argv("gateway"), gateway_env))
    ports = metrics_ports(settings.metrics_port, runners, dispatchers, orchestrators)
    for child in children:
        if child.name in ports:
            child.env["HEDDLE_METRICS_PORT"] = str(ports[child.name])
    return children


def metrics_ports(
    base: int, runners: Runners, dispatchers: int = 1, orchestrators: int = 1
) -> dict[str, int]:
    """With HEDDLE_METRICS_PORT=B, each process its own port from B: the orchestrator B,
    the dispatcher B+1, the gateway B+2, runner-i B+3+i, then dispatcher-1 ... and
    orchestrator-1 ... after the runners; with 0 (the default), none."""
    if not base:
        return {}
    first, *more = dispatcher_names(dispatchers)
    _, *others = orchestrator_names(orchestrators)
    names = ["orchestrator", first, "gateway", *runner_names(runners), *more, *others]
    return {name: base + i for i, name in enumerate(names)}


def start_embedded_nats(
    data_dir: Path,
    port: int,
    runners: Runners,
    inspector_namespaces: list[str] | None = None,
    store_max_bytes: int = 0,
    go_threads: int = 0,
) -> tuple[EmbeddedNats, NatsUsers]:
    """The embedded nats-server with a user for every service and runner, and an inspector
    for each of ``inspector_namespaces``, kept in data_dir; the services' account stores at
    most ``store_max_bytes`` (HEDDLE_STORE_MAX_BYTES; 0: no limit of Heddle's); its Go
    scheduler on ``go_threads`` threads (0: as Go decides)."""
    users = NatsUsers.load(data_dir, store_max_bytes=store_max_bytes)
    users.ensure_runners(runner_names(runners))
    users.keep_namespace_inspectors(inspector_namespaces or [])
    users.save()
    nats = EmbeddedNats(
        data_dir / NATS_STORE,
        port=port,
        log_file=data_dir / NATS_LOG,
        config=users.config_path,
        go_threads=go_threads,
    )
    nats.start()
    users.save_context(nats.url)
    users.save_namespace_contexts(nats.url)
    return nats, users


def greeting(
    settings: Settings,
    where: str,
    runners: Runners,
    dispatchers: int,
    token: tuple[Path | None, str] | None,
    orchestrators: int = 1,
    on_terminal: bool = False,
) -> list[str]:
    """What `heddle up` says once everything runs: where the page is, with its token only
    ``on_terminal``: written to a file or a pipe, others (a step) could read it there."""
    page = f"http://{settings.gateway_host}:{settings.gateway_port}/"
    several = f", {dispatchers} dispatchers" if dispatchers > 1 else ""
    several += f", {orchestrators} orchestrators" if orchestrators > 1 else ""
    lines = [
        f"up: {page} (NATS {settings.nats_url}, {where}, {len(runner_list(runners))} runners"
        f"{several}); Ctrl-C stops"
    ]
    if token is not None and on_terminal:
        # As Jupyter does: the page's address with the admin token, for this terminal only.
        lines.append(f"open {page}?token={token[1]}")
        lines.append(f'API token: {token[0]} (curl -H "Authorization: Bearer ...")')
    elif token is not None:
        lines.append(f"API token: {token[0]} (printed on a terminal only; the page takes ?token=)")
    else:
        lines.append("HEDDLE_AUTH=none: the API is open to anyone who reaches it")
    ports = metrics_ports(settings.metrics_port, runners, dispatchers, orchestrators)
    for name, port in ports.items():
        lines.append(f"metrics: {name} http://{settings.metrics_host}:{port}/metrics")
    return lines


async def until_serving(
    settings: Settings, stop: asyncio.Event, say: Callable[[str], None]
) -> bool:
    """Until the gateway answers its readiness probe (True), or ``stop`` is set first."""
    import aiohttp  # only `up` needs an HTTP client: not imported with the CLI

    url = local_address(settings.gateway_host, settings.gateway_port) + "/readyz"
    slow_at = asyncio.get_running_loop().time() + SLOW_START
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return True
            if slow_at and asyncio.get_running_loop().time() > slow_at:
                say(f"the gateway is not ready after {SLOW_START:g} s; still waiting")
                slow_at = 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), READY_POLL)
    return False


async def supervise(
    sup: Supervisor, settings: Settings, hello: list[str], serving: Callable[[], None]
) -> None:
    """Run the services; once the gateway serves, call ``serving`` and say ``hello``; stop
    them on Ctrl-C or SIGTERM."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sup.start()
    if await until_serving(settings, stop, say=lambda line: sup.say("heddle", line)):
        serving()
        for line in hello:
            sup.say("heddle", line)
    await stop.wait()
    sup.say("heddle", "stopping")
    await sup.stop(settings.shutdown_grace + settings.kill_grace + 5)


async def run_up(
    settings: Settings,
    runners: Runners,
    data_dir: Path,
    nats_port: int,
    dispatchers: int = 1,
    orchestrators: int = 1,
    inspector_namespaces: list[str] | None = None,
) -> int:
    nats: EmbeddedNats | None = None
    users: NatsUsers | None = None
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        make_private(data_dir)  # and what an older Heddle left in it
    except OSError as exc:
        print(f"heddle up: cannot use {data_dir} as the data dir: {exc.strerror}", file=sys.stderr)
        return 2
    # As root, runner-i runs its steps as the i-th uid of HEDDLE_STEP_UIDS, its alone on this
    # machine: said now rather than by each runner failing to start.
    specs = runner_list(runners)
    each = {spec.name: own_step_uids(settings, spec) for spec in specs if spec.uid_offset}
    if problem := step_uids_problem(settings, runner_names(specs), step_uids=each):
        print(f"heddle up: {problem}", file=sys.stderr)
        return 2
    if not os.environ.get("HEDDLE_NATS_URL"):
        with private_umask():  # nats-server makes its store and log under the umask it gets
            nats, users = start_embedded_nats(
                data_dir,
                nats_port,
                runners,
                inspector_namespaces,
                settings.store_max_bytes,
                machine_go_threads(settings.nats_gomaxprocs),
            )
        settings = Settings.from_env(nats_url=nats.url, gateway_port=settings.gateway_port)
    auth = settings.auth != "none"
    token_file, token = admin_token(data_dir) if auth else (None, "")
    if port_open(settings.gateway_port):
        if nats:
            nats.stop()
        print(
            f"heddle up: port {settings.gateway_port} is already in use; pick another with --port",
            file=sys.stderr,
        )
        return 2
    where = f"data in {data_dir}" if nats else "external NATS"
    token_shown = (token_file, token) if auth else None
    on_terminal = sys.stdout.isatty()  # the only output the token is printed on
    hello = greeting(settings, where, runners, dispatchers, token_shown, orchestrators, on_terminal)
    if users is not None:
        hello.append(f"inspect: nats --context {data_dir / CONTEXT_FILE} stream ls")
    sup = Supervisor(
        plan(settings, runners, dict(os.environ), users, token_file, dispatchers, orchestrators)
    )
    url = local_address(settings.gateway_host, settings.gateway_port)

    def serving() -> None:
        # Written once the gateway answers: a command line that finds it is served at once.
        write_url(data_dir, url)

    try:
        await supervise(sup, settings, hello, serving)
    finally:
        # Left behind, it would name a port anyone may listen on next: the CLI sends it a token.
        (data_dir / URL_FILE).unlink(missing_ok=True)
        if nats:
            nats.stop()
    sup.say("heddle", "stopped")
    return 0


def main_up(
    settings: Settings,
    runners: Runners,
    data_dir: str,
    nats_port: int,
    dispatchers: int = 1,
    orchestrators: int = 1,
    inspector_namespaces: list[str] | None = None,
) -> int:
    try:
        return asyncio.run(
            run_up(
                settings,
                runners,
                Path(data_dir).resolve(),
                nats_port,
                dispatchers,
                orchestrators,
                inspector_namespaces,
            )
        )
    except NatsServerError as exc:
        print(f"heddle up: {exc}", file=sys.stderr)
        return 2
