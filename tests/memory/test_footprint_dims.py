"""A tile's footprint of a tensor counted with the box cut to the loop dimensions the tensor's
accesses name (:func:`loopwise.memory.tiling.tile_footprints`) equals the count over the whole box:
a dimension no access names changes nothing of what a tile touches."""

from __future__ import annotations

import itertools

import pytest

from loopwise.memory.ir import conv2d, matmul
from loopwise.memory.polyhedral import count, touched
from loopwise.memory.tiling import tile_footprints, tile_sizes

OPS = [matmul("mm", 24, 40, 16), conv2d("conv", 2, 4, 6, 6, 8, 3, 3, stride=2, pad=1)]


def _whole_box(op, tiles) -> dict[str, int]:
    """Footprints of the second full tile (or the first), every dimension in the box."""
    size = tile_sizes(op, tiles)
    box = {d: (size[d] if 2 * size[d] <= e else 0, size[d]) for d, e in op.dims.items()}
    return {t.name: count(touched(op, t.name, box)) for t in op.tensors}


@pytest.mark.parametrize("case", range(len(OPS)))
def test_footprints_with_only_the_named_dimensions_equal_the_whole_box(case):
    op = OPS[case]
    dims = list(op.dims)
    checked = 0
    for picks in itertools.islice(itertools.product(*([1, 2, e] for e in op.dims.values())), 0, 400, 3):
        tiles = dict(zip(dims, picks))
        assert tile_footprints(op, tiles) == _whole_box(op, tiles)
        checked += 1
    assert checked > 5
