"""The replay of a flash-style attention: per head (outer loop) and query block (slab loop), a
loop over key blocks runs the scores, the softmax and the value product on one block of keys,
with the softmax's running row maximum and sum on chip; hand-written plans, one that passes,
one whose row operation is a layer norm, one without the running state."""

from __future__ import annotations

from loopwise.memory.verify import verify

HEADS, QUERY, KEYS = 2, 4, 4  # loop extents (head, query block, key block), one unit a slab
WHOLE = 128  # bytes of each of Q, K, V and the output O (16 per head and block)
SCORES = HEADS * QUERY * KEYS * 4  # a 4-byte block of scores (and of probabilities) per key block
STATE = HEADS * QUERY * 2  # a 2-byte running row maximum (and sum) per query block
TRAFFIC = WHOLE + QUERY * WHOLE + QUERY * WHOLE + WHOLE  # Q, O once; K, V once per query block
PEAK = 16 * 4 + 4 + 2 * 2  # Q, O, K, V blocks, a scores block, the running state


def _dma(step: str, tensor: str, split: list[str], offset: int, store: bool = False) -> dict:
    ends = ("scratchpad", "dram") if store else ("dram", "scratchpad")
    return {"step": step, "tensor": tensor, "bytes": WHOLE, "split": split, "from": ends[0], "to": ends[1],
            "offset": offset}


def _flash(row_kind: str = "_softmax", state: bool = True) -> dict:
    """A group for one softmax attention (``row_kind``: the kind its row operation's name
    starts with); ``state``: whether the running row maximum and sum are on chip."""
    soft = f"{row_kind}:p"
    both = ["outer", "slab"]
    steps = [{"id": "s", "operator": "matmul:s", "uses": ["Q", "K", "S"],
              "alloc": [["K", WHOLE, ["outer", "key"], 0, 16], ["V", WHOLE, ["outer", "key"], 16, 16],
                        ["S", SCORES, ["outer", "slab", "key"], 32, 4]], "free": []},
             {"id": "p", "operator": soft, "uses": ["S"], "alloc": [], "free": []},
             {"id": "o", "operator": "matmul:o", "uses": ["S", "V", "O"], "alloc": [],
              "free": [["K"], ["V"], ["S"]]}]
    rows = [[f"rowmax:{soft}", STATE, both, 68, 2], [f"rowsum:{soft}", STATE, both, 70, 2]] if state else []
    before = {"id": "q", "operator": None, "uses": [],
              "alloc": [["Q", WHOLE, both, 36, 16], ["O", WHOLE, both, 52, 16]] + rows, "free": []}
    after = {"id": "out", "operator": None, "uses": [], "alloc": [], "free": [["Q"], ["O"]] + [[r[0]] for r in rows]}
    dma = [_dma("q", "Q", both, 36), _dma("s", "K", ["outer", "key"], 0), _dma("s", "V", ["outer", "key"], 16),
           _dma("out", "O", both, 52, store=True)]
    key_loop = {"loop": "key", "extent": KEYS, "size": 1, "steps": steps}
    query_loop = {"loop": "slab", "extent": QUERY, "size": 1, "steps": [before, key_loop, after]}
    group = {"operators": ["matmul:s", soft, "matmul:o"], "traffic_bytes": TRAFFIC,
             "peak_bytes": PEAK if state else PEAK - 4, "dma": dma,
             "steps": [{"loop": "outer", "extent": HEADS, "size": 1, "steps": [query_loop]}]}
    return {"total_bytes": TRAFFIC, "schedule": {"capacity_bytes": 80, "outputs": [["O", WHOLE]], "groups": [group]}}


def test_a_key_block_loop_over_a_softmax_chain_replays_with_its_traffic_recounted():
    verdict = verify(_flash())
    assert verdict.ok, verdict.violations
    assert verdict.traffic_bytes == TRAFFIC and verdict.peak_bytes == PEAK


def test_a_key_block_loop_over_a_layer_norm_is_rejected():
    verdict = verify(_flash(row_kind="native_layer_norm"))
    assert {v.kind for v in verdict.violations} == {"key_blocks"}
    assert "native_layer_norm:p" in verdict.violations[0].message
    assert len(verdict.violations) == HEADS * QUERY  # once per key loop run


def test_a_key_block_loop_without_the_running_maximum_and_sum_is_rejected():
    verdict = verify(_flash(state=False))
    kinds = [v for v in verdict.violations if v.kind == "key_blocks"]
    assert len(kinds) == 2 * HEADS * QUERY * KEYS  # both buffers, at every key block
    assert {v.kind for v in verdict.violations} == {"key_blocks"}
