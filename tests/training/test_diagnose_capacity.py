"""Group size and completion budget are judged in both directions: more completions per prompt
when groups carry no signal, fewer when half a group would still carry one; a longer cap when
completions are cut, a shorter one when every completion fits in half of it."""

import pytest

from loopwise.training import metrics as m
from loopwise.training.config import StageConfig
from loopwise.training.diagnose import diagnose
from loopwise.training.findings import suggests
from tests.training.test_diagnose import NEVER_CUT, make_trace


def found(trace, config=None):
    return {f.tool: f for f in diagnose(trace, config or StageConfig())}


@pytest.mark.parametrize("half,whole,up,down", [(0.1, 0.05, False, True), (0.35, 0.1, False, False),
                                                 (0.2, 0.7, True, False), (0.9, 0.9, True, False)])
def test_group_size_moves_either_way_and_never_both(half, whole, up, down):
    trace = make_trace({m.FRAC_ZERO_STD_HALF: (half, half), m.FRAC_ZERO_STD: (whole, whole)})
    moves = [suggests(f).get("num_generations") for f in found(trace, StageConfig(num_generations=8)).values()]
    assert ("up" in moves) is up and ("down" in moves) is down


def test_half_groups_are_quoted_with_the_group_size():
    f = found(make_trace({m.FRAC_ZERO_STD_HALF: (0.1, 0.1), m.FRAC_ZERO_STD: (0.02, 0.02)}),
              StageConfig(num_generations=16))["group_to_spare"]
    assert "of 16" in f.guidance and f.evidence["frac_reward_zero_std_half"] == pytest.approx(0.1, abs=0.03)


@pytest.mark.parametrize("longest,clipped,fires", [(8.0, NEVER_CUT, True), (9.0, NEVER_CUT, False),
                                                   (6.0, 0.02, False)])
def test_the_cap_shortens_only_when_every_completion_fits_in_half_of_it(longest, clipped, fires):
    trace = make_trace({m.MAX_LENGTH: (longest, longest), m.LENGTH: (5.0, 5.0), m.CLIPPED: (clipped, clipped)})
    findings = found(trace, StageConfig(max_completion_length=16))
    assert ("short_completions" in findings) is fires
    if fires:
        assert suggests(findings["short_completions"]) == {"max_completion_length": "down"}
        assert "16-token cap" in findings["short_completions"].guidance
    assert "short_completions" not in {f.tool for f in diagnose(trace)}  # without the config: no cap to compare


def test_all_solved_groups_give_back_samples_rather_than_raise_the_difficulty():
    f = found(make_trace({m.FRAC_ZERO_STD: (0.8, 0.85), m.REWARD: (0.9, 0.95)}))["groups_all_solved"]
    assert suggests(f) == {"num_generations": "down"}
