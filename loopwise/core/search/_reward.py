"""Turning outcomes into rewards: calibrated log speedups and a penalty per failure status.

A speedup is scored as ``z = (log(speedup) - mean) / std`` against the running mean and standard
deviation (Welford) of every log speedup observed so far in the run, the baseline's ``log(1) = 0``
included. Log, because speedups multiply along a path of moves; standardised, because a 1.05x
step matters early and is noise once 3x has been found. A failure scores a fixed penalty in the
same z units (``DEFAULT_PENALTIES``): failing is about as bad as a one-sigma-slow kernel, a wrong
answer worse than a compile error (it cost a full run and suggests a move that breaks semantics),
an exploit the worst there is, an OOM mild (often a size knob away from working).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from loopwise.core.records import Status
from loopwise.core.search._records import Outcome

DEFAULT_PENALTIES: Mapping[Status, float] = MappingProxyType(
    {
        Status.COMPILE_ERROR: -1.0,
        Status.WRONG_OUTPUT: -1.5,
        Status.TIMEOUT: -1.0,
        Status.CRASH: -1.5,
        Status.OOM: -0.5,
        Status.EXPLOIT: -3.0,
    }
)

#: Single rewards are clipped to this many standard deviations, so one outlier cannot dominate.
REWARD_CLIP = 3.0


class RewardCalibrator:
    """Scores outcomes against the running distribution of observed log speedups.

    Args:
        penalties: reward per failure status, in z units; statuses left out use the default.
        min_std: floor on the standard deviation, in log units (0.05 is about a 5% speedup), so
            the first few near-equal speedups do not blow up into huge z-scores.
    """

    def __init__(self, penalties: Mapping[str, float] | None = None, min_std: float = 0.05) -> None:
        table = dict(DEFAULT_PENALTIES)
        for status, penalty in (penalties or {}).items():
            status = Status(status)
            if status is Status.CORRECT:
                raise ValueError("'correct' has no penalty")
            table[status] = float(penalty)
        self.penalties: Mapping[Status, float] = MappingProxyType(table)
        self.min_std = min_std
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0

    @property
    def count(self) -> int:
        """How many log speedups were observed."""
        return self._n

    @property
    def mean(self) -> float:
        """Mean observed log speedup (0 before any)."""
        return self._mean

    @property
    def std(self) -> float:
        """Standard deviation of observed log speedups, never below ``min_std``."""
        if self._n < 2:
            return self.min_std
        return max(self.min_std, math.sqrt(self._m2 / (self._n - 1)))

    def observe(self, speedup: float) -> None:
        """Adds one correct candidate's speedup to the running distribution."""
        x = math.log(speedup)
        self._n += 1
        delta = x - self._mean
        self._mean += delta / self._n
        self._m2 += delta * (x - self._mean)

    def normalize(self, log_speedup: float) -> float:
        """Returns the z-score of a log speedup against the distribution so far (unclipped)."""
        return (log_speedup - self._mean) / self.std

    def penalty(self, status: Status | str) -> float:
        """Returns the reward of a failure with this status."""
        return self.penalties[Status(status)]

    def reward(self, outcome: Outcome) -> float:
        """Returns the calibrated reward of one outcome, clipped to ``±REWARD_CLIP``."""
        if not outcome.ok:
            return self.penalty(outcome.status)
        z = self.normalize(math.log(outcome.value))
        return max(-REWARD_CLIP, min(REWARD_CLIP, z))
