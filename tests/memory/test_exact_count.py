"""polyhedral.count must give isl's own count_val on every set the tiling search counts: footprints
and the (tile, element) relations of loads and stores, for strided, dilated, padded (clipped) and
transposed convolution reads and writes, where halos overlap and strides leave existential
variables. The sets are drawn at random from a fixed seed, small enough for isl to count point by
point."""

from __future__ import annotations

import random

import pytest

from loopwise.memory.ir import Access, Operator, Tensor, conv2d_nest


def _random_conv(rng: random.Random) -> Operator:
    """A small convolution, direct or transposed, with a random stride, dilation, padding and window."""
    n, c, k, groups = rng.randint(1, 2), rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), 1
    if c == k and rng.random() < 0.3:
        groups = c  # depthwise
    r, s = rng.randint(1, 3), rng.randint(1, 3)
    stride, dil = (rng.randint(1, 3), rng.randint(1, 3)), (rng.randint(1, 2), rng.randint(1, 2))
    pad = (rng.randint(0, 2), rng.randint(0, 2))
    h, w = rng.randint(3, 9), rng.randint(3, 9)
    transposed = rng.random() < 0.4
    if transposed:
        out = tuple(max(1, (e - 1) * st + dl * (kk - 1) + 1 - 2 * p)
                    for e, st, dl, kk, p in zip((h, w), stride, dil, (r, s), pad))
    else:
        out = tuple(max(1, (e + 2 * p - dl * (kk - 1) - 1) // st + 1)
                    for e, st, dl, kk, p in zip((h, w), stride, dil, (r, s), pad))
    nest = conv2d_nest(n, c, k, r, s, groups, out, (h, w), stride, pad, dil, transposed)
    x_shape, y_shape = (n, c, h, w), (n, k, *out)
    w_shape = (c, k // groups, r, s) if transposed else (k, c // groups, r, s)
    return Operator("conv", nest.dims, (Tensor("X", x_shape), Tensor("W", w_shape), Tensor("Y", y_shape)),
                    reads=(Access("X", nest.reads[0]), Access("W", nest.reads[1])), writes=(Access("Y", nest.write),))


def _tiling_sets(op: Operator, rng: random.Random) -> list:
    """The sets :func:`loopwise.memory.tiling.traffic` counts, for a random tiling and tile order."""
    from loopwise.memory.tiling import _maps

    tiles = {d: rng.randint(1, e) for d, e in op.dims.items() if rng.random() < 0.6}
    order = list(op.dims)
    rng.shuffle(order)
    elements, prev, nxt, earlier = _maps(op, tiles, order)
    out = []
    for touched in elements.values():
        fresh = touched.subtract(prev.apply_range(touched))
        out += [touched.wrap(), fresh.wrap(), fresh.intersect(earlier.apply_range(touched)).wrap(),
                touched.subtract(nxt.apply_range(touched)).wrap()]
    return out


def _footprint_sets(op: Operator, rng: random.Random) -> list:
    from loopwise.memory.polyhedral import touched

    box = {}
    for d, e in op.dims.items():
        if rng.random() < 0.5:
            size = rng.randint(1, e)
            box[d] = (rng.randint(0, e - size), size)
    return [touched(op, t.name, box) for t in op.tensors]


def _random_strided_set(rng: random.Random):
    """A tile index ``t`` coupled to an element index ``i`` by a halo, beside indices ``j`` and ``b``,
    with a residue class or a division that joins two of them (or only one: then it splits)."""
    import islpy as isl

    t, a, lo, hi, m = rng.randint(1, 5), rng.randint(1, 6), rng.randint(-3, 2), rng.randint(1, 8), rng.randint(2, 4)
    n, j, q, c = rng.randint(2, 20), rng.randint(1, 7), rng.randint(2, 5), rng.randint(-1, 3)
    guard = rng.choice([f"(t + i + {c}) mod {m} = 0", f"exists e : i = {m}e + t", f"(i - {c}) mod {m} = 0",
                        f"exists e : t <= {m}e <= i", f"exists e : {m}e <= i + t < {m}e + 2",
                        f"j <= {m}*floor((t + {c})/{q}) + 1", f"j + {m}*floor((i + {c})/{q}) >= {c + 4}",
                        f"exists e : 0 <= {q}e - t <= 1 and 0 <= {m}e - j <= 1", f"(j + 2b + {c}) mod {m} = 0"])
    return isl.Set(f"{{ [t, i, j, b] : 0 <= t < {t} and {a}t + {lo} <= i < {a}t + {lo + hi} and 0 <= i < {n}"
                   f" and 0 <= j < {j} and 0 <= b < 3 and {guard} }}")


@pytest.mark.parametrize("seed", range(3))
def test_the_count_is_isls_count_on_random_convolution_sets(seed):
    from loopwise.memory.polyhedral import count

    rng = random.Random(seed)
    sets = []
    for _ in range(6):
        op = _random_conv(rng)
        sets += _tiling_sets(op, rng) + _footprint_sets(op, rng)
    sets += [_random_strided_set(rng) for _ in range(40)]
    for s in sets:
        assert count(s) == s.count_val().to_python(), s


def test_a_set_coupled_only_through_a_residue_class_is_not_split():
    import islpy as isl

    from loopwise.memory.polyhedral import count

    # t and i share no constraint of their own, only the parity of their sum: 2 * 3 of the 2 * 6 pairs
    s = isl.Set("{ [t, i, j] : 0 <= t < 2 and 0 <= i < 6 and 0 <= j < 5 and (t + i) mod 2 = 0 }")
    assert count(s) == 2 * 3 * 5 == s.count_val().to_python()
    s = isl.Set("{ [t, i] : 0 <= t < 3 and 0 <= i < 12 and exists e : 2t <= 3e <= i }")
    assert count(s) == s.count_val().to_python()
