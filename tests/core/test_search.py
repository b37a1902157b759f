"""Tree search: conformance of every strategy, the MCTS mechanics, and synthetic landscapes."""

from __future__ import annotations

from loopwise.core.search import MCTS, Beam, BestOfN, Greedy, RandomSearch
from loopwise.core.search.conformance import SearchConformance


class TestMCTS(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return MCTS(seed=seed, max_evals=max_evals)


class TestGreedy(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return Greedy(seed=seed, max_evals=max_evals)


class TestBeam(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return Beam(3, seed=seed, max_evals=max_evals)


class TestRandomSearch(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return RandomSearch(seed=seed, max_evals=max_evals)


class TestBestOfN(SearchConformance):
    def make_search(self, seed, max_evals=None):
        return BestOfN(seed=seed, max_evals=max_evals)
