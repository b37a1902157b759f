"""The caller's inputs, from a user's point of view (on CPU): every tensor input's final value is
judged like an output against what the reference leaves in it (the untouched original where it
writes nothing), in the problem's own trials and in the stress trials alike."""

import os
from pathlib import Path

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import LocalJudge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.problem import load_problem

CASES = Path(__file__).parents[1] / "judge_cases"


def _judge(tmp_path_factory, problem: str, **overrides):
    cfg = dict(static_check=False, require_custom_kernel=False, perf_trials=3, warmup=1, run_timeout_s=60,
               compile_timeout_s=60, host_memory_gb=3, seed=7, energy=False)
    cfg.update(overrides)
    return LocalJudge(load_problem(str(CASES / problem)), EvalConfig(**cfg), device="cpu",
                      log_dir=tmp_path_factory.mktemp("logs"), spares=0)


def verdict(judge, name):
    return judge.evaluate((CASES / f"{name}.py").read_text(), name)


def codes(ev):
    return {r.code for r in ev.reasons if r.severity == "reject"}


def messages(ev):
    return " ".join(r.message for r in ev.reasons if r.severity == "reject")


@pytest.fixture(scope="module")
def readonly_judge(tmp_path_factory):
    """relu(x @ y) * scale: the reference writes no input."""
    with _judge(tmp_path_factory, "problem_matmul_relu.py") as j:
        yield j


@pytest.fixture(scope="module")
def halving_judge(tmp_path_factory):
    """The reference halves x in place."""
    with _judge(tmp_path_factory, "problem_inplace_scale.py") as j:
        yield j


def test_an_input_written_in_place_is_judged_by_the_outputs_float64_rule(tmp_path_factory):
    """A bf16 chain sum written into the caller's ``out``: fp32 accumulation misses allclose of the
    bf16 reference but is nearer float64 than it is. Returned, that passes by the half-precision
    bound; written into the input it passes alike. A wrong sum in the input (the returned one
    right) is input_write, named by the forward's argument index."""
    with _judge(tmp_path_factory, "problem_bf16_sum_into.py", seed=5) as j:
        good, wrong = verdict(j, "bf16_sum_into_fp32"), verdict(j, "bf16_sum_into_dropped")
    assert good.status is Status.CORRECT, good.summary()
    assert any(r.code == "half_precision_bound" and r.severity == "info" for r in good.reasons), good.reasons
    assert wrong.status is Status.WRONG_OUTPUT and codes(wrong) == {"input_write"}, wrong.summary()
    assert "input 1" in messages(wrong) and "output 0" not in messages(wrong), wrong.reasons


def test_an_input_the_reference_moves_by_an_ulp_may_be_left_as_it_was(tmp_path_factory):
    """``x.div_(3).mul_(3)`` leaves some elements an ulp off: a candidate that leaves x alone is
    within the tolerance of what the reference leaves, so it is correct."""
    with _judge(tmp_path_factory, "problem_inplace_roundtrip.py") as j:
        ev = verdict(j, "roundtrip_untouched")
    assert ev.status is Status.CORRECT, ev.summary()


def test_an_input_moved_within_the_tolerance_is_no_mutation(readonly_judge):
    """The mirror: the reference writes nothing, the candidate moves x by an ulp. Within the
    tolerance the caller cannot tell: correct. Zeroing it stays an exploit."""
    ev = verdict(readonly_judge, "input_moved_by_an_ulp")
    assert ev.status is Status.CORRECT, ev.summary()
    zeroed = verdict(readonly_judge, "mutates_input")
    assert zeroed.status is Status.EXPLOIT and "input_mutation" in codes(zeroed), zeroed.summary()


def test_stress_trials_judge_the_input_the_reference_writes(halving_judge):
    """Writing ``x.clamp(min=0) * 0.5`` into x is right on the problem's non-negative inputs and
    wrong on the stress trials' mixed signs."""
    ev = verdict(halving_judge, "inplace_wrong_on_negatives")
    assert ev.status is Status.WRONG_OUTPUT and codes(ev) == {"input_write"}, ev.summary()
    assert "stress" in messages(ev) and "input 0" in messages(ev), ev.reasons


def test_stress_trials_catch_an_input_the_candidate_overwrites(readonly_judge):
    """``x.relu_()`` after the output is computed changes nothing on torch.rand inputs; the stress
    trials' negative values show the caller's x overwritten."""
    ev = verdict(readonly_judge, "relu_input_after")
    assert ev.status is Status.EXPLOIT and codes(ev) == {"input_mutation"}, ev.summary()
    assert "stress" in messages(ev), ev.reasons


def test_a_callers_input_turned_into_another_dtype_is_a_mutation(readonly_judge):
    """``x.data = x.data.double()``: the same values, but the caller's tensor is float64 now."""
    ev = verdict(readonly_judge, "input_dtype_changed")
    assert ev.status is Status.EXPLOIT and codes(ev) == {"input_mutation"}, ev.summary()
    assert "float64" in messages(ev), ev.reasons


def test_a_callers_input_with_other_strides_but_the_same_values_is_left_alone(readonly_judge):
    """Strides alone are not judged: the caller reads the same values, shape and dtype (outputs'
    strides are not judged either)."""
    ev = verdict(readonly_judge, "input_restrided")
    assert ev.status is Status.CORRECT, ev.summary()


@pytest.mark.slow
def test_an_own_kernel_that_makes_the_required_input_write_is_no_decoy(tmp_path_factory, monkeypatch):
    """The reference halves x in place: a candidate whose own Triton kernel does that write (the
    product in PyTorch) contributes to what the caller reads; one whose kernel writes a scratch
    buffer while PyTorch does everything is still a decoy."""
    monkeypatch.setitem(os.environ, "TRITON_INTERPRET", "1")  # inherited by the spawned sandbox
    with _judge(tmp_path_factory, "problem_inplace_scale.py", require_custom_kernel=True) as j:
        own, decoy = verdict(j, "inplace_own_kernel"), verdict(j, "inplace_decoy_kernel")
    assert own.status is Status.CORRECT, own.summary()
    assert decoy.status is Status.EXPLOIT and codes(decoy) == {"decoy_kernel"}, decoy.summary()


@pytest.mark.slow
def test_an_fp32_input_written_in_place_is_judged_by_the_fp32_float64_rule(tmp_path_factory):
    """``matmul(..., out=out)`` with K = 4095: a correct fp32 loop in another summation order misses
    allclose on a few elements near zero, in the returned tensor and in the caller's ``out`` alike
    (they are one tensor); as near float64 as the reference, both pass by the fp32 bound."""
    with _judge(tmp_path_factory, "problem_large_k_matmul_into.py", perf_trials=2, seed=0) as j:
        ev = verdict(j, "sequential_fp32_matmul_into")
    assert ev.status is Status.CORRECT, ev.summary()


@pytest.mark.slow
def test_an_input_the_reference_writes_with_the_bits_it_held_is_still_written(tmp_path_factory):
    """``out`` already holds the product the reference writes into it (an uninitialised ``out``
    can hold it too, where the allocator hands back a freed copy of it): the reference's write
    leaves its bits as they were, yet the reference writes it, so the candidate's other summation
    order there is judged by the outputs' rules (passing by the fp32 bound), never as a mutation."""
    with _judge(tmp_path_factory, "problem_large_k_matmul_into_filled.py", perf_trials=2, seed=0) as j:
        ev = verdict(j, "sequential_fp32_matmul_into")
    assert ev.status is Status.CORRECT, ev.summary()


def test_stress_trials_judge_integer_outputs(tmp_path_factory):
    """argmin of |x| equals argmin of 2x on the problem's non-negative inputs; the stress trials'
    mixed signs tell them apart, as they do for floating outputs."""
    with _judge(tmp_path_factory, "problem_argmin_rows.py") as j:
        ev = verdict(j, "argmin_of_magnitudes")
    assert ev.status is Status.WRONG_OUTPUT, ev.summary()
    assert "stress" in messages(ev), ev.reasons
