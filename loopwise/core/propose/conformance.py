"""The tests every proposer must pass. Needs pytest, so it is not imported by the package.

Use it by subclassing in a test module::

    class TestMyProposer(ProposerConformance):
        KIND = "kernels"

        def make_proposer(self, tmp_path):
            return MyProposer(...)          # one that answers

        def make_unanswering_proposer(self, tmp_path):
            return MyProposer(...)          # one that cannot (server down, nobody answers, ...)

The contract is the search's view: a request for ``n`` proposals gets exactly ``n`` results, each
a ``Proposal`` (with content and an origin) or a ``ProposalFailure`` (a reason and a detail a person
can act on); nothing a proposer meets (no answer, a bad reply, a role it does not play: the analyst and the
reviewer are roles too) is raised.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwise.core.propose._base import (
    FailureReason,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    Proposer,
    ProposalRole,
)


class ProposerConformance:
    """Behaviour shared by every ``Proposer``; subclass it and implement the two factories."""

    KIND = ""  # the registered engine whose prompts and replies the requests use; subclasses name it
    TASK = "Reference: class Model computes torch.relu(x) for x of shape (4096, 4096)."

    def make_proposer(self, tmp_path: Path) -> Proposer:
        """A proposer that answers (its model, agent or templates available)."""
        raise NotImplementedError

    def make_unanswering_proposer(self, tmp_path: Path) -> Proposer:
        """A proposer that cannot answer (no server, nobody writing answers, nothing to propose)."""
        raise NotImplementedError

    def request(self, n: int = 1, role: ProposalRole = ProposalRole.IMPROVE, candidate: str = "") -> ProposalRequest:
        """The request the tests send; override to give the proposer what it needs."""
        return ProposalRequest(task=self.TASK, candidate=candidate, n=n, kind=self.KIND, role=role,
                               log="RuntimeError: CUDA error: an illegal memory access" if role is ProposalRole.REPAIR else "")

    def _check(self, results: list, n: int) -> None:
        assert isinstance(results, list) and len(results) == n, results
        for r in results:
            assert isinstance(r, (Proposal, ProposalFailure)), r
            assert r.origin, r
            if isinstance(r, Proposal):
                assert r.ok and isinstance(r.content, str) and r.content.strip()
            else:
                assert not r.ok and isinstance(r.reason, FailureReason) and r.detail.strip()

    @pytest.mark.parametrize("n", [1, 3])
    def test_a_request_for_n_gets_exactly_n_results(self, tmp_path: Path, n: int) -> None:
        results = self.make_proposer(tmp_path).propose(self.request(n))
        self._check(results, n)
        assert any(isinstance(r, Proposal) for r in results), results

    def test_a_proposer_that_cannot_answer_returns_failures(self, tmp_path: Path) -> None:
        results = self.make_unanswering_proposer(tmp_path).propose(self.request(2))
        self._check(results, 2)
        assert all(isinstance(r, ProposalFailure) for r in results), results

    def test_a_repair_request_is_answered_or_declined_never_raised(self, tmp_path: Path) -> None:
        proposer = self.make_proposer(tmp_path)
        first = next((r for r in proposer.propose(self.request(1)) if isinstance(r, Proposal)), None)
        assert first is not None
        results = proposer.propose(self.request(2, ProposalRole.REPAIR, candidate=first.content))
        self._check(results, 2)

    @pytest.mark.parametrize("role", [ProposalRole.ANALYST, ProposalRole.REVIEW])
    def test_an_analyst_or_review_request_is_answered_or_declined_never_raised(self, tmp_path: Path,
                                                                               role: ProposalRole) -> None:
        results = self.make_proposer(tmp_path).propose(self.request(1, role, candidate="import torch\n"))
        self._check(results, 1)

    def test_an_answer_improves_on_the_candidate_it_was_given(self, tmp_path: Path) -> None:
        proposer = self.make_proposer(tmp_path)
        [first] = proposer.propose(self.request(1))
        assert isinstance(first, Proposal), first
        results = proposer.propose(self.request(2, candidate=first.content))
        self._check(results, 2)
