"""Fixtures the kernels tests share."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def cli_env(tmp_path):
    """The environment of a ``python -m loopwise`` subprocess on CPU (Triton interpreted), its cache
    under tmp_path. Its TMPDIR is a folder of the test's own (a run SIGKILLed cannot remove its
    scratch folders), removed after the test, and short: pytest's tmp_path grows with its run counter
    and the test's name, and the sandboxes' forkserver falls back to spawn (slower) past a socket
    path's 107 bytes."""
    scratch = Path(tempfile.mkdtemp(prefix="lw-"))
    yield dict(os.environ, TRITON_INTERPRET="1", LOOPWISE_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="160",
               TMPDIR=str(scratch))
    shutil.rmtree(scratch, ignore_errors=True)
