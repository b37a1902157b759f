"""The compiler-seeded root: Inductor's module written out as a standalone ModelNew.

The records under ``records/`` are Inductor's modules and autotuned launches as
``bench/inductor_seed_check.py`` recorded them on the GPU (``h200__*``), plus one written by hand in
Inductor's format (``handwritten__*``). Each is written out and judged here by the real judge on the
CPU, in Triton's interpreter: correct, no rejection (its kernels are its own launches)."""

import re
import sys
from pathlib import Path

import pytest
import torch

from loopwise.core.propose import ProposalFailure, ProposalRequest
from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.inductor.extract import InductorRecord, _input_paths, _output_count
from loopwise.kernels.expert.inductor.standalone import (grid_function, launch_config, module_body, parse_note,
                                                       render_seed)
from loopwise.kernels.expert.proposer import ExpertProposer
from loopwise.kernels.generate import generate_problem
from loopwise.kernels.problem import load_problem

sys.path.insert(0, str(Path(__file__).parents[1]))  # the expert tests' shared helpers
from expert_judging import judge_on_cpu  # noqa: E402

ROOT = Path(__file__).parents[4]
RECORDS = sorted((Path(__file__).parent / "records").glob("*.json"))
# Full-size problems recorded on the GPU: written out and checked statically here (Triton's
# interpreter would take hours at their sizes); judged on the GPU by bench/inductor_seed_check.py.
RECORDED = [p for p in RECORDS if p.name.startswith("h200__")]
HANDWRITTEN = [p for p in RECORDS if p.name.startswith("handwritten__")]
_FOLDERS = (ROOT / "loopwise" / "kernels" / "examples", ROOT / "bench" / "uncovered" / "level1",
            ROOT / "bench" / "uncovered" / "level2", Path(__file__).parent / "problems")


def problem_of(record_path: Path, tmp_path: Path):
    """The problem a record was made for: ``ORIGIN__NAME.json`` names the problem file NAME.py (a
    bundled example, bench/uncovered, problems/ beside this file, or the generated suite's
    NNN_sSEED_... problem)."""
    name = record_path.stem.split("__", 1)[1]
    for folder in _FOLDERS:
        if (folder / f"{name}.py").exists():
            return load_problem(str(folder / f"{name}.py"))
    generated = re.match(r"(\d+)_s(\d+)_", name)
    assert generated, f"no problem file for {record_path.name}"
    problem = generate_problem(int(generated.group(2)), int(generated.group(1)))
    path = tmp_path / f"{problem.name}.py"
    path.write_text(problem.source)
    return load_problem(str(path))


def record(name: str = "handwritten__softmax_problem") -> InductorRecord:
    return InductorRecord.from_json((Path(__file__).parent / "records" / f"{name}.json").read_text())


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_each_module_recorded_on_the_gpu_writes_out_a_clean_candidate(path, tmp_path):
    from loopwise.kernels.check import scan

    rec = InductorRecord.from_json(path.read_text())
    problem = problem_of(path, tmp_path)
    if not rec.kernels:  # a problem Inductor answers with library calls alone (top-k)
        with pytest.raises(Unsupported, match="library calls only: aten.topk"):
            render_seed(rec, problem)
        return
    for moves in ({}, {"block": 1, "warps": 1, "cudagraph": 1}):
        source = render_seed(rec, problem, moves)
        compile(source, path.stem, "exec")
        assert [r.code for r in scan(source) if r.severity != "info"] == [], path.stem
        unpacked = re.search(r"\n\s*\(?([\w, ]+?),?\)? = args\n", source).group(1)  # call()'s unpacking
        passed = re.search(r"args = \[(.*)\]\n", source).group(1)
        assert len(unpacked.split(",")) == len(rec.inputs) == len(passed.split(", ")), path.stem


@pytest.mark.parametrize("path", HANDWRITTEN, ids=[p.stem for p in HANDWRITTEN])
def test_each_recorded_module_written_out_is_judged_correct(path, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    rec = InductorRecord.from_json(path.read_text())
    problem = problem_of(path, tmp_path)
    source = render_seed(rec, problem)
    assert "torch.compile(" not in source and "async_compile" not in source and "AsyncCompile" not in source
    judge_on_cpu(problem, source, f"seed-{path.stem}", tmp_path)


def test_other_launch_configurations_are_judged_correct_too(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    problem = load_problem(str(_FOLDERS[0] / "softmax_problem.py"))
    source = render_seed(record(), problem, {"block": 1, "warps": -1})
    assert source.startswith('"""inductor: block 1, warps -1, cudagraph 0')
    assert "{'XBLOCK': 16}" in source and ", 2, 1)" in source  # XBLOCK 8 -> 16, 4 warps -> 2
    judge_on_cpu(problem, source, "seed-moved", tmp_path)


def test_the_module_loses_its_compile_machinery_and_its_device_calls():
    body = module_body(record())
    for gone in ("AsyncCompile", "async_compile", "benchmark_compiled_module", "__main__", "_cuda_getCurrentRawStream",
                 "torch.cuda._DeviceGuard", "torch.cuda.set_device"):
        assert gone not in body, gone
    assert "_device_guard(0)" in body and "_set_device(0)" in body and "def call(self, args)" in body


def test_a_kernel_the_record_does_not_hold_makes_the_seed_unsupported():
    rec = record()
    rec.module = rec.module.replace("async_compile.wait(globals())",
                                    "cpp_fused_0 = async_compile.cpp_pybinding(['float*'], '')\nasync_compile.wait(globals())")
    with pytest.raises(Unsupported, match="cpp_fused_0 is not a launched Triton kernel"):
        module_body(rec)


def test_library_calls_only_is_not_a_candidate_of_ours():
    rec = record()
    rec.kernels = []
    rec.module = rec.module.replace("buf2 = empty_strided_cuda(", "extern_kernels.mm(arg0_1, arg0_1, out=buf2)\n            buf2 = empty_strided_cuda(")
    problem = load_problem(str(_FOLDERS[0] / "softmax_problem.py"))
    with pytest.raises(Unsupported, match="library calls only: extern_kernels.mm"):
        render_seed(rec, problem)


def test_a_grid_reading_a_name_the_kernel_lacks_is_unsupported():
    kernel = record().kernels[0]
    kernel.grid = {"prefix": [], "x": "-((znumel) // -(XBLOCK))", "y": "1", "z": "1"}
    with pytest.raises(Unsupported, match="'znumel'"):
        grid_function(kernel)


def test_moves_shift_block_sizes_and_warps_within_bounds_and_keep_a_persistent_reduction_whole():
    kernel = record().kernels[0]
    kernel.config = {"XBLOCK": 8, "R0_BLOCK": 512}
    assert launch_config(kernel, {"block": 1, "warps": 1}) == ({"XBLOCK": 16, "R0_BLOCK": 512}, 8)
    kernel.kind = "REDUCTION"
    assert launch_config(kernel, {"block": -1, "warps": -1}) == ({"XBLOCK": 4, "R0_BLOCK": 256}, 2)
    kernel.arg_names = [*kernel.arg_names[:-1], "ws_ptr", "XBLOCK"]  # a split scan's look-back workspace
    assert launch_config(kernel, {"block": -1})[0] == {"XBLOCK": 4, "R0_BLOCK": 512}  # R0 never below its size
    assert launch_config(kernel, {"block": 1})[0] == {"XBLOCK": 16, "R0_BLOCK": 1024}
    kernel.grid_symbolic = False  # the grid holds for the autotuner's configuration only
    assert launch_config(kernel, {"block": 1, "warps": 1}) == ({"XBLOCK": 8, "R0_BLOCK": 512}, 4)


def test_graph_inputs_are_found_among_parameters_buffers_and_arguments():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    got = _input_paths([model[0].weight, x, model[1].running_mean, y], model, [x, y], ["x"], "rest")
    assert got == ["self.get_parameter('0.weight')", "arg:x", "self.get_buffer('1.running_mean')", "arg:rest[0]"]
    with pytest.raises(Unsupported, match="neither the model's own tensor nor a forward argument"):
        _input_paths([torch.randn(3)], model, [x], ["x"], "args")
    assert _output_count(x) == 0 and _output_count((x, y)) == 2
    with pytest.raises(Unsupported, match="not a tensor or a tuple"):
        _output_count({"a": x})


def test_the_expert_proposes_the_seed_first_and_moves_from_it(tmp_path):
    problem = load_problem(str(_FOLDERS[0] / "softmax_problem.py"))
    proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: record(),
                              bandwidth_source=lambda device: 4247.0)
    first = proposer.propose(ProposalRequest(task="", candidate="", n=3))
    assert first[0].note.startswith("inductor template") and first[0].content.startswith('"""inductor: block 0')
    assert not first[1].note.startswith("inductor")  # the softmax template's defaults beside it
    # Third, the seed replayed as one CUDA graph: torch.compile's launches cost the host more than
    # the GPU's work on small problems, and the graph is the seed's one move that removes them.
    assert parse_note(first[2].content) == {**parse_note(first[0].content), "cudagraph": 1}
    children = proposer.propose(ProposalRequest(task="", candidate=first[0].content, n=2))
    for child in children:
        moves = parse_note(child.content)
        assert moves is not None and moves != parse_note(first[0].content), child.note


def test_the_seed_as_a_cuda_graph_is_proposed_from_the_reference_only_where_it_can_pay():
    """The same seed (one launch over a 19.2 kB input): the graph comes third where the input's
    copy costs less than the launch it saves, and is not among the first proposals where the copy
    would cost more (a device copying at 1 MB/s stands for a large input); with no bandwidth known
    it is proposed."""
    problem = load_problem(str(_FOLDERS[0] / "softmax_problem.py"))

    def first_proposals(bandwidth):
        proposer = ExpertProposer(problem, device="cuda", record_source=lambda p, d: record(),
                                  bandwidth_source=lambda device: bandwidth)
        return [parse_note(p.content) for p in proposer.propose(ProposalRequest(task="", candidate="", n=3))]

    graph = {"template": "inductor", "block": 0, "warps": 0, "cudagraph": 1, "gemm": 0, "gemm_tile": 0, "conv": 0}
    assert first_proposals(4247.0)[2] == graph and first_proposals(None)[2] == graph
    assert graph not in first_proposals(1e-3)


def test_an_uncovered_problem_gets_the_seed_and_without_a_gpu_says_why_not(tmp_path):
    # a lone grouped (neither full nor depthwise) strided Conv1d: no template of the expert covers it
    path = tmp_path / "strided_conv1d.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n        self.conv = nn.Conv1d(8, 8, 4, stride=2, padding=2, groups=2)\n\n"
                    "    def forward(self, x):\n        return self.conv(x)\n\n\n"
                    "def get_inputs():\n    return [torch.randn(2, 8, 30)]\n\n\ndef get_init_inputs():\n    return []\n")
    problem = load_problem(str(path))
    rec = record()  # any Triton kernel: the proposal is what is tested, not the numbers
    seeded = ExpertProposer(problem, device="cuda", record_source=lambda p, d: rec).propose(ProposalRequest(task="", candidate="", n=1))
    assert seeded[0].content.startswith('"""inductor:')
    failed = ExpertProposer(problem, device="cpu").propose(ProposalRequest(task="", candidate="", n=1))
    assert isinstance(failed[0], ProposalFailure)
    assert "no compiler seed: the compiler seed is extracted on a CUDA device" in failed[0].detail


@pytest.mark.gpu
def test_on_the_gpu_the_extracted_seed_is_judged_correct_with_its_own_launches(tmp_path):
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.evaluate.result import Status
    from loopwise.kernels.expert.inductor.seed import inductor_record

    problem = load_problem(str(_FOLDERS[0] / "softmax_problem.py"))
    rec = inductor_record(problem, "cuda")
    assert rec.kernels
    with LocalJudge(problem, EvalConfig(), device="cuda", log_dir=tmp_path) as judge:
        for moves in ({}, {"cudagraph": 1}):
            ev = judge.evaluate(render_seed(rec, problem, moves), f"seed-{len(moves)}")
            assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-1500:])
            assert not ev.rejections


def test_a_generated_problem_with_a_dtype_global_has_its_init_copied():
    """The generated suite writes ``DTYPE = torch.float16`` at module level and Model.__init__ reads
    it; a standalone ModelNew writes the dtype down by torch's own name."""
    import types

    from loopwise.kernels.expert.reference_init import reference_init

    problem = generate_problem(0, 1)
    module = types.ModuleType("generated")
    exec(compile(problem.source, problem.name, "exec"), module.__dict__)
    init = reference_init(problem.source, module)
    assert dict(init.constants)["DTYPE"] == f"torch.{problem.chain.dtype}"



def test_the_extraction_runs_once_per_problem_device_and_versions_and_a_failure_is_not_kept(tmp_path, monkeypatch):
    """Both precision tracks of a problem, and a resumed run, read the first extraction's outcome
    (a record, or why the problem cannot be seeded); another problem or device is extracted anew;
    a child that failed leaves nothing kept, and a kept file that cannot be read is extracted again."""
    import json
    import subprocess

    from loopwise.kernels.expert.inductor import seed as seed_module
    from loopwise.kernels.expert.inductor.extract import UNSUPPORTED_EXIT

    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    gpu = {"name": "NVIDIA H200"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: gpu["name"])
    handwritten = (Path(__file__).parent / "records" / "handwritten__linear_silu.json").read_text()
    children, outcome = [], {"exit": 0}

    def child(argv, **kwargs):  # the extraction child: writes its record, or why there is none
        children.append(argv[3])
        out = Path(argv[4])
        if outcome["exit"] == 0:
            out.write_text(handwritten)
        elif outcome["exit"] == UNSUPPORTED_EXIT:
            out.write_text(json.dumps({"unsupported": "Inductor compiled 2 graphs into 2 modules; one of each is seeded"}))
        return subprocess.CompletedProcess(argv, outcome["exit"], "", "RuntimeError: CUDA error: out of memory\n")

    monkeypatch.setattr(seed_module.subprocess, "run", child)
    silu = load_problem(str(Path(__file__).parent / "problems" / "linear_silu.py"))
    softmax = load_problem(str(_FOLDERS[0] / "softmax_problem.py"))
    first = seed_module.inductor_record(silu, "cuda")
    assert seed_module.inductor_record(silu, "cuda") == first and len(children) == 1  # the second track reads it
    assert seed_module.inductor_record(silu, "cuda", cache=False) == first and len(children) == 2
    gpu["name"] = "NVIDIA H100 80GB HBM3"
    seed_module.inductor_record(silu, "cuda")
    assert len(children) == 3  # another device: extracted there
    outcome["exit"] = 1
    for _ in range(2):  # a failed child is not kept: each call tries again
        with pytest.raises(Unsupported, match="exit 1: RuntimeError: CUDA error: out of memory"):
            seed_module.inductor_record(softmax, "cuda")
    assert len(children) == 5
    outcome["exit"] = UNSUPPORTED_EXIT
    for _ in range(2):  # "cannot be seeded" is an outcome: kept
        with pytest.raises(Unsupported, match="2 graphs"):
            seed_module.inductor_record(softmax, "cuda")
    assert len(children) == 6
    kept = sorted((tmp_path / "cache" / "inductor_records").glob("*.json"))
    assert len(kept) == 3 and not list((tmp_path / "cache" / "inductor_records").glob(".record-*"))
    outcome["exit"] = 0
    for path in kept:
        path.write_text('{"module": "trunc')  # a torn or foreign file: extracted again
    seed_module.inductor_record(softmax, "cuda")
    assert len(children) == 7 and seed_module.inductor_record(softmax, "cuda").module == first.module
