"""Whether other work kept the CPUs busy while something was timed.

The signal is the one-minute load average against the cores this process may use: above it, more
processes wanted a core than there were cores, and the timed process waited for one some of the
time. It is sampled before and after a measurement, and the larger of the two counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Load:
    """The load average and the cores it is compared with."""

    load_1min: float
    cpus: int

    @property
    def contended(self) -> bool:
        return self.load_1min > self.cpus

    def note(self) -> str:
        return (f"timed while the CPUs were busy (load average {self.load_1min:.1f} on {self.cpus} CPUs): "
                "not cached, measure again when the machine is quiet")


def sample() -> Load:
    """The load now (0 where the platform has no load average)."""
    from loopwise.kernels.backends import usable_cpus

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return Load(round(load, 2), usable_cpus())


def worst(*loads: Load) -> Load:
    return max(loads, key=lambda load: load.load_1min)
