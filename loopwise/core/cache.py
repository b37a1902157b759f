"""Where loopwise keeps what it can measure or build once (device ceilings, reference timings,
compiled extensions): ``$LOOPWISE_CACHE_DIR``, else ``~/.cache/loopwise``."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "LOOPWISE_CACHE_DIR"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "loopwise")
