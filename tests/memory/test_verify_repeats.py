"""The replay's shortcut for repeated iterations (:mod:`loopwise.memory.verify_repeat`): an
iteration of a plain loop that repeats one the replay found leaving everything as it was is
counted, not replayed, and the verdict is the one of replaying every iteration, on plans that pass
and on plans that break at one slab only."""

from __future__ import annotations

import copy

import pytest

from loopwise.memory import verify as replay
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, elementwise
from loopwise.memory.planner import plan
from loopwise.memory.verify import as_dict, verify


def _both(data: dict) -> tuple[dict, dict]:
    return as_dict(verify(data)), as_dict(verify(data, skip_repeats=False))


def _steps_replayed(data: dict, monkeypatch, skip: bool) -> int:
    seen = []
    step = replay._Replay._step
    monkeypatch.setattr(replay._Replay, "_step", lambda self, *a: (seen.append(1), step(self, *a))[1])
    verify(data, skip_repeats=skip)
    monkeypatch.setattr(replay._Replay, "_step", step)
    return len(seen)


def _streamed(extent: int = 10, size: int = 3, outer: int = 1, capacity: int = 4096) -> dict:
    """w (64 B) kept; x (bytes 1000 * outer) loaded slab by slab of the outer and inner loops through f
    into y, stored slab by slab; every slab frees x and y. Inner slabs of uneven shares (1000 over 10
    units by 3)."""
    labels = ["outer", "slab"] if outer > 1 else ["slab"]
    total = 1000 * outer
    body = {"id": "0.1", "operator": "f", "uses": ["w", "x", "y"], "needs": [["x", total, labels], ["w", 64]],
            "alloc": [["x", total, labels, 64, 512], ["y", total, labels, 600, 512]], "free": [["x"], ["y"]]}
    loop = {"loop": "slab", "extent": extent, "size": size, "steps": [body]}
    if outer > 1:
        loop = {"loop": "outer", "extent": outer, "size": 1, "steps": [loop]}
    group = {"operators": ["f"], "traffic_bytes": 64 + 2 * total, "peak_bytes": 64 + 2 * (total * 3 // 10 // outer + 1),
             "steps": [{"id": "0.0", "operator": None, "uses": [], "alloc": [["w", 64, [], 0, 64]], "free": []},
                       loop, {"id": "0.2", "operator": None, "uses": [], "alloc": [], "free": [["w"]]}],
             "dma": [{"step": "0.0", "tensor": "w", "bytes": 64, "split": [], "from": "dram", "to": "scratchpad",
                      "offset": 0},
                     {"step": "0.1", "tensor": "x", "bytes": total, "split": labels, "from": "dram",
                      "to": "scratchpad", "offset": 64},
                     {"step": "0.1", "tensor": "y", "bytes": total, "split": labels, "from": "scratchpad",
                      "to": "dram", "offset": 600}]}
    return {"total_bytes": 64 + 2 * total,
            "schedule": {"capacity_bytes": capacity, "outputs": [["y", total]], "groups": [group]}}


def _body(data: dict) -> dict:
    loop = data["schedule"]["groups"][0]["steps"][1]
    while loop["steps"][0].get("loop"):
        loop = loop["steps"][0]
    return loop["steps"][0]


def _leaking(data: dict) -> dict:
    """y's buffer is never freed: each slab adds a buffer at the same place (and the bytes pile up)."""
    _body(data)["free"] = [["x"]]
    return data


def _small_capacity(data: dict) -> dict:
    data["schedule"]["capacity_bytes"] = 64 + 2 * 299  # no slab fits
    return data


def _weight_freed_early(data: dict) -> dict:
    _body(data)["free"] = [["x"], ["y"], ["w"]]  # the second slab reads w with no buffer
    return data


def _claims_too_much(data: dict) -> dict:
    data["total_bytes"] += 1
    data["schedule"]["groups"][0]["traffic_bytes"] += 1
    return data


def _inner_cut_first(data: dict) -> dict:
    """x's share is cut by the inner loop before the outer one: the outer loop's iterations are then
    no repeats of one another by their signature (the body is not plain for it)."""
    body = _body(data)
    for entry in body["needs"] + body["alloc"]:
        if len(entry) > 2 and entry[2]:
            entry[2] = ["slab", "outer"]
    for d in data["schedule"]["groups"][0]["dma"]:
        if d["split"]:
            d["split"] = ["slab", "outer"]
    return data


VARIANTS = [lambda d: d, _leaking, _small_capacity, _weight_freed_early, _claims_too_much]


@pytest.mark.parametrize("outer", [1, 4])
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_the_shortcut_gives_the_verdict_of_every_iteration_replayed(variant, outer):
    data = VARIANTS[variant](_streamed(outer=outer))
    fast, full = _both(data)
    assert fast == full


def test_a_plan_that_passes_is_counted_not_replayed_slab_by_slab(monkeypatch):
    data = _streamed(extent=400, size=3, outer=6)
    fast, full = _both(data)
    assert fast == full and fast["ok"]
    assert _steps_replayed(data, monkeypatch, False) == 2 + 6 * 134
    assert _steps_replayed(data, monkeypatch, True) < 60


def test_the_slabs_one_byte_too_large_for_their_buffer_are_each_found():
    # 1000 bytes over 400 units by 3: slabs of 7 and 8 bytes; y's buffer holds 7
    data = _streamed(extent=400, size=3)
    _body(data)["alloc"][1][4] = 7
    fast, full = _both(data)
    assert fast == full
    large = [t + 1 for t in range(134) if 1000 * min(400, 3 * t + 3) // 400 - 1000 * (3 * t) // 400 == 8]
    assert [v["where"] for v in fast["violations"] if v["kind"] == "offset"] == [
        f"group 0, slab {t}, operator f" for t in large]


def test_a_buffer_left_behind_each_slab_overflows_from_the_slab_it_fills_on():
    # y's buffer of 512 bytes gains 75 bytes a slab (3 units of 40 over 1000 bytes) and is never freed
    fast, full = _both(_leaking(_streamed(extent=40, size=3)))
    assert fast == full
    assert [v["where"] for v in fast["violations"] if v["kind"] == "offset"] == [
        f"group 0, slab {t}, operator f" for t in range(7, 15)]


def test_an_entry_cut_by_the_inner_loop_first_gives_the_same_verdict(monkeypatch):
    data = _inner_cut_first(_streamed(extent=40, size=3, outer=5))
    fast, full = _both(data)
    assert fast == full


def _gate_up(m: int, n: int, k: int) -> Graph:
    def proj(name, w, out):
        return Operator(name, {"m": m, "n": n, "k": k}, (Tensor("x", (m, k)), Tensor(w, (n, k)), Tensor(out, (m, n))),
                        reads=(Access("x", ("m", "k")), Access(w, ("n", "k"))), writes=(Access(out, ("m", "n")),),
                        macs=m * n * k)

    return Graph("gate-up", (proj("gate", "wg", "g"), proj("up", "wu", "u"), elementwise("mul", (m, n), ("g", "u"), "y")),
                 frozenset({"wg", "wu"}))


def test_the_planners_plan_in_chunks_and_slabs_gets_the_same_verdict(monkeypatch):
    p = plan(_gate_up(160, 60, 32), 4 * 1024)
    data = {"total_bytes": p.total_bytes, "schedule": copy.deepcopy(p.schedule)}
    fast, full = _both(data)
    assert fast == full and fast["ok"]
    assert _steps_replayed(data, monkeypatch, True) < _steps_replayed(data, monkeypatch, False)
