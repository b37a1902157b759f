"""A stage whose completion cap cuts every answer: the greedy probe (run at the task's own answer
length) still solves its prompts, but the stage's samples all fail because they are cut. That is
the cap's doing, not an easy difficulty: the diagnosis says ``truncation`` (the share of
completions that hit the cap) and raises the cap; ``too_easy`` needs a solved probe *and* answers
the cap left whole."""

import random

from loopwise.training import metrics as m
from loopwise.training.config import StageConfig
from loopwise.training.diagnose import diagnose
from loopwise.training.findings import suggests
from loopwise.training.transitions import Bounds, propose_transitions


def stage_record(clipped: float, reward: float, zero: float, greedy: float, steps: int = 12) -> list[dict]:
    """A cpu-preset stage as the trainer writes it: a start row, ``steps`` training rows (greedy
    probe every other step and at the last), an end row."""
    rows = [{m.STEP: 0, m.EVAL_REWARD: greedy, m.TRAIN_EVAL_REWARD: greedy}]
    for i in range(1, steps + 1):
        row = {m.STEP: i, m.REWARD: reward, m.FRAC_ZERO_STD: zero, m.FRAC_ZERO_STD_HALF: zero,
               m.CLIPPED: clipped, m.LENGTH: 4.0, m.MAX_LENGTH: 4.0, m.ENTROPY: 0.8, m.KL: 0.0,
               m.CLIP_LOW: 0.0, m.CLIP_HIGH: 0.0, m.CLIP_REGION: 0.0, m.GRAD_NORM: 0.0, m.SAMPLES: 64, m.TOKENS: 256}
        if i % 2 == 0 or i == steps:
            row[m.GREEDY_REWARD] = greedy
        rows.append(row)
    return rows + [{m.STEP: steps, m.EVAL_REWARD: greedy, m.TRAIN_EVAL_REWARD: greedy}]


CUT = StageConfig(max_completion_length=4, difficulty=1)


def test_a_cap_that_cuts_every_answer_is_truncation_not_an_easy_difficulty():
    findings = {f.tool: f for f in diagnose(stage_record(clipped=1.0, reward=0.0, zero=1.0, greedy=0.95), CUT)}
    assert "too_easy" not in findings
    cut = findings["truncation"]
    assert cut.evidence["clipped_ratio"] == 1.0 and cut.evidence["max_completion_length"] == 4
    assert suggests(cut) == {"max_completion_length": "up"}
    # nothing reads the cut answers as a difficulty: no finding moves it either way
    assert not any("difficulty" in suggests(f) for f in findings.values())
    assert "cut at the 4-token cap" in findings["no_learning_signal"].guidance


def test_the_next_stage_raises_the_cap_and_keeps_the_difficulty():
    findings = diagnose(stage_record(clipped=1.0, reward=0.0, zero=1.0, greedy=0.95), CUT)
    first = propose_transitions(CUT, findings, random.Random(0), 1, Bounds.for_task(4))[0]
    assert first.config.max_completion_length > 4
    assert (first.config.difficulty, first.config.num_generations) == (CUT.difficulty, CUT.num_generations)


def test_a_solved_probe_with_whole_answers_is_still_too_easy():
    findings = {f.tool: f for f in diagnose(stage_record(clipped=0.0, reward=0.95, zero=0.9, greedy=0.95), CUT)}
    assert suggests(findings["too_easy"]) == {"difficulty": "up"}
    assert findings["too_easy"].evidence["clipped_ratio"] == 0.0
    assert "truncation" not in findings
