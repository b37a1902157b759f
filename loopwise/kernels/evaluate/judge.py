"""The judge: one problem, many candidates, one verdict each.

Order of a verdict: static scan -> the reference timed in this process (once per judge, before any
candidate loads) -> load in a fresh sandbox -> correctness trials -> timing, audited against this
process's clock, with timed outputs checked -> the candidate's own launches -> speed-of-light check
-> energy -> CUDA-graph probe. The first rejection ends the evaluation; everything measured so far
stays in the record.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from contextlib import contextmanager
from pathlib import Path

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.device import resolve_device
from loopwise.kernels.evaluate.audits import (audit_timing, capture_probe, check_timed_outputs, own_launches,
                                              speed_of_light)
from loopwise.kernels.evaluate.correctness import Outcome, TrialRunner, WorkDidNotFit, guard_reasons
from loopwise.kernels.evaluate.inputs import nbytes
from loopwise.kernels.evaluate.measure import ReferenceTimes, energy_in, timed, timing_from, versions
from loopwise.kernels.evaluate.out_of_memory import judge_out_of_memory
from loopwise.kernels.evaluate.pool import Sandbox, SandboxFailure, SandboxPool
from loopwise.kernels.evaluate.reference import Reference
from loopwise.kernels.evaluate.result import Evaluation, Status
from loopwise.kernels.evaluate.spent import tag_activity
from loopwise.kernels.evaluate.verdict import static_policy, status_for

log = logging.getLogger(__name__)

REFERENCE_TIMING_SEED = 0
# Device bytes all timing input sets together may take (beyond the two held draws' own).
TIMING_SET_BYTES = 4 << 30


@contextmanager
def phase(ev: Evaluation, name: str):
    """Adds the seconds spent in ``name`` to ``ev.phases`` (where an evaluation's time goes)."""
    t0 = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        tag_activity(exc, name)
        raise
    finally:
        ev.phases[name] = ev.phases.get(name, 0.0) + time.perf_counter() - t0


def _release_device_memory(device: str) -> None:
    """After a failure on the judge's side (often out of memory): give cached blocks back."""
    if device.startswith("cuda"):
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()


class LocalJudge:
    """Evaluates candidates for one problem on one device (implements :class:`~loopwise.kernels.evaluate.Judge`)."""

    def __init__(self, problem, config: EvalConfig | None = None, device: str = "auto",
                 pool: SandboxPool | None = None, log_dir: str | Path | None = None, spares: int = 1) -> None:
        self.problem = problem
        self.cfg = config or EvalConfig()
        self.device = resolve_device(device)
        settings = {"gpu_memory_fraction": self.cfg.gpu_memory_fraction, "host_memory_gb": self.cfg.host_memory_gb}
        self.pool = pool or SandboxPool(self.device, settings, log_dir, spares=spares)
        self._own_pool = pool is None
        self._reference: Reference | None = None
        self._floor = None
        self._ref_timing = None
        self._base: int | None = None
        self.transfer = None  # a DeviceSend once the first sandbox's probe shows CUDA IPC works
        self._transfer_probed = False
        self.device_name = self._device_name()
        self.ref_times = ReferenceTimes(self.pool, self.cfg, self.device_name)
        self._failed_builds: dict = {}  # source -> backends.Build of a compiler error in precompile

    def _device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.device) if self.device.startswith("cuda") else "cpu"

    @property
    def reference(self) -> Reference:
        if self._reference is None:
            from loopwise.kernels.evaluate.guards import pin_fp32_flags

            pin_fp32_flags()
            self._reference = Reference(self.problem.load_module(), self.device, self.problem.source)
            self._reference.reuse = self.cfg.reuse_inputs
            if self.cfg.draw_device == "auto" and self.device.startswith("cuda"):
                self._reference.draw_device = self.device
        return self._reference

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "LocalJudge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    def evaluate(self, source: str, name: str = "<candidate>") -> Evaluation:
        """The verdict on one candidate source. Never raises for anything the candidate does."""
        from loopwise.kernels import backends

        t0 = time.perf_counter()
        ev = Evaluation(status=Status.CORRECT, problem=self.problem.name, candidate=name,
                        candidate_key=self.key(source), backend=backends.detect(source),
                        device=self.device_name, policy=self.cfg.precision, tolerance=self.cfg.tolerance,
                        statistic=self.cfg.statistic, versions=versions())
        outcome = Outcome()
        with phase(ev, "static"):
            rejected = self.cfg.static_check and self._static(source, outcome)
        if rejected:
            return self._finish(ev, outcome, t0)
        failed = self._failed_builds.get(source)
        if failed is not None:  # the batch's parallel build already met the compiler's verdict
            ev.status = Status.COMPILE_ERROR
            outcome.reject("compile_error", f"{failed.message} (in the batch's parallel build; not built again)")
            ev.log = failed.compiler_output
            return self._finish(ev, outcome, t0)
        box = None
        try:
            with phase(ev, "reference"):
                self.reference_timing()
            with phase(ev, "sandbox_wait"):
                box = self.pool.acquire(replace=False)  # replaced after its timed calls
                box.wait_ready(timeout=300.0)
                box = self._probe_transfer(box)
                box.before_request = self._make_room
            self._dynamic(source, box, ev, outcome)
        except SandboxFailure as fail:
            outcome.reject(fail.code, fail.message)
            ev.status = Status(fail.status)
        except Exception as exc:  # noqa: BLE001 - the judge's side failed, not the candidate's code
            log.exception("judge failure on %s", name)
            _release_device_memory(self.device)
            oom = judge_out_of_memory(exc)
            if oom is not None:
                outcome.reject("judge_out_of_memory", oom)
                ev.status = Status.OOM
            else:
                outcome.reject("judge_error", f"the judge itself failed ({type(exc).__name__}: {exc}); "
                               "the candidate was not judged")
                ev.status = Status.CRASH
        finally:
            if box is not None:
                ev.log = box.log_tail()
                box.kill()
            self.pool.replenish()
            if self._reference is not None:
                self._reference.forget_all()
            if self.transfer is not None:
                import torch

                torch.cuda.ipc_collect()  # frees sent copies the (now dead) sandbox let go of
        return self._finish(ev, outcome, t0)

    def evaluate_many(self, items: list[tuple[str, str]]) -> list[Evaluation]:
        """Verdicts on ``[(source, name), ...]`` in that order, judged one after another on this
        judge's device (two timings never share it)."""
        return [self.evaluate(source, name) for source, name in items]

    def native(self, sources: list[str]) -> list[str]:
        """The candidates among ``sources`` built by ``load_inline`` (CUDA, C++, CUTLASS) that the
        static scan lets through."""
        from loopwise.kernels import backends

        return [s for s in sources if backends.detect(s) in ("cuda", "cpp", "cutlass") and self.passes_static(s)]

    def precompile(self, sources: list[str]) -> int:
        """Builds the ``load_inline`` extensions of the native candidates (CUDA, C++, CUTLASS)
        among ``sources`` at once, one CPU core each, into the cache the sandboxes load from: a
        batch of CUTLASS candidates then costs one build's wall time (a minute each on Hopper),
        not one after another. Candidates the static scan rejects are left out. A build that fails
        with a compiler error is not built again: ``evaluate`` reports that error (the compiler's
        output as the log); one that timed out or lost its worker is built by its sandbox. Returns
        how many were built (none for fewer than two)."""
        from loopwise.kernels import backends

        native = self.native(sources)
        if len(native) < 2:
            return 0
        results = backends.precompile(native, self._extensions_dir(), backends.device_arch(self.device),
                                      timeout_s=self.cfg.compile_timeout_s)
        for source, build in zip(native, results):
            if not build.ok and build.compiler_output:
                self._failed_builds[source] = build
        return len(native)

    def key(self, source: str) -> str:
        h = hashlib.sha256(source.encode())
        h.update(self.problem.sha256.encode())
        h.update(self.cfg.model_dump_json().encode())
        h.update(self.device_name.encode())
        return h.hexdigest()

    def passes_static(self, source: str) -> bool:
        """True when the static scan rejects nothing (or is switched off)."""
        return not self.cfg.static_check or not self._static(source, Outcome())

    def _static(self, source: str, outcome: Outcome) -> bool:
        from loopwise.kernels.check import scan

        for reason in scan(source, policy=static_policy(self.problem, self.cfg.precision)):
            outcome.reasons.append(reason)
        return outcome.rejected

    def _finish(self, ev: Evaluation, outcome: Outcome, t0: float) -> Evaluation:
        ev.reasons = list(outcome.reasons)
        ev.trials = ev.trials or list(outcome.trials)
        status = status_for(ev.reasons)
        if ev.status in (Status.TIMEOUT, Status.CRASH, Status.OOM) and status is not Status.EXPLOIT:
            status = ev.status
        elif ev.status is Status.COMPILE_ERROR and status is not Status.EXPLOIT:
            status = Status.COMPILE_ERROR
        ev.status = status
        if status is not Status.CORRECT:
            ev.speedup = None
        ev.eval_s = time.perf_counter() - t0
        return ev

    def _dynamic(self, source: str, box: Sandbox, ev: Evaluation, outcome: Outcome) -> None:
        from loopwise.kernels.backends import device_arch

        t_load = time.perf_counter()
        try:
            with phase(ev, "load"):
                loaded = box.request("load", {"kind": "candidate", "problem_source": self.problem.source,
                                          "candidate_source": source, "extensions_dir": self._extensions_dir(),
                                          "backend_hints": {"arch": device_arch(self.device)}},
                                     self.cfg.compile_timeout_s)
        except SandboxFailure as fail:
            if fail.status == "timeout":
                from loopwise.kernels.backends import clear_stale_locks

                box.kill()
                clear_stale_locks(self._extensions_dir(), box.started_wall)
            if fail.status == "crash" and fail.code == "runtime_error":
                fail = SandboxFailure("compile_error", "compile_error", fail.message)
            ev.status = Status(fail.status)
            outcome.reject(fail.code, fail.message)
            return
        ev.compile_s = time.perf_counter() - t_load
        guard_reasons(loaded, outcome, self.cfg.precision)
        if outcome.rejected:
            return
        base = self._base_seed()
        from loopwise.kernels.evaluate.spent import for_device

        self.reference.spent = for_device(self.device)
        with phase(ev, "correctness"):
            runner = self._trials(box, base, outcome)
        ev.phases.update(self.reference.spent.as_phases("correctness"))
        ev.trials = list(outcome.trials)
        if outcome.rejected:
            return
        self._performance(box, ev, outcome, base, runner)

    def _trials(self, box: Sandbox, base: int, outcome: Outcome) -> TrialRunner:
        """The correctness trials, into ``outcome``; made again from the start on the host where
        working on the device ran out of its memory (in the judge or in the sandbox): each trial's
        work, and what outlives a trial too where the judge held that on the device. What the
        failed attempt found is dropped."""
        reasons, trials = list(outcome.reasons), list(outcome.trials)
        while True:
            runner = TrialRunner(self.reference, box, self.cfg, base)
            runner.outcome, runner.transfer = outcome, self.transfer
            try:
                runner.run()
                return runner
            except WorkDidNotFit as exc:
                outcome.reasons[:], outcome.trials[:] = reasons, trials
                what = "tensors the judge holds" if self.reference.to_host() else "trials' work"
                outcome.note("judge_memory", f"the {what} did not fit on the device beside the sandbox ({exc}); "
                             "the trials were made again on the host", severity="info")

    def _base_seed(self) -> int:
        """The first trial's seed: the configured one; else, with reuse_inputs, one secret seed per
        judge (every candidate meets the same draws, kept with their reference outputs); else a
        fresh secret seed per evaluation."""
        if self.cfg.seed is not None:
            return self.cfg.seed
        if not self.cfg.reuse_inputs:
            return secrets.randbits(30)
        if self._base is None:
            self._base = secrets.randbits(30)
        return self._base

    def _probe_transfer(self, box: Sandbox) -> Sandbox:
        """Once per judge, on a sandbox that has run no candidate code: do CUDA tensors cross the pipe
        intact? Then inputs and outputs stay on the device (no host copies); otherwise host memory.
        Returns a usable sandbox: a fresh one when the probe took this one down."""
        if self._transfer_probed or not self.device.startswith("cuda"):
            return box
        self._transfer_probed = True
        import torch

        from loopwise.kernels.evaluate.inputs import DeviceSend

        probe = torch.arange(1, 1025, dtype=torch.float32, device=self.device)
        send, ok = None, False
        try:
            send = DeviceSend(self.device)
            reply = box.request("probe_transfer", {"t": send(probe)}, self.cfg.run_timeout_s)
            back = reply["back"].to(self.device, copy=True)
            ok = reply["sum"] == float(probe.double().sum()) and bool(torch.equal(back, probe * 2))
        except SandboxFailure as fail:
            log.info("device tensors do not cross to the sandbox (%s): host memory it is", fail.message)
            box.kill()
            box = self.pool.acquire()
            box.wait_ready(timeout=300.0)
        except Exception as exc:  # noqa: BLE001 - any other failure also means: use host memory
            log.info("device tensors do not cross to the sandbox (%s): host memory it is", exc)
        self.transfer = send if ok else None
        return box

    def _make_room(self) -> None:
        """Before each sandbox request, where the problem's tensors are large
        (:meth:`Reference.crowded`): the judge's cached device memory, and the segments of the
        copies it sent the sandbox before, go back to the driver, so the sandbox on the same GPU
        can have them."""
        if self.transfer is not None and self.reference.crowded():
            self.transfer.release()
        self.reference.make_room()

    def _extensions_dir(self) -> str:
        from loopwise.kernels.evaluate.measure import cache_dir

        path = cache_dir() / "extensions"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _timing_seeds(self, base: int) -> list[int]:
        """Seeds of the input sets the timed calls rotate through (refilled into the same buffers):
        the first two trials' draws, still held, and with ``fresh_inputs`` up to four more."""
        seeds = [base, base + 1]
        if self.cfg.fresh_inputs:
            # Every set is resident on the device while timing: large inputs get fewer fresh sets
            # (the two held draws still rotate, which is what defeats a pointer cache).
            extra = min(4, max(0, TIMING_SET_BYTES // max(nbytes(self.reference.draw(base)), 1) - 2))
            seeds += [base + 600 + k for k in range(extra)]
        return seeds

    def reference_timing(self):
        """The eager reference, timed in this process before any candidate code is loaded (so no
        candidate's process can be running beside it), once per judge."""
        if self._ref_timing is None:
            self.pool.wait_spares()  # an idle, candidate-free sandbox is all that may run beside it
            args = self.reference.draw(REFERENCE_TIMING_SEED)
            self._ref_timing = self.ref_times.get(self.problem.sha256, self.problem.source, "eager", args, None,
                                                  model=self.reference.model)
            self.reference.drop(REFERENCE_TIMING_SEED)
            self._floor_for()  # the device's ceilings, if not cached, measured now: nothing runs beside
        return self._ref_timing

    def reference_facts(self, compile: bool = False) -> dict:
        """The device's ceilings, the reference's eager (and, on a GPU with ``compile``,
        torch.compile) time and its speed-of-light floor; None with a note where not measured."""
        from loopwise.kernels.evaluate.reference_facts import local_facts

        return local_facts(self, compile, REFERENCE_TIMING_SEED)

    def _performance(self, box: Sandbox, ev: Evaluation, outcome: Outcome, base: int,
                     runner: TrialRunner) -> None:
        import random

        seeds = self._timing_seeds(base)
        sets = [self.reference.draw(s) for s in seeds]
        keep = sorted(random.Random(base).sample(range(self.cfg.perf_trials), min(3, self.cfg.perf_trials)))
        with phase(ev, "spare_wait"):
            self.pool.wait_spares()  # no spare may be starting CUDA beside the timed calls
        with phase(ev, "timing"):
            reply, wall = timed(box, sets, self.cfg, keep, self.transfer)
        self.pool.replenish()  # the next candidate's sandbox starts while this one's checks finish
        guard_reasons(reply, outcome, self.cfg.precision)
        ev.timing = timing_from(reply, self.cfg.clock)
        audit_timing(reply, wall, ev, outcome, self.device)
        if not outcome.rejected:
            known = {k: runner.reference_outputs(base + k) for k in range(2)}
            check_timed_outputs(self.reference, self.cfg, reply, seeds, outcome, known)
        if not outcome.rejected and self.cfg.require_custom_kernel:
            with phase(ev, "launches"):
                own_launches(box, sets[0], outcome, self.cfg, self.transfer, sorted(runner.written_inputs),
                             make_room=self.reference.crowded())
        if outcome.rejected:
            return
        ref = self.reference_timing()
        ev.reference_timing = ref.timing
        ev.reference_energy_j_per_call = ref.energy_j
        if ref.timing is not None:
            stat = self.cfg.statistic
            ev.speedup = ref.timing.pick(stat) / max(ev.timing.pick(stat), 1e-9)
        with phase(ev, "floor"):
            speed_of_light(ev, outcome, self._floor_for(), self.cfg, self.device)
        if not outcome.rejected and self.cfg.energy and self.device.startswith("cuda"):
            with phase(ev, "energy"):
                ev.energy_j_per_call = energy_in(box, self.cfg)
        if not outcome.rejected and self.cfg.capture_probe and self.device.startswith("cuda"):
            with phase(ev, "capture"):
                capture_probe(box, outcome, self.cfg)

    def _floor_for(self):
        if self._floor is None:
            try:
                from loopwise.kernels.roofline.ceilings import load_or_measure
                from loopwise.kernels.roofline.floor import count_work, speed_of_light

                work = count_work(self.problem)
                # A part of the floor above the reference's own time (ceilings that read low) is
                # no floor: speed_of_light drops it. The reference is not timed for this.
                ref = self._ref_timing.timing if self._ref_timing is not None else None
                proven = ref.pick(self.cfg.statistic) if ref is not None else None
                self._floor = speed_of_light(work, load_or_measure(self.device), self.cfg.precision, proven)
            except Exception as exc:  # noqa: BLE001 - the floor is advisory when it cannot be computed
                log.info("no speed-of-light floor for %s: %s", self.problem.name, exc)
                self._floor = False
        return self._floor or None
