"""The replay checked against the model's graph, not only against the plan's own claims: plans of
the planner edited by hand so that they are physically wrong while consistent with themselves
(an input loaded with a few bytes, read once where every chunk reads it whole, an operator or an
output store dropped, a query block of two bytes, a weight chunk loaded once for every chunk),
each rejected with the graph and, for most, passed without it."""

from __future__ import annotations

import copy
import json
from functools import lru_cache

import pytest
from typer.testing import CliRunner

from loopwise.cli import app
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Access, Operator, Tensor
from loopwise.memory.planner import plan
from loopwise.memory.verify import describe, verify
from loopwise.memory.verify_group import flat

from .test_key_block_plans import CAPACITY as KEY_CAPACITY
from .test_key_block_plans import _attention
from .test_verify import _tiny

M, N, K = 1024, 128, 256
CAPACITY = 64 * 1024  # each weight (64 KiB) alone fills it: chunks of 32 columns of all three stay while x streams


def _projection(name: str, w: str) -> Operator:
    """name[m, n] = sum_k x[m, k] * w[n, k]."""
    return Operator(name, {"m": M, "n": N, "k": K}, (Tensor("x", (M, K)), Tensor(w, (N, K)), Tensor(name, (M, N))),
                    reads=(Access("x", ("m", "k")), Access(w, ("n", "k"))), writes=(Access(name, ("m", "n")),),
                    macs=M * N * K)


QKV = Graph("qkv", tuple(_projection(p, f"w{p}") for p in "qkv"), frozenset({"wq", "wk", "wv"}))
GRAPHS = {"qkv": QKV, "attention": _attention()}


@lru_cache(maxsize=None)
def _planned(name: str, capacity: int) -> str:
    p = plan(GRAPHS[name], capacity_bytes=capacity)
    return json.dumps({"total_bytes": p.total_bytes, "schedule": p.schedule, "operators_folded": []})


def _qkv() -> dict:
    """The planner's plan of q, k and v: per chunk of 32 columns of the three weights (outer loop),
    x streams in slabs of 16 rows (slab loop), each read by all three products."""
    return json.loads(_planned("qkv", CAPACITY))


def _steps(data: dict, gi: int = 0) -> list[dict]:
    return flat(data["schedule"]["groups"][gi]["steps"])


def _claim(data: dict, delta: int, gi: int = 0) -> None:
    """The plan's claims moved by ``delta`` bytes, so that only the edit itself is wrong."""
    data["schedule"]["groups"][gi]["traffic_bytes"] += delta
    data["total_bytes"] += delta


def _kinds(verdict) -> set[str]:
    return {v.kind for v in verdict.violations}


def test_the_planners_plan_passes_the_checks_against_its_graph():
    verdict = verify(_qkv(), QKV)
    assert verdict.ok, "\n".join(describe(verdict))
    assert verdict.model_checks == "made" and describe(verdict)[0].endswith("checks against the model's graph made")


def test_without_the_graph_the_verdict_says_the_model_checks_were_not_made():
    verdict = verify(_qkv())
    assert verdict.ok and verdict.model_checks == "not made (the model's graph was not given)"
    assert "checks against the model's graph not made" in describe(verdict)[0]


def test_a_load_of_a_few_bytes_into_a_full_slab_buffer_holds_a_few_bytes_of_data():
    for loaded in (0, 2048):
        data = _qkv()
        (load,) = [d for d in data["schedule"]["groups"][0]["dma"] if d["tensor"] == "x"]
        _claim(data, (loaded - load["bytes"]) * (N // 32))  # x is loaded once per chunk of columns
        load["bytes"] = loaded
        verdict = verify(data)  # bytes with data need no graph
        assert _kinds(verdict) == {"unfilled"}, describe(verdict)
        first = verdict.violations[0]
        assert first.where == "group 0, slab 1.1, operator q" and first.message.startswith("x: needs 8192 bytes")
        assert first.capacity_bytes == loaded * 16 // M  # what one slab's share of the load filled


def test_an_input_labelled_as_cut_by_the_column_chunks_is_short_of_what_each_product_reads():
    data = _qkv()
    for step in _steps(data):
        for entry in step.get("needs", []) + step.get("alloc", []):
            if entry[0] == "x":
                entry[2] = ["outer", "slab"]
    for d in data["schedule"]["groups"][0]["dma"]:
        if d["tensor"] == "x":
            d["split"] = ["outer", "slab"]
    _claim(data, -(N // 32 - 1) * M * K * 2)  # x read once instead of once per chunk
    assert verify(data).ok  # consistent with itself
    verdict = verify(data, QKV)
    assert _kinds(verdict) == {"short"}
    assert verdict.violations[0].message == ("x: the operator reads 8192 bytes of it in this iteration (the model's "
                                             "graph), 2048 on chip hold data")


def test_a_slab_buffer_of_two_bytes_with_no_needs_is_short():
    data = _qkv()
    for step in _steps(data):
        step["needs"] = []
        for entry in step.get("alloc", []):
            if entry[0] == "x":
                entry[1] = 2 * M // 16
    (load,) = [d for d in data["schedule"]["groups"][0]["dma"] if d["tensor"] == "x"]
    _claim(data, (2 * M // 16 - load["bytes"]) * (N // 32))
    load["bytes"] = 2 * M // 16
    assert verify(data).ok
    verdict = verify(data, QKV)
    assert _kinds(verdict) == {"short"} and "x: the operator reads 8192 bytes" in verdict.violations[0].message


def test_an_operator_dropped_from_the_schedule_and_its_output_never_stored_are_found():
    data = _qkv()
    group = data["schedule"]["groups"][0]
    for loop in flat_loops(group["steps"]):
        loop["steps"] = [s for s in loop["steps"] if s.get("operator") != "v"]
    for step in _steps(data):
        if step.get("operator") == "k":
            step["free"] = step.get("free", []) + [["x"]]
    dropped = [d for d in group["dma"] if d["tensor"] in ("v", "wv")]
    group["dma"] = [d for d in group["dma"] if d not in dropped]
    _claim(data, -sum(d["bytes"] for d in dropped))
    for step in _steps(data):
        step["alloc"] = [e for e in step.get("alloc", []) if e[0] != "wv"]
        step["free"] = [e for e in step.get("free", []) if e[0] != "wv"]
    data["schedule"]["outputs"] = [o for o in data["schedule"]["outputs"] if o[0] != "v"]
    data["schedule"]["groups"][0]["peak_bytes"] = CAPACITY
    assert verify(data).ok, describe(verify(data))
    verdict = verify(data, QKV)
    assert _kinds(verdict) == {"operators", "output"}
    assert [v.message for v in verdict.violations] == [
        "v, an operator of the model, runs in no step and is not listed as folded",
        f"model output v (the model's graph): 0 of its {M * N * 2} bytes stored"]


def test_a_product_listed_as_folded_into_a_reader_is_rejected():
    chain = Graph("chain", (_projection("q", "wq"), Operator(
        "double", {"m": M, "n": N}, (Tensor("q", (M, N)), Tensor("y", (M, N))),
        reads=(Access("q", ("m", "n")),), writes=(Access("y", ("m", "n")),))), frozenset({"wq"}))
    data = _qkv()  # names q, k and v: q's step becomes the reader's, as if the product were folded into it
    for step in _steps(data):
        if step.get("operator") == "q":
            step["operator"] = "double"
    data["operators_folded"] = ["q"]
    messages = [v.message for v in verify(data, chain).violations if v.kind == "operators"]
    assert "q is listed as folded, but it does not write one result at its own loops (a reduction): its readers " \
           "cannot apply it" in messages


def flat_loops(steps: list) -> list[dict]:
    out = []
    for s in steps:
        if "loop" in s:
            out += [s] + flat_loops(s["steps"])
    return out


def _chain() -> Graph:
    """f: y = x * w (w broadcast over 20 rows of 10), g: z = y + 1: the graph of the hand-written
    plan of :func:`tests.memory.test_verify._tiny`."""
    f = Operator("f", {"i": 20, "j": 10}, (Tensor("x", (20, 10)), Tensor("w", (10,)), Tensor("y", (20, 10))),
                 reads=(Access("x", ("i", "j")), Access("w", ("j",))), writes=(Access("y", ("i", "j")),))
    g = Operator("g", {"i": 20, "j": 10}, (Tensor("y", (20, 10)), Tensor("z", (20, 10))),
                 reads=(Access("y", ("i", "j")),), writes=(Access("z", ("i", "j")),))
    return Graph("chain", (f, g), frozenset({"w"}))


def test_steps_whose_reads_are_not_counted_from_the_graph_are_named_in_the_verdict():
    verdict = verify(_tiny(capacity=1024), _chain())  # hand-written: its groups have no loop nest
    assert verdict.ok and verdict.model_checks == \
        "made (reads not counted from the graph for 2 operators with no loop nest (f, g))"


def test_a_dropped_group_makes_its_output_look_like_a_model_input_only_without_the_graph():
    data = _tiny(capacity=1024)
    assert verify(data, _chain()).ok
    second = data["schedule"]["groups"].pop(1)
    step = second["steps"][0]  # g now loads y from DRAM, as if the model had it
    step["alloc"].append(["y", 400, [], 0, 400])
    second["dma"].append({"step": "1.0", "tensor": "y", "bytes": 400, "split": [], "from": "dram",
                          "to": "scratchpad", "offset": 0})
    second["traffic_bytes"] += 400
    data["schedule"]["groups"] = [second]
    data["total_bytes"] = 800
    assert verify(data).ok, describe(verify(data))
    verdict = verify(data, _chain())
    assert _kinds(verdict) == {"operators", "inputs"}
    assert "y is taken from DRAM as if it were a model input, but the model computes it (f)" in \
        [v.message for v in verdict.violations][1]


@pytest.mark.slow  # the planner's key-block plan of the attention takes a few seconds
def test_a_query_block_of_two_bytes_in_a_key_block_loop_that_lists_no_needs_is_short():
    g = GRAPHS["attention"]
    data = json.loads(_planned("attention", KEY_CAPACITY))
    assert verify(data, g).ok, describe(verify(data, g))
    (gi,) = [i for i, grp in enumerate(data["schedule"]["groups"]) if "Q" in {d["tensor"] for d in grp["dma"]}]
    group = data["schedule"]["groups"][gi]
    assert not any(s.get("needs") for s in _steps(data, gi) if s.get("operator") == "matmul:scores")
    (load,) = [d for d in group["dma"] if d["tensor"] == "Q"]
    blocks = 1
    for loop in flat_loops(group["steps"]):
        if loop["loop"] in load["split"]:
            blocks *= -(-loop["extent"] // loop["size"])
    small = 2 * blocks  # two bytes per block of queries
    for step in _steps(data, gi):
        for entry in step.get("alloc", []):
            if entry[0] == "Q":
                entry[1] = small
    _claim(data, small - load["bytes"], gi)
    load["bytes"] = small
    assert verify(data).ok
    verdict = verify(data, g)
    assert _kinds(verdict) == {"short"}
    assert verdict.violations[0].message.startswith("Q: the operator reads") and \
        verdict.violations[0].message.endswith("2 on chip hold data")


def _first_chunk_only() -> dict:
    """The plan of q, k and v with each weight's first chunk loaded once, before the loop over
    chunks, and needed as every chunk in turn (the traffic claimed moved to match)."""
    data = _qkv()
    group = data["schedule"]["groups"][0]
    (outer,) = group["steps"]
    chunk = K * 32 * 2  # 32 of the 128 columns of a weight
    first, slabs, last = outer["steps"]  # weight chunks allocated and loaded, x streamed, weights freed
    before = {"id": "pre", "operator": None, "uses": [], "needs": [], "free": [],
              "alloc": [[e[0], chunk, [], e[3], e[4]] for e in first["alloc"]]}
    outer["steps"] = [slabs]
    last["id"] = "post"
    group["steps"] = [before, outer, last]
    for d in group["dma"]:
        if d["step"] == first["id"]:  # loaded once, before the loop, with no labels: the first chunk only
            d.update(step="pre", bytes=chunk, split=[])
    _claim(data, -3 * (N * K * 2 - chunk))
    return data


def test_a_weight_chunk_loaded_once_and_needed_as_every_chunk_in_turn_holds_only_the_first():
    data, chunk = _first_chunk_only(), K * 32 * 2
    assert verify(data).ok and verify(data, QKV).traffic_bytes == verify(data).claimed_traffic_bytes
    verdict = verify(data, QKV)
    assert _kinds(verdict) == {"elsewhere"}
    assert verdict.violations[0].where == "group 0, slab 2.1, operator q"
    assert verdict.violations[0].message == (f"wq: needs bytes [{chunk}, {2 * chunk}) of it, [{chunk}, {2 * chunk}) "
                                             "hold no data of it on chip")


def test_a_loop_nest_that_runs_a_dimension_over_another_extent_than_the_graphs_is_rejected():
    data = _qkv()
    nest = data["schedule"]["groups"][0]["loop_nest"]
    for loop in nest["operators"][0]["loops"]:
        if loop["dim"] == "k":
            loop["extent"] = K // 2
    verdict = verify(data, QKV)
    assert _kinds(verdict) == {"binding"}
    assert verdict.violations[0].message == f"q: the nest runs k over {K // 2}, the model's operator over {K}"


def test_verify_command_says_when_the_model_cannot_be_imported_again(tmp_path):
    path = tmp_path / "plan.json"
    for model, why in ((None, "the plan names no model"),
                       ("zoo:no_such_model", "zoo:no_such_model cannot be imported again")):
        data = _qkv()
        if model:
            data.update(model=model, imported_as={"batch": 1, "seq": None, "elem_bytes": 2})
        path.write_text(json.dumps(data))
        result = CliRunner().invoke(app, ["memory", "verify", str(path)])
        assert result.exit_code == 0 and "checks against the model's graph not made (" + why in result.output, \
            result.output


def test_iterations_the_replay_skips_as_repeats_hide_no_part_of_a_tensor_held_elsewhere():
    """y = 2x slab by slab (4 slabs of 1 KiB), three times over (an outer loop); only x's first two
    slabs are loaded, once, before both loops. From the second outer pass on, the second slab's
    iteration (neither loop's first nor last) leaves the replay as it found it, and so would the
    third's, which needs a part of x never loaded: the replay that counts repeated iterations
    instead of replaying them finds all that the one replaying every iteration finds (the last two
    slabs, in every pass)."""
    from loopwise.memory.ir import elementwise

    g = Graph("double", (elementwise("mul", (2048,), ("x",), "y"),), frozenset())
    step = {"id": "s", "operator": "mul", "uses": ["x", "y"], "needs": [["x", 4096, ["s"]]],
            "alloc": [["y", 4096, ["s"], 2048, 1024]], "free": [["y"]]}
    first = {"id": "pre", "operator": None, "uses": [], "needs": [], "alloc": [["x", 2048, [], 0, 2048]], "free": []}
    last = {"id": "post", "operator": None, "uses": [], "needs": [], "alloc": [], "free": [["x"]]}
    loops = {"loop": "o", "extent": 3, "size": 1, "steps": [{"loop": "s", "extent": 4, "size": 1, "steps": [step]}]}
    dma = [{"step": "pre", "tensor": "x", "bytes": 2048, "split": [], "offset": 0, "from": "dram", "to": "scratchpad"},
           {"step": "s", "tensor": "y", "bytes": 4096, "split": ["s"], "offset": 2048, "from": "scratchpad",
            "to": "dram"}]
    group = {"operators": ["mul"], "traffic_bytes": 2048 + 3 * 4096, "peak_bytes": 3072,
             "steps": [first, loops, last], "dma": dma}
    data = {"total_bytes": 2048 + 3 * 4096, "operators_folded": [],
            "schedule": {"capacity_bytes": 3072, "outputs": [["y", 4096]], "groups": [group]}}
    every = verify(data, g, skip_repeats=False)
    assert [v.kind for v in every.violations] == ["elsewhere"] * 6, describe(every)
    assert verify(data, g).violations == every.violations
