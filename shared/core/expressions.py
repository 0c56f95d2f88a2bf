"""A step's ``when`` and ``forEach``: expressions in CEL (the Common Expression Language),
compiled once and evaluated against what a run knows. Pure: no I/O.

An expression sees these variables (``make_scope`` builds them), every value a string:

- ``params.<name>``: the run's parameters;
- ``steps.<id>.status`` (``succeeded``, ``failed``, ``skipped``, ``cancelled``) and
  ``steps.<id>.outputs.<key>``, as the step wrote them;
- ``run.id``, ``run.trigger`` and ``run.scheduledFor`` (empty for a run no schedule started);
- ``workflow.name``.

Besides CEL's standard functions (``size``, ``startsWith``, ``matches``, ``has()``, ``in``,
``map``, ``filter``, ``exists``...), its strings extension is on, as in Kubernetes: ``split``,
``join``, ``trim``, ``lowerAscii``, ``replace``, ``substring``, ``indexOf``...

A text is type-checked when it compiles: a syntax error, a name that is none of these
variables or CEL's functions, and an operation on the wrong types (``params.env + 1``) are
refused then, by line and column, before anything runs. What only evaluation can tell (a
missing key, an output that is no number for ``int()``) raises ``ExpressionError`` then.
A ``when`` gives a bool; a ``forEach`` gives a list, or a string holding a JSON array (an
output such as ``files=["a.csv","b.csv"]``).

A workflow's concurrency key (``concurrency.key``) is evaluated once, when a run is
submitted, before any step exists: it sees ``params`` and ``workflow``, the workflow's name
as a string ("" for an inline run without one), and gives a string, a number or a bool,
taken as text (``evaluate_key``).

A webhook's parameter (docs/webhooks.md) is evaluated once per delivery: it sees ``body``,
the delivery's JSON (any type, read as ``dyn``), and ``headers``, a map of its header names
in lower case to their values; it gives what a concurrency key gives, taken as text alike
(``evaluate_hook``).

This is the one module that imports the CEL library, cel-expr-python: the CEL team's Python
binding of their C++ implementation (docs/decisions/0010-cel-library.md).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings
from heddle.shared.wire.errors import HeddleError

_STRING, _DYN = cel.Type.STRING, cel.Type.DYN
_ENV = cel.NewEnv(
    variables={
        "params": cel.Type.Map(_STRING, _STRING),
        "steps": cel.Type.Map(_STRING, cel.Type.Map(_STRING, _DYN)),
        "run": cel.Type.Map(_STRING, _STRING),
        "workflow": cel.Type.Map(_STRING, _STRING),
    },
    extensions=[ext_strings.ExtStrings()],  # split, join, lowerAscii, trim...: as Kubernetes
)
# A concurrency key's: evaluated at submit, when the run has its parameters alone.
_KEY_ENV = cel.NewEnv(
    variables={"params": cel.Type.Map(_STRING, _STRING), "workflow": _STRING},
    extensions=[ext_strings.ExtStrings()],
)
# A webhook parameter's: evaluated on a delivery, before any run exists.
_HOOK_ENV = cel.NewEnv(
    variables={"body": _DYN, "headers": cel.Type.Map(_STRING, _STRING)},
    extensions=[ext_strings.ExtStrings()],
)
COMPILED_KEPT = 4096  # compiled texts kept per process (a workflow's are few)
Use = Literal["when", "forEach", "key", "hook"]
# The result types each use takes, as the type checker names them (without parameters).
_KEY_KINDS = frozenset({"string", "int", "uint", "double", "bool"})
_TAKES: dict[Use, tuple[frozenset[str], str]] = {
    "when": (frozenset({"bool", "dyn"}), "a bool"),
    "forEach": (frozenset({"list", "string", "dyn"}), "a list or a string holding a JSON array"),
    "key": (_KEY_KINDS | {"dyn"}, "a string, a number or a bool"),
    "hook": (_KEY_KINDS | {"dyn"}, "a string, a number or a bool"),
}
# One error of the compiler's report: "ERROR: <input>:LINE:COLUMN: message".
_COMPILE_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_STATUS_CODE = re.compile(r"^[A-Z_]+: ")  # the C++ status code before a message
_SHOWN = 60  # characters of a value quoted in a message


class ExpressionError(HeddleError):
    """An expression that does not compile, fails, or gives the wrong kind of value;
    ``problem`` says which, without the text (a validator's message under its path)."""

    def __init__(self, text: str, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(f"expression {_shown(text)}: {problem}")


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled text; ``result_type`` is the type checker's name for what it gives
    (``bool``, ``list<string>``, ``dyn`` when only evaluation can tell)."""

    text: str
    result_type: str
    program: Any = field(repr=False, compare=False)


StepFacts = tuple[str, Mapping[str, str]]  # a step's status and outputs


@dataclass(frozen=True, slots=True)
class Scope:
    """The variables an expression sees (``variables``, plain data): make one with
    ``make_scope``. Its values are converted for CEL once, at the first evaluation that reads
    them, and kept: evaluate every expression of a decision against one scope."""

    variables: Mapping[str, Any]
    activation: Any = field(repr=False, compare=False)


def make_scope(
    params: Mapping[str, str],
    steps: Mapping[str, StepFacts],
    *,
    run_id: str,
    trigger: str,
    scheduled_for: str | None,
    workflow: str,
) -> Scope:
    """The variables of one run: ``steps`` maps a step's id to its status and outputs.
    The first evaluation converts every step given, a few microseconds each: give the steps
    an expression may read (its step's upstream), not a wide run's thousands."""
    variables = {
        "params": dict(params),
        "steps": {
            step: {"status": status, "outputs": dict(outputs)}
            for step, (status, outputs) in steps.items()
        },
        "run": {"id": run_id, "trigger": trigger, "scheduledFor": scheduled_for or ""},
        "workflow": {"name": workflow},
    }
    return Scope(variables, _ENV.Activation(variables))


@functools.lru_cache(maxsize=COMPILED_KEPT)
def compile_expression(text: str) -> Expression:
    """``text`` compiled and type-checked, once per process; ``ExpressionError`` if it
    does not compile."""
    return _compile(_ENV, text)


@functools.lru_cache(maxsize=COMPILED_KEPT)
def compile_key(text: str) -> Expression:
    """A concurrency key's ``text`` compiled against the key's variables (``params`` and
    ``workflow``), once per process; ``ExpressionError`` if it does not compile."""
    return _compile(_KEY_ENV, text)


@functools.lru_cache(maxsize=COMPILED_KEPT)
def compile_hook(text: str) -> Expression:
    """A webhook parameter's ``text`` compiled against a delivery's variables (``body`` and
    ``headers``), once per process; ``ExpressionError`` if it does not compile."""
    return _compile(_HOOK_ENV, text)


_COMPILERS = {"key": compile_key, "hook": compile_hook}


def _compile(env: Any, text: str) -> Expression:
    if not text.strip():
        raise ExpressionError(text, "is empty")
    try:
        program = env.compile(text)
    except RuntimeError as exc:
        raise ExpressionError(text, _compile_problem(text, str(exc))) from None
    return Expression(text, program.return_type().name().lower(), program)


def expression_problem(text: str, use: Use | None = None) -> str | None:
    """What is wrong with ``text`` as a validator sees it, or None: it does not compile, or
    (``use`` given) its type checker's result type is one that ``use`` never takes."""
    try:
        expr = _COMPILERS.get(use or "", compile_expression)(text)
    except ExpressionError as exc:
        return exc.problem
    if use is not None:
        takes, wanted = _TAKES[use]
        if _base(expr.result_type) not in takes:
            return f"gives {expr.result_type}, not {wanted}"
    return None


def evaluate_condition(expr: Expression, scope: Scope) -> bool:
    """A ``when``'s answer; ``ExpressionError`` if it fails or gives anything but a bool."""
    kind, value = _evaluate(expr, scope)
    if kind != "bool":
        raise ExpressionError(expr.text, f"gives {_described(kind, value)}, not a bool")
    return bool(value)


def evaluate_items(expr: Expression, scope: Scope, max_items: int) -> list[Any]:
    """A ``forEach``'s items: a CEL list, or the JSON array a string holds, as plain Python
    values. ``ExpressionError`` if it fails, gives anything else, or more than
    ``max_items`` items."""
    kind, value = _evaluate(expr, scope)
    if kind == "list":
        items = list(value)
    elif kind == "string":
        items = _json_array(expr.text, value)
    else:
        wanted = _TAKES["forEach"][1]
        raise ExpressionError(expr.text, f"gives {_described(kind, value)}, not {wanted}")
    if len(items) > max_items:
        raise ExpressionError(
            expr.text, f"gives {len(items)} items; a forEach takes at most {max_items}"
        )
    return items


def evaluate_key(expr: Expression, params: Mapping[str, str], workflow: str) -> str:
    """A concurrency key's text (``compile_key``'s ``expr``): a string as it is, a number or
    a bool as CEL's ``string()`` writes it; ``ExpressionError`` if it fails or gives
    anything else."""
    return _text_of(expr, _KEY_ENV, {"params": dict(params), "workflow": workflow})


def evaluate_hook(expr: Expression, body: Any, headers: Mapping[str, str]) -> str:
    """A webhook parameter's value (``compile_hook``'s ``expr``) on a delivery's decoded
    JSON ``body`` and its ``headers`` (names in lower case), as text as a key's is;
    ``ExpressionError`` as there."""
    return _text_of(expr, _HOOK_ENV, {"body": body, "headers": dict(headers)})


def _text_of(expr: Expression, env: Any, variables: dict[str, Any]) -> str:
    """What ``expr`` gives as text: a string, a number or a bool."""
    try:  # converting the variables may fail too (an integer too big for CEL's int)
        result = expr.program.eval(env.Activation(variables))
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ExpressionError(expr.text, f"failed: {exc}") from None
    kind = _base(result.type().name().lower())
    if kind == "error":
        message = _STATUS_CODE.sub("", str(result.value()))
        raise ExpressionError(expr.text, f"failed: {message}")
    value = result.plain_value()
    if kind not in _KEY_KINDS:
        wanted = _TAKES["key"][1]
        raise ExpressionError(expr.text, f"gives {_described(kind, value)}, not {wanted}")
    if kind == "bool":
        return "true" if value else "false"
    return str(value)


def item_text(item: Any) -> str:
    """An item as ``HEDDLE_ITEM`` holds it: a string as it is, anything else as compact
    JSON (a timestamp in ISO 8601, a duration as CEL writes it, ``90s``, bytes as UTF-8
    text)."""
    if isinstance(item, str):
        return item
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _evaluate(expr: Expression, scope: Scope) -> tuple[str, Any]:
    """The kind (``bool``, ``string``, ``list``...) and plain Python value ``expr`` gives."""
    try:
        result = expr.program.eval(scope.activation)
    except (RuntimeError, TypeError, ValueError) as exc:  # data the binding cannot convert
        raise ExpressionError(expr.text, f"failed: {exc}") from None
    if result.type() == cel.Type.ERROR:
        message = _STATUS_CODE.sub("", str(result.value()))
        raise ExpressionError(expr.text, f"failed: {message}")
    return _base(result.type().name().lower()), result.plain_value()


def _json_array(text: str, value: str) -> list[Any]:
    try:
        items = json.loads(value)
    except ValueError:
        items = None
    if not isinstance(items, list):
        raise ExpressionError(text, f"gives string {_shown(value)}, which holds no JSON array")
    return items


def _compile_problem(text: str, report: str) -> str:
    """The compiler's report as one line: each error by its place in ``text``."""
    errors = _COMPILE_ERROR.findall(report)
    if not errors:
        return "does not compile: " + _STATUS_CODE.sub("", report).partition("\n")[0]
    one_line = "\n" not in text
    parts = []
    for line, column, message in errors:
        message = message.removesuffix(" [INVALID_ARGUMENT]").replace(" (in container '')", "")
        where = f"column {column}" if one_line else f"line {line}, column {column}"
        parts.append(f"{where}: {message}")
    return "does not compile: " + "; ".join(parts)


def _base(type_name: str) -> str:
    """``list<string>`` -> ``list``."""
    return type_name.partition("<")[0]


def _described(kind: str, value: Any) -> str:
    """A value in a message: its kind, and itself but for null (``int 3``, ``null``)."""
    return kind if value is None else f"{kind} {_shown(value)}"


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        return f"{int(seconds) if seconds.is_integer() else seconds}s"
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    return str(value)
