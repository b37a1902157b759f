"""Tests marked ``gpu`` run only where torch sees a CUDA GPU; elsewhere they are skipped."""

import os

import pytest


@pytest.fixture(autouse=True)
def _triton_interpret_as_found():
    """A judge on the CPU switches Triton's interpreter on for its sandboxes (in os.environ); each
    test leaves the variable as it found it, so no test depends on the order tests run in."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
