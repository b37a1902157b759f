"""`loopwise kernels profile` end to end on the CPU: the candidate runs in its own process (Triton
interpreted), a stand-in `ncu` on PATH plays Nsight Compute's part (it runs the profiled command as
the real one does and writes a raw-page CSV), and the report, plot and JSON come out."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from loopwise.errors import UserError
from loopwise.kernels.problem import load_problem
from loopwise.kernels.profile import run as profile_run
from loopwise.kernels.roofline.ceilings import Ceilings

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "loopwise" / "kernels" / "examples"
NCU_CSV = ROOT / "tests" / "kernels" / "profile_fixtures" / "ncu" / "raw_page_transcribed.csv"
H200 = Ceilings(device="NVIDIA H200", bandwidth_gbs=4256, fp32_tflops=51.4, tf32_tflops=420.8,
                bf16_tflops=849.5, l2_bytes=62914560, measured_at="2026-11-29T22:10:00+00:00")

FAKE_NCU = """#!{python}
import subprocess, sys, shutil
args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
assert "--nvtx-include" in args and args[args.index("--nvtx-include") + 1] == "loopwise_profile/", args
cmd = args[args.index("--log-file") + 2:]
rc = subprocess.call(cmd)
shutil.copy({csv!r}, log)
sys.exit(rc)
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    ncu = folder / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, csv=str(NCU_CSV)))
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr("loopwise.kernels.roofline.ceilings.load_or_measure", lambda *a, **k: H200)
    return ncu


@pytest.mark.slow
def test_profile_runs_every_level_and_classifies_what_ncu_measured(fake_ncu, tmp_path):
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    report = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "out", device="cpu",
                                 mode="all", ncu="on")
    names = [k.name for k in report.kernels]
    assert names == ["copy_kernel", "tiny_bias_kernel"]
    copy, tiny = report.kernels
    # 1073.74 MB in 280.06 us against 4256 GB/s: 90% of the memory roof.
    assert copy.kernel_class == "memory_bound" and copy.at_roofline
    assert copy.fraction_of_sol == pytest.approx(1073.74e6 / 4256e9 / 280.06e-6, rel=1e-3)
    assert tiny.kernel_class == "latency_bound"
    assert report.costs_s["run_s"] > 0 and report.costs_s["ncu_s"] > 0
    assert Path(report.artifacts["ncu_csv"]).is_file() and Path(report.artifacts["trace"]).is_file()
    assert Path(report.artifacts["roofline_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(Path(report.artifacts["json"]).read_text())
    assert [k["name"] for k in saved["kernels"]] == names
    # the stand-in ran the real target under the NVTX range: its manifest says the call happened
    manifest = json.loads((tmp_path / "out" / "ncu_run" / "manifest.json").read_text())
    assert manifest["ok"] and manifest["nvtx_range"] == "loopwise_profile"


@pytest.mark.slow
def test_without_trace_one_child_runs_under_ncu_and_the_kernels_come_from_it(fake_ncu, tmp_path):
    """The search loop's profile: no system-level run (one process instead of two); the manifest,
    the cubins and the kernel list come from the run under ncu."""
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    report = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "out", device="cpu",
                                 mode="all", ncu="on", trace=False)
    assert "run_s" not in report.costs_s and report.costs_s["ncu_s"] > 0
    assert not (tmp_path / "out" / "run").exists() and "trace" not in report.artifacts
    assert [k.name for k in report.kernels] == ["copy_kernel", "tiny_bias_kernel"]
    assert report.kernels[0].kernel_class == "memory_bound" and report.trace_headline is None
    again = profile_run.analyze(tmp_path / "out", mode="all", write=False)  # the manifest is found there too
    assert [k.kernel_class for k in again.kernels] == ["memory_bound", "latency_bound"]
    # without ncu there is nothing but the traced run to learn from: it runs whatever trace says
    plain = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "plain", device="cpu",
                                mode="all", ncu="off", trace=False)
    assert plain.costs_s["run_s"] > 0 and "trace" in plain.artifacts


@pytest.mark.slow  # a profile run per mode: about 17 s
def test_modes_gate_the_tools(fake_ncu, tmp_path):
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    raw = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "raw", device="cpu",
                              mode="raw", ncu="on")
    assert raw.findings == [] and all(k.findings == [] for k in raw.kernels)
    proactive = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "pro", device="cpu",
                                    mode="proactive", ncu="on")
    everything = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "all", device="cpu",
                                     mode="all", ncu="on")
    assert {f.tool for f in proactive.findings} <= {f.tool for f in everything.findings}


def test_a_candidate_that_fails_is_one_line_naming_the_fault(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, *args):\n"
                   "        super().__init__()\n    def forward(self, x):\n"
                   "        raise ValueError('no kernel today')\n")
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    with pytest.raises(UserError) as info:
        profile_run.profile(problem, bad, tmp_path / "out", device="cpu", ncu="off")
    assert "ValueError: no kernel today" in str(info.value) and "\n" not in str(info.value)


def test_ncu_on_without_ncu_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(profile_run, "find_ncu", lambda: None)
    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    with pytest.raises(UserError, match="ncu .*not found"):
        profile_run.profile(problem, None, tmp_path / "out", device="cpu", ncu="on")


@pytest.mark.slow
def test_a_profile_folder_is_analyzed_again_without_a_gpu(fake_ncu, tmp_path, monkeypatch):
    """What `kernels profile` left (or a recorded fixture) is read again on a machine with no GPU,
    in another mode, with the ceilings and hints recorded next to the measurements."""
    from typer.testing import CliRunner

    from loopwise.cli import app

    problem = load_problem(str(EXAMPLES / "scaled_gelu_problem.py"))
    first = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "out", device="cpu",
                                mode="raw", ncu="on")
    assert first.findings == []
    live_all = profile_run.profile(problem, EXAMPLES / "scaled_gelu_triton.py", tmp_path / "live", device="cpu",
                                   mode="all", ncu="on")
    monkeypatch.setattr("loopwise.kernels.roofline.ceilings.load_or_measure",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured instead of read")))
    again = profile_run.analyze(tmp_path / "out", mode="all", write=False)
    assert [k.kernel_class for k in again.kernels] == ["memory_bound", "latency_bound"]
    assert [(f.tool, f.guidance) for f in again.findings] == [(f.tool, f.guidance) for f in live_all.findings]
    assert [k.model_dump() for k in again.kernels] == [k.model_dump() for k in live_all.kernels]
    result = CliRunner().invoke(app, ["kernels", "profile", "--from", str(tmp_path / "out"), "--mode", "all", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kernels"][0]["kernel_class"] == "memory_bound"
    import subprocess

    bad = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "profile", "--from", str(tmp_path / "nothing")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a folder" in bad.stderr and "Traceback" not in bad.stderr


def test_extensions_are_found_in_the_process_memory_map():
    """torch loads a load_inline extension without entering it in sys.modules: the profiler finds
    its shared object through the memory map (here: torch's own libraries under its lib folder)."""
    from pathlib import Path

    import torch

    from loopwise.kernels.profile.target import loaded_shared_objects

    lib = Path(torch.__file__).parent / "lib"
    found = loaded_shared_objects([str(lib)])
    assert any(Path(p).name.startswith("libtorch") for p in found)
    assert all(p.startswith(str(lib.resolve())) for p in found)
    assert loaded_shared_objects([str(lib)], maps=Path("/nonexistent/maps")) == []
