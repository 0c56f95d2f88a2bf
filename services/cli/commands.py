"""The commands that drive a Heddle gateway: submit, run, register, status, watch, logs,
cancel, runs, workflows, pause, resume, runners, semaphores, semaphore set, approve, reject,
approvals. Each parses its options, makes its calls through the client
(heddle.shared.api.Client) and prints text (or the API's JSON with ``--json``); every error
ends up in ``run``, which maps it to an exit code (options.EXIT_HELP). Their options are
services/cli/options.py's."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import heddle.shared.api.calls as calls
import heddle.shared.api.documents as documents
import msgspec
from heddle.services.cli import approvals, completion, logs, render, watch
from heddle.services.cli.terminal import for_output
from heddle.shared.api.answers import Submitted
from heddle.shared.api.client import Client
from heddle.shared.api.errors import BadDocument, Refused, Unreachable, Usage

USAGE, REFUSED = 2, 4  # the run's own codes are in watch.EXIT_CODES (0, 1, 3)


def client_of(args: argparse.Namespace) -> Client:
    return Client(args.url, token=args.token, token_file=args.token_file, namespace=args.namespace)


def plain(answer: Any) -> Any:
    """An answer as the API's JSON has it (camelCase names), for the views and ``--json``."""
    return msgspec.to_builtins(answer)


def _print_json(doc: Any) -> None:
    print(json.dumps(doc), flush=True)  # JSON escapes every control character itself


def _print(text: str) -> None:
    """Text for people; a step's escape sequences in it are shown, not obeyed, on a terminal."""
    print(for_output(text, sys.stdout), flush=True)


def _show(args: argparse.Namespace, answer: Any, view: Callable[[Any], str]) -> None:
    doc = plain(answer)
    if args.json:
        _print_json(doc)
    else:
        _print(view(doc))


def _note(text: str) -> None:
    print(for_output(text, sys.stderr), file=sys.stderr, flush=True)


def _after_start(client: Client, args: argparse.Namespace, answer: Submitted) -> int:
    """What submit and run print once the run is asked for, and --wait."""
    if args.json:
        _print_json(plain(answer))
    else:
        _print(answer.run_id)  # alone, so RUN=$(heddle submit ...) works
        made = "exists already" if answer.created is False else "started"
        _note(f"run {answer.run_id} {made}")
    if not args.wait:
        return 0
    return watch.exit_code(watch.follow(client, answer.run_id, watch.sink_for(args.json)))


def cmd_submit(args: argparse.Namespace) -> int:
    # Checked before anything is sent; --run-id and --priority over the file's.
    doc = documents.run_request(args.file, args.run_id, args.priority)
    client = client_of(args)
    return _after_start(client, args, client.send(calls.submit(doc)))


def cmd_run(args: argparse.Namespace) -> int:
    client = client_of(args)
    params = dict(_param(text) for text in args.param)
    answer = client.trigger(args.name, params, args.key, args.scheduled_for, args.priority)
    return _after_start(client, args, answer)


def _param(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise Usage(f"--param {text!r}: give NAME=VALUE")
    return name, value


def cmd_retry(args: argparse.Namespace) -> int:
    """A retry is a new run: printed and followed as submit and run print theirs."""
    client = client_of(args)
    return _after_start(client, args, client.retry(args.run))


def cmd_register(args: argparse.Namespace) -> int:
    doc = documents.workflow(args.file)  # checked before anything is sent
    done = client_of(args).send(calls.register(doc))
    if args.json:
        _print_json(plain(done))
    else:
        how = "registered" if done.created else "unchanged"
        _print(f"workflow {done.name} version {done.version} {how}")
    return 0


# The steps `heddle status` lists of a run too big for one document (stepsIncluded false).
BIG_RUN_SHOWN = "failed,timed_out,running,retrying"
BIG_RUN_LIMIT = 20


def cmd_status(args: argparse.Namespace) -> int:
    client = client_of(args)
    run = client.run(args.run)
    if not run.steps_included and not args.json:
        run.steps = client.steps(args.run, BIG_RUN_SHOWN, BIG_RUN_LIMIT).steps
    _show(args, run, render.run_view)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    run = watch.follow(client_of(args), args.run, watch.sink_for(args.json))
    return watch.exit_code(run)


def cmd_logs(args: argparse.Namespace) -> int:
    client = client_of(args)
    if args.attempt is not None:
        # An attempt not made yet would print nothing, as one that wrote nothing does.
        made = client.step(args.run, args.step, tail=0).attempt
        if args.attempt > made:
            have = f"{made} attempt(s)" if made else "no attempt yet"
            raise Usage(f"step {args.step} of run {args.run} has {have}: no attempt {args.attempt}")
    shown = logs.Shown(args.attempt, args.json, args.raw)
    if not args.follow:
        logs.print_logs(client, args.run, args.step, shown, sys.stdout)
        return 0
    if logs.follow_logs(client, args.run, args.step, shown, sys.stdout) is None:
        raise Unreachable(client.url, "the log stream closed before the step ended")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    answer = client_of(args).cancel(args.run)
    _show(args, answer, lambda a: f"run {a['runId']} {a['status']}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    client = client_of(args)
    if args.workflow is None:
        _show(args, client.runs(args.status, args.limit), lambda d: render.runs_view(d["runs"]))
        return 0
    doc = plain(client.history(args.workflow, args.status, args.limit))
    for r in doc["runs"]:
        r.setdefault("workflowName", args.workflow)
    _show(args, doc, lambda d: render.runs_view(d["runs"]))
    return 0


def cmd_workflows(args: argparse.Namespace) -> int:
    doc = client_of(args).workflows()
    _show(args, doc, lambda d: render.workflows_view(d["workflows"]))
    return 0


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    client = client_of(args)
    doc = client.pause(args.name) if paused else client.resume(args.name)
    if args.json:
        _print_json(plain(doc))
    else:
        state = "paused" if doc.paused else "resumed"
        _print(f"workflow {doc.name} {state}" + ("" if doc.schedule else " (no schedule)"))
    return 0


def cmd_runners(args: argparse.Namespace) -> int:
    _show(args, client_of(args).runners(), render.runners_view)
    return 0


def cmd_semaphores(args: argparse.Namespace) -> int:
    doc = client_of(args).semaphores()
    _show(args, doc, lambda d: render.semaphores_view(d["semaphores"]))
    return 0


def cmd_semaphore(args: argparse.Namespace) -> int:
    doc = client_of(args).set_semaphore(args.name, args.size)
    held = len(doc.holders)
    _show(args, doc, lambda d: f"semaphore {d['name']} size {d['size']} ({held} held)")
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    """approve and reject: the gate's answer, as the gateway stored it."""
    client = client_of(args)
    decide = client.approve if args.command == "approve" else client.reject
    _show(args, decide(args.run, args.step, args.comment), approvals.decision_line(args))
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    doc = client_of(args).approvals()
    _show(args, doc, lambda d: approvals.approvals_view(d["approvals"]))
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
    "approve": cmd_decide,
    "reject": cmd_decide,
    "approvals": cmd_approvals,
}


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a client command; every error becomes a message on stderr and an exit code."""
    name = args.command
    if name == "completion":
        print(completion.script(parser, args.shell), end="")
        return 0
    try:
        return COMMANDS[name](args)
    except BadDocument as exc:
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
