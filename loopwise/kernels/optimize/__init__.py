"""``loopwise kernels optimize``: the search for faster kernels, recorded step by step in a run.

``settings`` holds what a run is started with and builds its search; ``loop`` is the loop itself
(ask -> propose -> judge -> tell until the budget); ``prompt`` is what the proposer is told;
``status`` reads a run back from its store; ``console`` is the command's terminal side. The public
names below load their module on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "ENERGY_SLACK": "settings", "PROFILING": "settings", "PROPOSERS": "settings", "SEARCHES": "settings",
    "Settings": "settings", "Tally": "settings", "make_search": "settings", "source_key": "settings",
    "REPROMPT_ROUNDS": "loop", "OptimizeRun": "loop", "profile_dir": "loop",
    "OptimizeStatus": "status", "Verdict": "status", "optimize_run": "status", "optimize_runs": "status",
    "run_optimize": "console",
}

__all__ = [
    "ENERGY_SLACK", "PROFILING", "PROPOSERS", "REPROMPT_ROUNDS", "SEARCHES", "OptimizeRun", "OptimizeStatus",
    "Settings", "Tally", "Verdict", "make_search", "optimize_run", "optimize_runs", "profile_dir", "run_optimize",
    "source_key",
]

if TYPE_CHECKING:
    from loopwise.kernels.optimize.console import run_optimize
    from loopwise.kernels.optimize.loop import REPROMPT_ROUNDS, OptimizeRun, profile_dir
    from loopwise.kernels.optimize.settings import (ENERGY_SLACK, PROFILING, PROPOSERS, SEARCHES, Settings, Tally,
                                                    make_search, source_key)
    from loopwise.kernels.optimize.status import OptimizeStatus, Verdict, optimize_run, optimize_runs


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
