"""Names of the per-step metrics the trainer writes and the diagnosis reads (TRL's names, so a TRL
``trainer_state.json`` ``log_history`` reads the same way).

A *trace* is a list of per-step dicts, oldest first; every dict has ``step`` and may lack any other
key (a metric not computed in that step, e.g. ``greedy_reward`` between probes). Held-out
evaluations are rows with ``eval/reward`` (and ``step``), written at stage ends.
"""

from __future__ import annotations

STEP = "step"
REWARD = "reward"  # mean reward over the step's completions
REWARD_STD = "reward_std"  # mean over groups of the within-group reward std
FRAC_ZERO_STD = "frac_reward_zero_std"  # share of groups whose rewards are all equal (no signal)
# the same share for each group's two halves taken apart: what half the group size would have given
FRAC_ZERO_STD_HALF = "frac_reward_zero_std_half"
ENTROPY = "entropy"  # mean per-token entropy of the sampling distribution, nats
KL = "kl"  # mean per-token k3 estimate to the reference policy (at beta 0: on the probe's steps)
CLIP_LOW = "clip_ratio/low_mean"  # share of tokens clipped below (ratio < 1 - epsilon, negative advantage)
CLIP_HIGH = "clip_ratio/high_mean"  # share clipped above (ratio > 1 + epsilon_high, positive advantage)
CLIP_REGION = "clip_ratio/region_mean"  # either
LENGTH = "completions/mean_length"
MAX_LENGTH = "completions/max_length"  # the step's longest completion, end token included
CLIPPED = "completions/clipped_ratio"  # share of completions cut at max_completion_length
TERMINATED_LENGTH = "completions/mean_terminated_length"  # mean length of those that ended themselves
SAMPLES = "completions/samples"  # completions generated in the step (prompts x group size)
TOKENS = "completions/tokens"  # completion tokens generated in the step, end tokens included
GRAD_NORM = "grad_norm"  # before clipping
LR = "learning_rate"
LOSS = "loss"  # with GRAD_NORM, averaged over the step's applied updates (absent when none was)
SKIPPED_UPDATES = "nonfinite_updates"  # updates skipped: the loss or the gradient was not finite
# greedy reward on a fixed probe of tune prompts at the stage's difficulty, measured during the stage
# (every few steps and after the last): unlike ``reward`` it does not move with the temperature
GREEDY_REWARD = "greedy_reward"
GREEDY_PROMPTS = "greedy_prompts"  # how many prompts that probe scored (what its reward can resolve)
EVAL_REWARD = "eval/reward"  # held-out reward (tuning split), at stage ends
TRAIN_EVAL_REWARD = "eval/train_reward"  # the same measurement on training prompts, for the gap

ALL = (REWARD, REWARD_STD, FRAC_ZERO_STD, FRAC_ZERO_STD_HALF, ENTROPY, KL, CLIP_LOW, CLIP_HIGH, CLIP_REGION, LENGTH,
       MAX_LENGTH, CLIPPED, TERMINATED_LENGTH, SAMPLES, TOKENS, GRAD_NORM, LR, LOSS, GREEDY_REWARD, GREEDY_PROMPTS, EVAL_REWARD,
       TRAIN_EVAL_REWARD, SKIPPED_UPDATES)
