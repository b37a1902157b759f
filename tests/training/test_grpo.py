"""The GRPO trainer and the policy it trains, from the user's side: padding changes nothing,
metrics carry their names and sane values, a checkpoint resumes bit for bit, and training on a
toy task raises the pass rate."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest
import torch

from loopwise.errors import UserError
from loopwise.training import metrics as M
from loopwise.training.config import StageConfig
from loopwise.training.grpo import GRPOTrainer, evaluate, load_checkpoint
from loopwise.training.warm import warm_start
from loopwise.training.policy import Vocab, make_policy, sample, token_logprobs


@dataclass(frozen=True)
class Ex:
    prompt: str
    answer: str
    meta: dict = field(default_factory=dict)


class Reverse:
    """Write the word backwards: 0.1 for the right length, 1.0 when right."""

    name, alphabet = "reverse", "abcd="

    def example(self, rng: random.Random, difficulty: int = 0) -> Ex:
        word = "".join(rng.choice("abcd") for _ in range(3))
        return Ex(word + "=", word[::-1])

    def score(self, e: Ex, completion: str) -> float:
        return 1.0 if completion == e.answer else 0.1 if len(completion) == len(e.answer) else 0.0


TASK = Reverse()
VOCAB = Vocab(TASK.alphabet)


def _policy(seed: int = 0):
    torch.manual_seed(seed)
    return make_policy(VOCAB, "smoke", max_len=32)


def _pool(n: int, seed: int) -> list[Ex]:
    rng = random.Random(seed)
    return [TASK.example(rng) for _ in range(n)]


def test_vocab_round_trips_and_names_a_foreign_character():
    assert VOCAB.decode(VOCAB.encode("ab=dc") + [VOCAB.end] + VOCAB.encode("zz"[:0] + "a")) == "ab=dc"
    with pytest.raises(UserError, match="'z' is not in the task's alphabet"):
        VOCAB.encode("abz")


def test_left_padding_changes_no_logit():
    policy = _policy().eval()
    alone = torch.tensor([VOCAB.encode("ab=")])
    logits_alone = policy(alone, alone != 0)
    batch = torch.tensor([[0, 0, 0] + VOCAB.encode("ab="), VOCAB.encode("abcdab")])
    logits_batch = policy(batch, batch != 0)
    assert torch.allclose(logits_alone[0], logits_batch[0, 3:], atol=1e-5)


def test_sampling_marks_the_end_token_and_truncation():
    policy = _policy()
    gen = torch.Generator().manual_seed(0)
    s = sample(policy, VOCAB, ["ab=", "abcd="], max_new_tokens=2, generator=gen)
    assert s.ids.shape == (2, 5 + s.completion_mask.shape[1]) and s.prompt_width == 5
    for row, mask, text, cut in zip(s.ids[:, 5:].tolist(), s.completion_mask.tolist(), s.texts, s.truncated):
        end = row.index(VOCAB.end) if VOCAB.end in row else None
        assert cut == (end is None)
        assert sum(mask) == (len(row) if end is None else end + 1)  # the end token counts, padding after does not
        assert text == VOCAB.decode(row)
    greedy = [sample(policy, VOCAB, ["ab="], 6, greedy=True).texts for _ in range(2)]
    assert greedy[0] == greedy[1]
    with pytest.raises(UserError, match="exceeds the policy's 32 positions"):
        sample(policy, VOCAB, ["ab="], 30)


def test_token_logprobs_are_the_sampled_tokens_and_zero_on_padding():
    policy = _policy()
    s = sample(policy, VOCAB, ["ab=", "dcba="], 6, temperature=0.7, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logp, ent = token_logprobs(policy, s, temperature=0.7, with_entropy=True)
        logits = policy(s.ids, s.valid)[0, s.prompt_width - 1].float() / 0.7
    assert torch.isfinite(logp).all() and torch.isfinite(ent).all()
    assert (logp[~s.completion_mask] == 0).all() and (logp[s.completion_mask] < 0).all()
    # by hand for row 0, first completion token
    logits[0] = -math.inf
    expected = torch.log_softmax(logits, -1)[s.ids[0, s.prompt_width]]
    assert logp[0, 0] == pytest.approx(float(expected), abs=1e-5)


def test_a_step_reports_every_metric_by_name_with_sane_values():
    cfg = StageConfig(max_completion_length=6, num_generations=4, prompts_per_step=4, beta=0.05, entropy_coef=0.01)
    row = GRPOTrainer(_policy(), VOCAB, TASK, cfg, _pool(50, 1), seed=0).step()
    for key in (M.REWARD, M.REWARD_STD, M.FRAC_ZERO_STD, M.ENTROPY, M.KL, M.CLIP_LOW, M.CLIP_HIGH, M.CLIP_REGION,
                M.LENGTH, M.CLIPPED, M.TERMINATED_LENGTH, M.GRAD_NORM, M.LR, M.LOSS):
        assert key in row and math.isfinite(row[key]), key
    assert 0 <= row[M.REWARD] <= 1 and 0 <= row[M.FRAC_ZERO_STD] <= 1 and 0 <= row[M.CLIPPED] <= 1
    assert row[M.ENTROPY] > 0 and row[M.KL] >= 0 and row[M.LR] == cfg.learning_rate
    assert 1 <= row[M.LENGTH] <= 6
    assert row[M.SAMPLES] == 16 and row[M.TOKENS] == round(row[M.LENGTH] * 16)  # the compute a step spent
    assert 1 <= row[M.MAX_LENGTH] <= 6 and row[M.MAX_LENGTH] >= row[M.LENGTH]
    assert 0 <= row[M.FRAC_ZERO_STD_HALF] <= 1 and row[M.FRAC_ZERO_STD_HALF] >= row[M.FRAC_ZERO_STD]
    no_kl = GRPOTrainer(_policy(), VOCAB, TASK, cfg.model_copy(update={"beta": 0.0}), _pool(50, 1), seed=0).step()
    assert no_kl[M.KL] >= 0  # measured without a KL term too: the diagnosis sees drift before beta is on


def test_one_update_per_batch_never_clips_and_equal_rewards_give_no_gradient():
    """With num_iterations 1 the ratio is exactly 1; a task whose every completion scores the same
    gives every group zero advantage: no signal, no update."""
    cfg = StageConfig(max_completion_length=4, num_generations=4, prompts_per_step=4, num_iterations=1)
    row = GRPOTrainer(_policy(), VOCAB, TASK, cfg, _pool(20, 2), seed=0).step()
    assert row[M.CLIP_REGION] == 0.0

    class Flat(Reverse):
        def score(self, e, completion):
            return 0.5

    policy = _policy()
    before = [p.detach().clone() for p in policy.parameters()]
    row = GRPOTrainer(policy, VOCAB, Flat(), cfg.model_copy(update={"num_iterations": 2}), _pool(20, 2), seed=0).step()
    assert row[M.FRAC_ZERO_STD] == 1.0 and row[M.REWARD_STD] == 0.0 and row[M.GRAD_NORM] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_a_checkpoint_resumes_the_stage_bit_for_bit(tmp_path):
    cfg = StageConfig(max_completion_length=6, num_generations=4, prompts_per_step=4, beta=0.02, steps=4)
    pool = _pool(60, 4)
    first = GRPOTrainer(_policy(), VOCAB, TASK, cfg, pool, seed=7)
    first.run(2)
    first.save(tmp_path / "stage.pt")
    straight = [dict(r) for r in first.run(2)[2:]]
    resumed = GRPOTrainer(_policy(seed=99), VOCAB, TASK, cfg, pool, seed=123)  # other weights, other seeds
    resumed.load(tmp_path / "stage.pt")
    again = resumed.run()[2:]
    assert again == straight and resumed.step_count == 4
    other = GRPOTrainer(_policy(), VOCAB, TASK, cfg.model_copy(update={"learning_rate": 1e-4}), pool)
    with pytest.raises(UserError, match="another configuration"):
        other.load(tmp_path / "stage.pt")


def test_bad_checkpoints_and_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_checkpoint(tmp_path / "nope.pt")
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(UserError, match="unreadable"):
        load_checkpoint(tmp_path / "torn.pt")
    with pytest.raises(UserError, match="no training examples"):
        GRPOTrainer(_policy(), VOCAB, TASK, StageConfig(), [])
    with pytest.raises(UserError, match="warm-start target"):
        warm_start(_policy(), VOCAB, TASK, _pool(5, 0), _pool(5, 1), 6, target=(0.9, 0.1))


def test_warm_start_then_grpo_raises_the_pass_rate():
    policy = _policy()
    train, check = _pool(2000, 0), _pool(100, 1)
    ws = warm_start(policy, VOCAB, TASK, train, check, 6, target=(0.2, 0.9), check_every=25, seed=0)
    assert ws["in_target"], ws
    base = evaluate(policy, VOCAB, TASK, check, 6, greedy=False, seed=5)
    cfg = StageConfig(max_completion_length=6, num_generations=8, prompts_per_step=8, steps=20, learning_rate=1e-3)
    GRPOTrainer(policy, VOCAB, TASK, cfg, train, seed=1).run()
    after = evaluate(policy, VOCAB, TASK, check, 6, greedy=False, seed=5)
    assert after > base + 0.1, (base, after)


def _drifted(steps: int = 12) -> tuple[dict, dict, StageConfig]:
    """The initial weights and the weights after one stage at a large learning rate."""
    cfg = StageConfig(max_completion_length=6, num_generations=4, prompts_per_step=4, steps=steps, learning_rate=3e-3)
    policy = _policy()
    initial = {k: v.clone() for k, v in policy.state_dict().items()}
    GRPOTrainer(policy, VOCAB, TASK, cfg, _pool(60, 3), seed=0).run()
    return initial, {k: v.clone() for k, v in policy.state_dict().items()}, cfg


def test_a_reference_of_the_initial_weights_lets_the_kl_detector_see_drift():
    """The second stage of a drifting schedule: measured against its own start its KL is ~0 and
    nothing fires; against the schedule's initial policy the inherited drift is a KL blow-up."""
    from loopwise.training.diagnose import diagnose

    initial, drifted, cfg = _drifted()

    def second_stage(reference):
        policy = _policy()
        policy.load_state_dict(drifted)
        slow = cfg.model_copy(update={"learning_rate": 1e-6})
        return GRPOTrainer(policy, VOCAB, TASK, slow, _pool(60, 3), seed=1, reference=reference).run()

    to_start, to_initial = second_stage(None), second_stage(initial)
    assert max(r[M.KL] for r in to_start) < 1e-3 < min(r[M.KL] for r in to_initial)
    assert "kl_blowup" in {f.tool for f in diagnose(to_initial)}
    assert "kl_blowup" not in {f.tool for f in diagnose(to_start)}


def test_the_probe_is_logged_on_its_steps_and_changes_no_training():
    cfg = StageConfig(max_completion_length=6, num_generations=4, prompts_per_step=4, steps=5)
    pool, check = _pool(60, 5), _pool(16, 6)
    calls = []

    def probe(policy):
        calls.append(1)
        return evaluate(policy, VOCAB, TASK, check, 6)

    plain = GRPOTrainer(_policy(), VOCAB, TASK, cfg, pool, seed=2).run()  # beta 0: KL measured on every step
    probed = GRPOTrainer(_policy(), VOCAB, TASK, cfg, pool, seed=2, probe=probe, probe_every=2,
                         probe_prompts=len(check)).run()
    assert [r[M.STEP] for r in probed if M.GREEDY_REWARD in r] == [2, 4, 5] and len(calls) == 3  # and the last
    assert [r[M.GREEDY_PROMPTS] for r in probed if M.GREEDY_REWARD in r] == [16, 16, 16]  # what it can resolve
    assert [r[M.STEP] for r in probed if M.KL in r] == [2, 4, 5]  # at beta 0, KL on the probe's steps
    assert [r[M.KL] for r in probed if M.KL in r] == [plain[i][M.KL] for i in (1, 3, 4)]
    assert [{k: v for k, v in r.items() if k not in (M.GREEDY_REWARD, M.GREEDY_PROMPTS, M.KL)} for r in probed] == \
        [{k: v for k, v in r.items() if k != M.KL} for r in plain]
    assert all(0 <= r[M.GREEDY_REWARD] <= 1 for r in probed if M.GREEDY_REWARD in r)


def test_an_update_with_a_non_finite_loss_is_skipped_and_counted(monkeypatch):
    """An overflow (reduced precision) makes the loss NaN: the weights stay as they were, the row
    says how many updates were skipped, and it carries no NaN."""
    import loopwise.training.grpo as grpo

    cfg = StageConfig(max_completion_length=4, num_generations=4, prompts_per_step=4, num_iterations=2)
    plain, calls = grpo.token_logprobs, []

    def overflowing(policy, s, temperature=1.0, with_entropy=False):
        out = plain(policy, s, temperature, with_entropy)
        if with_entropy:
            calls.append(1)
            logp, ent = out
            return logp * float("nan"), ent
        return out

    monkeypatch.setattr(grpo, "token_logprobs", overflowing)
    policy = _policy()
    before = [p.detach().clone() for p in policy.parameters()]
    row = GRPOTrainer(policy, VOCAB, TASK, cfg, _pool(20, 2), seed=0).step()
    assert len(calls) == 2 and row[M.SKIPPED_UPDATES] == 2
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    assert M.LOSS not in row and all(not isinstance(v, float) or math.isfinite(v) for v in row.values())


def test_a_reward_that_is_not_a_number_is_a_one_line_error():
    class Broken(Reverse):
        def score(self, e, completion):
            return float("nan")

    cfg = StageConfig(max_completion_length=4, num_generations=2, prompts_per_step=2)
    with pytest.raises(UserError, match="reward must be a finite number"):
        GRPOTrainer(_policy(), VOCAB, Broken(), cfg, _pool(10, 2), seed=0).step()


def test_sampling_from_a_policy_whose_weights_are_nan_is_a_one_line_error():
    """On a GPU, torch.multinomial on NaN probabilities is a device-side assert that leaves the
    process's CUDA context unusable; the sampler says what happened instead."""
    policy = _policy()
    with torch.no_grad():
        for p in policy.parameters():
            p.fill_(float("nan"))
    for greedy in (False, True):
        with pytest.raises(UserError, match="logits hold NaN"):
            sample(policy, VOCAB, ["abc="], 3, greedy=greedy)
