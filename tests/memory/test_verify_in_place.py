"""Writing over the part of a tensor a step reads and frees: only the operator's output may, only
an operator that reads its whole slab before it writes (one tile per slab), only where the parts
freed are the bytes that were made; and a buffer whose tensor is made and freed part by part keeps
its later parts checked. Hand-written plans."""

from __future__ import annotations

from loopwise.memory.verify import verify

from .test_verify_handed_slabs import _handed


def _kinds(plan: dict) -> set[str]:
    return {v.kind for v in verify(plan).violations}


def _load_into_the_slab_read(capacity: int = 1000) -> dict:
    """The handed plan with y moved to its own room, and a new input e of g loaded slab by slab
    into the bytes of x's slab that g reads and frees in the same step."""
    plan = _handed(capacity=capacity)
    second = plan["schedule"]["groups"][1]
    use = second["steps"][1]["steps"][0]
    use["alloc"][0][3:] = [600, 400]
    use["uses"].append("e")
    use["needs"].append(["e", 400, ["slab"]])
    use["alloc"].append(["e", 400, ["slab"], 0, 400])
    use["free"].append(["e", 400, ["slab"]])
    second["dma"].append({"step": "1.1.0", "tensor": "e", "bytes": 400, "split": ["slab"], "from": "dram",
                          "to": "scratchpad", "offset": 0})
    second["traffic_bytes"] += 400
    second["peak_bytes"] = 1000
    plan["total_bytes"] += 400
    return plan


def test_a_load_into_the_slab_its_step_reads_and_frees_is_rejected():
    overlaps = [v for v in verify(_load_into_the_slab_read()).violations if v.kind == "overlap"]
    assert [v.where for v in overlaps] == [f"group 1, slab {s}, operator g" for s in (1, 2, 3, 4)]
    assert overlaps[0].message == "e [0, 400) overlaps x [0, 400), alive at the same time"


def test_the_operators_output_written_over_that_slab_still_replays():
    assert verify(_handed()).ok


def _accumulating(z_offset: int) -> dict:
    """y keeps a 100-byte head in its buffer [0, 400), then f makes its 300 bytes slab by slab into
    that buffer and g frees them slab by slab as it reads them; g makes z (300 B, kept) slab by
    slab at ``z_offset``."""
    loop = {"loop": "slab", "extent": 4, "size": 1, "steps": [
        {"id": "0.1.0", "operator": "f", "uses": ["a", "y"], "needs": [["a", 400, ["slab"]]],
         "alloc": [["a", 400, ["slab"], 800, 100], ["y", 300, ["slab"], 0, 400]], "free": [["a"]]},
        {"id": "0.1.1", "operator": "g", "uses": ["y", "z"], "needs": [["y", 300, ["slab"]]],
         "alloc": [["z", 300, ["slab"], z_offset, 300]], "free": [["y", 300, ["slab"]]]}]}
    head = {"id": "0.0", "operator": "h", "uses": ["y"], "alloc": [["y", 100, [], 0, 400]], "free": []}
    done = {"id": "0.2", "operator": None, "uses": [], "alloc": [], "free": [["y"], ["z"]]}
    group = {"operators": ["h", "f", "g"], "traffic_bytes": 700, "peak_bytes": 575, "steps": [head, loop, done],
             "dma": [{"step": "0.1.0", "tensor": "a", "bytes": 400, "split": ["slab"], "from": "dram",
                      "to": "scratchpad", "offset": 800},
                     {"step": "0.2", "tensor": "z", "bytes": 300, "split": [], "from": "scratchpad", "to": "dram",
                      "offset": z_offset}]}
    return {"total_bytes": 700, "schedule": {"capacity_bytes": 1000, "outputs": [["z", 300]], "groups": [group]}}


def test_a_part_made_later_in_a_partly_freed_buffer_is_checked_against_what_lies_in_its_room():
    assert verify(_accumulating(400)).ok
    overlaps = [v for v in verify(_accumulating(150)).violations if v.kind == "overlap"]
    # z's first part [150, 225) is made at slab 1 and kept; y's third part is made there at slab 3
    assert [v.where for v in overlaps][:1] == ["group 0, slab 3, operator f"]
    assert overlaps[0].message.startswith("y [150, 225) overlaps z [150, ")


def _loop2(*steps) -> dict:
    return {"loop": "outer", "extent": 2, "size": 1,
            "steps": [{"loop": "slab", "extent": 4, "size": 1, "steps": list(steps)}]}


def _chain(order: list[str]) -> dict:
    """x (800 B) made part by part over two loops (outer 2, slab 4; 100 B a part); y written over
    x part by part; z written over y part by part, cutting y and z in ``order``; z stored in the
    same order. One buffer [0, 800) for all three."""
    both = ["outer", "slab"]
    make = {"id": "0.0.0", "operator": "f", "uses": ["a", "x"], "needs": [["a", 800, both]],
            "alloc": [["a", 800, both, 800, 100], ["x", 800, both, 0, 800]], "free": [["a"]]}
    first = {"operators": ["f"], "traffic_bytes": 800, "peak_bytes": 900, "steps": [_loop2(make)],
             "dma": [{"step": "0.0.0", "tensor": "a", "bytes": 800, "split": both, "from": "dram",
                      "to": "scratchpad", "offset": 800}]}

    def over(gi: int, op: str, read: str, made: str, labels: list[str], store: bool) -> dict:
        step = {"id": f"{gi}.0.0", "operator": op, "uses": [read, made], "needs": [[read, 800, labels]],
                "alloc": [[made, 800, labels, 0, 800]], "free": [[read, 800, labels]]}
        dma = [{"step": step["id"], "tensor": made, "bytes": 800, "split": labels, "from": "scratchpad",
                "to": "dram", "offset": 0}] if store else []
        steps = [_loop2(step)] + ([{"id": f"{gi}.1", "operator": None, "uses": [], "alloc": [],
                                    "free": [[made]]}] if store else [])
        return {"operators": [op], "traffic_bytes": 800 if store else 0, "peak_bytes": 900, "steps": steps,
                "dma": dma}

    groups = [first, over(1, "g", "x", "y", both, False), over(2, "h", "y", "z", order, True)]
    return {"total_bytes": 1600, "schedule": {"capacity_bytes": 1000, "outputs": [["z", 800]], "groups": groups}}


def test_a_tensor_handed_on_in_the_order_its_parts_were_made_replays():
    verdict = verify(_chain(["outer", "slab"]))
    assert verdict.ok, verdict.violations


def test_writing_over_a_tensor_freed_in_another_order_than_it_was_made_in_is_rejected():
    # y's parts were made outer by outer; group 2 frees them slab by slab across both outer
    # slabs, so the bytes it frees first are not the part it has read
    layout = [v for v in verify(_chain(["slab", "outer"])).violations if v.kind == "layout"]
    assert [v.where for v in layout] == ["group 2, slab 1.1, operator h"]
    assert "y, made cut over loops of extents [2, 4] and freed cut over [4, 2]" in layout[0].message


def _tiled_nest(op: str, trips: int) -> dict:
    """A loop nest for ``op`` whose slab dimension is the slab loop's, and whose other dimension
    (n) runs in ``trips`` tiles."""
    return {"runs": "slabs", "loops": [{"label": "slab", "dims": ["m"], "extent": 4, "size": 1, "trips": 4}],
            "operators": [{"operator": op, "order": ["m", "n", "k"],
                           "loops": [{"dim": "m", "extent": 4, "tile": 1, "trips": 4, "loop": "slab"},
                                     {"dim": "n", "extent": 8, "tile": 8 // trips, "trips": trips},
                                     {"dim": "k", "extent": 8, "tile": 8, "trips": 1}]}]}


def test_an_operator_that_writes_its_slab_tile_by_tile_cannot_write_over_the_slab_it_reads():
    plan = _handed()
    plan["schedule"]["groups"][1]["loop_nest"] = _tiled_nest("g", 1)
    assert verify(plan).ok  # one tile: g reads all of its slab of x before it writes y
    plan["schedule"]["groups"][1]["loop_nest"] = _tiled_nest("g", 2)
    # two tiles of n: the first tile of y would land on x's slab that the second still reads
    assert "overlap" in _kinds(plan)
