"""Tree search over candidates, driven from outside through ask/tell.

A search owns the tree and never evaluates anything: ``ask`` names the node to expand, the driver
proposes children elsewhere, ``add_child`` adds them (deduplicated by key) and ``tell`` records
each child's ``Outcome``. ``MCTS`` is the main strategy; ``Greedy``, ``Beam``, ``RandomSearch``
and ``BestOfN`` are baselines on the same interface. Every strategy passes
``loopwise.core.search.conformance.SearchConformance`` (imported on its own: it needs pytest).
"""

from loopwise.core.search._base import STATE_VERSION, Search
from loopwise.core.search._baselines import Beam, BestOfN, Greedy, RandomSearch
from loopwise.core.search._mcts import MCTS, Stagnation, Widening
from loopwise.core.search._memory import NoteRecord, SearchMemory
from loopwise.core.records import Status
from loopwise.core.search._records import Expansion, Node, NodeState, Outcome
from loopwise.core.search._reward import DEFAULT_PENALTIES, REWARD_CLIP, RewardCalibrator
from loopwise.core.search._tree import Pruning

__all__ = [
    "DEFAULT_PENALTIES",
    "MCTS",
    "REWARD_CLIP",
    "STATE_VERSION",
    "Beam",
    "BestOfN",
    "Expansion",
    "Greedy",
    "Node",
    "NodeState",
    "NoteRecord",
    "Outcome",
    "Pruning",
    "RandomSearch",
    "RewardCalibrator",
    "Search",
    "SearchMemory",
    "Stagnation",
    "Status",
    "Widening",
]
