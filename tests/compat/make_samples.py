"""Writes the golden samples of a release from the current code (docs/upgrading.md):

    python -m tests.compat.make_samples 0.3.0

one JSON file per message and record kind in tests/compat/samples/<version>/, each as the
wire or the bucket holds it (pretty-printed). Run once, when a release is cut; the files are
then frozen: the next releases' code must read them (tests/compat/test_golden_samples.py),
and this script refuses to write a release's samples again.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import msgspec

from tests.compat.sample_messages import messages
from tests.compat.sample_records import records
from tests.compat.sample_state import state

SAMPLES = Path(__file__).parent / "samples"
VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+\Z")


def samples() -> dict[str, object]:
    """Every sample, by its file's name (without ``.json``)."""
    return {**messages(), **records(), **state()}


def sample_bytes(value: object) -> bytes:
    """A sample's file: its JSON as it travels, indented, ending in a newline."""
    return msgspec.json.format(msgspec.json.encode(value), indent=2) + b"\n"


def write(version: str, into: Path = SAMPLES) -> Path:
    """The samples written in ``into/<version>``; FileExistsError if they exist: frozen."""
    folder = into / version
    folder.mkdir(parents=True, exist_ok=False)
    for name, value in samples().items():
        (folder / f"{name}.json").write_bytes(sample_bytes(value))
    return folder


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not VERSION.match(argv[0]):
        print("usage: python -m tests.compat.make_samples <version, e.g. 0.3.0>", file=sys.stderr)
        return 2
    try:
        folder = write(argv[0])
    except FileExistsError:
        print(f"the samples of {argv[0]} exist and are frozen: not written", file=sys.stderr)
        return 1
    print(f"wrote {len(samples())} samples in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
