"""The caller's tensor inputs after a call, judged like outputs: a caller reads them afterwards.

Each must hold what the reference leaves in it, its original where the reference writes nothing,
by the rule its trial applies to outputs: in the problem's own trials allclose, then the float64
bound for an input the reference writes (where it writes nothing the bound adds nothing: the
reference's own error there is nil); in the stress trials the stress rule against float64. Which
inputs changed is decided in the sandbox (:func:`inputs.changed`: bits, dtype, shape or device,
strides alone being no change); whether a change matters, by those rules. A change the reference
does not make, outside them, is an exploit (``input_mutation``); a value the reference writes
missed is a wrong output (``input_write``).
"""

from __future__ import annotations

from loopwise.kernels.evaluate.compare import (WRONG_NOT_IMPRECISE, Verdict, compare_allclose, compare_stress,
                                               same_function)
from loopwise.kernels.evaluate.reference import upcast


def as_input(v: Verdict, index: int) -> Verdict:
    """A verdict on one input's value (compared as output 0), naming it by its argument index."""
    message = v.message.replace("output 0", f"input {index}")
    evidence = {**v.evidence, "where": f"input {index}"} if v.evidence else v.evidence
    return Verdict(v.passed, v.code, message, v.max_abs_err, v.max_rel_err, v.norm_err, evidence)


class CallerInputs:
    """The input checks of :class:`correctness.TrialRunner` (its reference, config, outcome and
    helpers are theirs)."""

    def _input_values(self, args: list, ref_written: dict, reply: dict) -> list[tuple]:
        """(argument index, what the reference leaves in it, what the candidate leaves in it, whether
        the candidate changed it) for every tensor input either of them changed; the untouched
        original stands for the one that did not change it, None for an input the candidate moved to
        another device. ``reply``'s tensors are received already (``TrialRunner._receive``)."""
        cand_written = dict(zip(reply["mutated"], reply.get("mutated_values") or []))
        moved = set(reply.get("moved") or [])
        hold = self.ref.hold
        found = []
        for i in sorted(set(ref_written) | set(cand_written)):
            r = ref_written[i] if i in ref_written else args[i].to(hold)  # read only: no copy needed
            c = cand_written[i] if i in cand_written else args[i].to(hold)
            found.append((i, r, c if i not in moved else None, i in cand_written))
        return found

    def _inputs_as_reference(self, inputs: list, args: list, ref_out: list, ref_written: dict, seed: int) -> bool:
        """Whether the candidate leaves every tensor input as the reference leaves it, under the
        outputs' rule (allclose, then the float64 bound of :func:`compare_outputs`): a caller reads
        its inputs after the call like outputs. Where the reference writes nothing the original is
        the value to keep, and the bound adds nothing (the reference's own error there is nil)."""
        for i, r, c, wrote in inputs:
            if i in ref_written and c is not None:
                def float64(i=i, r=r):
                    return self._float64_written(seed, args, ref_out, i, r)

                with self.spent("compare"):
                    v = self._compare([r], [c], seed, args, float64, index=i)
            else:
                with self.spent("compare"):
                    v = self._allclose_input(i, r, c)
            if not v.passed:
                self._reject_input(i, ref_written, wrote, f"(seed {seed})", v)
                return False
        return True

    def _allclose_input(self, i: int, r, c) -> Verdict:
        """Input ``i``'s value ``c`` against ``r`` by allclose (exactly, for integers); None for
        ``c`` is a move to another device."""
        if c is None:
            return Verdict(False, "input_moved", f"input {i} was moved to another device")
        return as_input(compare_allclose([r], [c], self.cfg.atol, self.cfg.rtol), i)

    def _reject_input(self, i: int, ref_written: dict, wrote: bool, where: str, v: Verdict) -> None:
        if i not in ref_written:
            self.outcome.reject("input_mutation", f"the candidate overwrote input {i}, which the reference does not "
                                f"write {where}: {v.message}", **v.evidence)
        elif not wrote:
            self.outcome.reject("input_write", f"the reference writes input {i} in place; the candidate leaves it "
                                f"as it was {where}: {v.message}", **v.evidence)
        else:
            self.outcome.reject("input_write", f"input {i}, written in place, holds other values than the reference "
                                f"leaves {where}: {v.message}", **v.evidence)

    def _float64_written(self, seed: int, args: list, ref_out: list, i: int, r) -> list | None:
        """The float64 value of input ``i`` after the float64 run of the draw of ``seed`` (its
        original where that run left it), None where that run is not used or computes another
        value than the reference leaves there."""
        written64 = self.ref.float64_written(seed, args, ref_out)
        if written64 is None:
            return None
        r64 = self._original64(written64, args, i)
        return [r64] if same_function([r], [r64]) else None

    def _original64(self, written64: dict, args: list, i: int):
        """What a float64 run left in input ``i`` (``written64``), its original upcast where it
        left it as it was."""
        r64 = written64.get(i)
        return upcast(args[i].to(self.ref.hold)) if r64 is None else r64

    def _input_against_float64(self, i: int, r, r64, c, ref_written: dict, wrote: bool, where: str) -> bool:
        """Input ``i``'s value ``c`` by the stress rule against its float64 value ``r64`` (``r``
        the fp32 reference's), rejected as :meth:`_input_stress_failure` says where it fails."""
        with self.spent("compare"):
            v = as_input(compare_stress([r], [r64], [c], self.cfg.stress_error_ratio, self.cfg.stress_error_floor), i)
        if not v.passed:
            self._input_stress_failure(i, ref_written, wrote, where, v)
        return v.passed

    def _stress_inputs(self, data, reply: dict, seed: int, dist: str) -> bool:
        """The inputs of a stress trial, as its outputs are judged: those the reference writes by
        the stress rule (against float64, relative to the fp32 reference's own error), the others
        held to their originals as in the problem's own trials."""
        where = f"(stress trial {dist}, seed {seed})"
        for i, r, c, wrote in self._input_values(data.args, data.written32, reply):
            if i in data.written32 and c is not None and r.is_floating_point():
                if not self._input_against_float64(i, r, self._original64(data.written64, data.args, i), c,
                                                   data.written32, wrote, where):
                    return False
                continue
            with self.spent("compare"):
                v = self._allclose_input(i, r, c)
            if not v.passed:
                self._reject_input(i, data.written32, wrote, where, v)
                return False
        return True

    def _input_stress_failure(self, i: int, ref_written: dict, wrote: bool, where: str, v: Verdict) -> None:
        """An input the reference writes, off float64 under the stress rule: wrong where the error
        is too large for a precision path, else a precision downgrade as for outputs."""
        if v.code != "stress_error" or (v.norm_err or 0.0) > WRONG_NOT_IMPRECISE:
            self._reject_input(i, ref_written, wrote, where, v)
        elif self.cfg.precision == "fp32":
            self.outcome.reject("precision_downgrade", "reduced-precision arithmetic under the fp32 policy: "
                                + v.message, **v.evidence)
        else:
            self.outcome.note("precision_downgrade", v.message, severity="info", **v.evidence)
