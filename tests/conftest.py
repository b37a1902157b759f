"""Tests marked ``gpu`` run only where torch sees a CUDA GPU; elsewhere they are skipped.

The test doubles and fixture readers shared across folders (``fake_llm_server``,
``chat_tool_conformance`` in ``tests/core``; ``judge_doubles``, ``sass_fixtures``, ``bench_modules``,
``ncu_synthetic``, ``exchange_agent`` in ``tests/kernels``) are imported by name from any test folder:
both folders go on ``sys.path`` here."""

import gc
import os
import sys
from pathlib import Path

import pytest

for _shared in ("core", "kernels"):
    _folder = str(Path(__file__).parent / _shared)
    if _folder not in sys.path:
        sys.path.insert(0, _folder)


def _restore_triton_interpret(before: str | None) -> None:
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


@pytest.fixture(autouse=True)
def _triton_interpret_as_found():
    """A judge on the CPU switches Triton's interpreter on for its sandboxes (in os.environ); each
    test leaves the variable as it found it, so no test depends on the order tests run in."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    _restore_triton_interpret(before)


@pytest.fixture(autouse=True, scope="module")
def _triton_interpret_as_found_by_the_module():
    """The same for a module: a judge built by a module-scoped fixture sets the variable before
    any test's own check records it."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    _restore_triton_interpret(before)


_frozen_at = {"module": None}


def _freeze_what_lives_now() -> None:
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session):
    """What lives once the tests are collected (torch, Triton, every test module and its parameters)
    is moved out of the cyclic collector's sight: the judge collects garbage before each timed pass
    (timing._collector_off), and a full collection walks all of it, twice per judged candidate.
    Frozen objects are still freed by reference counting; garbage the tests make is collected as
    before."""
    _freeze_what_lives_now()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The same at each module's first test, before its fixtures: the modules the tests before it
    imported (the interpreter, transformers, ray) join the frozen objects."""
    module = getattr(item, "module", None)
    if module is not _frozen_at["module"]:
        _frozen_at["module"] = module
        _freeze_what_lives_now()


def pytest_unconfigure(config):
    """Everything back under the collector before the process exits (extension modules report
    objects still alive at exit as leaks)."""
    gc.unfreeze()


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
