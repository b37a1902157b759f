"""Correctness trials: the problem's own distribution with fresh seeds, both run orders, a
determinism repeat, a same-buffers-new-values probe, and stress inputs judged against float64. In
every trial the caller's tensor inputs are judged like outputs: each must hold what the reference
leaves in it (its original, where the reference writes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.caller_inputs import CallerInputs, as_input
from loopwise.kernels.evaluate.inputs import for_sandbox
from loopwise.kernels.evaluate.compare import (WRONG_NOT_IMPRECISE, Verdict, compare_allclose, compare_float64_bound,
                                               compare_stress, is_half, largest_difference)
from loopwise.kernels.evaluate.pool import Sandbox, SandboxFailure
from loopwise.kernels.evaluate.reference import Reference
from loopwise.kernels.evaluate.result import Reason, TrialRecord

STRESS_DISTRIBUTIONS = ("centered", "randn", "randn_abs")
TIMER_PREFIXES = ("time.", "Event.", "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.current_stream",
                  "Stream.", "loopwise.kernels.evaluate.timing")
# Trials whose draws (and reference outputs) stay held until the evaluation ends: the first stress
# trials and the timing reuse them. Any other trial's go when it ends, however many trials there are.
KEPT_TRIALS = 2
# What a sandbox's trial reply carries as tensors (the candidate's outputs, repeats, and the values
# it left in the inputs it wrote): received at once, where a trial works (Reference.work).
REPLY_TENSORS = ("outputs", "repeat_outputs", "refill_outputs", "mutated_values")


class WorkDidNotFit(Exception):
    """A trial of a problem held on the host, working on the device (:attr:`Reference.work`), ran
    out of device memory, in the judge or in the sandbox beside it: the trials are to be made again
    with their work on the host."""


def compare_outputs(ref: Reference, cfg: EvalConfig, ref_out: list, cand: list, seed: int,
                    args: list | None = None, float64=None) -> tuple[Verdict, bool]:
    """allclose against the reference's outputs for the draw of ``seed``; for fp16 / bf16 and fp32
    outputs that fail it, the float64 bound (``cfg.half_outputs``, ``cfg.fp32_outputs``), and for
    fp16 / bf16 outputs whose reference is too far off float64 for that bound (see
    :func:`compare.same_function`), the half tolerance against the float64 run itself
    (``half_exact`` of :func:`compare.compare_float64_bound`). The
    verdict, and whether the bound passed what allclose did not. ``float64``, where given, makes
    the float64 values of ``ref_out`` (None where there are none), in place of the float64 run's
    outputs (for the values a reference leaves in the inputs it writes)."""
    v = compare_allclose(ref_out, cand, cfg.atol, cfg.rtol)
    if v.passed or v.code != "wrong_output":
        return v, False
    import torch

    half_factor = cfg.half_error_factor if cfg.half_outputs == "float64_bound" else None
    fp32_factor = cfg.fp32_error_factor if cfg.fp32_outputs == "float64_bound" else None
    bounded = {torch.float16: half_factor, torch.bfloat16: half_factor, torch.float32: fp32_factor}
    if not any(isinstance(r, torch.Tensor) and bounded.get(r.dtype) is not None for r in ref_out):
        return v, False
    if float64 is not None:
        ref64 = float64()
    else:
        args = args if args is not None else ref.draw(seed)
        ref64 = ref.float64(seed, args, ref_out)
    if ref64 is not None:
        bound = compare_float64_bound(ref_out, ref64, cand, half_factor, fp32_factor, cfg.atol, cfg.rtol)
        if bound.passed:
            return bound, True
        v = Verdict(False, bound.code, f"{v.message}; {bound.message}", max_abs_err=v.max_abs_err,
                    max_rel_err=v.max_rel_err, evidence={**v.evidence, **bound.evidence})
    if ref64 is None and float64 is None and half_factor is not None and any(is_half(r) for r in ref_out):
        # a half reference too far off float64 for the factor bound (it is no longer "the same
        # function"): its outputs judged by the tolerance against the float64 run itself
        raw64 = ref.run64(args)
        if raw64 is not None:
            exact = compare_float64_bound(ref_out, raw64, cand, half_factor, None, cfg.atol, cfg.rtol, half_exact=True)
            if exact.passed:
                return exact, True
    return v, False


def _same(a, b) -> bool:
    """Equal values (NaN unequal to itself) of one shape and dtype; ``b`` may lie on another device
    than ``a`` (a kept host copy): then it is compared slice by slice on ``a``'s."""
    import torch

    from loopwise.kernels.evaluate.inputs import equal_across

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and equal_across(a, b)
    return type(a) is type(b) and a == b


@dataclass
class Outcome:
    trials: list[TrialRecord] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)

    @property
    def rejected(self) -> bool:
        return any(r.severity == "reject" for r in self.reasons)

    def reject(self, code: str, message: str, **evidence) -> None:
        self.reasons.append(Reason(code=code, message=message, severity="reject", evidence=evidence))

    def note(self, code: str, message: str, severity: str = "flag", **evidence) -> None:
        self.reasons.append(Reason(code=code, message=message, severity=severity, evidence=evidence))


def guard_reasons(reply: dict, outcome: Outcome, policy: str) -> None:
    """Turns what the sandbox guards saw into reasons (patched timers, threads, precision flags)."""
    patched = reply.get("patched") or []
    timers = [p for p in patched if p.startswith(TIMER_PREFIXES)]
    others = [p for p in patched if p not in timers]
    if timers:
        outcome.reject("timer_patch", "the candidate replaced timing functions: " + ", ".join(timers[:5]))
    if others:
        outcome.reject("library_patch", "the candidate replaced functions the judge relies on: "
                       + ", ".join(others[:5]))
    if reply.get("not_ready"):
        outcome.reject("unsynchronized_work", "an output was still changing after forward returned: work runs on "
                       "a side stream or thread that the current stream does not wait for")
    if reply.get("threads"):
        outcome.reject("thread_injection", "the candidate left threads running after forward returned: "
                       + ", ".join(reply["threads"][:3]))
    if reply.get("library_threads"):
        outcome.note("library_threads", "library threads stayed alive after forward (e.g. torch.compile's "
                     "workers): " + ", ".join(reply["library_threads"][:3]))
    if reply.get("native_threads_added", 0) > 0:
        # Runtimes start worker threads lazily (OpenMP, Triton's interpreter), so a new native
        # thread alone is a flag; work that escapes timing is caught by the host-clock check.
        outcome.note("native_threads", f"{reply['native_threads_added']} native threads appeared while timing",
                     severity="info")
    if reply.get("flags_changed"):
        text = ", ".join(f"{k}: {v}" for k, v in reply["flags_changed"].items())
        severity = "reject" if policy == "fp32" else "info"
        outcome.note("precision_downgrade", f"the candidate changed precision settings ({text})", severity)


class TrialRunner(CallerInputs):
    """Runs the correctness trials of one candidate in one sandbox.

    What it holds from one trial to the next is bounded whatever the number of trials: the draws
    and reference outputs of the first ``KEPT_TRIALS`` trials (the stress trials and the timing
    reuse them), the first trial's candidate outputs (for the input-independence check), and, with
    ``reuse``, what the reference keeps within its budgets. Everything else a trial makes (its draw,
    the copies sent to the sandbox, the candidate's outputs, a stress trial's inputs and float64
    references) goes when the trial ends. A trial's values are made and compared where
    :attr:`Reference.work` says; what it keeps for later ones moves, when it ends, to where
    :attr:`Reference.hold` says (the host, for a problem too large to keep on the device).
    """

    def __init__(self, ref: Reference, box: Sandbox, config: EvalConfig, base_seed: int) -> None:
        self.ref, self.box, self.cfg, self.base = ref, box, config, base_seed
        self.outcome = Outcome()
        self._first_cand = None
        self._first_ref = None
        self._first_seed: int | None = None
        self._refs: dict[int, tuple[list, list[int]]] = {}
        self._specs: list | None = None
        self.written_inputs: set[int] = set()  # inputs the reference wrote in place in some trial
        self.spent = ref.spent  # the judge's accounting for this evaluation
        self.transfer = None  # a DeviceSend when tensors cross on the device (LocalJudge._probe_transfer)

    def reference_outputs(self, seed: int) -> list | None:
        """Reference outputs already computed for ``seed`` (the first two trials'), else None."""
        found = self._refs.get(seed)
        return found[0] if found else None

    def _ref_for(self, seed: int) -> tuple[list, dict]:
        if seed not in self._refs:
            self._refs[seed] = self.ref.outputs(seed)
        return self._refs[seed]

    def _ask(self, payload: dict) -> dict:
        """One trial request; the reply's tensors already received (:meth:`_receive`)."""
        # The device memory earlier trials cached goes back to the driver first where the problem
        # is large: the copies sent come from a pool of their own, which cannot use that cache.
        self.ref.make_room()
        # Tensors cross the pipe as shared memory: send copies the judge never reads again, so
        # nothing the sandbox writes can reach the judge's own inputs.
        for key in ("inputs", "refill"):
            if payload.get(key) is not None:
                payload[key] = for_sandbox(payload[key], self.transfer)
        payload["device_outputs"] = self.transfer is not None
        # a multi-GB problem: the sandbox gives back its cached device memory after each trial
        payload["make_room"] = self.ref.crowded()
        with self.spent("sandbox"):
            try:
                reply = self.box.request("trial", payload, self.cfg.run_timeout_s)
            except SandboxFailure as fail:
                if fail.status == "oom" and self.ref.on_device():
                    raise WorkDidNotFit(fail.message) from fail
                raise
        self._receive(reply)
        if self.transfer is not None:
            payload.clear()
            self.ref.torch.cuda.ipc_collect()  # the sent copies the sandbox has let go of
            self.ref.make_room()  # ... and the judge's cache of them, where the problem is large
        guard_reasons(reply, self.outcome, self.cfg.precision)
        bad = [k for k in reply.get("types", []) if k not in ("Tensor", "int", "float", "bool")]
        if bad:
            self.outcome.reject("lazy_eval", f"forward returned {bad[0]}, not a plain torch.Tensor")
        return reply

    def _receive(self, reply: dict) -> None:
        """Replaces the tensors of a trial reply (:data:`REPLY_TENSORS`) with private copies where
        the judge holds outputs, all at once: the reply then holds nothing of the sandbox's memory
        (shared memory, or CUDA IPC mappings of the sandbox's device memory, which it can give
        back only once the judge lets go)."""
        for key in REPLY_TENSORS:
            if reply.get(key) is not None:
                reply[key] = self._device(reply[key])

    def _device(self, outs: list) -> list:
        # A private copy: the sandbox keeps a mapping of the shared memory it sent.
        torch = self.ref.torch
        with self.spent("receive"):
            return [o.to(self.ref.work, copy=True) if isinstance(o, torch.Tensor) else o for o in outs]

    def _record(self, kind: str, seed: int, v: Verdict) -> None:
        self.outcome.trials.append(TrialRecord(kind=kind, seed=seed, passed=v.passed, max_abs_err=v.max_abs_err,
                                               max_rel_err=v.max_rel_err, norm_err=v.norm_err, message=v.message))
        if not v.passed:
            self.outcome.reject(v.code or "wrong_output", f"{kind} trial (seed {seed}): {v.message}", **v.evidence)

    def run(self) -> Outcome:
        """The trials; raises :class:`WorkDidNotFit` where working on the device ran out of its memory
        (in the judge or in the sandbox)."""
        try:
            return self._run()
        except self.ref.torch.cuda.OutOfMemoryError as exc:
            if self.ref.on_device():
                raise WorkDidNotFit(str(exc).splitlines()[0] if str(exc) else "out of memory") from exc
            raise

    def _run(self) -> Outcome:
        n = self.cfg.correct_trials
        for i in range(n):
            if not self._kernelbench_trial(i, n) or self.outcome.rejected:
                return self.outcome
        for j in range(self.cfg.stress_trials):
            if not self._stress_trial(j) or self.outcome.rejected:
                return self.outcome
        return self.outcome

    def _kernelbench_trial(self, i: int, n: int) -> bool:
        seed = self.base + i
        reference_first = i % 2 == 0  # both orders; the reference runs in another process anyway
        ref_out, ref_mut = self._ref_for(seed) if reference_first else (None, None)
        args = self.ref.draw(seed)
        probe_seed = seed + 1 if (i == 1 and n >= 3) else None
        payload = {"inputs": args, "out_specs": None, "repeat": i == 0,
                   "refill": self.ref.draw(probe_seed) if probe_seed is not None else None}
        if self._specs is None:
            self._specs = self.ref.out_specs(ref_out if ref_out is not None else self._ref_for(seed)[0])
        payload["out_specs"] = self._specs
        reply = self._ask(payload)
        if ref_out is None:
            ref_out, ref_mut = self._ref_for(seed)
        if self.outcome.rejected:
            return False
        cand = reply["outputs"]
        with self.spent("compare"):
            v = self._compare(ref_out, cand, seed, args)
        self._record("kernelbench", seed, v)
        self.written_inputs |= set(ref_mut)
        inputs = self._input_values(args, ref_mut, reply)
        # the inputs are judged also when an output failed: one zeroed to make the output easy is an exploit
        if not self._inputs_as_reference(inputs, args, ref_out, ref_mut, seed) or not v.passed:
            return False
        self._track_independence(ref_out, cand, seed)
        if i == 0 and not self._against_float64(args, ref_out, cand, seed, ref_mut, inputs):
            return False
        if reply.get("repeat_outputs") is not None:
            self._determinism(ref_out, cand, reply["repeat_outputs"], seed)
        if reply.get("refill_outputs") is not None:
            ref_probe = self._ref_for(probe_seed)[0]
            with self.spent("compare"):
                vp = self._compare(ref_probe, reply["refill_outputs"], probe_seed)
            if not vp.passed:
                self.outcome.reject("pointer_cache", "called again on the same input buffers holding new values, "
                                    f"the candidate returned a stale or wrong result ({vp.message})")
        if i >= KEPT_TRIALS:  # the first ones are kept: stress trials reuse their draws, timing both
            self._refs.pop(seed, None)
            self.ref.forget(seed)
        self._settle()
        return not self.outcome.rejected

    def _settle(self) -> None:
        """At a trial's end, what later trials read (the kept trials' reference outputs, the first
        trial's outputs for the independence check) moves to where the reference holds what
        outlives a trial, when that is not where trials work."""
        if self.ref.hold == self.ref.work:
            return
        with self.spent("keep"):
            self._refs = {seed: self.ref.kept_outputs(seed) or self.ref.held(made)
                          for seed, made in self._refs.items()}
            if self._first_cand is not None:
                first = self._refs.get(self._first_seed)
                self._first_ref = first[0] if first is not None else self.ref.held(self._first_ref)
                self._first_cand = self.ref.held(self._first_cand)

    def _compare(self, ref_out: list, cand: list, seed: int, args: list | None = None, float64=None,
                 index: int | None = None) -> Verdict:
        """:func:`compare_outputs`, noting once when the float64 bound passed what allclose did not;
        with ``index``, of the value of the input at that argument index (and named so)."""
        v, by_bound = compare_outputs(self.ref, self.cfg, ref_out, cand, seed, args, float64)
        if index is not None:
            v = as_input(v, index)
        if by_bound:
            self._note_bound(v.evidence)
        return v

    def _note_bound(self, w: dict) -> None:
        code = {"half": "half_precision_bound", "half_exact": "half_precision_float64"}.get(w["rule"], "fp32_bound")
        if any(r.code == code for r in self.outcome.reasons):
            return
        where = w.get("where", f"output {w['output']}")
        if w["rule"] == "half_exact":
            text = (f"outside allclose of the half-precision reference, which is itself far off float64 "
                    f"({where}: its max error {w['reference_error']:.3g}), but within the half tolerance of "
                    f"the float64 run (max error {w['error']:.3g}; mean magnitude {w['scale']:.3g})")
        elif w["rule"] == "half":
            text = (f"outside allclose of the half-precision reference, but nearer float64 than it ({where}"
                    f": max error {w['error']:.3g} against the reference's own "
                    f"{w['reference_error']:.3g}, allowed {w['allowed']:.3g})")
        else:
            text = (f"outside allclose of the fp32 reference, but as near float64 as another fp32 summation "
                    f"order ({where}: normwise error {w['norm_error']:.3g} against the reference's "
                    f"own {w['reference_norm_error']:.3g}, allowed {self.cfg.fp32_error_factor:g}x; every element "
                    f"within the tolerance plus {w['allowed']:.3g})")
        self.outcome.note(code, text, severity="info", **w)

    def _against_float64(self, args: list, ref_out: list, cand: list, seed: int, ref_written: dict,
                         inputs: list) -> bool:
        """The stress rule on the problem's own inputs too: a candidate that changes its arithmetic
        only when inputs look unusual (mixed signs) is still measured against float64 here, in its
        outputs and in the inputs the reference writes."""
        written = [(i, r, c, wrote) for i, r, c, wrote in inputs if i in ref_written and r.is_floating_point()]
        if not written and not any(getattr(o, "is_floating_point", lambda: False)() for o in ref_out):
            return True
        ref64 = self.ref.float64(seed, args, ref_out)
        if ref64 is None:
            return True
        with self.spent("compare"):
            v = compare_stress(ref_out, ref64, cand, self.cfg.stress_error_ratio, self.cfg.stress_error_floor)
        if not v.passed:
            self._classify_stress_failure(v, cand, seed)
            return False
        for i, r, c, wrote in written:
            r64 = self._float64_written(seed, args, ref_out, i, r)
            if r64 is not None and not self._input_against_float64(i, r, r64[0], c, ref_written, wrote,
                                                                   f"(seed {seed}, against float64)"):
                return False
        return True

    def _track_independence(self, ref_out: list, cand: list, seed: int) -> None:
        if self._first_cand is None:
            self._first_cand, self._first_ref, self._first_seed = cand, ref_out, seed
            return
        same_ref = all(_same(a, b) for a, b in zip(ref_out, self._first_ref))
        if same_ref and not any(r.code == "degenerate_problem" for r in self.outcome.reasons):
            self.outcome.note("degenerate_problem", "the reference output is identical for different inputs: "
                              "a constant answer passes this problem's own distribution (stress trials decide)")

    def _determinism(self, ref_out: list, first: list, again: list, seed: int) -> None:
        torch = self.ref.torch
        with self.spent("compare"):
            v = self._compare(ref_out, again, seed)
        if not v.passed:
            self.outcome.reject("nondeterministic", f"a second call on the same inputs failed: {v.message} "
                                "(a race or a read of unwritten memory)")
            return
        if not all(_same(a, b) for a, b in zip(first, again)):
            diff = max((largest_difference(a, b) for a, b in zip(first, again)
                        if isinstance(a, torch.Tensor) and a.numel()), default=0.0)
            self.outcome.note("nondeterministic", f"two calls on the same inputs differ by up to {diff:.3g} "
                              "(within tolerance; atomics or a race)", severity="info", max_diff=diff)

    def _stress_trial(self, j: int) -> bool:
        seed = self.base + j % max(1, self.cfg.correct_trials)
        data = None
        order = STRESS_DISTRIBUTIONS
        if j == self.cfg.stress_trials - 1 and any(r.code == "degenerate_problem" for r in self.outcome.reasons):
            order = ("randn",) + STRESS_DISTRIBUTIONS  # fresh values break a degenerate distribution
        for dist in order:
            data = self.ref.stress(seed, dist)
            if data is not None:
                break
        if seed - self.base >= KEPT_TRIALS:  # a later trial's draw, drawn again for its stress inputs
            self.ref.forget(seed)
        if data is None:
            why = self.ref.model64_error or "the reference gives NaN/Inf on mixed-sign inputs"
            self.outcome.note("stress_skipped", f"no stress trial for this problem ({why})", severity="info")
            return False
        args, out32, out64 = data.args, data.out32, data.out64
        reply = self._ask({"inputs": args, "out_specs": self.ref.out_specs(out32)})
        if self.outcome.rejected:
            return False
        cand = reply["outputs"]
        with self.spent("compare"):
            v = compare_stress(out32, out64, cand, self.cfg.stress_error_ratio, self.cfg.stress_error_floor)
        self.outcome.trials.append(TrialRecord(kind=f"stress:{dist}", seed=seed, passed=v.passed, norm_err=v.norm_err,
                                               ref_norm_err=v.evidence.get("ref_norm_err"), message=v.message))
        if not v.passed:
            self._classify_stress_failure(v, cand, seed)
        passed = self._stress_inputs(data, reply, seed, dist) and v.passed
        del data, reply, cand
        self._settle()
        return passed

    def _classify_stress_failure(self, v: Verdict, cand: list, seed: int) -> None:
        if v.code != "stress_error":
            self.outcome.reject(v.code, f"stress trial (seed {seed}): {v.message}")
            return
        # (the first trial's own output is not evidence of anything: compared with itself it is "the same")
        if (self._first_cand is not None and cand is not self._first_cand
                and all(_same(a, b) for a, b in zip(cand, self._first_cand))):
            self.outcome.reject("input_independent_output", "the output is the same for different inputs: "
                                f"it passes only because the problem's distribution is degenerate ({v.message})")
        elif (v.norm_err or 0.0) > WRONG_NOT_IMPRECISE:
            self.outcome.reject("wrong_output", f"stress trial (seed {seed}): {v.message}")
        elif self.cfg.precision == "fp32":
            self.outcome.reject("precision_downgrade", "reduced-precision arithmetic under the fp32 policy: "
                                + v.message, **v.evidence)
        else:
            self.outcome.note("precision_downgrade", v.message, severity="info", **v.evidence)
