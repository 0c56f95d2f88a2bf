"""The options of the commands that drive a gateway (services/cli/commands.py): each
command's own, and --url, --token and --token-file, which go before or after the command."""

from __future__ import annotations

import argparse
from typing import Protocol

from heddle.services.cli import completion
from heddle.shared.api.config import DEFAULT_TOKEN_FILE, URL_FALLBACK
from heddle.shared.wire.contracts import MAX_PRIORITY, MIN_PRIORITY

RUN_STATUSES = ("running", "succeeded", "failed", "cancelled")
EXIT_HELP = f"""\
exit codes:
  0  succeeded, or the command did what it was asked
  1  the run failed (watch, submit --wait, run --wait)
  2  usage: bad options, a workflow file with problems (each listed; nothing is sent), or
     what was given refused by the gateway as it stands (400, 413)
  3  the run was cancelled
  4  cannot connect, or the gateway refused (401, 403, 404, 409, 5xx)

gateway: --url, else $HEDDLE_URL, else {URL_FALLBACK} (written by `heddle up`)
token: --token, else --token-file, else $HEDDLE_TOKEN, else the file $HEDDLE_TOKEN_FILE,
  else {DEFAULT_TOKEN_FILE} (options go before or after the command)
namespace: --namespace/-n, else $HEDDLE_NAMESPACE, else the gateway chooses (the token's own
  when it has one, else default)
"""


def connection_options(parser: argparse.ArgumentParser, after: bool) -> None:
    """--url, --token and --token-file, on the top parser (``after`` False: defaults None)
    and again on each command (SUPPRESS: given there they win, left out they keep the
    top parser's), so they go before or after the command."""
    default = argparse.SUPPRESS if after else None
    parser.add_argument(
        "--url", default=default, help=f"the gateway (default $HEDDLE_URL, else {URL_FALLBACK})"
    )
    parser.add_argument("--token", default=default, help="an API token")
    parser.add_argument("--token-file", default=default, help="a file holding an API token")
    parser.add_argument(
        "-n",
        "--namespace",
        default=default,
        help="the namespace to work in (default $HEDDLE_NAMESPACE, else the token's own when it "
        "has one, else default)",
    )


def limit_number(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 1000, not {text!r}")
    return value


class Command(Protocol):
    """Makes a command's parser, under its name and any ``aliases``."""

    def __call__(
        self, name: str, help: str, aliases: tuple[str, ...] = ()
    ) -> argparse.ArgumentParser: ...


def wait_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true", help="follow the run; exit with its outcome")


def priority_number(text: str) -> int:
    value = int(text) if text.lstrip("-").isdecimal() else None
    if value is None or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise argparse.ArgumentTypeError(
            f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, not {text!r}"
        )
    return value


def priority_option(p: argparse.ArgumentParser, over: str) -> None:
    p.add_argument(
        "--priority",
        type=priority_number,
        metavar="N",
        help=f"the run's priority, higher first (default: {over}, else 0)",
    )


def add_starting_parsers(command: Command) -> None:
    """The commands that start a run: submit, run, retry."""
    p = command("submit", "run an inline workflow from a JSON or YAML file (- for stdin)")
    p.add_argument("file")
    p.add_argument("--run-id", help="the run's id: submitting it again makes no second run")
    priority_option(p, "the file's")
    wait_option(p)
    p = command("run", "trigger a run of a registered workflow", ("trigger",))
    p.add_argument("name")
    p.add_argument("--key", help="an idempotency key: the same key makes one run")
    p.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter's value (repeat for more); steps get HEDDLE_PARAM_<NAME>",
    )
    p.add_argument(
        "--scheduled-for",
        metavar="TIME",
        help="the cron slot the run is for (ISO 8601): one run per slot, as cron's",
    )
    priority_option(p, "the workflow's")
    wait_option(p)
    p = command("retry", "run a failed or cancelled run again from its failure")
    p.add_argument("run")
    wait_option(p)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    connection_options(common, after=True)
    common.add_argument("--json", action="store_true", help="print the API's JSON as it is")

    def command(name: str, help: str, aliases: tuple[str, ...] = ()) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, parents=[common], help=help, description=help, aliases=list(aliases)
        )

    add_starting_parsers(command)
    command("register", "register a workflow (a new version if it changed)").add_argument("file")
    command("status", "a run's status and its steps").add_argument("run")
    command("watch", "follow a run until it ends; exit with its outcome").add_argument("run")
    p = command("logs", "a step's log, or follow it with -f")
    p.add_argument("run")
    p.add_argument("step")
    p.add_argument("-f", "--follow", action="store_true", help="print lines as they come")
    p.add_argument("--attempt", type=attempt_number, help="only this attempt's lines")
    p.add_argument(
        "--raw",
        action="store_true",
        help="the lines as the step wrote them, control characters too (on a terminal they "
        "are shown as cat -v shows them)",
    )
    command("cancel", "cancel a run").add_argument("run")
    p = command("runs", "recent runs, newest first")
    p.add_argument("--workflow", help="only the runs of this registered workflow")
    p.add_argument("--status", choices=RUN_STATUSES, help="only runs in this state")
    p.add_argument("--limit", type=limit_number, default=20, help="at most this many (default 20)")
    command("workflows", "registered workflows")
    command("pause", "pause a workflow's schedule").add_argument("name")
    command("resume", "resume a workflow's schedule").add_argument("name")
    command("runners", "the runner pool")
    command("semaphores", "every semaphore: its size, its holders and the steps waiting")
    add_approval_parsers(command)
    p = command("semaphore", "set a semaphore's size (needs an admin token)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("set", parents=[common], help="set a semaphore's size")
    p.add_argument("name", help="[A-Za-z0-9_-]{1,64}")
    p.add_argument("size", type=size_number, help="how many steps may hold it at once, >= 1")
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    p.add_argument("shell", choices=completion.SHELLS)


def add_approval_parsers(command: Command) -> None:
    """approve, reject and approvals: the gates of runs (docs/approvals.md)."""
    for name, what in (("approve", "approve"), ("reject", "reject")):
        p = command(name, f"{what} a step waiting for approval (needs an operator token)")
        p.add_argument("run")
        p.add_argument("step")
        p.add_argument("--comment", metavar="TEXT", help="why, kept with the decision")
    command("approvals", "the steps waiting for approval, oldest first")


def size_number(text: str) -> int:
    if not text.isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a size is an integer of at least 1")
    return int(text)


def attempt_number(text: str) -> int:
    if not text.isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: attempts are numbered from 1")
    return int(text)
