"""The `heddle` command: one subcommand per service, plus `up` for the whole system."""

from __future__ import annotations

import argparse
import sys

from heddle.shared.runtime.settings import Settings, settings_table
from heddle.shared.wire.errors import HeddleError, SettingsError

SERVICES = ("gateway", "orchestrator", "dispatcher", "runner")


def build_service(name: str, settings: Settings):
    if name == "gateway":
        from heddle.services.gateway.app import Gateway

        return Gateway(settings)
    if name == "orchestrator":
        from heddle.services.orchestrator.app import Orchestrator

        return Orchestrator(settings)
    if name == "dispatcher":
        from heddle.services.dispatcher.app import Dispatcher

        return Dispatcher(settings)
    from heddle.services.runner_agent.app import RunnerAgent
    from heddle.services.runner_agent.process import use_pidfd_child_watcher

    use_pidfd_child_watcher()
    return RunnerAgent(settings)


def parser() -> argparse.ArgumentParser:
    from heddle.services.cli import backup_cli, nats_users_cli, options, token_cli

    p = argparse.ArgumentParser(
        prog="heddle",
        description="Heddle: DAGs of shell commands "
        "over NATS JetStream. Settings come from HEDDLE_* variables "
        "(see `heddle settings`).",
        epilog=options.EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.connection_options(p, after=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SERVICES:
        sub.add_parser(name, help=f"run the {name} service")
    up = sub.add_parser("up", help="run NATS, every service and N runners on this machine")
    up.add_argument("--port", type=int, default=None, help="gateway port (default 8080)")
    up.add_argument("--runners", type=int, default=4, help="local runner agents (default 4)")
    up.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME=COUNT[:LABELS][@NAMESPACES]",
        help="COUNT runners in the pool NAME, labelled NAME and the comma-separated LABELS, "
        "taking the steps of the '+'-joined NAMESPACES alone ('*': every one; default: "
        "HEDDLE_POOL_NAMESPACES) (repeatable)",
    )
    up.add_argument("--dispatchers", type=int, default=1, help="dispatcher processes (default 1)")
    up.add_argument(
        "--orchestrators", type=int, default=1, help="orchestrator processes (default 1)"
    )
    up.add_argument("--data-dir", default=".heddle", help="NATS store and logs (default .heddle)")
    up.add_argument("--nats-port", type=int, default=4222, help="embedded NATS port (default 4222)")
    up.add_argument(
        "--inspector-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="a NATS user inspector-NS that may watch namespace NS's logs, and its nats "
        "context (repeatable)",
    )
    sub.add_parser("settings", help="print every setting with its default")
    token_cli.add_parser(sub)
    nats_users_cli.add_parser(sub)
    backup_cli.add_parsers(sub)
    options.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0] in SERVICES:
        return serve(argv[0])  # a service starts without importing the client's commands
    from heddle.services.cli import backup_cli, nats_users_cli, token_cli
    from heddle.services.cli import commands as client

    top = parser()
    args = top.parse_args(argv)
    if args.command in client.COMMANDS or args.command == "completion":
        return client.run(args, top)
    if args.command == "settings":
        print(settings_table())
        return 0
    if args.command == "token":
        return token_cli.run(args)
    if args.command == "nats-users":
        return nats_users_cli.run(args)
    if args.command in ("backup", "restore"):
        return backup_cli.run(args)
    if args.command in SERVICES:
        return serve(args.command)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"heddle: {exc}", file=sys.stderr)
        return 2
    if args.command == "up":
        from heddle.services.local.nats_users import inspector_namespaces_problems
        from heddle.services.local.runner_pools import PoolOptionError, parse_pools, runner_specs
        from heddle.services.local.up import main_up
        from heddle.shared.core.pool_namespaces import parse_namespaces

        counts = {"runners": args.runners, "dispatchers": args.dispatchers}
        counts["orchestrators"] = args.orchestrators
        low = [f"--{name}" for name, n in counts.items() if n < 1]
        problems = [f"{' and '.join(low)} must be at least 1"] if low else []
        problems += inspector_namespaces_problems(args.inspector_namespace)
        if problems:
            print(f"heddle up: {'; '.join(problems)}", file=sys.stderr)
            return 2
        if args.orchestrators > settings.partitions:
            print(
                f"heddle up: --orchestrators {args.orchestrators} is more than the "
                f"{settings.partitions} partitions (HEDDLE_PARTITIONS): some would hold none",
                file=sys.stderr,
            )
            return 2
        try:
            pools = parse_pools(args.pool)
            runners = runner_specs(args.runners, pools, parse_namespaces(settings.pool_namespaces))
        except PoolOptionError as exc:
            print(f"heddle up: {exc}", file=sys.stderr)
            return 2
        if args.port is not None:
            settings = Settings.from_env(gateway_port=args.port)
        return main_up(
            settings,
            runners,
            args.data_dir,
            args.nats_port,
            args.dispatchers,
            args.orchestrators,
            args.inspector_namespace,
        )
    raise AssertionError(f"unhandled command {args.command!r}")


def serve(name: str) -> int:
    """Run one service until it is stopped."""
    from heddle.shared.runtime.service import run_service

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"heddle: {exc}", file=sys.stderr)
        return 2
    without_websocket_client(name, settings)
    try:
        run_service(build_service(name, settings), settings)
    except HeddleError as exc:
        print(f"heddle {name}: {exc}", file=sys.stderr)
        return 2
    return 0


def without_websocket_client(name: str, settings: Settings) -> None:
    """nats-py imports aiohttp for its WebSocket transport alone, a third of a service's
    imports: a service that serves no HTTP and dials NATS over TCP starts without it."""
    websocket = any(u.strip().startswith(("ws:", "wss:")) for u in settings.nats_url.split(","))
    if name != "gateway" and not settings.metrics_port and not websocket:
        # None: `import aiohttp` is an ImportError, a value the import system documents and
        # typeshed's sys.modules (modules only) does not allow.
        sys.modules.setdefault("aiohttp", None)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
