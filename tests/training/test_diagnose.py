"""Detectors over synthetic metric traces: each fires on its pathology and stays quiet on a healthy
trace, a too-short one and one noisy step; bad values never raise."""

import math
import random

import pytest

from loopwise.core.propose import FindingNote
from loopwise.training import metrics as m
from loopwise.training.config import StageConfig
from loopwise.core.records import Finding
from loopwise.training.diagnose import DETECTORS, diagnose
from loopwise.training.findings import as_note, severity_for, suggests, training_finding
from loopwise.training.trace_stats import MIN_STEPS

NOISE = {m.REWARD: 0.03, m.GREEDY_REWARD: 0.02, m.ENTROPY: 0.03, m.KL: 0.002, m.CLIP_LOW: 0.005,
         m.CLIP_HIGH: 0.005, m.FRAC_ZERO_STD: 0.03, m.FRAC_ZERO_STD_HALF: 0.03, m.CLIPPED: 0.01, m.LENGTH: 0.3,
         m.GRAD_NORM: 0.05}
FRACTIONS = {m.REWARD, m.GREEDY_REWARD, m.FRAC_ZERO_STD, m.FRAC_ZERO_STD_HALF, m.CLIPPED, m.CLIP_LOW, m.CLIP_HIGH}
HEALTHY = {m.REWARD: (0.2, 0.7), m.GREEDY_REWARD: (0.25, 0.65), m.ENTROPY: (1.5, 1.45), m.KL: (0.02, 0.03),
           m.CLIP_LOW: (0.01, 0.01), m.CLIP_HIGH: (0.01, 0.01), m.FRAC_ZERO_STD: (0.3, 0.2),
           m.FRAC_ZERO_STD_HALF: (0.5, 0.4), m.CLIPPED: (0.05, 0.05), m.LENGTH: (10.0, 11.0),
           m.MAX_LENGTH: (14.0, 15.0), m.GRAD_NORM: (1.0, 1.0), m.GREEDY_PROMPTS: (512, 512)}
NEVER_CUT = -1.0  # a clipped ratio this far below 0 stays at 0 after the noise (and the clamp)


def make_trace(curves=None, n=40, seed=0):
    """``n`` steps whose metrics follow ``curves`` (over HEALTHY): ``(start, end)`` for a straight
    line or ``f(x)`` for ``x`` in [0, 1], plus seeded Gaussian noise; fractions stay in [0, 1]."""
    rng, curves = random.Random(seed), HEALTHY | (curves or {})
    rows = []
    for i in range(n):
        x, row = i / (n - 1), {m.STEP: i + 1}
        for key, curve in curves.items():
            value = curve(x) if callable(curve) else curve[0] + (curve[1] - curve[0]) * x
            value += rng.gauss(0, NOISE.get(key, 0.0))
            row[key] = min(1.0, max(0.0, value)) if key in FRACTIONS else max(0.0, value)
        row[m.CLIP_REGION] = row[m.CLIP_LOW] + row[m.CLIP_HIGH]
        rows.append(row)
    return rows


def kinds(trace, config=None):
    return [f.tool for f in diagnose(trace, config)]


def step(at, before, after):
    return lambda x: before if x < at else after


PATHOLOGIES = {
    "entropy_collapse": ({m.ENTROPY: lambda x: 1.9 * math.exp(-3 * x), m.REWARD: (0.9, 0.93)},
                         {"temperature": "up", "learning_rate": "down"}),
    "entropy_explosion": ({m.ENTROPY: (1.0, 2.2), m.REWARD: (0.5, 0.3)}, {"entropy_coef": "down"}),
    "reward_plateau": ({m.GREEDY_REWARD: (0.5, 0.5)}, {"learning_rate": "up"}),
    "too_hard": ({m.GREEDY_REWARD: (0.1, 0.1)}, {"difficulty": "down"}),
    "too_easy": ({m.GREEDY_REWARD: (0.8, 0.95)}, {"difficulty": "up"}),
    "groups_all_solved": ({m.FRAC_ZERO_STD: (0.5, 0.85), m.REWARD: (0.9, 0.95)}, {"num_generations": "down"}),
    "groups_none_solved": ({m.FRAC_ZERO_STD: (0.9, 0.9), m.REWARD: (0.05, 0.05)}, {"num_generations": "up"}),
    "group_to_spare": ({m.FRAC_ZERO_STD_HALF: (0.1, 0.1), m.FRAC_ZERO_STD: (0.02, 0.02)},
                       {"num_generations": "down"}),
    "short_completions": ({m.MAX_LENGTH: (6.0, 7.0), m.LENGTH: (5.0, 5.0), m.CLIPPED: (NEVER_CUT, NEVER_CUT)},
                          {"max_completion_length": "down"}),
    "kl_blowup": ({m.KL: (0.02, 0.6)}, {"beta": "up", "learning_rate": "down"}),
    "truncation": ({m.CLIPPED: (0.9, 0.97), m.REWARD: (0.05, 0.05)}, {"max_completion_length": "up"}),
    "length_explosion": ({m.LENGTH: (10.0, 45.0), m.REWARD: (0.5, 0.5)}, {"temperature": "down"}),
    "length_collapse": ({m.LENGTH: (40.0, 8.0), m.REWARD: (0.5, 0.45)}, {"max_completion_length": "up"}),
    "sudden_collapse": ({m.REWARD: step(0.7, 0.7, 0.05), m.GRAD_NORM: lambda x: 25.0 if 0.7 <= x < 0.75 else 1.0},
                        {"learning_rate": "down"}),
    "clip_saturation": ({m.CLIP_HIGH: (0.3, 0.35), m.CLIP_LOW: (0.05, 0.05)},
                        {"learning_rate": "down", "epsilon_high": "up"}),
}


@pytest.mark.parametrize("seed", range(5))
def test_healthy_trace_has_no_findings(seed):
    assert diagnose(make_trace(seed=seed), StageConfig()) == []


@pytest.mark.parametrize("kind", sorted(PATHOLOGIES))
def test_each_detector_fires_on_its_pathology(kind):
    curves, suggests_ = PATHOLOGIES[kind]
    findings = {f.tool: f for f in diagnose(make_trace(curves), StageConfig())}
    assert kind in findings, f"{kind} not found in {sorted(findings)}"
    finding = findings[kind]
    assert suggests_.items() <= suggests(finding).items()
    assert finding.severity == severity_for(finding.score) and 0 < finding.score <= 1
    assert finding.evidence and any(ch.isdigit() for ch in finding.guidance)


@pytest.mark.parametrize("kind", sorted(PATHOLOGIES))
def test_a_trace_shorter_than_min_steps_is_not_judged(kind):
    curves, _ = PATHOLOGIES[kind]
    trace = make_trace(curves)
    assert kind in kinds(trace, StageConfig())  # the same curves over the full stage do fire
    assert MIN_STEPS == 8 and diagnose(trace[-7:], StageConfig()) == []
    assert diagnose([]) == []


SPIKE = {m.REWARD: 0.0, m.GREEDY_REWARD: 0.0, m.FRAC_ZERO_STD_HALF: 0.0,
         m.ENTROPY: 0.01, m.KL: 5.0, m.CLIPPED: 1.0, m.LENGTH: 500.0, m.GRAD_NORM: 100.0,
         m.FRAC_ZERO_STD: 1.0, m.CLIP_REGION: 0.9, m.CLIP_HIGH: 0.9}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("where", [0, 5, 20, 39])
def test_one_noisy_step_fires_nothing(where, seed):
    trace = make_trace(seed=seed)
    trace[where] |= SPIKE
    assert diagnose(trace) == []


@pytest.mark.parametrize("where", [0, 4, 7])
def test_one_noisy_step_fires_nothing_in_the_shortest_trace(where):
    # 3-step windows: medians of three still ignore one step. (Reward is left out here: over 3-step
    # windows the plateau test has little power either way, see test_one_low_step_does_not_stall_...)
    trace = make_trace(n=MIN_STEPS)
    trace[where] |= {k: v for k, v in SPIKE.items() if k not in (m.REWARD, m.GREEDY_REWARD)}
    assert diagnose(trace) == []


def test_one_low_step_does_not_stall_a_short_rising_trace():
    # At 12 steps a final low probe can bend the robust slope of the last 6 points under the noise
    # band; the trend is re-fitted without its worst point before a plateau fires.
    for seed in range(20):
        trace = make_trace(n=12, seed=seed)
        trace[-1][m.GREEDY_REWARD] = 0.0
        assert "reward_plateau" not in kinds(trace), seed


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_nonfinite_kl_is_a_blowup_even_in_one_step(bad):
    trace = make_trace()
    trace[17][m.KL] = bad
    findings = diagnose(trace)
    assert [f.tool for f in findings] == ["kl_blowup"]
    assert findings[0].score == 1.0 and findings[0].evidence["kl_nonfinite_steps"] == 1


def test_nan_inf_missing_and_junk_values_never_raise():
    rng = random.Random(3)
    trace = make_trace(PATHOLOGIES["sudden_collapse"][0])
    for row in trace:
        for key in list(row):
            if key != m.STEP and rng.random() < 0.3:
                row[key] = rng.choice([math.nan, math.inf, -math.inf, None, "n/a", True])
            elif key != m.STEP and rng.random() < 0.2:
                del row[key]
    trace += [{}, {m.STEP: 99}, "not a row", {m.EVAL_REWARD: math.nan, m.TRAIN_EVAL_REWARD: math.inf}]
    findings = diagnose(trace, StageConfig())
    assert all(isinstance(f, Finding) for f in findings)
    assert diagnose([{m.STEP: i} for i in range(30)]) == []  # nothing logged: nothing to say


def test_a_metric_never_logged_does_not_fire_its_detector():
    trace = [{k: v for k, v in row.items() if k not in (m.KL, m.ENTROPY)}
             for row in make_trace(PATHOLOGIES["entropy_collapse"][0] | {m.KL: (0.5, 0.5)})]
    assert not {"entropy_collapse", "kl_blowup"} & set(kinds(trace))


def test_zero_signal_groups_split_by_reward_level():
    mixed = make_trace({m.FRAC_ZERO_STD: (0.7, 0.7), m.REWARD: (0.2, 0.5)})
    found = {f.tool: f for f in diagnose(mixed)}
    assert "groups_zero_signal" in found
    assert suggests(found["groups_zero_signal"]) == {"num_generations": "up"}
    assert not {"groups_all_solved", "groups_none_solved"} & set(found)


def test_entropy_falling_while_reward_still_climbs_is_not_collapse():
    trace = make_trace({m.ENTROPY: lambda x: 1.9 * math.exp(-3 * x), m.REWARD: (0.1, 0.6)})
    assert "entropy_collapse" not in kinds(trace)


def test_length_growth_with_rising_reward_is_learning_not_explosion():
    assert "length_explosion" not in kinds(make_trace({m.LENGTH: (10.0, 45.0)}))


def test_reward_drop_without_grad_spike_is_not_a_sudden_collapse():
    trace = make_trace({m.REWARD: step(0.7, 0.7, 0.05), m.GREEDY_REWARD: step(0.7, 0.7, 0.05)})
    assert "sudden_collapse" not in kinds(trace)
    assert "too_hard" in kinds(trace)  # a stage that lost its greedy reward made no progress either


def test_sudden_collapse_without_grad_norm_fires_weaker():
    curves = PATHOLOGIES["sudden_collapse"][0]
    full = {f.tool: f for f in diagnose(make_trace(curves))}["sudden_collapse"]
    bare = [{k: v for k, v in r.items() if k != m.GRAD_NORM} for r in make_trace(curves)]
    weak = {f.tool: f for f in diagnose(bare)}["sudden_collapse"]
    assert weak.score < full.score and full.evidence["action"] == "rollback"


def test_kl_threshold_is_the_healthy_band_edge():
    assert "kl_blowup" not in kinds(make_trace({m.KL: (0.08, 0.08)}))
    assert "kl_blowup" in kinds(make_trace({m.KL: (0.15, 0.15)}))


@pytest.mark.parametrize("train,heldout,fires", [(0.74, 0.58, True), (0.70, 0.66, False)])
def test_train_heldout_gap(train, heldout, fires):
    trace = make_trace() + [{m.STEP: 40, m.EVAL_REWARD: heldout, m.TRAIN_EVAL_REWARD: train}]
    found = {f.tool: f for f in diagnose(trace, StageConfig(beta=0.0))}
    assert ("train_heldout_gap" in found) is fires
    if fires:
        assert suggests(found["train_heldout_gap"]) == {"beta": "up"}
        guidance = found["train_heldout_gap"].guidance
        assert "0.16" in guidance and "beta is 0.0" in guidance


def test_findings_are_sorted_by_score():
    # registered order here is plateau, kl, truncation: the ranking must reorder them
    curves = PATHOLOGIES["truncation"][0] | {m.KL: (0.02, 0.6), m.GREEDY_REWARD: (0.5, 0.5)}
    findings = diagnose(make_trace(curves))
    assert {"reward_plateau", "kl_blowup", "truncation"} <= {f.tool for f in findings}
    assert [f.score for f in findings] == sorted((f.score for f in findings), reverse=True)
    assert findings[0].tool == "truncation" and findings[-1].tool == "reward_plateau"


def test_guidance_quotes_the_numbers_and_the_config():
    curves, _ = PATHOLOGIES["truncation"]
    findings = diagnose(make_trace(curves), StageConfig(max_completion_length=16))
    finding = {f.tool: f for f in findings}["truncation"]
    assert "16-token" in finding.guidance and finding.evidence["max_completion_length"] == 16
    assert finding.evidence["clipped_ratio"] > 0.9 and finding.severity == "high"


def test_as_note_carries_guidance_evidence_and_suggests():
    curves, _ = PATHOLOGIES["entropy_collapse"]
    finding = {f.tool: f for f in diagnose(make_trace(curves))}["entropy_collapse"]
    note = as_note(finding)
    assert isinstance(note, FindingNote) and note.text == finding.guidance
    assert "temperature up" in note.evidence["suggests"] and note.evidence["kind"] == "entropy_collapse"
    assert note.evidence["entropy_start"] == finding.evidence["entropy_start"]


@pytest.mark.parametrize("bad", [{"suggests": {"not_a_knob": "up"}}, {"suggests": {"beta": "sideways"}},
                                 {"score": 1.5}, {"guidance": "  "}])
def test_finding_rejects_bad_fields(bad):
    good = {"kind": "k", "guidance": "g 1", "evidence": {"x": 1}, "severity": "low", "score": 0.1, "suggests": {}}
    training_finding(**good)  # the baseline is valid: each case breaks exactly one field
    fields = good | bad
    with pytest.raises(ValueError):
        training_finding(**fields)


def test_every_detector_is_registered_once():
    assert len(DETECTORS) == len(set(DETECTORS)) == 15 and all(callable(d) for d in DETECTORS)


def _evaluated(start: tuple[float, float], end: tuple[float, float]) -> list[dict]:
    """A healthy trace evaluated at both ends: (training-prompt reward, held-out reward)."""
    return ([{m.STEP: 0, m.TRAIN_EVAL_REWARD: start[0], m.EVAL_REWARD: start[1]}] + make_trace()
            + [{m.STEP: 40, m.TRAIN_EVAL_REWARD: end[0], m.EVAL_REWARD: end[1]}])


def test_a_gap_the_stage_inherited_is_not_blamed_on_it():
    """Warm start can leave a gap between training and held-out prompts; evaluated at its start
    too, a stage is blamed only for how much it widened the gap."""
    assert "train_heldout_gap" not in {f.tool for f in diagnose(_evaluated((0.60, 0.40), (0.62, 0.41)))}
    [gap] = [f for f in diagnose(_evaluated((0.60, 0.40), (0.80, 0.42))) if f.tool == "train_heldout_gap"]
    assert gap.evidence["gap_widened"] == pytest.approx(0.18) and "more than at the stage's start" in gap.guidance


@pytest.mark.parametrize("start,end,fires", [(0.32, 0.22, True), (0.32, 0.30, False), (0.10, 0.075, False),
                                              (0.30, 0.35, False)])
def test_heldout_regression_asks_for_smaller_steps(start, end, fires):
    found = {f.tool: f for f in diagnose(_evaluated((0.5, start), (0.5, end)), StageConfig(learning_rate=3e-4))}
    assert ("heldout_regression" in found) is fires
    if fires:
        f = found["heldout_regression"]
        assert suggests(f) == {"learning_rate": "down", "beta": "up"} and "learning rate 0.0003" in f.guidance
        assert f.evidence["drop"] == pytest.approx(start - end)
    # without a start evaluation there is nothing to compare with
    assert "heldout_regression" not in {f.tool for f in diagnose(make_trace() + [{m.STEP: 40, m.EVAL_REWARD: end}])}


@pytest.mark.parametrize("beta,curves,fires", [
    (0.01, {m.KL: (0.03, 0.03), m.GREEDY_REWARD: (0.45, 0.45)}, True),
    (0.0, {m.KL: (0.03, 0.03), m.GREEDY_REWARD: (0.45, 0.45)}, False),  # no KL term: nothing to lower
    (0.01, {m.KL: (0.03, 0.03)}, False),  # greedy reward still rising
    (0.01, {m.KL: (0.01, 0.09), m.GREEDY_REWARD: (0.45, 0.45)}, False),  # still drifting away
])
def test_a_kl_term_that_holds_the_policy_in_place_is_lowered(beta, curves, fires):
    found = {f.tool: f for f in diagnose(make_trace(curves), StageConfig(beta=beta))}
    assert ("kl_anchor_binding" in found) is fires
    if fires:
        binding = found["kl_anchor_binding"]
        assert suggests(binding) == {"beta": "down"} and "beta 0.01" in binding.guidance


def test_every_knob_a_finding_moves_has_findings_for_either_direction():
    """Directions a path takes are then the traces' doing, not the rules'."""
    traces = [(make_trace(curves), StageConfig()) for curves, _ in PATHOLOGIES.values()]
    traces.append((make_trace({m.KL: (0.03, 0.03), m.GREEDY_REWARD: (0.45, 0.45)}), StageConfig(beta=0.01)))
    moves: dict[str, set] = {}
    for trace, config in traces:
        for f in diagnose(trace, config):
            for knob, direction in suggests(f).items():
                moves.setdefault(knob, set()).add(direction)
    for knob in ("temperature", "beta", "learning_rate", "num_generations", "max_completion_length", "difficulty"):
        assert moves.get(knob) == {"up", "down"}, (knob, moves.get(knob))


def test_kl_is_judged_whatever_beta_is():
    """KL is logged at beta 0 too: a policy drifting from its reference is seen before any KL term exists."""
    found = {f.tool: f for f in diagnose(make_trace({m.KL: (0.05, 0.4)}), StageConfig(beta=0.0))}
    assert suggests(found["kl_blowup"]) == {"beta": "up", "learning_rate": "down"}
