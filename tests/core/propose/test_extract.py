"""Code extraction and prompt rendering, shared by every proposer."""

from __future__ import annotations

import pytest

from loopwise.core.propose import (
    ExtractFailure,
    Extracted,
    FailureReason,
    FindingNote,
    ProposalRequest,
    extract_python,
    render_prompt,
)
from loopwise.errors import UserError


def test_the_largest_python_block_wins_and_the_last_on_a_tie():
    text = ("Move: fuse\n```python\nx = 1\n```\nfull file:\n```python\nimport torch\ny = 2\n```\n"
            "usage:\n```python\nz = 3\n```\n")
    found = extract_python(text)
    assert isinstance(found, Extracted)
    assert found.code == "import torch\ny = 2\n" and found.note == "fuse"
    assert extract_python("```python\na = 1\n```\n```py\nb = 2\n```").code == "b = 2\n"


def test_untagged_and_tilde_fences_are_accepted_but_other_languages_are_not():
    assert extract_python("~~~\nv = 1\n~~~").code == "v = 1\n"
    assert extract_python("```cuda\n__global__ void k() {}\n```\n```\nw = 2\n```").code == "w = 2\n"
    only_cuda = extract_python("```cuda\n__global__ void k() {}\n```")
    assert isinstance(only_cuda, ExtractFailure) and only_cuda.reason == FailureReason.NO_CODE


def test_a_longer_fence_may_hold_a_shorter_one():
    text = '````python\ns = """\n```\n"""\n````'
    assert extract_python(text).code == 's = """\n```\n"""\n'


@pytest.mark.parametrize(("text", "truncated", "reason"), [
    ("plain prose", False, FailureReason.NO_CODE),
    ("plain prose", True, FailureReason.TRUNCATED),
    ("```python\nimport torch\n", False, FailureReason.TRUNCATED),
    ("```python\nok = 1\n```\n```python\nmore", False, FailureReason.TRUNCATED),
    ("```python\ndef f(:\n```", False, FailureReason.SYNTAX_ERROR),
])
def test_failures_are_values(text, truncated, reason):
    found = extract_python(text, truncated=truncated)
    assert isinstance(found, ExtractFailure) and found.reason == reason and found.detail


def test_the_note_falls_back_to_the_first_prose_line():
    assert extract_python("I vectorized the loads.\n```python\na=1\n```").note == (
        "I vectorized the loads.")
    assert extract_python("**Move:** tile by 128\n```python\na=1\n```").note == "tile by 128"


def test_prompts_leave_out_empty_sections_and_unknown_kinds_are_user_errors():
    bare = render_prompt(ProposalRequest(kind="kernels", task="T")).user
    assert "Current candidate" not in bare and "diagnosis" not in bare and "ModelNew" in bare
    rich = render_prompt(ProposalRequest(kind="kernels", task="T", findings=(FindingNote(text="spills"),))).user
    assert "- spills" in rich
    with pytest.raises(UserError, match="scheduling"):
        render_prompt(ProposalRequest(task="T", kind="scheduling"))
    training = render_prompt(ProposalRequest(task="T", kind="training"))
    assert "```json" in training.system and "healthy" in training.user  # no findings: said so
    with pytest.raises(ValueError):
        ProposalRequest(kind="kernels", task="T", n=0)
