"""What the judge holds while it judges: within a few trials' tensors, however many trials it makes.

A problem whose tensors take several GiB leaves room for only a dozen of them on the GPU, beside the
sandbox's own; a judge that keeps each trial's inputs (or references, or copies) until the end of
the correctness phase runs out of memory a few trials in. These tests run the correctness trials on
the CPU, with the sandbox's own trial code in this process (an honest candidate: the reference's
model), and count the bytes of every tensor alive whenever the judge asks the sandbox for a trial.
"""

from __future__ import annotations

import gc
import types

import pytest
import torch

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate import guards
from loopwise.kernels.evaluate.correctness import TrialRunner
from loopwise.kernels.evaluate.reference import Reference
from loopwise.kernels.evaluate.sandbox import Session

ROWS, COLS = 128, 1024  # one input, and one output, of 512 KiB: far above anything else alive

SOURCE = f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn({ROWS}, {COLS})]


def get_init_inputs():
    return []
'''

UNIT = ROWS * COLS * 4  # bytes of one trial's input (and of its output)


def live_bytes() -> int:
    """Bytes of every tensor storage alive in this process (each storage once, views included)."""
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type != "meta":
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
    return sum(storages.values())


class InProcessSandbox:
    """The sandbox's own trial code, in this process, with the reference's model as the candidate;
    ``seen`` gets the bytes alive in the judge at each request (on a GPU: the device's allocated)."""

    def __init__(self, ref: Reference, scratch: str) -> None:
        self.session = Session(ref.device, {"scratch": scratch})
        self.session.model = ref.model
        self.session.flags_before = guards.precision_flags()
        self.seen: list[int] = []

    def request(self, op: str, payload: dict, timeout: float) -> dict:
        gc.collect()
        self.seen.append(torch.cuda.memory_allocated() if self.session.device.startswith("cuda") else live_bytes())
        return getattr(self.session, op)(payload)


def _module() -> types.ModuleType:
    module = types.ModuleType("scaled_shift")
    exec(compile(SOURCE, "scaled_shift", "exec"), module.__dict__)
    return module


def _peak_over_trials(tmp_path, correct_trials: int, stress_trials: int) -> tuple[float, list]:
    """The most the judge held, in trial tensors beyond what was alive before, at any of its
    sandbox requests; and the trials' records."""
    ref = Reference(_module(), "cpu", SOURCE)
    cfg = EvalConfig(correct_trials=correct_trials, stress_trials=stress_trials, seed=3)
    box = InProcessSandbox(ref, str(tmp_path))
    gc.collect()
    before = live_bytes()
    outcome = TrialRunner(ref, box, cfg, base_seed=3).run()
    assert not outcome.rejected, outcome.reasons
    assert len(box.seen) == correct_trials + stress_trials
    return (max(box.seen) - before) / UNIT, outcome.trials


def test_what_the_judge_holds_does_not_grow_with_the_number_of_trials(tmp_path):
    """Three trials and two stress trials, then twelve of each: the judge holds, at its busiest
    request, no more trial tensors for twelve than for three. Draws the later trials and the timing
    need are kept; a trial's own draw, references and copies go when it ends."""
    few, few_trials = _peak_over_trials(tmp_path, 3, 2)
    many, many_trials = _peak_over_trials(tmp_path, 12, 12)
    assert len(many_trials) == 24 and all(t.passed for t in many_trials)
    assert few <= 12, few  # inputs, reference and candidate outputs, float64 references of a trial or two
    assert many <= few + 0.5, (few, many)


def test_the_reference_run_holds_one_copy_of_the_inputs_beside_the_draw(monkeypatch):
    """The reference is called on a private copy of the draw; the draw itself is what the copy is
    compared with afterwards (which inputs the reference wrote), not a second copy made for that."""
    ref = Reference(_module(), "cpu", SOURCE)
    args = ref.draw(0)
    seen = []
    forward = ref.model.forward

    def counted(x):
        gc.collect()
        seen.append(live_bytes())
        return forward(x)

    monkeypatch.setattr(ref.model, "forward", counted)
    gc.collect()
    before = live_bytes()
    (out,), written = ref.run(args)
    assert written == {} and torch.equal(out, args[0] * 2.0 + 1.0)
    assert (seen[0] - before) / UNIT == pytest.approx(1.0, abs=0.25), (seen[0] - before) / UNIT


@pytest.mark.gpu
def test_on_a_gpu_the_trials_of_a_problem_too_large_for_it_leave_nothing_there_between_them(tmp_path, monkeypatch):
    """A problem whose dozen copies would not fit the device (here made so): the draws the trials
    keep lie on the host, and whenever the judge asks the sandbox for a trial it holds nothing on
    the device (its reference runs, float64 references and comparisons there come and go)."""
    import loopwise.kernels.evaluate.reference as reference_mod

    monkeypatch.setattr(reference_mod, "HOLD_SHARE", 1e-9)
    ref = Reference(_module(), "cuda", SOURCE)
    ref.draw_device = "cuda"
    assert ref.hold == "cpu"
    box = InProcessSandbox(ref, str(tmp_path))
    gc.collect()
    before = torch.cuda.memory_allocated()  # the sandbox's own (its clock's L2-flush buffer), here in-process
    outcome = TrialRunner(ref, box, EvalConfig(correct_trials=5, stress_trials=2, seed=3), base_seed=3).run()
    assert not outcome.rejected, outcome.reasons
    assert all(not t.is_cuda for args in ref._draws.values() for t in args)
    assert max(box.seen) - before < UNIT / 4, [(b - before) / UNIT for b in box.seen]
    # the float64 references were computed on the device (on the host they take minutes a trial)
    # and came back to the host
    assert ref._where64.startswith("cuda")
    assert all(not t.is_cuda for out in ref._float64_kept.values() if out for t in out[0])


class _NoRoomForFloat64(torch.nn.Module):
    """``x * 2 + 1`` that runs out of device memory in float64 off the host (the meta device
    standing in for a GPU whose memory the float64 run does not fit)."""

    def forward(self, x):
        if x.dtype == torch.float64 and x.device.type != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 14.00 GiB")
        return x * 2.0 + 1.0


def test_a_float64_run_with_no_room_on_the_device_runs_where_the_results_are_held():
    ref = Reference(_module(), "cpu", SOURCE)
    ref.model = _NoRoomForFloat64()
    ref._where64 = "meta"
    args = ref.draw(0)
    out64, written = ref.run64(args, written=True)
    assert written == {} and out64[0].dtype == torch.float64 and out64[0].device.type == "cpu"
    assert torch.allclose(out64[0], args[0].double() * 2.0 + 1.0)
    assert ref._where64 == "cpu" and ref._model64_error is None
    assert ref.run64(args)[0].device.type == "cpu"  # and stays there
    assert torch.get_default_dtype() == torch.float32


def test_running_out_of_memory_for_the_float64_inputs_leaves_the_default_dtype_as_it_was(monkeypatch):
    import loopwise.kernels.evaluate.reference as reference_mod

    ref = Reference(_module(), "cpu", SOURCE)
    ref._where64 = "meta"
    args = ref.draw(0)
    real = reference_mod.inp.to_device

    def no_room(values, device):
        if device == "meta":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 14.00 GiB")
        return real(values, device)

    monkeypatch.setattr(reference_mod.inp, "to_device", no_room)
    out64 = ref.run64(args)
    assert torch.get_default_dtype() == torch.float32
    assert out64[0].dtype == torch.float64 and ref._where64 == "cpu"
