"""The sandbox's host-memory limit: below the machine's memory unless the user sets it."""

import os

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate import pool as pool_mod


def _machine_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def test_default_limit_is_derived_and_below_the_machine():
    assert EvalConfig().host_memory_gb is None
    limit = pool_mod.host_memory_limit_gb(None)
    assert 0 < limit < _machine_gb()


def test_default_on_a_ci_sized_machine_leaves_room_for_the_judge(monkeypatch):
    monkeypatch.setattr(pool_mod, "machine_memory_gb", lambda: 23.0)
    assert pool_mod.host_memory_limit_gb(None) < 23.0 / 2 + 1e-9
    monkeypatch.setattr(pool_mod, "machine_memory_gb", lambda: 2048.0)
    assert pool_mod.host_memory_limit_gb(None) == 32.0


def test_a_user_setting_wins():
    assert EvalConfig(host_memory_gb=48).host_memory_gb == 48
    assert pool_mod.host_memory_limit_gb(48.0) == 48.0
    assert pool_mod.host_memory_limit_gb(3) == 3.0


def test_a_sandbox_enforces_the_derived_limit(tmp_path, monkeypatch):
    """A pool given no limit kills a sandbox above the derived one (here made tiny)."""
    import pytest

    monkeypatch.setattr(pool_mod, "machine_memory_gb", lambda: 0.02)  # derived limit: 10 MiB
    monkeypatch.setattr(pool_mod, "_method", "spawn")  # a forked start that fails would retry spawned
    box = pool_mod.Sandbox("cpu", {"host_memory_gb": None}, tmp_path / "box.log")
    with pytest.raises(pool_mod.SandboxFailure) as failure:
        box.wait_ready(timeout=120)  # loading torch alone takes more than that
    assert failure.value.code == "host_memory_limit"
