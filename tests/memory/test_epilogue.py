"""A product too big to run whole, then an elementwise operator on its output: the elementwise
operator runs on each output tile as the product finishes it (an epilogue), so the product's
output never reaches DRAM; and where the reader is no elementwise reader of that output alone, it
does not."""

from __future__ import annotations

from loopwise.memory.epilogue import with_epilogue
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.verify import verify

from .verified_plans import verified_plan

M, N, K = 128, 128, 512
KIB = 1024


def _t(name: str, *shape: int) -> Tensor:
    return Tensor(name, shape)


def _product() -> Operator:
    """p[m, n] = sum_k h[m, k] * w[n, k]: h and w 128 KiB each, p 32 KiB."""
    return Operator("down", {"m": M, "n": N, "k": K}, (_t("h", M, K), _t("w", N, K), _t("p", M, N)),
                    reads=(Access("h", ("m", "k")), Access("w", ("n", "k"))), writes=(Access("p", ("m", "n")),),
                    macs=M * N * K)


def _graph(*after: Operator) -> Graph:
    return Graph("product-then-more", (_product(), *after), frozenset({"w"}))


def test_the_residual_add_runs_on_each_output_tile_of_the_product():
    """At 24 KiB the product alone keeps half its output (16 KiB) as the accumulator and streams h
    once per half and w once: 2*128 + 128 KiB, then stores p (32 KiB); the add alone moves p, r
    and y (3 * 32 KiB): 524,288 B. With the add as its epilogue, r is loaded once per output tile
    through the 8 KiB left beside it and y stored once: 2*128 + 128 + 32 + 32 KiB, and p never
    leaves the chip."""
    g = _graph(elementwise("add", (M, N), ("r", "p"), "y"))
    p = verified_plan(g, 24 * KIB)
    assert p.total_bytes == (2 * 128 + 128 + 32 + 32) * KIB == 458_752
    (grp,) = p.groups
    assert grp.operators == ("down", "add") and grp.tiled and grp.resident == ("p",)
    steps = p.schedule["groups"][0]["steps"]
    assert [s["operator"] for s in steps] == ["down", "add"]
    assert not any(d["tensor"] == "p" for d in p.schedule["groups"][0]["dma"])


def test_a_transposed_or_reducing_or_coupled_reader_is_no_epilogue():
    """A reader that reads the output at another place than it writes, that sums over a loop, or
    whose rows are coupled, cannot run on one output tile at a time as it is finished."""
    product = _product()
    transposed = Operator("add", {"a": N, "b": M}, (_t("r", N, M), _t("p", M, N), _t("y", N, M)),
                          reads=(Access("r", ("a", "b")), Access("p", ("b", "a"))), writes=(Access("y", ("a", "b")),))
    summed = Operator("sum", {"a": M, "b": N}, (_t("p", M, N), _t("s", M)),
                      reads=(Access("p", ("a", "b")),), writes=(Access("s", ("a",)),))
    coupled = Operator("softmax", {"a": M, "b": N}, (_t("p", M, N), _t("y", M, N)),
                       reads=(Access("p", ("a", "b")),), writes=(Access("y", ("a", "b")),), coupled=frozenset({"b"}))
    for reader in (transposed, summed, coupled):
        assert with_epilogue(product, reader) is None, reader.name
    fused = with_epilogue(product, elementwise("add", (M, N), ("r", "p"), "y"))
    assert [a.index for a in fused.reads] == [("m", "k"), ("n", "k"), ("m", "n")]
    assert fused.writes == (Access("y", ("m", "n")),)


def test_an_output_read_again_later_is_stored_and_not_fused():
    """p read by the add and again by a later operator must reach DRAM anyway: no epilogue."""
    g = _graph(elementwise("add", (M, N), ("r", "p"), "y"), elementwise("mul", (M, N), ("y", "p"), "z"))
    p = verified_plan(g, 24 * KIB)
    assert not any(grp.tiled and len(grp.operators) > 1 for grp in p.groups)


def _dma(step: str, tensor: str, nbytes: int, offset: int, store: bool = False) -> dict:
    ends = ("scratchpad", "dram") if store else ("dram", "scratchpad")
    return {"step": step, "tensor": tensor, "bytes": nbytes, "split": [], "offset": offset,
            "from": ends[0], "to": ends[1]}


def _epilogue_plan(made: bool = True, r_bytes: int = 400) -> dict:
    """down streams h and w (4,000 B each) in 400-byte tiles into y's 800-byte tile (``made``:
    allocated by down); add loads r through ``r_bytes`` beside it, turns the tile into y and
    stores it."""
    down = {"id": "0.0", "operator": "down", "uses": ["h", "w", "y"],
            "alloc": [["h", 400, [], 800, 400], ["w", 400, [], 1200, 400]] + ([["y", 800, [], 0, 800]] if made else []),
            "free": [["h"], ["w"]]}
    add = {"id": "0.1", "operator": "add", "uses": ["r", "y"], "needs": [["y", 800]],
           "alloc": [["r", r_bytes, [], 800, r_bytes]], "free": [["r"], ["y"]]}
    group = {"operators": ["down", "add"], "traffic_bytes": 9600, "peak_bytes": 1600,
             "loop_nest": {"runs": "tiled", "loops": [], "operators": []}, "steps": [down, add],
             "dma": [_dma("0.0", "h", 4000, 800), _dma("0.0", "w", 4000, 1200), _dma("0.1", "r", 800, 800),
                     _dma("0.1", "y", 800, 0, store=True)]}
    return {"total_bytes": 9600, "schedule": {"capacity_bytes": 1600, "outputs": [["y", 800]], "groups": [group]}}


def test_the_replay_passes_an_epilogue_and_refuses_a_wrong_one():
    """The accumulator made by the product and read by the epilogue passes; an epilogue that reads
    a tile no step made, or streams its input through more room than is left, is refused."""
    verdict = verify(_epilogue_plan())
    assert verdict.ok, verdict.violations
    assert verdict.traffic_bytes == 9600 and verdict.peak_bytes == 1600
    assert any(v.kind in ("unloaded", "missing", "incomplete") for v in verify(_epilogue_plan(made=False)).violations)
    assert not verify(_epilogue_plan(r_bytes=1200)).ok


def _scaled(index: tuple[str, ...], extent: int) -> Operator:
    """y[a, b] = p[a, b] * r[...]: a scale read at ``index`` (a row's or a column's)."""
    return Operator("scale", {"a": M, "b": N}, (_t("p", M, N), _t("r", extent), _t("y", M, N)),
                    reads=(Access("p", ("a", "b")), Access("r", index)), writes=(Access("y", ("a", "b")),))


def test_a_per_row_scale_is_loaded_again_for_every_output_tile():
    """At 24 KiB the product keeps all 128 rows and half the columns of its output (two output
    tiles). The epilogue's buffer of the per-row scale r (256 B) is freed after each tile's
    epilogue, while the next tile's reduction runs, so r is loaded once per output tile:
    2*128 + 128 KiB of operands, 2 * 256 B of r, 32 KiB of y."""
    g = _graph(_scaled(("a",), M))
    p = verified_plan(g, 24 * KIB)
    assert [grp.operators for grp in p.groups] == [("down", "scale")]
    assert p.total_bytes == (2 * 128 + 128 + 32) * KIB + 2 * 256 == 426_496


def test_an_epilogue_that_reads_the_products_own_operand_is_a_plan_the_replay_passes():
    """y = p + h, h an operand of the product (square): the product's tile of h and the epilogue's
    tile of h would be one buffer held through the reduction beside the other operand tiles; the
    plan either counts that buffer or does not fuse, and the replay passes it."""
    n = 256
    product = Operator("down", {"m": n, "n": n, "k": n}, (_t("h", n, n), _t("w", n, n), _t("p", n, n)),
                       reads=(Access("h", ("m", "k")), Access("w", ("n", "k"))), writes=(Access("p", ("m", "n")),),
                       macs=n ** 3)
    g = Graph("residual-of-operand", (product, elementwise("add", (n, n), ("p", "h"), "y")), frozenset({"w"}))
    verified_plan(g, 24 * KIB)
