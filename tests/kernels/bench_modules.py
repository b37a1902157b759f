"""The scripts under bench/ as modules, for the tests of their arithmetic (they import each other
from that folder, which is put on the path)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str):
    """``bench/<name>.py``, imported."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)
