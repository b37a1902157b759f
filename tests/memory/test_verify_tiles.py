"""A group run tile by tile, held to the model's graph: plans of the planner in which an operator
runs alone in tiles (a padded convolution, a concatenation, a product with its epilogue), edited
by hand so that they stay consistent with themselves (every claim moved with the edit) but no
longer move or hold what the graph says the listed tiling does; each edit is rejected with the
graph. The graph's count itself is compared with the planner's over tilings and orders."""

from __future__ import annotations

import copy
import json
import random
from functools import lru_cache

import pytest

from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor, conv2d, elementwise
from loopwise.memory.planner import plan
from loopwise.memory.verify import verify


def _conv() -> Graph:
    """A 3x3 convolution padded by one: the first tile along p reads a row less than the next."""
    return Graph("conv", (conv2d("conv:c", 1, 16, 30, 30, 24, 3, 3, pad=1, tensors=("x", "w", "y")),), frozenset({"w"}))


def _concat(rows: int = 29) -> Graph:
    """y = a on top of b (5 rows): only the tiles that reach row ``rows - 5`` read b."""
    a = rows - 5
    op = Operator("cat:c", {"p": rows, "q": 64}, (Tensor("a", (a, 64)), Tensor("b", (5, 64)), Tensor("y", (rows, 64))),
                  reads=(Access("a", ("p", "q"), f"p < {a}"), Access("b", (f"p - {a}", "q"), f"p >= {a}")),
                  writes=(Access("y", ("p", "q")),))
    return Graph("concat", (op,), frozenset())


def _product_and_add() -> Graph:
    m, n, k = 64, 96, 128
    tensors = (Tensor("a", (m, k)), Tensor("b", (k, n)), Tensor("o", (m, n)))
    mm = Operator("matmul:mm", {"m": m, "n": n, "k": k}, tensors,
                  reads=(Access("a", ("m", "k")), Access("b", ("k", "n"))), writes=(Access("o", ("m", "n")),),
                  macs=m * n * k)
    return Graph("epilogue", (mm, elementwise("add:e", (m, n), ("o", "r"), "z")), frozenset({"b"}))


GRAPHS = {"conv": (_conv, 6000), "concat": (_concat, 1600), "epilogue": (_product_and_add, 4000)}


@lru_cache(maxsize=None)
def _planned(name: str) -> str:
    build, capacity = GRAPHS[name]
    p = plan(build(), capacity_bytes=capacity)
    return json.dumps({"total_bytes": p.total_bytes, "schedule": p.schedule, "operators_folded": []})


def _plan(name: str) -> dict:
    data = json.loads(_planned(name))
    assert (data["schedule"]["groups"][0]["loop_nest"] or {}).get("runs") == "tiled"
    return data


def _graph(name: str) -> Graph:
    return GRAPHS[name][0]()


def _dma(data: dict, tensor: str) -> dict:
    return next(d for d in data["schedule"]["groups"][0]["dma"] if d["tensor"] == tensor)


def _moved(data: dict, tensor: str, nbytes: int) -> None:
    """The transfer of ``tensor`` set to ``nbytes``, the plan's claims moved with it."""
    d = _dma(data, tensor)
    delta = nbytes - d["bytes"]
    d["bytes"] = nbytes
    data["schedule"]["groups"][0]["traffic_bytes"] += delta
    data["total_bytes"] += delta


def _buffer(data: dict, tensor: str, nbytes: int) -> None:
    """The buffer of ``tensor`` set to ``nbytes`` (at its offset), the claimed peak moved with it."""
    group = data["schedule"]["groups"][0]
    for step in group["steps"]:
        for entry in step["alloc"]:
            if entry[0] == tensor:
                group["peak_bytes"] += nbytes - entry[1]
                entry[1] = entry[4] = nbytes


def _reorder(nest: dict, loops: list[dict]) -> None:
    """The nest's loops (and its order) as ``loops``, outermost first."""
    nest["loops"] = loops
    nest["order"] = [l["dim"] for l in loops]


def _kinds(data: dict, graph: Graph | None) -> set[str]:
    return {v.kind for v in verify(data, graph).violations}


@pytest.mark.parametrize("name", [pytest.param("conv", marks=pytest.mark.slow), "concat", "epilogue"])
def test_the_planners_tiled_groups_pass_and_nothing_is_left_unchecked(name):
    verdict = verify(_plan(name), _graph(name))
    assert verdict.ok, verdict.violations
    assert verdict.model_checks == "made"


def test_the_tiled_replay_counts_with_isl_not_the_planners_closed_form(monkeypatch):
    """The replay shares no count with the planner: with the planner's closed-form box counts
    broken, the planner's own plan (made before) still passes, and an edited one still fails."""
    data, graph = _plan("epilogue"), _graph("epilogue")
    from loopwise.memory import boxcount

    def broken(*args, **kwargs):
        raise AssertionError("the replay used the planner's closed form")

    for name in ("box_footprint", "touched_total", "tensor_traffic", "positions"):
        monkeypatch.setattr(boxcount, name, broken)
    assert verify(data, graph).ok


@pytest.mark.slow  # plans the convolution (several seconds)
def test_an_input_whose_loads_are_cut_is_rejected_though_its_claims_agree():
    data = _plan("conv")
    _moved(data, "x", _dma(data, "x")["bytes"] // 2)
    assert verify(data).ok  # consistent with itself
    verdict = verify(data, _graph("conv"))
    assert [v.kind for v in verdict.violations] == ["tile_traffic"]
    assert "x:" in verdict.violations[0].message


@pytest.mark.slow  # plans the convolution (several seconds)
def test_a_weight_claimed_to_be_loaded_once_though_the_tiles_reload_it_is_rejected():
    data = _plan("conv")
    whole = 24 * 16 * 3 * 3 * 2
    assert _dma(data, "w")["bytes"] > whole  # the listed order reloads it for each output tile
    _moved(data, "w", whole)
    assert verify(data).ok
    assert _kinds(data, _graph("conv")) == {"tile_traffic"}


@pytest.mark.slow  # plans the convolution (several seconds)
def test_a_loop_order_swapped_with_the_counts_kept_is_rejected():
    data = _plan("conv")
    nest = data["schedule"]["groups"][0]["loop_nest"]["operators"][0]
    cut = [l for l in nest["loops"] if l["trips"] > 1]
    assert len(cut) >= 2
    _reorder(nest, list(reversed(nest["loops"])))  # the reductions outermost: partial sums go out and back
    assert verify(data).ok
    assert _kinds(data, _graph("conv")) == {"tile_traffic"}


@pytest.mark.slow  # plans the convolution (several seconds)
def test_a_buffer_sized_for_the_first_tile_clipped_by_the_padding_is_too_small_for_the_next():
    from loopwise.memory.polyhedral import footprint

    data = _plan("conv")
    nest = data["schedule"]["groups"][0]["loop_nest"]["operators"][0]
    first = {l["dim"]: (0, l["tile"]) for l in nest["loops"]}
    second = dict(first, p=(first["p"][1], first["p"][1]))
    assert next(l for l in nest["loops"] if l["dim"] == "p")["trips"] > 1
    op = _graph("conv").operators[0]
    assert footprint(op, "x", first) < footprint(op, "x", second)  # the first tile's top row is padding
    _buffer(data, "x", footprint(op, "x", first) * 2)
    assert verify(data).ok
    verdict = verify(data, _graph("conv"))
    assert {v.kind for v in verdict.violations} == {"tile_fit"}
    assert "x:" in verdict.violations[0].message


def test_the_last_partial_tile_that_alone_reads_a_part_must_fit_its_buffer():
    data = _plan("concat")
    nest = data["schedule"]["groups"][0]["loop_nest"]["operators"][0]
    p = next(l for l in nest["loops"] if l["dim"] == "p")
    assert p["trips"] > 1 and 29 % p["tile"], "the split along p is uneven: its last tile is partial"
    held = next(e[1] for e in data["schedule"]["groups"][0]["steps"][0]["alloc"] if e[0] == "b")
    _buffer(data, "b", held // 5)  # one row of b: what no tile before the last reads, it reads five
    assert verify(data).ok
    assert _kinds(data, _graph("concat")) == {"tile_fit"}


def test_an_epilogue_nest_with_its_reduction_moved_outermost_and_the_counts_kept_is_rejected():
    data = _plan("epilogue")
    group = data["schedule"]["groups"][0]
    assert len(group["loop_nest"]["operators"]) == 2
    cut = [l for l in group["loop_nest"]["operators"][0]["loops"] if l["trips"] > 1]
    assert len(cut) >= 2
    nest = group["loop_nest"]["operators"][0]
    # the reduction outermost: the epilogue's tile unfinished
    _reorder(nest, [l for l in nest["loops"] if l["dim"] == "k"] + [l for l in nest["loops"] if l["dim"] != "k"])
    assert verify(data).ok
    assert _kinds(data, _graph("epilogue")) == {"tile_traffic"}


def test_an_epilogue_that_stores_the_products_own_result_is_rejected():
    data = _plan("epilogue")
    group = data["schedule"]["groups"][0]
    step, room = group["steps"][1], data["schedule"]["capacity_bytes"]
    data["schedule"]["capacity_bytes"] += 2
    group["peak_bytes"] += 2
    step["alloc"].append(["o", 2, [], room, 2])
    step["uses"].append("o")
    step["free"].append(["o"])
    group["dma"].append({"step": step["id"], "tensor": "o", "bytes": 2, "split": [], "from": "scratchpad",
                         "to": "dram", "offset": room})
    group["traffic_bytes"] += 2
    data["total_bytes"] += 2
    assert verify(data).ok
    assert _kinds(data, _graph("epilogue")) == {"tile_traffic"}


@pytest.mark.slow  # plans the convolution (several seconds)
def test_a_tile_count_that_disagrees_with_the_tile_size_is_a_binding_violation():
    data = _plan("conv")
    nest = data["schedule"]["groups"][0]["loop_nest"]["operators"][0]
    loop = next(l for l in nest["loops"] if l["trips"] > 1)
    loop["trips"] += 1
    assert _kinds(data, _graph("conv")) == {"binding"}


def _ops() -> list[Operator]:
    """Operators whose tiles differ at the edges: padding and stride, a guard, a broadcast."""
    bias = Operator("lin:l", {"m": 37, "n": 29, "k": 23}, (Tensor("a", (37, 23)), Tensor("w", (29, 23)),
                                                         Tensor("v", (29,)), Tensor("o", (37, 29))),
                    reads=(Access("a", ("m", "k")), Access("w", ("n", "k")), Access("v", ("n",))),
                    writes=(Access("o", ("m", "n")),))
    small = (Tensor("x", (9, 8)), Tensor("w", (7, 23)), Tensor("o", (9, 7)))
    thirds = Operator("ds:d", {"m": 9, "n": 7, "k": 23}, small,
                      reads=(Access("x", ("m", "floor(k/3)")), Access("w", ("n", "k"))),
                      writes=(Access("o", ("m", "n")),))
    return [conv2d("conv:s", 2, 6, 19, 17, 5, 3, 3, stride=2, pad=1), conv2d("conv:p", 1, 4, 13, 11, 6, 5, 5, pad=2),
            _concat(23).operators[0], bias, thirds]


# tilings whose interior tiles differ: a halo wider than a tile, a division in an index
EDGES = {"conv:p": {"p": 1, "q": 2, "c": 3}, "ds:d": {"k": 2, "m": 4}}


@pytest.mark.slow
def test_the_graphs_count_agrees_with_the_planners_over_tilings_and_orders():
    from loopwise.memory.tiling import tile_footprints, traffic
    from loopwise.memory.verify_tiles import Tiles

    rng = random.Random(7)
    for op in _ops():
        tiles = Tiles(lambda name, op=op: op)
        for trial in range(4):
            sizes = {d: rng.randint(max(1, e // 4), e) for d, e in op.dims.items()}
            if trial == 0 and op.name in EDGES:
                sizes = {d: EDGES[op.name].get(d, e) for d, e in op.dims.items()}
            order = list(op.dims)
            rng.shuffle(order)
            loops = [{"dim": d, "extent": op.dims[d], "tile": sizes[d], "trips": -(-op.dims[d] // sizes[d])}
                     for d in order]
            grid = [(l["dim"], l["trips"], l["tile"], l["extent"]) for l in loops if l["trips"] > 1]
            counts = tiles._counts(op, grid, set())
            planned = traffic(op, sizes, order)
            written = {a.tensor for a in op.writes}
            for t, (moved, whole, most) in counts.items():
                want = (planned[t].stores, planned[t].loads) if t in written else (planned[t].loads, 0)
                got = (moved, moved - whole) if t in written else (moved, 0)
                assert got == want, (op.name, t, sizes, order)
                assert most >= tile_footprints(op, sizes)[t], (op.name, t, sizes)
            # the most one tile touches, against every tile counted one by one
            from itertools import product

            from loopwise.memory.polyhedral import footprint

            per_dim = [[(d, i * sizes[d], min(sizes[d], op.dims[d] - i * sizes[d])) for i in range(n)]
                       for d, n, _, _ in grid]
            for t in counts:
                every = max(footprint(op, t, {d: (s, z) for d, s, z in box}) for box in product(*per_dim))
                assert counts[t][2] == every, (op.name, t, sizes)


def test_a_group_of_three_operators_run_as_one_tiled_nest_is_a_binding_violation():
    data = _plan("epilogue")
    nest = data["schedule"]["groups"][0]["loop_nest"]
    nest["operators"].append(copy.deepcopy(nest["operators"][1]))
    assert "binding" in _kinds(data, _graph("epilogue"))


@pytest.mark.slow
def test_a_stem_convolution_whose_padding_outlasts_the_second_tile_gets_the_verdict_of_every_tile():
    """7x7, stride 2, padding 3, in tiles of one output column: the first two tiles read padding,
    the third is the first that reads seven columns. The planner's plan of it is held to what every
    tile touches, counted one by one here: it fails the replay exactly when a tile does not fit."""
    from loopwise.memory.polyhedral import footprint

    op = conv2d("conv:stem", 1, 3, 32, 32, 8, 7, 7, stride=2, pad=3, tensors=("x", "w", "y"))
    graph = Graph("stem", (op,), frozenset({"w"}))
    p = plan(graph, capacity_bytes=4000)
    data = {"total_bytes": p.total_bytes, "schedule": p.schedule, "operators_folded": []}
    group = data["schedule"]["groups"][0]
    from itertools import product

    cut = [l for l in group["loop_nest"]["operators"][0]["loops"] if l["trips"] > 1]
    boxes = product(*[[(l["dim"], i * l["tile"], min(l["tile"], l["extent"] - i * l["tile"]))
                       for i in range(l["trips"])] for l in cut])
    most = max(footprint(op, "x", {d: (start, size) for d, start, size in box}) for box in boxes) * 2
    held = next(e[1] for e in group["steps"][0]["alloc"] if e[0] == "x")
    verdict = verify(data, graph)
    assert ("tile_fit" in {v.kind for v in verdict.violations}) == (most > held), verdict.violations
