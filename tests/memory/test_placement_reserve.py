"""The bytes a buffer is reserved at (:func:`loopwise.memory.placement.most_held`) equal the
explicit sum over every combination of its loops' iterations."""

import itertools
import random

import pytest

from loopwise.memory.placement import most_held
from loopwise.memory.schedule_loops import iteration, share, trips


def most_held_by_iterations(nbytes: int, cuts: tuple[tuple[int, int, bool], ...]) -> int:
    """:func:`most_held` by every combination of iterations: per iteration of the loops not outlived,
    the sum of the shares over the iterations of the outlived ones; the largest."""
    loops = [{"loop": f"l{k}", "extent": e, "size": s} for k, (e, s, _) in enumerate(cuts)]
    totals: dict[tuple, int] = {}
    for combo in itertools.product(*(range(trips(loop)) for loop in loops)):
        at = {loop["loop"]: iteration(loop, t) for loop, t in zip(loops, combo)}
        key = tuple(t for t, (_, _, kept) in zip(combo, cuts) if kept)
        totals[key] = totals.get(key, 0) + share(nbytes, [lp["loop"] for lp in loops], at)
    return max(totals.values())


@pytest.mark.parametrize("seed", range(40))
def test_most_held_equals_every_combination(seed):
    rng = random.Random(seed)
    cuts = []
    for _ in range(rng.randint(1, 3)):
        extent = rng.choice([1, 2, 3, 5, 7, 12, 16, 32, 45])
        cuts.append((extent, rng.randint(1, extent), rng.random() < 0.5))
    nbytes = rng.choice([1, 7, 1000, 12345, 3 * 197 * 64, 2**20 + 3])
    assert most_held(nbytes, tuple(cuts)) == most_held_by_iterations(nbytes, tuple(cuts))


def test_uneven_last_slab_and_an_outlived_loop_inside_a_kept_one():
    # kept outer loop of 3 uneven parts, outlived inner loop: the largest outer part's inner sum
    cuts = ((10, 4, True), (7, 3, False))
    assert most_held(1001, cuts) == most_held_by_iterations(1001, cuts) == 1001 * 4 // 10


def test_outlived_loop_before_a_kept_one():
    cuts = ((6, 4, False), (5, 2, True))
    assert most_held(999, cuts) == most_held_by_iterations(999, cuts)
