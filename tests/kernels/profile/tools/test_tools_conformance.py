"""Conformance suite every registered micro-profiling tool passes, and the registry's contract.

Each tool runs on an empty input and on a spread of hand-written SASS records (spills, narrow
accesses, FFMA-only matmul, tf32 / fp16 / fp8 tensor-core paths, launch configurations), plus
synthetic ncu metrics, roofline verdicts and per-call kernel lists (``ncu_synthetic``), so a tool
is held to the Finding contract in the cases where it fires, not only where it stays silent.
"""

from __future__ import annotations

import itertools
import re
from importlib.metadata import entry_points

import pytest

from loopwise.kernels.moves import PARAMETER_MOVES, STRUCTURAL_MOVES, StructuralMove
from loopwise.kernels.profile import registry
from loopwise.kernels.profile.classify import Classification
from loopwise.kernels.profile.findings import (
    INPUTS,
    KERNEL_CLASSES,
    SEVERITIES,
    Finding,
    LaunchConfig,
    ProblemHints,
    ToolInput,
    severity_for,
)
from loopwise.kernels.profile.sass import KernelSass, Resources, TensorCoreOp
from loopwise.kernels.profile.tool import Tool

import ncu_synthetic as syn

TOOLS = registry.load_tools()


def _sass(name: str, *, ffma: int = 0, loads: dict[int, int] | None = None, stores: dict[int, int] | None = None,
          ldl: int = 0, stl: int = 0, tc: tuple[tuple[str, int], ...] = (), registers: int = 64,
          shared: int = 0, spill: int = 0) -> KernelSass:
    ops = tuple(TensorCoreOp(opcode="HGMMA", shape="64x64x16", accumulator="F32", inputs=t,
                             variant=f"HGMMA.64x64x16.F32.{t}", count=n) for t, n in tc)
    n_tc = sum(n for _, n in tc)
    instructions = 100 + ffma + ldl + stl + n_tc
    return KernelSass(
        name=name, instructions=instructions, opcodes={"FFMA": ffma, "LDL": ldl, "STL": stl, "HGMMA": n_tc},
        families={"fp32": ffma, "local_memory": ldl + stl, "tensor_core": n_tc}, tensor_core=ops,
        global_loads=loads or {16: 4}, global_stores=stores or {16: 2}, local_loads=ldl, local_stores=stl,
        local_load_bytes=4 * ldl, local_store_bytes=4 * stl,
        resources=Resources(registers=registers, stack_bytes=spill, dynamic_shared_bytes=shared,
                            spill_store_bytes=spill // 2, spill_load_bytes=spill - spill // 2))


RECORDS = [
    _sass("clean"),
    _sass("spilling", ffma=200, ldl=150, stl=140, registers=32, spill=2048),
    _sass("narrow", loads={4: 8}, stores={4: 8}),
    _sass("ffma_matmul", ffma=1024, registers=96, shared=32768),
    _sass("tf32", tc=(("TF32", 4),), shared=49152),
    _sass("fp16_bf16", tc=(("F16", 2), ("BF16", 2)), shared=24576),
    _sass("fp8", tc=(("E4M3", 2),), registers=168, shared=200_000),
    _sass("too_much_shared", shared=240_000),
]
LAUNCHES = [None, LaunchConfig(grid_blocks=40, num_warps=4, block=1024), LaunchConfig(grid_blocks=1100, num_warps=8),
            LaunchConfig(grid_blocks=100_000, block_threads=128)]
HINTS = [ProblemHints(), ProblemHints(matmul_shaped=True, precision="relaxed"),
         ProblemHints(matmul_shaped=True, precision="fp32", input_dtype="fp16"),
         ProblemHints(matmul_shaped=True, precision="relaxed", input_dtype="bf16")]


def _classification(kernel_class: str) -> Classification:
    return Classification(kernel="k", kernel_class=kernel_class, bound="memory", sol_time_s=1e-3,
                          memory_time_s=1e-3, compute_time_s=None, fraction_of_sol=0.3, at_roofline=False,
                          arithmetic_intensity=None, ridge_point=None, achieved_gbs=None, achieved_tflops=None,
                          explanation="")


INPUT_CASES = [ToolInput(sass=s, launch=lc, hints=h) for s, lc, h in itertools.product(RECORDS, LAUNCHES, HINTS)]
INPUT_CASES += [ToolInput(sass=RECORDS[2], classification=_classification(c)) for c in KERNEL_CLASSES]

# ncu-based and cross-kernel cases: every metric set under every class, with and without a byte budget.
_RAW = [{}, syn.UNCOALESCED, syn.COALESCED, syn.BANK_CONFLICTS, syn.NO_CONFLICTS, syn.DIVERGENT, syn.UNIFORM,
        syn.L2_MISSING, syn.L2_HITTING, syn.STALLS_MEMORY, syn.STALLS_BUSY,
        {**syn.UNCOALESCED, **syn.BANK_CONFLICTS, **syn.DIVERGENT, **syn.L2_MISSING, **syn.STALLS_MEMORY}]
_VERDICTS = [None] + [syn.classification(c) for c in KERNEL_CLASSES] + [syn.classification(fraction=0.9)]
_BUDGETS = [ProblemHints(), ProblemHints(min_dram_bytes=100e6), ProblemHints(min_dram_bytes=40e6), ProblemHints(matmul_shaped=True, min_dram_bytes=300e6)]
INPUT_CASES += [ToolInput(ncu=syn.metrics(raw), classification=v, hints=h, launch=lc, sass=sass)
                for raw, v, h, (lc, sass) in itertools.product(
                    _RAW, _VERDICTS, _BUDGETS, [(None, None), (LAUNCHES[1], RECORDS[2]), (LAUNCHES[2], RECORDS[0])])]
INPUT_CASES += [ToolInput(kernels=k, hints=h) for k, h in itertools.product(
    [(), syn.short_kernels(), syn.short_kernels(gap_s=None), syn.short_kernels(2), syn.unfused_kernels()], _BUDGETS)]

_SENTENCE_BREAK = re.compile(r"[.!?;]\s+\S")


def _check(finding: Finding, tool: Tool) -> None:
    assert isinstance(finding, Finding)
    assert finding.tool == tool.name
    text = finding.guidance.strip()
    assert text and (text[0].isupper() or text[0].isdigit()) and text.endswith("."), text
    assert not _SENTENCE_BREAK.search(text), f"more than one sentence: {text}"
    assert re.search(r"\d", text), f"no number in the guidance: {text}"
    assert finding.evidence and all(isinstance(k, str) for k in finding.evidence)
    assert any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in finding.evidence.values())
    assert finding.severity in SEVERITIES and finding.severity == severity_for(finding.score)
    assert 0.0 <= finding.score <= 1.0
    for move in finding.moves:
        if isinstance(move, StructuralMove):
            assert move.name in STRUCTURAL_MOVES
        else:
            assert move.settings and set(move.to_json()) <= set(PARAMETER_MOVES)
            assert all(isinstance(v, int) and v > 0 for v in move.to_json().values())


def test_every_tool_of_this_package_is_registered():
    names = [t.name for t in TOOLS]
    assert len(names) == len(set(names)) >= 6
    package = {t.name for t in registry._package_tools()}
    assert package == set(names)
    declared = {ep.name for ep in entry_points(group=registry.GROUP)}
    if declared:  # installed: pyproject's entry points name exactly the tool modules
        assert declared == package


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_tool_declares_name_needs_and_classes(tool):
    assert isinstance(tool, Tool)
    assert re.fullmatch(r"[a-z][a-z0-9_]*", tool.name)
    assert tool.needs and set(tool.needs) <= set(INPUTS)
    assert tool.applies_to and set(tool.applies_to) <= set(KERNEL_CLASSES)
    assert tool.summary and (type(tool).__doc__ or type(tool).__module__)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_tool_on_empty_input_returns_no_findings(tool):
    assert tool.run(ToolInput()) == []


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_tool_without_a_needed_input_is_silent(tool):
    for missing in tool.needs:
        inp = ToolInput(sass=RECORDS[1], launch=LAUNCHES[1], classification=_classification("underutilized"),
                        hints=HINTS[1])
        assert tool.run(inp.model_copy(update={missing: None})) == []


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_tool_findings_keep_the_contract(tool):
    fired = 0
    for inp in INPUT_CASES:
        findings = tool.run(inp)
        assert isinstance(findings, list)
        for finding in findings:
            _check(finding, tool)
        fired += bool(findings)
    assert fired, f"{tool.name} never fired on the synthetic records; the contract was not exercised"


def test_parameter_moves_are_the_expert_proposers_knobs():
    """The tools name the Triton templates' integer knobs; split-K's ranges and the CUTLASS
    variants' knobs (tile shapes, clusters, schedules, stages) are reached through structural
    moves, never named by a tool."""
    from loopwise.kernels.expert.matmul_variants import LIBRARY_KINDS
    from loopwise.kernels.expert.proposer import SPACE, STRUCTURAL

    # split (split-K) is reached through the structural move split_k, like the CUTLASS knobs; a
    # partitioned forward's GEMM tile through reduce_registers, its GEMM warps by exploration only;
    # a matmul's K-major copies through vectorize_loads, a partitioned forward's CUDA graph through
    # use_cuda_graphs; a convolution's channels-last layout and its implicit GEMM's NHWC reads (which
    # widen its copies, yet ran slower on the H200: docs/log/2026-12-01.md) by exploration only; so are a partitioned
    # forward's Linears in cuBLAS (cublas, the relaxed default) and back in Triton; the compiler
    # seed's library GEMMs as Triton GEMMs with fused epilogues (gemm) through fuse_kernels and use_tf32x3,
    # their tile and stages (gemm_tile) by exploration only; its library convolutions as Triton
    # convolutions (conv; slower than cuDNN's fp32 ones where timed: docs/log/2026-12-07.md) by
    # exploration only; a scan's float64 accumulation (scan64), a choice of precision rather than speed, by exploration only.
    assert set(PARAMETER_MOVES) == {k for kind, space in SPACE.items() if kind not in LIBRARY_KINDS
                                    for k in space} - {"split", "tile", "gemm_warps", "kmajor", "cudagraph",
                                                       "channels_last", "nhwc", "cublas", "gemm", "gemm_tile", "conv", "scan64"}
    assert STRUCTURAL["fuse_kernels"]["inductor"] == ({"gemm": "up"},)
    # Triton's, and CUTLASS's mma.sync kernels' (3xTF32 and one TF32 product)
    assert STRUCTURAL["split_k"] == {"matmul": ({"split": "up"},), "matmul_3xtf32": ({"split": "up"},),
                                     "matmul_1xtf32": ({"split": "up"},)}
    assert STRUCTURAL["vectorize_loads"]["matmul"] == ({"kmajor": "up"},)
    assert all(STRUCTURAL["use_cuda_graphs"][kind] == ({"cudagraph": "up"},) for kind in SPACE if "cudagraph" in SPACE[kind])
    assert {"tile": "down"} in STRUCTURAL["reduce_registers"]["graph_linear"]
    assert not set(PARAMETER_MOVES) & {k for kind in LIBRARY_KINDS for k in SPACE[kind]}
    assert all(kind in STRUCTURAL["reduce_registers"] for kind in LIBRARY_KINDS)


def test_finding_rejects_moves_outside_the_vocabulary_and_empty_evidence():
    with pytest.raises(ValueError):
        Finding.make("t", "Use 4 warps.", {"x": 1}, 0.5, ["make_it_fast"])
    with pytest.raises(ValueError):
        Finding.make("t", "Use 4 warps.", {"x": 1}, 0.5, [{"threads": 4}])
    with pytest.raises(ValueError):
        Finding.make("t", "Use 4 warps.", {}, 0.5)
    assert Finding.make("t", "Use 8 warps.", {"x": 1}, 1.7, [{"warps": 8}]).severity == "high"


def test_select_modes():
    assert registry.select(None, "raw") == []
    assert registry.select(None, "all") == list(TOOLS)
    assert registry.select(None, "proactive") == list(TOOLS)
    for kernel_class in KERNEL_CLASSES:
        chosen = registry.select(_classification(kernel_class), "proactive")
        assert chosen == [t for t in TOOLS if kernel_class in t.applies_to]
        assert registry.select(kernel_class, "proactive") == chosen
        assert registry.select(_classification(kernel_class), "all") == list(TOOLS)
    memory = {t.name for t in registry.select("memory_bound")}
    assert "tensor_cores_unused" not in memory and "narrow_accesses" in memory
    with pytest.raises(ValueError):
        registry.select(None, "everything")


def test_select_also_runs_the_tools_an_analyst_named_whatever_the_class():
    memory = {t.name for t in registry.select("memory_bound", also=("tensor_cores_unused",))}
    assert memory == {t.name for t in registry.select("memory_bound")} | {"tensor_cores_unused"}
    assert registry.select("memory_bound", "raw", also=("tensor_cores_unused",)) == []


def test_diagnose_ranks_by_score_and_raw_mode_says_nothing():
    inp = ToolInput(sass=RECORDS[1], launch=LaunchConfig(grid_blocks=40, num_warps=4),
                    hints=ProblemHints(matmul_shaped=True))
    findings = registry.diagnose(inp, "all")
    assert len(findings) >= 2 and [f.score for f in findings] == sorted((f.score for f in findings), reverse=True)
    assert registry.diagnose(inp, "raw") == []


def test_fallback_finds_the_same_tools_without_entry_points(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    registry.load_tools.cache_clear()
    try:
        assert [t.name for t in registry.load_tools()] == [t.name for t in TOOLS]
    finally:
        registry.load_tools.cache_clear()
