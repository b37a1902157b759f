"""Roofline classifier on synthetic but physically consistent kernels, held to H200 ceilings."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwise.kernels.profile.classify import KernelSample, classify, sample_from_ncu
from loopwise.kernels.profile.ncu import derive, parse_raw_csv
from loopwise.kernels.roofline.ceilings import Ceilings

# The H200's ceilings as measure_ceilings reported them (docs/log/2026-11-29.md, "Device ceilings"); 132 SMs.
H200 = Ceilings(device="NVIDIA H200", bandwidth_gbs=4256, fp32_tflops=51.4, tf32_tflops=420.8,
                bf16_tflops=849.5, l2_bytes=62_914_560, measured_at="2026-11-29T00:00:00+00:00")
SMS = 132
COPY_BYTES = 2 * 2**30  # 1 GiB read + 1 GiB written
FIXTURE = Path(__file__).parents[1] / "profile_fixtures" / "ncu" / "raw_page_transcribed.csv"


def copy_kernel(fraction: float) -> KernelSample:
    """A 1 GiB device copy running at ``fraction`` of the measured copy bandwidth."""
    return KernelSample(name="copy", time_s=COPY_BYTES / (fraction * 4256e9), bytes=COPY_BYTES, flops=0.0,
                        grid_blocks=16_384)


def test_copy_at_90_percent_of_bandwidth_is_memory_bound_at_roofline() -> None:
    verdict = classify(copy_kernel(0.90), H200, SMS)
    assert verdict.kernel_class == "memory_bound" and verdict.bound == "memory"
    assert verdict.fraction_of_sol == pytest.approx(0.90)
    assert verdict.at_roofline
    assert verdict.sol_time_s == pytest.approx(COPY_BYTES / 4256e9)
    assert verdict.achieved_gbs == pytest.approx(0.9 * 4256)
    assert "90%" in verdict.explanation and "4256 GB/s" in verdict.explanation


def test_copy_at_60_percent_is_memory_bound_but_not_at_roofline() -> None:
    verdict = classify(copy_kernel(0.60), H200, SMS)
    assert verdict.kernel_class == "memory_bound"
    assert not verdict.at_roofline
    assert "below the 80% at-roofline mark" in verdict.explanation


def test_bf16_gemm_at_85_percent_is_compute_bound_at_roofline() -> None:
    n = 8192
    flops = 2 * n**3
    gemm = KernelSample(name="gemm_bf16", time_s=flops / (0.85 * 849.5e12), bytes=3 * n * n * 2, flops=None,
                        tensor_flops=flops, tensor_precision="bf16", grid_blocks=2048)
    verdict = classify(gemm, H200, SMS)
    assert verdict.kernel_class == "compute_bound" and verdict.bound == "compute"
    assert verdict.at_roofline and verdict.fraction_of_sol == pytest.approx(0.85)
    assert verdict.arithmetic_intensity == pytest.approx(n / 3)  # 2n^3 FLOPs over 6n^2 bytes
    assert verdict.ridge_point == pytest.approx(849.5e12 / 4256e9)
    assert verdict.arithmetic_intensity > verdict.ridge_point


def test_tf32_work_is_held_to_the_tf32_ceiling() -> None:
    flops = 2 * 4096**3
    gemm = KernelSample(name="gemm_tf32", time_s=1e-3, bytes=3 * 4096 * 4096 * 4, flops=None,
                        tensor_flops=flops, tensor_precision="tf32", grid_blocks=1024)
    verdict = classify(gemm, H200, SMS)
    assert verdict.compute_time_s == pytest.approx(flops / 420.8e12)


def test_cuda_core_sgemm_at_70_percent_is_compute_bound_not_at_roofline() -> None:
    flops = 2 * 4096**3
    sgemm = KernelSample(name="sgemm", time_s=flops / (0.70 * 51.4e12), bytes=3 * 4096 * 4096 * 4, flops=flops,
                         grid_blocks=1024)
    verdict = classify(sgemm, H200, SMS)
    assert (verdict.kernel_class, verdict.at_roofline) == ("compute_bound", False)
    assert verdict.fraction_of_sol == pytest.approx(0.70)


@pytest.mark.parametrize(("intensity", "side"), [(5.0, "memory"), (20.0, "compute")])
def test_arithmetic_intensity_against_the_ridge_picks_the_side(intensity: float, side: str) -> None:
    # fp32 ridge: 51.4 TFLOP/s / 4256 GB/s = 12.1 FLOP/byte.
    nbytes = 1e9
    flops = intensity * nbytes
    sol = max(nbytes / 4256e9, flops / 51.4e12)
    verdict = classify(KernelSample(name="k", time_s=sol / 0.9, bytes=nbytes, flops=flops, grid_blocks=4096),
                       H200, SMS)
    assert verdict.bound == side and verdict.kernel_class == f"{side}_bound"


def test_tiny_kernel_of_3us_with_8_blocks_is_latency_bound() -> None:
    # A bias add over 8 blocks x 128 floats: reads x and bias, writes y (12 KiB in all).
    tiny = KernelSample(name="bias", time_s=3e-6, bytes=3 * 1024 * 4, flops=1024.0, grid_blocks=8)
    verdict = classify(tiny, H200, SMS)
    assert verdict.kernel_class == "latency_bound"
    assert verdict.fraction_of_sol < 0.01 and not verdict.at_roofline
    assert "launch" in verdict.explanation


def test_long_kernel_with_fewer_blocks_than_sms_is_latency_bound() -> None:
    # 64 blocks on 132 SMs, 50 us moving 20 MB: 9% of the memory speed of light.
    few = KernelSample(name="few_blocks", time_s=50e-6, bytes=20e6, flops=0.0, grid_blocks=64)
    verdict = classify(few, H200, SMS)
    assert verdict.kernel_class == "latency_bound"
    assert "64 blocks on 132 SMs" in verdict.explanation
    # Without the SM count nothing shows the grid is too small, and the same kernel is underutilized.
    assert classify(few, H200).kernel_class == "underutilized"


def test_kernel_far_from_both_ceilings_with_plenty_of_work_is_underutilized() -> None:
    slow = KernelSample(name="slow_reduce", time_s=2e-3, bytes=400e6, flops=100e6, grid_blocks=10_000,
                        sm_throughput_pct=20.0, memory_throughput_pct=15.0)
    verdict = classify(slow, H200, SMS)
    assert verdict.kernel_class == "underutilized"
    assert verdict.fraction_of_sol == pytest.approx(400e6 / 4256e9 / 2e-3)
    assert "4.7% of its memory speed of light" in verdict.explanation


def test_busy_memory_hierarchy_makes_a_low_dram_kernel_memory_bound() -> None:
    # An L2-resident stencil: little DRAM traffic, but ncu shows the memory hierarchy 85% busy.
    l2_bound = KernelSample(name="stencil", time_s=2e-3, bytes=400e6, flops=100e6, grid_blocks=10_000,
                            sm_throughput_pct=20.0, memory_throughput_pct=85.0)
    verdict = classify(l2_bound, H200, SMS)
    assert verdict.kernel_class == "memory_bound" and not verdict.at_roofline
    assert "85% busy" in verdict.explanation


def test_busy_sms_make_a_low_flop_kernel_compute_bound() -> None:
    int_heavy = KernelSample(name="hash", time_s=2e-3, bytes=400e6, flops=0.0, grid_blocks=10_000,
                             sm_throughput_pct=92.0, memory_throughput_pct=30.0)
    assert classify(int_heavy, H200, SMS).kernel_class == "compute_bound"


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (KernelSample(name="k", time_s=0.0, bytes=1.0, flops=1.0), "must be positive"),
        (KernelSample(name="k", time_s=1e-3, bytes=None, flops=None), "neither is known"),
        (KernelSample(name="k", time_s=1e-3, bytes=-1.0, flops=None), "must not be negative"),
    ],
)
def test_impossible_inputs_are_rejected(sample: KernelSample, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        classify(sample, H200, SMS)


def test_ncu_fixture_kernels_classify_end_to_end() -> None:
    copy, tiny = (classify(sample_from_ncu(derive(k)), H200, SMS)
                  for k in parse_raw_csv(FIXTURE.read_text(encoding="utf-8")))
    assert copy.kernel_class == "memory_bound" and copy.at_roofline
    assert copy.fraction_of_sol == pytest.approx(2 * 536.87e6 / 4256e9 / 280.06e-6)
    assert tiny.kernel_class == "latency_bound"
