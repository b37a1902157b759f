"""The exchange proposer from the user's side: prompts appear in a folder, answers are files."""

from __future__ import annotations

import threading
import time

import pytest
from fake_llm_server import GOOD_CODE

from loopwise.core.propose import (
    ExchangeProposer,
    FailureReason,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    render_prompt,
)

REQUEST = ProposalRequest(kind="kernels", task="Reference: class Model computes relu(x).", evaluation="1.3 ms")
ANSWER = f"Move: one fused Triton kernel\n\n```python\n{GOOD_CODE}```\n"


def make(folder, lines, timeout_s=5.0):
    return ExchangeProposer(folder, timeout_s=timeout_s, poll_s=0.02, announce=lines.append)


class FakeClock:
    """A monotonic clock that only its own ``sleep`` moves; it records every wait."""

    def __init__(self):
        self.now, self.waits = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.waits.append(seconds)
        self.now += seconds


def on_clock(folder, clock, **settings):
    """An exchange proposer that polls on ``clock`` (no real waiting)."""
    return ExchangeProposer(folder, announce=settings.pop("announce", [].append), sleep=clock.sleep, clock=clock,
                            **settings)


def write_later(path, parts, pause_s):
    """Writes ``parts`` one after another into ``path``, pausing before each."""
    def run():
        for part in parts:
            time.sleep(pause_s)
            with open(path, "a", encoding="utf-8") as f:
                f.write(part)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_answer_file_becomes_a_proposal(tmp_path):
    lines = []
    write_later(tmp_path / "answer-0001.md", [ANSWER], 0.1)
    [result] = make(tmp_path, lines).propose(REQUEST)
    assert isinstance(result, Proposal)
    assert result.content == GOOD_CODE and result.note == "one fused Triton kernel"
    assert result.origin == f"exchange:{tmp_path / 'answer-0001.md'}" and result.usage is None
    prompt = (tmp_path / "prompt-0001.md").read_text()
    assert prompt.startswith(render_prompt(REQUEST).as_markdown()) and "relu(x)" in prompt
    assert "## Commands you may run" in prompt  # the engine's tools, as commands the agent may run
    [line] = lines
    assert f"answer by writing {tmp_path / 'answer-0001.md'}.tmp containing a Move: line and one ```python block" in line
    assert "\n" not in line


def test_no_answer_times_out_with_the_instruction(tmp_path):
    lines, clock = [], FakeClock()
    [result] = on_clock(tmp_path, clock, timeout_s=60, poll_s=2, announce=lines.append).propose(REQUEST)
    assert clock.now == 60 and clock.waits == [2] * 30  # polled until the timeout, not past it
    assert isinstance(result, ProposalFailure) and result.reason == FailureReason.TIMEOUT
    assert lines[0] in result.detail and "answer-0001.md" in result.detail


def test_a_half_written_answer_is_not_read_early(tmp_path):
    head, tail = ANSWER[:60], ANSWER[60:]
    assert "```python" in head and not head.rstrip().endswith("```")
    writer = write_later(tmp_path / "answer-0001.md", [head, tail], 0.3)  # pause spans many polls
    [result] = make(tmp_path, []).propose(REQUEST)
    writer.join()
    assert result.ok and result.content == GOOD_CODE


def test_prose_before_the_code_is_not_read_early(tmp_path):
    writer = write_later(tmp_path / "answer-0001.md", ["Move: thinking...\n", ANSWER], 0.2)
    [result] = make(tmp_path, []).propose(REQUEST)
    writer.join()
    assert result.ok and result.content == GOOD_CODE


def test_a_done_marker_reads_the_answer_at_once(tmp_path):
    (tmp_path / "answer-0001.md").write_text("I cannot do this one.")
    (tmp_path / "answer-0001.md.done").touch()
    clock = FakeClock()
    [result] = on_clock(tmp_path, clock, timeout_s=5, poll_s=0.02).propose(REQUEST)
    assert clock.waits == []  # read on the first look, no poll waited
    assert result.reason == FailureReason.NO_CODE


@pytest.mark.parametrize(("text", "reason"), [
    ("Move: x\n```python\nimport torch\nclass ModelNew(", FailureReason.TRUNCATED),
    ("no code, sorry", FailureReason.NO_CODE),
])
def test_an_unfinished_answer_at_the_deadline_is_named(tmp_path, text, reason):
    (tmp_path / "answer-0001.md").write_text(text)
    [result] = make(tmp_path, [], timeout_s=0.2).propose(REQUEST)
    assert result.reason == reason and result.raw == text


def test_an_answer_that_does_not_parse_is_a_syntax_error(tmp_path):
    (tmp_path / "answer-0001.md").write_text("```python\ndef f(:\n```\n")
    [result] = make(tmp_path, []).propose(REQUEST)
    assert result.reason == FailureReason.SYNTAX_ERROR and "line 1" in result.detail


def test_several_proposals_get_their_own_numbered_files(tmp_path):
    lines = []
    proposer = make(tmp_path, lines)
    for number in ("0001", "0002"):
        write_later(tmp_path / f"answer-{number}.md", [ANSWER], 0.05)
    results = proposer.propose(ProposalRequest(kind="kernels", task="t", n=2))
    assert [r.ok for r in results] == [True, True] and len(lines) == 2
    write_later(tmp_path / "answer-0003.md", [ANSWER], 0.05)
    [third] = proposer.propose(REQUEST)
    assert third.ok and "answer-0003.md" in lines[-1]
    assert sorted(p.name for p in tmp_path.glob("prompt-*")) == [
        "prompt-0001.md", "prompt-0002.md", "prompt-0003.md"]


@pytest.mark.parametrize(("text", "reason"), [
    ("I could not find a fast way.", FailureReason.NO_CODE),
    ("Move: x\n```python\nimport torch\nclass ModelNew(", FailureReason.TRUNCATED),
])
def test_a_renamed_answer_without_usable_code_is_read_once_it_settles_not_at_the_deadline(tmp_path, text, reason):
    (tmp_path / "answer-0001.md.tmp").write_text(text)
    (tmp_path / "answer-0001.md.tmp").rename(tmp_path / "answer-0001.md")
    clock = FakeClock()
    [result] = on_clock(tmp_path, clock, timeout_s=30, poll_s=0.5, settle_s=2).propose(REQUEST)
    assert clock.now == 2  # read at the first look settle_s after it was first seen, not at the 30 s timeout
    assert result.reason == reason and result.raw == text


def test_the_instruction_names_the_rename_protocol(tmp_path):
    lines = []
    write_later(tmp_path / "answer-0001.md", [ANSWER], 0.05)
    make(tmp_path, lines).propose(REQUEST)
    assert f"writing {tmp_path / 'answer-0001.md'}.tmp" in lines[0] and "renaming it to answer-0001.md" in lines[0]
