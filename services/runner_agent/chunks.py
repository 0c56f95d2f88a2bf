"""A step's output cut into log chunks. Pure: no I/O.

A chunk is the body of one log message: complete lines exactly as the command wrote them,
separated by newlines (the last line's own newline left out), at most ``MAX_CHUNK_LINES``
lines and ``MAX_CHUNK_BYTES`` bytes (a longer line is a chunk of its own); its stream and the
number of its first line travel in headers (docs/logs.md). The bytes are not decoded,
escaped or copied line by line: the usual output of a chatty command costs a few passes
over its bytes. Readers decode a chunk as UTF-8, invalid sequences replaced with U+FFFD: a
newline is never part of a sequence, so that is the same as decoding line by line.

A line longer than the line limit (``HEDDLE_LOG_LINE_MAX_BYTES``) is cut into pieces of at
most that many bytes, at a UTF-8 character boundary where there is one; each piece is a
line of its own.
"""

from __future__ import annotations

from heddle.shared.wire.contracts import MAX_CHUNK_LINES

MAX_CHUNK_BYTES = 64 * 1024  # of lines in one message (a longer line is a message of its own)


def cut_point(data: bytes | bytearray, limit: int) -> int:
    """Where to cut ``data`` (longer than ``limit``) into a first piece of at most ``limit``
    bytes without splitting a UTF-8 character; ``limit`` itself if there is no such place."""
    i = limit
    while limit - i < 3 and i > 0 and (data[i] & 0xC0) == 0x80:  # continuation byte
        i -= 1
    if i == 0 or (data[i] & 0xC0) == 0x80:
        return limit
    return i


def split_long(raw: bytes | bytearray, limit: int) -> list[bytes]:
    """One line (no newline) as pieces of at most ``limit`` bytes, cut between characters."""
    out = []
    while len(raw) > limit:
        cut = cut_point(raw, limit)
        out.append(bytes(raw[:cut]))
        raw = raw[cut:]
    out.append(bytes(raw))
    return out


def has_long_line(block: bytes, limit: int) -> bool:
    """Whether a line of ``block`` (lines without the last newline) is longer than
    ``limit`` bytes: a look for the last newline in each window of ``limit + 1`` bytes, a
    few searches per pipe read instead of one step per line."""
    pos, n = 0, len(block)
    while n - pos > limit:
        nl = block.rfind(b"\n", pos, pos + limit + 1)
        if nl < 0:
            return True  # limit + 1 bytes from a line's start without its end
        pos = nl + 1
    return False


def cut_long_lines(block: bytes, limit: int) -> bytes:
    """``block`` (lines without the last newline) with every line longer than ``limit``
    bytes cut into pieces, each a line of its own; the same bytes when there is none."""
    if not has_long_line(block, limit):
        return block
    out: list[bytes] = []
    for raw in block.split(b"\n"):
        out.extend(split_long(raw, limit) if len(raw) > limit else (raw,))
    return b"\n".join(out)


def chunk(
    block: bytes, max_lines: int = MAX_CHUNK_LINES, max_bytes: int = MAX_CHUNK_BYTES
) -> list[tuple[bytes, int]]:
    """Complete lines (``block``, without the last newline) as chunks, each with its number
    of lines: slices of the bytes as read, cut between lines."""
    out: list[tuple[bytes, int]] = []
    aim = max_lines - max_lines // 50 or 1  # lines to aim a cut at (a little under the cap)
    start, end_all = 0, len(block)
    left = block.count(b"\n") + 1  # lines from ``start`` on
    while True:
        if left <= max_lines and end_all - start <= max_bytes:
            end, count = end_all, left
        else:  # cut where ``aim`` lines of the average length end, then count
            reach = min(max_bytes, (end_all - start) * aim // left)
            end = block.rfind(b"\n", start, start + reach + 1)
            if end < start:  # no newline that near: the next line alone
                end = block.find(b"\n", start)
                end = end_all if end < 0 else end
            count = block.count(b"\n", start, end) + 1
            while count > max_lines:  # lines shorter than the average: cut again
                guess = start + (end - start) * max_lines // count
                cut = block.rfind(b"\n", start, guess + 1)
                end = cut if cut > start else block.find(b"\n", start)
                count = block.count(b"\n", start, end) + 1
        left -= count
        out.append((block[start:end], count))
        if end >= end_all:
            return out
        start = end + 1
