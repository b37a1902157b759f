"""Progress and difficulty are judged on the greedy probe's reward, which the temperature does not
move: a hotter sampler is not a harder task, and a sampled reward that rises while the greedy
answers stay put is a plateau."""

from loopwise.training import metrics as m
from loopwise.training.config import StageConfig
from loopwise.training.diagnose import diagnose
from loopwise.training.findings import suggests
from tests.training.test_diagnose import make_trace

PROGRESS = {"reward_plateau", "too_hard", "too_easy"}


def found(trace, config=None):
    return {f.tool: f for f in diagnose(trace, config or StageConfig())}


def test_a_hotter_sampler_is_not_read_as_a_harder_task():
    # temperature went up: the sampled reward sinks and its groups go quiet, the greedy answers improve
    trace = make_trace({m.REWARD: (0.3, 0.08), m.GREEDY_REWARD: (0.3, 0.5)})
    findings = found(trace, StageConfig(temperature=1.5))
    assert not PROGRESS & set(findings)
    moves = {(k, d) for f in findings.values() for k, d in suggests(f).items()}
    assert ("temperature", "up") not in moves and ("difficulty", "down") not in moves


def test_greedy_answers_that_stay_put_are_a_plateau_whatever_the_sampled_reward_does():
    trace = make_trace({m.REWARD: (0.2, 0.7), m.GREEDY_REWARD: (0.45, 0.45)})
    assert "reward_plateau" in found(trace)


def test_plateau_advice_follows_whether_the_groups_carry_a_signal():
    quiet = found(make_trace({m.GREEDY_REWARD: (0.45, 0.45), m.FRAC_ZERO_STD: (0.7, 0.7)}))["reward_plateau"]
    busy = found(make_trace({m.GREEDY_REWARD: (0.45, 0.45), m.FRAC_ZERO_STD: (0.1, 0.1)}))["reward_plateau"]
    assert suggests(quiet) == {"num_generations": "up"} and suggests(busy) == {"learning_rate": "up"}


def test_difficulty_follows_the_greedy_level_at_the_stages_difficulty():
    easy = found(make_trace({m.GREEDY_REWARD: (0.6, 0.95)}), StageConfig(difficulty=2))
    assert suggests(easy["too_easy"]) == {"difficulty": "up"}  # solved: raised even while still rising
    assert "at difficulty 2" in easy["too_easy"].guidance
    hard = found(make_trace({m.GREEDY_REWARD: (0.12, 0.1)}))
    assert suggests(hard["too_hard"]) == {"difficulty": "down"}
    assert not PROGRESS & set(found(make_trace({m.GREEDY_REWARD: (0.05, 0.35)})))  # low but learning


def test_a_trace_without_probes_gets_no_progress_finding():
    trace = [{k: v for k, v in row.items() if k != m.GREEDY_REWARD}
             for row in make_trace({m.REWARD: (0.05, 0.05)})]
    assert not PROGRESS & set(found(trace))
