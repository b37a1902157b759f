"""Products whose weights do not fit: a chunk of the weights' columns stays on chip while the rows
of the input stream past it (the column chunks outside the rows), with the input read once per
chunk; products that read one input (q, k and v of one normalized x) run as one loop over their
chunks, so the input is read once per chunk of all three, not once per chunk of each; and the
chunks are as many as needed, not a power of two of them."""

from __future__ import annotations

import math

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise

from .verified_plans import verified_plan

KIB = 1024


def _projection(name: str, x: str, w: str, out: str, m: int, n: int, k: int) -> Operator:
    """out[m, n] = sum_k x[m, k] * w[n, k] (2-byte elements)."""
    return Operator(name, {"m": m, "n": n, "k": k}, (Tensor(x, (m, k)), Tensor(w, (n, k)), Tensor(out, (m, n))),
                    reads=(Access(x, ("m", "k")), Access(w, ("n", "k"))), writes=(Access(out, ("m", "n")),),
                    macs=m * n * k)


def _io_bound_bytes(m: int, n: int, k: int, capacity: int, elem: int = 2) -> float:
    """The I/O lower bound of an ``[m, k] x [k, n]`` product through ``capacity`` bytes of fast
    memory, loads and stores: ``2mnk/sqrt(S) - 2S`` words of ``S`` words (Smith, Lowery, Langou and
    van de Geijn)."""
    words = capacity / elem
    return (2 * m * n * k / math.sqrt(words) - 2 * words) * elem


def _qkv(m: int, n: int, k: int) -> Graph:
    ops = tuple(_projection(p, "x", f"w{p}", p, m, n, k) for p in "qkv")
    return Graph("qkv", ops, frozenset({"wq", "wk", "wv"}))


def test_gate_and_up_keep_a_chunk_of_their_weights_while_the_rows_stream():
    """gate and up (688 columns of 256 each, 352 KiB of weights apiece) and their product y at
    256 KiB: three chunks of 230, 230 and 228 columns of both weights stay on chip in turn while x
    (2 MiB) streams past each, so x is read 3 times, the weights once and y stored once:
    12,632,064 B. Powers of two alone give 6 chunks of 128 columns, and rows outside the columns
    reload both weights for every block of rows (19,005,440 B)."""
    m, n, k = 4096, 688, 256
    g = Graph("gate-up", (_projection("gate", "x", "wg", "g", m, n, k), _projection("up", "x", "wu", "u", m, n, k),
                          elementwise("mul", (m, n), ("g", "u"), "y")), frozenset({"wg", "wu"}))
    p = verified_plan(g, 256 * KIB)
    x, weights, y = m * k * 2, 2 * n * k * 2, m * n * 2
    assert p.total_bytes == 3 * x + weights + y == 12_632_064
    (grp,) = p.groups
    assert grp.slab.outer_dims == ("n", "n", "d1") and grp.slab.outer_size == 230
    assert set(grp.slab.resident) == {"wg", "wu"}


def test_q_k_and_v_read_their_shared_input_once_per_chunk_of_all_three():
    """q, k and v of one x (4096 x 1024) with 512 columns each, at 512 KiB: one loop over chunks of
    74 columns of each weight (7 chunks) reads x 7 times, each weight once, each output stored
    once: 7 * 8 + 3 + 12 MiB. Each product alone, with its own best tiling, moves more: together
    88,080,384 B."""
    m, n, k = 4096, 512, 1024
    p = verified_plan(_qkv(m, n, k), 512 * KIB)
    (grp,) = p.groups
    assert grp.operators == ("q", "k", "v")
    assert p.total_bytes == 7 * m * k * 2 + 3 * n * k * 2 + 3 * m * n * 2 == 74_448_896
    assert p.total_bytes < sum(p.layer_by_layer) == 88_080_384


def test_shared_input_products_come_within_one_and_a_half_of_their_io_bound():
    """q, k and v as one product of 1,536 columns at 1 MiB: the plan moves at most 1.5 times the
    I/O bound of that product (33.5 MB); each product tiled alone moves 1.88 times it."""
    m, n, k, capacity = 4096, 512, 1024, 1024 * KIB
    p = verified_plan(_qkv(m, n, k), capacity)
    bound = _io_bound_bytes(m, 3 * n, k, capacity)
    assert p.total_bytes <= 1.5 * bound
    assert sum(p.layer_by_layer) > 1.8 * bound


def test_a_batch_of_the_same_extent_does_not_cut_the_input_a_column_chunk_reads_whole():
    """q, k and v of x [256, 32, 256] with 256 columns each (128 KiB of weights apiece) at
    128 KiB: the loop over chunks of q's columns reads x whole in each chunk, so k's and v's
    chunks must be of their columns too, not of the batch (of the same extent, 256), which would
    cut x. Four chunks of 64 columns of each weight: x (4 MiB) read 4 times, the weights once,
    the outputs stored once; alone, each product moves more."""
    b, l, n, k = 256, 32, 256, 256
    ops = tuple(Operator(p, {"b": b, "l": l, "n": n, "k": k},
                         (Tensor("x", (b, l, k)), Tensor(f"w{p}", (n, k)), Tensor(p, (b, l, n))),
                         reads=(Access("x", ("b", "l", "k")), Access(f"w{p}", ("n", "k"))),
                         writes=(Access(p, ("b", "l", "n")),), macs=b * l * n * k) for p in "qkv")
    p = verified_plan(Graph("qkv-batched", ops, frozenset({"wq", "wk", "wv"})), 128 * KIB)
    (grp,) = p.groups
    assert grp.slab.outer_dims == ("n", "n", "n") and grp.slab.outer_size == 64
    x, weights, outputs = b * l * k * 2, 3 * n * k * 2, 3 * b * l * n * 2
    assert p.total_bytes == 4 * x + weights + outputs == 29_753_344 < sum(p.layer_by_layer) == 38_141_952
