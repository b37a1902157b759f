"""The expert proposer: which variants and moves it proposes, in what order."""

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import variants
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.problem import load_problem

from expert_judging import HERE, PARTIAL, problem_variant  # noqa: E402 - tests/kernels/expert on sys.path


def test_channels_last_is_proposed_only_where_a_convolution_comes_before_the_tail():
    from loopwise.kernels.expert.generate import fits

    conv = capture(load_problem(str(HERE / "conv_epilogue.py")))
    chain = capture(load_problem(str(HERE / "chain.py")))
    assert fits(conv, {"template": "elementwise", "channels_last": 1})
    assert not fits(chain, {"template": "elementwise", "channels_last": 1})  # no convolution: nothing to lay out


def test_variants_measured_to_lose_are_not_proposed_first_but_stay_reachable(tmp_path):
    """graph_conv lost to cuDNN on every problem with a plain partition too (H200), gathering NCHW:
    from the reference the proposer spends its first proposals on the plain plan's moves; a later
    step still proposes graph_conv's defaults; where graph_conv is the only plan it comes first.
    Read NHWC it lost as well: with 16 input channels it stays a later sibling, whose neighbours
    include the nhwc move (never where no convolution has the channels for it)."""
    from loopwise.core.propose import ProposalRequest
    from loopwise.kernels.expert.proposer import LATER, ExpertProposer

    assert "graph_conv" in LATER
    both = load_problem(str(HERE / "partial_groupnorm.py"))
    assert sorted(variants(capture(both))) == sorted(["graph", "graph_norm", "graph_conv"])
    expert = ExpertProposer(both, seed=0)
    first = expert.propose(ProposalRequest(task="", n=6))
    assert {ExpertProposer._parse_moves(p.content)["template"] for p in first} == {"graph", "graph_norm"}
    later = expert.propose(ProposalRequest(task="", candidate=first[0].content, n=12))
    assert "graph_conv" in {ExpertProposer._parse_moves(p.content)["template"] for p in later}
    alone = tmp_path / "alone.py"  # a convolution's ReLU is no pass of its own: graph_conv is the only plan
    alone.write_text(PARTIAL.format(body="x = torch.relu(self.conv(x))\n        return torch.sort(x, -1).values", extra=""))
    only = ExpertProposer(load_problem(str(alone)), seed=0).propose(ProposalRequest(task="", n=2))
    assert all(ExpertProposer._parse_moves(p.content)["template"] == "graph_conv" for p in only)
    wide = problem_variant(tmp_path, "partial_groupnorm.py", {"in_channels=3": "in_channels=16",
                                                        "torch.randn(2, 3, 13, 11)": "torch.randn(2, 16, 13, 11)"})
    for path, reachable in ((wide, True), (HERE / "partial_groupnorm.py", False)):
        expert = ExpertProposer(load_problem(str(path)), seed=0)
        first = expert.propose(ProposalRequest(task="", n=6))
        assert {ExpertProposer._parse_moves(p.content)["template"] for p in first} == {"graph", "graph_norm"}
        conv = next(p for p in expert.propose(ProposalRequest(task="", candidate=first[0].content, n=12))
                    if ExpertProposer._parse_moves(p.content)["template"] == "graph_conv")
        around = expert.propose(ProposalRequest(task="", candidate=conv.content, n=40))
        assert any(ExpertProposer._parse_moves(p.content)["nhwc"] for p in around) == reachable


def test_exploration_draws_moves_not_tried_yet():
    """Past the defaults and their neighbours the expert explores at random, but never proposes
    moves it has proposed before while untried ones are left (a pooling template: 12 points)."""
    from loopwise.core.propose import ProposalRequest
    from loopwise.kernels.expert.proposer import SPACE

    proposer = ExpertProposer(load_problem(str(HERE / "pool.py")), seed=5)
    size = len(SPACE["pool"]["block"]) * len(SPACE["pool"]["warps"])
    first = proposer.propose(ProposalRequest(task="", n=2))
    later = proposer.propose(ProposalRequest(task="", candidate=first[0].content, n=size - 2))
    sources = [p.content for p in (*first, *later)]
    assert len(set(sources)) == size

