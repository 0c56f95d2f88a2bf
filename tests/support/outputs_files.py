"""The directory a runner makes once per process for its steps' outputs files
(services/runner_agent/outputs_file.py), removed: the next outputs file makes it afresh, where
MEMORY_DIR and the temporary directory say at that moment."""

from __future__ import annotations

import shutil
from pathlib import Path

from heddle.services.runner_agent.outputs_file import OutputsFile


def no_outputs_directory() -> None:
    """This process's outputs directory, as if none was made yet: the one there is goes."""
    file = OutputsFile()
    file.close()
    shutil.rmtree(Path(file.path).parent)
