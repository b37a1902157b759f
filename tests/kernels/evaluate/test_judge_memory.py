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


def _module(source: str = SOURCE, name: str = "scaled_shift") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
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


@pytest.mark.slow
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
@pytest.mark.parametrize("work_share", [0.6, 1e-9])
def test_on_a_gpu_the_trials_of_a_problem_too_large_for_it_leave_nothing_there_between_them(
        tmp_path, monkeypatch, work_share):
    """A problem whose dozen copies would not fit the device (here made so): the draws and what
    later trials read lie on the host; each trial works on the device (reference and candidate
    outputs, float64 references, stress inputs and comparisons), a few of its tensors at a time,
    and leaves nothing there. Where even one trial's working set would not fit (here made so), the
    judge holds nothing on the device whenever it asks the sandbox for a trial."""
    import loopwise.kernels.evaluate.reference as reference_mod

    monkeypatch.setattr(reference_mod, "HOLD_SHARE", 1e-9)
    monkeypatch.setattr(reference_mod, "WORK_SHARE", work_share)
    ref = Reference(_module(), "cuda", SOURCE)
    ref.draw_device = "cuda"
    assert ref.hold == "cpu"
    assert ref.work == ("cuda" if work_share > 1e-3 else "cpu")
    box = InProcessSandbox(ref, str(tmp_path))
    gc.collect()
    before = torch.cuda.memory_allocated()  # the sandbox's own (its clock's L2-flush buffer), here in-process
    runner = TrialRunner(ref, box, EvalConfig(correct_trials=5, stress_trials=2, seed=3), base_seed=3)
    outcome = runner.run()
    assert not outcome.rejected, outcome.reasons
    assert all(not t.is_cuda for args in ref._draws.values() for t in args)
    assert all(not t.is_cuda for out, _ in runner._refs.values() for t in out) and runner._refs
    assert not runner._first_cand[0].is_cuda and not runner._first_ref[0].is_cuda
    gc.collect()
    assert torch.cuda.memory_allocated() - before < UNIT / 4
    seen = [(b - before) / UNIT for b in box.seen]
    if ref.work == "cuda":  # a stress trial's inputs, fp32 and float64 references and the sent copy
        assert max(seen) <= 6, seen
    else:
        assert max(seen) < 0.25, seen
    # the float64 references were computed on the device (on the host they take minutes a trial)
    # and what is kept of them lies on the host
    assert ref._where64.startswith("cuda")
    assert all(not t.is_cuda for out in ref._float64_kept.values() if out for t in out[0])


def test_a_large_tensors_centered_stress_inputs_are_made_slice_by_slice_as_a_whole_ones(monkeypatch):
    """The centered stress variant of a tensor larger than a slice equals (to float64 rounding of
    its mean) the one made at once, exact zeros and the widened range included."""
    from loopwise.kernels.evaluate import inputs as inp

    g = torch.Generator().manual_seed(1)
    x = torch.randn(37, 53, generator=g) * 3 + 1.5
    x[5, :7] = 0.0
    whole = inp.stress_variant([x], 0, "centered", "cpu")[0]
    monkeypatch.setattr(inp, "SLICE", 100)
    sliced = inp.stress_variant([x], 0, "centered", "cpu")[0]
    assert sliced.dtype == x.dtype and sliced.shape == x.shape
    assert torch.allclose(sliced, whole, rtol=1e-6, atol=1e-6)
    assert bool((sliced[5, :7] == 0).all())
    assert float(sliced.abs().max()) == pytest.approx(4.0 * float(x.abs().max()), rel=1e-6)


def test_an_input_a_float64_run_writes_is_found_slice_by_slice(monkeypatch):
    from loopwise.kernels.evaluate import inputs as inp
    from loopwise.kernels.evaluate.reference import _changed64

    monkeypatch.setattr(inp, "SLICE", 64)
    a = torch.randn(1000)
    a64 = a.double()
    assert not _changed64(a64, a)
    a64[999] += 1e-12
    assert _changed64(a64, a)
    assert _changed64(a.double()[:999], a)  # another shape
    labels = torch.arange(10)
    assert not _changed64(labels.clone(), labels) and _changed64(labels + 1, labels)


def test_what_a_trial_keeps_moves_whole_to_where_the_judge_holds_it():
    from loopwise.kernels.evaluate.reference import StressDraw, moved

    t = torch.ones(3)
    data = StressDraw([t, 2], [t], [t.double()], {0: t}, {})
    kept = moved(data, "cpu")
    assert isinstance(kept, StressDraw) and kept.args[1] == 2 and torch.equal(kept.written32[0], t)
    assert moved((t, [t]), "meta")[1][0].device.type == "meta"


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


class _OutOfMemorySandbox:
    def request(self, op: str, payload: dict, timeout: float) -> dict:
        from loopwise.kernels.evaluate.pool import SandboxFailure

        raise SandboxFailure("oom", "out_of_memory", "CUDA out of memory. Tried to allocate 6.00 GiB")


@pytest.mark.parametrize("where", ["judge", "sandbox"])
def test_running_out_of_device_memory_while_working_beside_a_host_hold_asks_for_the_trials_again(
        tmp_path, monkeypatch, where):
    """Out of device memory in the judge (its reference run) or in the sandbox, while the trials
    work on the device (the problem held on the host, or there too): the trials are to be made
    again (WorkDidNotFit), not a verdict on the candidate. With the work on the host, the failure
    is what it was."""
    from loopwise.kernels.evaluate.correctness import WorkDidNotFit
    from loopwise.kernels.evaluate.pool import SandboxFailure

    def runner(work: str, hold: str = "cpu") -> TrialRunner:
        ref = Reference(_module(), "cpu", SOURCE)
        ref._hold, ref._work = hold, work
        if where == "judge":
            def no_room(seed):
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

            monkeypatch.setattr(ref, "outputs", no_room)
            box = InProcessSandbox(ref, str(tmp_path))
        else:  # (the reference's outputs made here: no device to work on in this test)
            monkeypatch.setattr(ref, "outputs", lambda seed: ([ref.draw(seed)[0] * 2.0 + 1.0], {}))
            box = _OutOfMemorySandbox()
        return TrialRunner(ref, box, EvalConfig(correct_trials=3, stress_trials=1, seed=3), base_seed=3)

    with pytest.raises(WorkDidNotFit, match="out of memory"):
        runner("cuda:0").run()
    with pytest.raises(WorkDidNotFit, match="out of memory"):
        runner("cuda:0", hold="cuda:0").run()
    with pytest.raises(torch.cuda.OutOfMemoryError if where == "judge" else SandboxFailure):
        runner("cpu").run()


def test_the_judge_makes_the_trials_again_on_the_host_when_their_work_did_not_fit(monkeypatch):
    """What the failed attempt found is dropped (its trials and reasons), what came before is kept,
    the reference works on the host from then on, and a note says why the trials ran twice."""
    from loopwise.kernels.evaluate import judge as judge_mod
    from loopwise.kernels.evaluate.correctness import Outcome, WorkDidNotFit

    attempts = []

    class Runner:
        def __init__(self, ref, box, cfg, base):
            self.ref = ref

        def run(self):
            attempts.append(self.ref.work)
            self.outcome.note("wrong_output", "found by the failed attempt")
            if self.ref.on_device():
                raise WorkDidNotFit("CUDA out of memory")
            return self.outcome

    monkeypatch.setattr(judge_mod, "TrialRunner", Runner)
    ref = Reference(_module(), "cpu", SOURCE)
    ref._hold, ref._work = "cpu", "cuda:0"
    fake = types.SimpleNamespace(reference=ref, cfg=EvalConfig(), transfer=None)
    outcome = Outcome()
    outcome.note("static_note", "from before the trials", severity="info")
    judge_mod.LocalJudge._trials(fake, None, 3, outcome)
    assert attempts == ["cuda:0", "cpu"] and ref.work == "cpu"
    codes = [r.code for r in outcome.reasons]
    assert codes[0] == "static_note" and codes.count("wrong_output") == 1 and "judge_memory" in codes


def test_where_the_judge_held_a_problem_on_the_device_that_did_not_fit_it_holds_it_on_the_host(monkeypatch):
    """Out of device memory while the judge held a problem on the device (sized by its inputs, a
    model the meta device cannot run): the trials are made again with everything on the host, what
    was kept for later trials dropped (it lay on the device), and the note says so. A second
    failure there is the candidate's."""
    from loopwise.kernels.evaluate import judge as judge_mod
    from loopwise.kernels.evaluate.correctness import Outcome, WorkDidNotFit

    attempts = []

    class Runner:
        def __init__(self, ref, box, cfg, base):
            self.ref = ref

        def run(self):
            attempts.append((self.ref.hold, self.ref.work))
            if self.ref.on_device():
                raise WorkDidNotFit("CUDA out of memory")
            return self.outcome

    monkeypatch.setattr(judge_mod, "TrialRunner", Runner)
    ref = Reference(_module(), "cpu", SOURCE)
    ref.reuse = True
    ref.outputs(0)
    assert ref.kept_outputs(0) is not None and ref._kept_draws
    ref._hold, ref._work = "cuda:0", "cuda:0"
    fake = types.SimpleNamespace(reference=ref, cfg=EvalConfig(), transfer=None)
    outcome = Outcome()
    judge_mod.LocalJudge._trials(fake, None, 3, outcome)
    assert attempts == [("cuda:0", "cuda:0"), ("cpu", "cpu")]
    assert ref.kept_outputs(0) is None and not ref._draws and not ref._kept_draws
    assert ref._kept_bytes == {"host": 0, "device": 0}
    assert [r.message for r in outcome.reasons if r.code == "judge_memory"][0].startswith(
        "the tensors the judge holds did not fit on the device")


def test_counting_launches_of_a_large_problem_lets_the_timing_sets_go_first(tmp_path):
    """After the timed calls, the launch count of a problem whose tensors take GBs (``make_room``)
    drops the staged timing sets (the later probes call the staged buffers, which stay); a small
    problem's request keeps them."""
    ref = Reference(_module(), "cpu", SOURCE)
    box = InProcessSandbox(ref, str(tmp_path))
    sets = [ref.draw(0), ref.draw(1)]
    for make_room, left in ((False, 2), (True, 0)):
        box.request("stage", {"sets": sets}, 60)
        reply = box.request("launches", {"inputs": sets[0], "written": [], "make_room": make_room}, 60)
        assert "launches" in reply
        assert len(box.session.staged["sets"]) == left and box.session.staged["bufs"][0].shape == (ROWS, COLS)


WIDE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, copies):
        super().__init__()
        self.copies = copies

    def forward(self, x):
        if {reads_values}:
            x = x + 1.0
        return x.repeat(1, self.copies)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [8]
'''
WIDE_IN = 64 * 32 * 4  # bytes of the input; the output is eight times that


def _wide(reads_values: bool = False) -> Reference:
    source = WIDE.format(reads_values="bool(x.sum() > 0)" if reads_values else "False")
    return Reference(_module(source, "wide"), "cpu", source)


def _on_a_device_of(monkeypatch, ref: Reference, total: int) -> None:
    """``ref`` placing its tensors as on a GPU of ``total`` bytes (the model itself stays on the CPU)."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(total_memory=total))
    ref.device = "cuda:0"


def test_a_problem_is_sized_by_its_outputs_where_they_dwarf_its_inputs():
    """A call whose output is eight times its input (a convolution to eight times the channels,
    say): the largest tensor a judgement holds copies of is the output, and one call's tensors are
    the input and the output, both found by a run on the meta device."""
    ref = _wide()
    assert ref._call_bytes() == 8 * WIDE_IN
    assert ref._all_call_bytes() == 9 * WIDE_IN


def test_a_model_that_does_not_run_on_the_meta_device_is_sized_by_its_inputs():
    """A forward that reads its input's values cannot run on meta tensors: the inputs alone size
    the problem, and nothing is raised."""
    ref = _wide(reads_values=True)
    assert ref._call_bytes() == WIDE_IN
    assert ref._all_call_bytes() == WIDE_IN


@pytest.mark.parametrize("units, hold, work", [(40, "cpu", "cpu"), (100, "cpu", "cuda:0"), (400, "cuda:0", "cuda:0")])
def test_where_a_problem_whose_outputs_dwarf_its_inputs_is_held_and_worked_on(monkeypatch, units, hold, work):
    """The dozen copies a judgement holds are output-sized: a device with room for a dozen inputs
    but not a dozen outputs (40 inputs' worth) keeps them on the host, and one trial's inputs and
    outputs, six times over, do not fit it either; a larger one (100) works a trial on the device;
    one with room for a dozen outputs (400) holds them there too. (Sized by its inputs, the first
    device held everything, and its sandbox ran out of memory beside the judge.)"""
    ref = _wide()
    _on_a_device_of(monkeypatch, ref, units * WIDE_IN)
    assert (ref.hold, ref.work) == (hold, work)
