"""The CUDA + CuTe / CUTLASS path on Hopper, on CPU: the bundled CUTLASS 3 candidate's
kernel, compiled for sm_90a (the committed cubin, made by profile_fixtures/make_cutlass_fixture.py
from the candidate's own source), runs its products on WGMMA (HGMMA in the SASS) with TMA loads and
stores; the candidate passes the static scan as a CUTLASS candidate. Whether it is correct and how
fast is for the GPU machine (`loopwise kernels eval` on bf16_gemm_problem.py)."""

import hashlib
import importlib.util
import json
from pathlib import Path

from loopwise.kernels.check import detect_backends, scan
from loopwise.kernels.evaluate.verdict import static_policy
from loopwise.kernels.problem import load_problem

from sass_fixtures import FIXTURES, needs_tools  # tests/kernels on sys.path (rootdir conftest)

EXAMPLE = Path(__file__).parents[2] / "loopwise" / "kernels" / "examples" / "cute_gemm"


def _fixture_maker():
    spec = importlib.util.spec_from_file_location("make_cutlass_fixture", FIXTURES / "make_cutlass_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fixture_was_built_from_the_candidates_current_kernel():
    recorded = json.loads((FIXTURES / "cutlass_wgmma_bf16.json").read_text())
    source = _fixture_maker().kernel_source()
    assert hashlib.sha256(source.encode()).hexdigest() == recorded["kernel_sha256"], \
        "the candidate's KERNEL changed: run tests/kernels/profile_fixtures/make_cutlass_fixture.py again"
    assert recorded["arch"] == "sm_90a"


@needs_tools
def test_the_sass_shows_wgmma_on_bf16_with_tma():
    from loopwise.kernels.profile.sass_tools import profile_cubin

    (kernel,) = [k for k in profile_cubin(FIXTURES / "cutlass_wgmma_bf16.cubin").kernels if k.instructions > 100]
    ops = {op.opcode: op for op in kernel.tensor_core}
    assert set(ops) == {"HGMMA"} and ops["HGMMA"].inputs == "BF16" and ops["HGMMA"].accumulator == "F32"
    assert ops["HGMMA"].shape == "64x256x16" and kernel.tensor_core_instructions >= 4
    assert kernel.tma_copies > 0  # TMA loads and stores, not per-thread global accesses
    assert kernel.local_loads == 0 and kernel.local_stores == 0  # no spills


def test_the_candidate_is_a_clean_cutlass_candidate_for_a_bf16_problem():
    """bf16 is the problem's own precision: under the fp32 policy the judge's scan reports the
    candidate's bf16 types as info, while an fp32 problem's candidate using them is rejected."""
    source = (EXAMPLE / "bf16_gemm_cutlass.py").read_text()
    assert "cutlass" in detect_backends(source)
    bf16 = load_problem(str(EXAMPLE / "bf16_gemm_problem.py"))
    fp32 = load_problem(str(Path(__file__).parent / "expert_problems" / "matmul_plain.py"))
    assert static_policy(bf16, "fp32") == "relaxed" and static_policy(fp32, "fp32") == "fp32"
    reasons = scan(source, policy=static_policy(bf16, "fp32"), filename="bf16_gemm_cutlass.py")
    assert [r.severity for r in reasons] == ["info"] and reasons[0].code == "precision_downgrade"
    assert {r.code for r in scan(source, policy=static_policy(fp32, "fp32")) if r.severity == "reject"} == \
        {"precision_downgrade"}


def test_kernels_check_applies_the_problems_precision_when_given_one():
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "loopwise", "kernels", "check", str(EXAMPLE / "bf16_gemm_cutlass.py")]
    alone = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    with_problem = subprocess.run(cmd + ["--problem", str(EXAMPLE / "bf16_gemm_problem.py")], capture_output=True,
                                  text=True, timeout=120)
    assert alone.returncode == 1 and with_problem.returncode == 0, with_problem.stdout[-1500:]
