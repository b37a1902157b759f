"""What a proposer (LLM, exchange) is told about a judged candidate: the judge's reasons and the
profiling tools' findings reach the prompt as findings, with their numbers."""

from loopwise.core.propose import ProposalRequest, render_prompt
from loopwise.kernels.optimize.prompt import judged_context
from loopwise.kernels.profile.findings import Finding


def test_a_rejected_candidate_tells_the_model_why():
    data = {"status": "wrong_output", "speedup": None, "timing": None,
            "reasons": [{"code": "wrong_output", "severity": "reject",
                         "message": "kernelbench trial (seed 3): output 0: 12 of 4096 elements outside atol=rtol=0.0001",
                         "evidence": {"mismatched": 12, "numel": 4096, "detail": {"nested": 1}}}]}
    summary, findings = judged_context(data)
    assert summary == "wrong_output"
    assert len(findings) == 1 and findings[0].text.startswith("reject wrong_output: kernelbench trial")
    assert dict(findings[0].evidence) == {"mismatched": 12, "numel": 4096}  # scalars only
    prompt = render_prompt(ProposalRequest(kind="kernels", task="class Model: ...", evaluation=summary, findings=findings))
    assert "## What diagnosis found" in prompt.user and "mismatched=12" in prompt.user


def test_a_correct_candidate_reports_times_against_eager_and_the_floor():
    data = {"status": "correct", "speedup": 1.5, "floor_ms": 0.11,
            "timing": {"median_ms": 0.4}, "reference_timing": {"median_ms": 0.6},
            "reasons": [{"code": "excessive_speedup", "severity": "flag", "message": "review it", "evidence": {}}]}
    summary, findings = judged_context(data)
    assert summary == ("correct, 1.500x over eager, median 0.4000 ms vs eager 0.6000 ms; "
                       "speed-of-light floor 0.1100 ms")
    assert findings[0].text == "flag excessive_speedup: review it"


def test_profile_findings_become_prompt_findings_with_their_moves():
    f = Finding.make("occupancy", "Occupancy is 25% of the SM, limited by registers (128 per thread).",
                     {"occupancy": 0.25, "limiter": "registers"}, 0.4, [{"warps": 4}, "fuse_kernels"])
    note = f.as_note()
    assert note.text == f"[{f.severity}] occupancy: {f.guidance}"
    assert note.evidence["moves"] == "warps=4; fuse_kernels" and note.evidence["limiter"] == "registers"
    prompt = render_prompt(ProposalRequest(kind="kernels", task="t", findings=(note,)))
    assert "occupancy: Occupancy is 25%" in prompt.user and "moves=warps=4; fuse_kernels" in prompt.user


# What the model is told besides the problem and the code (rules, target, instructions) stays
# within a character budget; a repair's log within its own.
FRAME_BUDGET = 4500


def _frame(prompt, *texts):
    size = len(prompt.as_markdown())
    return size - sum(len(t) for t in texts)


def test_the_first_prompt_states_the_rules_within_its_budget():
    from loopwise.kernels.optimize.prompt import rules, target

    task = "class Model(torch.nn.Module): ...\n" * 20
    data = {"status": "correct", "reference_timing": {"median_ms": 1.25}, "floor_ms": 0.31}
    prompt = render_prompt(ProposalRequest(kind="kernels", task=task, rules=rules("fp32", 1e-4, 1e-4),
                                           target=target({"device": "NVIDIA H200"}, {1: {"data": data}})))
    text = prompt.as_markdown()
    for needle in ("Precision policy fp32", "atol=0.0001, rtol=0.0001", "class ModelNew(torch.nn.Module)",
                   "same arguments", "Forbidden (precision_downgrade)", "Forbidden (timer_patch)",
                   "input_precision='ieee' or 'tf32x3'", "Device: NVIDIA H200", "median 1.2500 ms",
                   "Speed-of-light floor: 0.3100 ms"):
        assert needle in text, needle
    assert _frame(prompt, task) <= FRAME_BUDGET
    relaxed = "\n".join(rules("relaxed", 1e-2, 1e-2))
    assert "precision_downgrade" not in relaxed and "Precision policy relaxed" in relaxed


def test_a_repair_prompt_stays_within_its_budget_whatever_the_log():
    from loopwise.core.propose import ProposalRole
    from loopwise.kernels.optimize.prompt import REPAIR_LOG_BUDGET, repair_context, rules

    data = {"status": "wrong_output",
            "reasons": [{"code": "wrong_output", "severity": "reject",
                         "message": "output 0: 255520 of 256000 elements outside atol=rtol=1e-4 (max abs error 0.181)",
                         "evidence": {"mismatched": 255520, "numel": 256000}}],
            "trials": [{"kind": "normal", "seed": 3, "passed": False, "max_abs_err": 0.181, "message": "mismatch"},
                       {"kind": "uniform", "seed": 4, "passed": True}]}
    log = "\n".join(f"warning {i}: something noisy" for i in range(20000)) + "\nRuntimeError: the real cause"
    summary, findings, excerpt = repair_context(data, log)
    assert len(excerpt) <= REPAIR_LOG_BUDGET and "RuntimeError: the real cause" in excerpt
    code, task = "import torch\n" * 50, "class Model: ...\n" * 20
    prompt = render_prompt(ProposalRequest(kind="kernels", task=task, candidate=code, evaluation=summary, findings=findings,
                                           log=excerpt, rules=rules("fp32", 1e-4, 1e-4), role=ProposalRole.REPAIR))
    assert "255520 of 256000" in prompt.user and "max_abs_err=0.181" in prompt.user
    assert "failed trial normal (seed 3)" in prompt.user and "uniform" not in prompt.user
    assert _frame(prompt, task, code) <= FRAME_BUDGET + REPAIR_LOG_BUDGET
