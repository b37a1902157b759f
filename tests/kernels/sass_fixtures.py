"""The committed sm_90 cubin fixtures (made by profile_fixtures/make_fixtures.py), shared by the
SASS profiler tests and the SASS tools' tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from loopwise.kernels.profile import sass_tools
from loopwise.kernels.profile.sass import Resources, SassProfile
from loopwise.kernels.profile.sass_tools import ToolNotFoundError, profile_cubin

FIXTURES = Path(__file__).parent / "profile_fixtures"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def have_disassembler() -> bool:
    try:
        sass_tools.find_tool("cuobjdump")
    except ToolNotFoundError:
        return False
    return True


needs_tools = pytest.mark.skipif(not have_disassembler(), reason="no cuobjdump / nvdisasm (CUDA or Triton)")


@functools.lru_cache(maxsize=None)
def fixture_profile(name: str) -> SassProfile:
    """Profile of a committed cubin, with what Triton and ptxas reported when it was built."""
    extra = {EXPECTED[name]["function"]: Resources(**EXPECTED[name]["resources"])}
    return profile_cubin(FIXTURES / f"{name}.cubin", extra_resources=extra)
