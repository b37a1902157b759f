"""slab_floor is a floor: never above the traffic best_slab finds for the same group (else the
planner would skip a group that beats its bar and the plan would change), infinite only when no
slab size fits, and above the old floor (every invariant loaded once) where slabs must be small."""

from __future__ import annotations

import math
import random

import numpy as np

from loopwise.memory.slab_floor import slab_floor
from loopwise.memory.slabs import Invariants, best_slab


def _random_group(rng: random.Random):
    length = rng.randint(1, 12)
    extent = rng.choice([2, 3, 8, 32, 128])
    outer_extent = rng.choice([1, 1, 4, 12])
    held = {kind: np.cumsum([rng.choice([0, 0, rng.randint(1, 4_000)]) for _ in range(length)]).astype(float)
            for kind in ("both", "inner", "whole", "span")}
    invariants = []
    for k in range(rng.randint(0, 10)):
        first = rng.randint(0, length - 1)
        whole = rng.choice([0, rng.randint(1, 6_000)])
        invariants.append((whole, rng.randint(0, 3) * whole + rng.randint(0, 50), first, rng.randint(first, length - 1),
                           f"w{k}", rng.random() < 0.5, outer_extent > 1 and rng.random() < 0.3))
    capacity = rng.randint(2_000, 40_000)
    spec = [("o" if outer_extent > 1 else None, "i")] * length
    args = (capacity, tuple(f"op{k}" for k in range(length)), rng.randint(0, 10_000), rng.randint(0, 5_000), held,
            Invariants(invariants), spec, extent, outer_extent, ())
    charged = np.zeros(length)
    return args, charged


def test_the_floor_is_never_above_the_best_slab_traffic():
    rng = random.Random(7)
    tight = 0
    for _ in range(400):
        args, charged = _random_group(rng)
        capacity, names, moved, outer_moved, held, inv, spec, extent, outer_extent, resident = args
        grp = best_slab(capacity, names, moved, outer_moved, held, inv, spec, extent, outer_extent, resident, charged,
                        charged.copy())
        floor = slab_floor(capacity, moved, outer_moved, held, inv, extent, outer_extent)
        if grp is None:
            continue
        assert floor <= grp.traffic_bytes, (floor, grp)
        tight += floor > moved + outer_moved + inv.total_loaded
    assert tight > 20  # the floor counts the slabs that capacity forces, not only loads made once


def test_no_slab_size_fits_gives_an_infinite_floor():
    held = {kind: np.array([10_000.0, 20_000.0]) for kind in ("both", "inner", "whole", "span")}
    assert slab_floor(1_000, 0, 0, held, Invariants([]), 8, 1) == math.inf
    assert slab_floor(1_000, 0, 0, held, Invariants([]), 1, 1) == math.inf  # an extent of 1 makes no slabs
