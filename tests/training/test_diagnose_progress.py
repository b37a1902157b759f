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


# -- a stall needs evidence of no gain: a probe too small to tell withholds the verdict -------------

def probed(greedy, prompts):
    """A smoke-sized stage: 8 steps, each probed on ``prompts`` prompts with these greedy rewards."""
    trace = make_trace(n=len(greedy))
    for row, value in zip(trace, greedy):
        row[m.GREEDY_REWARD], row[m.GREEDY_PROMPTS] = value, prompts
    return trace


def test_a_flat_probe_of_few_prompts_withholds_the_stall_verdict_and_says_why():
    findings = found(probed([0.0625] * 8, prompts=16))  # no answer moved on 16 prompts: a gain could hide
    assert not PROGRESS & set(findings)
    undecided = findings["progress_undecided"]
    assert not suggests(undecided)
    assert undecided.evidence["probe_prompts"] == 16
    assert undecided.evidence["gain_upper_95"] >= undecided.evidence["min_useful_gain"]


def test_a_flat_probe_of_many_prompts_is_a_stall():
    hard = found(probed([0.0625] * 8, prompts=512))
    assert "too_hard" in hard and "progress_undecided" not in hard
    assert hard["too_hard"].evidence["gain_upper_95"] < hard["too_hard"].evidence["min_useful_gain"]
    assert "reward_plateau" in found(probed([0.5] * 8, prompts=512))


def test_a_probe_that_rises_step_by_step_is_no_stall_at_any_size():
    for prompts in (16, 512):
        rising = [0.1 + k / 16 for k in range(8)]
        assert not PROGRESS & set(found(probed(rising, prompts))) - {"too_easy"}
        assert "progress_undecided" not in found(probed(rising, prompts))


def test_a_probe_of_unknown_size_cannot_prove_a_stall():
    trace = make_trace({m.GREEDY_REWARD: (0.1, 0.1)})
    for row in trace:
        row.pop(m.GREEDY_PROMPTS, None)
    findings = found(trace)
    assert "too_hard" not in findings and "progress_undecided" in findings
