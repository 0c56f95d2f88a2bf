"""Step logs in chunks (docs/logs.md), without I/O: a runner's pipe read cut into chunks of
whole lines (services/runner_agent/chunks.py) within both caps, each read back as the lines it
holds, and the cursor span that fits a chunk (services/gateway/reads/log_lines.py). Published, read
and served: tests/integration/test_log_chunks.py."""

from __future__ import annotations

import random

from heddle.services.gateway.reads import log_lines
from heddle.services.gateway.reads.log_lines import CURSOR_SPAN
from heddle.services.runner_agent.chunks import chunk, cut_long_lines, has_long_line, split_long
from heddle.shared.wire.contracts import (
    MAX_CHUNK_LINES,
    LogLine,
    chunk_texts,
    encode,
    log_line_decoder,
)


def line_by_line(block: bytes, limit: int) -> list[str]:
    """Each line cut into pieces and decoded on its own, as the runner once did."""
    out: list[str] = []
    for raw in block.split(b"\n"):
        out.extend(piece.decode("utf-8", errors="replace") for piece in split_long(raw, limit))
    return out


def test_a_chunk_reads_as_its_lines_decoded_one_by_one() -> None:
    rng = random.Random(7)
    pieces = [b"a", b"bc", b"\n", b"\n", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80"]
    pieces += [b"\xff", b"\xc3", b"\x80", b"\xe2\x82", b'"', b"\\", b"\t", b"\r", b"\x00"]
    for _ in range(3000):
        block = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 60)))
        limit = rng.choice([4, 5, 7, 16, 64])
        cut = cut_long_lines(block, limit)
        assert chunk_texts(cut) == line_by_line(block, limit), (block, limit)
        longest = max(map(len, block.split(b"\n")))
        assert has_long_line(block, limit) == (longest > limit), (block, limit)
        assert (cut is block) == (longest <= limit)  # nothing to cut: the bytes as they are
    # Lines of exactly the limit stay whole; one byte more is split between characters.
    assert chunk_texts(cut_long_lines(b"abcd\nefgh", 4)) == ["abcd", "efgh"]
    cut = cut_long_lines(b"abcde\n\xc3\xa9\xc3\xa9\xc3\xa9", 4)
    assert chunk_texts(cut) == ["abcd", "e", "éé", "é"]
    assert chunk_texts(b"ok \xff\xfe!\n") == ["ok \ufffd\ufffd!", ""]


def test_chunks_are_slices_of_the_bytes_within_both_caps() -> None:
    rng = random.Random(11)
    for _ in range(300):
        lines = [
            "ab 0{}"[: rng.choice([0, 1, 3, 6])] * rng.choice([1, 1, 1, 7, 50])
            for _ in range(rng.randrange(1, 3000))
        ]
        block = "\n".join(lines).encode()
        max_lines = rng.choice([1, 2, 7, 1000])
        max_bytes = rng.choice([40, 3000, 8000, 64 * 1024])
        chunks = chunk(block, max_lines, max_bytes)
        assert b"\n".join(body for body, _ in chunks) == block
        assert [n for _, n in chunks] == [len(chunk_texts(body)) for body, _ in chunks]
        assert all(n <= max_lines for _, n in chunks)
        assert all(len(body) <= max_bytes for body, n in chunks if n > 1)
    # Short lines: chunks of MAX_CHUNK_LINES lines at most, and not many fewer.
    block = "\n".join(str(i) for i in range(MAX_CHUNK_LINES * 5 // 2)).encode()
    sizes = [n for _, n in chunk(block)]
    assert len(sizes) == 3 and sum(sizes) == MAX_CHUNK_LINES * 5 // 2
    assert max(sizes) == MAX_CHUNK_LINES
    # 64 KiB at most: 1,000 lines of 100 bytes take two chunks; a longer line is one alone.
    wide = b"\n".join([b"y" * 100] * 1000)
    assert [n for _, n in chunk(wide)] == [648, 352]
    huge = b"z" * 70_000
    assert chunk(b"a\nb\n" + huge + b"\nc") == [(b"a\nb", 2), (huge, 1), (b"c", 1)]
    # An empty line is a line.
    assert chunk(b"") == [(b"", 1)] and chunk_texts(b"") == [""]
    # A note: JSON, one line or several.
    assert log_line_decoder.decode(encode(LogLine(stream="heddle", seq=0, text="x"))).texts() == [
        "x"
    ]


def test_cursor_span_fits_a_chunk() -> None:
    from heddle.shared.wire.contracts import MAX_CHUNK_LINES

    assert MAX_CHUNK_LINES < CURSOR_SPAN
    assert log_lines.start_of(0) == 0 and log_lines.start_of(CURSOR_SPAN - 1) == 1
    assert log_lines.start_of(5 * CURSOR_SPAN + 3) == 5
