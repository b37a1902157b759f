"""Speed-of-light floor: hand-computed numbers for the pure formula, and FLOP/byte counting."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwise.kernels.problem import Problem, load_problem
from loopwise.kernels.roofline import Ceilings, Work, count_work, peak_tflops, speed_of_light

H200ISH = Ceilings(device="test", bandwidth_gbs=4000, fp32_tflops=50, tf32_tflops=360, bf16_tflops=800,
                   l2_bytes=50_000_000, measured_at="2026-01-01T00:00:00+00:00")
GEMM_4096 = 2 * 4096**3  # 137,438,953,472 FLOPs


def _work(flops: int | None = 0, inputs: int | None = 0, outputs: int | None = 0, dtype: str = "float32") -> Work:
    return Work(flops=flops, input_bytes=inputs, output_bytes=outputs, param_bytes=0, dtype=dtype)


def test_memory_bound_counts_outputs_beyond_l2_only() -> None:
    floor = speed_of_light(_work(inputs=8_000_000_000, outputs=4_000_000_000), H200ISH)
    # (8e9 + 4e9 - 5e7) B / 4e12 B/s = 2.9875 ms
    assert floor.memory_ms == pytest.approx(2.9875)
    assert floor.compute_ms == 0
    assert (floor.floor_ms, floor.bound) == (pytest.approx(2.9875), "memory")


def test_output_that_fits_in_l2_costs_nothing() -> None:
    floor = speed_of_light(_work(inputs=1_000_000, outputs=1_000_000), H200ISH)
    assert floor.memory_ms == pytest.approx(2.5e-4)  # 1e6 B / 4e12 B/s


def test_compute_bound_fp32_uses_a_third_of_tf32() -> None:
    inputs, outputs = 2 * 4096 * 4096 * 4, 4096 * 4096 * 4
    floor = speed_of_light(_work(GEMM_4096, inputs, outputs), H200ISH)
    assert floor.tflops == 120  # max(50, 360 / 3)
    assert floor.compute_ms == pytest.approx(1.1453246122666667)  # 137438953472 / 120e12 s
    assert floor.memory_ms == pytest.approx(0.037831648)  # (134217728 + 17108864) / 4e12 s
    assert floor.bound == "compute"
    assert floor.floor_ms == floor.compute_ms


def test_fp32_policy_uses_sgemm_when_faster_than_tf32x3() -> None:
    slow_tf32 = H200ISH.model_copy(update={"tf32_tflops": 90})
    assert speed_of_light(_work(GEMM_4096), slow_tf32).compute_ms == pytest.approx(2.74877906944)


def test_relaxed_policy_and_half_dtype_use_bf16_rate() -> None:
    relaxed = speed_of_light(_work(GEMM_4096), H200ISH, policy="relaxed")
    assert relaxed.compute_ms == pytest.approx(0.17179869184)  # / 800e12
    assert speed_of_light(_work(GEMM_4096, dtype="bfloat16"), H200ISH).compute_ms == relaxed.compute_ms
    assert peak_tflops(H200ISH, "relaxed") == 800
    with pytest.raises(ValueError, match="policy"):
        peak_tflops(H200ISH, "tf32")  # type: ignore[arg-type]


def test_unknown_parts_stay_unknown() -> None:
    only_memory = speed_of_light(_work(flops=None, inputs=4_000_000_000, outputs=None), H200ISH)
    assert (only_memory.compute_ms, only_memory.floor_ms, only_memory.bound) == (None, pytest.approx(1.0), "memory")
    nothing = speed_of_light(_work(flops=None, inputs=None), H200ISH)
    assert (nothing.floor_ms, nothing.bound) == (None, None)


PROBLEM = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.proj = nn.Linear(n, n, bias=False)

    def forward(self, a, b):
        {forward}

def get_inputs():
    return {inputs}

def get_init_inputs():
    return {init}
"""


def _problem(tmp_path: Path, forward: str, inputs: str, init: str = "[1024]") -> Problem:
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM.format(forward=forward, inputs=inputs, init=init), encoding="utf-8")
    return load_problem(str(path))


def test_count_work_on_meta(tmp_path: Path) -> None:
    problem = _problem(tmp_path, "return self.proj(torch.relu(a @ b))",
                       "[torch.rand(4096, 2048), torch.rand(2048, 1024)]")
    work = count_work(problem)
    assert work.flops == 2 * 4096 * 2048 * 1024 + 2 * 4096 * 1024 * 1024
    assert work.input_bytes == (4096 * 2048 + 2048 * 1024) * 4
    assert work.output_bytes == 4096 * 1024 * 4
    assert work.param_bytes == 1024 * 1024 * 4
    assert work.dtype == "float32"
    assert work.notes == ("counted on meta",)


def test_count_work_tuple_output_and_scalar_input(tmp_path: Path) -> None:
    problem = _problem(tmp_path, "return a * b, a.sum()", "[torch.rand(8, 4, dtype=torch.float16), 3]", "[4]")
    work = count_work(problem)
    assert (work.flops, work.input_bytes, work.output_bytes, work.dtype) == (0, 64, 66, "float16")


ITEM_FORWARD = "return self.proj(a @ b) / a.abs().max().item()"  # .item() has no meta kernel


def test_count_work_falls_back_to_cpu_for_small_inputs(tmp_path: Path) -> None:
    problem = _problem(tmp_path, ITEM_FORWARD, "[torch.rand(32, 16), torch.rand(16, 8)]", "[8]")
    work = count_work(problem)
    assert work.flops == 2 * 32 * 16 * 8 + 2 * 32 * 8 * 8
    assert work.output_bytes == 32 * 8 * 4
    assert work.notes[-1] == "counted on cpu" and "meta" in work.notes[0]


def test_count_work_gives_up_on_large_inputs(tmp_path: Path) -> None:
    problem = _problem(tmp_path, ITEM_FORWARD, "[torch.rand(32, 16), torch.rand(16, 8)]", "[8]")
    work = count_work(problem, cpu_fallback_numel=100)
    assert (work.flops, work.output_bytes, work.input_bytes) == (None, None, (32 * 16 + 16 * 8) * 4)
    assert "no CPU fallback" in work.notes[-1]
    assert speed_of_light(work, H200ISH).bound == "memory"


def test_a_part_of_the_floor_above_a_trusted_time_is_dropped() -> None:
    # Ceilings measured while another process used the GPU read low (and a forward that reads a
    # slice of its input has its work over-counted): the reference's own time shows such a part
    # wrong, and a wrong floor must neither reject a candidate nor flag one.
    contended = H200ISH.model_copy(update={"bf16_tflops": 288, "tf32_tflops": 200, "bandwidth_gbs": 400})
    work = _work(GEMM_4096, inputs=400_000_000, dtype="float16")
    plain = speed_of_light(work, contended)
    assert plain.compute_ms == pytest.approx(0.4772185744)  # / 288e12
    assert plain.memory_ms == pytest.approx(1.0)  # 4e8 B / 4e11 B/s
    shown_wrong = speed_of_light(work, contended, proven_ms=0.3)
    assert (shown_wrong.compute_ms, shown_wrong.memory_ms, shown_wrong.floor_ms) == (None, None, None)
    assert "memory 1.0000 ms and compute 0.4772 ms exceed the reference's own 0.3000 ms" in shown_wrong.note
    partly = speed_of_light(work, contended, proven_ms=0.6)
    assert (partly.memory_ms, partly.compute_ms, partly.bound) == (None, plain.compute_ms, "compute")
    # A trusted time above both parts changes nothing and says nothing.
    slow = speed_of_light(work, contended, proven_ms=5.0)
    assert (slow.compute_ms, slow.memory_ms, slow.note) == (plain.compute_ms, plain.memory_ms, "")
