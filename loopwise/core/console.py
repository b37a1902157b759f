"""The rich console every command prints through.

Rich sizes tables to the terminal, and to 80 columns when the output is not a terminal (a log
file, a pipe, CI), where wide tables then lose their cells to ellipses ("statu", "speedu"). Off a
terminal the console here is wide enough for every table the commands print; ``COLUMNS`` still
wins when set.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

WIDTH_OFF_TERMINAL = 160


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr), ``WIDTH_OFF_TERMINAL`` wide when that is not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not os.environ.get("COLUMNS") and not (hasattr(stream, "isatty") and stream.isatty()):
        width = WIDTH_OFF_TERMINAL
    return Console(stderr=stderr, width=width)
