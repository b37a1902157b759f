"""The batched product's CUTLASS variant compiled: its kernel built for sm_90a ahead of time with nvcc
(no GPU needed; about a minute of nvcc per case), and the variant against torch on a Hopper GPU."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from loopwise.kernels.expert import capture
from loopwise.kernels.expert.generate import render, variants
from loopwise.kernels.problem import load_problem

from expert_judging import bmm_pattern, generated_style_problem, matmul_pattern  # noqa: E402 - tests/kernels/expert on sys.path


def _string(source: str, name: str) -> str:
    """The string the candidate's module assigns to ``name`` (KERNEL, GLUE)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} string")


def _instantiation(batch: int, m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> str:
    """A host function that instantiates the batched GEMM for contiguous operands of these sizes."""
    lda, ldb = (m if trans_a else k), (k if trans_b else n)
    return f"""
int lw_instantiate(const lw::Element* a, const lw::Element* b, lw::Element* c, void* w, cudaStream_t s) {{
  auto args = lw::arguments(a, {lda}, {m * k}, b, {ldb}, {k * n}, c, {n}, {m * n}, {m}, {n}, {k}, {batch}, 0);
  return lw::run(args, w, s) + static_cast<int>(lw::Gemm::get_workspace_size(args));
}}
"""


AOT_CASES = [  # (dtype, trans_a, trans_b, knobs beyond the defaults, the WGMMA instruction one warp group issues)
    ("float16", False, False, {}, "64x256x16"),  # 128x256 cooperative: 64 rows a consumer warp group
    ("bfloat16", True, True, {"tile": "64x128x64", "cluster": "1x2", "schedule": "pingpong"}, "64x128x16"),
]


@pytest.mark.slow
@pytest.mark.parametrize("dtype,trans_a,trans_b,knobs,shape", AOT_CASES)
def test_the_kernel_compiles_for_hopper_to_wgmma_with_tma(tmp_path, dtype, trans_a, trans_b, knobs, shape):
    """The rendered KERNEL with a host function that instantiates it, built by nvcc for sm_90a with
    the CUTLASS headers loopwise adds to CUTLASS candidates: WGMMA (HGMMA) on the operands' own
    type with fp32 accumulators, TMA copies, no spills."""
    from loopwise.kernels.backends import cutlass_include_dirs
    from loopwise.kernels.profile import sass_tools

    nvcc = shutil.which("nvcc")
    if nvcc is None or not cutlass_include_dirs():
        pytest.skip("needs nvcc and the nvidia-cutlass headers")
    try:
        sass_tools.find_tool("cuobjdump")
    except sass_tools.ToolNotFoundError:
        pytest.skip("no cuobjdump / nvdisasm (CUDA or Triton)")
    batch, m, n, k = 9, 1024, 2048, 512
    pattern = bmm_pattern(dtype, trans_a, trans_b, batch=batch, m=m, n=n, k=k)
    source = _string(render(pattern, {"template": "bmm_cutlass", **knobs}), "KERNEL") + _instantiation(batch, m, n, k, trans_a,
                                                                                                 trans_b)
    cu, cubin = tmp_path / "bmm.cu", tmp_path / "bmm.cubin"
    cu.write_text(source)
    cmd = [nvcc, "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
           *[f"-I{d}" for d in cutlass_include_dirs()], "-cubin", str(cu), "-o", str(cubin)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    (kernel,) = [k for k in sass_tools.profile_cubin(cubin).kernels if k.instructions > 100]
    ops = {(op.opcode, op.inputs, op.accumulator, op.shape) for op in kernel.tensor_core}
    assert ops == {("HGMMA", "BF16" if dtype == "bfloat16" else "F16", "F32", shape)}
    assert kernel.tma_copies > 0 and kernel.local_loads == 0 and kernel.local_stores == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bmm_cutlass", "matmul_cutlass", "bmm_cutlass_tf32", "matmul_cutlass_tf32"])
def test_the_whole_extension_source_compiles_for_hopper_without_a_gpu(tmp_path, kind):
    """KERNEL and GLUE together, as load_inline builds them (the glue's checks of each operand are
    one macro both templates share), compiled to an object file by nvcc for sm_90a with torch's
    headers: no GPU, no link. The CPU wheel of torch lacks one header its CUDA build generates
    (``c10/cuda/impl/cuda_cmake_macros.h``); a copy of it with the one macro it defines is put first."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    from loopwise.kernels.backends import cutlass_include_dirs

    import os

    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), nvcc and Path(nvcc).resolve().parents[1], "/usr/local/cuda"]
    cuda = next((Path(h) / "include" for h in homes if h and (Path(h) / "include" / "cuda_runtime.h").exists()), None)
    if nvcc is None or not cutlass_include_dirs() or cuda is None:
        pytest.skip("needs nvcc, the CUDA headers and the nvidia-cutlass headers")
    stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    tf32 = kind.endswith("_tf32")  # fp32 operands in TF32 under relaxed, copied K-major first
    dtype = "float32" if tf32 else "bfloat16" if kind.startswith("bmm") else "float16"
    pattern = (bmm_pattern(dtype, False, True) if kind.startswith("bmm") else matmul_pattern(dtype, trans_a=True))
    cu = tmp_path / "extension.cu"
    source = render(pattern, {"template": kind}, "relaxed" if tf32 else "fp32")
    cu.write_text(_string(source, "KERNEL") + _string(source, "GLUE"))  # one CUDA source, as load_inline builds it
    includes = [tmp_path / "stub", *include_paths(), cuda, sysconfig.get_paths()["include"], *cutlass_include_dirs()]
    cmd = [nvcc, "-std=c++17", "-O0", "-DNDEBUG", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
           "-DTORCH_EXTENSION_NAME=lw_check", *[f"-I{d}" for d in includes], "-c", str(cu), "-o", str(tmp_path / "x.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-4000:]


M, N, K = 1001, 776, 520  # M a multiple of no tile (it is no operand's contiguous extent unless A is transposed)
GPU_CASES = [  # (dtype, forward over x (and y), module init, inputs, knobs beyond the defaults)
    ("bfloat16", "x = torch.bmm(x, y)", "", f"torch.randn(3, {M}, {K}), torch.randn(3, {K}, {N})", {}),
    # the generated suite's spelling: the model's own weight, transposed
    ("float16", "x = torch.bmm(x, self.w.transpose(1, 2))", f"self.w = nn.Parameter(torch.randn(3, {N}, {K}))",
     f"torch.randn(3, {M}, {K})", {"tile": "128x128x64", "schedule": "pingpong"}),
    # 4-D A times one 2-D B every entry reads (batch stride 0), B transposed
    ("float16", "x = x @ y.transpose(-1, -2)", "", f"torch.randn(2, 3, {M}, {K}), torch.randn({N}, {K})",
     {"tile": "64x128x64", "cluster": "1x2", "schedule": "pingpong"}),
    # one 2-D A, transposed, shared by the batch (M = 1000: A's contiguous extent)
    ("bfloat16", "x = torch.matmul(x.transpose(0, 1), y)", "", f"torch.randn({K}, 1000), torch.randn(3, {K}, {N})",
     {"tile": "256x128x64", "cluster": "1x1"}),
    # fp32 in TF32 under relaxed: the transposed A copied K-major
    ("float32", "x = torch.matmul(x.mT, y)", "", f"torch.randn(3, {K}, {M}), torch.randn(3, {K}, {N})", {}),
]


def _problem(tmp_path, i: int, dtype: str, forward: str, init: str, inputs: str):
    args = "x, y" if inputs.count("torch.randn") == 2 else "x"
    inputs = inputs.replace(")", ", dtype=DTYPE)")
    init = f"{init}\nself.to(DTYPE)" if init else ""
    path = generated_style_problem(tmp_path, f"bmm_{i}", init, forward, inputs, dtype, args)
    return load_problem(str(path))


@pytest.mark.gpu
def test_the_variant_matches_torch_on_the_gpu(tmp_path):
    """bf16 and fp16 batches of inputs or of the model's weight, 3-D and 4-D, a shared operand,
    transposed operands, several knobs, and TF32 under relaxed: each output within one rounding to
    its type of the float64 product (TF32: within 2^-9 of the sum of |products|). The glue refuses
    an operand whose entries would not start 16-byte aligned."""
    import os

    import torch

    from loopwise.kernels.backends import precompile, prepare_environment

    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        pytest.skip("the WGMMA variant needs Hopper (sm_90a)")
    cases = []
    for i, (dtype, forward, init, inputs, knobs) in enumerate(GPU_CASES):
        problem = _problem(tmp_path, i, dtype, forward, init, inputs)
        pattern = capture(problem)
        precision = "relaxed" if dtype == "float32" else "fp32"
        kind = "bmm_cutlass_tf32" if dtype == "float32" else "bmm_cutlass"
        assert variants(pattern, precision) == ["bmm", kind], (forward, pattern)
        cases.append((problem, pattern, kind, render(pattern, {"template": kind, **knobs}, precision)))
    extensions = tmp_path / "extensions"
    built = precompile([source for *_, source in cases], str(extensions), "9.0")
    assert all(b.ok for b in built), built
    os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions)
    prepare_environment({"arch": "9.0"}, "cuda:0")
    for i, (problem, pattern, kind, source) in enumerate(cases):
        path = tmp_path / f"candidate_{i}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        reference = problem.load_module()
        torch.manual_seed(i)
        model = reference.Model(*reference.get_init_inputs()).cuda()
        torch.manual_seed(i)
        candidate = module.ModelNew(*reference.get_init_inputs()).cuda()
        inputs = [x.cuda() for x in reference.get_inputs()]
        with torch.no_grad():
            out = candidate(*inputs)
            expected = model.double()(*[x.double() for x in inputs])
            for p in model.parameters():
                p.abs_()
            scale = model(*[x.double().abs() for x in inputs])
        assert out.dtype == inputs[0].dtype and out.shape == expected.shape, (kind, GPU_CASES[i])
        error = (out.double() - expected).abs()
        if kind == "bmm_cutlass_tf32":
            assert (error / scale).max().item() < 2.0 ** -9, GPU_CASES[i]
            continue
        unit = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}[out.dtype]
        allowed = unit * expected.abs() + dict(pattern.params)["k"] * 2.0 ** -22 * scale
        assert (error / allowed).max().item() <= 1.0, GPU_CASES[i]
        if i == 0:  # entries that would not start 16-byte aligned, and a misaligned start: refused
            x, y = inputs
            rows = torch.empty(3, M * K + 4, dtype=x.dtype, device="cuda")[:, :M * K].view(3, M, K)
            # the whole message, numbers included (a number formatted through an ostream inside the
            # extension crashed the process on the GPU machine, or cut the message short)
            with pytest.raises(RuntimeError, match=rf"batch stride \({M * K + 4}\) must be a multiple of 8 elements"):
                candidate(rows, y)
            shifted = torch.empty(3 * M * K + 4, dtype=x.dtype, device="cuda")[4:].view(3, M, K)
            with pytest.raises(RuntimeError, match="must start 16-byte aligned"):
                candidate(shifted, y)
