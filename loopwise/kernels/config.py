"""Typed settings of the kernel engine (pure pydantic: importing this is cheap)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TOLERANCES: dict[str, float] = {"strict": 1e-4, "legacy": 1e-2}


class EvalConfig(BaseModel):
    """How the judge evaluates a candidate.

    Attributes:
        tolerance: ``strict`` (atol = rtol = 1e-4 for fp32) or ``legacy`` (1e-2, KernelBench v0/v0.1).
        precision: ``fp32`` forbids reduced-precision math (TF32 / fp16 / bf16) unless an
            fp32-accurate emulation such as tf32x3; ``relaxed`` allows anything within tolerance.
        correct_trials: trials on the problem's own input distribution, each with a fresh seed.
        stress_trials: trials on mixed-sign inputs judged against a float64 reference.
        half_outputs: how fp16 / bf16 outputs outside allclose of the half-precision reference are
            judged: ``float64_bound`` passes them when they are nearer float64 than
            ``half_error_factor`` times the reference's own largest error, or, where the reference
            is more than 5% normwise off float64 (a bf16 running sum that stalls), when every
            element is within the half tolerance of float64 relative to itself plus the output's
            mean magnitude; ``allclose`` fails them.
        fp32_outputs: how fp32 outputs outside allclose of the fp32 reference are judged:
            ``float64_bound`` passes them when every element is within the tolerance of float64 plus
            ``fp32_error_factor`` times the reference's own largest error and their normwise error
            is at most ``fp32_error_factor`` times the reference's; ``allclose`` fails them.
        perf_trials: timed calls (after warm-up), each after an L2 flush.
        clock: the time a speedup is computed from (candidate and references alike):
            ``kernelbench`` (KernelBench's protocol: events around the call, queued right after
            the flush, so a launch longer than the flush is partly counted), ``gpu`` (the call
            fully queued behind a GPU sleep: the GPU's time alone) or ``steady`` (per trial the
            larger of the GPU time and the host's launch time: a call's cost when calls are
            issued back to back). All three are reported whichever is chosen.
        reuse_inputs: one judge draws its trial inputs once, from a secret seed of its own, and
            judges every candidate on them, keeping the draws and the reference outputs (within
            memory budgets) instead of redrawing and recomputing them per candidate; off: every
            evaluation draws from fresh seeds.
        draw_device: ``auto`` draws trial inputs on the judge's device (``get_inputs()`` with it as
            the default device: the problem's distribution, fast; values differ from a CPU draw);
            ``cpu`` draws them on the CPU, bit for bit as KernelBench's harness does.
    """

    model_config = ConfigDict(extra="forbid")

    tolerance: Literal["strict", "legacy"] = "strict"
    precision: Literal["fp32", "relaxed"] = "fp32"
    correct_trials: int = Field(5, ge=1, le=1000)
    stress_trials: int = Field(2, ge=0, le=100)
    perf_trials: int = Field(100, ge=1, le=100000)
    warmup: int = Field(3, ge=0, le=1000)
    clock: Literal["kernelbench", "gpu", "steady"] = "kernelbench"
    fresh_inputs: bool = False
    reuse_inputs: bool = True
    draw_device: Literal["auto", "cpu"] = "auto"
    statistic: Literal["median", "mean"] = "median"
    seed: int | None = None
    compile_timeout_s: float = Field(600.0, gt=0)
    run_timeout_s: float = Field(180.0, gt=0)
    gpu_memory_fraction: float = Field(0.75, gt=0, le=1.0)
    # None: derived from the machine (pool.host_memory_limit_gb), so that it is below its memory.
    host_memory_gb: float | None = Field(None, gt=0)
    energy: bool = True
    energy_min_s: float = Field(0.2, ge=0.05)
    static_check: bool = True
    # A candidate must launch kernels of its own (Triton, a compiled extension); turn off to judge
    # PyTorch-level rewrites of a model.
    require_custom_kernel: bool = True
    # GPU only: replay forward as a CUDA graph with poisoned outputs (catches side-stream work).
    capture_probe: bool = True
    excessive_speedup: float = Field(10.0, gt=1)
    # A candidate's error on stress inputs may be at most this multiple of the fp32 reference's
    # own error against float64 (TF32 is ~260x, fp16 more; tf32x3 is ~0.2x).
    stress_error_ratio: float = Field(20.0, gt=1)
    stress_error_floor: float = Field(2e-6, gt=0)
    # fp16 / bf16 outputs that fail allclose against the half-precision reference (itself an
    # approximation: its own accumulation order and roundings) pass when their largest error
    # against float64 is at most half_error_factor times the reference's (FlashAttention's test
    # rule); "allclose" keeps KernelBench's rule alone.
    half_outputs: Literal["allclose", "float64_bound"] = "float64_bound"
    half_error_factor: float = Field(2.0, ge=1.0)
    # fp32 outputs that fail allclose against the fp32 reference (whose summation order is one of
    # many correct ones: on long zero-mean reductions two such orders differ by more than 1e-4)
    # pass when they are within fp32_error_factor of the reference's own error against float64.
    # 8 admits a sequential loop over K ~ 24K against a blocked GEMM (3x at K = 4095, growing as
    # sqrt(K)); bf16x3 is 20-80x and TF32 several hundred.
    fp32_outputs: Literal["allclose", "float64_bound"] = "float64_bound"
    fp32_error_factor: float = Field(8.0, ge=1.0)

    @property
    def atol(self) -> float:
        return TOLERANCES[self.tolerance]

    @property
    def rtol(self) -> float:
        return TOLERANCES[self.tolerance]


class BaselineConfig(BaseModel):
    """Which reference variants ``kernels baseline`` times."""

    model_config = ConfigDict(extra="forbid")

    compile: bool = True
    max_autotune: bool = False
    tf32: bool = False  # also eager with TF32 allowed (the relaxed track's yardstick; not fp32 math)
    perf_trials: int = Field(100, ge=1)
    cache: bool = True


class KernelsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    eval: EvalConfig = Field(default_factory=EvalConfig)
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)
    kernelbench: str | None = None
    device: Literal["auto", "cuda", "cpu"] = "auto"
