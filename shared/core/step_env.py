"""What a step gets from outside its command, as environment variables: the run's parameters,
the cron slot it is for, the workflow's and the step's static ``env``, and the outputs of the
steps upstream of it (docs/workflows.md, "Passing data").

Values always travel as variables, never pasted into the command string, so a value holds
nothing a shell would run. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from heddle.shared.wire.errors import Problem
from heddle.shared.wire.names import ID_PATTERN

if TYPE_CHECKING:
    from heddle.shared.wire.contracts import ParamSpec

PARAM_PREFIX = "HEDDLE_PARAM_"
OUT_PREFIX = "HEDDLE_OUT_"
SCHEDULED_FOR = "HEDDLE_SCHEDULED_FOR"
SCHEDULED_TZ = "HEDDLE_SCHEDULED_TZ"
RUN_STATUS = "HEDDLE_RUN_STATUS"  # an exit handler's: what the run ends as without it
FAILED_STEPS = "HEDDLE_FAILED_STEPS"  # an exit handler's: the failed steps, comma-separated
ITEM = "HEDDLE_ITEM"  # a forEach instance's item (shared/core/expressions.py, item_text)
ITEM_INDEX = "HEDDLE_ITEM_INDEX"  # a forEach instance's place in the list, from 0
RESERVED_PREFIX = "HEDDLE_"  # static env may not use it: Heddle's own variables
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
PARAM_FIELDS = {"name", "default", "description"}
# One variable's value at most: well below Linux's 128 KiB per environment string.
MAX_VALUE_BYTES = 64 * 1024
# A run's parameters, a workflow's env, a step's env: each at most this, names and values,
# so that the records that hold them and the ready message that holds all three stay well
# below NATS's 1 MiB message (a record that cannot be written would hold its run for ever).
MAX_VARIABLES_BYTES = 128 * 1024
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def size_problems(values: Mapping[str, object], path: str, what: str) -> list[Problem]:
    """``what`` (names and string values) over MAX_VARIABLES_BYTES, as a problem."""
    size = sum(
        len(name.encode(errors="surrogatepass")) + len(value.encode(errors="surrogatepass"))
        for name, value in values.items()
        if isinstance(name, str) and isinstance(value, str)
    )
    if size <= MAX_VARIABLES_BYTES:
        return []
    return [Problem(path, f"{what} are {size} bytes in all; the limit is {MAX_VARIABLES_BYTES}")]


def env_part(name: str) -> str:
    """A name as part of a variable's name: upper case, every character other than a letter
    or digit turned into ``_``."""
    return _NOT_ALNUM.sub("_", name).upper()


def param_env(name: str) -> str:
    return PARAM_PREFIX + env_part(name)


def output_env(step_id: str, key: str) -> str:
    return f"{OUT_PREFIX}{env_part(step_id)}_{env_part(key)}"


def value_problem(value: object, what: str) -> str | None:
    """Why ``value`` cannot be a variable's value, or None."""
    if not isinstance(value, str):
        return f"{what} must be a string"
    if "\x00" in value:
        return f"{what} holds a NUL byte (\\u0000), which no environment variable can"
    size = len(value.encode())
    if size > MAX_VALUE_BYTES:
        return f"{what} is {size} bytes; the limit is {MAX_VALUE_BYTES}"
    return None


# ---- declarations and values of parameters ---------------------------------------------


def declaration_problems(doc: object, path: str = "params") -> list[Problem]:
    """A workflow's ``params``: a list of ``{name, default?, description?}``, names unique
    also as variables (``a-b`` and ``a_b`` would both be ``HEDDLE_PARAM_A_B``)."""
    if not isinstance(doc, list):
        return [Problem(path, "params must be a list of {name, default, description}")]
    problems: list[Problem] = []
    seen: dict[str, str] = {}  # variable -> the name that took it
    for i, decl in enumerate(doc):
        where = f"{path}[{i}]"
        if not isinstance(decl, dict):
            problems.append(Problem(where, "a parameter must be an object"))
            continue
        for key in decl:
            if key not in PARAM_FIELDS:
                problems.append(Problem(f"{where}.{key}", f"unknown field {key!r}"))
        name = decl.get("name")
        if name is None:
            problems.append(Problem(f"{where}.name", "missing required field"))
        elif not isinstance(name, str) or not ID_PATTERN.match(name):
            problems.append(
                Problem(f"{where}.name", f"parameter name {name!r} must match {ID_PATTERN.pattern}")
            )
        else:
            var = param_env(name)
            if var in seen:
                problems.append(
                    Problem(
                        f"{where}.name",
                        f"parameter {name!r} and {seen[var]!r} are both {var}",
                    )
                )
            else:
                seen[var] = name
        if "default" in decl:
            msg = value_problem(decl["default"], "default")
            if msg:
                problems.append(Problem(f"{where}.default", msg))
        if "description" in decl and not isinstance(decl["description"], str):
            problems.append(Problem(f"{where}.description", "description must be a string"))
    defaults = {
        d["name"]: d["default"]
        for d in doc
        if isinstance(d, dict) and isinstance(d.get("name"), str) and "default" in d
    }
    return problems + size_problems(defaults, path, "the parameters' defaults")


def values_problems(values: object, path: str = "params") -> list[Problem]:
    """Values given with no declaration to check them against (an inline run): an object of
    strings, each name a valid parameter name, no two the same variable."""
    if not isinstance(values, dict):
        return [Problem(path, "params must be an object of names and string values")]
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for name, value in values.items():
        where = f"{path}.{name}"
        if not ID_PATTERN.match(name):
            problems.append(
                Problem(where, f"parameter name {name!r} must match {ID_PATTERN.pattern}")
            )
            continue
        var = param_env(name)
        if var in seen:
            problems.append(Problem(where, f"parameter {name!r} and {seen[var]!r} are both {var}"))
        seen.setdefault(var, name)
        msg = value_problem(value, "the value")
        if msg:
            problems.append(Problem(where, msg))
    return problems + size_problems(values, path, "the parameters' values")


def resolve(
    declared: Iterable[ParamSpec], given: object, path: str = "params"
) -> tuple[dict[str, str], list[Problem]]:
    """The values of a run of a workflow that declares ``declared`` (``ParamSpec``s), from
    the ``given`` ones and the defaults, and every problem: a name not declared, a declared
    one with no default that was not given, a value that is not a string."""
    problems: list[Problem] = []
    if given is None:
        given = {}
    if not isinstance(given, dict):
        return {}, [Problem(path, "params must be an object of names and string values")]
    decls = {d.name: d for d in declared}
    values: dict[str, str] = {}
    for name, value in given.items():
        if name not in decls:
            known = ", ".join(sorted(decls)) or "none"
            problems.append(
                Problem(f"{path}.{name}", f"unknown parameter {name!r} (declared: {known})")
            )
            continue
        msg = value_problem(value, "the value")
        if msg:
            problems.append(Problem(f"{path}.{name}", msg))
        else:
            values[name] = value
    for name, decl in decls.items():
        if name in given:
            continue
        if decl.default is None:
            problems.append(Problem(f"{path}.{name}", f"missing required parameter {name!r}"))
        else:
            values[name] = decl.default
    problems += size_problems(values, path, "the parameters' values")
    return ({} if problems else values), problems


def inline_values(params: list[ParamSpec] | dict[str, str]) -> dict[str, str]:
    """The values of an inline run, whose ``params`` is either the values (an object) or
    declarations as a workflow document has them (a list): then each takes its default."""
    if isinstance(params, dict):
        return dict(params)
    return {d.name: d.default for d in params or () if d.default is not None}


def inline_problems(params: object, path: str = "params") -> list[Problem]:
    """``params`` of an inline run: values, or declarations that all have a default."""
    if isinstance(params, dict):
        return values_problems(params, path)
    problems = declaration_problems(params, path)
    if not problems and isinstance(params, list):  # a list, as declaration_problems found
        for i, decl in enumerate(params):
            if "default" not in decl:
                problems.append(
                    Problem(
                        f"{path}[{i}]",
                        f"missing required parameter {decl['name']!r}: an inline run gives "
                        "values as an object, params: {name: value}",
                    )
                )
    return problems


# ---- static environment -----------------------------------------------------------------


def env_problems(env: object, path: str) -> list[Problem]:
    """A static ``env`` map: valid variable names, none empty or starting with ``HEDDLE_``,
    string values."""
    if not isinstance(env, dict):
        return [Problem(path, "env must be an object of variable names and string values")]
    problems: list[Problem] = []
    for name, value in env.items():
        where = f"{path}.{name}" if name else f'{path}[""]'
        if not name:
            problems.append(Problem(where, "an environment variable needs a name"))
        elif name.startswith(RESERVED_PREFIX):
            problems.append(
                Problem(where, f"{name!r}: names starting with {RESERVED_PREFIX} are Heddle's")
            )
        elif not ENV_NAME.match(name):
            problems.append(
                Problem(
                    where,
                    f"{name!r} is not a variable name (a letter or _, then letters, digits, _)",
                )
            )
        msg = value_problem(value, "the value")
        if msg:
            problems.append(Problem(where, msg))
    return problems + size_problems(env, path, "the variables")


# ---- a step's variables -----------------------------------------------------------------


def step_variables(
    *,
    params: Mapping[str, str] = {},
    scheduled_for: str | None = None,
    scheduled_tz: str | None = None,
    run_env: Mapping[str, str] = {},
    step_env: Mapping[str, str] = {},
    outputs: Iterable[tuple[str, Mapping[str, str]]] = (),
) -> dict[str, str]:
    """Every variable Heddle gives one step besides its run, step and attempt: the static
    env (the step's own winning over the workflow's), the parameters, the slot, and the
    outputs of the steps upstream (``(step id, outputs)``, in document order: where two
    spell the same variable, the later one wins)."""
    env = {**run_env, **step_env}
    for name, value in params.items():
        env[param_env(name)] = value
    if scheduled_for is not None:
        env[SCHEDULED_FOR] = scheduled_for
        env[SCHEDULED_TZ] = scheduled_tz or "UTC"
    for step_id, outs in outputs:
        for key, value in outs.items():
            env[output_env(step_id, key)] = value
    return env


MADE_HERE = frozenset({SCHEDULED_FOR, SCHEDULED_TZ, RUN_STATUS, FAILED_STEPS, ITEM, ITEM_INDEX})


def passes(name: str) -> bool:
    """Whether a runner sets ``name`` from a ready message's ``env``: a static variable or
    one of the HEDDLE_ names this module makes, never another of Heddle's own (its settings,
    credentials among them, and the run, step and attempt, which the runner sets)."""
    if name.startswith(RESERVED_PREFIX):
        return name.startswith((PARAM_PREFIX, OUT_PREFIX)) or name in MADE_HERE
    return bool(ENV_NAME.match(name))


def env_bytes(env: Mapping[str, str]) -> int:
    """About what ``env`` adds to a message: its names and values, quoted and separated."""
    return sum(len(k) + len(v.encode()) + 6 for k, v in env.items())
