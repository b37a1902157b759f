"""The expert proposer passes the proposer contract every proposer passes
(``loopwise.core.propose.conformance``): on a problem its templates cover it answers with complete
files, on one they do not it says why as failures, and repair requests are declined as failures."""

from __future__ import annotations

from pathlib import Path

from loopwise.core.propose.conformance import ProposerConformance
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

PROBLEMS = Path(__file__).parents[1] / "expert_problems"


class TestExpertProposer(ProposerConformance):
    KIND = "kernels"

    def make_proposer(self, tmp_path):
        return ExpertProposer(load_problem(str(PROBLEMS / "softmax_rows.py")), seed=0)

    def make_unanswering_proposer(self, tmp_path):
        return ExpertProposer(load_problem(str(PROBLEMS / "unsupported_conv.py")), seed=0)
