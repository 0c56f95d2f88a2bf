"""shared/core/expressions.py: a step's ``when`` and ``forEach`` in CEL, compiled, checked and
evaluated against a run's facts, every case directly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest
from heddle.shared.core.expressions import (
    Expression,
    ExpressionError,
    Scope,
    compile_expression,
    evaluate_condition,
    evaluate_items,
    expression_problem,
    item_text,
    make_scope,
)
from heddle.shared.wire.errors import HeddleError

STEPS = {
    "build": ("failed", {"count": "3", "log": "error: disk full"}),
    "test": ("succeeded", {}),
    "pack": ("succeeded", {"tag": "v1.2"}),
    "lint": ("skipped", {}),
    "ship": ("cancelled", {}),
    "list": (
        "succeeded",
        {"files": '["a.csv","b.csv"]', "objects": '[{"n": 1}, {"n": 2}]', "one": '"x"'},
    ),
}
SCOPE = make_scope(
    {"env": "prod", "region": "eu", "count": "2", "regions": "eu, us"},
    STEPS,
    run_id="run-1",
    trigger="cron",
    scheduled_for="2026-01-01T06:00:00Z",
    workflow="nightly",
)


def condition(text: str, scope: Scope = SCOPE) -> bool:
    return evaluate_condition(compile_expression(text), scope)


def items(text: str, max_items: int = 100) -> list[Any]:
    return evaluate_items(compile_expression(text), SCOPE, max_items)


def failure(call: Any, text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        call(text)
    assert caught.value.text == text
    return caught.value


# ---- conditions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # params
        ("params.env == 'prod'", True),
        ("params.env != 'prod'", False),
        ("params['region'] == 'eu'", True),
        ("params.region in ['eu', 'us']", True),
        ("params.region in ['us', 'ap']", False),
        ("int(params.count) > 1", True),
        ("'env' in params", True),
        ("'nope' in params", False),
        ("has(params.env)", True),
        ("has(params.nope)", False),
        ("size(params) == 4", True),
        # statuses
        ("steps.build.status == 'failed'", True),
        ("steps.test.status == 'succeeded'", True),
        ("steps.lint.status == 'skipped'", True),
        ("steps.ship.status == 'cancelled'", True),
        ("steps.test.status == 'failed'", False),
        ("steps.build.status == 'failed' && params.env == 'prod'", True),
        ("steps.build.status == 'failed' && params.env == 'dev'", False),
        ("steps.exists(s, steps[s].status == 'failed')", True),
        ("steps.all(s, steps[s].status == 'succeeded')", False),
        ("steps.filter(s, steps[s].status == 'succeeded').size() == 3", True),
        ("has(steps.build)", True),
        ("has(steps.nope)", False),
        # outputs, optional ones through has()
        ("steps.pack.outputs.tag == 'v1.2'", True),
        ("steps.pack.outputs.tag.startsWith('v1')", True),
        ("steps.pack.outputs.tag.endsWith('.2')", True),
        ("steps.build.outputs.log.contains('disk')", True),
        ("steps.pack.outputs.tag.matches('^v[0-9]+[.][0-9]+$')", True),
        ("steps.pack.outputs.tag.matches('^v2')", False),
        ("int(steps.build.outputs.count) >= 3", True),
        ("has(steps.pack.outputs.tag)", True),
        ("has(steps.test.outputs.tag)", False),
        ("has(steps.test.outputs.tag) && steps.test.outputs.tag == 'v1'", False),
        ("'tag' in steps.pack.outputs", True),
        ("size(steps.test.outputs) == 0", True),
        # run and workflow
        ("run.id == 'run-1'", True),
        ("run.trigger == 'cron'", True),
        ("run.trigger == 'api'", False),
        ("run.scheduledFor.startsWith('2026-01-01')", True),
        ("timestamp(run.scheduledFor) > timestamp('2025-12-31T00:00:00Z')", True),
        ("workflow.name == 'nightly'", True),
        # && and || short-circuit and absorb an error on either side (CEL is commutative)
        ("false && params.nope == 'x'", False),
        ("params.nope == 'x' && false", False),
        ("true || params.nope == 'x'", True),
        ("params.nope == 'x' || true", True),
        ("params.env == 'prod' ? true : params.nope == 'x'", True),
        # CEL's own semantics
        ("steps.pack.outputs.tag == 1", False),  # dyn: equality across types is false
        ("[1, 2].map(i, i * 2) == [2, 4]", True),
        ("'a' + 'b' == 'ab'", True),
        ("size('héllo') == 5", True),  # code points, not bytes
        # the strings extension
        ("params.env.upperAscii() == 'PROD'", True),
        ("'eu' in params.regions.split(', ')", True),
        ("steps.build.outputs.log.replace('disk', 'tape').endsWith('tape full')", True),
    ],
)
def test_a_condition(text: str, expected: bool) -> None:
    assert condition(text) is expected


def test_a_run_no_schedule_started_has_an_empty_scheduled_for() -> None:
    scope = make_scope({}, {}, run_id="r", trigger="api", scheduled_for=None, workflow="")
    assert condition("run.scheduledFor == '' && workflow.name == ''", scope) is True
    assert condition("size(steps) == 0 && size(params) == 0", scope) is True


def test_the_scope_is_plain_data_copied_from_its_inputs() -> None:
    params = {"env": "prod"}
    outputs = {"tag": "v1"}
    scope = make_scope(
        MappingProxyType(params),
        {"pack": ("succeeded", MappingProxyType(outputs))},
        run_id="r",
        trigger="api",
        scheduled_for="2026-01-01T00:00:00Z",
        workflow="w",
    )
    params["env"] = "dev"
    outputs["tag"] = "v2"
    assert scope.variables == {
        "params": {"env": "prod"},
        "steps": {"pack": {"status": "succeeded", "outputs": {"tag": "v1"}}},
        "run": {"id": "r", "trigger": "api", "scheduledFor": "2026-01-01T00:00:00Z"},
        "workflow": {"name": "w"},
    }
    assert condition("params.env == 'prod' && steps.pack.outputs.tag == 'v1'", scope) is True


def test_one_scope_serves_many_evaluations_and_outlives_a_failure() -> None:
    scope = make_scope(
        {"env": "prod"},
        {"list": ("succeeded", {"files": '["a"]'})},
        run_id="r",
        trigger="api",
        scheduled_for=None,
        workflow="w",
    )
    for _ in range(3):
        with pytest.raises(ExpressionError):
            condition("params.nope == 'x'", scope)
        assert condition("params.env == 'prod'", scope) is True
        assert evaluate_items(compile_expression("steps.list.outputs.files"), scope, 1) == ["a"]


# ---- compiling --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        ("  \n ", "is empty"),
        ("1 +", "does not compile: column 4: Syntax error"),
        ("params.env ==", "column 14: Syntax error"),
        ("params.env = 'x'", "column 12: Syntax error"),
        ("params.env === 'x'", "column 14: Syntax error: token recognition error at: '= '"),
        ("'unclosed", "column 1: Syntax error: token recognition error"),
        ("[1, 2", "column 6: Syntax error"),
        ("params..env", "column 8: Syntax error: no viable alternative at input '..'"),
        ("steps.build.", "column 13: Syntax error"),
        ("(params.env == 'x'", "column 19: Syntax error"),
        ("params.env == 'x')", "column 18: Syntax error: extraneous input ')'"),
        ("has(params)", "has() argument must be a field selection"),
        ("nope == 'x'", "column 1: undeclared reference to 'nope'"),
        ("step.build.status == 'failed'", "undeclared reference to 'step.build.status'"),
        ("nosuch(params.env)", "undeclared reference to 'nosuch'"),
        ("params.env.nosuch()", "undeclared reference to 'nosuch'"),
        ("params.env + 1", "column 12: found no matching overload for '_+_'"),
        ("params.env > 1", "no matching overload for '_>_' applied to '(string, int)'"),
        ("params.env.startsWith(1)", "no matching overload for 'startsWith'"),
        ("size(1)", "no matching overload for 'size'"),
        ("!params.env", "no matching overload for '!_'"),
        ("1 == 1.0", "no matching overload for '_==_' applied to '(int, double)'"),
        ("1 +\n2 +", "does not compile: line 2, column 4: Syntax error"),
    ],
)
def test_a_text_that_does_not_compile(text: str, says: str) -> None:
    error = failure(compile_expression, text)
    assert says in error.problem
    assert isinstance(error, HeddleError)
    assert str(error) == f"expression {text!r}: {error.problem}"
    assert "\n" not in error.problem and "[INVALID_ARGUMENT]" not in error.problem
    assert expression_problem(text) == error.problem


def test_every_error_of_a_text_is_reported() -> None:
    assert expression_problem("a + b") == (
        "does not compile: column 1: undeclared reference to 'a'; "
        "column 5: undeclared reference to 'b'"
    )


@pytest.mark.parametrize(
    ("text", "use", "problem"),
    [
        ("params.env == 'prod'", "when", None),
        ("steps.build.status == 'failed'", "when", None),
        ("has(steps.pack.outputs.tag)", "when", None),
        ("steps.pack.outputs.ok", "when", None),  # dyn: only evaluation can tell
        ("['eu', 'us']", "forEach", None),
        ("[1, 2].map(i, i * 2)", "forEach", None),
        ("steps.list.outputs.files", "forEach", None),  # dyn
        ("params.regions", "forEach", None),  # a string: may hold a JSON array
        ("'[1, 2]'", "forEach", None),
        ("params.env", None, None),  # no use: compiling is all
        ("params.env", "when", "gives string, not a bool"),
        ("1", "when", "gives int, not a bool"),
        ("['a']", "when", "gives list<string>, not a bool"),
        ("null", "when", "gives null, not a bool"),
        ("params", "when", "gives map<string, string>, not a bool"),
        ("1", "forEach", "gives int, not a list or a string holding a JSON array"),
        ("true", "forEach", "gives bool, not a list or a string holding a JSON array"),
        ("{'a': 1}", "forEach", "gives map<string, int>, not a list or a string holding"),
    ],
)
def test_the_result_type_a_use_takes(text: str, use: Any, problem: str | None) -> None:
    found = expression_problem(text, use)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_a_text_compiles_once_per_process() -> None:
    text = "params.env == 'compiled once'"
    first = compile_expression(text)
    hits = compile_expression.cache_info().hits
    assert compile_expression(text) is first
    assert compile_expression.cache_info().hits == hits + 1
    assert first == Expression(text, "bool", None)  # the program is not compared
    assert "program" not in repr(first)


# ---- evaluation errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("params.nope == 'x'", 'failed: Key not found in map : "nope"'),
        ("steps.nope.status == 'failed'", 'Key not found in map : "nope"'),
        ("steps.test.outputs.tag == 'v1'", 'Key not found in map : "tag"'),  # no has()
        ("has(steps.nope.outputs.tag)", '"nope"'),  # has() tests the last field only
        ("steps.build.outputs.count > 2", "No matching overloads found : _>_(string, int64)"),
        ("int(params.env) > 1", "failed: cannot convert string to int"),
        ("params.env.matches('[')", "failed: invalid regular expression"),
        ("size(params.env) / 0 > 1", "failed: divide by zero"),
        ("9223372036854775807 + size(params) > 0", "failed: integer overflow"),
        ("params.nope == 'x' && true", '"nope"'),  # true does not absorb the error
        ("params.nope == 'x' || false", '"nope"'),
        ("params.env == 'prod' && steps.pack.outputs.tag", "No matching overloads"),
    ],
)
def test_a_condition_that_fails(text: str, says: str) -> None:
    error = failure(condition, text)
    assert error.problem.startswith("failed: ")
    assert says in error.problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("params.env", "gives string 'prod', not a bool"),
        ("steps.pack.outputs.tag", "gives string 'v1.2', not a bool"),  # dyn when compiled
        ("1", "gives int 1, not a bool"),
        ("2.5", "gives double 2.5, not a bool"),
        ("['a']", "gives list ['a'], not a bool"),
        ("steps.pack.outputs", "gives map {'tag': 'v1.2'}, not a bool"),
        ("null", "gives null, not a bool"),
        ("'" + "x" * 80 + "'", "gives string 'xxxx"),
    ],
)
def test_a_condition_that_is_no_bool(text: str, problem: str) -> None:
    error = failure(condition, text)
    assert error.problem.startswith(problem)
    assert len(error.problem) < 100  # a long value is cut short


# ---- forEach ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("['eu', 'us']", ["eu", "us"]),  # a CEL list literal
        ("[1, 2, 3]", [1, 2, 3]),
        ("[1, 2].map(i, i * 10)", [10, 20]),
        ("[['a', 1], {'k': true}, null]", [["a", 1], {"k": True}, None]),
        ("[]", []),
        ("params.regions.split(', ')", ["eu", "us"]),  # the strings extension
        ("params.regions.split(',').map(r, r.trim().upperAscii())", ["EU", "US"]),
        ("steps.list.outputs.files", ["a.csv", "b.csv"]),  # an output holding a JSON array
        ("steps.list.outputs.objects", [{"n": 1}, {"n": 2}]),
        ('\'["x", "y"]\'', ["x", "y"]),  # a CEL string holding one
        ("'[]'", []),
        ("steps.pack.outputs.tag == 'v1.2' ? ['a'] : []", ["a"]),
    ],
)
def test_the_items_of_a_for_each(text: str, expected: list[Any]) -> None:
    assert items(text) == expected


def test_the_items_of_a_for_each_over_a_map_are_its_keys() -> None:
    assert sorted(items("steps.filter(s, steps[s].status == 'succeeded')")) == [
        "list",
        "pack",
        "test",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2, 3]", [1, 2, 3]),
        ("'[1, 2, 3]'", [1, 2, 3]),
        ("[1, 2, 3].map(i, i * 2)", [2, 4, 6]),
        ("['a', 'b', 'c']", ["a", "b", "c"]),
    ],
)
def test_a_for_each_takes_at_most_max_items(text: str, expected: list[Any]) -> None:
    assert items(text, max_items=3) == expected
    error = failure(lambda t: items(t, max_items=2), text)
    assert error.problem == "gives 3 items; a forEach takes at most 2"


def test_an_empty_for_each_fits_any_cap() -> None:
    assert items("[]", max_items=0) == []
    assert failure(lambda t: items(t, max_items=0), "['a']").problem == (
        "gives 1 items; a forEach takes at most 0"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1", "gives int 1, not a list or a string holding a JSON array"),
        ("params.env == 'prod'", "gives bool True, not a list"),
        ("steps.pack.outputs", "gives map {'tag': 'v1.2'}, not a list"),
        ("null", "gives null, not a list"),
        ("steps.pack.outputs.tag", "gives string 'v1.2', which holds no JSON array"),
        ("steps.list.outputs.one", "gives string '\"x\"', which holds no JSON array"),
        ("'{\"a\": 1}'", "gives string '{\"a\": 1}', which holds no JSON array"),  # an object
        ("'1'", "gives string '1', which holds no JSON array"),  # JSON, a number
        ("''", "gives string '', which holds no JSON array"),
        ("\"['eu', 'us']\"", "gives string \"['eu', 'us']\", which holds no"),  # not JSON
        ("steps.nope.outputs.files", 'failed: Key not found in map : "nope"'),
    ],
)
def test_a_for_each_that_gives_no_items(text: str, problem: str) -> None:
    assert failure(items, text).problem.startswith(problem)


# ---- HEDDLE_ITEM ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "text"),
    [
        ("eu", "eu"),  # a string as it is, never quoted
        ("", ""),
        ("a b\nc", "a b\nc"),
        ('["x"]', '["x"]'),
        (1, "1"),
        (-2.5, "-2.5"),
        (True, "true"),
        (None, "null"),
        ([1, "a", None], '[1,"a",null]'),
        ({"k": "ü", "n": [True]}, '{"k":"ü","n":[true]}'),
        (datetime(2026, 1, 1, 6, tzinfo=UTC), '"2026-01-01T06:00:00+00:00"'),
        (timedelta(seconds=90), '"90s"'),
        (timedelta(milliseconds=1500), '"1.5s"'),
        (bytearray(b"ab"), '"ab"'),
    ],
)
def test_item_text(item: Any, text: str) -> None:
    assert item_text(item) == text


def test_item_text_of_what_cel_gives() -> None:
    values = items("[timestamp('2026-01-01T06:00:00Z'), duration('90s'), b'ab', 1u, {'k': 1}]")
    assert [item_text(v) for v in values] == [
        '"2026-01-01T06:00:00+00:00"',
        '"90s"',
        '"ab"',
        "1",
        '{"k":1}',
    ]
