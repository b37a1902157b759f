"""The kernel prompts as a model reads them: the rules, the target, a repair request with the
failed candidate's reasons and trimmed log, a re-prompt that names what was wrong, and the size."""

from __future__ import annotations

from loopwise.core.propose import FindingNote, ProposalRequest, ProposalRole, log_excerpt, render_prompt

FAILED = "import torch\nimport triton.language as tl\nclass ModelNew(torch.nn.Module):\n    pass\n"
LOG = "\n".join([f"noise line {i}" for i in range(400)] + [
    "Traceback (most recent call last):",
    '  File "candidate_module.py", line 12, in kernel',
    "    offs = tl.arang(0, BLOCK)",
    "AttributeError: module 'triton.language' has no attribute 'arang'",
] + [f"more noise {i}" for i in range(400)])


def test_a_log_excerpt_keeps_the_error_lines_and_a_few_around_within_its_budget():
    text = log_excerpt(LOG, budget=600)
    assert "no attribute 'arang'" in text and "tl.arang(0, BLOCK)" in text and "Traceback" in text
    assert "noise line 10\n" not in text and len(text) <= 600
    assert log_excerpt("", budget=600) == ""
    assert log_excerpt("all fine\nnothing to see", budget=600) == "all fine\nnothing to see"  # short: whole


def test_a_huge_error_log_is_cut_to_its_budget():
    text = log_excerpt("\n".join(f"error {i}: bad" for i in range(5000)), budget=1000)
    assert len(text) <= 1000 and "error 0: bad" in text


def test_a_repair_request_shows_the_failed_code_its_reasons_and_its_log():
    reasons = (FindingNote(text="reject crash: AttributeError: module 'triton.language' has no attribute 'arang'"),
               FindingNote(text="reject wrong_output: 255520 of 256000 elements outside atol=rtol=1e-4",
                           evidence={"max_abs_error": 0.181}))
    request = ProposalRequest(kind="kernels", task="class Model: ...", candidate=FAILED, evaluation="crash", findings=reasons,
                              log=log_excerpt(LOG), role=ProposalRole.REPAIR, n=1)
    user = render_prompt(request).user
    assert "## The candidate that failed" in user and "tl.arang" in user and "class ModelNew" in user
    assert "no attribute 'arang'" in user and "max_abs_error=0.181" in user and "255520 of 256000" in user
    assert "Fix this candidate" in user and "## Its log" in user


def test_the_rules_and_the_target_are_stated():
    rules = ("Precision policy fp32, tolerance atol=rtol=1e-4.",
             "precision_downgrade: fp32 math is downgraded to TF32, fp16, bf16 or fp8.")
    prompt = render_prompt(ProposalRequest(kind="kernels", task="T", rules=rules, target="NVIDIA H200; eager 1.2 ms"))
    assert "Precision policy fp32" in prompt.system and "precision_downgrade" in prompt.system
    assert "## Target" in prompt.user and "eager 1.2 ms" in prompt.user


def test_a_re_prompt_says_exactly_what_was_wrong_with_the_last_answer():
    user = render_prompt(ProposalRequest(kind="kernels", task="T", feedback="no ```python block in the reply")).user
    assert "Your previous answer could not be used: no ```python block in the reply" in user
