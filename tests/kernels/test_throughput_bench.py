"""bench/throughput.py's bound: the most more workers could gain on a fixed set of jobs."""

from __future__ import annotations

import math

import pytest
from bench_modules import bench_module


@pytest.fixture(scope="module")
def tp():
    return bench_module("throughput")


def test_whole_jobs_bound_two_workers_exactly(tp):
    assert tp.best_speedup([3.0] * 16, 2) == pytest.approx(2.0)
    assert tp.best_speedup([3.4] * 15, 2) == pytest.approx(15 / 8)  # one worker takes 8 of them
    assert tp.best_speedup([3.0, 2.0, 2.0, 1.0], 2) == pytest.approx(2.0)  # 3+1 | 2+2
    assert tp.best_speedup([3.0] * 16, 1) == pytest.approx(1.0)


def test_one_long_job_caps_what_workers_can_gain(tp):
    # 10 s of work of which one job is 6 s: no number of workers finishes before 6 s
    assert tp.best_speedup([6.0, 1.0, 1.0, 1.0, 1.0], 2) == pytest.approx(10 / 6)
    assert tp.best_speedup([6.0, 1.0, 1.0, 1.0, 1.0], 8) == pytest.approx(10 / 6)


def test_no_jobs_is_no_bound(tp):
    assert math.isnan(tp.best_speedup([], 2)) and math.isnan(tp.best_speedup([0.0, 0.0], 2))
