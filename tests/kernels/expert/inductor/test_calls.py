"""What Inductor's call() does, read from a record's module: the inputs its kernels store into
(the graph replay copies those back), its launches and its input bytes (whether a graph can pay)."""

import dataclasses
import sys
from pathlib import Path

from loopwise.kernels.expert.inductor import calls
from loopwise.kernels.expert.inductor.extract import InductorRecord
from loopwise.kernels.expert.inductor.standalone import render_seed, written_positions
from loopwise.kernels.problem import load_problem

sys.path.insert(0, str(Path(__file__).parents[1]))  # the expert tests' shared helpers
from expert_judging import load_candidate  # noqa: E402

HERE = Path(__file__).parent


def record(name: str) -> InductorRecord:
    return InductorRecord.from_json((HERE / "records" / f"{name}.json").read_text())


def storing_into_x(rec: InductorRecord, through: str) -> InductorRecord:
    """linear_silu's record with its pointwise kernel (which stores into its in_out_ptr0) run on the
    forward's x (call()'s arg2_1) instead of the product's buffer: named again, or reinterpreted."""
    kernel = "triton_poi_fused_addmm_silu_0.run(buf1, arg1_1"
    assert kernel in rec.module
    if through == "alias":
        module = rec.module.replace("buf1 = buf0; del buf0  # reuse", "buf1 = arg2_1")
    else:
        module = rec.module.replace(kernel, kernel.replace("buf1", "reinterpret_tensor(arg2_1, (3200,), (1,), 0)"))
    return dataclasses.replace(rec, module=module)


def test_the_inputs_a_kernel_stores_into_are_found_through_new_names_and_views():
    rec = record("handwritten__linear_silu")
    assert calls.written_inputs(rec) == []  # it stores into the product's buffer only
    for through in ("alias", "view"):
        assert calls.written_inputs(storing_into_x(rec, through)) == ["arg:x"]
    assert written_positions(storing_into_x(rec, "alias"), "x") == [0]
    assert written_positions(storing_into_x(rec, "alias"), "y, x") == [1]
    assert written_positions(storing_into_x(rec, "alias"), "y") == []


def test_the_seed_replayed_as_a_graph_is_told_which_inputs_its_kernels_store_into(tmp_path):
    """The rendered seed hands _GraphReplay the positions its kernels write (copied back after
    every replay whatever the values), none where they write none."""
    problem = load_problem(str(HERE / "problems" / "linear_silu.py"))
    rec = record("handwritten__linear_silu")
    for rec_, expected in ((rec, "writes=[]"), (storing_into_x(rec, "alias"), "writes=[0]")):
        source = render_seed(rec_, problem, {"cudagraph": 1})
        assert f"_GraphReplay(self._forward, {expected})" in source
    module = load_candidate(render_seed(storing_into_x(rec, "alias"), problem, {"cudagraph": 1}), tmp_path, "seed_w")
    assert module._GraphReplay(print, writes=[0]).writes == {0}


def test_launches_and_input_bytes_are_read_from_call():
    rec = record("handwritten__linear_silu")
    assert calls.launches(rec) == 2  # the library GEMM and the pointwise kernel
    assert calls.input_bytes(rec) == 80 * 40 * 4  # x only: the parameters are the graph's own
    assert calls.input_bytes(rec, lambda path: True) == (80 * 40 + 72 + 72 * 40) * 4
    assert calls.launches(record("h200__1_topk_values")) == 1  # torch.ops.aten.topk
    assert calls.input_bytes(record("h200__3_embedding")) == 65536  # int64 indices
