"""Seeds compared in pairs: the 95% t-interval of a mean and of a paired difference, checked on
numbers whose interval is known, and "no difference" when the interval holds 0."""

from __future__ import annotations

import math

import pytest

from loopwise.training.stats import mean_interval, paired_difference, t_quantile


def test_t_quantiles_match_the_table():
    # t(0.975, df) from any t table
    for df, t in ((1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045), (60, 2.000), (120, 1.980)):
        assert t_quantile(df) == pytest.approx(t, abs=2e-3), df


def test_a_known_interval():
    # mean 3, sample sd sqrt(2.5), n 5: half-width 2.776 * sqrt(2.5 / 5)
    iv = mean_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert iv.mean == 3.0 and iv.n == 5
    assert iv.low == pytest.approx(3 - 2.7764 * math.sqrt(0.5), abs=1e-3)
    assert iv.high == pytest.approx(3 + 2.7764 * math.sqrt(0.5), abs=1e-3)


def test_paired_differences_are_taken_per_seed():
    tree = {0: 0.50, 1: 0.60, 2: 0.55, 3: 0.70, 4: 0.65}
    grid = {0: 0.40, 1: 0.52, 2: 0.44, 3: 0.61, 4: 0.53}  # tree - grid: .10 .08 .11 .09 .12
    d = paired_difference(tree, grid)
    assert d.mean == pytest.approx(0.10) and d.n == 5
    half = 2.7764 * math.sqrt(0.00025) / math.sqrt(5)  # sd of the differences: sqrt(0.00025)
    assert (d.low, d.high) == pytest.approx((0.10 - half, 0.10 + half), abs=1e-4)
    assert d.verdict() == "higher"
    # unpaired these would overlap; a seed only one side has is left out
    noisy = paired_difference({0: 0.5, 1: 0.4, 2: 0.6, 9: 1.0}, {0: 0.45, 1: 0.5, 2: 0.55})
    assert noisy.n == 3 and noisy.low < 0 < noisy.high and noisy.verdict() == "no difference"
    assert paired_difference(grid, tree).verdict() == "lower"


def test_one_seed_has_no_interval():
    iv = mean_interval([0.4])
    assert iv.mean == 0.4 and math.isnan(iv.low) and iv.verdict() == "one seed: no interval"
    assert math.isnan(mean_interval([]).mean)


def test_summaries_compare_every_method_to_the_tree():
    from loopwise.training.stats import summarize

    rewards = {0: {"tree": 0.5, "grid": 0.4}, 1: {"tree": 0.6, "grid": 0.52}, 2: {"tree": 0.55, "grid": 0.44}}
    tree, grid = summarize(rewards)
    assert (tree.method, tree.versus_reference) == ("tree", None) and tree.test.mean == pytest.approx(0.55)
    assert grid.method == "grid" and grid.versus_reference.mean == pytest.approx(0.0966667, abs=1e-6)
    assert summarize({0: {"grid": 0.4}, 1: {"grid": 0.5}})[0].versus_reference is None


def test_seeds_that_all_differ_by_the_same_amount_are_no_evidence_of_a_direction_below_six_seeds():
    """Greedy rewards on a few dozen prompts are quantized: three seeds where the tree scored one
    partial credit (0.1 / 48) above the grid each time give a zero-width t-interval, which is not a
    measured spread. Its direction needs what a sign test needs: every seed the same way, at
    least six seeds (two-sided p = 2^(1-n) < 0.05)."""
    tree = {0: 0.0833333, 1: 0.0833333, 2: 0.1104167}
    grid = {s: r - 0.1 / 48 for s, r in tree.items()}
    same = paired_difference(tree, grid)
    assert same.low == pytest.approx(same.high) and same.low > 0
    assert same.verdict() == "no difference"
    six = paired_difference({s: 0.5 for s in range(6)}, {s: 0.4 for s in range(6)})
    assert six.verdict() == "higher"
    assert paired_difference({s: 0.4 for s in range(6)}, {s: 0.5 for s in range(6)}).verdict() == "lower"
    assert paired_difference({0: 0.3, 1: 0.3}, {0: 0.3, 1: 0.3}).verdict() == "no difference"
    spread = paired_difference({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.3, 1: 0.35, 2: 0.42})
    assert spread.low < spread.high and spread.verdict() == "higher"  # a measured spread: the t-interval decides


def test_a_difference_that_holds_alone_is_also_judged_with_every_comparison_of_the_family():
    """Six methods against the tree: each interval alone is a 95% interval, so one of six can
    exclude 0 by chance; the family verdict takes all six at once (Bonferroni: each at
    1 - 0.05 / 6), and a clear difference survives it."""
    from loopwise.training.stats import summarize

    tree = {0: 0.338, 1: 0.400, 2: 0.353, 3: 0.316, 4: 0.317}
    others = {"fixed": [0.395, 0.286, 0.309, 0.287, 0.259], "staged": [0.239, 0.217, 0.266, 0.312, 0.175],
              "grid": [0.238, 0.292, 0.338, 0.323, 0.384], "random": [0.081, 0.427, 0.116, 0.367, 0.241],
              "tpe": [0.144, 0.139, 0.291, 0.125, 0.080], "pbt": [0.100, 0.441, 0.169, 0.241, 0.252]}
    rewards = {s: {"tree": tree[s], **{m: v[s] for m, v in others.items()}} for s in tree}
    by = {s.method: s for s in summarize(rewards)}
    staged = by["staged"]
    assert staged.versus_reference.verdict() == "higher"  # [+0.019, +0.186] alone
    assert staged.comparisons == 6 and staged.versus_family.verdict() == "no difference"
    assert staged.versus_family.low < staged.versus_reference.low and staged.versus_family.mean == staged.versus_reference.mean
    assert by["tree"].versus_family is None and by["tree"].comparisons == 6
    clear = {s: {"tree": 0.5 + 0.01 * s, "a": 0.3 + 0.012 * s, "b": 0.45 + 0.01 * s} for s in range(5)}
    a = next(s for s in summarize(clear) if s.method == "a")
    assert a.comparisons == 2 and a.versus_family.verdict() == "higher"
    alone = next(s for s in summarize({s: {"tree": v, "staged": rewards[s]["staged"]} for s, v in tree.items()})
                 if s.method == "staged")
    assert alone.comparisons == 1 and alone.versus_family == alone.versus_reference


def test_without_spread_the_family_verdict_needs_the_seeds_a_sign_test_at_its_level_needs():
    """Six seeds all one way give p = 2^-5 < 0.05 alone, but not below 0.05 / 3."""
    from loopwise.training.stats import summarize

    rewards = {s: {"tree": 0.5, "a": 0.4, "b": 0.45, "c": 0.5} for s in range(6)}
    a = next(s for s in summarize(rewards) if s.method == "a")
    assert a.versus_reference.verdict() == "higher" and a.versus_family.verdict() == "no difference"
    seven = {s: {"tree": 0.5, "a": 0.4, "b": 0.45, "c": 0.5} for s in range(7)}  # 2^-6 < 0.05 / 3
    assert next(s for s in summarize(seven) if s.method == "a").versus_family.verdict() == "higher"


def test_a_method_with_one_paired_seed_makes_no_claim_and_is_not_counted_in_the_family():
    from loopwise.training.stats import summarize

    rewards = {0: {"tree": 0.5, "a": 0.3, "b": 0.4, "c": 0.2}, 1: {"tree": 0.6, "a": 0.35, "b": 0.45},
               2: {"tree": 0.55, "a": 0.3}}
    by = {s.method: s for s in summarize(rewards)}
    assert by["c"].versus_reference.n == 1 and by["c"].versus_family.verdict() == "one seed: no interval"
    assert {m: by[m].comparisons for m in "abc"} == {"a": 2, "b": 2, "c": 2}


def test_the_cli_summary_takes_its_family_verdict_from_the_family_interval():
    from loopwise.training.cli import summarize_seeds

    tree = [0.338, 0.400, 0.353, 0.316, 0.317]
    others = {"fixed": [0.395, 0.286, 0.309, 0.287, 0.259], "staged": [0.239, 0.217, 0.266, 0.312, 0.175],
              "grid": [0.238, 0.292, 0.338, 0.323, 0.384]}
    outs = [{"settings": {"seed": s}, "results": {"tree": {"test_reward": tree[s]},
                                                  **{m: {"test_reward": v[s]} for m, v in others.items()}}}
            for s in range(5)]
    rows = summarize_seeds(outs)
    staged = next(r for r in rows if r["method"] == "staged")
    assert staged["comparisons"] == 3 and staged["verdict"] == "higher" and staged["verdict_all"] == "no difference"
    assert staged["versus_tree_all"]["confidence"] == pytest.approx(1 - 0.05 / 3)


def test_the_seeds_table_shows_each_pair_alone_and_all_at_once(capsys, monkeypatch):
    from loopwise.training.cli import _seeds_table, summarize_seeds

    monkeypatch.setenv("COLUMNS", "240")
    tree = [0.338, 0.400, 0.353, 0.316, 0.317]
    staged = [0.239, 0.217, 0.266, 0.312, 0.175]
    outs = [{"settings": {"seed": s}, "results": {"tree": {"test_reward": tree[s]}, "staged": {"test_reward": staged[s]},
                                                  "grid": {"test_reward": tree[s] - 0.01 * (s - 2)}}} for s in range(5)]
    rows = summarize_seeds(outs)
    _seeds_table(rows, 5)
    shown = capsys.readouterr().out
    w = next(r for r in rows if r["method"] == "staged")["versus_tree_all"]
    assert "all 2 at once" in shown and "each interval at 97.50%, Bonferroni" in shown
    assert f"[{w['low']:+.3f}, {w['high']:+.3f}] no difference" in shown and "higher" in shown
