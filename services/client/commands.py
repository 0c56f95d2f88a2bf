"""The commands that drive a Heddle gateway: submit, run, register, status, watch, logs,
cancel, runs, workflows, pause, resume, runners. Each parses its options, makes its calls
through services/client/http.py and prints text (or the API's JSON with ``--json``); every
error ends up in ``run``, which maps it to an exit code (EXIT_HELP)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from services.client import completion, documents, logs, render, watch
from services.client.http import (
    DEFAULT_TOKEN_FILE,
    DEFAULT_URL,
    Gateway,
    Refused,
    Unreachable,
    Usage,
    resolve_token,
    resolve_url,
)

USAGE, REFUSED = 2, 4  # the run's own codes are in watch.EXIT_CODES (0, 1, 3)
RUN_STATUSES = ("running", "succeeded", "failed", "cancelled")
EXIT_HELP = f"""\
exit codes:
  0  succeeded, or the command did what it was asked
  1  the run failed (watch, submit --wait, run --wait)
  2  usage: bad options, a workflow file with problems (each listed; nothing is sent), or
     what was given refused by the gateway as it stands (400, 413)
  3  the run was cancelled
  4  cannot connect, or the gateway refused (401, 403, 404, 409, 5xx)

gateway: --url, else $HEDDLE_URL, else {DEFAULT_URL}
token: --token, else --token-file, else $HEDDLE_TOKEN, else the file $HEDDLE_TOKEN_FILE,
  else {DEFAULT_TOKEN_FILE} (options go before or after the command)
"""


def connection_options(parser: argparse.ArgumentParser, after: bool) -> None:
    """--url, --token and --token-file, on the top parser (``after`` False: defaults None)
    and again on each command (SUPPRESS: given there they win, left out they keep the
    top parser's), so they go before or after the command."""
    default = argparse.SUPPRESS if after else None
    parser.add_argument("--url", default=default, help=f"the gateway (default {DEFAULT_URL})")
    parser.add_argument("--token", default=default, help="an API token")
    parser.add_argument("--token-file", default=default, help="a file holding an API token")


def _limit(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 1000, not {text!r}")
    return value


def add_parsers(sub: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    connection_options(common, after=True)
    common.add_argument("--json", action="store_true", help="print the API's JSON as it is")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help, description=help)

    def wait_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--wait", action="store_true", help="follow the run; exit with its outcome")

    p = command("submit", "run an inline workflow from a JSON or YAML file (- for stdin)")
    p.add_argument("file")
    p.add_argument("--run-id", help="the run's id: submitting it again makes no second run")
    wait_option(p)
    p = command("run", "trigger a run of a registered workflow")
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
    wait_option(p)
    p = command("retry", "run a failed or cancelled run again from its failure")
    p.add_argument("run")
    wait_option(p)
    command("register", "register a workflow (a new version if it changed)").add_argument("file")
    command("status", "a run's status and its steps").add_argument("run")
    command("watch", "follow a run until it ends; exit with its outcome").add_argument("run")
    p = command("logs", "a step's log, or follow it with -f")
    p.add_argument("run")
    p.add_argument("step")
    p.add_argument("-f", "--follow", action="store_true", help="print lines as they come")
    p.add_argument("--attempt", type=attempt_number, help="only this attempt's lines")
    command("cancel", "cancel a run").add_argument("run")
    p = command("runs", "recent runs, newest first")
    p.add_argument("--workflow", help="only the runs of this registered workflow")
    p.add_argument("--status", choices=RUN_STATUSES, help="only runs in this state")
    p.add_argument("--limit", type=_limit, default=20, help="at most this many (default 20)")
    command("workflows", "registered workflows")
    command("pause", "pause a workflow's schedule").add_argument("name")
    command("resume", "resume a workflow's schedule").add_argument("name")
    command("runners", "the runner pool")
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    p.add_argument("shell", choices=completion.SHELLS)


def gateway_of(args: argparse.Namespace) -> Gateway:
    token = resolve_token(args.token, args.token_file, required=False)
    return Gateway(resolve_url(args.url), token)


def _id(value: str) -> str:
    return quote(value, safe="")


def _print_json(doc: Any) -> None:
    print(json.dumps(doc), flush=True)


def _show(args: argparse.Namespace, doc: Any, view: Callable[[Any], str]) -> None:
    print(json.dumps(doc) if args.json else view(doc), flush=True)


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _after_start(gw: Gateway, args: argparse.Namespace, answer: dict[str, Any]) -> int:
    """What submit and run print once the run is asked for, and --wait."""
    if args.json:
        _print_json(answer)
    else:
        print(answer["runId"], flush=True)  # alone, so RUN=$(heddle submit ...) works
        made = "exists already" if answer.get("created") is False else "started"
        _note(f"run {answer['runId']} {made}")
    if not args.wait:
        return 0
    return watch.exit_code(watch.follow(gw, answer["runId"], watch.sink_for(args.json)))


def cmd_submit(args: argparse.Namespace) -> int:
    doc = documents.run_request(args.file, args.run_id)  # checked before anything is sent
    gw = gateway_of(args)
    return _after_start(gw, args, gw.call("POST", "/api/runs", doc))


def cmd_run(args: argparse.Namespace) -> int:
    gw = gateway_of(args)
    body: dict[str, Any] = {}
    if args.key is not None:
        body["idempotencyKey"] = args.key
    if args.param:
        body["params"] = dict(_param(text) for text in args.param)
    if args.scheduled_for is not None:
        body["scheduledFor"] = args.scheduled_for
    path = f"/api/workflows/{_id(args.name)}/runs"
    return _after_start(gw, args, gw.call("POST", path, body or None))


def _param(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise Usage(f"--param {text!r}: give NAME=VALUE")
    return name, value


def cmd_retry(args: argparse.Namespace) -> int:
    """A retry is a new run: printed and followed as submit and run print theirs."""
    gw = gateway_of(args)
    return _after_start(gw, args, gw.call("POST", f"/api/runs/{_id(args.run)}/retry"))


def cmd_register(args: argparse.Namespace) -> int:
    doc = documents.workflow(args.file)
    done = gateway_of(args).call("POST", "/api/workflows", doc)
    if args.json:
        _print_json(done)
    else:
        how = "registered" if done["created"] else "unchanged"
        print(f"workflow {done['name']} version {done['version']} {how}")
    return 0


# The steps `heddle status` lists of a run too big for one document (stepsIncluded false).
BIG_RUN_SHOWN = "failed,timed_out,running,retrying"
BIG_RUN_LIMIT = 20


def cmd_status(args: argparse.Namespace) -> int:
    gw = gateway_of(args)
    run = gw.call("GET", f"/api/runs/{_id(args.run)}")
    if not run.get("stepsIncluded", True) and not args.json:
        query = urlencode({"status": BIG_RUN_SHOWN, "limit": BIG_RUN_LIMIT})
        run["steps"] = gw.call("GET", f"/api/runs/{_id(args.run)}/steps?{query}")["steps"]
    _show(args, run, render.run_view)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    run = watch.follow(gateway_of(args), args.run, watch.sink_for(args.json))
    return watch.exit_code(run)


def attempt_number(text: str) -> int:
    if not text.isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: attempts are numbered from 1")
    return int(text)


def cmd_logs(args: argparse.Namespace) -> int:
    gw = gateway_of(args)
    if args.attempt is not None:
        # An attempt not made yet would print nothing, as one that wrote nothing does.
        step = gw.call("GET", f"/api/runs/{_id(args.run)}/steps/{_id(args.step)}?tail=0")
        if args.attempt > step["attempt"]:
            made = f"{step['attempt']} attempt(s)" if step["attempt"] else "no attempt yet"
            raise Usage(f"step {args.step} of run {args.run} has {made}: no attempt {args.attempt}")
    if not args.follow:
        logs.print_logs(gw, args.run, args.step, args.attempt, args.json, sys.stdout)
        return 0
    if logs.follow_logs(gw, args.run, args.step, args.attempt, args.json, sys.stdout) is None:
        raise Unreachable(gw.url, "the log stream closed before the step ended")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    answer = gateway_of(args).call("POST", f"/api/runs/{_id(args.run)}/cancel")
    _show(args, answer, lambda a: f"run {a['runId']} {a['status']}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    gw = gateway_of(args)
    if args.workflow is None:
        query = {"limit": args.limit} | ({"status": args.status} if args.status else {})
        doc = gw.call("GET", f"/api/runs?{urlencode(query)}")
    else:
        query = {"limit": args.limit} | ({"status": args.status} if args.status else {})
        doc = gw.call("GET", f"/api/workflows/{_id(args.workflow)}/runs?{urlencode(query)}")
        for r in doc["runs"]:
            r.setdefault("workflowName", args.workflow)
    _show(args, doc, lambda d: render.runs_view(d["runs"]))
    return 0


def cmd_workflows(args: argparse.Namespace) -> int:
    doc = gateway_of(args).call("GET", "/api/workflows")
    _show(args, doc, lambda d: render.workflows_view(d["workflows"]))
    return 0


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    doc = gateway_of(args).call("PATCH", f"/api/workflows/{_id(args.name)}", {"paused": paused})
    if args.json:
        _print_json(doc)
    else:
        state = "paused" if doc["paused"] else "resumed"
        print(f"workflow {doc['name']} {state}" + ("" if doc.get("schedule") else " (no schedule)"))
    return 0


def cmd_runners(args: argparse.Namespace) -> int:
    pool = gateway_of(args).call("GET", "/api/runners")
    _show(args, pool, render.runners_view)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "submit": cmd_submit,
    "run": cmd_run,
    "register": cmd_register,
    "status": cmd_status,
    "watch": cmd_watch,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "retry": cmd_retry,
    "runs": cmd_runs,
    "workflows": cmd_workflows,
    "pause": lambda args: _set_paused(args, True),
    "resume": lambda args: _set_paused(args, False),
    "runners": cmd_runners,
}


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a client command; every error becomes a message on stderr and an exit code."""
    name = args.command
    if name == "completion":
        print(completion.script(parser, args.shell), end="")
        return 0
    try:
        return COMMANDS[name](args)
    except documents.BadDocument as exc:
        _note(f"heddle {name}: {exc.source} has {len(exc.problems)} problem(s); nothing sent")
        for line in exc.lines():
            _note(f"  {line}")
        return USAGE
    except Usage as exc:
        _note(f"heddle {name}: {exc}")
        return USAGE
    except Refused as exc:
        _note(f"heddle {name}: {exc}")
        if exc.status == 401:
            _note("  send a token: --token, $HEDDLE_TOKEN or $HEDDLE_TOKEN_FILE")
        # What was given is wrong (a parameter, a key, a name): a usage error, not the gateway's.
        return USAGE if exc.status in (400, 413) else REFUSED
    except Unreachable as exc:
        _note(f"heddle {name}: {exc}")
        return REFUSED
    except KeyboardInterrupt:
        return 130
