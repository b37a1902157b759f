"""The command that continues a stopped run, as every engine prints it when a run stops with work left.

A run is found by its id in its runs folder, so the command names both; the folder is written
absolute, so the command resumes the same run from any working directory. What a run was started
with (its settings, its resolved config) is read back from the run itself, so it is not repeated.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

__all__ = ["resume_command"]


def resume_command(command: str, run_id: str, runs_dir: str | os.PathLike[str], *options: str) -> str:
    """The shell command that resumes run ``run_id``.

    Args:
        command: the command that started the run, without options, e.g. ``loopwise kernels optimize``.
        run_id: the run's id.
        runs_dir: the folder holding the run.
        options: further words the resume needs that the run does not keep (e.g. ``--kernelbench PATH``).

    Returns:
        One line, quoted for a POSIX shell: ``command --resume RUN_ID --runs-dir DIR options...``.
    """
    words = [*shlex.split(command), "--resume", run_id, "--runs-dir", str(Path(runs_dir).resolve()), *options]
    return shlex.join(words)
