"""The training engine (after LLMZero): a tree search over staged GRPO post-training schedules that
diagnoses every checkpoint and proposes coordinated multi-parameter transitions.

Modules: :mod:`~loopwise.training.config` (a stage's knobs), :mod:`~loopwise.training.metrics` (the
per-step metric names), :mod:`~loopwise.training.tasks` (generators and verifiers),
:mod:`~loopwise.training.policy` (small causal transformers), :mod:`~loopwise.training.grpo` (the
trainer), :mod:`~loopwise.training.diagnose` (pathologies over a metric trace) and
:mod:`~loopwise.training.transitions` (the expert's stage-to-stage changes).
"""
