"""shared/core/outputs.py: the $HEDDLE_OUTPUTS file, GitHub's $GITHUB_OUTPUT format, every case."""

from __future__ import annotations

import pytest
from heddle.shared.core.outputs import OutputsError, parse_outputs

LIMIT = 64 * 1024


def parse(text: str | bytes, limit: int = LIMIT) -> dict[str, str]:
    return parse_outputs(text.encode() if isinstance(text, str) else text, limit)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("\n\n", {}),
        ("a=1", {"a": "1"}),  # no newline at the end
        ("a=1\n", {"a": "1"}),
        ("a=1\nb=2\n", {"a": "1", "b": "2"}),
        ("a=\n", {"a": ""}),  # an empty value
        ("a=x=y\n", {"a": "x=y"}),  # everything after the first =
        ("a= spaced \n", {"a": " spaced "}),  # kept as written
        ("a=1\na=2\n", {"a": "2"}),  # the last one wins
        ("a=1\r\nb=2\r\n", {"a": "1", "b": "2"}),  # CRLF
        ("a=x<<y\n", {"a": "x<<y"}),  # = first: a plain value holding <<
        ("a=$(touch x)\n", {"a": "$(touch x)"}),  # stored, never run
        ("a=\t tab\n", {"a": "\t tab"}),
        ("_a-b_9=ü €\n", {"_a-b_9": "ü €"}),
        ("\na=1\n\nb=2\n\n", {"a": "1", "b": "2"}),  # empty lines skipped
    ],
)
def test_key_value_lines(text: str, expected: dict[str, str]) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a<<EOF\nline 1\nline 2\nEOF\n", {"a": "line 1\nline 2"}),
        ("a<<EOF\nEOF\n", {"a": ""}),  # no lines: empty
        ("a<<EOF\n\nEOF\n", {"a": ""}),  # one empty line
        ("a<<EOF\n\n\nEOF\n", {"a": "\n"}),  # empty lines inside are kept
        ("a<<EOF\nx=1\nb<<Z\nEOF\n", {"a": "x=1\nb<<Z"}),  # nothing inside is parsed
        ("a<<EOF\nEOF \nEOF\n", {"a": "EOF "}),  # only the exact delimiter ends it
        ("a<<EOF\r\nx\r\nEOF\r\n", {"a": "x"}),  # CRLF
        ("a<<EOF\nx\nEOF", {"a": "x"}),  # the delimiter without a newline
        ("a<<x=y\nv\nx=y\n", {"a": "v"}),  # << first: the delimiter holds =
        ("a<<E\n1\nE\nb=2\nc<<F\n3\nF\n", {"a": "1", "b": "2", "c": "3"}),
        ("a=1\na<<E\n2\nE\n", {"a": "2"}),
        ('a<<ghadelimiter_1f2e\n{"x": 1}\nghadelimiter_1f2e\n', {"a": '{"x": 1}'}),
    ],
)
def test_heredoc_values(text: str, expected: dict[str, str]) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("novalue\n", ["line 1", "neither key=value nor key<<DELIMITER"]),
        ("a=1\n \n", ["line 2", "neither"]),  # a blank line is not an empty one
        ("=1\n", ["line 1", "'' is not an output name"]),
        ("<<EOF\nx\nEOF\n", ["line 1", "not an output name"]),
        ("1a=x\n", ["'1a' is not an output name"]),
        ("a b=x\n", ["'a b' is not an output name"]),
        ("a.b=x\n", ["'a.b'"]),
        ("ü=x\n", ["not an output name"]),
        ("k" * 129 + "=x\n", ["not an output name"]),
        ("a<<\nx\n", ["line 1", "names no delimiter"]),
        ("a<<EOF\nx\n", ["line 1", "no line 'EOF' ends the value of 'a'"]),
        ("a<<EOF\nx\neof\n", ["no line 'EOF'"]),
        ("a-b=1\na_b=2\n", ["line 2", "'a-b' and 'a_b' would be the same variable"]),
        ("abc=1\nABC=2\n", ["'abc' and 'ABC'"]),
        ("a=x\x00y\n", ["line 1", "control character U+0000"]),
        ("a=1\nb=\x1b[31mred\n", ["line 2", "U+001B"]),
        ("a=x\ry\n", ["U+000D"]),  # a carriage return inside a line
        ("a<<E\n\x07\nE\n", ["line 2", "U+0007"]),
    ],
)
def test_malformed_outputs_say_why(text: str, words: list[str]) -> None:
    with pytest.raises(OutputsError) as err:
        parse(text)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_not_utf8_names_the_line() -> None:
    with pytest.raises(OutputsError, match=r"line 2: not UTF-8 text \(byte 7\)"):
        parse(b"a=ok\nb=\xff\n")


def test_the_limit_is_on_the_whole_file() -> None:
    fits = "a=" + "x" * 98 + "\n"  # 101 bytes
    assert parse(fits, limit=101) == {"a": "x" * 98}
    with pytest.raises(OutputsError, match=r"102 bytes; the limit is 101 \(HEDDLE_OUTPUTS_MAX"):
        parse(fits + "\n", limit=101)
    # The size of a file not read in full (the runner reads no more than the limit).
    with pytest.raises(OutputsError, match="is 5000000 bytes; the limit is 65536"):
        parse_outputs(b"", LIMIT, size=5_000_000)


def test_a_key_may_repeat_in_either_form_but_not_under_another_spelling() -> None:
    assert parse("k=1\nk<<E\n2\nE\nk=3\n") == {"k": "3"}
    with pytest.raises(OutputsError):
        parse("k=1\nK=2\n")
