"""Step-made text on the user's terminal: its control characters shown as ``cat -v`` shows
them (ESC as ^[, BEL as ^G, DEL as ^?, a C1 control such as CSI as M-^[), so an escape
sequence a step printed (a window title, the clipboard through OSC 52, a cursor move) is
seen on the terminal instead of obeyed by it. Newlines and tabs are kept. Pure: what reaches
a pipe or a file is left as it is (``for_output``)."""

from __future__ import annotations

from typing import TextIO

KEPT = "\n\t"


def _caret(code: int) -> str:
    """``cat -v``'s name of a C0 control or DEL: ^@ .. ^_, ^?."""
    return "^?" if code == 0x7F else "^" + chr(code + 0x40)


# str.translate's table: every C0 control but newline and tab, DEL, and the C1 controls
# (U+0080..U+009F, which some terminals obey as ESC sequences: U+009B is CSI).
CAT_V = {code: _caret(code) for code in range(0x20) if chr(code) not in KEPT}
CAT_V[0x7F] = _caret(0x7F)
CAT_V.update({code: "M-" + _caret(code - 0x80) for code in range(0x80, 0xA0)})


def visible(text: str) -> str:
    """``text`` with its control characters written out as ``cat -v`` does."""
    return text.translate(CAT_V)


def is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def for_output(text: str, out: TextIO, raw: bool = False) -> str:
    """``text`` as ``out`` is given it: made visible on a terminal, unless ``raw``; as it is
    on a pipe or in a file, where a program reading it wants the bytes the step wrote."""
    return text if raw or not is_terminal(out) else visible(text)
