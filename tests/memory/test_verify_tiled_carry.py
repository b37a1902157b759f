"""Hand-made plans in which a product run tile by tile leaves its output on chip for the next
group: the replay accepts the output held whole and read there, and rejects one held only in part
or never freed."""

from __future__ import annotations

from loopwise.memory.verify import verify


def _dma(step: str, tensor: str, nbytes: int, offset: int, store: bool = False) -> dict:
    ends = ("scratchpad", "dram") if store else ("dram", "scratchpad")
    return {"step": step, "tensor": tensor, "bytes": nbytes, "split": [], "offset": offset,
            "from": ends[0], "to": ends[1]}


def _product_keeps_its_output(held: int = 800, needed: int = 800, freed: bool = True) -> dict:
    """down: h (4,000 B) and w (4,000 B) streamed in 400-byte tiles into p (800 B held, ``held``);
    then add reads p on chip (``needed`` bytes of it), r (800 B) from DRAM and stores y."""
    tiled = {"id": "0.0", "operator": "down", "uses": ["h", "p", "w"],
             "alloc": [["h", 400, [], 0, 400], ["w", 400, [], 400, 400], ["p", held, [], 800, 800]],
             "free": [["h"], ["w"]]}
    add = {"id": "1.0", "operator": "add", "uses": ["p", "r", "y"], "needs": [["p", needed]],
           "alloc": [["r", 800, [], 0, 800], ["y", 800, [], 1600, 800]],
           "free": ([["p"]] if freed else []) + [["r"], ["y"]]}
    first = {"operators": ["down"], "traffic_bytes": 8000, "peak_bytes": 800 + held,
             "loop_nest": {"runs": "tiled", "loops": [], "operators": []}, "steps": [tiled],
             "dma": [_dma("0.0", "h", 4000, 0), _dma("0.0", "w", 4000, 400)]}
    second = {"operators": ["add"], "traffic_bytes": 1600, "peak_bytes": 2400, "steps": [add],
              "dma": [_dma("1.0", "r", 800, 0), _dma("1.0", "y", 800, 1600, store=True)]}
    return {"total_bytes": 9600, "schedule": {"capacity_bytes": 2400, "outputs": [["y", 800]],
                                              "groups": [first, second]}}


def test_a_tiled_products_whole_output_read_on_chip_by_the_next_group_passes():
    verdict = verify(_product_keeps_its_output())
    assert verdict.ok, verdict.violations
    assert verdict.traffic_bytes == 9600 and verdict.peak_bytes == 2400


def test_an_output_held_in_part_cannot_be_read_whole_by_the_next_group():
    verdict = verify(_product_keeps_its_output(held=400))
    assert not verdict.ok
    assert any(v.kind in ("incomplete", "missing") and "add" in v.where for v in verdict.violations)


def test_an_output_kept_on_chip_and_never_freed_is_left_over():
    verdict = verify(_product_keeps_its_output(freed=False))
    assert {v.kind for v in verdict.violations} == {"leftover"}
