"""Reference variants of a problem side by side: eager, torch.compile, max-autotune, optionally
eager with TF32 allowed, and the speed-of-light floor; each variant timed in its own sandbox
exactly like a candidate. A compiled variant's output is judged against the reference's by the
judge's rule (``correct``): where it fails, it is no bar a candidate must clear.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from loopwise.config import Config
from loopwise.kernels.evaluate.measure import ReferenceTimes, VariantResult
from loopwise.kernels.evaluate.pool import SandboxPool


@dataclass
class BaselineRow:
    problem: str
    device: str
    eager: VariantResult
    compile: VariantResult | None
    max_autotune: VariantResult | None
    floor_ms: float | None
    floor_bound: str | None
    floor_note: str = ""
    eager_tf32: VariantResult | None = None

    @property
    def timing_meaningful(self) -> bool:
        """Whether its times say anything about speed: not when timed on the CPU."""
        from loopwise.kernels.device import timing_meaningful

        return timing_meaningful(self.device)

    def speedup(self, variant: VariantResult | None, statistic: str = "median") -> float | None:
        if variant is None or variant.timing is None or self.eager.timing is None:
            return None
        return self.eager.timing.pick(statistic) / max(variant.timing.pick(statistic), 1e-9)

    def to_json_dict(self, statistic: str = "median") -> dict:
        def one(v: VariantResult | None) -> dict | None:
            if v is None:
                return None
            return {"status": v.status, "message": v.message, "load_s": v.load_s, "energy_j_per_call": v.energy_j,
                    "contended": v.contended, "correct": v.correct, "correct_message": v.correct_message,
                    "timing": v.timing.model_dump() if v.timing else None,
                    "speedup_vs_eager": self.speedup(v, statistic)}

        return {"problem": self.problem, "device": self.device, "eager": one(self.eager),
                "compile": one(self.compile), "max_autotune": one(self.max_autotune),
                "eager_tf32": one(self.eager_tf32),
                "floor_ms": self.floor_ms, "floor_bound": self.floor_bound, "floor_note": self.floor_note,
                "timing_meaningful": self.timing_meaningful}


def _floor(problem, device: str, policy: str, proven_ms: float | None = None) -> tuple[float | None, str | None, str]:
    try:
        from loopwise.kernels.roofline.ceilings import load_or_measure
        from loopwise.kernels.roofline.floor import count_work, speed_of_light

        floor = speed_of_light(count_work(problem), load_or_measure(device), policy, proven_ms)
        return floor.floor_ms, floor.bound, floor.note
    except Exception as exc:  # noqa: BLE001 - reported in the row, never fatal
        return None, None, f"{type(exc).__name__}: {exc}"


def judge_outputs(reference, cfg, args: list, outputs: list, seed: int) -> tuple[bool, str]:
    """Whether ``outputs`` (a compiled variant's, for ``args``, the draw of ``seed``) pass the judge's
    rule against ``reference``'s (a :class:`Reference` and its outputs for ``args``: allclose, then
    the float64 bound the policy allows), and the judge's message where they do not."""
    import torch

    from loopwise.kernels.evaluate.correctness import compare_outputs

    ref, ref_out = reference
    cand = [o.to(ref.work) if isinstance(o, torch.Tensor) else o for o in outputs]
    verdict, _ = compare_outputs(ref, cfg, ref_out, cand, seed, args=args)
    return verdict.passed, "" if verdict.passed else verdict.message


def _judged(times, problem, device: str, cfg, variants: list, args: list, seed: int) -> list:
    """``variants`` with the judge's verdict on the output of each that brought one back (a compiled
    variant timed now; one read from the cache has its verdict already). The reference is built and
    run on ``args`` once, for the first of them."""
    import torch

    from loopwise.kernels.evaluate.reference import Reference

    reference = None
    judged = []
    for variant in variants:
        if variant is None or variant.outputs is None:
            judged.append(variant)
            continue
        try:
            if reference is None:
                ref = Reference(problem.load_module(), device, problem.source)
                with torch.no_grad():
                    reference = (ref, ref.run(args)[0])
            correct, message = judge_outputs(reference, cfg, args, variant.outputs, seed)
        except Exception as exc:  # noqa: BLE001 - a verdict that cannot be made is no verdict
            judged.append(replace(variant, outputs=None, correct_message=f"not judged: {type(exc).__name__}: {exc}"[:300]))
            continue
        judged.append(times.judged(problem.sha256, variant.kind, correct, message))
    return judged


def run_baseline(problem, config: Config, device: str = "auto", pool: SandboxPool | None = None) -> BaselineRow:
    """Times eager (and the configured compiled variants) of one problem, and its floor."""
    from loopwise.kernels.evaluate.inputs import draw_inputs
    from loopwise.kernels.device import resolve_device

    cfg = config.kernels.eval.model_copy(update={"perf_trials": config.kernels.baseline.perf_trials})
    device = resolve_device(device)
    own = pool is None
    settings = {"gpu_memory_fraction": cfg.gpu_memory_fraction, "host_memory_gb": cfg.host_memory_gb}
    pool = pool or SandboxPool(device, settings, spares=0)
    try:
        import torch

        name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
        times = ReferenceTimes(pool, cfg, name, use_disk=config.kernels.baseline.cache)
        seed = cfg.seed if cfg.seed is not None else 0
        args = draw_inputs(problem.load_module(), seed)
        eager = times.get(problem.sha256, problem.source, "eager", args, None)
        compiled = times.get(problem.sha256, problem.source, "compile", args, None) \
            if config.kernels.baseline.compile else None
        tuned = times.get(problem.sha256, problem.source, "max-autotune", args, None) \
            if config.kernels.baseline.max_autotune else None
        tf32 = times.get(problem.sha256, problem.source, "eager-tf32", args, None) \
            if config.kernels.baseline.tf32 else None
        compiled, tuned = _judged(times, problem, device, cfg, [compiled, tuned], args, seed)
        proven = eager.timing.pick(cfg.statistic) if eager.timing is not None else None
        floor_ms, bound, note = _floor(problem, device, cfg.precision, proven)
        return BaselineRow(problem.name, name, eager, compiled, tuned, floor_ms, bound, note, eager_tf32=tf32)
    finally:
        if own:
            pool.close()
