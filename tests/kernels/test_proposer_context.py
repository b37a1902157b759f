"""What a proposer (LLM, exchange) is told about a judged candidate: the judge's reasons and the
profiling tools' findings reach the prompt as findings, with their numbers."""

from loopwise.core.propose import ProposalRequest, render_prompt
from loopwise.kernels.optimize_run import judged_context
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
    prompt = render_prompt(ProposalRequest(task="class Model: ...", evaluation=summary, findings=findings))
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
    prompt = render_prompt(ProposalRequest(task="t", findings=(note,)))
    assert "occupancy: Occupancy is 25%" in prompt.user and "moves=warps=4; fuse_kernels" in prompt.user
