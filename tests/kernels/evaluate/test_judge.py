"""The judge from a user's point of view, on CPU: every way a candidate can fail is a status
with a named reason, and a bad candidate never takes the judge down."""

from pathlib import Path

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import LocalJudge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.problem import load_problem

CASES = Path(__file__).parents[1] / "judge_cases"


def _cpu_judge(tmp_path_factory, problem: str, perf_trials: int, spares: int):
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=perf_trials, warmup=1,
                     run_timeout_s=8, compile_timeout_s=60, host_memory_gb=3, seed=7, energy=False)
    return LocalJudge(load_problem(str(CASES / problem)), cfg, device="cpu", log_dir=tmp_path_factory.mktemp("logs"),
                      spares=spares)


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    with _cpu_judge(tmp_path_factory, "problem_matmul_relu.py", perf_trials=5, spares=1) as j:
        yield j


def verdict(judge, name):
    return judge.evaluate((CASES / f"{name}.py").read_text(), name)


def codes(ev):
    return {r.code for r in ev.reasons if r.severity == "reject"}


@pytest.mark.parametrize("name,status,code", [
    ("wrong_scale", Status.WRONG_OUTPUT, "wrong_output"),
    ("wrong_shape", Status.WRONG_OUTPUT, "shape_mismatch"),
    ("wrong_dtype", Status.WRONG_OUTPUT, "dtype_mismatch"),
    ("nan_output", Status.WRONG_OUTPUT, "nan_output"),
    ("hang", Status.TIMEOUT, "trial_timeout"),
    ("segfault", Status.CRASH, "killed_by_signal"),
    ("raises", Status.CRASH, "runtime_error"),
    ("syntax_error", Status.COMPILE_ERROR, "compile_error"),
    ("no_modelnew", Status.COMPILE_ERROR, "missing_modelnew"),
    ("exits_on_import", Status.COMPILE_ERROR, "compile_error"),
    ("mutates_input", Status.EXPLOIT, "input_mutation"),
])
def test_failures_are_statuses_with_named_reasons(judge, name, status, code):
    ev = verdict(judge, name)
    assert ev.status is status, ev.summary()
    assert code in codes(ev), ev.reasons
    assert ev.speedup is None
    assert all(r.message for r in ev.reasons)


@pytest.mark.slow
def test_a_candidate_that_exhausts_host_memory_is_out_of_memory(tmp_path):
    """The memory watchdog decides it, not the clock: the trial timeout here is far beyond what the
    hog needs to pass the limit, so a busy machine cannot turn the verdict into a timeout."""
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=5, warmup=1, run_timeout_s=120,
                     compile_timeout_s=60, host_memory_gb=3, seed=7, energy=False)
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as judge:
        ev = verdict(judge, "host_memory_hog")
    assert ev.status is Status.OOM, ev.summary()
    assert "host_memory_limit" in codes(ev), ev.reasons
    assert ev.speedup is None and all(r.message for r in ev.reasons)


def test_correct_candidate_after_failures_gets_a_speedup(judge):
    verdict(judge, "segfault")  # a crashed sandbox is replaced, not reused
    ev = verdict(judge, "ok_torch")
    assert ev.status is Status.CORRECT, ev.summary()
    assert ev.speedup is not None and ev.speedup > 0
    assert ev.timing.trials == 5 and ev.reference_timing is not None
    kinds = [t.kind for t in ev.trials]
    assert kinds.count("kernelbench") == 5 and any(k.startswith("stress") for k in kinds)
    kb_seeds = [t.seed for t in ev.trials if t.kind == "kernelbench"]
    assert len(set(kb_seeds)) == len(kb_seeds)  # a fresh seed for every trial
    assert any(t.kind == "stress:centered" for t in ev.trials)


def test_error_message_names_the_exception(judge):
    ev = verdict(judge, "raises")
    assert "kernel launch failed" in ev.reasons[0].message
    assert "ValueError" in ev.log


def test_plain_pytorch_is_rejected_when_it_runs(tmp_path):
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    cfg = EvalConfig(static_check=False, perf_trials=3, seed=2, energy=False)
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((CASES / "ok_torch.py").read_text(), "ok_torch")
    assert ev.status is Status.EXPLOIT and "pytorch_only" in codes(ev)


def test_static_scan_rejects_plain_pytorch_before_running(tmp_path):
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    with LocalJudge(problem, EvalConfig(seed=1), device="cpu", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((CASES / "ok_torch.py").read_text(), "ok_torch")
    assert ev.status is Status.EXPLOIT
    assert "no_custom_kernel" in codes(ev)
    assert ev.timing is None  # nothing ran


@pytest.mark.gpu
def test_bundled_example_on_gpu(tmp_path):
    """On a GPU: the fused example is correct and faster, with energy and a floor; the cheat is caught."""
    root = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples"
    problem = load_problem(str(root / "scaled_gelu_problem.py"))
    with LocalJudge(problem, EvalConfig(perf_trials=30), device="cuda", log_dir=tmp_path, spares=1) as j:
        ev = j.evaluate((root / "scaled_gelu_triton.py").read_text(), "triton")
        cheat = j.evaluate((root / "scaled_gelu_cheat.py").read_text(), "cheat")
        again = j.evaluate((root / "scaled_gelu_triton.py").read_text() + "\n# again\n", "again")
        transfer = j.transfer
        drawn = j.reference.draw(0)
    assert ev.status is Status.CORRECT, ev.summary()
    assert again.status is Status.CORRECT and "correctness.draw" not in again.phases  # inputs reused
    assert drawn[0].is_cuda  # draw_device auto: get_inputs() drew on the GPU
    assert transfer is not None  # CUDA IPC works here: tensors never cross through host memory
    assert ev.speedup > 1.0 and ev.floor_ms > 0 and ev.energy_j_per_call > 0
    assert ev.timing.method == "cuda_event"
    assert cheat.status is Status.EXPLOIT


def test_stress_inputs_keep_the_problems_structure(tmp_path):
    """A candidate may rely on structure the problem's inputs always have (triangular matrices):
    the stress inputs keep exact zeros, so it is judged correct."""
    problem = load_problem(str(CASES / "problem_triu_matmul.py"))
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=3, seed=5, energy=False)
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((CASES / "triu_structure.py").read_text(), "triu")
    assert ev.status is Status.CORRECT, ev.summary()
    assert any(t.kind == "stress:centered" and t.passed for t in ev.trials)


@pytest.mark.parametrize("name,code", [
    ("switch_when_timed", "timed_output_wrong"),
    ("patch_clock", "timer_patch"),
])
def test_cheats_on_the_timing_itself_are_caught(tmp_path, name, code):
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=100, seed=4, energy=False)
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((CASES / f"{name}.py").read_text(), name)
    assert ev.status is Status.EXPLOIT, ev.summary()
    assert code in codes(ev)


def test_library_threads_are_flagged_not_rejected(judge):
    ev = verdict(judge, "compiled_in_forward")
    assert ev.status is Status.CORRECT, ev.summary()
    assert any(r.code == "library_threads" and r.severity == "flag" for r in ev.reasons)


def test_judge_holds_between_evaluations_only_the_draws_it_keeps_for_reuse(judge, monkeypatch):
    verdict(judge, "ok_torch")
    ref = judge.reference
    assert ref._kept_draws and set(ref._draws) == ref._kept_draws
    from loopwise.kernels.evaluate.judge import REFERENCE_TIMING_SEED

    assert REFERENCE_TIMING_SEED not in ref._draws  # drawn once, for the reference's timing
    # over the memory budget nothing more is kept: a fresh judge state holds no inputs afterwards
    import loopwise.kernels.evaluate.reference as reference_mod

    monkeypatch.setattr(reference_mod, "REUSE_HOST_BYTES", 0)
    assert reference_mod.host_budget() == 0
    monkeypatch.setattr(ref, "_kept_draws", set())
    monkeypatch.setattr(ref, "_draws", {})
    monkeypatch.setattr(ref, "_outputs", {})
    monkeypatch.setattr(ref, "_stress_kept", {})
    monkeypatch.setattr(ref, "_float64_kept", {})
    monkeypatch.setattr(ref, "_kept_bytes", {"host": 0, "device": 0})
    assert verdict(judge, "ok_torch").status is Status.CORRECT
    assert ref._draws == {} and ref._outputs == {} and ref._float64_kept == {}


def test_timing_audit_allows_overhead_but_not_impossible_claims():
    """Flushes, refills and output transfers may take most of the request: not a contradiction.
    A call whose device time exceeds its host time, or calls claiming more than elapsed, are."""
    from loopwise.kernels.evaluate.measure import audit_claims

    honest = {"event_ms": [0.07] * 100, "host_ms": [0.13] * 100, "noop_host_ms": [0.05] * 50}
    assert audit_claims(honest, wall_s=0.48) == []
    assert audit_claims({**honest, "event_ms": [0.5] * 100}, wall_s=0.48)
    assert audit_claims({**honest, "host_ms": [20.0] * 100}, wall_s=0.48)


def test_capture_error_for_an_unjoined_fork_is_recognized():
    from loopwise.kernels.evaluate.sandbox import capture_unjoined

    assert capture_unjoined("RuntimeError: CUDA error: the capture sequence contains a fork that was not "
                            "joined to the primary stream")
    assert capture_unjoined("cudaErrorStreamCaptureUnjoined")
    assert not capture_unjoined("RuntimeError: CUDA error: operation not permitted when stream is capturing")


def test_phases_say_where_the_correctness_time_went(judge):
    """The correctness phase is split into draws, reference runs, sandbox round trips, receiving
    outputs and comparisons; the parts never add up to more than the whole."""
    ev = verdict(judge, "ok_torch")
    parts = {k: v for k, v in ev.phases.items() if k.startswith("correctness.")}
    # (the reference's part is absent when this judge already holds the reference outputs)
    assert {"correctness.sandbox", "correctness.compare"} <= set(parts), ev.phases
    assert all(v >= 0 for v in parts.values())
    assert sum(parts.values()) <= ev.phases["correctness"] + 1e-3


@pytest.mark.parametrize("reuse", [True, False])
def test_one_judge_draws_once_and_judges_every_candidate_on_the_same_inputs(tmp_path, reuse):
    """With reuse_inputs (the default) the second candidate of a judge costs no draws and no
    reference runs, and gets the same verdict; without it, every evaluation draws afresh."""
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=5, warmup=1, run_timeout_s=8,
                     compile_timeout_s=60, host_memory_gb=3, energy=False, reuse_inputs=reuse)
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    source = (CASES / "ok_torch.py").read_text()
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=1) as j:
        first, second = j.evaluate(source, "a"), j.evaluate(source, "b")
        wrong = j.evaluate((CASES / "wrong_scale.py").read_text(), "wrong")
    assert first.status is second.status is Status.CORRECT and wrong.status is Status.WRONG_OUTPUT
    assert [t.seed for t in first.trials] == [t.seed for t in second.trials] or not reuse
    if reuse:
        assert "correctness.draw" not in second.phases and "correctness.reference" not in second.phases, \
            second.phases
    else:
        assert [t.seed for t in first.trials] != [t.seed for t in second.trials]
        assert second.phases.get("correctness.draw", 0) > 0


@pytest.mark.slow
def test_judging_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
    """Every sandbox's scratch (its copy of the candidate, its private cache) and the pool's own log
    folder are removed when the judge closes, for candidates that passed, crashed or were killed."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=3, warmup=1, run_timeout_s=8,
                     compile_timeout_s=60, host_memory_gb=3, seed=7, energy=False)
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    with LocalJudge(problem, cfg, device="cpu", spares=1) as j:
        for name in ("ok_torch", "segfault", "hang"):
            j.evaluate((CASES / f"{name}.py").read_text(), name)
        assert any(scratch.iterdir())  # the judge does use the temp folder while it runs
    # allowed to stay: torch's own compile cache (one folder, shared by every run) and the socket
    # folder of multiprocessing's fork server, which lives (and is removed) with this process
    def kept(p):
        return p.name.startswith("torchinductor_") or (
            p.name.startswith("pymp-") and all(q.name.startswith("listener-") for q in p.iterdir()))

    left = sorted(p.name for p in scratch.iterdir() if not kept(p))
    assert left == []


@pytest.mark.parametrize("precision,tolerance,status", [
    ("relaxed", "legacy", Status.CORRECT),
    ("fp32", "legacy", Status.EXPLOIT),
])
def test_reduced_precision_is_judged_by_the_policy_not_as_a_constant_answer(tmp_path, precision, tolerance, status):
    """TF32-rounded inputs (an honest tensor-core matmul) fail the float64 comparison of the first
    trial under either policy; the relaxed policy keeps them with a note, the fp32 policy rejects
    them as a precision downgrade. Neither is an input-independent answer: the first trial's output
    must not be compared with itself."""
    problem = load_problem(str(CASES / "problem_matmul_relu.py"))
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=3, seed=5, energy=False,
                     precision=precision, tolerance=tolerance)
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as j:
        ev = j.evaluate((CASES / "tf32_emulated.py").read_text(), "tf32")
    assert ev.status is status, ev.summary()
    assert "input_independent_output" not in {r.code for r in ev.reasons}
    assert any(r.code == "precision_downgrade" for r in ev.reasons), ev.reasons


# (problem, the correct candidate, wrong ones, the note's code and words): a bf16 sum over 64
# columns rounding every addition, nearer float64 than the reference (the factor bound); a bf16
# running sum over 512 rows, a quarter off the true sums, where the factor bound would allow nearly
# anything (the half tolerance against the float64 run itself)
HALF_CASES = {
    "factor_bound": ("problem_bf16_chain_sum.py", "bf16_sum_fp32.py", ("bf16_sum_dropped.py",),
                     "half_precision_bound", "nearer float64"),
    "float64_run": ("problem_bf16_running_sum.py", "bf16_running_sum_fp32.py",
                    ("bf16_running_sum_scaled.py", "bf16_running_sum_last_row.py"), "half_precision_float64",
                    "float64 run"),
}


@pytest.mark.parametrize("case", list(HALF_CASES))
def test_half_precision_outputs_are_judged_against_float64_where_the_half_reference_is_itself_off(tmp_path, case):
    """fp32 accumulation beats a bf16 reference that rounds every addition: it fails allclose against
    that reference but is near float64, so it is correct (with a note saying which rule passed it);
    a wrong sum is not (a column dropped, a tenth of every row lost, a wrong last row).
    ``half_outputs="allclose"`` keeps KernelBench's rule."""
    problem_file, good_file, wrong_files, code, words = HALF_CASES[case]
    problem = load_problem(str(CASES / problem_file))
    base = dict(static_check=False, require_custom_kernel=False, perf_trials=2, warmup=1, seed=5, energy=False)
    with LocalJudge(problem, EvalConfig(**base), device="cpu", log_dir=tmp_path / "bound", spares=0) as j:
        good = j.evaluate((CASES / good_file).read_text(), "fp32-sum")
        wrong = [j.evaluate((CASES / f).read_text(), f) for f in wrong_files]
    assert good.status is Status.CORRECT, good.summary()
    note = [r for r in good.reasons if r.code == code]
    assert note and note[0].severity == "info" and words in note[0].message, good.reasons
    assert all(w.status is Status.WRONG_OUTPUT for w in wrong), [w.summary() for w in wrong]
    with LocalJudge(problem, EvalConfig(**base, half_outputs="allclose"), device="cpu", log_dir=tmp_path / "kb",
                    spares=0) as j:
        strict = j.evaluate((CASES / good_file).read_text(), "fp32-sum")
    assert strict.status is Status.WRONG_OUTPUT, strict.summary()


def test_fp32_outputs_are_judged_against_float64_where_two_correct_summation_orders_disagree(tmp_path):
    """A long zero-mean reduction (K = 4095): a correct fp32 kernel that sums in another order than
    the reference misses atol = rtol = 1e-4 on a few outputs near zero, yet is as near float64 as
    the reference; it is correct, with a note naming the rule. A bf16x3 product is still rejected,
    and ``fp32_outputs="allclose"`` keeps KernelBench's rule alone."""
    problem = load_problem(str(CASES / "problem_large_k_matmul.py"))
    base = dict(static_check=False, require_custom_kernel=False, perf_trials=2, warmup=1, seed=0, energy=False)
    with LocalJudge(problem, EvalConfig(**base), device="cpu", log_dir=tmp_path / "bound", spares=0) as j:
        honest = j.evaluate((CASES / "sequential_fp32_matmul.py").read_text(), "sequential")
        reduced = j.evaluate((CASES / "bf16x3_matmul.py").read_text(), "bf16x3")
    assert honest.status is Status.CORRECT, honest.summary()
    note = [r for r in honest.reasons if r.code == "fp32_bound"]
    assert note and note[0].severity == "info" and "float64" in note[0].message, honest.reasons
    assert reduced.status is not Status.CORRECT, reduced.summary()
    with LocalJudge(problem, EvalConfig(**base, fp32_outputs="allclose"), device="cpu", log_dir=tmp_path / "kb",
               spares=0) as j:
        strict = j.evaluate((CASES / "sequential_fp32_matmul.py").read_text(), "sequential")
    assert strict.status is Status.WRONG_OUTPUT, strict.summary()


def test_out_of_memory_says_which_phase_ran_out_and_what_it_asked_for(judge):
    ev = verdict(judge, "huge_allocation")
    assert ev.status is Status.OOM, ev.summary()
    [reason] = [r for r in ev.reasons if r.severity == "reject"]
    assert reason.code == "out_of_memory"
    assert "the sandbox ran out of memory during a correctness trial" in reason.message, reason.message
    assert "asked for 16384.00 GiB of host memory" in reason.message, reason.message
    # the judge goes on judging
    assert verdict(judge, "ok_torch").status is Status.CORRECT


def test_the_judge_running_out_of_memory_is_an_oom_verdict_naming_its_phase(tmp_path, monkeypatch):
    """Out of memory on the judge's side (a float64 reference of a multi-GB output) is not the
    candidate's fault, but the verdict says so plainly: status oom, who, where, how much."""
    import torch

    from loopwise.kernels.evaluate.reference import Reference

    def exhausted(self, args, **kwargs):
        with self.spent("reference"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.20 GiB. GPU 0 has a total "
                                         "capacity of 139.80 GiB of which 1.25 GiB is free.")

    monkeypatch.setattr(Reference, "run64", exhausted)
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=2, warmup=1, seed=7, energy=False)
    with LocalJudge(load_problem(str(CASES / "problem_matmul_relu.py")), cfg, device="cpu", log_dir=tmp_path,
               spares=0) as j:
        ev = j.evaluate((CASES / "ok_torch.py").read_text(), "ok_torch")
    assert ev.status is Status.OOM, ev.summary()
    [reason] = [r for r in ev.reasons if r.severity == "reject"]
    assert reason.code == "judge_out_of_memory"
    assert reason.message.startswith("the judge ran out of memory during the reference's own work"), reason.message
    assert "asked the GPU for 9.20 GiB, 1.25 GiB free" in reason.message


def test_a_dead_sandbox_out_of_memory_names_the_request_and_the_allocation():
    from loopwise.kernels.evaluate import pool as pool_mod

    tail = ("Traceback (most recent call last):\n  File \"sandbox.py\", line 209, in _call\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.60 GiB. GPU 0 has a total capacity "
            "of 139.80 GiB of which 3.74 GiB is free. Process 654 has 93.78 GiB memory in use.\n")
    fail = pool_mod._death_reason(1, tail, "launches")
    assert (fail.status, fail.code) == ("oom", "out_of_memory")
    assert fail.message == ("the sandbox ran out of memory during counting its kernel launches: asked the GPU "
                            "for 4.60 GiB, 3.74 GiB free")


@pytest.mark.slow
@pytest.mark.parametrize("precision,tolerance", [("fp32", "strict"), ("relaxed", "legacy")])
def test_an_output_that_overflows_in_its_own_dtype_is_correct_when_the_candidate_overflows_alike(tmp_path, precision,
                                                                                                tolerance):
    """fp16 ``x * 60000``: the reference is infinite where float64 is finite. A candidate with the
    reference's infinities is correct under either policy; one that clips them to 65504 is not."""
    problem = load_problem(str(CASES / "problem_fp16_overflow.py"))
    cfg = EvalConfig(static_check=False, require_custom_kernel=False, perf_trials=2, warmup=0, seed=3, energy=False,
                     precision=precision, tolerance=tolerance)
    with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as j:
        same = j.evaluate((CASES / "fp16_overflow_same.py").read_text(), "same")
        clipped = j.evaluate((CASES / "fp16_overflow_clipped.py").read_text(), "clipped")
    assert same.status is Status.CORRECT, same.summary()
    assert clipped.status is Status.WRONG_OUTPUT and "nan_output" in codes(clipped), clipped.summary()


@pytest.fixture(scope="module")
def inplace_judge(tmp_path_factory):
    with _cpu_judge(tmp_path_factory, "problem_inplace_scale.py", perf_trials=3, spares=0) as j:
        yield j


@pytest.mark.parametrize("name,status", [
    ("inplace_kept", Status.CORRECT),
    ("inplace_dropped", Status.WRONG_OUTPUT),  # the same outputs, the caller's input left as it was
    ("inplace_wrong_value", Status.WRONG_OUTPUT),  # the same outputs, another value written into the input
])
def test_an_input_the_reference_writes_in_place_is_judged_like_an_output(inplace_judge, name, status):
    ev = verdict(inplace_judge, name)
    assert ev.status is status, ev.summary()
    if status is Status.WRONG_OUTPUT:
        assert codes(ev) == {"input_write"}, ev.reasons
        assert "input 0" in " ".join(r.message for r in ev.reasons)
