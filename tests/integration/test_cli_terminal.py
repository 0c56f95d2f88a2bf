"""A step cannot write the user's terminal through the command line: where step-made text is
printed on a terminal, its control characters are shown as `cat -v` shows them; `--raw` and
a pipe get the bytes the step wrote. The escaping itself is checked against `cat -v`."""

from __future__ import annotations

import json
import subprocess

from heddle.services.cli.terminal import visible

from tests.support.stack import StackFactory
from tests.support.terminal import PWNED, RAW, SHOWN, heddle

TABLE = {
    "\x1b": "^[",
    "\x07": "^G",
    "\x00": "^@",
    "\x08": "^H",
    "\r": "^M",
    "\x1f": "^_",
    "\x7f": "^?",
    "\x80": "M-^@",
    "\x9b": "M-^[",  # CSI on its own
    "\x9d": "M-^]",  # OSC on its own
    "\x9f": "M-^_",
    "\n": "\n",
    "\t": "\t",
    " ~": " ~",
    "\xa0é中😀\ufffd": "\xa0é中😀\ufffd",  # printable beyond ASCII stays as it is
    "a\x1b[2Jb\x1b]8;;http://x\x1b\\c": "a^[[2Jb^[]8;;http://x^[\\c",
}


def cat_v(codes: list[int]) -> list[str]:
    """What `cat -v` prints for each byte of ``codes`` (none of them a newline)."""
    given = b"\n".join(bytes([code]) for code in codes)
    done = subprocess.run(["cat", "-v"], input=given, capture_output=True, check=True)
    return done.stdout.decode("ascii").split("\n")


def test_control_characters_are_shown_as_cat_v_shows_them() -> None:
    for text, shown in TABLE.items():
        assert visible(text) == shown, repr(text)
    assert visible(PWNED.encode().decode("unicode_escape")) == SHOWN.decode()
    # Every C0 control, DEL and every C1 control as cat -v shows the byte of that value;
    # newline and tab kept; printable characters unchanged.
    codes = [code for code in range(0xA0) if code != 0x0A]
    for code, expected in zip(codes, cat_v(codes), strict=True):
        assert visible(chr(code)) == expected, hex(code)
    assert visible("\n") == "\n"
    for code in (*range(0x20, 0x7F), *range(0xA0, 0x800)):
        assert visible(chr(code)) == chr(code), hex(code)


# ---- through a real stack ------------------------------------------------------------------


async def test_a_step_escape_sequences_reach_a_terminal_escaped(stack: StackFactory) -> None:
    s = await stack(runners=1)
    env = {"HEDDLE_URL": s.base, "HEDDLE_TOKEN": s.admin_token}
    command = f"printf '{PWNED}\\n'; echo done; exit 3"
    run_id = await s.submit({"runId": "pwn", "steps": [{"id": "p", "command": command}]})
    assert (await s.wait_run(run_id))["status"] == "failed"

    for args in (("logs", "pwn", "p"), ("logs", "pwn", "p", "-f")):
        rc, out, err = await heddle(*args, terminal=True, env=env)
        assert rc == 0, err
        assert b"\x1b" not in out and b"\x07" not in out, (args, out)
        assert SHOWN in out and b"done" in out, (args, out)
        # A pipe, and --raw on a terminal, get what the step wrote.
        rc, out, err = await heddle(*args, terminal=False, env=env)
        assert rc == 0 and RAW + b"\n" in out, (args, out, err)
        rc, out, err = await heddle(*args, "--raw", terminal=True, env=env)
        assert rc == 0 and RAW in out, (args, out, err)

    # JSON on a terminal: JSON's own escapes, the text unchanged once decoded.
    rc, out, err = await heddle("logs", "pwn", "p", "--json", terminal=True, env=env)
    assert rc == 0 and b"\x1b" not in out, err
    texts = [line["text"] for line in json.loads(out)["lines"]]
    assert RAW.decode() in texts

    # The views a terminal gets of the run: nothing a step wrote is obeyed.
    for args in (("status", "pwn"), ("watch", "pwn")):
        rc, out, err = await heddle(*args, terminal=True, env=env)
        assert rc == (0 if args[0] == "status" else 1), (args, err)
        assert b"\x1b]" not in out and b"\x07" not in out, (args, out)
        assert b"exit code 3" in out, (args, out)
