"""Timing, energy and launched kernels of a model loaded in a sandbox; reference variants
(eager, torch.compile, max-autotune) measured the same way and cached per problem + GPU + versions.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from loopwise.core.files import write_atomic
from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.inputs import clone_args
from loopwise.kernels.evaluate.pool import Sandbox, SandboxFailure, SandboxPool
from loopwise.kernels.evaluate.result import TimingStats

def cache_dir() -> Path:
    from loopwise.core.cache import cache_root

    return cache_root()


def versions() -> dict[str, str]:
    import torch

    out = {"torch": torch.__version__, "cuda": str(torch.version.cuda)}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "none"
    from loopwise import __version__

    out["loopwise"] = __version__
    return out


def timing_from(reply: dict, clock: str = "kernelbench") -> TimingStats:
    """Statistics computed here, in the judge, from the raw per-call samples the sandbox sent,
    under ``clock`` (timing.CLOCKS)."""
    import statistics

    from loopwise.kernels.evaluate import timing

    samples = timing.clock_samples(reply, clock)
    ev, host = timing.stats(samples), timing.stats(reply["host_ms"])
    slowest = max(range(len(samples)), key=samples.__getitem__)
    slowest_host = reply["host_ms"][slowest] if clock == "kernelbench" and slowest < len(reply["host_ms"]) else None
    queued = "gpu_ms" in reply
    return TimingStats(trials=ev["trials"], median_ms=ev["median_ms"], mean_ms=ev["mean_ms"], std_ms=ev["std_ms"],
                       min_ms=ev["min_ms"], max_ms=ev["max_ms"], host_median_ms=host["median_ms"],
                       method=reply["method"], slowest_trial=slowest, slowest_host_ms=slowest_host,
                       clock=clock if queued else "kernelbench",
                       kernelbench_median_ms=statistics.median(reply["event_ms"]),
                       gpu_median_ms=statistics.median(reply["gpu_ms"]) if queued else None,
                       launch_median_ms=statistics.median(reply["launch_ms"]) if queued else None,
                       uncovered_trials=reply.get("uncovered"))


def timed(box: Sandbox, sets: list, cfg: EvalConfig, keep: list[int] | None = None,
          transfer=None) -> tuple[dict, float]:
    """Stages the input sets, then times the calls; returns the reply and the judge's own wall time
    of the timed request (which no code in the sandbox can touch). ``transfer``: a DeviceSend when
    tensors cross on the device (see ``LocalJudge._probe_transfer``), None for host memory."""
    import time as _time

    from loopwise.kernels.evaluate.inputs import for_sandbox

    box.request("stage", {"sets": [for_sandbox(s, transfer) for s in sets]}, cfg.run_timeout_s)
    t0 = _time.perf_counter()
    reply = box.request("time", {"trials": cfg.perf_trials, "warmup": cfg.warmup, "keep": keep or [],
                                 "device_outputs": transfer is not None},
                        cfg.run_timeout_s + cfg.perf_trials * 5.0)
    return reply, _time.perf_counter() - t0


# The sandbox's own numbers are claims, checked against physics and the judge's clock: no call's
# device time can exceed its host time, and the timed calls cannot take longer than the request.
# (A lower bound from the judge's clock is not possible: flushes, refills and the transfer of the
# kept outputs take a share of the request that ranges from a few percent to over 95 percent.
# Patching the timing code itself is caught by the identity guard in the sandbox.)
CLAIM_SLACK_S = 0.05


def audit_claims(reply: dict, wall_s: float) -> list[str]:
    """Contradictions between the sandbox's timing report and physics or the judge's clock."""
    problems = []
    worst = max((e - h for e, h in zip(reply["event_ms"], reply["host_ms"])), default=0.0)
    if worst > 0.05:
        problems.append(f"a call's device time exceeds its host time by {worst:.3f} ms")
    claimed = (sum(reply["host_ms"]) + sum(reply["noop_host_ms"])) / 1e3
    if claimed > wall_s + CLAIM_SLACK_S:
        problems.append(f"the timed calls claim {claimed:.3f} s, more than the {wall_s:.3f} s the request took")
    return problems


def energy_in(box: Sandbox, cfg: EvalConfig) -> float | None:
    """Joules per call on the staged inputs (None where NVML cannot tell)."""
    reply = box.request("energy", {"min_seconds": cfg.energy_min_s}, cfg.run_timeout_s)
    energy = reply.get("energy")
    if not energy:
        return None
    return energy.get("joules_per_call")


# The variants torch.compile makes: their outputs are judged against the reference's (run_baseline).
COMPILED = ("compile", "max-autotune")


@dataclass
class VariantResult:
    kind: str
    timing: TimingStats | None
    energy_j: float | None
    status: str
    message: str = ""
    load_s: float | None = None
    contended: bool = False  # timed while other work kept the CPUs busy (see contention)
    # A compiled variant's output judged against the reference's by the judge's rule (None: not
    # judged), and why it failed; its outputs for that, from the compiling call, until judged.
    correct: bool | None = None
    correct_message: str = ""
    outputs: list | None = field(default=None, repr=False, compare=False)


class ReferenceTimes:
    """Eager (and compiled) reference timings, cached in memory and on disk."""

    def __init__(self, pool: SandboxPool, cfg: EvalConfig, device_name: str, use_disk: bool = True) -> None:
        self.pool, self.cfg, self.device_name = pool, cfg, device_name
        self.use_disk = use_disk
        self._memory: dict[str, VariantResult] = {}

    def _key(self, problem_sha: str, kind: str) -> str:
        v = versions()
        parts = [problem_sha[:16], kind, self.device_name, v["torch"], v["triton"], str(self.cfg.perf_trials),
                 str(self.cfg.warmup), str(self.cfg.fresh_inputs), str(self.cfg.energy), self.cfg.clock]
        return re.sub(r"[^A-Za-z0-9_.+-]", "_", "-".join(parts))

    def _path(self, key: str) -> Path:
        return cache_dir() / "baselines" / f"{key}.json"

    def get(self, problem_sha: str, problem_source: str, kind: str, args: list, fresh: list | None,
            model=None) -> VariantResult:
        """The variant's timing; ``model`` (eager only) times the judge's own reference in-process,
        as KernelBench does, instead of starting a sandbox for trusted code."""
        key = self._key(problem_sha, kind)
        if key in self._memory:
            return self._memory[key]
        path = self._path(key)
        if model is not None:
            # The judge's own measurement stays in memory: a file on disk could have been written
            # by a candidate's sandbox.
            result = measure_in_process(model, self.pool.device, self.cfg, args, fresh)
            self._memory[key] = result
            return result
        data = json.loads(path.read_text()) if self.use_disk and path.is_file() else None
        if data is not None and kind in COMPILED and "correct" not in data:
            data = None  # cached before compiled outputs were judged: timed (and judged) again
        if data is not None:
            timing = TimingStats(**data["timing"]) if data.get("timing") else None
            result = VariantResult(kind, timing, data.get("energy_j"), data["status"], data.get("message", ""),
                                   correct=data.get("correct"), correct_message=data.get("correct_message", ""))
        else:
            result = self._measure(problem_source, kind, args, fresh, path)
        self._memory[key] = result
        return result

    def judged(self, problem_sha: str, kind: str, correct: bool, message: str = "") -> VariantResult:
        """Records the judge's verdict on a variant :meth:`get` returned (its outputs dropped), also in
        its cached file where there is one; returns the variant with it."""
        key = self._key(problem_sha, kind)
        result = replace(self._memory[key], correct=correct, correct_message=message, outputs=None)
        self._memory[key] = result
        path = self._path(key)
        if self.use_disk and path.is_file():
            data = json.loads(path.read_text())
            data.update(correct=correct, correct_message=message)
            write_atomic(path, json.dumps(data))
        return result

    def _measure(self, problem_source: str, kind: str, args: list, fresh: list | None, path: Path) -> VariantResult:
        """Times the variant; the figure is cached only when no other work kept the CPUs busy
        meanwhile (it would stand for this problem in every later run)."""
        from loopwise.kernels.evaluate import contention

        before = contention.sample()
        result = measure_variant(self.pool, problem_source, kind, self.cfg, args, fresh)
        load = contention.worst(before, contention.sample())
        if result.status == "ok" and load.contended:
            return replace(result, contended=True, message="; ".join(filter(None, [result.message, load.note()])))
        if self.use_disk and result.status == "ok":
            payload = {"timing": result.timing.model_dump() if result.timing else None,
                       "energy_j": result.energy_j, "status": result.status, "message": result.message,
                       "load_1min": load.load_1min, "cpus": load.cpus}
            write_atomic(path, json.dumps(payload))
        return result


def measure_variant(pool: SandboxPool, problem_source: str, kind: str, cfg: EvalConfig, args: list,
                    fresh: list | None) -> VariantResult:
    """Times the reference as ``kind`` (eager / compile / max-autotune) in a fresh sandbox."""
    box = pool.acquire()
    try:
        loaded = box.request("load", {"kind": kind, "problem_source": problem_source}, cfg.compile_timeout_s)
        load_s = loaded.get("load_s")
        if kind != "eager":
            # torch.compile compiles on the first call: make that call here, under the compile
            # timeout, so a compile that never ends is a compile timeout and the timed request
            # below times compiled code only.
            from loopwise.kernels.evaluate.inputs import for_sandbox

            # Its output comes back too: the judge holds it against the reference's (run_baseline).
            t0 = time.perf_counter()
            box.request("stage", {"sets": [for_sandbox(args, None)]}, cfg.run_timeout_s)
            first = box.request("time", {"trials": 1, "warmup": 1, "keep": [0] if kind in COMPILED else [],
                                         "device_outputs": False}, cfg.compile_timeout_s)
            outputs = next(iter((first.get("kept") or {}).values()), None)
            load_s = (load_s or 0.0) + time.perf_counter() - t0
        else:
            outputs = None
        pool.wait_spares()  # no spare may be starting CUDA beside the timed calls
        reply, _ = timed(box, [args] + list(fresh or []), cfg)
        energy = energy_in(box, cfg) if cfg.energy and pool.device.startswith("cuda") else None
        return VariantResult(kind, timing_from(reply, cfg.clock), energy, "ok", load_s=load_s, outputs=outputs)
    except SandboxFailure as fail:
        return VariantResult(kind, None, None, fail.status, f"{fail.code}: {fail.message}")
    finally:
        box.kill()


def measure_in_process(model, device: str, cfg: EvalConfig, args: list, fresh: list | None) -> VariantResult:
    """Times a trusted model (the reference) in this process with the sandbox's clock."""
    import time as _time

    import torch

    from loopwise.core import stopping
    from loopwise.kernels.evaluate import timing
    from loopwise.kernels.evaluate.inputs import to_device

    t0 = _time.perf_counter()
    clock = timing.Clock(device)
    # The sandbox's protocol exactly: the input sets rotate through the same buffers, refilled
    # before every timed call, so the reference pays what the candidate pays.
    sets = [to_device(s, device) for s in [args] + list(fresh or [])]
    bufs = clone_args(sets[0])

    def call() -> None:  # under no_grad, set around the loop as in the sandbox
        model(*bufs)

    def before(i: int) -> None:
        stopping.check()  # a thread told to stop stops between calls (a signal reaches the main thread only)
        timing.refill(bufs, sets[i % len(sets)])

    with torch.no_grad():
        reply = timing.measure(clock, call, cfg.perf_trials, cfg.warmup, before)
    energy = None
    if cfg.energy and device.startswith("cuda"):
        from loopwise.kernels.evaluate.energy import measure_energy

        with torch.no_grad():
            result = measure_energy(call, device_index=torch.device(device).index or 0,
                                    min_seconds=cfg.energy_min_s, sync=clock.sync)
        energy = result.joules_per_call if result else None
    return VariantResult("eager", timing_from(reply, cfg.clock), energy, "ok", load_s=_time.perf_counter() - t0)
