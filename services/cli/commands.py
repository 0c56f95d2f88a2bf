"""The commands that drive a Heddle gateway: submit, run, register, status, watch, logs,
cancel, runs, workflows, pause, resume, runners, semaphores, semaphore set. Each parses its
options, makes its calls through services/cli/http.py and prints text (or the API's JSON
with ``--json``); every error ends up in ``run``, which maps it to an exit code
(options.EXIT_HELP). Their options are services/cli/options.py's."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from heddle.services.cli import completion, documents, logs, render, watch
from heddle.services.cli.http import (
    Gateway,
    Refused,
    Unreachable,
    Usage,
    resolve_namespace,
    resolve_token,
    resolve_url,
)
from heddle.services.cli.terminal import for_output

USAGE, REFUSED = 2, 4  # the run's own codes are in watch.EXIT_CODES (0, 1, 3)


def gateway_of(args: argparse.Namespace) -> Gateway:
    token = resolve_token(args.token, args.token_file, required=False)
    return Gateway(resolve_url(args.url), token, resolve_namespace(args.namespace))


def _id(value: str) -> str:
    return quote(value, safe="")


def _print_json(doc: Any) -> None:
    print(json.dumps(doc), flush=True)  # JSON escapes every control character itself


def _print(text: str) -> None:
    """Text for people; a step's escape sequences in it are shown, not obeyed, on a terminal."""
    print(for_output(text, sys.stdout), flush=True)


def _show(args: argparse.Namespace, doc: Any, view: Callable[[Any], str]) -> None:
    if args.json:
        _print_json(doc)
    else:
        _print(view(doc))


def _note(text: str) -> None:
    print(for_output(text, sys.stderr), file=sys.stderr, flush=True)


def _after_start(gw: Gateway, args: argparse.Namespace, answer: dict[str, Any]) -> int:
    """What submit and run print once the run is asked for, and --wait."""
    if args.json:
        _print_json(answer)
    else:
        _print(answer["runId"])  # alone, so RUN=$(heddle submit ...) works
        made = "exists already" if answer.get("created") is False else "started"
        _note(f"run {answer['runId']} {made}")
    if not args.wait:
        return 0
    return watch.exit_code(watch.follow(gw, answer["runId"], watch.sink_for(args.json)))


def cmd_submit(args: argparse.Namespace) -> int:
    # Checked before anything is sent; --run-id and --priority over the file's.
    doc = documents.run_request(args.file, args.run_id, args.priority)
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
    if args.priority is not None:
        body["priority"] = args.priority
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
        _print(f"workflow {done['name']} version {done['version']} {how}")
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


def cmd_logs(args: argparse.Namespace) -> int:
    gw = gateway_of(args)
    if args.attempt is not None:
        # An attempt not made yet would print nothing, as one that wrote nothing does.
        step = gw.call("GET", f"/api/runs/{_id(args.run)}/steps/{_id(args.step)}?tail=0")
        if args.attempt > step["attempt"]:
            made = f"{step['attempt']} attempt(s)" if step["attempt"] else "no attempt yet"
            raise Usage(f"step {args.step} of run {args.run} has {made}: no attempt {args.attempt}")
    shown = logs.Shown(args.attempt, args.json, args.raw)
    if not args.follow:
        logs.print_logs(gw, args.run, args.step, shown, sys.stdout)
        return 0
    if logs.follow_logs(gw, args.run, args.step, shown, sys.stdout) is None:
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
        _print(
            f"workflow {doc['name']} {state}" + ("" if doc.get("schedule") else " (no schedule)")
        )
    return 0


def cmd_runners(args: argparse.Namespace) -> int:
    pool = gateway_of(args).call("GET", "/api/runners")
    _show(args, pool, render.runners_view)
    return 0


def cmd_semaphores(args: argparse.Namespace) -> int:
    doc = gateway_of(args).call("GET", "/api/semaphores")
    _show(args, doc, lambda d: render.semaphores_view(d["semaphores"]))
    return 0


def cmd_semaphore(args: argparse.Namespace) -> int:
    doc = gateway_of(args).call("PUT", f"/api/semaphores/{_id(args.name)}", {"size": args.size})
    held = len(doc["holders"])
    _show(args, doc, lambda d: f"semaphore {d['name']} size {d['size']} ({held} held)")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "submit": cmd_submit,
    "run": cmd_run,
    "trigger": cmd_run,  # the same command under its other name
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
    "semaphores": cmd_semaphores,
    "semaphore": cmd_semaphore,
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
