"""The optimize package's public names resolve, and importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import loopwise.kernels.optimize as optimize


def test_every_public_name_resolves():
    assert all(getattr(optimize, name) is not None for name in optimize.__all__)


def test_importing_the_package_loads_no_torch():
    code = "import sys, loopwise.kernels.optimize; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
